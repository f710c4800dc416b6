"""Unified stream events → Gemini ``GenerateContentResponse`` chunks, or the whole answer.

Theory of operation
-------------------
The fourth client protocol's encoder: what Gemini CLI reads (the Bridge's ``gemini`` rows).
``GeminiEncoder.feed(event)`` returns the chunks that event completes (dicts, each one SSE
``data:`` line); ``answer()`` the whole ``GenerateContentResponse`` of a non-streamed
answer (every chunk's parts merged, the last chunk's finish and usage).  Each chunk is
``{"candidates": [{"content": {"role": "model", "parts": [...]}, "index": 0}],
"modelVersion", "responseId"}``, as Gemini streams them:

======================  =================================================================
event                   part
======================  =================================================================
``Text``                ``{"text"}``, one chunk per delta
``Reasoning``           ``{"text", "thought": true}``, one chunk per delta
``ToolCall`` pieces     held until the call ends: Gemini sends a ``functionCall`` whole,
                        ``{"functionCall": {"id", "name", "args"}}`` (arguments that are
                        not a JSON object go as ``{"_raw": text}``)
``Finish``              the last chunk: the calls not yet ended, ``finishReason`` and
                        ``usageMetadata``; a failed answer ends with Gemini's error object
                        instead (``{"error": {"code", "message", "status"}}``)
======================  =================================================================

**Thought signatures.**  Gemini's clients send every ``thoughtSignature`` back on the part
that carried it.  The proxy puts its envelope there (``envelope.seal``, the request's key):
on each ``functionCall`` part, the reasoning text of the step so far (a Chat upstream such as
Kimi wants it back) and, when the upstream signed the call (Gemini's OpenAI-compatible
endpoint: ``ToolCall.signature``), that signature under the call's id, and an Anthropic upstream's signed thinking blocks (their text with their
``signature``, or a ``redacted_thinking`` block's data) under the key ``ANTHROPIC`` as
JSON: Anthropic wants them back before the tool results when thinking is on.  The Gemini →
Chat translator opens it (``request_g2c``); the Gemini upstream's row puts the signature back
on the call (``thought_signatures.restore``).  Without a key, a call's signature goes as
Gemini wrote it and reasoning is not carried.

**finishReason.**  completed → ``STOP`` (with calls too, as Gemini); incomplete
``max_output_tokens`` → ``MAX_TOKENS``; incomplete ``content_filter`` → ``SAFETY``; any
other incomplete reason → ``MAX_TOKENS``.

**usageMetadata** (from the unified Responses shape): ``promptTokenCount`` (input),
``candidatesTokenCount`` (output less reasoning), ``thoughtsTokenCount`` (reasoning),
``cachedContentTokenCount`` (cached input), ``totalTokenCount``.

A refusal's text is a text part; a ``Passthrough`` item (a hosted call of a Responses
upstream) has no Gemini form and is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from . import envelope
from .context import Ctx
from .events import (
    Event,
    Finish,
    Reasoning,
    ReasoningEnd,
    Refusal,
    Start,
    Text,
    ToolCall,
    ToolCallEnd,
    Usage,
)
from .ids import random_hex
from .whole_events import WholeEvents

__all__ = ["ANTHROPIC", "FINISH_REASONS", "GeminiEncoder", "STATUS_OF", "error_object", "status_of", "usage_metadata"]

# the key of an Anthropic upstream's signed thinking blocks in the sealed signatures (no
# call id is this)
ANTHROPIC = "@anthropic"

FINISH_REASONS: dict[tuple[str, str | None], str] = {
    ("completed", None): "STOP",
    ("incomplete", "max_output_tokens"): "MAX_TOKENS",
    ("incomplete", "content_filter"): "SAFETY",
}

# an HTTP status → Google's status name (google.rpc.Code)
STATUS_OF = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
             408: "DEADLINE_EXCEEDED", 409: "ABORTED", 413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED",
             499: "CANCELLED", 500: "INTERNAL", 501: "UNIMPLEMENTED", 502: "UNAVAILABLE", 503: "UNAVAILABLE",
             504: "DEADLINE_EXCEEDED"}  # fmt: skip
# a stream failure's code → the HTTP status Gemini would have answered with
_CODE_STATUS = {
    "rate_limit_exceeded": 429,
    "server_is_overloaded": 503,
    "context_length_exceeded": 400,
    "invalid_request_error": 400,
}


def status_of(status: int) -> str:
    return STATUS_OF.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION")


def error_object(status: int, message: str) -> dict[str, Any]:
    """Gemini's error body: ``{"error": {"code", "message", "status"}}``."""
    return {"error": {"code": status, "message": message, "status": status_of(status)}}


@dataclass(slots=True)
class _Call:
    call_id: str | None = None
    name: str | None = None
    parts: list[str] = field(default_factory=list)
    sig: str | None = None
    sent: bool = False


class GeminiEncoder(WholeEvents):
    """One answer's Gemini chunks (see the module docstring)."""

    def __init__(self, ctx: Ctx, *, model: str | None = None) -> None:
        self.ctx = ctx
        self.model = model or ctx.public_model
        self.id = random_hex()[:22]
        self.finished = False
        self.error: dict[str, Any] | None = None
        self.calls: dict[int, _Call] = {}
        self.order: list[int] = []
        self.thought: list[str] = []  # reasoning text of the step not yet sealed on a call
        self.block: list[str] = []  # the text of the reasoning block open now
        self.signed: list[dict[str, Any]] = []  # an Anthropic upstream's signed blocks, not yet sealed
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.parts: list[dict[str, Any]] = []  # every part sent (the whole answer)
        self._before = b""  # what SSE writes before a chunk's JSON (``frame_deltas``); b"": no shortcut
        self._delta: bytes | None = None  # a text chunk's format, framed (``text_delta``)
        self._delta_of: tuple[str | None, bytes] | None = None  # (model, framing) it was made for

    # -- what the Bridge asks of an encoder (its shortcut: ``text_delta``; else WholeEvents) -----

    def frame_deltas(self, framer: Any) -> None:
        """Have ``text_delta`` write its chunk framed as ``framer`` frames it: SSE's bare
        ``data:`` line only.  A JSON array frames its first element apart (``[`` rather than
        ``\n,``), so under any other framing every chunk goes through ``feed``."""
        before, after = framer("gemini")
        self._before = before if before == b"data: " and after == b"\n\n" else b""
        self._delta = None

    def text_delta(self, text: str) -> bytes | None:
        """``feed(Text(text))`` already serialized and framed: the very bytes the Bridge's
        framing writes for the one chunk that feed would give (a text chunk of this model and
        response id).  ``None`` under a framing other than SSE's, for an empty text (no chunk)
        or once finished: the caller takes ``feed``."""
        if not self._before or self.finished or not text:
            return None
        d = self._delta
        if d is None or self._delta_of != (self.model, self._before):
            d = self._new_delta()
        self.parts.append({"text": text})
        return d % orjson.dumps(text)

    def _new_delta(self) -> bytes:
        """The text chunk's format: ``_chunk``'s JSON for one text part, cut where the text
        goes (``%b``), its own '%' doubled, framed."""
        cut = "\x00text\x00"  # no JSON string writes a raw NUL
        head, tail = orjson.dumps(self._chunk([{"text": cut}])).split(orjson.dumps(cut))
        d = self._delta = self._before + head.replace(b"%", b"%%") + b"%b" + tail.replace(b"%", b"%%") + b"\n\n"
        self._delta_of = (self.model, self._before)
        return d

    @property
    def response(self) -> dict[str, Any]:
        return self.answer()

    def heartbeat(self) -> list[dict[str, Any]]:
        return []

    def abort(self, err: dict[str, Any]) -> list[dict[str, Any]]:
        if self.finished:
            return []
        self.finished = True
        self.error = error_object(500, str(err.get("message") or "the upstream failed"))
        return [self.error]

    # -- the way in -------------------------------------------------------------------------

    def feed(self, ev: Event) -> list[dict[str, Any]]:
        if self.finished:
            return []
        if isinstance(ev, (Text, Refusal)):
            return [self._chunk([self._part({"text": ev.text})])] if ev.text else []
        if isinstance(ev, Reasoning):
            if not ev.text:
                return []
            self.thought.append(ev.text)
            self.block.append(ev.text)
            return [self._chunk([self._part({"text": ev.text, "thought": True})])]
        if isinstance(ev, ReasoningEnd):
            blob = ev.encrypted_content
            if ev.redacted and blob:
                self.signed.append({"type": "redacted_thinking", "data": blob})
            elif blob and not envelope.is_envelope(blob):  # an Anthropic upstream's signature
                self.signed.append({"type": "thinking", "thinking": "".join(self.block), "signature": blob})
            self.block = []
            return []
        if isinstance(ev, ToolCall):
            self._call(ev)
            return []
        if isinstance(ev, ToolCallEnd):
            return self._call_end(ev)
        if isinstance(ev, Usage):
            self.usage = usage_metadata(ev.usage)
            return []
        if isinstance(ev, Finish):
            return self._finish(ev)
        if isinstance(ev, Start) and ev.model and not self.model:
            self.model = ev.model
        return []  # Start, Passthrough

    def answer(self) -> dict[str, Any]:
        """The whole answer (a non-streamed request), once ``Finish`` was fed: consecutive
        text parts of one kind merged."""
        parts: list[dict[str, Any]] = []
        for p in self.parts:
            last = parts[-1] if parts else None
            if (
                last is not None
                and "text" in p
                and "text" in last
                and last.get("thought") == p.get("thought")
                and "thoughtSignature" not in p
                and "thoughtSignature" not in last
            ):
                parts[-1] = {**last, "text": last["text"] + p["text"]}
            else:
                parts.append(p)
        cand: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if self.finish_reason is not None:
            cand["finishReason"] = self.finish_reason
        out: dict[str, Any] = {"candidates": [cand]}
        if self.usage is not None:
            out["usageMetadata"] = self.usage
        out["modelVersion"] = self.model
        out["responseId"] = self.id
        return out

    # -- pieces -------------------------------------------------------------------------------

    def _part(self, part: dict[str, Any]) -> dict[str, Any]:
        self.parts.append(part)
        return part

    def _chunk(self, parts: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
        cand: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if finish is not None:
            cand["finishReason"] = finish
        out: dict[str, Any] = {"candidates": [cand]}
        if finish is not None and self.usage is not None:
            out["usageMetadata"] = self.usage
        out["modelVersion"] = self.model
        out["responseId"] = self.id
        return out

    def _call(self, ev: ToolCall) -> None:
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

    def _call_end(self, ev: ToolCallEnd) -> list[dict[str, Any]]:
        c = self.calls.get(ev.index)
        if c is None:
            c = self.calls[ev.index] = _Call()
            self.order.append(ev.index)
        if ev.call_id and not c.call_id:
            c.call_id = ev.call_id
        if ev.name and not c.name:
            c.name = ev.name
        if ev.arguments is not None:
            c.parts = [ev.arguments]
        part = self._function_part(c)
        return [self._chunk([part])] if part is not None else []

    def _function_part(self, c: _Call) -> dict[str, Any] | None:
        if c.sent:
            return None
        c.sent = True
        if not c.name:
            self.ctx.repaired("tool_call_unnamed_dropped")
            return None
        if not c.call_id:
            c.call_id = "call_" + random_hex()[:24]
        text = "".join(c.parts)
        try:
            args = orjson.loads(text) if text.strip() else {}
        except orjson.JSONDecodeError:
            args = None
        part: dict[str, Any] = {
            "functionCall": {
                "id": c.call_id,
                "name": c.name,
                "args": args if isinstance(args, dict) else {"_raw": text},
            }
        }
        sig = self._signature(c)
        if sig is not None:
            part["thoughtSignature"] = sig
        return self._part(part)

    def _signature(self, c: _Call) -> str | None:
        key = self.ctx.envelope_key
        thought = "".join(self.thought)
        self.thought = []
        if not key:
            return c.sig  # as Gemini wrote it (or nothing)
        sigs = {c.call_id: c.sig} if c.sig is not None and c.call_id else {}
        if self.signed:
            sigs[ANTHROPIC] = orjson.dumps(self.signed).decode()
            self.signed = []
        if not thought and not sigs:
            return None
        return envelope.seal(thought, key, sigs or None)

    def _finish(self, ev: Finish) -> list[dict[str, Any]]:
        self.finished = True
        if ev.status == "failed":
            err = ev.error or {}
            status = _CODE_STATUS.get(str(err.get("code")), _CODE_STATUS.get(str(err.get("type")), 500))
            self.error = error_object(status, str(err.get("message") or "the upstream failed"))
            return [self.error]
        parts = [p for i in self.order if (p := self._function_part(self.calls[i])) is not None]
        reason = FINISH_REASONS.get((ev.status, ev.reason), "MAX_TOKENS" if ev.status == "incomplete" else "STOP")
        self.finish_reason = reason
        if not parts:
            parts = [{"text": ""}]
        return [self._chunk(parts, reason)]


def usage_metadata(u: dict[str, Any]) -> dict[str, Any]:
    """The unified (Responses) usage as Gemini's ``usageMetadata``."""
    inp = u.get("input_tokens") or 0
    out = u.get("output_tokens") or 0
    cached = (u.get("input_tokens_details") or {}).get("cached_tokens") or 0
    thoughts = (u.get("output_tokens_details") or {}).get("reasoning_tokens") or 0
    meta: dict[str, Any] = {
        "promptTokenCount": inp,
        "candidatesTokenCount": max(0, out - thoughts),
        "totalTokenCount": inp + out,
    }
    if thoughts:
        meta["thoughtsTokenCount"] = thoughts
    if cached:
        meta["cachedContentTokenCount"] = cached
    return meta
