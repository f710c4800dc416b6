"""httpcore's connection pool, with a short way for a request a kept-alive connection takes.

Theory of operation
-------------------
httpcore's ``AsyncConnectionPool`` treats every request alike: it queues an
``AsyncPoolRequest`` (with an event to wait on), runs its assignment pass (drop closed
connections, close expired ones and idle ones over ``max_keepalive_connections``, then give
each queued request the first available connection to its origin, or a new one), waits on
the event, runs the exchange, and wraps the answer in a new ``Response`` whose body, a
``PoolByteStream``, runs the same pass again when it is closed.  For a request that finds a
kept-alive connection, the common case for an agent's turns, that is a quarter of the
instructions the whole upstream exchange costs.

``Pool`` is httpcore's pool (its connection list, its request list, its connection
factory, its pass, its closing) with one short way in front, taken when httpcore's pass
would give the request a connection at once and run it there:

==============================================  ==================================================
the pool, as the request comes                  way
==============================================  ==================================================
no request waiting, a connection to the origin  the tidy pass (below); the first available
available after the tidy pass                   connection, the exchange on it, its answer with
                                                its body wrapped in a ``PooledBody`` (no new
                                                ``Response``, no event, no wait)
anything else: requests waiting, a new          httpcore's ``handle_async_request``, as it is
connection to make, the pool full, an
unsupported scheme
the connection turns out busy                   out of the request list again, then httpcore's
(``ConnectionNotAvailable``)                    way, as httpcore's own loop retries it (behind
                                                any request queued meanwhile)
the exchange fails or is cancelled              out of the request list, httpcore's pass, the
                                                connections it drops closed, the error raised
==============================================  ==================================================

The tidy pass is the first half of httpcore's pass, in its order and with its rules
(httpcore counts every connection, idle or not, against ``max_keepalive_connections``);
with no request waiting it is the whole of it.  A ``PooledBody`` closes as
``PoolByteStream`` does (the connection's body, the request out of the list, the pass,
what it drops closed), with the tidy pass when nothing waits, and without the cancellation
shield httpcore puts around the body's close: the app's is a no-op
(``app/httpcore_sync.py``), and the app's connections close without waiting.  The request
list holds ``Held`` entries beside httpcore's own: never queued, so httpcore's pass skips
them as it skips a request it assigned.  ``tests/unit/test_upstream_pool.py`` runs this
pool and httpcore's on the same sequences of requests and compares answers, errors and the
pool's state after each.
"""

from __future__ import annotations

from typing import Any

from httpcore import AsyncConnectionPool, ConnectionNotAvailable, Request, Response
from httpcore._async.connection_pool import PoolByteStream

__all__ = ["Held", "Pool", "PooledBody"]

_SCHEMES = (b"http", b"https")


class Held:
    """A request the short way gave its connection: what httpcore's pass and ``repr`` read
    of an ``AsyncPoolRequest`` (never queued)."""

    __slots__ = ("request", "connection")

    def __init__(self, request: Request, connection: Any) -> None:
        self.request = request
        self.connection = connection

    def is_queued(self) -> bool:
        return False


class PooledBody(PoolByteStream):
    """``PoolByteStream`` whose close runs the tidy pass when no request waits."""

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            stream = self._stream
            if hasattr(stream, "aclose"):
                await stream.aclose()
            pool: Pool = self._pool  # type: ignore[assignment]
            requests = pool._requests
            requests.remove(self._pool_request)
            closing = pool._tidy() if _none_waiting(requests) else pool._assign_requests_to_connections()
            if closing:
                await pool._close_connections(closing)


def _none_waiting(requests: list[Any]) -> bool:
    for r in requests:  # noqa: SIM110  (a loop: no generator made per request)
        if r.connection is None:
            return False
    return True


class Pool(AsyncConnectionPool):
    """httpcore's pool with the short way of the module docstring."""

    @classmethod
    def like(cls, pool: AsyncConnectionPool) -> Pool:
        """A ``Pool`` with ``pool``'s settings (what httpx's transport gave it), and no
        connection or request yet."""
        new = cls.__new__(cls)
        new.__dict__.update(pool.__dict__)
        new._connections = []
        new._requests = []
        return new

    async def handle_async_request(self, request: Request) -> Response:
        url = request.url
        requests: list[Any] = self._requests  # httpcore's AsyncPoolRequests and Held entries
        if url.scheme not in _SCHEMES or not _none_waiting(requests):
            return await super().handle_async_request(request)
        closing = self._tidy()
        origin = url.origin
        conn = None
        for c in self._connections:
            if c.can_handle_request(origin) and c.is_available():
                conn = c
                break
        if conn is None:  # a new connection, or a wait: httpcore's way
            if closing:
                await self._close_connections(closing)
            return await super().handle_async_request(request)
        held = Held(request, conn)
        requests.append(held)
        try:
            if closing:
                await self._close_connections(closing)
            response = await conn.handle_async_request(request)
        except ConnectionNotAvailable:
            requests.remove(held)
            return await super().handle_async_request(request)
        except BaseException as exc:
            requests.remove(held)
            closing = self._assign_requests_to_connections()
            await self._close_connections(closing)
            raise exc from None
        response.stream = PooledBody(stream=response.stream, pool_request=held, pool=self)  # type: ignore[arg-type]
        return response

    def _tidy(self) -> list[Any]:
        """The first half of httpcore's ``_assign_requests_to_connections``: closed
        connections dropped, expired ones and idle ones over the keep-alive limit taken out
        to be closed (returned)."""
        closing = []
        conns = self._connections
        limit = self._max_keepalive_connections
        for c in list(conns):
            if c.is_closed():
                conns.remove(c)
            elif c.has_expired() or (c.is_idle() and len(conns) > limit):
                conns.remove(c)
                closing.append(c)
        return closing
