"""providers.upstream_body: an answer's body read off its HTTP/1.1 connection by one
iterator gives what httpx's four stacked generators gave: the same bytes, the same errors
(httpx's classes and messages), the pool's request closed on a failure or a cancellation,
and the connection kept alive after a whole body.  Each case runs both ways against a real
upstream on loopback (scripted bytes, with pauses) through the app's own transport."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from httpx._transports.default import AsyncResponseStream

import app.pipeline  # noqa: F401  (the app's httpcore and h11 replacements, installed on import)
import providers.upstream as upstream
from app.netio import LoopBackend
from providers.upstream_body import BodyStream, wrap
from tests.upstream_io import CountingUpstream

OK_CHUNKED = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"

# name: the answer's pieces, written one by one with a pause between them; "close" closes
SCRIPTS: dict[str, list[Any]] = {
    "length": [b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\nhel", b"lo w", b"orld"],
    "chunked": [OK_CHUNKED + b"3\r\nabc\r\n", b"2\r\nde\r\n", b"1\r\nf\r\n0\r\n\r\n"],
    "chunked-cut": [OK_CHUNKED + b"3\r\nabc\r\n", b"5\r\nde", "close"],
    "length-cut": [b"HTTP/1.1 200 OK\r\ncontent-length: 20\r\n\r\nshort", "close"],
    "bad-chunk-header": [OK_CHUNKED + b"3\r\nabc\r\n", b"zz\r\nxx\r\n"],
    "silent": [OK_CHUNKED + b"3\r\nabc\r\n", "wait"],
}


class _Upstream(CountingUpstream):
    def __init__(self, script: list[Any]) -> None:
        super().__init__()
        self.script = script

    async def answer(self, w: asyncio.StreamWriter) -> bool:
        for piece in self.script:
            if piece == "close":
                return False
            if piece == "wait":
                await asyncio.sleep(5)
                return False
            w.write(piece)
            await w.drain()
            await asyncio.sleep(0.02)
        return True


async def _run(script: list[Any], layered: bool, monkeypatch: pytest.MonkeyPatch, requests: int = 2) -> dict[str, Any]:
    """Each request's chunks (or its error), and the pool's requests in flight after it."""
    if layered:  # httpx's own stack of generators, for comparison
        monkeypatch.setattr(upstream, "body_stream", AsyncResponseStream)
    else:
        monkeypatch.setattr(upstream, "body_stream", wrap)
    up = _Upstream(script)
    srv = await asyncio.start_server(up.handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/"
    t = upstream._ShardedTransport(1, LoopBackend())
    pool = t.shards[0]._pool
    got: dict[str, Any] = {"answers": []}
    try:
        async with httpx.AsyncClient(transport=t, timeout=httpx.Timeout(5, read=0.3)) as c:
            for _ in range(requests):
                resp = await t.handle_async_request(c.build_request("POST", url, content=b"{}"))
                assert isinstance(resp.stream, AsyncResponseStream if layered else BodyStream)
                chunks: list[bytes] = []
                try:
                    async for chunk in resp.stream:  # type: ignore[union-attr]
                        chunks.append(chunk)
                    error = None
                except httpx.HTTPError as e:
                    error = (type(e).__name__, str(e), type(e.__cause__).__name__)
                in_flight = len(pool._requests)
                await resp.aclose()
                got["answers"].append((b"".join(chunks), error, in_flight, len(pool._requests)))
    finally:
        srv.close()
    got["connections"] = up.connections
    return got


@pytest.mark.parametrize("name", sorted(SCRIPTS))
async def test_same_bytes_errors_and_pool_state_as_httpx_layers(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    new = await _run(SCRIPTS[name], False, monkeypatch)
    old = await _run(SCRIPTS[name], True, monkeypatch)
    assert new == old
    body, error, in_flight, after = new["answers"][0]
    if name in ("length", "chunked"):
        assert body in (b"hello world", b"abcdef") and error is None
        assert in_flight == 1 and after == 0  # open until closed, then back in the pool
        assert new["connections"] == 1  # the second request reused the connection
    else:
        assert error is not None
        assert in_flight == 0  # a failed body closed the pool's request by itself
        assert new["connections"] == 2  # and its connection was not reused


@pytest.mark.parametrize("layered", [False, True])
async def test_a_cancelled_read_closes_the_pools_request(layered: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upstream, "body_stream", AsyncResponseStream if layered else wrap)
    up = _Upstream(SCRIPTS["silent"])
    srv = await asyncio.start_server(up.handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/"
    t = upstream._ShardedTransport(1, LoopBackend())
    pool = t.shards[0]._pool
    try:
        async with httpx.AsyncClient(transport=t) as c:
            resp = await t.handle_async_request(c.build_request("POST", url, content=b"{}"))
            it = resp.stream.__aiter__()  # type: ignore[union-attr]
            assert await it.__anext__() == b"abc"
            task = asyncio.ensure_future(it.__anext__())
            await asyncio.sleep(0.05)
            assert len(pool._requests) == 1
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert len(pool._requests) == 0
            await resp.aclose()
    finally:
        srv.close()


async def test_reads_after_the_end_end_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upstream, "body_stream", wrap)
    up = _Upstream(SCRIPTS["chunked"])
    srv = await asyncio.start_server(up.handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/"
    t = upstream._ShardedTransport(1, LoopBackend())
    try:
        async with httpx.AsyncClient(transport=t) as c:
            resp = await t.handle_async_request(c.build_request("POST", url, content=b"{}"))
            it = resp.stream.__aiter__()  # type: ignore[union-attr]
            assert b"".join([chunk async for chunk in it]) == b"abcdef"
            for _ in range(2):
                with pytest.raises(StopAsyncIteration):
                    await it.__anext__()
            await resp.aclose()
            with pytest.raises(StopAsyncIteration):
                await it.__anext__()
    finally:
        srv.close()


def test_any_other_stream_keeps_httpx_stream() -> None:
    class Other:
        async def __aiter__(self) -> Any:
            yield b"x"

    assert type(wrap(Other())) is AsyncResponseStream
