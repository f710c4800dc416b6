"""A non-streamed answer reaches the client in one socket write, head and body together
(app/server_heads.py), and says its length; a stream's head still goes out before its
first event.  The app in uvicorn on httptools, as ``switchboard serve`` runs it, in this
event loop; every write to the client's socket recorded; an upstream on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
import uvicorn.protocols.http.httptools_impl as httptools_impl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.server_heads import install
from tests.upstream_io import answer_each, app_before, read_request

from .test_stale_connection import ANSWER as COMPLETION

WRITES: list[bytes] = []

CHUNK = orjson.dumps(
    {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}],
    }
)


class _Recorded:
    def __init__(self, transport: Any) -> None:
        self._t = transport

    def write(self, data: bytes) -> None:
        WRITES.append(bytes(data))
        self._t.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._t, name)


class RecordingProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, each write to the client recorded."""

    def connection_made(self, transport: Any) -> None:
        super().connection_made(_Recorded(transport))  # type: ignore[arg-type]


@pytest.fixture
def installed() -> Iterator[None]:
    before = httptools_impl.RequestResponseCycle
    install()
    yield
    httptools_impl.RequestResponseCycle = before  # type: ignore[misc]


async def _upstream(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    async def answer(w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(COMPLETION))
        w.write(COMPLETION)
        return True

    async def stream(w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        await w.drain()
        await asyncio.sleep(0.2)  # the first event comes late: the head must not wait for it
        ev = b"data: " + CHUNK + b"\n\ndata: [DONE]\n\n"
        w.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(ev), ev))

    _, body = await read_request(r)
    if orjson.loads(body).get("stream"):
        await stream(w)
    else:
        await answer(w)
    await answer_each(r, w, answer)


async def _served(app: Any) -> AsyncIterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, http=RecordingProtocol, log_level="warning", lifespan="off"))
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    for _ in range(200):
        if server.started:
            break
        await asyncio.sleep(0.01)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


def _body(model: str, stream: bool = False) -> dict[str, Any]:
    return {"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}


async def test_non_streamed_answer_and_error_one_write_each(installed: None) -> None:
    async with app_before(_upstream) as app:
        async for port in _served(app):
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
                for model, status in (("m", 200), ("nope", 404)):
                    WRITES.clear()
                    r = await c.post("/v1/chat/completions", json=_body(model))
                    assert r.status_code == status
                    assert r.headers["content-length"] == str(len(r.content))
                    assert "transfer-encoding" not in r.headers
                    assert len(WRITES) == 1, WRITES
                    assert WRITES[0].startswith(b"HTTP/1.1 %d " % status) and WRITES[0].endswith(r.content)
                assert orjson.loads(r.content)["error"]["code"] == "model_not_found"


async def test_stream_head_before_its_first_event(installed: None) -> None:
    async with app_before(_upstream) as app:
        async for port in _served(app):
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
                WRITES.clear()
                async with c.stream("POST", "/v1/chat/completions", json=_body("m", stream=True)) as r:
                    assert r.status_code == 200  # the head came while the upstream held its event
                    assert len(WRITES) == 1 and WRITES[0].endswith(b"\r\n\r\n")
                    text = (await r.aread()).decode()
                assert '"content":"hi"' in text and text.endswith("data: [DONE]\n\n")
                assert len(WRITES) >= 2
