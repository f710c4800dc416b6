"""Upstream HTTP/1.1 exchanges driven straight through h11's readers and writers.

Theory of operation
-------------------
httpcore's pool opens a connection (``AsyncHTTPConnection``) and hands each exchange on it
to ``AsyncHTTP11Connection``, which drives an ``h11.Connection``: every event the client
sends or reads (the request, its body, its end; the answer's head, each read's data, its
end) goes through h11's state machine (both roles' states copied, transitions run to a
fixpoint, the reader and writer picked again), through httpcore's exception-mapping block
and, per step, a ``Trace`` block and a lock.  For one short request that was ~140 Python
calls in h11 and ~90 in httpcore, the largest share of the proxy's own work per request.

A client that sends one request at a time and reads its answer whole needs a fixed
sequence, not a state machine.  ``Http11Connection`` runs that sequence with h11's own
pieces, so the grammar, the checks and the error messages stay h11's:

======================  ====================================================================
step                    done with (h11's, unless said)
======================  ====================================================================
request head            ``h11.Request`` (method, target, headers and Host checks), then
                        ``write_request`` (Host first, the headers' own case)
request body framing    ``_body_framing`` (chunked or Content-Length, 0 when neither),
                        its ``WRITERS``' writer for each chunk and the end (too much or
                        too little data: ``LocalProtocolError``); a body in hand of the
                        Content-Length of a kept head: its bytes, as that writer
                        writes them
answer head             ``app.h11_head.read_response_head`` on a ``ReceiveBuffer`` (what
                        h11's reader table holds in this process); 1xx heads are read past,
                        as h11 does; 101 ends the exchange as httpcore's upgrade
answer body framing     ``_body_framing`` (empty for HEAD, 204, 304, CONNECT 2xx; chunked;
                        Content-Length; else to the connection's end), its ``READERS``'
                        reader (the chunked one is ``app.h11_chunks``')
keep-alive              ``_keep_alive`` on both heads (``Connection: close``, HTTP/1.0)
======================  ====================================================================

and what ``h11.Connection`` and httpcore add around them, in this order:

=========================================  ===============================================
case                                       result (as httpcore and h11 give it)
=========================================  ===============================================
a write fails (``WriteError``)             ignored: the answer is read anyway (an
                                           upstream may answer and close early); the
                                           connection is not reused
EOF before the answer's head is whole      ``RemoteProtocolError("Server disconnected
                                           without sending a response.")``
a head or body the readers refuse          ``RemoteProtocolError``, h11's message
more than 100 KiB held, no event in it     ``RemoteProtocolError("Receive buffer too
                                           long")``
EOF inside a body                          the reader's ``read_eof``: the end for a body
                                           framed by the connection's end, else
                                           ``RemoteProtocolError`` (h11's message);
                                           with bytes held that make no event:
                                           ``RemoteProtocolError("peer unexpectedly
                                           closed connection")``
a request h11 refuses to write             ``LocalProtocolError``, h11's message
network errors and timeouts                the network stream's, as they are
=========================================  ===============================================

Two differences, both in when a connection is reused:

=========================================  ====================  ======================
after the answer                           h11 and httpcore      here
=========================================  ====================  ======================
bytes an upstream sent past the answer's   idle: they are read   closed
end                                        as the next answer
an answer framed by the connection's end   idle (closed: the     closed
(no Content-Length, not chunked)           next request fails)
=========================================  ====================  ======================

Request heads: h11 checks and writes the same head for every request a provider sends,
but for its Content-Length.  ``_HEADS`` keeps what h11 wrote for a request whose one
Content-Length is plain digits (what h11 writes as it is), cut around that value, keyed by
everything else h11 reads (method, target, every other header, the length's place and
name); the next such request's head is the two pieces around its own length, and its body
goes through h11's ``ContentLengthWriter`` as before.  A head h11 refuses, frames by
Transfer-Encoding, or whose length it would normalise or compare (spaces, commas, two
Content-Length lines) is never kept: h11 writes it, or raises, every time.

The answer's body is a ``ResponseBody``: ``read()`` gives the next bytes (``b""`` at the
end), ``aclose()`` ends the exchange.  When the answer was read to its end, both sides kept
the connection alive and nothing more was received, the connection is idle in its pool
again; in every other case (an error, a cancellation, a body left unread) it is closed.
``providers.upstream_body`` reads ``read()`` directly; httpcore's pool iterates it.

There is no lock: every state change is synchronous, between two awaits, on the event
loop's one thread.  ``install()`` makes httpcore's connections use this class for every
HTTP/1.1 connection (``httpcore._async.connection.AsyncHTTP11Connection``), and httpcore's
pools make ``PooledConnection``s: httpcore's connection, whose requests, once it is
connected, skip its lock and go straight to this class.
``tests/unit/test_http11.py`` runs this class and httpcore's on the same scripted answers
and failures and compares what each client and each upstream saw.
"""

# ruff: noqa: ASYNC109  (httpcore's interface takes each call's timeout as an argument)
from __future__ import annotations

import enum
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import h11
import httpcore._async.connection as _hc_connection
import httpcore._async.connection_pool as _hc_pool
from h11._connection import _body_framing, _keep_alive
from h11._headers import get_comma_header
from h11._readers import READERS
from h11._receivebuffer import ReceiveBuffer
from h11._state import SEND_BODY
from h11._writers import WRITERS, ContentLengthWriter, write_request
from httpcore import ConnectionNotAvailable, LocalProtocolError, RemoteProtocolError, WriteError
from httpcore._async.http11 import AsyncHTTP11UpgradeStream
from httpcore._async.interfaces import AsyncConnectionInterface
from httpcore._models import Origin, Request, Response

from app.h11_head import read_response_head

__all__ = ["Http11Connection", "PooledConnection", "ResponseBody", "install"]

_READ_BYTES = 64 * 1024
_MAX_INCOMPLETE = 100 * 1024  # what httpcore gives h11 (max_incomplete_event_size)
_DATA = h11.Data
_END = h11.EndOfMessage
_EOM = h11.EndOfMessage()
# framing → body reader / writer class (the tables themselves: app.h11_chunks puts its
# chunked reader in the readers' table)
_BODY_READERS: dict[str, Any] = READERS[SEND_BODY]  # type: ignore[assignment]
_BODY_WRITERS: dict[str, Any] = WRITERS[SEND_BODY]  # type: ignore[assignment]
# request heads as h11 wrote them: (method, target, Content-Length's place and name, the
# headers before it, after it) → (the head up to the length's value, from after it,
# keep-alive, upgrade proposed); cleared when full
_HEADS: dict[tuple[Any, ...], tuple[bytes, bytes, bool, bool]] = {}
_HEADS_MAX = 256
# a Content-Length value h11 writes as it is (digits alone, at most its 20)
_plain_length = re.compile(rb"[0-9]{1,20}").fullmatch


class _State(enum.IntEnum):
    NEW = 0
    ACTIVE = 1
    IDLE = 2
    CLOSED = 3


NEW, ACTIVE, IDLE, CLOSED = _State.NEW, _State.ACTIVE, _State.IDLE, _State.CLOSED


class Http11Connection(AsyncConnectionInterface):
    """One HTTP/1.1 connection to an upstream, one exchange at a time (module docstring)."""

    def __init__(self, origin: Origin, stream: Any, keepalive_expiry: float | None = None) -> None:
        self._origin = origin
        self._network_stream = stream
        self._keepalive_expiry = keepalive_expiry
        self._expire_at: float | None = None
        self._state = NEW
        self._request_count = 0
        self._buf = ReceiveBuffer()
        self._reader: Any = None  # the answer body's reader
        # its ``__call__``, bound: a call of the bound method runs in the interpreter's own loop,
        # where calling the reader itself goes through its class's call slot (a new C frame)
        self._step: Any = None
        self._reusable = False  # this exchange may leave the connection idle (set per exchange)
        self._body_done = False  # the answer's body was read to its end

    # -- one exchange ---------------------------------------------------------------------

    async def handle_async_request(self, request: Request) -> Response:
        if not self.can_handle_request(request.url.origin):
            raise RuntimeError(f"Attempted to send request to {request.url.origin} on connection to {self._origin}")
        if self._state is not NEW and self._state is not IDLE:
            raise ConnectionNotAvailable()
        self._request_count += 1
        self._state = ACTIVE
        self._expire_at = None
        self._reader = self._step = None
        self._body_done = False
        try:
            timeouts = request.extensions.get("timeout", {})
            self._reusable = False
            try:
                keep, upgrade = await self._send(request, timeouts.get("write", None))
            except WriteError:
                # as httpcore: the upstream may have answered and closed early
                keep, upgrade = False, _proposes_upgrade(request)
            event = await self._read_head(timeouts.get("read", None), upgrade)
            method = request.method
            stream = self._network_stream
            status = event.status_code
            if status == 101 or (method == b"CONNECT" and 200 <= status < 300):
                # the connection is the caller's from here on (httpcore's upgrade stream)
                stream = AsyncHTTP11UpgradeStream(stream, bytes(self._buf))
                self._buf = ReceiveBuffer()
                content: Any = ResponseBody(self, None)
                content._done = True
            else:
                framing, args = _body_framing(method, event)
                self._reader = reader = _BODY_READERS[framing](*args)
                self._step = reader.__call__
                self._reusable = keep and _keep_alive(event) and framing != "http/1.0"
                content = ResponseBody(self, timeouts.get("read", None))
            return Response(
                status=status,
                headers=[(name, value) for name, _, value in event.headers._full_items],
                content=content,
                extensions={
                    "http_version": b"HTTP/" + event.http_version,
                    "reason_phrase": event.reason,
                    "network_stream": stream,
                },
            )
        except BaseException:
            await self._response_closed()
            raise

    async def _send(self, request: Request, timeout: float | None) -> tuple[bool, bool]:
        """Write the request; whether it lets the connection be kept alive, and whether it
        proposes an upgrade."""
        out: list[bytes] = []
        write = out.append
        stream = self._network_stream
        body: Any = request.stream
        head = _known_head(request)
        if head is not None:
            pre, length, post, keep, upgrade = head
            write(pre)
            write(length)
            write(post)
            size = int(length)
            if hasattr(body, "__iter__"):
                chunks = list(body)
                if sum(map(len, chunks)) == size:
                    # what h11's Content-Length writer writes for a body of its length, and
                    # for its end: the bytes as they are, then nothing; head, body, one write
                    out += chunks
                    await stream.write(b"".join(out), timeout=timeout)
                    return keep, upgrade
                body = chunks  # (its errors: the writer's, below)
            writer: Any = ContentLengthWriter(size)
        else:
            try:
                event = h11.Request(method=request.method, target=request.url.target, headers=request.headers)
                write_request(event, write)
                framing, args = _body_framing(request.method, event)
                writer = _BODY_WRITERS[framing](*args)
            except h11.LocalProtocolError as e:
                raise LocalProtocolError(str(e)) from e
            keep, upgrade = _keep_alive(event), bool(get_comma_header(event.headers, b"upgrade"))
        if hasattr(body, "__iter__"):
            # bytes in hand (httpx's and httpcore's ByteStream are both kinds of iterable):
            # the head, the body and its end in one write
            for chunk in body:
                self._write_body(writer, chunk, write)
        else:
            # a body that may wait for its bytes: the head goes first, each chunk as it comes
            await stream.write(b"".join(out), timeout=timeout)
            out.clear()
            async for chunk in body:
                self._write_body(writer, chunk, write)
                await stream.write(b"".join(out), timeout=timeout)
                out.clear()
        try:
            writer(_EOM, write)
        except h11.LocalProtocolError as e:
            raise LocalProtocolError(str(e)) from e
        if out:
            await stream.write(b"".join(out), timeout=timeout)
        return keep, upgrade

    @staticmethod
    def _write_body(writer: Any, chunk: bytes, write: Any) -> None:
        try:
            writer(_DATA(data=chunk), write)
        except h11.LocalProtocolError as e:
            raise LocalProtocolError(str(e)) from e

    async def _read_head(self, timeout: float | None, upgrade: bool) -> Any:
        buf = self._buf
        while True:
            try:
                event = read_response_head(buf) if buf else None
            except h11.ProtocolError as e:
                raise RemoteProtocolError(str(e)) from e
            if event is None:
                if len(buf) > _MAX_INCOMPLETE:
                    raise RemoteProtocolError("Receive buffer too long")
                data = await self._network_stream.read(_READ_BYTES, timeout=timeout)
                if not data:
                    raise RemoteProtocolError("Server disconnected without sending a response.")
                buf += data
                continue
            if event.__class__ is h11.Response:
                return event
            if event.status_code == 101:
                if not upgrade:  # h11's refusal, as the client reads it
                    raise RemoteProtocolError("Received server _SWITCH_UPGRADE event without a pending proposal")
                return event
            # 100 Continue, 103 Early Hints: h11 reads past them to the answer

    async def read(self, timeout: float | None) -> bytes:
        """The answer body's next bytes; ``b""`` at its end."""
        reader = self._reader
        step = self._step
        buf = self._buf
        while True:
            try:
                event = step(buf)
                if event is None:
                    if len(buf) > _MAX_INCOMPLETE:
                        raise RemoteProtocolError("Receive buffer too long")
                    data = await self._network_stream.read(_READ_BYTES, timeout=timeout)
                    if data:
                        buf += data
                        continue
                    self._reusable = False  # the upstream closed it
                    if buf:  # h11's words for bytes that will never make an event
                        raise RemoteProtocolError("peer unexpectedly closed connection")
                    event = reader.read_eof()
            except h11.ProtocolError as e:
                raise RemoteProtocolError(str(e)) from e
            if event.__class__ is _DATA:
                return bytes(event.data)
            if isinstance(event, _END):
                self._body_done = True
                return b""

    async def _response_closed(self) -> None:
        """The exchange is over: idle again when it was whole and both sides keep it alive."""
        if self._state is not ACTIVE:
            return
        if self._reusable and self._body_done and not self._buf:
            self._state = IDLE
            self._reader = self._step = None
            if self._keepalive_expiry is not None:
                self._expire_at = time.monotonic() + self._keepalive_expiry
        else:
            await self.aclose()

    async def aclose(self) -> None:
        self._state = CLOSED
        self._reader = self._step = None
        await self._network_stream.aclose()

    # -- what the pool asks ---------------------------------------------------------------

    def can_handle_request(self, origin: Origin) -> bool:
        return origin == self._origin

    def is_available(self) -> bool:
        return self._state is IDLE

    def has_expired(self) -> bool:
        expired = self._expire_at is not None and time.monotonic() > self._expire_at
        # idle and readable: the upstream closed it (or sent what no request asked for)
        return expired or (self._state is IDLE and bool(self._network_stream.get_extra_info("is_readable")))

    def is_idle(self) -> bool:
        return self._state is IDLE

    def is_closed(self) -> bool:
        return self._state is CLOSED

    def info(self) -> str:
        return f"{str(self._origin)!r}, HTTP/1.1, {self._state.name}, Request Count: {self._request_count}"

    def __repr__(self) -> str:
        return f"<{self.__class__.__name__} [{str(self._origin)!r}, {self._state.name}, Request Count: {self._request_count}]>"


class ResponseBody:
    """An answer's body on its connection: ``read()`` each part, ``aclose()`` at the end."""

    __slots__ = ("_conn", "_timeout", "_done", "_closed")

    def __init__(self, conn: Http11Connection, timeout: float | None) -> None:
        self._conn = conn
        self._timeout = timeout
        self._done = False  # read to its end (or failed): every read after is the end
        self._closed = False

    async def read(self) -> bytes:
        """The next bytes, ``b""`` at the end; an error or a cancellation closes the
        exchange (and so the connection) before it is raised."""
        if self._done:
            return b""
        try:
            data = await self._conn.read(self._timeout)
        except BaseException:
            self._done = True
            await self.aclose()
            raise
        if not data:
            self._done = True
        return data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while data := await self.read():
            yield data

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self._conn._response_closed()


class PooledConnection(_hc_connection.AsyncHTTPConnection):
    """httpcore's ``AsyncHTTPConnection`` (the connect on the first request, TLS, ALPN, the
    state before and after), whose exchanges, once it is connected, go straight to its
    HTTP/1.1 connection: its lock only orders requests that wait for the connect (the pool
    gives an HTTP/1.1 connection no second request while it connects), and the connection
    checks the origin itself."""

    async def handle_async_request(self, request: Request) -> Response:
        conn = self._connection
        if conn is None:
            return await super().handle_async_request(request)
        return await conn.handle_async_request(request)


def _known_head(request: Request) -> tuple[bytes, bytes, bytes, bool, bool] | None:
    """The request's head as h11 writes it, in three pieces (up to its Content-Length
    value, the value, the rest), its keep-alive and its upgrade proposal, from ``_HEADS``;
    None when h11 must write it (module docstring, "Request heads")."""
    headers = request.headers
    if type(headers) is not list:
        return None
    at = -1
    for i, (name, _) in enumerate(headers):
        if len(name) == 14 and name.lower() == b"content-length":
            if at >= 0:
                return None  # twice: h11 compares the values
            at = i
    if at < 0:
        return None
    name, length = headers[at]
    if _plain_length(length) is None:
        return None  # h11 normalises (spaces, commas) or refuses it
    key = (request.method, request.url.target, at, name, tuple(headers[:at]), tuple(headers[at + 1 :]))
    known = _HEADS.get(key)
    if known is None:
        known = _render_head(request, at)
        if known is None:
            return None
        if len(_HEADS) >= _HEADS_MAX:
            _HEADS.clear()
        _HEADS[key] = known
    pre, post, keep, upgrade = known
    return pre, length, post, keep, upgrade


def _render_head(request: Request, at: int) -> tuple[bytes, bytes, bool, bool] | None:
    """h11's checks and rendering of the request's head with a Content-Length of 0, cut
    around that value; None when h11 refuses it or frames its body otherwise."""
    headers = list(request.headers)
    name = headers[at][0]
    headers[at] = (name, b"0")
    try:
        event = h11.Request(method=request.method, target=request.url.target, headers=headers)
        out: list[bytes] = []
        write_request(event, out.append)
    except h11.LocalProtocolError:
        return None  # the full path raises it, with h11's message
    if _body_framing(request.method, event) != ("content-length", (0,)):
        return None  # Transfer-Encoding beats Content-Length: h11's framing, every time
    head = b"".join(out)
    line = b"\r\n" + name + b": 0\r\n"
    cut = head.index(line) + len(line) - 3  # just before the "0"
    return head[:cut], head[cut + 1 :], _keep_alive(event), bool(get_comma_header(event.headers, b"upgrade"))


def _proposes_upgrade(request: Request) -> bool:
    return any(name.lower() == b"upgrade" and value for name, value in request.headers)


def install() -> None:
    """httpcore's connections run HTTP/1.1 exchanges with ``Http11Connection``, and its
    pools make ``PooledConnection``s (idempotent; fails loudly if a pinned httpcore release
    renamed a class it replaces)."""
    if not hasattr(_hc_connection, "AsyncHTTP11Connection"):
        raise RuntimeError("httpcore._async.connection has no AsyncHTTP11Connection: check the pinned httpcore")
    if not hasattr(_hc_pool, "AsyncHTTPConnection"):
        raise RuntimeError("httpcore._async.connection_pool has no AsyncHTTPConnection: check the pinned httpcore")
    _hc_connection.AsyncHTTP11Connection = Http11Connection  # type: ignore[misc,assignment]
    _hc_pool.AsyncHTTPConnection = PooledConnection  # type: ignore[misc]
