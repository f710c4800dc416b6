"""An answer whose length is known goes to the client in one socket write, head and body.

Theory of operation
-------------------
uvicorn's httptools server (``RequestResponseCycle.send``) writes an answer's head to the
socket as soon as the app sends ``http.response.start``, and its body on each
``http.response.body``: a non-streamed answer was two ``write`` calls and two TCP segments,
so the client woke up twice, and each write is a trip through the kernel's TCP path.

``SizedHeadCycle`` keeps the head of an answer that declares its ``Content-Length`` (every
non-streamed answer the proxy makes: JSON answers and errors; Starlette's responses) until
its body's first write, and writes the two as one.  uvicorn's own ``send`` still makes
every byte and every check: ``transport`` is a property that uvicorn reads right before
each write, and it answers the connection's transport, but the cycle itself (its
``write``: the head kept, then put in front of the body's first write) when the write is a
sized answer's head, told by uvicorn's state (the answer started, no head written yet) and
its framing as uvicorn read it (``chunked_encoding``), until that body's first write:

=======================================  ===============================================
answer                                   written
=======================================  ===============================================
framed by ``Content-Length``            with its body's first write, in one write
(uvicorn: the length header comes first
of the two framing headers)
an answer to ``HEAD``                    at once (uvicorn writes no body for it)
any other head (a stream's: chunked; a   at once, as uvicorn writes it: a stream's
204 or 304 without a length)             status line does not wait for its first event
a ``100 Continue`` (before the head)     at once
the client gone before the body          nothing (uvicorn writes nothing once it knows)
the app fails between head and body      nothing: uvicorn closes the connection, which
                                         the client sees as an answer that never came
                                         (it saw a head and no body before)
=======================================  ===============================================

Cost (``docs/performance.md``): a non-streamed request ~9,700 instructions more (its
``Content-Length`` through uvicorn's header checks ~5,700 of them, the property and the
join the rest) and one ``write`` less (~5 µs of the kernel's time with a client waiting on
the other core: more than those instructions take); a stream ~1,000 more per write (the
property).

``install()`` makes uvicorn's httptools protocol build this cycle for every request (it
looks the class up by its module's name at each request's head); the proxy serves with
httptools only (``app.cli``).
"""

from __future__ import annotations

from typing import Any

import uvicorn.protocols.http.httptools_impl as _httptools
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle


class SizedHeadCycle(RequestResponseCycle):
    """uvicorn's request-response cycle, a sized answer's head held for its body's first
    write."""

    _real: Any  # the connection's transport
    _head = 0  # 0: no head written yet, 1: the head held (in _held), 2: the head written
    _held = b""

    @property
    def transport(self) -> Any:
        """What uvicorn writes to: the connection's transport, but the cycle itself (its
        ``write``) from a sized answer's head to its body's first write."""
        if self._head == 2:
            return self._real
        if self._head == 0 and self.response_started:  # the head's write: uvicorn read its framing
            if self.chunked_encoding is False and self.scope["method"] != "HEAD":
                self._head = 1
                return self
            self._head = 2
            return self._real
        return self if self._head == 1 else self._real  # (before the head: a 100 Continue)

    @transport.setter
    def transport(self, transport: Any) -> None:
        self._real = transport

    def write(self, data: bytes) -> None:
        """The head kept; then the body's first write, the head in front of it."""
        if self._held:
            self._head = 2
            self._real.write(self._held + data)
            self._held = b""
        else:
            self._held = data

    def close(self) -> None:
        self._real.close()

    def is_closing(self) -> bool:
        return bool(self._real.is_closing())


def install() -> None:
    """uvicorn's httptools protocol builds ``SizedHeadCycle`` for every request."""
    _httptools.RequestResponseCycle = SizedHeadCycle  # type: ignore[misc]
