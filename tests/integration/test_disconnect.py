"""Client disconnect cancels the upstream request (docs/rules.md F20), before and after the first byte.

Real sockets on 127.0.0.1: the proxy runs in uvicorn (in this event loop), the upstream is a
tiny asyncio server that notes when its connection is closed by the proxy.
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import httpx
import orjson
import uvicorn

from app.config import parse_config
from app.main import create_app


class SlowUpstream:
    """Streams one chat chunk every 50 ms for ~10 s (or waits before headers)."""

    def __init__(self, delay_headers: float = 0.0, chunks: int = 200) -> None:
        self.delay_headers = delay_headers
        self.chunks = chunks
        self.closed_at: float | None = None
        self.connected = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        await reader.readexactly(length)
        self.connected.set()
        eof = asyncio.ensure_future(reader.read())  # resolves when the proxy closes the socket
        try:
            if self.delay_headers:
                await asyncio.wait_for(asyncio.shield(eof), self.delay_headers)
            else:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
                for i in range(self.chunks):
                    chunk = {
                        "id": "c",
                        "object": "chat.completion.chunk",
                        "created": 1,
                        "model": "m",
                        "choices": [{"index": 0, "delta": {"content": f"w{i} "}, "finish_reason": None}],
                    }
                    writer.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
                    await writer.drain()
                    done, _ = await asyncio.wait({eof}, timeout=0.05)
                    if done:
                        break
        except (ConnectionError, TimeoutError):
            pass
        finally:
            if eof.done():
                self.closed_at = time.monotonic()
            eof.cancel()
            writer.close()


async def _serve(upstream: SlowUpstream) -> tuple[Any, Any, int]:
    up = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
    up_port = up.sockets[0].getsockname()[1]
    cfg = parse_config(
        {
            "providers": [
                {
                    "name": "slow",
                    "protocol": "chat",
                    "base_url": f"http://127.0.0.1:{up_port}/v1",
                    "timeouts": {"first_byte": 30, "idle": 30},
                }
            ],
            "models": [{"name": "m", "provider": "slow"}],
        }
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(cfg), log_level="warning", lifespan="on"))
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    for _ in range(100):
        if server.started:
            break
        await asyncio.sleep(0.02)
    return up, (server, task), port


async def _stop(up: Any, srv: Any) -> None:
    server, task = srv
    server.should_exit = True
    await asyncio.wait_for(task, 10)
    up.close()


async def test_disconnect_mid_stream_closes_upstream() -> None:
    upstream = SlowUpstream()
    up, srv, port = await _serve(upstream)
    try:
        async with httpx.AsyncClient() as c:
            for path, body in (
                (
                    "/v1/chat/completions",
                    {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
                ),
            ):
                async with c.stream("POST", f"http://127.0.0.1:{port}{path}", json=body) as r:
                    assert r.status_code == 200
                    got = b""
                    async for part in r.aiter_bytes():
                        got += part
                        if got.count(b"data:") >= 3:
                            break
                left = time.monotonic()
        for _ in range(100):
            if upstream.closed_at:
                break
            await asyncio.sleep(0.05)
        assert upstream.closed_at is not None, "the proxy kept the upstream stream open after the client left"
        assert upstream.closed_at - left < 3
    finally:
        await _stop(up, srv)


async def _closed_after_leaving_before_first_byte() -> float:
    """A client that leaves while the upstream has not answered: seconds from its leaving
    until the upstream saw the proxy close the exchange (asserted to happen)."""
    upstream = SlowUpstream(delay_headers=20)
    up, srv, port = await _serve(upstream)
    try:
        async with httpx.AsyncClient() as c:
            req = c.post(f"http://127.0.0.1:{port}/v1/responses", json={"model": "m", "stream": True, "input": "hi"})
            task = asyncio.ensure_future(req)
            await asyncio.wait_for(upstream.connected.wait(), 5)
            task.cancel()
            left = time.monotonic()
        for _ in range(100):
            if upstream.closed_at:
                break
            await asyncio.sleep(0.05)
        assert upstream.closed_at is not None, "the upstream request survived the client's disconnect"
        return upstream.closed_at - left
    finally:
        await _stop(up, srv)


async def test_disconnect_before_first_byte_closes_upstream() -> None:
    assert await _closed_after_leaving_before_first_byte() < 3


async def test_disconnect_before_the_watch_starts_still_closes_upstream(monkeypatch: Any) -> None:
    """The client is watched from pipeline._WATCH_AFTER on: a client gone before then is
    found when the watch starts (uvicorn marked the request disconnected meanwhile)."""
    from app import pipeline

    monkeypatch.setattr(pipeline, "_WATCH_AFTER", 0.3)
    # not before the watch started, and not much after
    assert 0.2 < await _closed_after_leaving_before_first_byte() < 3


async def test_an_answer_done_before_the_watch_starts_starts_no_watch(monkeypatch: Any) -> None:
    from app import pipeline

    started: list[int] = []
    real = pipeline._wait_disconnect

    async def counted(receive: Any) -> None:
        started.append(1)
        await real(receive)

    monkeypatch.setattr(pipeline, "_wait_disconnect", counted)
    upstream = SlowUpstream(chunks=2)  # two chunks 50 ms apart, then the connection's end
    up, srv, port = await _serve(upstream)
    try:
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        async with httpx.AsyncClient() as c:
            monkeypatch.setattr(pipeline, "_WATCH_AFTER", 30.0)
            r = await c.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body)
            assert r.status_code == 200 and r.text.count("w1 ") == 1
            assert started == []
            monkeypatch.setattr(pipeline, "_WATCH_AFTER", 0.0)
            r = await c.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body)
            assert r.status_code == 200 and r.text.count("w1 ") == 1
            assert started == [1]
    finally:
        await _stop(up, srv)
