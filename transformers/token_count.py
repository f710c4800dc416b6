"""Token count requests: what a protocol's count route reads, estimates and asks upstream.

Theory of operation
-------------------
Two clients ask the proxy to count a request's tokens before they send it: Claude Code
(``POST /v1/messages/count_tokens``) and Gemini CLI (``POST /v1beta/models/{model}:countTokens``).
Each protocol's row names its count route and these pieces (``protocols.TokenCount``); the
edge (``app/main.py``, ``app/tokens.py``) does the I/O.  The answer is the upstream's own
count when the model's upstream speaks the client's protocol, else the local estimate: the
JSON bytes of what the model reads over 3, an overcount (``app/tokens.py`` says by how much).

=============  ===========================  =================================================
protocol       counted body                 the upstream's count request
=============  ===========================  =================================================
Messages       the body (``messages`` a     the body as ``/v1/messages`` would send it, less
               non-empty array)             ``max_tokens`` and ``stream``, to the path's
                                            ``/count_tokens``; the answer's ``input_tokens``
Gemini         ``generateContentRequest``   ``{"generateContentRequest": {"model":
               when it is an object, else   "models/<upstream model>", ...}}`` to the
               the body                     model's ``:countTokens``; the answer's
                                            ``totalTokens``
=============  ===========================  =================================================

Claude Code's billing line is not counted: only Anthropic reads it.
"""

from __future__ import annotations

from typing import Any

import orjson

from .context import Ctx
from .errors import RequestError
from .request_messages import prepare_messages, without_billing_header

__all__ = [
    "gemini_body",
    "gemini_estimate",
    "gemini_request",
    "gemini_url",
    "messages_body",
    "messages_estimate",
    "messages_request",
    "messages_url",
]

_MESSAGES_COUNTED = ("system", "messages", "tools")
_GEMINI_COUNTED = ("systemInstruction", "contents", "tools")


def _over_3(body: dict[str, Any], keys: tuple[str, ...]) -> int:
    counted = {k: body[k] for k in keys if k in body}
    return -(-len(orjson.dumps(counted)) // 3)


def messages_body(body: Any) -> dict[str, Any]:
    """A Messages count request's body, checked as ``/v1/messages`` checks its messages."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise RequestError("'messages' must be an array", param="messages")
    if not body["messages"]:  # as /v1/messages, and as Anthropic answers it
        raise RequestError("messages: at least one message is required", param="messages", code="invalid_value")
    return body


def messages_estimate(body: dict[str, Any]) -> int:
    """The JSON bytes of ``system``, ``messages`` and ``tools`` over 3."""
    return _over_3(without_billing_header(body) or body, _MESSAGES_COUNTED)


def messages_request(body: dict[str, Any], ctx: Ctx) -> dict[str, Any]:
    sent = prepare_messages(body, ctx)
    return {k: v for k, v in sent.items() if k not in ("max_tokens", "stream")}


def messages_url(url: str) -> str:
    """The count URL of a Messages endpoint's URL."""
    return url + "/count_tokens"


def gemini_body(body: Any) -> dict[str, Any]:
    """A ``countTokens`` body's counted request: its ``generateContentRequest`` (the other
    form of the request) when it has one."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object", code="invalid_json")
    inner = body.get("generateContentRequest")
    return inner if isinstance(inner, dict) else body


def gemini_estimate(body: dict[str, Any]) -> int:
    """The JSON bytes of ``systemInstruction``, ``contents`` and ``tools`` over 3."""
    return _over_3(body, _GEMINI_COUNTED)


def gemini_request(body: dict[str, Any], ctx: Ctx) -> dict[str, Any]:
    inner = {k: body[k] for k in _GEMINI_COUNTED if k in body}
    return {"generateContentRequest": {"model": f"models/{ctx.upstream_model}", **inner}}


def gemini_url(url: str) -> str:
    """The ``:countTokens`` URL of a model's ``:generateContent`` URL."""
    return url.rsplit(":", 1)[0] + ":countTokens"
