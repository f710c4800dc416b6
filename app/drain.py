"""The drain: what a serving process does between SIGTERM and its exit.

Theory of operation
-------------------
uvicorn's own SIGTERM handling closes the listener at once and then waits for open
connections without a bound a client can see.  Behind a load balancer that probes
``/readyz``, that refuses connections before the balancer has noticed anything.  So
``Drain.install`` (called at start-up of a ``switchboard serve`` worker) puts its own
handler in front of uvicorn's:

=====================  ============================================================  ==========
time from SIGTERM      what happens                                                  log event
=====================  ============================================================  ==========
0                      ``draining`` is set: ``/readyz`` answers 503 ``draining``;    ``drain_started``
                       the listener stays open, new requests are still served
``announce_seconds``   uvicorn's own shutdown begins (the handler it installed is     ``drain_listener_closed``
                       called): the listener closes, idle keep-alive connections
                       close, open requests go on; while a WebSocket still holds a
                       turn (uvicorn would close it with 1012 mid-turn) this waits,
                       up to ``timeout_seconds`` (then that turn is ended first)
``timeout_seconds``    every answer still open is ended the protocol's way:           ``drain_deadline``
                       a stream with ``response.failed`` / a Chat error chunk,
                       code ``server_shutting_down``; an answer not started yet
                       with 503 ``server_shutting_down`` (``retry-after: 1``)
exit                   the last connection closed, lifespan shutdown ran              ``drain_done``
second SIGTERM/SIGINT  open answers are ended as at the deadline, then the process   ``drain_forced``
                       exits (``os._exit``) a moment later, without waiting
=====================  ============================================================  ==========

``timeout_seconds`` (default 8) is measured from the signal and is meant to stay below the
orchestrator's grace period (Docker: 10 s, the compose file says so explicitly;
Kubernetes: 30 s), so that the process ends every stream itself before SIGKILL can cut
one.

Anything that holds a client connection open registers itself (``register``) with a
``stop(code)`` method and unregisters when its answer is complete: the HTTP pump
(``app.pipeline.ProxyResponse``) does; the WebSocket transport can do the same with its
sockets, and wait on ``event`` (set when the drain starts) to refuse new work.
With ``--workers N`` the supervisor (``app.workers``) passes every signal on to every
worker, and each drains on its own.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from app.logs import log
from providers.config import DrainCfg

SHUTDOWN_CODE = "server_shutting_down"
SHUTDOWN_MESSAGE = "the server is shutting down; retry the request"
_FORCE_GRACE = 0.2  # seconds between ending the open answers and os._exit on a second signal
_SOCKET_FLUSH = 0.2  # seconds for sockets ended at the deadline to send their last frames


class Stoppable(Protocol):
    def stop(self, code: str) -> None: ...


class Drain:
    """One worker's drain state (see the module docstring)."""

    def __init__(self, cfg: DrainCfg) -> None:
        self.cfg = cfg
        self.draining = False
        self.event = asyncio.Event()
        self.open: set[Stoppable] = set()
        self.settled = asyncio.Event()  # set when a socket's turn ends (released)
        self.started_at = 0.0
        self._task: asyncio.Task[None] | None = None

    def register(self, s: Stoppable) -> None:
        self.open.add(s)

    def unregister(self, s: Stoppable) -> None:
        self.open.discard(s)

    def stop_all(self, code: str = SHUTDOWN_CODE) -> int:
        """End every registered answer the protocol's way; how many there were."""
        n = len(self.open)
        for s in list(self.open):
            s.stop(code)
        return n

    def released(self) -> None:
        """A WebSocket's turn ended (app.ws): the drain looks again whether the listener may close."""
        self.settled.set()

    def _holding(self) -> bool:
        """A registered answer that the listener's close would cut (``holds_listener``: a
        WebSocket with a turn in flight, app.ws)."""
        return any(getattr(s, "holds_listener", False) for s in self.open)

    def begin(self) -> bool:
        """Mark the drain as started (False when it already was)."""
        if self.draining:
            return False
        self.draining = True
        self.started_at = time.monotonic()
        self.event.set()
        return True

    async def run(self, close_listener: Callable[[], None]) -> None:
        """The drain's timeline after the first signal (the table above)."""
        cfg = self.cfg
        log.warning(
            "drain_started",
            open=len(self.open),
            announce_seconds=cfg.announce_seconds,
            timeout_seconds=cfg.timeout_seconds,
        )
        await asyncio.sleep(cfg.announce_seconds)
        deadline = self.started_at + cfg.timeout_seconds
        # uvicorn's shutdown closes every WebSocket at once (1012), a turn in flight
        # included: the listener stays open while a socket still holds one, up to the deadline
        while self._holding():
            self.settled.clear()
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await self.settled.wait()
            except TimeoutError:
                break
        if self._holding():
            log.warning("drain_deadline", ended=self.stop_all())
            await asyncio.sleep(_SOCKET_FLUSH)  # the sockets send their terminal and close
        log.info("drain_listener_closed", open=len(self.open))
        close_listener()
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))
        if self.open:
            log.warning("drain_deadline", ended=self.stop_all())

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Put the drain's SIGTERM/SIGINT handler in front of the one the server installed
        (main thread only; elsewhere nothing changes)."""
        if not _main_thread():
            return
        originals = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

        def on_signal(sig: int, frame: Any) -> None:
            if self.begin():
                orig = originals[signal.Signals(sig)]

                def close_listener() -> None:
                    if callable(orig):
                        orig(sig, frame)
                    else:  # no server handler to hand over to: stop the loop's process
                        os._exit(0)

                loop.call_soon_threadsafe(self._start, close_listener)
                return
            loop.call_soon_threadsafe(self._force, sig)

        for sig in originals:
            signal.signal(sig, on_signal)

    def _start(self, close_listener: Callable[[], None]) -> None:
        self._task = asyncio.ensure_future(self.run(close_listener))

    def _force(self, sig: int) -> None:
        n = self.stop_all()
        log.warning("drain_forced", signal=signal.Signals(sig).name, ended=n)
        asyncio.get_running_loop().call_later(_FORCE_GRACE if n else 0.0, os._exit, 1)

    def done(self) -> None:
        """Called at lifespan shutdown: the last line of a drained process."""
        if self._task is not None:
            self._task.cancel()
        if self.draining:
            log.info("drain_done", seconds=round(time.monotonic() - self.started_at, 3), open=len(self.open))


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
