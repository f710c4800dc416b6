"""An upstream answer's body read straight off its HTTP/1.1 connection: one iterator where
httpx and httpcore stack four async generators.

Theory of operation
-------------------
httpx hands an answer's body out through ``AsyncResponseStream`` (httpcore's errors mapped
to httpx's), over httpcore's ``PoolByteStream`` (the pool's request closed on an error),
over ``HTTP11ConnectionByteStream`` (a ``Trace`` block; the response closed on an error),
over the connection's ``_receive_response_body`` (h11's events to bytes).  Each read of a
stream resumed the four generators in turn, and each answer made, started (registering each
with the loop's async-generator hooks) and finalised four of them.

``BodyStream`` reads the same events from the same connection (``_receive_event``: h11 fed,
its errors mapped to httpcore's) in one coroutine per read, and does what the layers did:

====================================  ==================================================
the connection's next event           ``BodyStream``, as the four layers
====================================  ==================================================
h11 ``Data``                          its bytes
h11 ``EndOfMessage`` (or ``PAUSED``)  the end (``StopAsyncIteration``), and every read
                                      after it; nothing is closed here: the response's
                                      ``aclose`` puts the connection back in its pool
an httpcore error                     the pool stream closed (the response first, then
                                      the pool's request), then httpx's class for it
any other exception, or a             the same closing, then raised as it is
cancellation
====================================  ==================================================

Left out: the ``Trace("receive_response_body")`` block, which reports only to a ``trace``
request extension or httpcore's DEBUG log (the proxy sets neither: ``app/logs.py`` keeps
httpcore's logger at WARNING).  ``wrap`` takes the fast way only for httpcore's pool stream
over an HTTP/1.1 connection stream, the one kind the proxy's pools make; any other stream
keeps httpx's ``AsyncResponseStream``.  ``tests/unit/test_upstream_body.py`` runs both on
the same answers and failures.
"""

from __future__ import annotations

from typing import Any

import h11
import httpx
import httpx._transports.default as _httpx_default
from httpcore._async.connection_pool import PoolByteStream
from httpcore._async.http11 import HTTP11ConnectionByteStream
from httpx._transports.default import AsyncResponseStream

__all__ = ["BodyStream", "wrap"]

_DATA = h11.Data
_END = (h11.EndOfMessage, h11.PAUSED)


class BodyStream(httpx.AsyncByteStream):
    """An answer's body: an async iterator of its bytes, one read per ``__anext__``."""

    __slots__ = ("_pool_stream", "_conn", "_timeout", "_done")

    def __init__(self, pool_stream: PoolByteStream, conn_stream: HTTP11ConnectionByteStream) -> None:
        self._pool_stream = pool_stream
        self._conn = conn_stream._connection
        self._timeout = conn_stream._request.extensions.get("timeout", {}).get("read", None)
        self._done = False

    def __aiter__(self) -> BodyStream:
        return self

    async def __anext__(self) -> bytes:
        if self._done:
            raise StopAsyncIteration
        with _httpx_default.map_httpcore_exceptions():  # read at each use (app/httpcore_errors.py)
            try:
                while True:
                    event = await self._conn._receive_event(timeout=self._timeout)
                    if event.__class__ is _DATA:
                        return bytes(event.data)
                    if isinstance(event, _END):
                        break
            except BaseException:
                self._done = True
                await self._pool_stream.aclose()
                raise
        self._done = True
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self._done = True
        await self._pool_stream.aclose()


def wrap(stream: Any) -> httpx.AsyncByteStream:
    """The httpx body stream for httpcore's response stream ``stream``."""
    if stream.__class__ is PoolByteStream:
        inner = stream._stream
        if inner.__class__ is HTTP11ConnectionByteStream:
            return BodyStream(stream, inner)
    return AsyncResponseStream(stream)
