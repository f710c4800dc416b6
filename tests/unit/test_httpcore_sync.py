"""httpcore's locks, events and shields on asyncio's primitives (app/httpcore_sync.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpcore
import httpcore._async.connection as connection
import httpcore._async.connection_pool as pool
import httpcore._async.http11 as http11
import httpx
import pytest

from app import httpcore_sync
from app.httpcore_sync import Event, Lock, NoShield
from app.netio import LoopBackend


def test_install_points_httpcore_at_the_native_primitives() -> None:
    httpcore_sync.install()
    httpcore_sync.install()  # idempotent
    assert http11.AsyncLock is Lock and connection.AsyncLock is Lock
    assert pool.AsyncEvent is Event
    assert http11.AsyncShieldCancellation is NoShield and pool.AsyncShieldCancellation is NoShield


def test_install_fails_loudly_when_httpcore_renames_a_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(http11, "AsyncLock")
    with pytest.raises(RuntimeError, match="httpcore changed: httpcore._async.http11.AsyncLock"):
        httpcore_sync.install()


def test_a_free_lock_is_taken_without_yielding_to_the_loop() -> None:
    """The point of the module: anyio's lock yields once per acquire, this one does not."""

    async def take(lock: Lock) -> str:
        async with lock:
            return "held"

    step = take(Lock())
    with pytest.raises(StopIteration) as done:
        step.send(None)  # ran to its end in one step: no await suspended it
    assert done.value.value == "held"


async def test_a_held_lock_makes_others_wait_in_order() -> None:
    lock = Lock()
    order: list[int] = []

    async def worker(i: int) -> None:
        async with lock:
            order.append(i)
            await asyncio.sleep(0.01)
            order.append(i)

    await asyncio.gather(*(worker(i) for i in range(3)))
    assert order == [0, 0, 1, 1, 2, 2]


async def test_event_wait_times_out_as_pool_timeout() -> None:
    e = Event()
    with pytest.raises(httpcore.PoolTimeout):
        await e.wait(timeout=0.05)
    e.set()
    await e.wait(timeout=0.05)  # set: returns at once
    await e.wait()


@pytest.fixture
async def slow_server() -> AsyncIterator[tuple[int, asyncio.Event]]:
    """HTTP/1.1 on loopback: ``/slow`` sends its head and one chunk, then holds the body
    open until ``release`` is set; anything else answers at once (keep-alive)."""
    release = asyncio.Event()

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                if head.startswith(b"GET /slow"):
                    w.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
                    await w.drain()
                    await release.wait()
                    w.write(b"4\r\nlast\r\n0\r\n\r\n")
                else:
                    w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1], release
    release.set()
    server.close()
    await server.wait_closed()


def _transport(max_connections: int) -> httpx.AsyncHTTPTransport:
    t = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=max_connections), trust_env=False)
    t._pool._network_backend = LoopBackend()
    return t


async def test_a_full_pool_answers_pool_timeout(slow_server: tuple[int, asyncio.Event]) -> None:
    httpcore_sync.install()
    port, release = slow_server
    async with httpx.AsyncClient(transport=_transport(1), timeout=httpx.Timeout(5, pool=0.1)) as c:
        async with c.stream("GET", f"http://127.0.0.1:{port}/slow") as held:
            body = held.aiter_raw()  # kept: the only connection is busy with this body
            assert await body.__anext__() == b"first"
            with pytest.raises(httpx.PoolTimeout):
                await c.get(f"http://127.0.0.1:{port}/other")
            release.set()
            assert b"".join([x async for x in body]) == b"last"
        r = await c.get(f"http://127.0.0.1:{port}/other")  # the connection came back to the pool
        assert r.text == "ok"


async def test_a_request_cancelled_mid_body_leaves_the_pool_usable(slow_server: tuple[int, asyncio.Event]) -> None:
    """What the shield used to guard: a response closed while its task is being cancelled.
    The connection is dropped (its body was not read to the end) and the next request gets
    a new one; nothing hangs and no slot leaks."""
    httpcore_sync.install()
    port, _ = slow_server
    async with httpx.AsyncClient(transport=_transport(1), timeout=5) as c:
        started = asyncio.Event()

        async def read_slow() -> None:
            async with c.stream("GET", f"http://127.0.0.1:{port}/slow") as r:
                async for _ in r.aiter_raw():
                    started.set()

        task = asyncio.ensure_future(read_slow())
        await asyncio.wait_for(started.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(3):  # max_connections=1: a leaked slot would time out here
            r = await asyncio.wait_for(c.get(f"http://127.0.0.1:{port}/other"), 5)
            assert r.text == "ok"
