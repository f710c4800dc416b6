"""The upstream HTTP/1.1 client: an httpx transport on asyncio protocols and httptools.

Theory of operation
-------------------
httpx is the upstream client's API; this module is a transport under it
(``httpx.AsyncBaseTransport``, httpx's public interface for one), built only on public
APIs: ``asyncio.Protocol`` connections from ``loop.create_connection`` and the response
parser of httptools (llhttp, the C parser uvicorn already brings).  A read of the socket is
parsed in one call, and every body byte of that read goes to the caller as one piece: a
burst of 200 SSE events the upstream wrote at once is one ``bytes`` for the Bridge, where a
stack of pure-Python layers handed it over a chunk at a time.  ``FastTransport`` is the
default; ``server.upstream_transport: httpx`` selects httpx's own ``AsyncHTTPTransport``
instead, which the upstream-I/O tests run on as well (the oracle).

One exchange, on a ``_Conn`` (one TCP or TLS connection, one request at a time):

1. ``handle_async_request`` takes the origin's most recently used idle connection (LIFO:
   the one least likely to have been closed by the upstream's own idle timeout), or opens
   one (``connect`` timeout);
2. the request's head and body go out in one ``transport.write``, a body of 64 KiB or more
   in a second one (the ``write`` timeout applies while the transport asks the writer to
   pause);
3. ``data_received`` feeds the parser; the response's head completes the waiting
   ``handle_async_request`` (``read`` timeout for that wait), which returns an
   ``httpx.Response`` whose stream is a ``_Body``;
4. each ``_Body.__anext__`` returns every body byte received since the last one, or waits
   for the next read (``read`` timeout: the longest silence); reading is paused while more
   than ``_HIGH_WATER`` bytes wait for the caller;
5. ``_Body.aclose`` returns the connection to its origin's idle list when the answer was
   read to its end and both sides keep the connection alive; otherwise it closes it.

Failures, as httpx's own transport raises them (so the pipeline maps them the same way):

=============================================  ==========================================
what happened                                  raised
=============================================  ==========================================
connect refused / unreachable, TLS failed      ``httpx.ConnectError``
connect, or TLS handshake, past its timeout    ``httpx.ConnectTimeout``
write: no room past the write timeout          ``httpx.WriteTimeout``
write: the connection is closed or broken      ``httpx.WriteError``
no byte of the head / body within ``read``     ``httpx.ReadTimeout``
the connection broke while reading             ``httpx.ReadError``
closed before the answer's end; a head or      ``httpx.RemoteProtocolError``
body the parser refuses
more than ``max_connections`` to one origin    ``httpx.PoolTimeout`` after ``pool``
=============================================  ==========================================

The stale-connection resend: an upstream may close a kept-alive connection at the moment a
request goes out on it (its idle timeout and the request crossing on the wire: uvicorn under
vLLM or SGLang closes idle connections after 5 s).  When a *reused* connection closes or
breaks before any byte of the answer came, the upstream never answered it; the request is
sent again at once on another connection, at most ``_STALE_RESENDS`` times.  A connection's
first request, and a request that got any byte of its answer, fail as above.

Idle connections are kept for ``keepalive_expiry`` seconds (``timeouts.pool_idle``), at most
``max_keepalive`` per origin; one the upstream closes while idle leaves the idle list at once
(``connection_lost``).  Cancelling a caller (a client that left) cancels its wait; the
connection, in the middle of an answer, is closed by the ``aclose`` that follows.
"""

# ruff: noqa: ASYNC109  (a read's timeout is the request's, as httpx's extensions give it)
from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
import time
from collections import deque
from typing import Any

import httptools
import httpx

__all__ = ["FastTransport", "default_tls"]

_HIGH_WATER = 256 * 1024  # body bytes held for the caller past which reading pauses
_STALE_RESENDS = 4
_DEFAULT_PORTS = {b"http": 80, b"https": 443}


class _Conn(asyncio.Protocol):
    """One upstream connection and the answer it is reading (module docstring)."""

    __slots__ = ("pool", "key", "transport", "parser", "status", "headers", "chunks", "held", "complete",
                 "closed", "exc", "waiter", "head_done", "got_bytes", "reused", "keep_alive", "until_close",
                 "paused", "idle_since", "write_waiter", "head_only", "counted")  # fmt: skip

    def __init__(self, pool: FastTransport, key: tuple[bytes, bytes, int]) -> None:
        self.pool = pool
        self.key = key
        self.transport: Any = None
        self.parser: Any = None
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: list[bytes] = []
        self.held = 0
        self.complete = False
        self.closed = False
        self.exc: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.head_done = False
        self.got_bytes = False  # a byte of the current answer came
        self.reused = False  # it carried an answer before this request
        self.keep_alive = True
        self.until_close = False  # a body delimited by the connection's end
        self.paused = False
        self.idle_since = 0.0
        self.write_waiter: asyncio.Future[None] | None = None
        self.head_only = False  # the answer to a HEAD request has no body
        self.counted = False  # holds one of its origin's connection slots

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        parser = self.parser
        if parser is None:  # bytes on an idle connection: junk, or an answer nobody asked for
            self.transport.close()
            return
        if self.complete:  # bytes past the end of the answer: never reused (what would they be?)
            self.keep_alive = False
            return
        try:
            parser.feed_data(data)
        except httptools.HttpParserError as e:
            self.keep_alive = False
            if not isinstance(e.__context__, _PastTheEnd):
                self.exc = httpx.RemoteProtocolError(f"the upstream's answer is not valid HTTP/1.1: {e}")
            self.transport.close()
        if self.held > _HIGH_WATER and not self.paused and not self.complete:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        if exc is not None and self.exc is None:
            self.exc = exc
        self._wake()
        if self.write_waiter is not None and not self.write_waiter.done():
            self.write_waiter.set_result(None)
        self.pool._forget(self)

    def pause_writing(self) -> None:
        if self.write_waiter is None or self.write_waiter.done():
            self.write_waiter = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self.write_waiter is not None and not self.write_waiter.done():
            self.write_waiter.set_result(None)

    # -- httptools callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:  # a second message in the same read: not an answer anyone asked for
            raise _PastTheEnd

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if 100 <= self.status < 200 and self.status != 101:  # an interim answer: the real one follows
            self.headers = []
            return
        self.head_done = True
        self.keep_alive = self.parser.should_keep_alive()
        if self.head_only or self.status in (204, 304):
            self.complete = True
            return
        lengths = {n.lower() for n, _ in self.headers}
        self.until_close = b"content-length" not in lengths and b"transfer-encoding" not in lengths

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.held += len(body)

    def on_message_complete(self) -> None:
        if self.head_done:
            self.complete = True

    # -- the exchange -------------------------------------------------------------------------

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def _wait(self, timeout: float | None) -> None:
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            if timeout is None:
                await self.waiter
            else:
                async with asyncio.timeout(timeout):
                    await self.waiter
        except TimeoutError:
            raise httpx.ReadTimeout(f"no data from the upstream within {timeout:g}s") from None
        finally:
            self.waiter = None

    def _broken(self, stale: bool) -> Exception:
        if stale:
            return _Stale()
        if self.exc is not None and not isinstance(self.exc, httpx.HTTPError):
            return httpx.ReadError(f"the upstream connection broke: {type(self.exc).__name__}: {self.exc}")
        if isinstance(self.exc, httpx.HTTPError):
            return self.exc
        return httpx.RemoteProtocolError("the upstream closed the connection before the end of its answer")

    async def send(self, head: bytes, body: bytes, method: bytes, timeouts: dict[str, Any]) -> None:
        if self.closed:
            raise _Stale() if self.reused else httpx.WriteError("the upstream connection is closed")
        self.parser = httptools.HttpResponseParser(self)
        self.head_only = method == b"HEAD"
        self.transport.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            self.transport.write(body)
        if self.write_waiter is not None and not self.write_waiter.done():
            timeout = timeouts.get("write")
            try:
                async with asyncio.timeout(timeout):
                    await self.write_waiter
            except TimeoutError:
                raise httpx.WriteTimeout(f"the upstream took no more bytes within {timeout:g}s") from None
        if self.closed and not self.got_bytes:
            raise self._broken(self.reused)

    async def head(self, timeout: float | None) -> None:
        while not self.head_done:
            if self.exc is not None or self.closed:
                raise self._broken(self.reused and not self.got_bytes)
            await self._wait(timeout)

    async def read(self, timeout: float | None) -> bytes:
        while True:
            if self.chunks:
                data = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
                self.chunks = []
                self.held = 0
                if self.paused and not self.closed:
                    self.paused = False
                    self.transport.resume_reading()
                return data
            if self.complete:
                return b""
            if self.exc is not None:
                raise self._broken(False)
            if self.closed:
                if self.until_close:
                    self.complete = True
                    self.keep_alive = False
                    return b""
                raise self._broken(False)
            await self._wait(timeout)

    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.closed and self.exc is None and not self.chunks

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _PastTheEnd(Exception):
    """Bytes past the end of the answer: the parse stops there, the connection is not reused."""


class _Stale(Exception):
    """A reused connection closed before any byte of the answer: send the request again."""


class _Body(httpx.AsyncByteStream):
    """An answer's body: every byte received since the last ``__anext__``, one piece per call."""

    __slots__ = ("_conn", "_timeout", "_done")

    def __init__(self, conn: _Conn, timeout: float | None) -> None:
        self._conn = conn
        self._timeout = timeout
        self._done = False

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        if self._done:
            raise StopAsyncIteration
        try:
            data = await self._conn.read(self._timeout)
        except BaseException:
            self._done = True
            self._conn.close()
            raise
        if data:
            return data
        self._done = True
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self._done = True
        conn = self._conn
        if conn.reusable():
            conn.pool._release(conn)
        else:
            conn.close()


@functools.cache
def default_tls() -> ssl.SSLContext:
    """The process's TLS context for the upstreams (httpx's: the CA bundle of certifi),
    made at the first https connection: loading the bundle costs 1.7 MB of memory and a few
    ms, which a configuration of plain-http upstreams (a model served on the LAN, the demo)
    never needs.  One for every pool."""
    return httpx.create_ssl_context(trust_env=False)


class FastTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 to the upstreams with a keep-alive pool per origin (module docstring)."""

    def __init__(
        self,
        *,
        max_connections: int = 256,
        max_keepalive: int = 32,
        keepalive_expiry: float = 90.0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.max_connections = max_connections
        self.max_keepalive = max_keepalive
        self.keepalive_expiry = keepalive_expiry
        self._tls = tls
        self._idle: dict[tuple[bytes, bytes, int], deque[_Conn]] = {}
        # one slot per connection an origin may have open (max_connections)
        self._slots: dict[tuple[bytes, bytes, int], asyncio.Semaphore] = {}
        self._open = 0  # connections open (or opening), all origins
        self._closing = False

    # -- the pool -----------------------------------------------------------------------------

    def _take_idle(self, key: tuple[bytes, bytes, int]) -> _Conn | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        limit = time.monotonic() - self.keepalive_expiry
        while idle:
            conn = idle.pop()  # the most recently used
            if conn.closed or conn.idle_since < limit:
                conn.close()
                continue
            return conn
        return None

    def _release(self, conn: _Conn) -> None:
        slots = self._slots.get(conn.key)
        if self._closing or self.keepalive_expiry <= 0 or (slots is not None and slots.locked()):
            conn.close()  # (every slot taken: its slot goes to whoever waits for one)
            return
        idle = self._idle.setdefault(conn.key, deque())
        if len(idle) >= self.max_keepalive:
            conn.close()
            return
        conn.parser = None
        conn.status = 0
        conn.headers = []
        conn.complete = conn.head_done = conn.got_bytes = conn.until_close = False
        conn.reused = True
        conn.idle_since = time.monotonic()
        idle.append(conn)

    def _forget(self, conn: _Conn) -> None:
        """A connection closed: out of the idle list, its slot free."""
        idle = self._idle.get(conn.key)
        if idle is not None:
            with contextlib.suppress(ValueError):
                idle.remove(conn)
        if conn.counted:
            conn.counted = False
            self._open -= 1
            self._slots[conn.key].release()

    async def _connect(self, key: tuple[bytes, bytes, int], timeouts: dict[str, Any]) -> _Conn:
        scheme, host, port = key
        slots = self._slots.get(key)
        if slots is None:
            slots = self._slots[key] = asyncio.Semaphore(self.max_connections)
        if slots.locked():
            try:
                async with asyncio.timeout(timeouts.get("pool")):
                    await slots.acquire()
            except TimeoutError:
                raise httpx.PoolTimeout(f"no free connection to {host.decode()} within the pool timeout") from None
        else:
            await slots.acquire()
        conn = _Conn(self, key)
        conn.counted = True
        self._open += 1
        loop = asyncio.get_running_loop()
        tls: ssl.SSLContext | None = None
        if scheme == b"https":
            if self._tls is None:
                self._tls = default_tls()
            tls = self._tls
        name = host.decode("ascii")
        try:
            async with asyncio.timeout(timeouts.get("connect")):
                await loop.create_connection(lambda: conn, name, port, ssl=tls, server_hostname=name if tls else None)
        except TimeoutError:
            self._forget(conn)
            raise httpx.ConnectTimeout(f"connecting to {name}:{port} timed out") from None
        except (OSError, ssl.SSLError) as e:
            self._forget(conn)
            raise httpx.ConnectError(f"connecting to {name}:{port} failed: {e}") from None
        except BaseException:
            self._forget(conn)
            raise
        return conn

    def in_flight(self) -> int:
        """Connections carrying an exchange now: open, and not idle in the pool."""
        return self._open - sum(len(idle) for idle in self._idle.values())

    # -- httpx's transport interface ----------------------------------------------------------

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.raw_scheme
        if scheme not in _DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(f"the upstream URL's scheme {url.scheme!r} is not http or https")
        key = (scheme, url.raw_host, url.port or _DEFAULT_PORTS[scheme])
        timeouts = request.extensions.get("timeout") or {}
        body = await request.aread()
        raw = request.headers.raw
        if "transfer-encoding" in request.headers:  # a streamed body, read whole: sent sized
            raw = [(k, v) for k, v in raw if k.lower() not in (b"transfer-encoding", b"content-length")]
            raw.append((b"Content-Length", b"%d" % len(body)))
        head = b"".join(
            (request.method.encode(), b" ", url.raw_path, b" HTTP/1.1\r\n",
             *(b"%s: %s\r\n" % (k, v) for k, v in raw), b"\r\n")
        )  # fmt: skip
        method = request.method.encode()
        resends = 0
        while True:
            conn = self._take_idle(key) or await self._connect(key, timeouts)
            try:
                await conn.send(head, body, method, timeouts)
                await conn.head(timeouts.get("read"))
                break
            except _Stale:
                conn.close()
                if resends >= _STALE_RESENDS:
                    raise httpx.RemoteProtocolError(
                        "the upstream closed every kept-alive connection as the request went out"
                    ) from None
                resends += 1
            except BaseException:
                conn.close()
                raise
        return httpx.Response(
            status_code=conn.status,
            headers=conn.headers,
            stream=_Body(conn, timeouts.get("read")),
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def aclose(self) -> None:
        self._closing = True
        for idle in self._idle.values():
            while idle:
                idle.pop().close()
