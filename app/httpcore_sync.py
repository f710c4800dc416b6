"""httpcore's locks, events and cancellation shields on asyncio's own primitives.

Theory of operation
-------------------
httpcore guards each HTTP/1.1 connection's state with an ``AsyncLock``, waits for a free
pooled connection on an ``AsyncEvent`` and closes responses inside an
``AsyncShieldCancellation``; under asyncio each of these is anyio's.  anyio's lock yields
to the event loop on every uncontended acquire (a cancel-shielded ``sleep(0)``: "let other
tasks run"), and httpcore takes the connection lock twice per request, once to send and
once when the response closes.  Each yield resumes the whole coroutine stack of the request
(server, app, failover, transport, pool, connection): two extra event-loop round trips and
two cancel scopes per upstream request, for nothing the proxy needs.

``install()`` points those three names, in the httpcore modules that use them, at the
classes below:

==========================  ==================================  ==============================
httpcore name               was (asyncio)                       now
==========================  ==================================  ==============================
``AsyncLock``               ``anyio.Lock`` (yields on acquire)  ``asyncio.Lock`` (no yield
                                                                when free)
``AsyncEvent``              ``anyio.Event`` + ``fail_after``    ``asyncio.Event`` +
                                                                ``asyncio.timeout`` →
                                                                ``PoolTimeout``
``AsyncShieldCancellation`` ``anyio.CancelScope(shield=True)``  nothing (see below)
==========================  ==================================  ==============================

The shield only ever held back anyio's own cancel scopes: a native ``Task.cancel()`` (what
the proxy's timeouts and disconnect handling use; it opens no anyio scope) went through it
as before, and still does.  The closes it wraps now finish without yielding at all (the
lock does not wait when free, and ``app.netio``'s stream closes synchronously), so there is
nothing left for a cancellation to interrupt.

``install()`` is idempotent and checks that httpcore still has every name it replaces
(httpcore is pinned; a release that renames one fails loudly at import, not silently).
"""

from __future__ import annotations

import asyncio
import types
from typing import Any

import httpcore._async.connection as _connection
import httpcore._async.connection_pool as _pool
import httpcore._async.http11 as _http11
from httpcore import PoolTimeout

__all__ = ["Event", "Lock", "NoShield", "install"]


class Lock:
    """``httpcore._synchronization.AsyncLock`` on ``asyncio.Lock``."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> Lock:
        await self._lock.acquire()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: types.TracebackType | None = None,
    ) -> None:
        self._lock.release()


class Event:
    """``httpcore._synchronization.AsyncEvent`` on ``asyncio.Event``: ``wait`` raises
    ``PoolTimeout`` when ``timeout`` passes first, as httpcore's does."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 (httpcore's interface)
        try:
            async with asyncio.timeout(timeout):
                await self._event.wait()
        except TimeoutError as e:
            raise PoolTimeout(e) from e


class NoShield:
    """``httpcore._synchronization.AsyncShieldCancellation``: a no-op (module docstring)."""

    __slots__ = ()

    def __enter__(self) -> NoShield:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


_TABLE: list[tuple[types.ModuleType, str, type]] = [
    (_http11, "AsyncLock", Lock),
    (_http11, "AsyncShieldCancellation", NoShield),
    (_connection, "AsyncLock", Lock),
    (_pool, "AsyncEvent", Event),
    (_pool, "AsyncShieldCancellation", NoShield),
]


def install() -> None:
    for module, name, cls in _TABLE:
        if not hasattr(module, name):
            raise RuntimeError(f"httpcore changed: {module.__name__}.{name} is gone (app/httpcore_sync.py)")
        setattr(module, name, cls)
