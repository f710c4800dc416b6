"""An upstream answer's body read straight off its HTTP/1.1 connection: one iterator where
httpx and httpcore stack four async generators.

Theory of operation
-------------------
httpx hands an answer's body out through ``AsyncResponseStream`` (httpcore's errors mapped
to httpx's), over httpcore's ``PoolByteStream`` (the pool's request closed on an error),
over the connection's own stream.  Each read of a stream resumed each layer in turn, and
each answer made, started (registering each with the loop's async-generator hooks) and
finalised their async generators.

The app's HTTP/1.1 connections (``app.http11``) give a body that reads its next bytes
itself: ``read()``, ``b""`` at the end, the exchange closed on any failure.  ``BodyStream``
calls it, one coroutine per read, and does what the layers above it did:

====================================  ==================================================
``read()``                            ``BodyStream``, as the layers
====================================  ==================================================
bytes                                 those bytes
``b""``                               the end (``StopAsyncIteration``), and every read
                                      after it; nothing is closed here: the response's
                                      ``aclose`` puts the connection back in its pool
an httpcore error                     the pool stream closed (the pool's request out of
                                      it), then httpx's class for it
any other exception, or a             the same closing, then raised as it is
cancellation
====================================  ==================================================

``wrap`` takes this way only for httpcore's pool stream (or the proxy's pools' own,
``providers.upstream_pool.PooledBody``) over a body with ``read``; any other stream keeps
httpx's ``AsyncResponseStream``.  ``tests/unit/test_upstream_body.py``
runs both on the same answers and failures.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import httpx._transports.default as _httpx_default
from httpcore._async.connection_pool import PoolByteStream
from httpx._transports.default import AsyncResponseStream

from providers.upstream_pool import PooledBody

__all__ = ["BodyStream", "wrap"]


class BodyStream(httpx.AsyncByteStream):
    """An answer's body: an async iterator of its bytes, one read per ``__anext__``."""

    __slots__ = ("_pool_stream", "_read", "_done")

    def __init__(self, pool_stream: PoolByteStream, read: Callable[[], Awaitable[bytes]]) -> None:
        self._pool_stream = pool_stream
        self._read = read  # the connection's next bytes, b"" at the end
        self._done = False

    def __aiter__(self) -> BodyStream:
        return self

    async def __anext__(self) -> bytes:
        if self._done:
            raise StopAsyncIteration
        with _httpx_default.map_httpcore_exceptions():  # read at each use (app/httpcore_errors.py)
            try:
                data = await self._read()
            except BaseException:
                self._done = True
                await self._pool_stream.aclose()
                raise
        if data:
            return data
        self._done = True
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self._done = True
        await self._pool_stream.aclose()


def wrap(stream: Any) -> httpx.AsyncByteStream:
    """The httpx body stream for httpcore's response stream ``stream``."""
    if stream.__class__ is PoolByteStream or stream.__class__ is PooledBody:
        # a connection's body that reads its parts itself (``app.http11.ResponseBody``)
        read = getattr(stream._stream, "read", None)
        if read is not None:
            return BodyStream(stream, read)
    return AsyncResponseStream(stream)
