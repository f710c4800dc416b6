"""The protocols as rows of data: what the Bridge needs of each, on either side.

Theory of operation
-------------------
Chat Completions, Responses, Anthropic Messages and Gemini's own API are peers.  What the
Bridge (``transformers/bridge.py``) does with a protocol is read off its row of ``SPECS``,
never off a branch on its name:

=================  ===========================================================================
field              what it is
=================  ===========================================================================
``decoder``        the upstream side: a ``StreamDecoder`` over the upstream's parsed events
``decode_object``  the upstream side: a non-streamed answer object as the events it stands for
``encoder``        the client side: a ``StreamEncoder`` writing the client's events
``whole``          the client side: a whole decoded answer as the client's answer object,
                   with the error it carries and the terminal it amounts to (``Whole``)
``bare_sse``       the client side: SSE as bare ``data:`` lines (Chat, Gemini); otherwise each
                   event has its ``event:`` line (Responses, Messages)
``sse_done``       the client side: the stream ends with ``data: [DONE]`` (Chat)
``items``          the client side: its input items and compaction items go through
                   ``items.py`` and ``compaction.py``, and its answer echoes the request's
                   fields, the protocol's own ones only toward an upstream of the same
                   protocol (Responses)
``usage_opt_in``   the client side: usage only when ``stream_options.include_usage`` asks (Chat)
``lanes``          a fast path, upstream side: chunks read off their bytes by the Chat lanes
                   (``chat_text_lane.py``), and passed through as they came to a client of
                   the same protocol (``passthrough.py``) (Chat)
``runs``           a fast path, upstream side: runs of text deltas a read at a time
                   (``text_runs.py``) (Responses)
=================  ===========================================================================

``StreamDecoder`` and ``StreamEncoder`` are the interfaces every decoder and encoder keeps
(``typing.Protocol``: checked by mypy where the Bridge calls them).  A protocol's fast paths
(the Chat lanes, the Responses text runs) stay the Bridge's own capabilities, each switched
on by the row it serves.

Adding a protocol is a module per machine and a row here, plus its rows in the Bridge's
``DIRECTIONS`` (how a body of it becomes the hub's, and the hub's becomes it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .chat_decode import ChatStreamDecoder, decode_chat_completion
from .chat_encode import ChatStreamEncoder, encode_chat_completion
from .context import Ctx
from .events import Event, Finish
from .gemini_decode import GeminiStreamDecoder, decode_gemini
from .gemini_encode import GeminiEncoder
from .masking import SecretMask
from .messages_decode import MessagesStreamDecoder, decode_message
from .messages_encode import MessagesEncoder
from .responses_decode import ResponsesStreamDecoder, decode_response
from .responses_encode import ResponsesStreamEncoder, encode_response

__all__ = ["BAD", "SPECS", "EncoderOptions", "ProtocolSpec", "StreamDecoder", "StreamEncoder", "Whole", "chat_status"]

# the error codes of an answer the proxy could not process (rather than the upstream's own failure)
BAD = frozenset({"upstream_bad_response", "upstream_bad_event"})


class StreamDecoder(Protocol):
    """Upstream events (one parsed SSE ``data:`` object at a time) → unified events."""

    def feed(self, chunk: dict[str, Any]) -> list[Event]: ...

    def end(self) -> list[Event]: ...


class StreamEncoder(Protocol):
    """Unified events → the client protocol's events (dicts the Bridge frames)."""

    def feed(self, ev: Event) -> list[dict[str, Any]]: ...

    def end(self) -> list[dict[str, Any]]: ...

    def abort(self, error: dict[str, Any]) -> list[dict[str, Any]]: ...


@dataclass(frozen=True, slots=True)
class EncoderOptions:
    include_usage: bool = True  # Chat: the usage chunk (``stream_options.include_usage``)
    incomplete_as_completed: bool = False  # Responses: an incomplete answer reported completed
    echo: dict[str, Any] | None = None  # Responses: the request fields echoed on the response


@dataclass(frozen=True, slots=True)
class Whole:
    result: dict[str, Any]  # the client's answer object
    error: dict[str, Any] | None  # the error it fails with (already masked), else None
    terminal: str  # completed | incomplete | failed


def chat_status(result: dict[str, Any]) -> str:
    choices = result.get("choices") or [{}]
    return "incomplete" if choices[0].get("finish_reason") in ("length", "content_filter") else "completed"


def _failed(events: list[Event], mask: SecretMask) -> dict[str, Any] | None:
    last = events[-1] if events else None
    err = last.error if isinstance(last, Finish) and last.status == "failed" else None
    return mask.error(err) if err is not None else None


def _whole_chat(events: list[Event], ctx: Ctx, o: EncoderOptions, mask: SecretMask) -> Whole:
    result = encode_chat_completion(events, ctx)
    err = result.get("error")
    return Whole(result, err, "failed" if err else chat_status(result))


def _whole_responses(events: list[Event], ctx: Ctx, o: EncoderOptions, mask: SecretMask) -> Whole:
    result = encode_response(events, ctx, incomplete_as_completed=o.incomplete_as_completed, request_echo=o.echo)
    status = result.get("status")
    terminal = status if status in ("completed", "incomplete", "failed") else "completed"
    err = result.get("error") if status == "failed" else None
    if not (isinstance(err, dict) and err.get("code") in BAD):
        err = None  # an upstream's own failure is a failed response object, as it came
        if isinstance(result.get("error"), dict):
            result["error"] = mask.error(result["error"])
    return Whole(result, err, terminal)


def _whole_messages(events: list[Event], ctx: Ctx, o: EncoderOptions, mask: SecretMask) -> Whole:
    enc = MessagesEncoder(ctx)
    for ev in events:
        enc.feed(ev)
    result = enc.message()
    err = _failed(events, mask)
    return Whole(
        result, err, "failed" if err else ("incomplete" if result["stop_reason"] == "max_tokens" else "completed")
    )


def _whole_gemini(events: list[Event], ctx: Ctx, o: EncoderOptions, mask: SecretMask) -> Whole:
    enc = GeminiEncoder(ctx)
    for ev in events:
        enc.feed(ev)
    result = enc.answer()
    err = _failed(events, mask)
    done = enc.finish_reason in (None, "STOP")
    return Whole(result, err, "failed" if err else ("completed" if done else "incomplete"))


@dataclass(frozen=True, slots=True)
class ProtocolSpec:
    name: str
    decoder: Callable[[Ctx], Any]
    decode_object: Callable[[dict[str, Any], Ctx], list[Event]]
    encoder: Callable[[Ctx, EncoderOptions], Any]
    whole: Callable[[list[Event], Ctx, EncoderOptions, SecretMask], Whole]
    bare_sse: bool
    sse_done: bool = False
    items: bool = False
    usage_opt_in: bool = False
    lanes: bool = False
    runs: bool = False


SPECS: dict[str, ProtocolSpec] = {
    s.name: s
    for s in (
        ProtocolSpec(
            "chat",
            ChatStreamDecoder,
            decode_chat_completion,
            lambda ctx, o: ChatStreamEncoder(ctx, include_usage=o.include_usage),
            _whole_chat,
            bare_sse=True,
            sse_done=True,
            usage_opt_in=True,
            lanes=True,
        ),
        ProtocolSpec(
            "responses",
            ResponsesStreamDecoder,
            decode_response,
            lambda ctx, o: ResponsesStreamEncoder(
                ctx, incomplete_as_completed=o.incomplete_as_completed, request_echo=o.echo
            ),
            _whole_responses,
            bare_sse=False,
            items=True,
            runs=True,
        ),
        ProtocolSpec(
            "messages",
            MessagesStreamDecoder,
            decode_message,
            lambda ctx, o: MessagesEncoder(ctx),
            _whole_messages,
            bare_sse=False,
        ),
        ProtocolSpec(
            "gemini",
            GeminiStreamDecoder,
            decode_gemini,
            lambda ctx, o: GeminiEncoder(ctx),
            _whole_gemini,
            bare_sse=True,
        ),
    )
}
