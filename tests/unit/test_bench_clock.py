"""The bench's deadlines (``bench/clock.py``): never early, at once when past, closed cleanly;
and the fake upstream's paced steps never ahead of their schedule.

Correctness only: each wait ends at or after its deadline (never before it, which uvloop's
millisecond timers allowed), on asyncio's loop and on uvloop's.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time

import orjson
import pytest
import uvloop

from bench import clock
from bench.fake_upstream import serve
from bench.instructions import _request

pytestmark = pytest.mark.skipif(not clock.precise, reason="timerfd is Linux's")

OFFSETS_NS = [150_000, 400_000, 900_000, 1_300_000, 2_700_000, 5_000_000]


async def _waits() -> list[tuple[int, int]]:
    d = clock.Deadlines(asyncio.get_running_loop())
    out = []
    try:
        for off in OFFSETS_NS * 3:
            due = time.monotonic_ns() + off
            await d.until(due)
            out.append((due, time.monotonic_ns()))
    finally:
        d.close()
    return out


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_until_never_returns_before_its_deadline(run):
    for due, woke in run(_waits()):
        assert woke >= due


def test_a_deadline_passed_returns_without_waiting():
    async def main():
        d = clock.Deadlines(asyncio.get_running_loop())
        try:
            coro = d.until(time.monotonic_ns() - 1)
            with pytest.raises(StopIteration):  # done on its first step: nothing awaited
                coro.send(None)
        finally:
            d.close()

    asyncio.run(main())


def test_close_cancels_a_wait_and_frees_the_timer():
    async def main():
        loop = asyncio.get_running_loop()
        d = clock.Deadlines(loop)
        fd = d._fd
        waiting = loop.create_task(d.until(time.monotonic_ns() + 10_000_000_000))
        await asyncio.sleep(0)
        d.close()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        with pytest.raises(OSError):
            os.fstat(fd)
        d.close()  # twice is harmless

    asyncio.run(main())


def _arrivals(port: int, model: str) -> list[float]:
    """Seconds from the request's send to each read of its streamed answer."""
    body = orjson.dumps({"model": model, "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        t0 = time.monotonic()
        s.sendall(_request("/v1/chat/completions", body))
        got: list[float] = []
        data = b""
        while not data.endswith(b"0\r\n\r\n"):
            chunk = s.recv(65536)
            assert chunk
            data += chunk
            got.append(time.monotonic() - t0)
    return got


@pytest.mark.parametrize("model", ["bench-chat-n3-d2", "bench-chat-n3-d2-rel"])
def test_paced_steps_never_come_ahead_of_their_schedule(model):
    """Step i leaves at the request's arrival + i × delay at the earliest: the k-th read of
    the answer (k ≥ 1, each bringing at least one step) cannot come before k × delay."""

    async def main():
        server = await serve()
        port = server.sockets[0].getsockname()[1]
        try:
            loop = asyncio.get_running_loop()
            for _ in range(5):
                reads = await loop.run_in_executor(None, _arrivals, port, model)
                for k, t in enumerate(reads[1:], start=1):
                    assert t >= k * 0.002 - 1e-6, (k, t)
        finally:
            server.close()

    uvloop.run(main())
