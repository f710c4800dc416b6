"""Token counts: ``POST /v1/messages/count_tokens`` (Anthropic's count of a Messages
request) and Gemini's ``:countTokens``, each its row's ``count`` (``transformers/token_count.py``).

Claude Code asks it before large reads and compacts by it, so an undercount makes it
compact too late (the next request overflows the context window), an overcount a little
early.  The answer comes from the model's upstream when it is a Messages endpoint that
serves the route (Anthropic does: ``POST /v1/messages/count_tokens``, the body as for
``/v1/messages`` less ``max_tokens``/``stream``); anything else — a Chat or Responses
upstream, an endpoint without the route, an upstream that fails or takes longer than
``_TIMEOUT`` — gets the local estimate: the JSON bytes of ``system``, ``messages`` and
``tools`` over 3.  That counts JSON's own syntax (keys, quotes, escapes) as text and a
token as 3 bytes, so it overcounts.  Measured on Claude Code 2.1.332's two requests of
tests/fixtures/claude_code_messages_request.json: 48,415 and 48,878 JSON bytes, of which
the text fields (system and message text, tool descriptions, tool results) are 42,227 and
42,353 (the JSON is 1.15× its text); the estimate says 16,139 and 16,293 tokens.  English
prose and code run at about 3.5 to 4 bytes a token, which puts those texts at 10,600 to
12,100 tokens: the estimate is some 1.35 to 1.5 times the count (no tokenizer of
Anthropic's is available offline to measure it exactly).  Claude Code compacts a little
early on it, never too late.  Gemini's
``:countTokens`` is answered alike: Gemini's own count on a Gemini upstream, else the same
estimate of its ``contents``, ``systemInstruction`` and ``tools``.  The answer's
``x-switchboard-token-count`` header says which it is (``upstream`` or ``estimate``).
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from app.logs import log
from providers.upstream import Route
from transformers.context import Ctx
from transformers.protocols import ProtocolSpec
from transformers.token_count import messages_estimate as estimate

__all__ = ["count", "estimate"]

_TIMEOUT = 5.0  # seconds: Claude Code waits for the answer before it goes on


async def count(spec: ProtocolSpec, route: Route | None, body: dict[str, Any], request_id: str) -> tuple[int, str]:
    """(tokens, ``upstream`` | ``estimate``) for a counted body of ``spec``'s clients (its
    row's ``count``): the upstream's own count when the model's upstream speaks the protocol,
    else the estimate.  Raises ``RequestError`` when the body cannot be sent on."""
    c = spec.count
    assert c is not None
    prov = route.provider if route is not None else None
    if route is None or prov is None or spec.name not in prov.cfg.protocols or prov.profile == "demo":
        return c.estimate(body), "estimate"
    ctx = Ctx(quirks=route.quirks, upstream_model=route.upstream_model, public_model=route.public_model)
    sent = c.request(body, ctx)
    url = c.url(prov.url(spec.name, route.upstream_model))
    got = await _upstream_count(prov, spec.name, url, sent, c.field, request_id)
    return (got, "upstream") if got is not None else (c.estimate(body), "estimate")


async def _upstream_count(
    prov: Any, protocol: str, url: str, sent: dict[str, Any], field: str, request_id: str
) -> int | None:
    """The upstream's own count (its answer's ``field``), or None (logged) when it gave none."""
    try:
        resp = await prov.client.post(
            url,
            content=orjson.dumps(sent),
            headers={**prov.headers_for(protocol), "content-type": "application/json"},
            params=prov.cfg.query or None,
            timeout=_TIMEOUT,
        )
        got = resp.json().get(field) if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError) as e:
        log.info("count_tokens_estimated", request_id=request_id, provider=prov.name, error=type(e).__name__)
        return None
    if isinstance(got, int) and not isinstance(got, bool) and got >= 0:
        return got
    log.info("count_tokens_estimated", request_id=request_id, provider=prov.name, status=resp.status_code)
    return None
