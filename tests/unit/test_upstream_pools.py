"""providers.upstream._ShardedTransport: the least busy pool takes each request, so requests
that come one at a time keep one kept-alive connection, and concurrent ones spread over the
pools; an idle connection is kept for its provider's ``timeouts.pool_idle``, and providers
share the pools of their value.  A real server on loopback counts the connections."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from app.config import ConfigError, parse_config
from app.netio import LoopBackend
from providers.config import TimeoutsCfg
from providers.upstream import _POOL_SHARDS, Router, _ShardedTransport
from tests.upstream_io import read_request


class _Upstream:
    """Answers each request with its body's length; ``hold`` keeps answers back until set."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        self.hold: asyncio.Event | None = None
        self.want = 0  # all_in is set once this many requests came in
        self.all_in = asyncio.Event()

    async def handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                _, body = await read_request(r)
                size = len(body)
                self.requests += 1
                if self.requests >= self.want:
                    self.all_in.set()
                if self.hold is not None:
                    await self.hold.wait()
                w.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%d" % (len(str(size)), size))
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            w.close()


async def _serve() -> tuple[asyncio.Server, _Upstream, str]:
    up = _Upstream()
    srv = await asyncio.start_server(up.handle, "127.0.0.1", 0)
    return srv, up, f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/"


async def test_requests_one_at_a_time_keep_one_connection() -> None:
    srv, up, url = await _serve()
    t = _ShardedTransport(_POOL_SHARDS, LoopBackend())
    async with httpx.AsyncClient(transport=t) as c:
        for i in range(3 * _POOL_SHARDS):
            r = await c.post(url, content=b"x" * i)
            assert r.text == str(i)
    assert up.requests == 3 * _POOL_SHARDS
    assert up.connections == 1  # taken in turn, the pools opened one each
    srv.close()


async def test_a_stream_left_open_sends_the_next_request_to_another_pool() -> None:
    srv, up, url = await _serve()
    t = _ShardedTransport(_POOL_SHARDS, LoopBackend())
    async with httpx.AsyncClient(transport=t) as c:
        async with c.stream("POST", url, content=b"ab") as open_one:
            assert t.pick() is t.shards[1]  # the first pool has a request in flight
            r = await c.post(url, content=b"abc")
            assert r.text == "3"
            assert await open_one.aread() == b"2"
        assert t.pick() is t.shards[0]  # closed: the first pool is free again
    assert up.connections == 2
    srv.close()


async def test_concurrent_requests_spread_over_the_pools() -> None:
    srv, up, url = await _serve()
    up.hold = asyncio.Event()
    t = _ShardedTransport(_POOL_SHARDS, LoopBackend())
    n = up.want = 2 * _POOL_SHARDS + 3
    async with httpx.AsyncClient(transport=t) as c:
        tasks = [asyncio.create_task(c.post(url, content=b"x" * i)) for i in range(n)]
        await asyncio.wait_for(up.all_in.wait(), 10)  # every request sent and waiting for its answer
        loads = sorted(len(s._pool._requests) for s in t.shards)
        assert loads[0] >= 2 and loads[-1] - loads[0] <= 1 and sum(loads) == n
        up.hold.set()
        assert [r.text for r in await asyncio.gather(*tasks)] == [str(i) for i in range(n)]
        assert all(not s._pool._requests for s in t.shards)
        # afterwards, one at a time again: the first pool's kept-alive connection serves them
        before = up.connections
        for _ in range(5):
            assert (await c.post(url, content=b"")).text == "0"
        assert up.connections == before
    srv.close()


async def _two_requests_apart(pool_idle: float, gap: float) -> int:
    """Upstream connections opened by two requests ``gap`` seconds apart."""
    srv, up, url = await _serve()
    t = _ShardedTransport(_POOL_SHARDS, LoopBackend(), pool_idle=pool_idle)
    async with httpx.AsyncClient(transport=t) as c:
        assert (await c.post(url, content=b"a")).text == "1"
        await asyncio.sleep(gap)
        assert (await c.post(url, content=b"ab")).text == "2"
    srv.close()
    return up.connections


async def test_an_idle_connection_is_kept_for_pool_idle() -> None:
    assert await _two_requests_apart(pool_idle=30.0, gap=0.5) == 1
    assert await _two_requests_apart(pool_idle=0.2, gap=0.5) == 2  # expired: a new one
    assert await _two_requests_apart(pool_idle=0.0, gap=0.01) == 2  # 0: never reused


def test_pools_keep_idle_connections_90_s_by_default() -> None:
    # reqwest, the HTTP client Codex is built on, keeps an idle connection 90 s by default: the
    # same pause between two turns finds the upstream connection open through the proxy as direct
    assert TimeoutsCfg().pool_idle == 90.0
    assert all(s._pool._keepalive_expiry == 90.0 for s in _ShardedTransport(2).shards)


def _router(transport: httpx.AsyncBaseTransport | None = None) -> Router:
    base = "http://127.0.0.1:9/v1"
    cfg = parse_config(
        {
            "providers": [
                {"name": "hosted", "base_url": base},
                {"name": "vllm-a", "base_url": base, "timeouts": {"pool_idle": 4}},
                {"name": "vllm-b", "base_url": base, "timeouts": {"pool_idle": 4.0}},
                {"name": "local", "profile": "demo"},
            ],
            "models": [{"name": n, "provider": n} for n in ("hosted", "vllm-a", "vllm-b", "local")],
        }
    )
    return Router.build(cfg, transport=transport)


async def test_providers_share_the_pools_of_their_pool_idle() -> None:
    r = _router()
    hosted, a, b, demo = (r.routes[n].provider for n in ("hosted", "vllm-a", "vllm-b", "local"))
    assert a.transport is b.transport and a.client is b.client
    assert hosted.transport is not a.transport and hosted.client is not a.client
    assert isinstance(hosted.transport, _ShardedTransport) and isinstance(a.transport, _ShardedTransport)
    assert {s._pool._keepalive_expiry for s in hosted.transport.shards} == {90.0}
    assert {s._pool._keepalive_expiry for s in a.transport.shards} == {4.0}
    assert demo.transport is not hosted.transport
    assert len(r.clients) == 3  # the demo's, and one per pool_idle value: all closed by aclose()
    await r.aclose()


async def test_a_given_transport_serves_every_provider() -> None:
    given = httpx.AsyncHTTPTransport()
    r = _router(given)
    assert {r.routes[n].provider.transport for n in ("hosted", "vllm-a", "vllm-b")} == {given}
    assert len(r.clients) == 2
    await r.aclose()


def test_pool_idle_may_not_be_negative() -> None:
    with pytest.raises(ConfigError, match="pool_idle"):
        parse_config(
            {
                "providers": [{"name": "p", "base_url": "http://127.0.0.1:9/v1", "timeouts": {"pool_idle": -1}}],
                "models": [{"name": "m", "provider": "p"}],
            }
        )


async def test_a_connection_the_upstream_closed_while_idle_is_not_reused() -> None:
    """An upstream that closes idle connections sooner than pool_idle (uvicorn under vLLM:
    5 s): the next request finds its connection closed and opens another, no error."""
    connections = 0

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await r.readuntil(b"\r\n\r\n")
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await w.drain()
        await asyncio.sleep(0.05)  # its keep-alive timeout
        w.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/"
    t = _ShardedTransport(_POOL_SHARDS, LoopBackend(), pool_idle=90.0)
    async with httpx.AsyncClient(transport=t) as c:
        for _ in range(3):
            assert (await c.get(url)).text == "ok"
            await asyncio.sleep(0.3)
    srv.close()
    assert connections == 3
