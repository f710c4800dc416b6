"""Load generator for the benchmark: raw asyncio + httptools, meant to run on uvloop.

Theory of operation
-------------------
``run_load(spec)`` opens ``spec.concurrency`` keep-alive HTTP/1.1 connections (all of them
before the clock starts), then each connection sends the same prebuilt POST in a loop until
``spec.duration`` has passed or it has sent ``spec.per_worker`` requests.  One
``asyncio.Protocol`` per connection feeds the bytes to httptools' C response parser, which
also undoes chunked transfer encoding; the body goes to a ``StreamScan`` (streams) or is
kept whole (JSON answers).  No httpx, no per-request allocations beyond a tuple, so one
core running this *and* the fake upstream stays well above what the proxy can do (the
"direct" column of the same run is the proof: it is this client against the fake alone).

Per request it records ``(t_send, ttfb, ttft, total, events, ok)``:

* ``ttfb``  — first response byte (status line) after the request was written;
* ``ttft``  — first SSE event that carries answer text (Chat ``delta.content`` non-empty,
  Responses ``response.output_text.delta``, Messages a ``content_block_delta`` whose
  ``text_delta`` is non-empty, Gemini a chunk with a non-empty text part not a thought);
  streams only;
* ``total`` — the last byte of the body;
* ``events`` — SSE events received (``SSEParser`` from ``transformers.sse``, so comments
  and keep-alives are not counted);
* ``ok`` — status 200 and the stream ended with its protocol's success terminator
  (``[DONE]`` for Chat, ``response.completed`` for Responses, ``message_stop`` for Messages,
  a chunk with a ``finishReason`` for Gemini) with no error event; for a JSON answer, status
  200 and a body that parses.

A Messages client's request carries ``anthropic-version`` (as Claude Code's does), a Gemini
client's its key in ``x-goog-api-key`` (as Gemini CLI's does; no one checks it here).

``validate_stream`` / ``validate_json`` check one answer in full against what the fake
upstream sent (text, tool call name and arguments, usage, terminator): run on the first
answer of every measurement, so a fast but wrong proxy does not go unnoticed.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

import httptools
import orjson

from bench.fake_upstream import (
    GEMINI_SIGNATURE,
    KEY,
    THINK_SIGNATURE,
    TOOL_ARGS,
    TOOL_CALL_ID,
    TOOL_NAME,
    expected_text,
    tool_args,
    usage_for,
)
from transformers.envelope import PREFIX as SEALED  # the proxy's envelope (a Gemini call's signature)
from transformers.sse import SSEEvent, SSEParser

__all__ = [
    "LoadSpec",
    "LoadResult",
    "StreamScan",
    "is_text_event",
    "event_type",
    "validate_stream",
    "validate_json",
    "percentile",
    "build_request",
    "run_load",
]


# ------------------------------------------------------------------ SSE and checks
def event_type(ev: SSEEvent) -> str | None:
    """The Responses event type: the ``event:`` line, else ``type`` in the JSON data."""
    if ev.event:
        return ev.event
    d = ev.data
    if d.startswith("{") and '"type"' in d:
        try:
            t = orjson.loads(d).get("type")
        except orjson.JSONDecodeError:
            return None
        return t if isinstance(t, str) else None
    return None


def is_text_event(proto: str, ev: SSEEvent) -> bool:
    """Does this event carry answer text (the TTFT mark)?"""
    if proto == "responses":
        return event_type(ev) == "response.output_text.delta"
    if proto == "messages":
        if event_type(ev) != "content_block_delta" or '"text_delta"' not in ev.data:
            return False
        try:
            d = orjson.loads(ev.data).get("delta") or {}
        except (orjson.JSONDecodeError, AttributeError):
            return False
        t = d.get("text") if isinstance(d, dict) and d.get("type") == "text_delta" else None
        return isinstance(t, str) and bool(t)
    if proto == "gemini":
        return '"text"' in ev.data and any(t and not thought for thought, t in _gemini_texts(ev.data))
    d = ev.data
    if '"content"' not in d:
        return False
    try:
        obj = orjson.loads(d)
    except orjson.JSONDecodeError:
        return False
    for ch in obj.get("choices") or ():
        c = (ch.get("delta") or {}).get("content")
        if isinstance(c, str) and c:
            return True
    return False


def _gemini_parts(obj: object) -> list[dict]:
    """The parts of a Gemini chunk's first candidate ([] when it has none)."""
    try:
        parts = obj["candidates"][0]["content"]["parts"]  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        return []
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def _gemini_texts(data: str) -> list[tuple[bool | None, str]]:
    """(thought, text) of each text part of a Gemini chunk; ``[(None, "")]`` when it is not
    JSON."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return [(None, "")]
    out = []
    for p in _gemini_parts(obj):
        t = p.get("text")
        if isinstance(t, str):
            out.append((p.get("thought") is True, t))
    return out


_RESP_BAD = frozenset({"response.failed", "response.incomplete", "error"})


class StreamScan:
    """Counts one SSE stream's events and marks its first text event and its ending."""

    __slots__ = ("proto", "parser", "events", "ttft", "last", "error", "keep", "kept", "t0")

    def __init__(self, proto: str, t0: float = 0.0, keep: bool = False) -> None:
        self.proto = proto
        self.parser = SSEParser()
        self.events = 0
        self.ttft: float | None = None  # seconds after t0
        self.last: SSEEvent | None = None
        self.error: str | None = None
        self.keep = keep
        self.kept: list[SSEEvent] = []
        self.t0 = t0

    def feed(self, data: bytes, now: float) -> None:
        self._take(self.parser.feed(data), now)

    def end(self, now: float) -> None:
        self._take(self.parser.end(), now)

    def _take(self, evs: list[SSEEvent], now: float) -> None:
        if not evs:
            return
        self.events += len(evs)
        if self.keep:
            self.kept.extend(evs)
        if self.ttft is None:
            for ev in evs:
                if is_text_event(self.proto, ev):
                    self.ttft = now - self.t0
                    break
        for ev in evs:
            d = ev.data
            if d.startswith('{"error"') or (ev.event is not None and ev.event in _RESP_BAD):
                if self.error is None:
                    self.error = d[:300]
        self.last = evs[-1]

    @property
    def complete(self) -> bool:
        """Ended with the protocol's success terminator and saw no error event."""
        if self.error is not None or self.last is None:
            return False
        if self.proto == "chat":
            return self.last.data == "[DONE]"
        if self.proto == "messages":
            return event_type(self.last) == "message_stop"
        if self.proto == "gemini":
            return '"finishReason"' in self.last.data
        return event_type(self.last) == "response.completed"


def _chat_stream_parts(events: list[SSEEvent]) -> tuple[list, dict]:
    text: list[str] = []
    calls: dict[int, dict] = {}
    info: dict = {"finish": None, "usage": None, "done": False, "errors": [], "reasoning": []}
    for ev in events:
        if ev.data == "[DONE]":
            info["done"] = True
            continue
        try:
            obj = orjson.loads(ev.data)
        except orjson.JSONDecodeError:
            info["errors"].append(f"not JSON: {ev.data[:80]!r}")
            continue
        if "error" in obj:
            info["errors"].append(f"error chunk: {ev.data[:200]}")
        if obj.get("usage"):
            info["usage"] = obj["usage"]
        for ch in obj.get("choices") or ():
            if ch.get("usage"):
                info["usage"] = ch["usage"]
            delta = ch.get("delta") or {}
            c = delta.get("content")
            if isinstance(c, str):
                text.append(c)
            r = delta.get("reasoning_content")
            if isinstance(r, str):
                info["reasoning"].append(r)
            for tc in delta.get("tool_calls") or ():
                slot = calls.setdefault(tc.get("index", 0), {"id": None, "name": None, "args": []})
                if tc.get("id"):
                    slot["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    slot["name"] = fn["name"]
                if fn.get("arguments"):
                    slot["args"].append(fn["arguments"])
            if ch.get("finish_reason"):
                info["finish"] = ch["finish_reason"]
    return text, {**info, "calls": calls}


def validate_stream(
    proto: str, events: list[SSEEvent], n: int, same_ids: bool = True, reasoning: int = 0, args: int = 0
) -> list[str]:
    """Problems with one streamed answer, compared with what the fake upstream sent.

    ``same_ids``: the tool-call id must be the upstream's (same-protocol Chat keeps ids;
    bridges may mint their own, then only its presence is checked).  ``reasoning``: the
    reasoning chunks the fake sent (``think<R>``), whose text must arrive whole (as
    ``reasoning_content``, or a Responses client's reasoning summary deltas).  ``args``: the
    words of the tool call's command (``args<A>``), whose argument text must arrive whole.
    """
    problems: list[str] = []
    want_text = expected_text(n)
    want_reasoning = expected_text(reasoning)
    want_args = tool_args(args)
    _, want_out, _ = usage_for(n, args)
    if proto == "chat":
        text, info = _chat_stream_parts(events)
        problems += info["errors"]
        if "".join(text) != want_text:
            problems.append(f"text differs: {len(''.join(text))} chars, want {len(want_text)}")
        if reasoning and "".join(info["reasoning"]) != want_reasoning:
            problems.append(f"reasoning differs: {len(''.join(info['reasoning']))} chars, want {len(want_reasoning)}")
        calls = info["calls"]
        if len(calls) != 1:
            problems.append(f"{len(calls)} tool calls, want 1")
        else:
            c = next(iter(calls.values()))
            if c["name"] != TOOL_NAME:
                problems.append(f"tool name {c['name']!r}")
            if "".join(c["args"]) != want_args:
                problems.append(f"tool arguments {''.join(c['args'])!r}")
            if not c["id"] or (same_ids and c["id"] != TOOL_CALL_ID):
                problems.append(f"tool call id {c['id']!r}")
        if info["finish"] != "tool_calls":
            problems.append(f"finish_reason {info['finish']!r}")
        u = info["usage"] or {}
        if u.get("completion_tokens") != want_out:
            problems.append(f"usage {u!r}")
        if not info["done"] or events[-1].data != "[DONE]":
            problems.append("no final [DONE]")
        return problems
    if proto == "messages":
        want_thinking = want_reasoning if reasoning else None
        return _validate_messages_stream(events, want_text, want_thinking, want_args, want_out, same_ids)
    if proto == "gemini":
        chunks = []
        for ev in events:
            try:
                chunks.append(orjson.loads(ev.data))
            except orjson.JSONDecodeError:
                problems.append(f"not JSON: {ev.data[:80]!r}")
        want_thought = want_reasoning if reasoning else None
        return problems + _validate_gemini(chunks, want_text, want_thought, want_args, want_out, same_ids)
    # Responses
    text = []
    thought: list[str] = []
    deltas: list[str] = []
    items: list[dict] = []
    completed = None
    for ev in events:
        try:
            obj = orjson.loads(ev.data)
        except orjson.JSONDecodeError:
            continue  # e.g. a [DONE] some servers add; clients skip it
        t = obj.get("type")
        if ev.event is not None and t is not None and ev.event != t:
            problems.append(f"event line {ev.event!r} != type {t!r}")
        if t == "response.output_text.delta":
            text.append(obj.get("delta", ""))
        elif t == "response.reasoning_summary_text.delta":
            thought.append(obj.get("delta", ""))
        elif t == "response.function_call_arguments.delta":
            deltas.append(obj.get("delta", ""))
        elif t == "response.output_item.done":
            items.append(obj.get("item") or {})
        elif t == "response.completed":
            completed = obj.get("response") or {}
        elif t in _RESP_BAD:
            problems.append(f"{t}: {ev.data[:200]}")
    if "".join(text) != want_text:
        problems.append(f"text differs: {len(''.join(text))} chars, want {len(want_text)}")
    if reasoning and "".join(thought) != want_reasoning:
        problems.append(f"reasoning differs: {len(''.join(thought))} chars, want {len(want_reasoning)}")
    if "".join(deltas) != want_args:
        problems.append(f"argument deltas {''.join(deltas)!r}")
    fcs = [i for i in items if i.get("type") == "function_call"]
    if len(fcs) != 1:
        problems.append(f"{len(fcs)} function_call items, want 1")
    else:
        fc = fcs[0]
        if fc.get("name") != TOOL_NAME or fc.get("arguments") != want_args:
            problems.append(f"function_call item {fc!r}")
        if not fc.get("call_id") or (same_ids and fc.get("call_id") != TOOL_CALL_ID):
            problems.append(f"call_id {fc.get('call_id')!r}")
    if completed is None:
        problems.append("no response.completed")
    else:
        u = completed.get("usage") or {}
        if u.get("output_tokens") != want_out:
            problems.append(f"usage {u!r}")
        if event_type(events[-1]) != "response.completed":
            problems.append("response.completed is not the last event")
    return problems


def _validate_messages_stream(
    events: list[SSEEvent], want_text: str, want_reasoning: str | None, want_args: str, want_out: int, same_ids: bool
) -> list[str]:
    """``validate_stream`` for a Messages stream: ``message_start`` first and once, one block
    open at a time (start, its deltas, stop; indexes 0, 1, … in order), the text blocks'
    text, the thinking (``want_reasoning``; ``same_ids``: the upstream's signature), one
    ``tool_use`` block (its name, id and ``partial_json`` pieces), ``stop_reason``
    ``tool_use`` and the output tokens in ``message_delta``, ``message_stop`` last, no
    ``error`` event."""
    problems: list[str] = []
    blocks: list[dict] = []
    open_: int | None = None
    starts = 0
    delta_usage = stop_reason = None
    for ev in events:
        try:
            obj = orjson.loads(ev.data)
        except orjson.JSONDecodeError:
            problems.append(f"not JSON: {ev.data[:80]!r}")
            continue
        t = obj.get("type")
        if ev.event is not None and t is not None and ev.event != t:
            problems.append(f"event line {ev.event!r} != type {t!r}")
        if t == "message_start":
            starts += 1
        elif t == "content_block_start":
            i, b = obj.get("index"), obj.get("content_block") or {}
            if open_ is not None:
                problems.append(f"block {i} started while block {open_} is open")
            if i != len(blocks):
                problems.append(f"block index {i}, want {len(blocks)}")
            blocks.append({"type": b.get("type"), "id": b.get("id"), "name": b.get("name"), "parts": [], "sig": None})
            open_ = len(blocks) - 1
        elif t == "content_block_delta":
            i, d = obj.get("index"), obj.get("delta") or {}
            if open_ is None or i != open_:
                problems.append(f"delta for block {i} while {open_} is open")
                continue
            b, dt = blocks[open_], d.get("type")
            if dt == "signature_delta":
                b["sig"] = d.get("signature")
            else:
                key = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial_json"}.get(dt)
                if key is None or (dt == "input_json_delta") != (b["type"] == "tool_use"):
                    problems.append(f"{dt} in a {b['type']} block")
                else:
                    b["parts"].append(d.get(key, ""))
        elif t == "content_block_stop":
            if open_ is None or obj.get("index") != open_:
                problems.append(f"stop of block {obj.get('index')} while {open_} is open")
            open_ = None
        elif t == "message_delta":
            stop_reason = (obj.get("delta") or {}).get("stop_reason")
            delta_usage = obj.get("usage") or {}
        elif t == "error":
            problems.append(f"error event: {ev.data[:200]}")
    if starts != 1 or not events or event_type(events[0]) != "message_start":
        problems.append(f"{starts} message_start events, want 1 (first)")
    if open_ is not None:
        problems.append(f"block {open_} never stopped")

    def joined(kind: str) -> str:
        return "".join(p for b in blocks if b["type"] == kind for p in b["parts"])

    if joined("text") != want_text:
        problems.append(f"text differs: {len(joined('text'))} chars, want {len(want_text)}")
    if want_reasoning is not None:
        if joined("thinking") != want_reasoning:
            problems.append(f"reasoning differs: {len(joined('thinking'))} chars, want {len(want_reasoning)}")
        sigs = [b["sig"] for b in blocks if b["type"] == "thinking"]
        if same_ids and sigs != [THINK_SIGNATURE]:  # (a bridge signs with its own key, if any)
            problems.append(f"thinking signatures {sigs!r}")
    calls = [b for b in blocks if b["type"] == "tool_use"]
    if len(calls) != 1:
        problems.append(f"{len(calls)} tool_use blocks, want 1")
    else:
        c = calls[0]
        if c["name"] != TOOL_NAME:
            problems.append(f"tool name {c['name']!r}")
        if "".join(c["parts"]) != want_args:
            problems.append(f"tool arguments {''.join(c['parts'])!r}")
        if not c["id"] or (same_ids and c["id"] != TOOL_CALL_ID):
            problems.append(f"tool call id {c['id']!r}")
    if stop_reason != "tool_use":
        problems.append(f"stop_reason {stop_reason!r}")
    if delta_usage is None or delta_usage.get("output_tokens") != want_out:
        problems.append(f"usage {delta_usage!r}")
    if not events or event_type(events[-1]) != "message_stop":
        problems.append("message_stop is not the last event")
    return problems


def _validate_gemini(
    chunks: list, want_text: str, want_reasoning: str | None, want_args: str, want_out: int, same_ids: bool
) -> list[str]:
    """``validate_stream`` / ``validate_json`` for Gemini (the chunks of a stream, or the one
    whole answer): the text parts' text, the thought parts' (``want_reasoning``), one
    ``functionCall`` part (its name and ``args``; ``same_ids``: the upstream's
    ``thoughtSignature``, or the proxy's envelope, which carries it), ``finishReason`` ``STOP`` on the last chunk and on no other, the
    output tokens in the last chunk's ``usageMetadata``, no error object."""
    problems: list[str] = []
    text: list[str] = []
    thought: list[str] = []
    calls: list[dict] = []
    finishes = 0
    for obj in chunks:
        if not isinstance(obj, dict) or "error" in obj:
            problems.append(f"error chunk: {orjson.dumps(obj)[:200]!r}")
            continue
        for p in _gemini_parts(obj):
            if "functionCall" in p:
                calls.append(p)
            elif isinstance(p.get("text"), str):
                (thought if p.get("thought") is True else text).append(p["text"])
        cands = obj.get("candidates") or [{}]
        if isinstance(cands[0], dict) and cands[0].get("finishReason") is not None:
            finishes += 1
    if "".join(text) != want_text:
        problems.append(f"text differs: {len(''.join(text))} chars, want {len(want_text)}")
    if want_reasoning is not None and "".join(thought) != want_reasoning:
        problems.append(f"reasoning differs: {len(''.join(thought))} chars, want {len(want_reasoning)}")
    if len(calls) != 1:
        problems.append(f"{len(calls)} functionCall parts, want 1")
    else:
        fc = calls[0].get("functionCall") or {}
        if fc.get("name") != TOOL_NAME or fc.get("args") != orjson.loads(want_args):
            problems.append(f"functionCall {fc!r}")
        sig = calls[0].get("thoughtSignature")
        # the upstream's, or (through the proxy) its envelope around it
        if same_ids and not (sig == GEMINI_SIGNATURE or (isinstance(sig, str) and sig.startswith(SEALED))):
            problems.append(f"thoughtSignature {sig!r}")
    last = chunks[-1] if chunks and isinstance(chunks[-1], dict) else {}
    cands = last.get("candidates") or [{}]
    finish = cands[0].get("finishReason") if isinstance(cands[0], dict) else None
    if finish != "STOP" or finishes != 1:
        problems.append(f"finishReason {finish!r} on the last chunk, {finishes} chunks with one, want 1")
    u = last.get("usageMetadata") or {}
    if u.get("candidatesTokenCount") != want_out:
        problems.append(f"usageMetadata {u!r}")
    return problems


def validate_json(proto: str, body: bytes, n: int, same_ids: bool = True) -> list[str]:
    """Problems with one non-streamed answer."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return [f"body is not JSON: {body[:120]!r}"]
    want_text = expected_text(n)
    _, want_out, _ = usage_for(n)
    problems: list[str] = []
    if proto == "gemini":
        return _validate_gemini([obj], want_text, None, TOOL_ARGS, want_out, same_ids)
    if proto == "chat":
        try:
            msg = obj["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            return [f"no choices[0].message: {body[:200]!r}"]
        if msg.get("content") != want_text:
            problems.append("content differs")
        tcs = msg.get("tool_calls") or []
        if len(tcs) != 1:
            problems.append(f"{len(tcs)} tool calls")
        else:
            fn = tcs[0].get("function") or {}
            if fn.get("name") != TOOL_NAME or fn.get("arguments") != TOOL_ARGS:
                problems.append(f"tool call {tcs[0]!r}")
            if not tcs[0].get("id") or (same_ids and tcs[0]["id"] != TOOL_CALL_ID):
                problems.append(f"tool call id {tcs[0].get('id')!r}")
        if obj["choices"][0].get("finish_reason") != "tool_calls":
            problems.append(f"finish_reason {obj['choices'][0].get('finish_reason')!r}")
        if (obj.get("usage") or {}).get("completion_tokens") != want_out:
            problems.append(f"usage {obj.get('usage')!r}")
        return problems
    if proto == "messages":
        if obj.get("type") != "message" or not isinstance(obj.get("content"), list):
            return [f"not a message: {body[:200]!r}"]
        blocks = obj["content"]
        if "".join(b.get("text", "") for b in blocks if b.get("type") == "text") != want_text:
            problems.append("text differs")
        uses = [b for b in blocks if b.get("type") == "tool_use"]
        if len(uses) != 1 or uses[0].get("name") != TOOL_NAME or uses[0].get("input") != orjson.loads(TOOL_ARGS):
            problems.append(f"tool_use blocks {uses!r}")
        elif not uses[0].get("id") or (same_ids and uses[0]["id"] != TOOL_CALL_ID):
            problems.append(f"tool_use id {uses[0].get('id')!r}")
        if obj.get("stop_reason") != "tool_use":
            problems.append(f"stop_reason {obj.get('stop_reason')!r}")
        if (obj.get("usage") or {}).get("output_tokens") != want_out:
            problems.append(f"usage {obj.get('usage')!r}")
        return problems
    out = obj.get("output") or []
    text = "".join(
        p.get("text", "")
        for i in out
        if i.get("type") == "message"
        for p in i.get("content") or ()
        if p.get("type") == "output_text"
    )
    if text != want_text:
        problems.append("output text differs")
    fcs = [i for i in out if i.get("type") == "function_call"]
    if len(fcs) != 1 or fcs[0].get("arguments") != TOOL_ARGS or fcs[0].get("name") != TOOL_NAME:
        problems.append(f"function_call items {fcs!r}")
    if (obj.get("usage") or {}).get("output_tokens") != want_out:
        problems.append(f"usage {obj.get('usage')!r}")
    return problems


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100) of unsorted values; None when empty."""
    if not values:
        return None
    s = sorted(values)
    if p <= 0:
        return s[0]
    k = math.ceil(p / 100.0 * len(s)) - 1
    return s[min(max(k, 0), len(s) - 1)]


# ------------------------------------------------------------------------- client
# what a Messages client (Claude Code) and a Gemini one (Gemini CLI) send besides their
# body's headers
ANTHROPIC_HEAD = b"anthropic-version: 2023-06-01\r\n"
GEMINI_HEAD = b"x-goog-api-key: %b\r\n" % KEY.encode()
EXTRA_HEAD = {"messages": ANTHROPIC_HEAD, "gemini": GEMINI_HEAD}


def build_request(host: str, port: int, path: str, body: bytes, stream: bool, extra: bytes = b"") -> bytes:
    """``extra``: more head lines, each ending in CRLF (``ANTHROPIC_HEAD``)."""
    accept = b"text/event-stream" if stream else b"application/json"
    return (
        b"POST %b HTTP/1.1\r\nhost: %b:%d\r\ncontent-type: application/json\r\n"
        b"accept: %b\r\n%bcontent-length: %d\r\n\r\n%b"
        % (path.encode(), host.encode(), port, accept, extra, len(body), body)
    )


@dataclass
class LoadSpec:
    host: str
    port: int
    path: str  # /v1/chat/completions, /v1/responses, /v1/messages or /v1beta/models/{model}:{method}
    proto: str  # the client's protocol: chat | responses | messages | gemini
    body: bytes
    stream: bool
    concurrency: int
    duration: float | None = None  # stop sending new requests after this many seconds
    per_worker: int | None = None  # or after this many requests per connection
    n: int = 20  # text chunks the fake sends (for validation)
    reasoning: int = 0  # reasoning chunks it sends before them (``think<R>``: for validation)
    args: int = 0  # words of its tool call's command (``args<A>``: for validation)
    same_ids: bool = True
    validate: bool = True  # check the first answer in full
    timeout: float = 60.0


@dataclass
class LoadResult:
    records: list[tuple] = field(default_factory=list)  # (t_send, ttfb, ttft, total, events, ok)
    errors: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # from the full check of one answer
    wall: float = 0.0
    cpu: float = 0.0  # this process's CPU seconds

    @property
    def ok(self) -> int:
        return sum(1 for r in self.records if r[5])

    @property
    def failed(self) -> int:
        return len(self.records) - self.ok + len([e for e in self.errors if e.startswith("conn:")])

    @property
    def events(self) -> int:
        return sum(r[4] for r in self.records if r[5])


class _Client(asyncio.Protocol):
    """One keep-alive connection; one request in flight at a time."""

    def __init__(self, proto: str, stream: bool) -> None:
        self.proto = proto
        self.stream = stream
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.fut: asyncio.Future | None = None
        self.closed = asyncio.get_running_loop().create_future()
        self.scan: StreamScan | None = None
        self.body: list[bytes] = []
        self.t_send = 0.0
        self.ttfb: float | None = None
        self.status = 0
        self.keep = False
        self.headers_done = False

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def connection_lost(self, exc) -> None:
        self.transport = None
        fut = self.fut
        if fut is not None and not fut.done():
            if self.headers_done and self.scan is not None:
                self.scan.end(time.perf_counter())
            fut.set_exception(ConnectionError(f"connection lost: {exc!r}"))
        if not self.closed.done():
            self.closed.set_result(None)

    def send(self, req: bytes, keep: bool) -> asyncio.Future:
        self.fut = asyncio.get_running_loop().create_future()
        self.body = []
        self.scan = None
        self.ttfb = None
        self.status = 0
        self.keep = keep
        self.headers_done = False
        self.t_send = time.perf_counter()
        self.transport.write(req)
        return self.fut

    def data_received(self, data: bytes) -> None:
        if self.ttfb is None:
            self.ttfb = time.perf_counter() - self.t_send
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            if self.fut is not None and not self.fut.done():
                self.fut.set_exception(ConnectionError(f"bad HTTP: {e!r}"))
            self.transport.close()

    # httptools callbacks
    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.headers_done = True
        if self.stream and self.status == 200:
            self.scan = StreamScan(self.proto, self.t_send, self.keep)

    def on_body(self, body: bytes) -> None:
        scan = self.scan
        if scan is not None:
            scan.feed(body, time.perf_counter())
            if self.keep:
                self.body.append(body)
        else:
            self.body.append(body)

    def on_message_complete(self) -> None:
        now = time.perf_counter()
        if self.scan is not None:
            self.scan.end(now)
        fut = self.fut
        if fut is not None and not fut.done():
            fut.set_result(now - self.t_send)


async def _worker(
    spec: LoadSpec, conn: _Client, req: bytes, res: LoadResult, deadline: float, first: list[bool]
) -> None:
    loop = asyncio.get_running_loop()
    count = 0
    while True:
        if spec.per_worker is not None and count >= spec.per_worker:
            return
        if spec.duration is not None and count and time.perf_counter() >= deadline:
            return
        count += 1
        keep = False
        if spec.validate and first[0]:
            first[0] = False
            keep = True
        if conn.transport is None:
            try:
                _, conn = await loop.create_connection(lambda: _Client(spec.proto, spec.stream), spec.host, spec.port)
            except OSError as e:
                res.errors.append(f"conn: {e!r}")
                return
        t_send = time.perf_counter()
        try:
            total = await asyncio.wait_for(conn.send(req, keep), spec.timeout)
        except (TimeoutError, ConnectionError) as e:
            res.errors.append(f"{type(e).__name__}: {e}")
            res.records.append((t_send, conn.ttfb, None, time.perf_counter() - t_send, 0, False))
            if conn.transport is not None:
                conn.transport.close()
            continue
        scan = conn.scan
        if conn.status != 200:
            res.errors.append(f"HTTP {conn.status}: {b''.join(conn.body)[:300]!r}")
            res.records.append((t_send, conn.ttfb, None, total, 0, False))
        elif spec.stream:
            if scan is None:
                ok, events, ttft = False, 0, None
            else:
                ok, events, ttft = scan.complete, scan.events, scan.ttft
                if not ok:
                    res.errors.append(f"stream not complete: {scan.error or (scan.last and scan.last.data[:200])}")
            res.records.append((t_send, conn.ttfb, ttft, total, events, ok))
            if keep and scan is not None:
                res.problems += validate_stream(spec.proto, scan.kept, spec.n, spec.same_ids, spec.reasoning, spec.args)
        else:
            body = b"".join(conn.body)
            ok = body[:1] == b"{"
            res.records.append((t_send, conn.ttfb, None, total, 0, ok))
            if not ok:
                res.errors.append(f"bad JSON body: {body[:200]!r}")
            if keep:
                res.problems += validate_json(spec.proto, body, spec.n, spec.same_ids)


async def run_load(spec: LoadSpec) -> LoadResult:
    """Run one measurement; the wall clock starts once every connection is open."""
    loop = asyncio.get_running_loop()
    res = LoadResult()
    extra = EXTRA_HEAD.get(spec.proto, b"")
    req = build_request(spec.host, spec.port, spec.path, spec.body, spec.stream, extra)
    conns: list[_Client] = []
    sem = asyncio.Semaphore(128)

    async def connect() -> _Client | None:
        async with sem:
            try:
                _, c = await loop.create_connection(lambda: _Client(spec.proto, spec.stream), spec.host, spec.port)
                return c
            except OSError as e:
                res.errors.append(f"conn: {e!r}")
                return None

    for c in await asyncio.gather(*(connect() for _ in range(spec.concurrency))):
        if c is not None:
            conns.append(c)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    deadline = t0 + (spec.duration or 0.0)
    first = [spec.validate]
    await asyncio.gather(*(_worker(spec, c, req, res, deadline, first) for c in conns))
    res.wall = time.perf_counter() - t0
    res.cpu = time.process_time() - cpu0
    for c in conns:
        if c.transport is not None:
            c.transport.close()
    return res
