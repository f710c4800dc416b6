"""providers.upstream_pool.Pool: httpcore's pool with a short way for a request a kept-alive
connection takes gives what httpcore's own pool gives.  Each case runs the same sequence
of requests through both, on the app's network stream and connections, against one
scripted upstream on loopback, and compares what each request got (status and body, or
the error's class and message) and the pool's state after each step (its connections,
idle or not, and its requests, queued or not)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

import httpcore
import pytest

import app.pipeline  # noqa: F401  (the app's httpcore and h11 replacements, installed on import)
from app.netio import LoopBackend
from providers.upstream import _ShardedTransport
from providers.upstream_body import BodyStream, wrap
from providers.upstream_pool import Held, Pool, PooledBody
from tests.upstream_io import read_request

OK = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s"


class _Upstream:
    """Answers each request by its body: ``ok`` (kept alive), ``close`` (Connection: close),
    ``hold`` (once ``release`` is set), ``slow`` (0.3 s later), ``drop`` (closes unanswered)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.connections = 0
        self.open: list[asyncio.StreamWriter] = []

    async def handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open.append(w)
        try:
            while True:
                _, body = await read_request(r)
                if body == b"drop":
                    return
                if body == b"hold":
                    await self.release.wait()
                if body == b"slow":
                    await asyncio.sleep(0.3)
                if body == b"close":
                    w.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 5\r\n\r\nclose")
                    await w.drain()
                    return
                w.write(OK % (len(body), body))
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            w.close()

    def close_idle(self) -> None:
        """The upstream closes every connection it holds (its own idle timeout)."""
        for w in self.open:
            w.close()


def _request(port: int, body: bytes, pool_timeout: float | None = None) -> httpcore.Request:
    return httpcore.Request(
        b"POST",
        httpcore.URL(scheme=b"http", host=b"127.0.0.1", port=port, target=b"/v1/chat/completions"),
        headers=[(b"Host", b"127.0.0.1"), (b"Content-Length", b"%d" % len(body))],
        content=body,
        extensions={"timeout": {"connect": 2.0, "read": 2.0, "write": 2.0, "pool": pool_timeout}},
    )


class _Run:
    """One case's requests on one pool, and what was seen."""

    def __init__(self, pool: httpcore.AsyncConnectionPool, port: int, up: _Upstream) -> None:
        self.pool = pool
        self.port = port
        self.up = up
        self.seen: list[Any] = []

    def state(self, label: str) -> None:
        conns = [re.sub(r":\d+'", ":PORT'", c.info()) for c in self.pool.connections]
        self.seen.append((label, conns, [r.is_queued() for r in self.pool._requests]))

    async def send(self, body: bytes, *, read: bool = True, pool_timeout: float | None = None) -> Any:
        try:
            resp = await self.pool.handle_async_request(_request(self.port, body, pool_timeout))
        except Exception as e:
            self.seen.append(("failed", body, type(e).__name__, str(e)))
            return None
        if read:
            data = b"".join([part async for part in resp.stream])  # type: ignore[union-attr]
            await resp.aclose()
            self.seen.append((resp.status, data))
        return resp


Case = Callable[[_Run], Awaitable[None]]


async def _one_at_a_time(run: _Run) -> None:
    for _ in range(3):
        await run.send(b"ok")
        run.state("after")


async def _closing_answers(run: _Run) -> None:
    for body in (b"close", b"ok", b"close", b"ok"):
        await run.send(body)
        run.state("after")


async def _more_than_max_connections(run: _Run) -> None:
    # two connections at most: the third and fourth wait for one
    tasks = [asyncio.ensure_future(run.send(b"hold")) for _ in range(4)]
    await asyncio.sleep(0.2)
    run.state("holding")
    run.up.release.set()
    await asyncio.gather(*tasks)
    run.state("after")
    await run.send(b"ok")
    run.state("again")


async def _pool_timeout(run: _Run) -> None:
    first = [asyncio.ensure_future(run.send(b"slow")) for _ in range(2)]
    await asyncio.sleep(0.05)
    await run.send(b"ok", pool_timeout=0.05)
    run.state("timed out")
    await asyncio.gather(*first)
    await run.send(b"ok", pool_timeout=0.05)
    run.state("after")


async def _kept_alive_past_expiry(run: _Run) -> None:
    await run.send(b"ok")
    await asyncio.sleep(0.25)  # past keepalive_expiry
    run.state("expired")
    await run.send(b"ok")
    run.state("after")


async def _idle_over_the_keepalive_limit(run: _Run) -> None:
    # max_keepalive_connections=1: of two connections, the one that comes back idle while
    # the pool holds two is closed
    first = asyncio.ensure_future(run.send(b"hold"))
    second = asyncio.ensure_future(run.send(b"hold"))
    await asyncio.sleep(0.1)
    run.up.release.set()
    await asyncio.gather(first, second)
    run.state("after")
    for _ in range(2):
        await run.send(b"ok")
        run.state("again")


async def _closed_by_the_upstream_while_idle(run: _Run) -> None:
    await run.send(b"ok")
    run.up.close_idle()
    await asyncio.sleep(0.05)
    run.state("closed upstream")
    await run.send(b"ok")
    run.state("after")


async def _dropped_on_a_reused_connection(run: _Run) -> None:
    await run.send(b"ok")
    await run.send(b"drop")
    run.state("dropped")
    await run.send(b"ok")
    run.state("after")


async def _body_left_unread(run: _Run) -> None:
    resp = await run.send(b"ok", read=False)
    run.state("open")
    await resp.aclose()
    run.state("closed")
    await run.send(b"ok")
    run.state("after")


async def _cancel(run: _Run, task: asyncio.Future[Any], label: str) -> None:
    """The pool's state with ``task`` in it (``label``), then ``task`` cancelled, and after."""
    run.state(label)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    run.state("cancelled")


async def _cancelled_while_waiting_for_the_answer(run: _Run) -> None:
    await run.send(b"ok")
    task = asyncio.ensure_future(run.send(b"hold"))
    await asyncio.sleep(0.1)
    await _cancel(run, task, "waiting")
    run.up.release.set()
    await run.send(b"ok")
    run.state("after")


async def _cancelled_while_queued(run: _Run) -> None:
    held = [asyncio.ensure_future(run.send(b"hold")) for _ in range(2)]
    await asyncio.sleep(0.1)
    queued = asyncio.ensure_future(run.send(b"ok"))
    await asyncio.sleep(0.05)
    await _cancel(run, queued, "queued")
    run.up.release.set()
    await asyncio.gather(*held)
    await run.send(b"ok")
    run.state("after")


CASES: dict[str, Case] = {
    "one-at-a-time": _one_at_a_time,
    "closing-answers": _closing_answers,
    "more-than-max-connections": _more_than_max_connections,
    "pool-timeout": _pool_timeout,
    "kept-alive-past-expiry": _kept_alive_past_expiry,
    "idle-over-the-keepalive-limit": _idle_over_the_keepalive_limit,
    "closed-by-the-upstream-while-idle": _closed_by_the_upstream_while_idle,
    "dropped-on-a-reused-connection": _dropped_on_a_reused_connection,
    "body-left-unread": _body_left_unread,
    "cancelled-while-waiting-for-the-answer": _cancelled_while_waiting_for_the_answer,
    "cancelled-while-queued": _cancelled_while_queued,
}


async def _run(short_way: bool, case: Case) -> list[Any]:
    up = _Upstream()
    srv = await asyncio.start_server(up.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    pool = httpcore.AsyncConnectionPool(
        max_connections=2, max_keepalive_connections=1, keepalive_expiry=0.2, network_backend=LoopBackend()
    )
    if short_way:
        pool = Pool.like(pool)
    run = _Run(pool, port, up)
    try:
        await case(run)
    finally:
        await pool.aclose()
        srv.close()
        await srv.wait_closed()
    return [*run.seen, ("upstream connections", up.connections)]


@pytest.mark.parametrize("name", sorted(CASES))
async def test_the_pool_does_what_httpcores_does(name: str) -> None:
    new = await _run(True, CASES[name])
    old = await _run(False, CASES[name])
    assert new == old


async def test_a_kept_alive_connection_takes_the_short_way() -> None:
    """The short way is taken (no AsyncPoolRequest, no new Response) for a request a
    kept-alive connection takes, and its body is read by the app's body stream."""
    up = _Upstream()
    srv = await asyncio.start_server(up.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    pool = Pool.like(httpcore.AsyncConnectionPool(network_backend=LoopBackend()))
    try:
        first = await pool.handle_async_request(_request(port, b"ok"))
        assert not isinstance(first.stream, PooledBody)  # a new connection: httpcore's way
        assert b"".join([part async for part in first.stream]) == b"ok"  # type: ignore[union-attr]
        await first.aclose()
        resp = await pool.handle_async_request(_request(port, b"ok"))
        assert isinstance(resp.stream, PooledBody)
        assert [type(r) for r in pool._requests] == [Held]
        body = wrap(resp.stream)
        assert isinstance(body, BodyStream)
        assert b"".join([part async for part in body]) == b"ok"
        await body.aclose()
        assert pool._requests == [] and len(pool.connections) == 1 and pool.connections[0].is_idle()
    finally:
        await pool.aclose()
        srv.close()
        await srv.wait_closed()


def test_the_transports_pools_keep_httpxs_settings() -> None:
    t = _ShardedTransport(2, LoopBackend(), pool_idle=7.0)
    for shard in t.shards:
        pool = shard._pool
        assert type(pool) is Pool
        settings = {k: v for k, v in vars(pool).items() if k not in ("_connections", "_requests")}
        assert settings["_keepalive_expiry"] == 7.0 and settings["_max_keepalive_connections"] == 32
        assert isinstance(settings["_network_backend"], LoopBackend)
        fresh = vars(httpcore.AsyncConnectionPool(ssl_context=pool._ssl_context))
        assert settings.keys() == {k for k in fresh if k not in ("_connections", "_requests")}
        assert pool._connections == [] and pool._requests == []
