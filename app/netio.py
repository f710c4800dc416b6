"""httpcore's network layer on the event loop's own transports, for the upstream connections.

Theory of operation
-------------------
httpx sends through httpcore, which reads and writes sockets through a *network backend*
(``httpcore.AsyncNetworkBackend``, its documented extension point).  The default one goes
through anyio: every read and write opens a cancel scope with a deadline
(``anyio.fail_after``), and every send and receive is an anyio checkpoint; on a proxy that
does one read per upstream burst and one write per request, that was ~10% of its CPU.

``LoopBackend`` opens connections with ``loop.create_connection`` and ``LoopStream`` is an
``asyncio.Protocol``: bytes the loop delivers are kept until ``read`` takes them (at most
``max_bytes`` at a time, reading paused past ``_HIGH_WATER`` held bytes), ``write`` hands
them to the transport and waits only while the transport asks to pause.  A write's deadline
is a timer on the loop, armed only when it has to wait.  A read's deadline is a time: a
read that has to wait sets it, and one timer per connection (``_read_timer``) checks it
when it fires and, when the deadline moved on meanwhile, arms itself for the new one.  A
stream at token rate waits once per event, and no longer makes and cancels a loop timer
each time.  TLS is ``loop.start_tls`` on the same protocol.  Failures are httpcore's
exceptions, as the anyio backend raises them, so httpx maps them as before:

=============================  ==============================================
what happened                  raised
=============================  ==============================================
connect failed / timed out     ``ConnectError`` / ``ConnectTimeout``
TLS handshake failed           ``ConnectError`` (``ConnectTimeout`` on time)
read: no byte within timeout   ``ReadTimeout``
read: peer closed (EOF)        ``b""`` (httpcore decides what that means)
read: connection broken        ``ReadError``
read: a reused connection      ``StaleConnection`` (a ``ReadError``)
closed or broken before any
byte of the answer
write: closed or broken        ``WriteError``
write: no room within timeout  ``WriteTimeout``
=============================  ==============================================

Writes are held until the next read (``_CORK_BYTES`` at most): httpcore writes a request's
head and its body separately, then reads the answer, so the two go out as one socket write
and one TCP segment (one syscall less per request, and the upstream reads the whole request
at once).  Nothing waits on the held bytes: the read that follows sends them first; a
write error found then is the read's ``ReadError``.

A kept-alive connection the upstream closes at the moment a request goes out on it (its
idle timeout and the request crossing on the wire: uvicorn under vLLM or SGLang closes idle
connections after 5 s) fails with nothing of the answer read.  An upstream that closed it
idle never read the request: the read (or the write that finds it closed) raises
``StaleConnection`` instead of answering EOF or ``ReadError``, and the transport
(``providers.upstream._ShardedTransport``) sends the request again, at once, on another
connection (``docs/architecture.md`` says what that costs when the upstream did read it).
Only then: a connection's first request (nothing says the upstream closed it idle) and a
request that got any byte of its answer fail as before.

``get_extra_info("is_readable")`` (httpcore asks it before reusing an idle connection:
readable while idle means the server closed it or sent junk) answers from what the
protocol already knows (held bytes, EOF, lost), with no ``poll()`` call.
"""

# ruff: noqa: ASYNC109  (httpcore's interface takes each call's timeout as an argument)
from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from httpcore import (
    AsyncNetworkBackend,
    AsyncNetworkStream,
    ConnectError,
    ConnectTimeout,
    ReadError,
    ReadTimeout,
    WriteError,
    WriteTimeout,
)

from providers.upstream import StaleConnection

__all__ = ["LoopBackend", "LoopStream"]

_HIGH_WATER = 256 * 1024  # held bytes past which the transport stops reading
_LOW_WATER = 64 * 1024
_CORK_BYTES = 64 * 1024  # written bytes held until the next read, at most (module docstring)
# a loop timer may fire this much before its time (the loop's clock resolution): a deadline
# that close counts as reached, as a timer armed for it would have
_TIMER_SLACK = 0.001


def _expire(fut: asyncio.Future[None], exc: type[Exception]) -> None:
    if not fut.done():
        fut.set_exception(exc())


class LoopStream(asyncio.Protocol, AsyncNetworkStream):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._transport: Any = None
        self._chunks: deque[bytes] = deque()
        self._held = 0
        self._eof = False
        self._lost = False
        self._exc: BaseException | None = None
        self._reader: asyncio.Future[None] | None = None
        self._writer: asyncio.Future[None] | None = None  # set while the transport is paused
        self._reading_paused = False
        self._corked: list[bytes] = []  # written, held until the next read (module docstring)
        self._corked_size = 0
        self._answered = False  # a byte came in: the connection carried an answer
        self._stale = False  # a request went out on it after an answer, and nothing came since
        self._deadline: float | None = None  # loop time by which the waiting read must get a byte
        self._read_timer: asyncio.TimerHandle | None = None  # fires at or before _deadline

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._answered = True
        self._stale = False
        self._chunks.append(data)
        self._held += len(data)
        if self._held > _HIGH_WATER and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()
        w = self._reader
        if w is not None and not w.done():
            w.set_result(None)

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._exc = exc
        self._wake()
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def pause_writing(self) -> None:
        if self._writer is None:
            self._writer = self._loop.create_future()

    def resume_writing(self) -> None:
        w, self._writer = self._writer, None
        if w is not None and not w.done():
            w.set_result(None)

    def _wake(self) -> None:
        for w in (self._reader, self._writer):
            if w is not None and not w.done():
                w.set_result(None)

    # -- httpcore.AsyncNetworkStream --------------------------------------------------------

    def _uncork(self) -> None:
        data = self._corked[0] if len(self._corked) == 1 else b"".join(self._corked)
        self._corked = []
        self._corked_size = 0
        if self._lost or self._transport is None or self._transport.is_closing():
            if self._stale:
                raise StaleConnection("the upstream closed the kept-alive connection")
            raise WriteError("the connection is closed")
        try:
            self._transport.write(data)
        except (OSError, RuntimeError) as e:
            raise WriteError(str(e) or type(e).__name__) from None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._corked:
            try:
                self._uncork()
            except StaleConnection:
                raise
            except WriteError as e:
                raise ReadError(str(e)) from None
        if not self._chunks:
            if self._eof or self._lost:
                return self._closed()
            loop = self._loop
            fut = self._reader = loop.create_future()
            if timeout is None:
                self._deadline = None
            else:
                self._deadline = deadline = loop.time() + timeout
                timer = self._read_timer
                if timer is None or timer.when() > deadline:  # (a shorter timeout than before)
                    if timer is not None:
                        timer.cancel()
                    self._read_timer = loop.call_at(deadline, self._read_deadline)
            try:
                await fut
            finally:
                self._reader = None
            if not self._chunks:
                return self._closed()
        chunks = self._chunks
        first = chunks[0]
        if len(first) <= max_bytes and (len(chunks) == 1 or len(first) + len(chunks[1]) > max_bytes):
            chunks.popleft()
            out = first
        else:
            parts, size = [], 0
            while chunks and size < max_bytes:
                c = chunks.popleft()
                if size + len(c) > max_bytes:
                    cut = max_bytes - size
                    chunks.appendleft(c[cut:])
                    c = c[:cut]
                parts.append(c)
                size += len(c)
            out = b"".join(parts)
        self._held -= len(out)
        if self._reading_paused and self._held < _LOW_WATER and not self._lost:
            self._reading_paused = False
            self._transport.resume_reading()
        return out

    def _read_deadline(self) -> None:
        """The read timer: a waiting read past its deadline fails; one whose deadline moved
        on (a later read's) gets the timer again, for then."""
        self._read_timer = None
        fut, deadline = self._reader, self._deadline
        if fut is None or fut.done() or deadline is None:
            return
        if self._loop.time() + _TIMER_SLACK >= deadline:
            fut.set_exception(ReadTimeout())
        else:
            self._read_timer = self._loop.call_at(deadline, self._read_deadline)

    def _closed(self) -> bytes:
        """A read that found the connection closed (EOF) or broken, nothing held: EOF is
        ``b""``, a break ``ReadError``; either is ``StaleConnection`` on a reused connection
        before any byte of the answer (module docstring)."""
        if self._stale:
            raise StaleConnection("the upstream closed the kept-alive connection")
        if self._exc is not None:
            raise ReadError(str(self._exc) or type(self._exc).__name__)
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        if self._answered and not self._chunks:
            self._stale = True  # until a byte of the answer comes (data_received)
        if self._lost or self._transport is None or self._transport.is_closing():
            if self._stale:
                raise StaleConnection("the upstream closed the kept-alive connection")
            raise WriteError("the connection is closed")
        self._corked.append(buffer)
        self._corked_size += len(buffer)
        if self._corked_size < _CORK_BYTES:
            return  # sent by the next read (module docstring)
        self._uncork()
        w = self._writer
        if w is not None:  # the transport's buffer is full: wait for room
            timer = self._loop.call_later(timeout, _expire, w, WriteTimeout) if timeout is not None else None
            try:
                await asyncio.shield(w)
            finally:
                if timer is not None:
                    timer.cancel()
            if self._lost:
                raise WriteError("the connection was lost while writing")

    async def aclose(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        if self._transport is not None:
            self._transport.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> AsyncNetworkStream:
        if self._corked:  # in the clear, before the handshake (a proxy's CONNECT)
            self._uncork()
        try:
            tls = await self._loop.start_tls(
                self._transport, self, ssl_context, server_hostname=server_hostname, ssl_handshake_timeout=timeout
            )
        except TimeoutError:
            self._transport.close()
            raise ConnectTimeout("TLS handshake timed out") from None
        except (OSError, ssl.SSLError, ConnectionError) as e:
            self._transport.close()
            raise ConnectError(str(e) or type(e).__name__) from None
        if tls is None:  # pragma: no cover - the loop closed it
            raise ConnectError("TLS handshake failed")
        self._transport = tls
        return self

    def get_extra_info(self, info: str) -> Any:
        t = self._transport
        if info == "is_readable":
            return bool(self._chunks) or self._eof or self._lost
        if t is None:
            return None
        if info == "ssl_object":
            return t.get_extra_info("ssl_object")
        if info == "client_addr":
            return t.get_extra_info("sockname")
        if info == "server_addr":
            return t.get_extra_info("peername")
        if info == "socket":
            return t.get_extra_info("socket")
        return None


class LoopBackend(AsyncNetworkBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> AsyncNetworkStream:
        local = (local_address, 0) if local_address else None
        return await _connect(
            lambda loop, make: loop.create_connection(make, host, port, local_addr=local),
            f"{host}:{port}",
            timeout,
            socket_options,
        )

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> AsyncNetworkStream:
        return await _connect(lambda loop, make: loop.create_unix_connection(make, path), path, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def _connect(
    open_: Callable[[asyncio.AbstractEventLoop, Callable[[], LoopStream]], Awaitable[Any]],
    where: str,
    timeout: float | None,
    options: Iterable[Any] | None,
) -> LoopStream:
    """A connection made by ``open_(loop, protocol_factory)`` on a new ``LoopStream``, its
    failures as httpcore's (the table in the module docstring)."""
    loop = asyncio.get_running_loop()
    stream = LoopStream(loop)
    try:
        async with asyncio.timeout(timeout):
            await open_(loop, lambda: stream)
    except TimeoutError:
        raise ConnectTimeout(f"connecting to {where} timed out") from None
    except OSError as e:
        raise ConnectError(str(e) or type(e).__name__) from None
    _set_options(stream, options)
    return stream


def _set_options(stream: LoopStream, options: Iterable[Any] | None) -> None:
    if not options:
        return
    sock = stream.get_extra_info("socket")
    for opt in options:
        sock.setsockopt(*opt)
