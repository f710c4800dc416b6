"""Gemini ``GenerateContentResponse`` chunks (or one whole answer) → unified stream events.

Theory of operation
-------------------
The decoder of a Gemini upstream spoken in its own API (``protocol: gemini``).  Each SSE
``data:`` line is one ``GenerateContentResponse``; ``feed(obj)`` returns the events it
completes.  Only ``candidates[0]`` is read (the proxy asks for one):

====================================  =================================================
part                                  events
====================================  =================================================
``{"text"}``                          ``Text``
``{"text", "thought": true}``         ``Reasoning``
``{"functionCall": {id?, name,        ``ToolCall`` (the next index; the call's id, else
args}}`` (Gemini sends each whole)    ``gm_`` and a hash of its index and the response
                                      id; its arguments the JSON of ``args``; the
                                      part's ``thoughtSignature`` as
                                      ``ToolCall.signature``, byte for byte), then
                                      ``ToolCallEnd``
a ``thoughtSignature`` on another     not carried (Gemini only checks a call's)
part
``executableCode``, ``inlineData``…   nothing (no other protocol has their form)
====================================  =================================================

``finishReason``: ``STOP`` → completed; ``MAX_TOKENS`` → incomplete
``max_output_tokens``; ``SAFETY``, ``RECITATION``, ``BLOCKLIST``, ``PROHIBITED_CONTENT``,
``SPII``, ``IMAGE_SAFETY`` → incomplete ``content_filter``; any other value → completed.
A prompt blocked before any candidate (``promptFeedback.blockReason``) is incomplete
``content_filter``.  ``usageMetadata`` (the last one sent counts) becomes the unified
usage: input ``promptTokenCount``, of it cached ``cachedContentTokenCount``; output
``candidatesTokenCount`` plus ``thoughtsTokenCount``, of it reasoning the thoughts.  An
``{"error": {...}}`` object in the stream fails it with Google's message.  The stream's end
without a ``finishReason`` fails as truncated.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from .context import Ctx
from .errors import stream_error
from .events import Event, Finish, Reasoning, Start, Text, ToolCall, ToolCallEnd, Usage

__all__ = ["FILTERED", "GeminiStreamDecoder", "decode_gemini", "minted_id", "usage_of"]

FILTERED = frozenset({"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"})
_ERROR_CODES = {"RESOURCE_EXHAUSTED": "rate_limit_exceeded", "UNAVAILABLE": "server_is_overloaded"}


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def minted_id(response_id: str, i: int, name: str) -> str:
    """The id of call ``i`` named ``name`` that came without one: ``gm_`` and a hash."""
    return "gm_" + hashlib.sha256(f"{response_id}:{i}:{name}".encode()).hexdigest()[:24]


def usage_of(u: dict[str, Any]) -> dict[str, Any]:
    """Gemini's ``usageMetadata`` in the unified (Responses) shape."""
    inp, cached = _int(u.get("promptTokenCount")), _int(u.get("cachedContentTokenCount"))
    thoughts = _int(u.get("thoughtsTokenCount"))
    out = _int(u.get("candidatesTokenCount")) + thoughts
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": thoughts},
        "total_tokens": inp + out,
    }


class GeminiStreamDecoder:
    """One Gemini answer's events (see the module docstring)."""

    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.started = False
        self.finished = False
        self.calls = 0
        self.usage: dict[str, Any] | None = None
        self.response_id = ""

    # the Bridge's shortcuts: ``text`` alone (no lane reads this protocol's bytes)
    plain_text = False
    plain_reasoning = False
    text_open = False

    def text(self, obj: dict[str, Any]) -> str | None:
        """``feed(obj)`` for a chunk that gives one ``Text`` and nothing else, without its
        walk: the text (its ``usageMetadata`` kept, as feed keeps it).  That is once started
        and not finished, for a chunk with no ``error``, whose first candidate has no
        ``finishReason`` and one part, ``{"text": ...}`` with a non-empty text and no other
        key.  ``None`` for any other chunk or state: the caller takes ``feed``."""
        if not self.started or self.finished:
            return None
        cands = obj.get("candidates")
        if cands.__class__ is not list or not cands:
            return None
        cand = cands[0]
        if cand.__class__ is not dict or "finishReason" in cand:
            return None
        content = cand.get("content")
        if content.__class__ is not dict:
            return None
        parts = content.get("parts")
        if parts.__class__ is not list or len(parts) != 1:
            return None
        p = parts[0]
        if p.__class__ is not dict or len(p) != 1:
            return None
        t = p.get("text")
        if t.__class__ is not str or not t or "error" in obj:
            return None
        u = obj.get("usageMetadata")
        if u.__class__ is dict:
            self.usage = u
        return t

    def reasoning(self, obj: dict[str, Any]) -> None:
        return None

    def args(self, obj: dict[str, Any]) -> None:
        return None

    def feed(self, obj: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        if self.finished:
            return out
        if not self.started:
            self.started = True
            rid = obj.get("responseId")
            self.response_id = rid if isinstance(rid, str) else ""
            model = obj.get("modelVersion")
            out.append(Start(response_id=self.response_id or None, model=model if isinstance(model, str) else None))
        err = obj.get("error")
        if isinstance(err, dict):
            self.finished = True
            status = str(err.get("status") or "")
            message = err.get("message")
            text = message if isinstance(message, str) and message else "upstream error"
            out.append(Finish("failed", error=stream_error(_ERROR_CODES.get(status, "upstream_error"), text)))
            return out
        if isinstance(obj.get("usageMetadata"), dict):
            self.usage = obj["usageMetadata"]
        cands = obj.get("candidates")
        cand = cands[0] if isinstance(cands, list) and cands and isinstance(cands[0], dict) else None
        if cand is None:
            feedback = obj.get("promptFeedback")
            if isinstance(feedback, dict) and feedback.get("blockReason"):
                self._finish(out, "CONTENT_FILTERED_PROMPT")
            return out
        content = cand.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        for p in parts if isinstance(parts, list) else ():
            if isinstance(p, dict):
                self._part(out, p)
        reason = cand.get("finishReason")
        if isinstance(reason, str) and reason and reason != "FINISH_REASON_UNSPECIFIED":
            self._finish(out, reason)
        return out

    def end(self) -> list[Event]:
        if self.finished:
            return []
        self.finished = True
        out: list[Event] = [] if self.started else [Start()]
        self.started = True
        out.append(
            Finish("failed", error=stream_error("upstream_stream_truncated", "the stream ended without a finishReason"))
        )
        return out

    def _part(self, out: list[Event], p: dict[str, Any]) -> None:
        fc = p.get("functionCall")
        if isinstance(fc, dict):
            name = fc.get("name")
            if not isinstance(name, str) or not name:
                self.ctx.repaired("tool_call_unnamed_dropped")
                return
            i = self.calls
            self.calls += 1
            given = fc.get("id")
            call_id = given if isinstance(given, str) and given else ""
            if not call_id:
                call_id = minted_id(self.response_id, i, name)
            args = fc.get("args")
            text = orjson.dumps(args if isinstance(args, dict) else {}).decode()
            sig = p.get("thoughtSignature")
            out.append(
                ToolCall(i, text, call_id=call_id, name=name, signature=sig if isinstance(sig, str) and sig else None)
            )
            out.append(ToolCallEnd(i, text, call_id=call_id, name=name))
            return
        given_text = p.get("text")
        if isinstance(given_text, str) and given_text:
            out.append(Reasoning(given_text) if p.get("thought") is True else Text(given_text))

    def _finish(self, out: list[Event], reason: str) -> None:
        self.finished = True
        if self.usage is not None:
            out.append(Usage(usage_of(self.usage)))
        if reason == "MAX_TOKENS":
            out.append(Finish("incomplete", reason="max_output_tokens"))
        elif reason in FILTERED or reason == "CONTENT_FILTERED_PROMPT":
            out.append(Finish("incomplete", reason="content_filter"))
        else:
            out.append(Finish("completed"))


def decode_gemini(obj: dict[str, Any], ctx: Ctx) -> list[Event]:
    """A whole Gemini answer as the events of its stream."""
    dec = GeminiStreamDecoder(ctx)
    out = dec.feed(obj)
    return out + dec.end() if not dec.finished else out
