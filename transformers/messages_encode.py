"""Unified stream events → an Anthropic Messages answer (SSE events, or the whole message).

Theory of operation
-------------------
The third client protocol's encoder: what Claude Code and Kimi Code's ``anthropic``
provider read (the Bridge's ``messages`` rows).  ``MessagesEncoder.feed(event)`` returns the Messages events that event
completes (dicts; ``sse()`` frames them), ``message()`` the whole message object of a
non-streamed answer.  The rules it holds, whatever order the upstream's pieces come in:

* **One terminal.**  ``message_start`` first and once; ``message_delta`` (the stop reason and
  the usage) then ``message_stop`` last and once; a failed answer ends with one ``error``
  event instead.
* **One block open at a time.**  Every block goes ``content_block_start`` → its deltas →
  ``content_block_stop``; a delta only ever for the block that is open; a block is never
  started twice (Claude Code fails with "Content block not found" otherwise).  Block
  indexes count up from 0 in the order blocks start.
* **Tool calls.**  A ``tool_use`` block starts once its call's ``id`` and ``name`` are known
  (docs/rules.md §3: an upstream may name a call late); its ``content_block_start.input`` is ``{}``
  and the arguments stream as ``input_json_delta`` pieces as they arrive.  While another
  block is open, a call's pieces wait for it (parallel calls interleaved by a Chat upstream
  come out one block after the other), as text or reasoning that arrives while a call's
  block is open waits for that call's end; nothing is dropped, nothing reordered within a
  block.  The concatenation of a block's ``partial_json`` is the call's argument text, byte
  for byte, with the done-reconciled suffix (``ToolCallEnd.arguments``) added when the
  deltas fell short.  A call that never got a name by the end cannot be a ``tool_use``
  block: dropped, as the other encoders do (``tool_call_unnamed_dropped``).
* **Thinking.**  Reasoning text is a ``thinking`` block (``thinking_delta``), closed with a
  ``signature_delta``: the upstream's own signature when it gave one (an Anthropic
  upstream's), else the text sealed in the proxy's reasoning envelope with the request's
  key, so that the proxy can recognise the block when the client sends it back.
* **Thought signatures** (Gemini's, ``ToolCall.signature``) are sealed with their call id
  into the signature of the thinking block open when the call's block starts, else of an
  empty thinking block just before it (transformers/thought_signatures.py).
* **Redacted thinking** (an Anthropic upstream's ``redacted_thinking``: ``ReasoningEnd``
  ``redacted``) is a ``redacted_thinking`` block with its data, as it came.
* **Tool ids** a Messages client may not accept (Kimi's ``functions.Bash:0``) are mapped
  reversibly (``ids.to_anthropic_id``; the Messages → Chat translator maps them back).
* **stop_reason.**

  ====================================  ===================
  ``Finish``                            ``stop_reason``
  ====================================  ===================
  completed, a ``tool_use`` block sent  ``tool_use``
  completed                             ``end_turn``
  incomplete ``max_output_tokens``      ``max_tokens``
  incomplete ``content_filter``         ``refusal``
  incomplete, any other reason          ``max_tokens``
  failed                                (an ``error`` event)
  ====================================  ===================

  A Messages upstream's own stop reason (``Finish.extra``: ``pause_turn``,
  ``stop_sequence`` with its sequence, ``model_context_window_exceeded``…) goes as it came;
  ``end_turn`` after a ``tool_use`` block is still ``tool_use``.

* **Usage** (the unified Responses shape): ``input_tokens`` less the cached ones,
  ``cache_read_input_tokens``, ``cache_creation_input_tokens``, ``output_tokens``.

A refusal's text is a text block (its stop reason says the rest); a ``Passthrough`` item (a
hosted call of a Responses upstream) has no Messages form and is skipped, as the Chat
encoder skips it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import orjson

from . import envelope
from .context import Ctx
from .events import (
    Event,
    Finish,
    Passthrough,
    Reasoning,
    ReasoningEnd,
    Refusal,
    Start,
    Text,
    ToolCall,
    ToolCallEnd,
    Usage,
)
from .ids import random_hex, to_anthropic_id
from .whole_events import WholeEvents

__all__ = ["MessagesEncoder", "STOP_REASONS", "sse"]

# (Finish status, incomplete reason) → stop_reason; a completed turn with a tool_use block
# sent is "tool_use" whatever this says
STOP_REASONS: dict[tuple[str, str | None], str] = {
    ("completed", None): "end_turn",
    ("incomplete", "max_output_tokens"): "max_tokens",
    ("incomplete", "content_filter"): "refusal",
}
# a Messages upstream's stop reasons, passed to a Messages client as they came (Finish.extra)
NATIVE_STOPS = frozenset(
    {"end_turn", "tool_use", "max_tokens", "stop_sequence", "pause_turn", "refusal", "model_context_window_exceeded"}
)
# a failure's code → Anthropic's error type (Claude Code waits and retries overloaded_error)
ERROR_KINDS = {
    "server_is_overloaded": "overloaded_error",
    "rate_limit_exceeded": "rate_limit_error",
    "context_length_exceeded": "invalid_request_error",
}
ERROR_TYPES = {"server_error": "api_error", "invalid_request_error": "invalid_request_error"}


def sse(events: list[dict[str, Any]]) -> bytes:
    """Messages events as SSE: an ``event:`` line with the type, then the ``data:`` line."""
    return b"".join(b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events)


@dataclass(slots=True)
class _Call:
    call_id: str | None = None
    name: str | None = None
    parts: list[str] = field(default_factory=list)  # argument text not yet sent
    sent: list[str] = field(default_factory=list)  # argument text sent (or kept, non-streamed)
    block: int | None = None  # its block's index once started
    ended: bool = False
    final: str | None = None  # the done-reconciled argument text
    sig: str | None = None  # the upstream's thought signature (Gemini), not yet sealed out


class MessagesEncoder(WholeEvents):
    """One answer's Messages events (see the module docstring)."""

    def __init__(self, ctx: Ctx, *, model: str | None = None, message_id: str | None = None) -> None:
        self.ctx = ctx
        self.model = model or ctx.public_model
        self.id = message_id or "msg_" + random_hex()
        self.started = False
        self.finished = False
        self.blocks = 0  # blocks started so far
        self.open: tuple[str, int | None] | None = None  # (kind, call index) of the open block
        self.calls: dict[int, _Call] = {}
        self.order: list[int] = []  # call indexes in the order they appeared
        self.held: list[Event] = []  # text/reasoning that came while a call's block was open
        self.signature: str | None = None  # the upstream's own, for the open thinking block
        # thought signatures (call id → Gemini's) sealed into the open thinking block's signature
        self.sigs: dict[str, str] | None = None
        self.tool_used = False
        self.usage: dict[str, Any] = {"input_tokens": 0, "output_tokens": 0}
        self.content: list[dict[str, Any]] = []  # the whole message's blocks (non-streamed)
        # each block's text pieces (text, thinking), joined once by message(): appending to a
        # string per delta would copy the whole text each time
        self.pieces: list[list[str]] = []
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None
        self.error: dict[str, Any] | None = None

    # -- what the Bridge asks of an encoder (its shortcuts: none, WholeEvents) ------------------

    @property
    def response(self) -> dict[str, Any]:
        return self.message()

    def heartbeat(self) -> list[dict[str, Any]]:
        """During a long upstream silence: Anthropic's own keep-alive event."""
        return [{"type": "ping"}] if self.started and not self.finished else []

    def abort(self, err: dict[str, Any]) -> list[dict[str, Any]]:
        """The failure terminal when ``feed`` itself failed (the Bridge's guard)."""
        if self.finished:
            return []
        self.finished = True
        self.error = {"type": "error", "error": {"type": "api_error", "message": str(err.get("message"))}}
        return [self.error]

    # -- the way in -------------------------------------------------------------------------

    def feed(self, ev: Event) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.finished:
            return out
        if not self.started and not isinstance(ev, Start):
            self._start(out, None)
        if isinstance(ev, Start):
            if not self.started:
                self._start(out, ev)
        elif isinstance(ev, (Text, Refusal)):
            self._text(out, ev.text, ev)
        elif isinstance(ev, Reasoning):
            self._reasoning(out, ev)
        elif isinstance(ev, ReasoningEnd):
            if self.open is not None and self.open[0] == "thinking":
                if ev.encrypted_content and not envelope.is_envelope(ev.encrypted_content):
                    self.signature = ev.encrypted_content
                self._close(out)
            elif self._call_open():
                self.held.append(ev)
            elif ev.redacted and ev.encrypted_content:
                # an Anthropic upstream's redacted_thinking block, as it came
                self._close(out)
                self._open_block(out, "redacted_thinking", {"type": "redacted_thinking", "data": ev.encrypted_content})
                self._close(out)
        elif isinstance(ev, ToolCall):
            self._call(out, ev)
        elif isinstance(ev, ToolCallEnd):
            self._call_end(out, ev)
        elif isinstance(ev, Usage):
            self._usage(ev.usage)
        elif isinstance(ev, Finish):
            self._finish(out, ev)
        elif isinstance(ev, Passthrough):
            pass  # a hosted item of a Responses upstream: no Messages form
        return out

    def message(self) -> dict[str, Any]:
        """The whole message (a non-streamed answer), once ``Finish`` was fed."""
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [self._whole(i, b) for i, b in enumerate(self.content)],
            "stop_reason": self.stop_reason,
            "stop_sequence": self.stop_sequence,
            "usage": self.usage,
        }

    # -- blocks -------------------------------------------------------------------------------

    def _whole(self, i: int, block: dict[str, Any]) -> dict[str, Any]:
        kind = block.get("type")
        if kind in ("text", "thinking") and self.pieces[i]:
            return {**block, kind: "".join(self.pieces[i])}
        return block

    def _start(self, out: list[dict[str, Any]], ev: Start | None) -> None:
        self.started = True
        if ev is not None and ev.model and not self.model:
            self.model = ev.model
        if ev is not None and ev.usage:  # a Messages upstream's input count, at the start as it gave it
            self._usage(ev.usage)
        out.append(
            {
                "type": "message_start",
                "message": {**self.message(), "content": [], "stop_reason": None},
            }
        )

    def _open_block(self, out: list[dict[str, Any]], kind: str, block: dict[str, Any], call: int | None = None) -> int:
        i = self.blocks
        self.blocks += 1
        self.open = (kind, call)
        out.append({"type": "content_block_start", "index": i, "content_block": block})
        self.content.append({k: (dict(v) if isinstance(v, dict) else v) for k, v in block.items()})
        self.pieces.append([])
        return i

    def _close(self, out: list[dict[str, Any]]) -> None:
        if self.open is None:
            return
        kind, call = self.open
        i = self.blocks - 1
        if kind == "thinking":
            text = "".join(self.pieces[i])
            key = self.ctx.envelope_key
            sig = self.signature or (envelope.seal(text, key, self.sigs) if key else "")
            self.sigs = None
            out.append(
                {"type": "content_block_delta", "index": i, "delta": {"type": "signature_delta", "signature": sig}}
            )
            self.content[i]["signature"] = sig
            self.signature = None
        elif kind == "tool_use" and call is not None:
            c = self.calls[call]
            args = "".join(c.sent)
            try:
                parsed = orjson.loads(args) if args else {}
            except orjson.JSONDecodeError:
                parsed = None
            # ``input`` is an object; arguments that are not one keep their text (the stream
            # carried it as it came)
            self.content[i]["input"] = parsed if isinstance(parsed, dict) else {"_raw": args}
        out.append({"type": "content_block_stop", "index": i})
        self.open = None

    def _call_open(self) -> bool:
        return self.open is not None and self.open[0] == "tool_use"

    def _delta(self, out: list[dict[str, Any]], delta: dict[str, Any]) -> None:
        out.append({"type": "content_block_delta", "index": self.blocks - 1, "delta": delta})

    # -- content ------------------------------------------------------------------------------

    def _text(self, out: list[dict[str, Any]], text: str, ev: Event) -> None:
        if self._call_open():
            self.held.append(ev)
            return
        if not text:
            return
        if self.open is None or self.open[0] != "text":
            self._close(out)
            self._open_block(out, "text", {"type": "text", "text": ""})
        self._delta(out, {"type": "text_delta", "text": text})
        self.pieces[-1].append(text)

    def _reasoning(self, out: list[dict[str, Any]], ev: Reasoning) -> None:
        if self._call_open():
            self.held.append(ev)
            return
        if not ev.text:
            return
        if self.open is None or self.open[0] != "thinking":
            self._close(out)
            self._open_block(out, "thinking", {"type": "thinking", "thinking": "", "signature": ""})
        self._delta(out, {"type": "thinking_delta", "thinking": ev.text})
        self.pieces[-1].append(ev.text)

    # -- tool calls ---------------------------------------------------------------------------

    def _call(self, out: list[dict[str, Any]], ev: ToolCall) -> None:
        c = self.calls.get(ev.index)
        if c is None:
            c = self.calls[ev.index] = _Call()
            self.order.append(ev.index)
        if ev.call_id and not c.call_id:
            c.call_id = ev.call_id
        if ev.name and not c.name:
            c.name = ev.name
        if ev.signature is not None and c.sig is None:
            c.sig = ev.signature
        if ev.arguments:
            c.parts.append(ev.arguments)
        if c.block is not None:
            if self.open == ("tool_use", ev.index):
                self._flush_args(out, c)
            return
        if not self._call_open():
            self._try_open(out, ev.index)

    def _call_end(self, out: list[dict[str, Any]], ev: ToolCallEnd) -> None:
        c = self.calls.get(ev.index)
        if c is None:
            c = self.calls[ev.index] = _Call()
            self.order.append(ev.index)
        if ev.call_id and not c.call_id:
            c.call_id = ev.call_id
        if ev.name and not c.name:
            c.name = ev.name
        c.ended = True
        c.final = ev.arguments
        if self.open == ("tool_use", ev.index):
            self._end_call(out, c)
            self._after_call(out)
        elif not self._call_open():
            self._try_open(out, ev.index)
            if self.open == ("tool_use", ev.index):
                self._end_call(out, c)
                self._after_call(out)

    def _try_open(self, out: list[dict[str, Any]], index: int) -> None:
        c = self.calls[index]
        if c.block is not None or not c.name:
            return
        if not c.call_id:
            c.call_id = "toolu_" + random_hex()
        if c.sig is not None:
            self._signature(out, c)
        self._close(out)
        # (an upstream's id a Messages client may not accept, reversibly: ids.to_anthropic_id)
        block = {"type": "tool_use", "id": to_anthropic_id(c.call_id), "name": c.name, "input": {}}
        c.block = self._open_block(out, "tool_use", block, index)
        self.tool_used = True
        self._flush_args(out, c)

    def _flush_args(self, out: list[dict[str, Any]], c: _Call) -> None:
        if c.parts:
            text = "".join(c.parts)
            c.parts = []
            c.sent.append(text)
            self._delta(out, {"type": "input_json_delta", "partial_json": text})

    def _end_call(self, out: list[dict[str, Any]], c: _Call) -> None:
        self._flush_args(out, c)
        sent = "".join(c.sent)
        if c.final is not None and len(c.final) > len(sent) and c.final.startswith(sent):
            rest = c.final[len(sent) :]  # the done-reconciled suffix the deltas fell short of
            c.sent.append(rest)
            self._delta(out, {"type": "input_json_delta", "partial_json": rest})
        self._close(out)
        if c.sig is not None:  # it came after the call's block started: a block after it
            self._signature(out, c)

    def _signature(self, out: list[dict[str, Any]], c: _Call) -> None:
        """Call ``c``'s thought signature (Gemini) sealed with its call id into a thinking
        block's signature, which Claude Code sends back: the open thinking block's, else an
        empty thinking block of its own (transformers/thought_signatures.py)."""
        sigs = {cast(str, c.call_id): cast(str, c.sig)}
        c.sig = None
        if not self.ctx.envelope_key:
            return  # nothing to seal it with: Gemini gets the escape value next time
        if not (self.open is not None and self.open[0] == "thinking"):
            self._close(out)
            self._open_block(out, "thinking", {"type": "thinking", "thinking": "", "signature": ""})
        self.sigs = sigs
        self._close(out)

    def _after_call(self, out: list[dict[str, Any]]) -> None:
        """A call's block closed: the calls that waited for it, then what was held."""
        for index in self.order:
            c = self.calls[index]
            if c.block is None and c.name:
                self._try_open(out, index)
                if c.ended:
                    self._end_call(out, c)
                    continue
                return  # its block stays open for its next pieces
        held, self.held = self.held, []
        for ev in held:
            out.extend(self.feed(ev))

    # -- the end ------------------------------------------------------------------------------

    def _usage(self, u: dict[str, Any]) -> None:
        details = u.get("input_tokens_details") or {}
        cached = details.get("cached_tokens") or 0
        written = details.get("cache_write_tokens") or 0
        self.usage = {
            "input_tokens": max(0, (u.get("input_tokens") or 0) - cached - written),
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": cached,
            "output_tokens": u.get("output_tokens") or 0,
        }

    def _finish(self, out: list[dict[str, Any]], ev: Finish) -> None:
        self.finished = True
        if ev.status == "failed":
            err = ev.error or {}
            self.error = {
                "type": "error",
                "error": {
                    "type": ERROR_KINDS.get(str(err.get("code")), ERROR_TYPES.get(str(err.get("type")), "api_error")),
                    "message": str(err.get("message") or "the upstream failed"),
                },
            }
            out.append(self.error)
            return
        if self._call_open():  # a call whose end never came: closed with what it has
            kind, index = self.open  # type: ignore[misc]
            self._end_call(out, self.calls[index])  # type: ignore[index]
        self._after_call_at_end(out)
        self._close(out)
        reason = STOP_REASONS.get((ev.status, ev.reason), "max_tokens" if ev.status == "incomplete" else "end_turn")
        native = ev.extra.get("stop_reason")
        if native in NATIVE_STOPS:  # a Messages upstream's own (pause_turn, stop_sequence…)
            reason = native
        if ev.status == "completed" and self.tool_used and reason == "end_turn":
            reason = "tool_use"
        sequence = ev.extra.get("stop_sequence") if reason == "stop_sequence" else None
        self.stop_reason = reason
        self.stop_sequence = sequence if isinstance(sequence, str) else None
        out.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": self.stop_sequence},
                "usage": self.usage,
            }
        )
        out.append({"type": "message_stop"})

    def _after_call_at_end(self, out: list[dict[str, Any]]) -> None:
        for index in self.order:
            c = self.calls[index]
            if c.block is not None:
                continue
            if not c.name:
                self.ctx.repaired("tool_call_unnamed_dropped")
                continue
            self._try_open(out, index)
            self._end_call(out, c)
        held, self.held = self.held, []
        for ev in held:
            if isinstance(ev, (Text, Refusal)):
                self._text(out, ev.text, ev)
            elif isinstance(ev, Reasoning):
                self._reasoning(out, ev)
