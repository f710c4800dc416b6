"""Redis's protocol on a connection of the process's own: the limits' counters and the
store's puts (app/limits.py, app/store.py).

Theory of operation
-------------------
On these hot paths redis-py cost more CPU than the round trip: it packs every argument in
Python, checks a connection out of its pool per call and reads each reply under its own
timeout.  This module is the short way, shared by both callers:

* ``pack`` writes one command in RESP: each argument a bulk string (text, an integer,
  bytes).
* ``params`` reads where to connect from a redis-py client's pool: a host and port or a
  Unix socket, a user, a password, a database, the timeouts.  It is None for a cluster,
  TLS, a credential provider or a client without one pool: the caller keeps redis-py's
  connections there.
* ``Wire`` is one connection, an asyncio protocol whose replies hiredis reads.  It opens
  at the first batch, logs in (AUTH) and selects the database (SELECT).  A connection
  serves the event loop that opened it; a batch from another loop opens one there.
* A ``Batch`` is commands written in one write.  Batches are pipelined: one does not wait
  for the replies of the one before.  Replies come back in the order sent; an error reply
  is a ``ResponseError`` in its place, and the batch's other replies stand.
* No reply within the timeout (the pool's ``socket_timeout``) drops the connection, and
  every batch still waiting fails with redis-py's ``TimeoutError``.  A lost connection
  fails them with its ``ConnectionError``.  The next batch opens a new connection.
* ``Wire.call`` sends one batch and waits for its replies.  A batch lost with a connection
  opened before it is sent once more, on a new one: a connection the server closed
  meanwhile (a restart, an idle timeout) costs nothing.  Its commands may so run twice.

A script the server lost (NOSCRIPT) is the caller's to load and send again: it knows
which commands did not run.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Sequence
from typing import Any, Protocol

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.logs import log

__all__ = ["Batch", "Wire", "pack", "params"]


def pack(cmd: Sequence[Any]) -> bytes:
    """One command in RESP: its arguments as bulk strings (bytes as they are, others as text)."""
    if bytes not in map(type, cmd):
        text = "".join([f"${len(s)}\r\n{s}\r\n" for s in map(str, cmd)])
        if text.isascii():  # (every length above counted bytes)
            return b"*%d\r\n%b" % (len(cmd), text.encode())
    out = [b"*%d\r\n" % len(cmd)]
    for a in cmd:
        b = a if type(a) is bytes else str(a).encode()
        out.append(b"$%d\r\n%b\r\n" % (len(b), b))
    return b"".join(out)


def params(redis: Any) -> dict[str, Any] | None:
    """Where a ``Wire`` goes, from a redis-py client's pool: a plain TCP or Unix socket
    connection, a user, a password, a database; None for any other client (a cluster, TLS,
    a credential provider, a client without one pool), which keeps redis-py's connections."""
    pool = getattr(redis, "connection_pool", None)
    if pool is None:
        return None
    from redis.asyncio.connection import Connection, UnixDomainSocketConnection

    kw = getattr(pool, "connection_kwargs", {})
    if kw.get("credential_provider") is not None:
        return None
    if pool.connection_class is Connection:
        where: dict[str, Any] = {"host": kw.get("host") or "localhost", "port": int(kw.get("port") or 6379)}
    elif pool.connection_class is UnixDomainSocketConnection:
        where = {"path": kw["path"]}
    else:
        return None
    timeout = float(kw.get("socket_timeout") or 5.0)
    return {
        **where,
        "username": kw.get("username"),
        "password": kw.get("password"),
        "db": int(kw.get("db") or 0),
        "timeout": timeout,
        "connect_timeout": float(kw.get("socket_connect_timeout") or timeout),
    }


class Batch(Protocol):
    """What a ``Wire`` needs of a batch: commands written together (``data``, ``n`` of
    them), a list for their replies, ``landed`` called when every reply is read and
    ``failed`` when the batch got none (its connection was lost, or not opened).  ``fresh``
    is set by the wire: written on a connection opened for it."""

    data: bytes
    n: int
    replies: list[Any]
    sent: float
    fresh: bool

    def landed(self) -> None: ...

    def failed(self, e: Exception) -> None: ...


class _Call:
    """A batch someone awaits (``Wire.call``, the login)."""

    __slots__ = ("data", "n", "replies", "sent", "fresh", "fut")

    def __init__(self, data: bytes, n: int, fut: asyncio.Future[list[Any]]) -> None:
        self.data = data
        self.n = n
        self.replies: list[Any] = []
        self.sent = 0.0
        self.fresh = True
        self.fut = fut

    def landed(self) -> None:
        if not self.fut.done():
            self.fut.set_result(self.replies)

    def failed(self, e: Exception) -> None:
        if not self.fut.done():
            self.fut.set_exception(e)


class _Protocol(asyncio.Protocol):
    """One open connection: batches written as they come, their replies read in order; a
    lost connection, or replies late by more than ``timeout`` seconds, fails every batch
    still waiting."""

    def __init__(self, wire: Wire, timeout: float) -> None:
        import hiredis

        self.wire = wire
        self.timeout = timeout
        self.reader = hiredis.Reader(replyError=ResponseError)
        self.pending: collections.deque[Batch] = collections.deque()
        self.transport: asyncio.Transport | None = None
        self.watch: asyncio.TimerHandle | None = None
        self.late = False  # dropped for replies too late: its batches fail with TimeoutError
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, batch: Batch) -> None:
        assert self.transport is not None
        batch.sent = time.monotonic()
        self.pending.append(batch)
        self.transport.write(batch.data)
        if self.watch is None:
            self.watch = self.loop.call_later(self.timeout, self._late)

    def _late(self) -> None:
        self.watch = None
        if not self.pending or self.transport is None:
            return
        left = self.pending[0].sent + self.timeout - time.monotonic()
        if left > 0:
            self.watch = self.loop.call_later(left, self._late)
        else:  # Redis does not answer: the connection goes, its batches fail as timed out
            self.late = True
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        reader.feed(data)
        pending = self.pending
        try:
            while (reply := reader.gets()) is not False:
                batch = pending[0]
                batch.replies.append(reply)
                if len(batch.replies) == batch.n:
                    pending.popleft()
                    batch.landed()
        except Exception as e:  # (a reply past the batches, a protocol error): the connection goes
            log.error("redis_wire_error", error=type(e).__name__)
            if self.transport is not None:
                self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.watch is not None:
            self.watch.cancel()
            self.watch = None
        if self.wire._proto is self:
            self.wire._proto = None
        pending, self.pending = self.pending, collections.deque()
        err: Exception = (
            RedisTimeoutError(f"Redis did not answer within {self.timeout} s")
            if self.late
            else RedisConnectionError(f"Redis connection lost ({type(exc).__name__ if exc else 'closed'})")
        )
        for batch in pending:
            batch.failed(err)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class Wire:
    """A pipelined connection of our own to one Redis (``params``' address), opened when
    the first batch comes and again after it was lost."""

    def __init__(self, where: dict[str, Any]) -> None:
        self.params = where
        self._proto: _Protocol | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._queued: list[Batch] = []  # batches waiting for the connection

    @property
    def connected(self) -> bool:
        return self._proto is not None and self._proto.transport is not None

    def send(self, batch: Batch) -> None:
        """Write ``batch`` now, or once the connection is open (from the event loop)."""
        proto = self._proto
        if proto is not None and proto.transport is not None and proto.loop is asyncio.get_running_loop():
            batch.fresh = False
            proto.send(batch)
            return
        self._queued.append(batch)
        loop = asyncio.get_running_loop()
        if self._connecting is None or self._connecting.get_loop() is not loop:
            self._connecting = loop.create_task(self._connect())

    async def call(self, cmds: Sequence[Sequence[Any]]) -> list[Any]:
        """``cmds`` in one batch; their replies, an error reply as its ``ResponseError``.  A
        batch lost with a connection opened before it goes once more on a new one."""
        data = b"".join([pack(c) for c in cmds])
        loop = asyncio.get_running_loop()
        for again in (True, False):
            batch = _Call(data, len(cmds), loop.create_future())
            self.send(batch)
            try:
                return await batch.fut
            except RedisConnectionError:
                if batch.fresh or not again:
                    raise
        raise AssertionError("unreachable")

    async def _connect(self) -> None:
        """Open the connection, log in, then write the batches that waited for it (a
        connection not opened fails them)."""
        p = self.params
        loop = asyncio.get_running_loop()
        proto = _Protocol(self, p["timeout"])
        try:
            try:
                if "path" in p:
                    opening = loop.create_unix_connection(lambda: proto, p["path"])
                else:
                    opening = loop.create_connection(lambda: proto, p["host"], p["port"])
                await asyncio.wait_for(opening, p["connect_timeout"])
                hello: list[tuple[Any, ...]] = []
                if p["password"] is not None:
                    auth = ("AUTH", p["username"], p["password"]) if p["username"] else ("AUTH", p["password"])
                    hello.append(auth)
                if p["db"]:
                    hello.append(("SELECT", p["db"]))
                if hello:
                    login = _Call(b"".join([pack(c) for c in hello]), len(hello), loop.create_future())
                    proto.send(login)
                    for reply in await asyncio.wait_for(login.fut, p["timeout"]):
                        if isinstance(reply, Exception):
                            raise reply
            except (RedisConnectionError, RedisTimeoutError):
                raise
            except TimeoutError as e:  # (as redis-py's: a hung Redis is not tried again)
                raise RedisTimeoutError("Redis did not answer in time (connecting)") from e
            except OSError as e:  # (refused, unreachable)
                raise RedisConnectionError(f"Redis unreachable ({type(e).__name__}: {e})") from e
        except Exception as e:
            proto.close()
            queued, self._queued = self._queued, []
            for batch in queued:
                batch.failed(e)
            return
        finally:
            self._connecting = None
        self._proto = proto
        queued, self._queued = self._queued, []
        for batch in queued:
            proto.send(batch)

    def close(self) -> None:
        proto, self._proto = self._proto, None
        if proto is not None:
            proto.close()
