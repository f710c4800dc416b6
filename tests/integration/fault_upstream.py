"""Fault upstream: a loopback HTTP/1.1 model server that misbehaves one scripted way per request.

Theory of operation
-------------------
``FaultUpstream().start()`` (in the test's own event loop) serves raw HTTP on 127.0.0.1,
port 0 → ``.port``.  A provider points at ``{base}/bad/v1`` or ``{base}/good/v1``; the
request path says which, and its protocol (``…/chat/completions``, ``…/responses`` or
Anthropic's ``…/messages``).
``/good`` always answers validly.  ``/bad`` reads the *mode* from the request's model name
(``<anything>-fault-<mode>``) and plays it, for a stream request (SSE) or not (JSON):

==================  =======================================================================
mode                answer
==================  =======================================================================
``ok``              the valid answer
``500``             HTTP 500, JSON error (Messages: Anthropic's ``api_error`` shape)
``503``             HTTP 503, ``retry-after: 1`` (Messages: ``overloaded_error``)
``429``             HTTP 429 rate limit, ``retry-after: 1`` (Messages: ``rate_limit_error``)
``html``            HTTP 502 with an HTML page
``error200``        HTTP 200 whose JSON body is an error object (``server_error``;
                    Messages: Anthropic's ``{"type": "error", "error": {...}}``)
``truncjson``       HTTP 200 JSON cut in the middle (content-length of what is sent)
``eof``             stream: the head and three events, then the connection closes;
                    JSON: half the announced content-length, then close
``eofargs``         stream: up to the middle of a tool call's arguments (Messages: after
                    the first ``input_json_delta`` of ``Read``), then close;
                    JSON: as ``eof``
``stallhead``       nothing for ``STALL`` seconds (past the first-byte timeout), then close
``stallbody``       stream: three events, then ``STALL`` seconds of silence;
                    JSON: the head and half the body, then silence
``junk``            stream: the valid stream with junk ``data:`` lines between events
``nodone``          stream: the valid stream without ``data: [DONE]`` (Chat) / without
                    its terminal event (Responses) / without ``message_stop``
                    (Messages); JSON: the valid answer
``drip``            the valid answer written one byte at a time
``slow<n>``         stream: the valid stream, its events spread over ``n`` seconds
==================  =======================================================================

The valid answer is the two-call turn of ``tests/integration/conftest.py``: text
``Hello`` and two tool calls (``Read {"path":"a.py"}``, ``Bash {"cmd":"ls"}``); for
Messages the same turn as Anthropic's SSE (a text block, two ``tool_use`` blocks whose input
streams as ``input_json_delta`` pieces) or its whole ``message`` object (``msg_stream`` /
``msg_json``).
``hits`` records ``(good|bad, protocol, mode, stream)`` per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from typing import Any

import orjson

from .conftest import chat_stream_two_calls, resp_stream_two_calls, sse_body

STALL = 3.0
MODES = (
    "500", "503", "429", "html", "error200", "truncjson", "eof", "eofargs",
    "stallhead", "stallbody", "junk", "nodone", "drip",
)  # fmt: skip
TEXT = "Hello"
ANTHROPIC_ERROR = b'{"type":"error","error":{"type":"%s","message":"%s"}}'
CALLS = [("Read", '{"path":"a.py"}'), ("Bash", '{"cmd":"ls"}')]


def chat_json() -> dict[str, Any]:
    return {
        "id": "chatcmpl-up1",
        "object": "chat.completion",
        "created": 1,
        "model": "up-chat",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": TEXT,
                    "tool_calls": [
                        {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
                        for i, (n, a) in enumerate(CALLS)
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def resp_json() -> dict[str, Any]:
    return copy.deepcopy(resp_stream_two_calls()[-1]["response"])


MSG_USAGE = {"input_tokens": 8, "cache_read_input_tokens": 3, "output_tokens": 7}


def msg_json() -> dict[str, Any]:
    """The turn as Anthropic's whole message object."""
    return {
        "id": "msg_up1",
        "type": "message",
        "role": "assistant",
        "model": "up-msg",
        "content": [
            {"type": "text", "text": TEXT},
            *(
                {"type": "tool_use", "id": f"toolu_{i}", "name": n, "input": orjson.loads(a)}
                for i, (n, a) in enumerate(CALLS)
            ),
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": dict(MSG_USAGE),
    }


def msg_stream() -> list[dict[str, Any]]:
    """The turn as Anthropic's SSE events: text in two deltas, ``Read``'s input in two
    ``input_json_delta`` pieces, ``Bash``'s in one."""
    start = {k: v for k, v in msg_json().items() if k != "content"}
    start.update(content=[], stop_reason=None, usage={**MSG_USAGE, "output_tokens": 1})

    def delta(i: int, d: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": i, "delta": d}

    def tool(i: int, name: str) -> dict[str, Any]:
        block = {"type": "tool_use", "id": f"toolu_{i - 1}", "name": name, "input": {}}
        return {"type": "content_block_start", "index": i, "content_block": block}

    return [
        {"type": "message_start", "message": start},
        {"type": "ping"},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        delta(0, {"type": "text_delta", "text": "Hel"}),
        delta(0, {"type": "text_delta", "text": "lo"}),
        {"type": "content_block_stop", "index": 0},
        tool(1, "Read"),
        delta(1, {"type": "input_json_delta", "partial_json": ""}),
        delta(1, {"type": "input_json_delta", "partial_json": '{"path":'}),
        delta(1, {"type": "input_json_delta", "partial_json": '"a.py"}'}),
        {"type": "content_block_stop", "index": 1},
        tool(2, "Bash"),
        delta(2, {"type": "input_json_delta", "partial_json": '{"cmd":"ls"}'}),
        {"type": "content_block_stop", "index": 2},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 7},
        },
        {"type": "message_stop"},
    ]


def valid(protocol: str, stream: bool, *, done: bool = True) -> tuple[str, bytes]:
    if not stream:
        whole = {"chat": chat_json, "responses": resp_json, "messages": msg_json}[protocol]()
        return "application/json", orjson.dumps(whole)
    if protocol == "messages":
        events = msg_stream()
        return "text/event-stream", sse_body(events if done else events[:-1], event_names=True)
    if protocol == "chat":
        return "text/event-stream", sse_body(chat_stream_two_calls(), done=done)
    events = resp_stream_two_calls()
    return "text/event-stream", sse_body(events if done else events[:-1], event_names=True)


def head(status: int, ctype: str, length: int | None, extra: str = "") -> bytes:
    reason = {200: "OK", 429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway"}.get(status, "X")
    h = f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\n{extra}"
    h += f"content-length: {length}\r\n" if length is not None else "connection: close\r\n"
    return (h + "\r\n").encode()


class FaultUpstream:
    def __init__(self) -> None:
        self.port = 0
        self.hits: list[tuple[str, str, str, bool]] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> FaultUpstream:
        self._server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def url(self, kind: str) -> str:
        return f"http://127.0.0.1:{self.port}/{kind}/v1"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(BaseException):
                await t

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client left, or the test ended (stop)
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        raw = await reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        path = lines[0].split(" ")[1]
        length = 0
        for line in lines[1:]:
            k, _, v = line.partition(":")
            if k.strip().lower() == "content-length":
                length = int(v.strip())
        body = orjson.loads(await reader.readexactly(length)) if length else {}
        kind = "good" if path.startswith("/good/") else "bad"
        protocol = (
            "chat" if path.endswith("/chat/completions") else "messages" if path.endswith("/messages") else "responses"
        )
        stream = body.get("stream") is True
        model = str(body.get("model", ""))
        mode = model.rsplit("-fault-", 1)[1] if kind == "bad" and "-fault-" in model else "ok"
        self.hits.append((kind, protocol, mode, stream))
        return await self._play(writer, mode, protocol, stream)

    async def _play(self, w: asyncio.StreamWriter, mode: str, protocol: str, stream: bool) -> bool:
        """Answer one request; whether the connection stays open for another."""
        ctype, body = valid(protocol, stream, done=mode != "nodone")
        err = b'{"error":{"message":"upstream exploded","type":"server_error","code":"server_error"}}'
        limited = b'{"error":{"message":"Rate limit reached","code":"rate_limit_exceeded"}}'
        if protocol == "messages":  # Anthropic's error shape, as such upstreams send it
            err = ANTHROPIC_ERROR % (b"api_error", b"upstream exploded")
            limited = ANTHROPIC_ERROR % (b"rate_limit_error", b"Rate limit reached")
        if mode.startswith("slow") and stream:  # the valid stream spread over <n> seconds
            events = [e + b"\n\n" for e in body.split(b"\n\n") if e]
            w.write(head(200, ctype, len(body)))
            for e in events:
                await asyncio.sleep(float(mode[4:]) / len(events))
                w.write(e)
                await w.drain()
            return True
        if mode in ("ok", "junk", "nodone", "drip"):
            if mode == "junk" and stream:
                parts = body.split(b"\n\n")
                junk = [b"data: ping", b'data: {"cut": ', b"data: <!-- x -->"]
                body = b"\n\n".join(p + b"\n\n" + junk[i % 3] for i, p in enumerate(parts[:-1])) + b"\n\n"
            data = head(200, ctype, len(body)) + body
            if mode == "drip":
                for i in range(len(data)):
                    w.write(data[i : i + 1])
                    await w.drain()
                    if i % 64 == 0:
                        await asyncio.sleep(0)
            else:
                w.write(data)
            await w.drain()
            return True
        if mode in ("500", "503", "429"):
            status = int(mode)
            e = err if mode != "429" else limited
            if mode == "503" and protocol == "messages":
                e = ANTHROPIC_ERROR % (b"overloaded_error", b"Overloaded")
            extra = "retry-after: 1\r\n" if mode != "500" else ""
            w.write(head(status, "application/json", len(e), extra) + e)
            await w.drain()
            return True
        if mode == "html":
            page = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
            w.write(head(502, "text/html", len(page)) + page)
            await w.drain()
            return True
        if mode == "error200":
            w.write(head(200, "application/json", len(err)) + err)
            await w.drain()
            return True
        if mode == "truncjson":
            cut = body[: len(body) // 2] if not stream else valid(protocol, False)[1][:40]
            w.write(head(200, "application/json", len(cut)) + cut)
            await w.drain()
            return True
        if mode == "stallhead":
            await asyncio.sleep(STALL)
            return False
        if mode in ("eof", "eofargs", "stallbody"):
            if not stream:
                w.write(head(200, ctype, len(body)) + body[: len(body) // 2])
            else:
                w.write(head(200, ctype, len(body)) + self._cut(protocol, body, mode))
            await w.drain()
            if mode == "stallbody":
                await asyncio.sleep(STALL)
            return False
        raise AssertionError(f"unknown mode {mode}")

    @staticmethod
    def _cut(protocol: str, body: bytes, mode: str) -> bytes:
        events = body.split(b"\n\n")
        if mode != "eofargs":
            return b"\n\n".join(events[:4]) + b"\n\n"
        # (a Messages input_json_delta's partial_json escapes the piece as a Chat chunk does)
        marker = b"function_call_arguments.delta" if protocol == "responses" else b'{\\"path\\":'
        n = next(i for i, e in enumerate(events) if marker in e)
        return b"\n\n".join(events[: n + 1]) + b"\n\n"
