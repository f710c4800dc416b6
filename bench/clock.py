"""Sleep until a deadline to the microsecond, for the fake upstream's paced streams.

Theory of operation
-------------------
uvloop's timers, like libuv's, count whole milliseconds: ``asyncio.sleep(0.005)`` fires
anywhere from about 4 to 6 ms later, depending on where in its millisecond the loop's
cached clock stands and on ``epoll_wait``'s timeout in milliseconds.  A paced stream's
first text is written one step after the request came, so that jitter lands in every
stream's time to first text, on the direct side and on the proxy's, and a figure read as
the difference of the two carries it twice.

``Deadlines`` arms a Linux ``timerfd`` on ``CLOCK_MONOTONIC`` (the clock of
``time.monotonic_ns``) at an absolute time in nanoseconds and waits for it through the
loop's reader callback, so the kernel's high-resolution timer wakes the loop at the
deadline itself.  One ``timerfd`` per paced stream, closed with it.  Where ``timerfd`` is
not there (not Linux), ``until`` falls back to ``asyncio.sleep``, and ``precise`` says so.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import time

__all__ = ["Deadlines", "precise"]

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1


class _Spec(ctypes.Structure):  # struct itimerspec: it_interval, then it_value
    _fields_ = [
        ("interval_sec", ctypes.c_long),
        ("interval_nsec", ctypes.c_long),
        ("value_sec", ctypes.c_long),
        ("value_nsec", ctypes.c_long),
    ]


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        create, settime = libc.timerfd_create, libc.timerfd_settime
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return None
    create.argtypes, create.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Spec), ctypes.c_void_p]
    settime.restype = ctypes.c_int
    return libc


_LIBC = _libc()
precise = _LIBC is not None


class Deadlines:
    """Waits until absolute ``time.monotonic_ns()`` deadlines on one loop; ``close`` it."""

    __slots__ = ("_loop", "_fd", "_waiter", "_spec")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiter: asyncio.Future[None] | None = None
        self._spec = _Spec()
        self._fd = -1
        if _LIBC is not None:
            fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
            if fd < 0:  # pragma: no cover - out of file descriptors
                raise OSError(ctypes.get_errno(), "timerfd_create")
            self._fd = fd
            loop.add_reader(fd, self._fired)

    def _fired(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:  # pragma: no cover - re-armed before the loop saw it
            return
        w, self._waiter = self._waiter, None
        if w is not None and not w.done():
            w.set_result(None)

    async def until(self, deadline_ns: int) -> None:
        """Return at ``deadline_ns`` (``time.monotonic_ns()``), at once if it has passed."""
        if deadline_ns <= time.monotonic_ns():
            return
        if self._fd < 0:  # pragma: no cover - not Linux
            await asyncio.sleep((deadline_ns - time.monotonic_ns()) / 1e9)
            return
        s = self._spec
        s.value_sec, s.value_nsec = divmod(deadline_ns, 1_000_000_000)
        w = self._waiter = self._loop.create_future()
        if _LIBC.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(s), None) < 0:  # type: ignore[union-attr]
            self._waiter = None
            raise OSError(ctypes.get_errno(), "timerfd_settime")  # pragma: no cover
        await w

    def close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
        w, self._waiter = self._waiter, None
        if w is not None and not w.done():
            w.cancel()
