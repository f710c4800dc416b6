"""Fuzz upstream: a loopback OpenAI-compatible server whose every answer is drawn from a seeded RNG.

Theory of operation
-------------------
``FuzzUpstream().start()`` serves raw HTTP/1.1 (asyncio streams, keep-alive, its own event
loop in a daemon thread) on 127.0.0.1, port 0 -> ``.port``; ``stop()`` closes it.  Every
``POST …/chat/completions`` or ``POST …/responses`` is answered by a *plan* built by
``make_plan(seed, protocol, stream)``, a pure function: the same seed, protocol and
``stream`` flag always give the same answer, byte for byte.

* ``seed`` is read from the request body: the first ``seed:<n>`` marker (the fuzz client
  writes it into the user message and the instructions, and it survives protocol
  translation).  A body without a marker falls back to its CRC-32, so the choice stays a
  function of the request.
* ``stream`` is the request body's ``stream`` (``true`` only when it is the JSON ``true``).

A plan picks one behaviour:

``valid``          a well-formed answer: Chat chunks (text, a tool call, finish, usage,
                   ``[DONE]``) or Responses events (created, in_progress, items added,
                   deltas, done, completed/incomplete, ``event:`` lines); or the JSON object
``mutated``        the same answer damaged: values at random JSON paths replaced by wrong
                   types, null, deep nesting (up to 2,000 levels), huge strings, invalid
                   UTF-8; junk ``data:`` lines; events dropped, duplicated, reordered; fake
                   or missing terminal; CR/CRLF line ends; huge or thousands of deltas;
                   absurd tool-call indexes; an error event; the connection closed
                   mid-stream; for JSON answers: truncated, not JSON, not an object, ...
``http_error``     400/401/403/404/408/413/418/422/429/500/502/503/504/529/599 with JSON
                   (OpenAI, xAI, FastAPI, AWS and broken shapes), HTML, text, empty or
                   binary bodies, odd ``retry-after``/``retry-after-ms`` (``inf``, ``nan``,
                   dates, huge, negative); some bodies echo the Authorization header received
``json_error_200`` HTTP 200 whose body is a JSON error object (or an SSE error event)
``wrong_shape``    a JSON object to a stream request, an SSE stream to a non-stream one
``wrong_protocol`` the other protocol's valid stream / object
``odd_status``     201/204/206/302 with an answer
``hangup``         the connection closed before or inside the response head, or a bad status line
``stall_head``     no answer for ``STALL`` seconds (past the proxy's first-byte timeout), then close
``stall_body``     a head and a few events, then ``STALL`` seconds of silence, then close

Independently, one answer in twenty waits up to ``SLOW_MAX`` seconds before its first
byte, and the body is written with one of three framings (Content-Length, chunked, or
close-delimited) and, for streams, often in random splits with tiny pauses.

What the server observed is kept for the test: ``played`` (seed -> plan description),
``sent`` (seed -> the first bytes it answered), ``late`` (seed -> the longest it kept
silent of its own accord: this server is a thread of the test's process, which a loaded
machine can starve),
``leaks`` (a request that carried ``client_key`` upstream), ``bad_auth`` (a request whose
Authorization was not ``Bearer <upstream_key>``) and ``errors`` (exceptions of this
server itself, which must stay empty).  Everything is bounded: request heads 1 MiB,
bodies 64 MiB, idle keep-alive connections 30 s, stalls ``STALL`` seconds.
"""

from __future__ import annotations

import asyncio
import copy
import json
import random
import re
import threading
import time
import zlib
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

STALL = 3.6  # seconds: past the proxy's 3 s first-byte and idle timeouts of the fuzz config
SLOW_MAX = 0.3  # seconds: the longest "slow first byte"
SEED_RE = re.compile(rb"seed:(\d{1,12})")
TOOL_NAME = "get_weather"
TOOL_ARGS = '{"city": "Paris", "days": 3, "units": "metric", "note": "caf\\u00e9 \\ud83d\\ude00"}'
TEXTS = (
    "It is sunny in Paris.",
    "Let me check the weather for you.",
    "Caf\u00e9 \u2014 \u65e5\u672c\u8a9e \U0001f600 done.",
    "Line one.\nLine two.\n\nLine four with a tab\t.",
    "",
)


# ---------------------------------------------------------------------------------------
# Value fuzzing (used for answers here and for request bodies by the fuzz client)
# ---------------------------------------------------------------------------------------


class Raw:
    """Bytes spliced verbatim into a serialised document: deep nesting (which no recursive
    serialiser can build), invalid UTF-8, NaN, numbers out of range."""

    __slots__ = ("data", "label")

    def __init__(self, data: bytes, label: str) -> None:
        self.data = data
        self.label = label


def dumps(obj: Any) -> bytes:
    """JSON bytes of ``obj`` (ASCII, compact) with every ``Raw`` spliced in as is."""
    raws: list[bytes] = []

    def default(o: Any) -> str:
        if isinstance(o, Raw):
            raws.append(o.data)
            return f"\x00raw{len(raws) - 1}\x00"
        raise TypeError(type(o).__name__)

    text = json.dumps(obj, default=default, separators=(",", ":"), allow_nan=True).encode()
    if not raws:
        return text
    parts = re.split(rb'"\\u0000raw(\d+)\\u0000"', text)
    out = bytearray()
    for i, part in enumerate(parts):
        out += raws[int(part)] if i % 2 else part
    return bytes(out)


DEPTHS = (8, 64, 254, 255, 256, 300, 600, 1000, 1023, 1024, 1025, 1500, 2000)


def deep(rng: random.Random, depth: int | None = None) -> Raw:
    d = depth if depth is not None else rng.choice(DEPTHS)
    if rng.random() < 0.5:
        return Raw(b"[" * d + b"]" * d, f"deep_list{d}")
    return Raw(b'{"a":' * d + b"1" + b"}" * d, f"deep_obj{d}")


def huge_string(rng: random.Random) -> str:
    n = rng.choice((4096, 65536, 300_000, 1 << 20))
    return ("abcdefghij" * (n // 10 + 1))[:n]


def junk_value(rng: random.Random, *, big: bool = True) -> tuple[Any, str]:
    """A value of a wrong type / shape / encoding, and its label for reports."""
    k = rng.randrange(30 if big else 26)
    v: Any
    if k == 0:
        v = None
    elif k == 1:
        v = True
    elif k == 2:
        v = False
    elif k == 3:
        v = 0
    elif k == 4:
        v = -1
    elif k == 5:
        v = 2**63 - 1
    elif k == 6:
        v = 2**64 + 7
    elif k == 7:
        v = 1.5e308
    elif k == 8:
        v = Raw(rng.choice((b"1e999", b"NaN", b"-Infinity", b"-0.0e-999")), "bad_number")
    elif k == 9:
        v = ""
    elif k == 10:
        v = "\x00\x1f\u2028\u2029\ufeff"
    elif k == 11:
        v = "caf\u00e9 \U0001f600 \u65e5\u672c"
    elif k == 12:
        v = Raw(b'"\\ud800 lone"', "lone_surrogate")
    elif k == 13:
        v = Raw(b'"\xff\xfe\xc0\x80 bad utf8"', "invalid_utf8")
    elif k == 14:
        v = Raw('"raw caf\u00e9 \U0001f600"'.encode(), "raw_utf8")
    elif k == 15:
        v = []
    elif k == 16:
        v = {}
    elif k == 17:
        v = [None, 1, "a", {"b": []}]
    elif k == 18:
        v = {"type": "unknown_type", "x": [1, 2], "": None}
    elif k == 19:
        v = "seedless text"
    elif k == 20:
        v = 3.25
    elif k == 21:
        v = "123"
    elif k == 22:
        v = ["a"] * 50
    elif k == 23:
        v = {"text": None, "type": None, "id": None}
    elif k == 24:
        v = deep(rng, rng.choice((8, 64, 254, 256)))
    elif k == 25:
        v = "x" * 300
    elif k == 26:
        v = deep(rng)
    elif k == 27:
        v = huge_string(rng)
    elif k == 28:
        v = list(range(rng.choice((1000, 20000))))
    else:
        v = {f"k{i}": i for i in range(rng.choice((100, 5000)))}
    return v, _label(v)


def _label(v: Any) -> str:
    if isinstance(v, Raw):
        return v.label
    if isinstance(v, str):
        return f"str[{len(v)}]" if len(v) > 40 else repr(v)
    if isinstance(v, (list, dict)):
        return f"{type(v).__name__}[{len(v)}]" if len(v) > 4 else json.dumps(v)[:40]
    return repr(v)


def json_paths(obj: Any, limit: int = 4000) -> list[tuple[Any, Any, str]]:
    """(container, key, dotted path) of every value below ``obj`` (iterative, bounded)."""
    out: list[tuple[Any, Any, str]] = []
    stack: list[tuple[Any, str]] = [(obj, "")]
    while stack and len(out) < limit:
        node, path = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            p = f"{path}.{k}" if path else str(k)
            out.append((node, k, p))
            if isinstance(v, (dict, list)):
                stack.append((v, p))
    return out


def mutate_paths(obj: Any, rng: random.Random, n: int, *, big: bool = True) -> list[str]:
    """Apply ``n`` mutations in place at random JSON paths of ``obj``: replace a value with
    a junk one, delete a key, or add an unknown one.  Returns their descriptions."""
    done: list[str] = []
    for _ in range(n):
        paths = json_paths(obj)
        if not paths:
            break
        node, key, path = rng.choice(paths)
        r = rng.random()
        if r < 0.12 and isinstance(node, dict):
            del node[key]
            done.append(f"del {path}")
        elif r < 0.2 and isinstance(node, dict):
            v, label = junk_value(rng, big=big)
            node[f"x_unknown_{rng.randrange(100)}"] = v
            done.append(f"add {path}~x_unknown={label}")
        else:
            v, label = junk_value(rng, big=big)
            node[key] = v
            done.append(f"{path}={label}")
    return done


def _weighted(rng: random.Random, table: tuple[tuple[str, float], ...]) -> str:
    total = sum(w for _, w in table)
    x = rng.random() * total
    for name, w in table:
        x -= w
        if x < 0:
            return name
    return table[-1][0]


# ---------------------------------------------------------------------------------------
# Valid answers
# ---------------------------------------------------------------------------------------

CHAT_CREATED = 1_700_000_000


def _pieces(rng: random.Random, text: str) -> list[str]:
    if not text:
        return []
    out, i = [], 0
    while i < len(text):
        n = rng.randint(1, 8)
        out.append(text[i : i + n])
        i += n
    return out


def _call_id(rng: random.Random) -> str:
    return rng.choice(
        (
            f"call_{rng.getrandbits(64):016x}",
            "functions.get_weather:0",
            f"toolu_{rng.getrandbits(40):x}",
            "call 1/\u00e9",
        )
    )


@dataclass
class Answer:
    """One valid answer of the upstream, as its parts (so mutations can damage them)."""

    text: str
    reasoning: str
    tool: bool
    call_id: str
    args: str
    finish: str  # stop | length | tool_calls


def draw_answer(rng: random.Random) -> Answer:
    tool = rng.random() < 0.65
    return Answer(
        text=rng.choice(TEXTS),
        reasoning=rng.choice(("", "", "Thinking about the weather\u2026")),
        tool=tool,
        call_id=_call_id(rng),
        args=TOOL_ARGS,
        finish="tool_calls" if tool else rng.choice(("stop", "stop", "length")),
    )


def chat_events(rng: random.Random, a: Answer, model: str) -> list[tuple[str | None, Any]]:
    cid = f"chatcmpl-{rng.getrandbits(48):x}"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": CHAT_CREATED,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    ev: list[Any] = [chunk({"role": "assistant", "content": ""})]
    for p in _pieces(rng, a.reasoning):
        ev.append(chunk({"reasoning_content": p}))
    for p in _pieces(rng, a.text):
        ev.append(chunk({"content": p}))
    if a.tool:
        ev.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": a.call_id,
                            "type": "function",
                            "function": {"name": TOOL_NAME, "arguments": ""},
                        }
                    ]
                }
            )
        )
        for p in _pieces(rng, a.args):
            ev.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}))
    ev.append(chunk({}, a.finish))
    ev.append(
        {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": CHAT_CREATED,
            "model": model,
            "choices": [],
            "usage": {"prompt_tokens": 31, "completion_tokens": 17, "total_tokens": 48},
        }
    )
    return [(None, e) for e in ev] + [("[DONE]", None)]


def chat_body(rng: random.Random, a: Answer, model: str) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": a.text or None}
    if a.reasoning:
        msg["reasoning_content"] = a.reasoning
    if a.tool:
        msg["tool_calls"] = [
            {"id": a.call_id, "type": "function", "function": {"name": TOOL_NAME, "arguments": a.args}}
        ]
    return {
        "id": f"chatcmpl-{rng.getrandbits(48):x}",
        "object": "chat.completion",
        "created": CHAT_CREATED,
        "model": model,
        "choices": [{"index": 0, "message": msg, "finish_reason": a.finish}],
        "usage": {"prompt_tokens": 31, "completion_tokens": 17, "total_tokens": 48},
    }


def _usage() -> dict[str, Any]:
    return {
        "input_tokens": 31,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 17,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 48,
    }


def _response_obj(rid: str, model: str, status: str, output: list[Any], usage: Any = None) -> dict[str, Any]:
    obj = {
        "id": rid,
        "object": "response",
        "created_at": CHAT_CREATED,
        "status": status,
        "model": model,
        "output": output,
        "usage": usage,
    }
    if status == "incomplete":
        obj["incomplete_details"] = {"reason": "max_output_tokens"}
    return obj


def responses_items(a: Answer) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if a.reasoning:
        items.append({"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": a.reasoning}]})
    items.append(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": a.text, "annotations": []}],
        }
    )
    if a.tool:
        items.append(
            {
                "id": "fc_1",
                "type": "function_call",
                "call_id": a.call_id,
                "name": TOOL_NAME,
                "arguments": a.args,
                "status": "completed",
            }
        )
    return items


def responses_events(rng: random.Random, a: Answer, model: str) -> list[tuple[str | None, Any]]:
    rid = f"resp_{rng.getrandbits(64):016x}"
    ev: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response_obj(rid, model, "in_progress", [])},
        {"type": "response.in_progress", "response": _response_obj(rid, model, "in_progress", [])},
    ]
    items = responses_items(a)
    for idx, item in enumerate(items):
        iid = item["id"]
        if item["type"] == "reasoning":
            ev.append({"type": "response.output_item.added", "output_index": idx, "item": {**item, "summary": []}})
            ev.append(
                {
                    "type": "response.reasoning_summary_part.added",
                    "item_id": iid,
                    "output_index": idx,
                    "summary_index": 0,
                    "part": {"type": "summary_text", "text": ""},
                }
            )
            for p in _pieces(rng, a.reasoning):
                ev.append(
                    {
                        "type": "response.reasoning_summary_text.delta",
                        "item_id": iid,
                        "output_index": idx,
                        "summary_index": 0,
                        "delta": p,
                    }
                )
            ev.append(
                {
                    "type": "response.reasoning_summary_text.done",
                    "item_id": iid,
                    "output_index": idx,
                    "summary_index": 0,
                    "text": a.reasoning,
                }
            )
            ev.append(
                {
                    "type": "response.reasoning_summary_part.done",
                    "item_id": iid,
                    "output_index": idx,
                    "summary_index": 0,
                    "part": {"type": "summary_text", "text": a.reasoning},
                }
            )
        elif item["type"] == "message":
            ev.append(
                {
                    "type": "response.output_item.added",
                    "output_index": idx,
                    "item": {**item, "status": "in_progress", "content": []},
                }
            )
            ev.append(
                {
                    "type": "response.content_part.added",
                    "item_id": iid,
                    "output_index": idx,
                    "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": []},
                }
            )
            for p in _pieces(rng, a.text):
                ev.append(
                    {
                        "type": "response.output_text.delta",
                        "item_id": iid,
                        "output_index": idx,
                        "content_index": 0,
                        "delta": p,
                    }
                )
            ev.append(
                {
                    "type": "response.output_text.done",
                    "item_id": iid,
                    "output_index": idx,
                    "content_index": 0,
                    "text": a.text,
                }
            )
            ev.append(
                {
                    "type": "response.content_part.done",
                    "item_id": iid,
                    "output_index": idx,
                    "content_index": 0,
                    "part": {"type": "output_text", "text": a.text, "annotations": []},
                }
            )
        else:
            ev.append(
                {
                    "type": "response.output_item.added",
                    "output_index": idx,
                    "item": {**item, "arguments": "", "status": "in_progress"},
                }
            )
            for p in _pieces(rng, a.args):
                ev.append(
                    {"type": "response.function_call_arguments.delta", "item_id": iid, "output_index": idx, "delta": p}
                )
            ev.append(
                {
                    "type": "response.function_call_arguments.done",
                    "item_id": iid,
                    "output_index": idx,
                    "name": TOOL_NAME,
                    "arguments": a.args,
                }
            )
        ev.append({"type": "response.output_item.done", "output_index": idx, "item": item})
    if a.finish == "length":
        ev.append({"type": "response.incomplete", "response": _response_obj(rid, model, "incomplete", items, _usage())})
    else:
        ev.append({"type": "response.completed", "response": _response_obj(rid, model, "completed", items, _usage())})
    for i, e in enumerate(ev):
        e["sequence_number"] = i
    return [(e["type"], e) for e in ev]


def responses_body(rng: random.Random, a: Answer, model: str) -> dict[str, Any]:
    rid = f"resp_{rng.getrandbits(64):016x}"
    return _response_obj(
        rid, model, "incomplete" if a.finish == "length" else "completed", responses_items(a), _usage()
    )


def valid_events(rng: random.Random, protocol: str, a: Answer, model: str) -> list[tuple[str | None, Any]]:
    return chat_events(rng, a, model) if protocol == "chat" else responses_events(rng, a, model)


def valid_body(rng: random.Random, protocol: str, a: Answer, model: str) -> dict[str, Any]:
    return chat_body(rng, a, model) if protocol == "chat" else responses_body(rng, a, model)


def frame(name: str | None, obj: Any) -> bytes:
    """One SSE event: ``data: [DONE]``, ``data: <json>`` (Chat) or ``event:`` + ``data:`` lines."""
    if name == "[DONE]":
        return b"data: [DONE]\n\n"
    data = obj if isinstance(obj, bytes) else dumps(obj)
    if name is None:
        return b"data: " + data + b"\n\n"
    return b"event: " + name.encode() + b"\ndata: " + data + b"\n\n"


# ---------------------------------------------------------------------------------------
# Plans
# ---------------------------------------------------------------------------------------


@dataclass
class Plan:
    """What the server does for one request: ``head`` (status line + headers) unless None,
    ``parts`` of the body (written one by one, ``pauses`` seconds before each), then either
    a clean end or ``cut`` (close the connection)."""

    seed: int
    behaviour: str
    desc: list[str] = field(default_factory=list)
    pre_delay: float = 0.0  # before anything is written
    head: bytes | None = None
    parts: list[bytes] = field(default_factory=list)
    pauses: list[float] = field(default_factory=list)
    framing: str = "length"  # length | chunked | close
    cut: bool = False  # close instead of finishing the message
    stall_after: int | None = None  # after this many parts: STALL seconds of silence, then close

    def describe(self) -> str:
        size = sum(len(p) for p in self.parts)
        extra = f" slow={self.pre_delay:.2f}s" if 0 < self.pre_delay < STALL else ""
        return f"{self.behaviour}[{'; '.join(self.desc)}] framing={self.framing} bytes={size}{extra}"


def _head(status: int, reason: str, headers: list[tuple[str, str | bytes]]) -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}".encode()]
    for k, v in headers:
        lines.append(k.encode() + b": " + (v if isinstance(v, bytes) else v.encode()))
    return b"\r\n".join(lines) + b"\r\n\r\n"


REASONS = {
    200: "OK",
    201: "Created",
    204: "No Content",
    206: "Partial Content",
    302: "Found",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    413: "Payload Too Large",
    418: "I'm a teapot",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    529: "Overloaded",
    599: "Odd",
}

RETRY_VALUES = (
    "inf",
    "-inf",
    "nan",
    "1e999",
    "-5",
    "0",
    "3.7",
    "  12  ",
    "Wed, 21 Oct 2015 07:28:00 GMT",
    "99999999999999999999999",
    "0x1A",
    "",
    "1_000",
    "\u0663",
    "12, 13",
    "NaN",
    "1e-9",
)


def _frame_stream(rng: random.Random, events: list[tuple[str | None, Any]]) -> list[bytes]:
    return [frame(n, o) for n, o in events]


def _splits(rng: random.Random, data: bytes, plan: Plan) -> None:
    """Cut ``data`` into the plan's parts: whole, per-frame-ish, or random small splits."""
    mode = rng.random()
    if mode < 0.35 or not data:
        plan.parts.append(data)
        plan.pauses.append(0.0)
        return
    tiny = mode > 0.75
    i = 0
    count = 0
    while i < len(data):
        n = rng.randint(1, 24) if tiny else rng.randint(16, 2048)
        plan.parts.append(data[i : i + n])
        plan.pauses.append(rng.choice((0.0, 0.0, 0.0, 0.001, 0.003)) if count < 60 else 0.0)
        i += n
        count += 1
        if count > 4000:  # bounded number of writes
            plan.parts.append(data[i:])
            plan.pauses.append(0.0)
            break
    plan.desc.append("tiny_splits" if tiny else "splits")


JUNK_FRAMES: tuple[bytes, ...] = (
    b"data: not json\n\n",
    b"data: [1,2,3]\n\n",
    b'data: "a string"\n\n',
    b"data: null\n\n",
    b"data: 42\n\n",
    b": keep-alive\n\n",
    b"event: mystery\ndata: {}\n\n",
    b"data: {}\n\n",
    b'data: {"type": null}\n\n',
    b'data: {"type": 17, "choices": "x"}\n\n',
    b'data: {"choices": [null, 1, "x"]}\n\n',
    b"retry: 10\n\n",
    b"id: 7\n\n",
    b"garbage line without colon\n\n",
    b"data:\n\n",
    b"\n\n\n",
    b"data: \xff\xfe\xfd\n\n",
    b'data: {"a":\n\n',
    b'data: {"type":"response.output_text.delta","delta":5,"item_id":null}\n\n',
    b'event: response.output_item.added\ndata: {"type":"response.output_item.added","item":null}\n\n',
    b'event: response.output_item.done\ndata: {"type":"response.output_item.done","output_index":-1,"item":{"type":"function_call"}}\n\n',
    b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":99999999999}]}}]}\n\n',
    b'data: {"object":"chat.completion.chunk","choices":[{"index":-5,"delta":{"content":7}}]}\n\n',
    b'data: {"choices":[{"delta":{"tool_calls":"nope"}}]}\n\n',
    b"data: " + b"[" * 1500 + b"]" * 1500 + b"\n\n",
    b"data: " + b'{"a":' * 600 + b"1" + b"}" * 600 + b"\n\n",
    b'data: {"usage": {"prompt_tokens": "many", "completion_tokens": -1, "total_tokens": 1e308}}\n\n',
    b"event: \xff\xfe\ndata: {}\n\n",
    b'data: {"type":"error"}\n\n',
    b'event: response.failed\ndata: {"type":"response.failed","response":"gone"}\n\n',
)

FAKE_TERMINALS: tuple[bytes, ...] = (
    b'event: response.completed\ndata: {"type":"response.completed"}\n\n',
    b'event: response.completed\ndata: {"type":"response.completed","response":null}\n\n',
    b'event: response.incomplete\ndata: {"type":"response.incomplete","response":{"status":7,"output":"x"}}\n\n',
    b'event: response.failed\ndata: {"type":"response.failed","response":{"error":[1]}}\n\n',
    b"data: [DONE]\n\n",
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":{"weird":1}}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\n',
)


def _error_event(protocol: str, echo: str) -> bytes:
    msg = f"internal failure while streaming; request had Authorization: {echo}"
    if protocol == "chat":
        return frame(None, {"error": {"message": msg, "type": "server_error", "code": "internal_error_x"}})
    return frame("error", {"type": "error", "code": "server_error", "message": msg, "param": None}) + frame(
        "response.failed",
        {
            "type": "response.failed",
            "response": {
                "id": "resp_failed",
                "object": "response",
                "status": "failed",
                "output": [],
                "error": {"code": "server_error", "message": msg},
            },
        },
    )


def _mutate_stream(
    rng: random.Random, protocol: str, events: list[tuple[str | None, Any]], plan: Plan, echo: str
) -> list[bytes]:
    ops = rng.sample(
        (
            "json_paths",
            "junk",
            "drop",
            "duplicate",
            "reorder",
            "no_terminal",
            "fake_terminal",
            "line_ends",
            "error_event",
            "huge_delta",
            "many_deltas",
            "bad_index",
            "event_names",
        ),
        k=rng.choice((1, 1, 2, 2, 3)),
    )
    body_events = [e for e in events if e[0] != "[DONE]"]
    done = [e for e in events if e[0] == "[DONE]"]
    if "huge_delta" in ops or "many_deltas" in ops:
        at = rng.randrange(1, max(2, len(body_events) - 1))

        def mk(t: str) -> tuple[str | None, dict[str, Any]]:
            if protocol == "chat":
                return None, {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": t}}]}
            return "response.output_text.delta", {
                "type": "response.output_text.delta",
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "delta": t,
            }

        if "huge_delta" in ops:
            body_events.insert(at, mk(huge_string(rng)))
        if "many_deltas" in ops:
            n = rng.choice((500, 3000))
            body_events[at:at] = [mk("y") for _ in range(n)]
            plan.desc.append(f"many_deltas({n})")
    if "bad_index" in ops:
        bad = rng.choice((10**9, -1, "0", None, 2**63, 1.5))
        if protocol == "chat":
            body_events.insert(
                rng.randrange(1, len(body_events)),
                (
                    None,
                    {
                        "object": "chat.completion.chunk",
                        "choices": [
                            {
                                "index": 0,
                                "delta": {
                                    "tool_calls": [
                                        {
                                            "index": bad,
                                            "id": "call_bad",
                                            "type": "function",
                                            "function": {"name": "x", "arguments": "{"},
                                        }
                                    ]
                                },
                            }
                        ],
                    },
                ),
            )
        else:
            body_events.insert(
                rng.randrange(1, len(body_events)),
                (
                    "response.output_item.added",
                    {
                        "type": "response.output_item.added",
                        "output_index": bad,
                        "item": {"id": "fc_bad", "type": "function_call", "call_id": "c", "name": "x", "arguments": ""},
                    },
                ),
            )
        plan.desc.append(f"bad_index={bad!r}")
    if "json_paths" in ops:
        for _ in range(rng.choice((1, 1, 2, 3))):
            i = rng.randrange(len(body_events))
            name, obj = body_events[i]
            obj = copy.deepcopy(obj)  # a private copy: events share nested objects
            desc = mutate_paths(obj, rng, rng.choice((1, 1, 2)))
            body_events[i] = (name, obj)
            plan.desc.append(f"ev{i}:{','.join(desc)}")
    if "event_names" in ops and protocol == "responses":
        i = rng.randrange(len(body_events))
        body_events[i] = (
            rng.choice(("", "response.unknown", "response.completed", "error", "x" * 300)),
            body_events[i][1],
        )
        plan.desc.append(f"event_name@{i}")
    frames = [frame(n, o) for n, o in body_events] + [frame(n, o) for n, o in done]
    if "error_event" in ops:
        at = rng.randrange(1, len(frames))
        frames = frames[:at] + [_error_event(protocol, echo)]
        plan.desc.append(f"error_event@{at}")
    if "junk" in ops:
        for _ in range(rng.randint(1, 3)):
            j = rng.randrange(len(JUNK_FRAMES))
            at = rng.randrange(len(frames) + 1)
            frames.insert(at, JUNK_FRAMES[j])
            plan.desc.append(f"junk{j}@{at}")
    if "drop" in ops:
        for _ in range(rng.randint(1, 3)):
            if len(frames) > 1:
                at = rng.randrange(len(frames))
                del frames[at]
                plan.desc.append(f"drop@{at}")
    if "duplicate" in ops:
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(frames))
            frames.insert(at, frames[at])
            plan.desc.append(f"dup@{at}")
    if "reorder" in ops and len(frames) > 2:
        at = rng.randrange(len(frames) - 1)
        frames[at], frames[at + 1] = frames[at + 1], frames[at]
        plan.desc.append(f"swap@{at}")
    if "no_terminal" in ops:
        n = rng.choice((1, 2))
        frames = frames[:-n] if len(frames) > n else frames
        plan.desc.append(f"no_terminal(-{n})")
    if "fake_terminal" in ops:
        j = rng.randrange(len(FAKE_TERMINALS))
        at = rng.randrange(len(frames) + 1)
        frames.insert(at, FAKE_TERMINALS[j])
        plan.desc.append(f"fake_terminal{j}@{at}")
    if "line_ends" in ops:
        sep = rng.choice((b"\r\n", b"\r"))
        frames = [f.replace(b"\n", sep) for f in frames]
        plan.desc.append(f"line_ends={sep!r}")
    return frames


def _mutate_json_body(rng: random.Random, protocol: str, obj: dict[str, Any], plan: Plan, echo: str) -> bytes:
    k = rng.randrange(11)
    if k <= 3:
        desc = mutate_paths(obj, rng, rng.choice((1, 1, 2, 3)))
        plan.desc.append("paths:" + ",".join(desc))
        return dumps(obj)
    data = dumps(obj)
    if k == 4:
        cut = rng.randrange(len(data))
        plan.desc.append(f"truncated@{cut}")
        return data[:cut]
    if k == 5:
        plan.desc.append("not_json")
        return rng.choice((b"not json at all", b"<html><body>oops</body></html>", b"\xff\xfe\x00garbage", b"{", b"nul"))
    if k == 6:
        plan.desc.append("not_object")
        return rng.choice((b"[]", b"[" + data + b"]", b'"string"', b"null", b"42", b"true"))
    if k == 7:
        plan.desc.append("deep")
        return b'{"id":"x","object":"chat.completion","choices":' + deep(rng).data + b"}"
    if k == 8:
        plan.desc.append("empty")
        return b""
    if k == 9:
        plan.desc.append("huge_text")
        return dumps(valid_body(rng, protocol, Answer(huge_string(rng), "", False, "c", "{}", "stop"), "m"))
    plan.desc.append("wrong_protocol_fields")
    other = "responses" if protocol == "chat" else "chat"
    return dumps(
        {**valid_body(rng, other, draw_answer(rng), "m"), "error": rng.choice((None, {}, "x", {"message": echo}))}
    )


def _http_error(rng: random.Random, plan: Plan, echo: str) -> None:
    status = rng.choice((400, 400, 401, 403, 404, 408, 413, 418, 422, 429, 429, 500, 500, 502, 503, 503, 504, 529, 599))
    msg = rng.choice(
        (
            "Something went wrong",
            "Rate limit reached for requests",
            "This model's maximum context length is 8192 tokens",
            "The engine is currently overloaded",
            "Insufficient Balance",
            f"invalid header Authorization: {echo}",
            f"bad key {echo.partition(' ')[2]}",
            "",
            "x" * 100_000,
            "caf\u00e9 \U0001f600",
            "Prompt exceeds max length",
        )
    )
    code: Any = rng.choice(
        (
            "rate_limit_exceeded",
            "context_length_exceeded",
            "1261",
            1261,
            None,
            "",
            "x" * 100,
            "Some Sentence Here",
            "invalid_value",
            echo.partition(" ")[2],
            "server_error",
            "engine_overloaded_error",
            ["list"],
            {"o": 1},
            "insufficient_quota",
        )
    )
    k = rng.randrange(14)
    ctype = "application/json"
    if k <= 3:
        body = dumps(
            {
                "error": {
                    "message": msg,
                    "type": rng.choice(("invalid_request_error", "server_error", None, 5)),
                    "param": rng.choice((None, "messages", echo, 7)),
                    "code": code,
                }
            }
        )
        shape = "openai"
    elif k == 4:
        body, shape = dumps({"error": msg, "code": code}), "xai"
    elif k == 5:
        body, shape = dumps({"detail": rng.choice((msg, [{"loc": ["body"], "msg": msg}]))}), "fastapi"
    elif k == 6:
        body, shape = dumps({"message": msg, "__type": "com.amazon.coral#ThrottlingException"}), "aws"
    elif k == 7:
        body = dumps(
            rng.choice(
                (
                    {"error": None},
                    {"error": {"message": 123, "code": ["a"], "type": {}}},
                    [],
                    "str",
                    {"error": {"message": None, "innererror": "x"}},
                    {"error": []},
                )
            )
        )
        shape = "broken_json"
    elif k == 8:
        body, shape = b'{"error": ' + deep(rng).data + b"}", "deep_json"
        if rng.random() < 0.5:
            body = b'{"error": {"message": "m", "code": ' + deep(rng).data + b"}}"
    elif k == 9:
        ctype = rng.choice(("text/html", "text/html; charset=utf-8", "application/json"))
        body = (
            f"<!DOCTYPE html><html><head><title>{status}</title></head><body><h1>{status}</h1>"
            f"<pre>Authorization: {echo}</pre></body></html>"
        ).encode()
        shape = "html"
    elif k == 10:
        ctype = "text/plain"
        body = f"upstream connect error or disconnect/reset before headers. Authorization: {echo}\x00\x1b[31m".encode()
        shape = "text"
    elif k == 11:
        ctype = rng.choice(("application/json", "text/plain", ""))
        body, shape = b"", "empty"
    elif k == 12:
        ctype = rng.choice(("application/octet-stream", "application/json"))
        body, shape = bytes(rng.randrange(256) for _ in range(rng.choice((16, 700)))), "binary"
    else:
        body, shape = dumps({"error": {"message": msg, "code": code}}) + b"trailing junk", "json_trailing"
    headers: list[tuple[str, str | bytes]] = []
    if ctype:
        headers.append(("content-type", ctype))
    if rng.random() < 0.5:
        name = rng.choice(("retry-after", "retry-after-ms", "Retry-After"))
        val = rng.choice(RETRY_VALUES)
        headers.append((name, val.encode()))
        plan.desc.append(f"{name}={val!r}")
    if rng.random() < 0.1:
        headers.append(
            ("x-amzn-errortype", rng.choice(("ThrottlingException:http://x", "\u00e9\u00e9", "", "a" * 500)).encode())
        )
    plan.desc.insert(0, f"status={status} body={shape} code={code!r}"[:160])
    plan.head = _head(status, REASONS.get(status, "X"), headers + _framing_headers(rng, plan, len(body), stream=False))
    plan.parts, plan.pauses = [body], [0.0]


def _framing_headers(rng: random.Random, plan: Plan, length: int, *, stream: bool) -> list[tuple[str, str | bytes]]:
    r = rng.random()
    if stream:
        plan.framing = "chunked" if r < 0.6 else "close" if r < 0.85 else "length"
    else:
        plan.framing = "length" if r < 0.7 else "chunked" if r < 0.9 else "close"
    if plan.framing == "length":
        return [("content-length", str(length))]
    if plan.framing == "chunked":
        return [("transfer-encoding", "chunked")]
    return [("connection", "close")]


STREAM_TABLE = (
    ("valid", 31.0),
    ("mutated", 36.0),
    ("http_error", 14.0),
    ("json_error_200", 5.0),
    ("wrong_shape", 3.5),
    ("wrong_protocol", 3.0),
    ("odd_status", 2.0),
    ("hangup", 1.5),
    ("stall_head", 0.35),
    ("stall_body", 0.45),
)
JSON_TABLE = (
    ("valid", 34.0),
    ("mutated", 30.0),
    ("http_error", 14.0),
    ("json_error_200", 6.0),
    ("wrong_shape", 3.5),
    ("wrong_protocol", 3.0),
    ("odd_status", 2.0),
    ("hangup", 1.5),
    ("stall_head", 0.35),
    ("stall_body", 0.3),
)


def make_plan(
    seed: int, protocol: str, stream: bool, *, model: str = "fuzz-model", echo: str = "Bearer <none>"
) -> Plan:
    """The answer to a request carrying ``seed`` on ``protocol`` (chat | responses); a pure
    function of its arguments.  ``echo`` is the Authorization value the request carried,
    which some answers repeat (as real gateways do), in their body or a header."""
    rng = random.Random(f"upstream:{seed}:{protocol}:{int(stream)}")
    plan = _make_plan(rng, seed, protocol, stream, model, echo)
    if plan.head and plan.head.startswith(b"HTTP/1.1 ") and plan.head.endswith(b"\r\n\r\n") and rng.random() < 0.08:
        # a debugging gateway repeats the credentials it got in its answer headers
        plan.head = plan.head[:-2] + b"x-upstream-debug: received Authorization=" + echo.encode() + b"\r\n\r\n"
        plan.desc.append("header echoes Authorization")
    return plan


def _make_plan(rng: random.Random, seed: int, protocol: str, stream: bool, model: str, echo: str) -> Plan:
    behaviour = _weighted(rng, STREAM_TABLE if stream else JSON_TABLE)
    plan = Plan(seed=seed, behaviour=behaviour)
    plan.desc.append(f"{protocol}/{'stream' if stream else 'json'}")
    if rng.random() < 0.05:
        plan.pre_delay = round(rng.uniform(0.02, SLOW_MAX), 3)
    answer = draw_answer(rng)
    sse_type = rng.choice(("text/event-stream", "text/event-stream", "text/event-stream; charset=utf-8"))
    if behaviour == "http_error":
        _http_error(rng, plan, echo)
        return plan
    if behaviour == "hangup":
        k = rng.randrange(4)
        plan.head = (
            b"",
            b"HTTP/1.1 200 OK\r\nContent-Ty",
            b"HTTP/1.1 abc def\r\n\r\n",
            b"\x16\x03\x01garbage\r\n\r\n",
        )[k]
        plan.desc.append(("close_before_head", "close_inside_head", "bad_status_line", "tls_bytes")[k])
        plan.cut = True
        return plan
    if behaviour == "stall_head":
        plan.pre_delay = STALL
        plan.cut = True
        return plan
    if behaviour == "odd_status":
        status = rng.choice((201, 204, 206, 302))
        data = (
            b"".join(_frame_stream(rng, valid_events(rng, protocol, answer, model)))
            if stream
            else dumps(valid_body(rng, protocol, answer, model))
        )
        plan.desc.append(f"status={status}")
        hdrs: list[tuple[str, str | bytes]] = [("content-type", sse_type if stream else "application/json")]
        if status == 302:
            hdrs.append(("location", "http://127.0.0.1:9/elsewhere"))
        if status == 204:  # no body whatever the framing headers say: end the connection with it
            data = b""
            plan.framing = "close"
            hdrs.append(("connection", "close"))
        else:
            hdrs += _framing_headers(rng, plan, len(data), stream=stream)
        plan.head = _head(status, REASONS[status], hdrs)
        plan.parts, plan.pauses = [data], [0.0]
        return plan
    if behaviour == "json_error_200":
        err = {
            "error": {
                "message": rng.choice(("model overloaded", f"Authorization: {echo}", "Rate limit reached")),
                "type": rng.choice(("server_error", "invalid_request_error", None)),
                "code": rng.choice(("server_error", "rate_limit_exceeded", None, 500, "bad_thing")),
            }
        }
        if stream and rng.random() < 0.6:
            data = frame(None, err) if protocol == "chat" else frame("error", {"type": "error", **err["error"]})
            if rng.random() < 0.5:
                data = frame(*valid_events(rng, protocol, answer, model)[0]) + data
            ctype = sse_type
            plan.desc.append("sse_error_event")
        else:
            data, ctype = dumps(err), "application/json"
            plan.desc.append("json_error_object")
        plan.head = _head(200, "OK", [("content-type", ctype)] + _framing_headers(rng, plan, len(data), stream=stream))
        if stream:
            _splits(rng, data, plan)
        else:
            plan.parts, plan.pauses = [data], [0.0]
        return plan
    if behaviour in ("wrong_shape", "wrong_protocol"):
        as_stream = (not stream) if behaviour == "wrong_shape" else stream
        proto = protocol if behaviour == "wrong_shape" else ("responses" if protocol == "chat" else "chat")
        if as_stream:
            data = b"".join(_frame_stream(rng, valid_events(rng, proto, answer, model)))
            ctype = sse_type
        else:
            data = dumps(valid_body(rng, proto, answer, model))
            ctype = "application/json"
        plan.desc.append(f"sent {proto}/{'stream' if as_stream else 'json'}")
        plan.head = _head(
            200, "OK", [("content-type", ctype)] + _framing_headers(rng, plan, len(data), stream=as_stream)
        )
        _splits(rng, data, plan)
        return plan
    # valid, mutated, stall_body
    if stream:
        events = valid_events(rng, protocol, answer, model)
        if behaviour == "mutated":
            frames = _mutate_stream(rng, protocol, events, plan, echo)
        else:
            frames = _frame_stream(rng, events)
        data = b"".join(frames)
        ctype = sse_type
        if behaviour == "mutated" and rng.random() < 0.08:
            ctype = rng.choice(("application/json", "text/plain", "text/html"))
            plan.desc.append(f"content-type={ctype}")
        hdrs: list[tuple[str, str | bytes]] = [("content-type", ctype)] if rng.random() > 0.02 else []
        plan.head = _head(200, "OK", hdrs + _framing_headers(rng, plan, len(data), stream=True))
        if behaviour == "stall_body":
            plan.parts = frames[:2]
            plan.pauses = [0.0] * len(plan.parts)
            plan.stall_after = len(plan.parts)
            plan.cut = True
            return plan
        _splits(rng, data, plan)
        if behaviour == "mutated" and rng.random() < 0.25:
            _cut(rng, plan)
        return plan
    obj = valid_body(rng, protocol, answer, model)
    data = _mutate_json_body(rng, protocol, obj, plan, echo) if behaviour == "mutated" else dumps(obj)
    plan.head = _head(
        200, "OK", [("content-type", "application/json")] + _framing_headers(rng, plan, len(data), stream=False)
    )
    if behaviour == "stall_body":
        half = len(data) // 2
        plan.parts, plan.pauses = [data[:half]], [0.0]
        plan.stall_after = 1
        plan.cut = True
        return plan
    _splits(rng, data, plan)
    if behaviour == "mutated" and rng.random() < 0.15:
        _cut(rng, plan)
    return plan


def _cut(rng: random.Random, plan: Plan) -> None:
    """Close the connection after a random prefix of the body."""
    total = sum(len(p) for p in plan.parts)
    if total < 2:
        return
    keep = rng.randrange(1, total)
    parts, pauses, size = [], [], 0
    for p, d in zip(plan.parts, plan.pauses):
        if size + len(p) >= keep:
            parts.append(p[: keep - size])
            pauses.append(d)
            break
        parts.append(p)
        pauses.append(d)
        size += len(p)
    plan.parts, plan.pauses = parts, pauses
    plan.cut = True
    plan.desc.append(f"cut@{keep}/{total}")


# ---------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------


class _BadRequest(Exception):
    pass


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


async def read_request(reader: asyncio.StreamReader, idle: float) -> Received | None:
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), idle)
    except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
        return None
    except asyncio.LimitOverrunError:
        raise _BadRequest("request head too large") from None
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, _ = lines[0].split(" ", 2)
    except ValueError:
        raise _BadRequest(f"bad request line {lines[0][:80]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        k, _, v = line.partition(":")
        headers.setdefault(k.strip().lower(), v.strip())
    body = b""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            size_line = await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)
            n = int(size_line.split(b";")[0].strip() or b"0", 16)
            if n == 0:
                await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)
                break
            parts.append(await asyncio.wait_for(reader.readexactly(n + 2), 10))
        body = b"".join(p[:-2] for p in parts)
    elif headers.get("content-length"):
        n = int(headers["content-length"])
        if n > 64 << 20:
            raise _BadRequest("request body too large")
        body = await asyncio.wait_for(reader.readexactly(n), 10)
    return Received(method, target.split("?", 1)[0], headers, body)


def seed_of(body: bytes) -> int:
    m = SEED_RE.search(body)
    return int(m.group(1)) if m else zlib.crc32(body)


class FuzzUpstream:
    def __init__(self, *, client_key: str = "", upstream_key: str = "", idle: float = 30.0) -> None:
        self.client_key = client_key
        self.upstream_key = upstream_key
        self.idle = idle
        self.port = 0
        self.played: dict[int, str] = {}
        self.sent: dict[int, bytes] = {}  # seed -> the head and first bytes of the answer
        # seed -> the longest this server kept silent of its own accord (seconds): from the
        # request read to its first write, or between two writes, less the plan's pauses and
        # the waits for the proxy to read (a loaded machine can starve this thread)
        self.late: dict[int, float] = {}
        self.leaks: list[str] = []
        self.bad_auth: list[str] = []
        self.errors: list[str] = []
        self.requests = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ready = threading.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FuzzUpstream:
        self._thread = threading.Thread(target=self._run, name="fuzz-upstream", daemon=True)
        self._thread.start()
        if not self._ready.wait(10) or not self.port:
            raise RuntimeError("fuzz upstream did not start")
        return self

    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)

        async def main() -> None:
            self._server = await asyncio.start_server(self._conn, "127.0.0.1", 0, limit=1 << 20, backlog=256)
            self.port = self._server.sockets[0].getsockname()[1]
            self._ready.set()

        try:
            loop.run_until_complete(main())
            loop.run_forever()
        finally:
            self._ready.set()
            loop.close()

    def stop(self) -> None:
        loop = self._loop
        if loop is None or self._thread is None:
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for t in list(self._tasks):
                t.cancel()
            if self._tasks:
                await asyncio.wait(list(self._tasks), timeout=3)
            loop.stop()

        with suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(shutdown(), loop)
        self._thread.join(10)
        self._thread = None

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            while True:
                req = await read_request(reader, self.idle)
                if req is None:
                    break
                if not await self._answer(req, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, asyncio.CancelledError, _BadRequest):
            pass
        except Exception as e:  # a bug of this server: reported to the test
            if len(self.errors) < 100:
                self.errors.append(f"{type(e).__name__}: {e}")
        finally:
            if task is not None:
                self._tasks.discard(task)
            # a graceful close, so that what a plan wrote (a cut stream too) reaches the proxy
            # before the FIN; bounded, then the socket is dropped
            writer.close()
            with suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 2)
            with suppress(Exception):
                writer.transport.abort()

    async def _answer(self, req: Received, writer: asyncio.StreamWriter) -> bool:
        """Play the plan for one request; True when the connection may serve another."""
        late = Silence()
        self.requests += 1
        if self.client_key and (
            self.client_key.encode() in req.body or any(self.client_key in v for v in req.headers.values())
        ):
            if len(self.leaks) < 100:
                self.leaks.append(f"{req.path}: client key reached the upstream")
        auth = req.headers.get("authorization", "")
        if self.upstream_key and auth != f"Bearer {self.upstream_key}" and len(self.bad_auth) < 100:
            self.bad_auth.append(f"{req.path}: authorization={auth[:40]!r}")
        if req.method != "POST" or not req.path.endswith(("/chat/completions", "/responses")):
            body = b'{"error":{"message":"not found","type":"invalid_request_error","code":"not_found"}}'
            writer.write(
                _head(404, "Not Found", [("content-type", "application/json"), ("content-length", str(len(body)))])
                + body
            )
            await writer.drain()
            return True
        protocol = "chat" if req.path.endswith("/chat/completions") else "responses"
        stream = False
        model = "fuzz-model"
        try:
            obj = json.loads(req.body)
            if isinstance(obj, dict):
                stream = obj.get("stream") is True
                if isinstance(obj.get("model"), str):
                    model = obj["model"][:100]
        except Exception:  # includes RecursionError on deep bodies: the plan does not need the body
            pass
        seed = seed_of(req.body)
        plan = make_plan(seed, protocol, stream, model=model, echo=auth or "Bearer <none>")
        if len(self.played) > 200_000:
            self.played.clear()
            self.sent.clear()
            self.late.clear()
        self.played[seed] = plan.describe()
        self.sent[seed] = (plan.head or b"") + b"".join(plan.parts)[:600]
        try:
            return await play(plan, writer, late)
        finally:
            self.late[seed] = late.longest


class Silence:
    """The longest stretch between two moments a server is ready to write (``mark``), less
    what it waits for on purpose (``waited``): how long it kept silent of its own accord."""

    def __init__(self) -> None:
        self.at = time.monotonic()
        self.longest = 0.0

    def mark(self) -> None:
        now = time.monotonic()
        self.longest = max(self.longest, now - self.at)
        self.at = now

    def waited(self) -> None:
        self.at = time.monotonic()


async def play(plan: Plan, writer: asyncio.StreamWriter, late: Silence | None = None) -> bool:
    late = late or Silence()
    if plan.pre_delay:
        await asyncio.sleep(plan.pre_delay)
        late.waited()
    if plan.head is None:  # stall_head
        return False
    if plan.head:
        late.mark()
        writer.write(plan.head)
    if plan.behaviour == "hangup":
        await writer.drain()
        return False
    chunked = plan.framing == "chunked"
    for i, (part, pause) in enumerate(zip(plan.parts, plan.pauses)):
        if plan.stall_after is not None and i == plan.stall_after:
            break
        if pause:
            await writer.drain()
            await asyncio.sleep(pause)
            late.waited()
        if not part:
            continue
        late.mark()
        writer.write(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
        await writer.drain()
        late.waited()  # (a drain waits for the proxy to read: its time, not ours)
    if plan.stall_after is not None:
        await writer.drain()
        await asyncio.sleep(STALL)
        return False
    if plan.cut:
        await writer.drain()
        return False
    if chunked:
        late.mark()
        writer.write(b"0\r\n\r\n")
    await writer.drain()
    return plan.framing != "close"
