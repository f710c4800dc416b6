"""A kept-alive upstream connection closed as a request goes out on it (the upstream's idle
timeout crossing the request on the wire): the request is sent again on another connection,
at once, and the caller sees its answer (``app/netio.py``, ``StaleConnection``;
``providers.upstream._ShardedTransport``).  Every other failure is the caller's, as before:
a connection's first request, an answer cut after its first byte, a body that cannot be sent
twice.  A real server on loopback decides what each request on each connection gets."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from app.netio import LoopBackend
from providers.upstream import _POOL_SHARDS, _ShardedTransport

# what the server does with a request: answer it, close (FIN) or reset (RST) without a byte
# of answer (RESET_AT_HEAD: as soon as the head is read, the body left unread), or close
# after the first bytes of the status line
ANSWER, CLOSE, RESET, RESET_AT_HEAD, CUT = "answer", "close", "reset", "reset at head", "cut"


class _Upstream:
    def __init__(self, policy: Callable[[int, int], str]) -> None:
        self.policy = policy  # (connection number, request number on it) → what to do
        self.connections = 0
        self.requests = 0  # requests read, answered or not

    async def handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        conn = self.connections
        self.connections += 1
        n = 0
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                self.requests += 1
                what = self.policy(conn, n)
                n += 1
                if what != RESET_AT_HEAD:
                    size = next(
                        (
                            int(x.split(b":")[1])
                            for x in head.split(b"\r\n")
                            if x.lower().startswith(b"content-length:")
                        ),
                        0,
                    )
                    if b"transfer-encoding: chunked" in head.lower():
                        await r.readuntil(b"0\r\n\r\n")
                    else:
                        await r.readexactly(size)
                if what in (RESET, RESET_AT_HEAD):
                    sock = w.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    w.transport.abort()
                    return
                if what == CLOSE:
                    return
                if what == CUT:
                    w.write(b"HTTP/1.1 2")
                    await w.drain()
                    return
                w.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%d" % (len(str(conn)), conn))
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            w.close()


async def _serve(policy: Callable[[int, int], str]) -> tuple[asyncio.Server, _Upstream, str]:
    up = _Upstream(policy)
    srv = await asyncio.start_server(up.handle, "127.0.0.1", 0)
    return srv, up, f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/"


def _second_request_dropped(how: str) -> Callable[[int, int], str]:
    """The first connection answers its first request and drops the second; others answer."""
    return lambda conn, n: how if (conn, n) == (0, 1) else ANSWER


@pytest.mark.parametrize("how", [CLOSE, RESET])
async def test_a_request_crossing_the_upstreams_idle_close_is_sent_again(how: str) -> None:
    srv, up, url = await _serve(_second_request_dropped(how))
    t = _ShardedTransport(_POOL_SHARDS, LoopBackend())
    async with httpx.AsyncClient(transport=t) as c:
        assert (await c.post(url, content=b"a")).text == "0"
        assert (await c.post(url, content=b"ab")).text == "1"  # sent again, on a new connection
        assert (await c.post(url, content=b"abc")).text == "1"  # which is kept alive
    srv.close()
    assert (up.connections, up.requests) == (2, 4)


async def test_a_large_body_crossing_the_idle_close_is_sent_again() -> None:
    """A body past the bytes held back before the read (``_CORK_BYTES``) is written while
    the request goes out: the reset is found by a write."""
    srv, up, url = await _serve(_second_request_dropped(RESET_AT_HEAD))
    t = _ShardedTransport(_POOL_SHARDS, LoopBackend())
    body = b"x" * (1024 * 1024)
    async with httpx.AsyncClient(transport=t) as c:
        assert (await c.post(url, content=b"a")).text == "0"
        assert (await c.post(url, content=body)).text == "1"
    srv.close()
    assert (up.connections, up.requests) == (2, 3)


async def test_every_kept_alive_connection_closed_at_once() -> None:
    """An upstream closing its idle connections all at the same time: the request tries each
    kept-alive connection of its pool in turn, then a new one, and is answered."""
    held = 3
    srv, up, url = await _serve(lambda conn, n: CLOSE if n == 1 else ANSWER)
    t = _ShardedTransport(1, LoopBackend())  # one pool: it keeps all three
    async with httpx.AsyncClient(transport=t) as c:
        tasks = [asyncio.create_task(c.post(url, content=b"x")) for _ in range(held)]
        assert sorted(r.text for r in await asyncio.gather(*tasks)) == ["0", "1", "2"]
        assert len(t.shards[0]._pool.connections) == held
        assert (await c.post(url, content=b"y")).text == str(held)
    srv.close()
    assert (up.connections, up.requests) == (held + 1, 2 * held + 1)


async def test_an_upstream_that_never_keeps_a_connection_alive() -> None:
    """An upstream that drops every request on a kept-alive connection and answers the first
    one of each new connection: one answer per request, one resend each."""
    srv, up, url = await _serve(lambda conn, n: ANSWER if n == 0 else CLOSE)
    t = _ShardedTransport(_POOL_SHARDS, LoopBackend())
    async with httpx.AsyncClient(transport=t) as c:
        for i in range(4):
            assert (await c.post(url, content=b"a")).text == str(i)
    srv.close()
    assert (up.connections, up.requests) == (4, 7)


async def test_a_connections_first_request_is_not_sent_again() -> None:
    """Nothing proves that an upstream closing a new connection without answering did not
    take the request: the caller gets the failure."""
    srv, up, url = await _serve(lambda conn, n: CLOSE)
    t = _ShardedTransport(_POOL_SHARDS, LoopBackend())
    async with httpx.AsyncClient(transport=t) as c:
        with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
            await c.post(url, content=b"a")
    srv.close()
    assert (up.connections, up.requests) == (1, 1)


async def test_a_reused_connections_answer_cut_after_its_first_byte_is_not_sent_again() -> None:
    """The upstream took a request it began to answer: the caller's failure."""
    srv, up, url = await _serve(_second_request_dropped(CUT))
    t = _ShardedTransport(_POOL_SHARDS, LoopBackend())
    async with httpx.AsyncClient(transport=t) as c:
        assert (await c.post(url, content=b"a")).text == "0"
        with pytest.raises(httpx.RemoteProtocolError):
            await c.post(url, content=b"ab")
        assert (await c.post(url, content=b"abc")).text == "1"  # the next one on a new connection
    srv.close()
    assert (up.connections, up.requests) == (2, 3)


async def test_a_body_that_cannot_be_sent_twice_is_not_sent_again() -> None:
    srv, up, url = await _serve(_second_request_dropped(CLOSE))
    t = _ShardedTransport(_POOL_SHARDS, LoopBackend())

    async def body() -> AsyncIterator[bytes]:
        yield b"ab"

    async with httpx.AsyncClient(transport=t) as c:
        assert (await c.post(url, content=b"a")).text == "0"
        with pytest.raises(httpx.ReadError, match="closed the kept-alive connection"):
            await c.post(url, content=body())
    srv.close()
    assert (up.connections, up.requests) == (1, 2)


async def test_past_its_resends_a_request_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The resends are bounded (``_STALE_RESENDS``: the kept-alive connections a pool holds):
    past them the caller gets the failure."""
    monkeypatch.setattr("providers.upstream._STALE_RESENDS", 1)
    srv, up, url = await _serve(lambda conn, n: CLOSE if n == 1 else ANSWER)
    t = _ShardedTransport(1, LoopBackend())
    async with httpx.AsyncClient(transport=t) as c:
        tasks = [asyncio.create_task(c.post(url, content=b"x")) for _ in range(3)]
        assert sorted(r.text for r in await asyncio.gather(*tasks)) == ["0", "1", "2"]
        with pytest.raises(httpx.ReadError, match="closed the kept-alive connection"):
            await c.post(url, content=b"y")
    srv.close()
    assert (up.connections, up.requests) == (3, 5)
