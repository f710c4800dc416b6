"""Anthropic Messages answers → unified stream events (an Anthropic or Anthropic-compatible
upstream: Kimi's, DeepSeek's, GLM's ``…/anthropic`` endpoints).

Theory of operation
-------------------
``MessagesStreamDecoder.feed(obj)`` takes one SSE event's JSON object and returns the
unified events it completes (``transformers/events.py``); ``end()`` closes a stream that
stopped early; ``decode_message(obj, ctx)`` replays a whole message object as the events its
stream would have given.  Groundwork of Messages as an upstream protocol: the Bridge does not
route to Messages upstreams yet.

==============================================  ===========================================
Messages event                                  unified events
==============================================  ===========================================
``message_start``                               ``Start`` (id, model); its usage kept
``content_block_start`` ``text``                (a text that comes with it: ``Text``)
``content_block_start`` ``thinking``            (its text: ``Reasoning``)
``content_block_start`` ``redacted_thinking``   ``ReasoningEnd`` ``redacted``, the data as
                                                ``encrypted_content`` (only Anthropic reads it)
``content_block_start`` ``tool_use``            ``ToolCall`` with ``call_id`` (as
                                                ``ids.from_anthropic_id`` gives it back) and
                                                ``name``;
                                                a non-empty ``input`` there is its argument
                                                text
``content_block_delta`` ``text_delta``          ``Text``
``content_block_delta`` ``thinking_delta``      ``Reasoning``
``content_block_delta`` ``signature_delta``     kept for the block's ``ReasoningEnd``
``content_block_delta`` ``input_json_delta``    ``ToolCall`` (the next piece)
``content_block_stop``                          ``ReasoningEnd`` (the signature as
                                                ``encrypted_content``) / ``ToolCallEnd``
``message_delta``                               its ``stop_reason`` and usage kept
``message_stop``                                ``Usage`` then ``Finish`` (table below)
``error``                                       ``Finish`` failed with the upstream's error
                                                (its ``type`` as a code: ``ERROR_CODES``)
``ping``, anything else                         nothing
==============================================  ===========================================

A delta for a block never started is taken as starting it (the repair docs/rules.md §2 describes
for Responses items, on this wire).

==========================  =============================================
``stop_reason``             ``Finish``
==========================  =============================================
``end_turn``, ``tool_use``,  completed
``stop_sequence``,
``pause_turn``
``max_tokens``,             incomplete ``max_output_tokens``
``model_context_window_``
``exceeded``
``refusal``                 incomplete ``content_filter``
==========================  =============================================

The stop reason as the upstream said it (and its ``stop_sequence``) also rides in the
``Finish``'s ``extra``, for a Messages client (``messages_encode.py``).

Usage: Anthropic's ``input_tokens`` is the uncached part; the unified shape counts every
input token, so ``input_tokens`` = uncached + ``cache_read_input_tokens`` +
``cache_creation_input_tokens``, the two also in ``input_tokens_details``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from .context import Ctx
from .errors import stream_error
from .events import Event, Finish, Reasoning, ReasoningEnd, Start, Text, ToolCall, ToolCallEnd, Usage
from .ids import from_anthropic_id

__all__ = ["MessagesStreamDecoder", "decode_message", "usage_of"]

_FINISH: dict[str, tuple[str, str | None]] = {
    "end_turn": ("completed", None),
    "tool_use": ("completed", None),
    "stop_sequence": ("completed", None),
    "pause_turn": ("completed", None),
    "max_tokens": ("incomplete", "max_output_tokens"),
    "model_context_window_exceeded": ("incomplete", "max_output_tokens"),
    "refusal": ("incomplete", "content_filter"),
}


# an Anthropic error event's error.type → the failure's code (providers/errors.py's words)
ERROR_CODES = {
    "overloaded_error": "server_is_overloaded",
    "rate_limit_error": "rate_limit_exceeded",
    "api_error": "server_error",
    "invalid_request_error": "upstream_bad_request",
    "request_too_large": "request_too_large",
    "authentication_error": "upstream_auth_failed",
    "permission_error": "upstream_forbidden",
    "not_found_error": "model_not_found",
}


class _Unwritable(Exception):
    """Upstream data that cannot be passed on (caught inside this module, never escapes)."""


def _json(obj: Any) -> str:
    try:
        return orjson.dumps(obj).decode()
    except orjson.JSONEncodeError:  # nested deeper than JSON is written
        raise _Unwritable("the upstream sent a tool input nested too deep to pass on") from None


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def usage_of(u: dict[str, Any]) -> dict[str, Any]:
    """Anthropic usage in the unified (Responses) shape."""
    fresh, read, write = (
        _int(u.get("input_tokens")),
        _int(u.get("cache_read_input_tokens")),
        _int(u.get("cache_creation_input_tokens")),
    )
    inp, out = fresh + read + write, _int(u.get("output_tokens"))
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": read, "cache_write_tokens": write},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": inp + out,
    }


@dataclass(slots=True)
class _Block:
    kind: str
    call: int = -1  # a tool_use block's call index
    signature: str | None = None
    args: list[str] | None = None
    redacted: bool = False


class MessagesStreamDecoder:
    """One Messages stream (see the module docstring)."""

    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.started = False
        self.finished = False
        self.blocks: dict[int, _Block] = {}
        self.calls = 0
        self.usage: dict[str, Any] = {}
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None

    # the Bridge's shortcuts, which this decoder does not take (yet)
    plain_text = False
    plain_reasoning = False
    text_open = False

    def text(self, obj: dict[str, Any]) -> None:
        return None

    def reasoning(self, obj: dict[str, Any]) -> None:
        return None

    def args(self, obj: dict[str, Any]) -> None:
        return None

    def feed(self, obj: dict[str, Any]) -> list[Event]:
        if self.finished:
            return []
        out: list[Event] = []
        try:
            self._feed(out, obj)
        except _Unwritable as e:  # rejected as data: the stream fails here
            self.finished = True
            out.append(Finish("failed", error=stream_error("upstream_bad_event", str(e))))
        return out

    def _feed(self, out: list[Event], obj: dict[str, Any]) -> None:
        kind = obj.get("type")
        if not self.started and kind not in ("ping", "error"):
            self._start(out, obj.get("message") if kind == "message_start" else None)
        if kind == "content_block_start":
            self._block_start(out, obj)
        elif kind == "content_block_delta":
            self._delta(out, obj)
        elif kind == "content_block_stop":
            self._stop(out, obj.get("index"))
        elif kind == "message_delta":
            delta = obj.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self.stop_reason = delta["stop_reason"]
            if isinstance(delta, dict) and isinstance(delta.get("stop_sequence"), str):
                self.stop_sequence = delta["stop_sequence"]
            if isinstance(obj.get("usage"), dict):
                self.usage.update(obj["usage"])
        elif kind == "message_stop":
            self._finish(out)
        elif kind == "error":
            given = obj.get("error")
            err: dict[str, Any] = given if isinstance(given, dict) else {}
            self.finished = True
            code = ERROR_CODES.get(str(err.get("type")), "upstream_error")
            message = err.get("message")
            text = message if isinstance(message, str) and message else "upstream error"
            out.append(Finish("failed", error=stream_error(code, text)))

    def end(self) -> list[Event]:
        if self.finished:
            return []
        self.finished = True
        out: list[Event] = []
        if not self.started:
            self._start(out, None)
        out.append(
            Finish(
                "failed", error=stream_error("upstream_stream_truncated", "upstream stream ended without message_stop")
            )
        )
        return out

    # -- the events -----------------------------------------------------------------------

    def _start(self, out: list[Event], msg: Any) -> None:
        self.started = True
        msg = msg if isinstance(msg, dict) else {}
        if isinstance(msg.get("usage"), dict):
            self.usage.update(msg["usage"])
        rid, model = msg.get("id"), msg.get("model")
        out.append(
            Start(
                response_id=rid if isinstance(rid, str) else None,
                model=model if isinstance(model, str) else None,
                usage=usage_of(self.usage) if self.usage else None,  # the input, known at the start
            )
        )

    def _block_start(self, out: list[Event], obj: dict[str, Any]) -> None:
        i, block = obj.get("index"), obj.get("content_block")
        if not isinstance(i, int) or not isinstance(block, dict):
            self.ctx.repaired("sse_junk_line_skipped")
            return
        kind = block.get("type")
        if kind == "tool_use":
            b = self.blocks[i] = _Block("tool_use", call=self.calls, args=[])
            self.calls += 1
            cid, name = block.get("id"), block.get("name")
            out.append(
                ToolCall(
                    b.call,
                    "",
                    from_anthropic_id(cid) if isinstance(cid, str) else None,
                    name if isinstance(name, str) else None,
                )
            )
            given = block.get("input")
            if isinstance(given, dict) and given:  # (a whole input at the start: its text)
                text = _json(given)
                b.args.append(text)  # type: ignore[union-attr]
                out.append(ToolCall(b.call, text))
        elif kind in ("thinking", "redacted_thinking"):
            self.blocks[i] = _Block("thinking")
            if kind == "redacted_thinking" and isinstance(block.get("data"), str):
                self.blocks[i].signature = block["data"]
                self.blocks[i].redacted = True
            elif isinstance(block.get("thinking"), str) and block["thinking"]:
                out.append(Reasoning(block["thinking"]))
        else:
            self.blocks[i] = _Block("text")
            if isinstance(block.get("text"), str) and block["text"]:
                out.append(Text(block["text"]))

    def _delta(self, out: list[Event], obj: dict[str, Any]) -> None:
        i, delta = obj.get("index"), obj.get("delta")
        if not isinstance(i, int) or not isinstance(delta, dict):
            self.ctx.repaired("sse_junk_line_skipped")
            return
        kind = delta.get("type")
        b = self.blocks.get(i)
        if b is None:  # a delta for a block never started: taken as starting it
            start = {"text_delta": {"type": "text"}, "thinking_delta": {"type": "thinking"},
                     "signature_delta": {"type": "thinking"}, "input_json_delta": {"type": "tool_use"}}  # fmt: skip
            self._block_start(out, {"index": i, "content_block": start.get(str(kind), {"type": "text"})})
            if kind == "input_json_delta":
                self.ctx.repaired("late_tool_identity")  # (a call with no identity yet)
            else:
                self.ctx.repaired("sse_junk_line_skipped")
            b = self.blocks[i]
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            out.append(Text(delta["text"]))
        elif kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
            out.append(Reasoning(delta["thinking"]))
        elif kind == "signature_delta" and isinstance(delta.get("signature"), str):
            b.signature = (b.signature or "") + delta["signature"]
        elif kind == "input_json_delta" and isinstance(delta.get("partial_json"), str) and b.kind == "tool_use":
            if delta["partial_json"]:
                b.args.append(delta["partial_json"])  # type: ignore[union-attr]
                out.append(ToolCall(b.call, delta["partial_json"]))

    def _stop(self, out: list[Event], i: Any) -> None:
        b = self.blocks.pop(i, None) if isinstance(i, int) else None
        if b is None:
            return
        if b.kind == "thinking":
            out.append(ReasoningEnd(encrypted_content=b.signature, redacted=b.redacted))
        elif b.kind == "tool_use":
            text = "".join(b.args or ())
            out.append(ToolCallEnd(b.call, text or "{}"))

    def _finish(self, out: list[Event]) -> None:
        for i in sorted(self.blocks):  # blocks the upstream never stopped
            self._stop(out, i)
        self.finished = True
        out.append(Usage(usage_of(self.usage)))
        status, reason = _FINISH.get(self.stop_reason or "end_turn", ("completed", None))
        # the upstream's own stop reason rides along for a Messages client (pause_turn,
        # stop_sequence and its sequence have no other protocol's form)
        native = {"stop_reason": self.stop_reason or "end_turn", "stop_sequence": self.stop_sequence}
        out.append(Finish(status, reason=reason, extra=native))  # type: ignore[arg-type]


def decode_message(obj: dict[str, Any], ctx: Ctx) -> list[Event]:
    """A whole Messages answer object as the events of its stream."""
    dec = MessagesStreamDecoder(ctx)
    out = dec.feed({"type": "message_start", "message": {k: v for k, v in obj.items() if k != "content"}})
    for i, block in enumerate(obj.get("content") or () if isinstance(obj.get("content"), list) else ()):
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "tool_use":
            given = block.get("input")
            try:
                text = _json(given if isinstance(given, dict) else {})
            except _Unwritable as e:
                return [*out, Finish("failed", error=stream_error("upstream_bad_event", str(e)))]
            out += dec.feed({"type": "content_block_start", "index": i, "content_block": {**block, "input": {}}})
            out += dec.feed(
                {"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": text}}
            )
        elif kind == "thinking":
            out += dec.feed(
                {
                    "type": "content_block_start",
                    "index": i,
                    "content_block": {"type": "thinking", "thinking": block.get("thinking") or ""},
                }
            )
            if isinstance(block.get("signature"), str):
                out += dec.feed(
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "signature_delta", "signature": block["signature"]},
                    }
                )
        else:
            out += dec.feed({"type": "content_block_start", "index": i, "content_block": block})
        out += dec.feed({"type": "content_block_stop", "index": i})
    out += dec.feed(
        {
            "type": "message_delta",
            "delta": {"stop_reason": obj.get("stop_reason"), "stop_sequence": obj.get("stop_sequence")},
            "usage": obj.get("usage") or {},
        }
    )
    out += dec.feed({"type": "message_stop"})
    return out
