"""The drain's timeline (app/drain.py) in process, on short timings: what is stopped when,
the listener held while a WebSocket turn is in flight, the signal handlers.  The same drain
on a real ``switchboard serve`` process: tests/system/test_drain.py."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import pytest

from app.drain import SHUTDOWN_CODE, Drain
from providers.config import DrainCfg


class Answer:
    def __init__(self, holds: bool = False) -> None:
        self.stopped: list[str] = []
        self.holds_listener = holds

    def stop(self, code: str) -> None:
        self.stopped.append(code)


async def run(drain: Drain) -> tuple[list[float], float]:
    """Run the timeline; (times the listener was closed, time it ended), from its start."""
    closed: list[float] = []
    t0 = time.monotonic()
    assert drain.begin() and not drain.begin()  # a second begin says it already was
    assert drain.event.is_set() and drain.draining
    await drain.run(lambda: closed.append(time.monotonic() - t0))
    return closed, time.monotonic() - t0


async def test_announce_then_listener_then_deadline_stops_what_is_open() -> None:
    drain = Drain(DrainCfg(announce_seconds=0.05, timeout_seconds=0.2))
    gone, stays = Answer(), Answer()
    drain.register(gone)
    drain.register(stays)
    drain.unregister(gone)
    closed, ended = await run(drain)
    assert len(closed) == 1 and 0.04 <= closed[0] < 0.15
    assert 0.18 <= ended < 0.4
    assert gone.stopped == [] and stays.stopped == [SHUTDOWN_CODE]


async def test_nothing_open_at_the_deadline_stops_nothing() -> None:
    drain = Drain(DrainCfg(announce_seconds=0.0, timeout_seconds=0.05))
    closed, _ = await run(drain)
    assert closed and drain.stop_all() == 0


async def test_listener_held_while_a_socket_has_a_turn_then_released() -> None:
    drain = Drain(DrainCfg(announce_seconds=0.02, timeout_seconds=1.0))
    sock = Answer(holds=True)
    drain.register(sock)

    async def turn_ends() -> None:
        await asyncio.sleep(0.15)
        sock.holds_listener = False
        drain.released()

    ender = asyncio.ensure_future(turn_ends())
    task = asyncio.ensure_future(run(drain))
    await ender
    await asyncio.sleep(0.05)
    # the turn ended at 0.15 s: the listener closed then, not at the announce (0.02 s)
    assert not task.done()
    drain.unregister(sock)
    closed, _ = await task
    assert 0.14 <= closed[0] < 0.5
    assert sock.stopped == []  # ended by itself, before the deadline


async def test_a_turn_still_held_at_the_deadline_is_stopped_before_the_listener_closes() -> None:
    drain = Drain(DrainCfg(announce_seconds=0.02, timeout_seconds=0.1))
    sock = Answer(holds=True)
    drain.register(sock)
    closed, ended = await run(drain)
    assert sock.stopped and sock.stopped[0] == SHUTDOWN_CODE
    assert closed[0] >= 0.1  # after the deadline's stop (and the flush pause)


async def test_done_logs_and_cancels_the_timeline() -> None:
    drain = Drain(DrainCfg(announce_seconds=5, timeout_seconds=10))
    drain.done()  # not draining: nothing to say
    drain.begin()
    drain._start(lambda: None)
    assert drain._task is not None
    await asyncio.sleep(0)
    drain.done()
    await asyncio.sleep(0)
    assert drain._task.cancelled()


def test_install_puts_the_handler_in_front_and_a_second_signal_forces(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    exits: list[int] = []
    monkeypatch.setattr("app.drain.os._exit", exits.append)
    old_term, old_int = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGTERM, lambda s, f: calls.append(("uvicorn", s)))
    loop = asyncio.new_event_loop()
    try:
        drain = Drain(DrainCfg(announce_seconds=0.01, timeout_seconds=0.05))
        answer = Answer()
        drain.register(answer)
        drain.install(loop)
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        handler(signal.SIGTERM, None)  # the first signal: the drain starts, uvicorn's handler later
        assert drain.draining
        loop.run_until_complete(asyncio.sleep(0.03))
        assert calls == [("uvicorn", signal.SIGTERM)]  # handed over after the announce window
        handler(signal.SIGTERM, None)  # a second signal: everything open ends, the process exits
        loop.run_until_complete(asyncio.sleep(0.3))
        assert answer.stopped[:1] == [SHUTDOWN_CODE] and exits == [1]
        drain.done()
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)
        loop.close()
