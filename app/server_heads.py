"""An answer whose length is known goes to the client in one socket write, head and body.

Theory of operation
-------------------
uvicorn's httptools server (``RequestResponseCycle.send``) writes an answer's head to the
socket as soon as the app sends ``http.response.start``, and its body on each
``http.response.body``: a non-streamed answer was two ``write`` calls and two TCP segments,
so the client woke up twice, and each write is a trip through the kernel's TCP path.

``SizedHeadCycle`` keeps the head of an answer that declares its ``Content-Length`` (every
non-streamed answer the proxy makes: JSON answers and errors; Starlette's responses) until
its first body, and writes the two as one.  uvicorn's own ``send`` still makes every byte
and every check: the cycle only lends it a transport that catches the head's write, then
one that puts the head in front of the body's first write.

=======================================  ===============================================
answer                                   written
=======================================  ===============================================
head with ``Content-Length``             with its first body, in one write; the head
                                         alone when that body writes nothing (``HEAD``)
any other head (a stream's: chunked)     at once, as uvicorn writes it: a stream's
                                         status line does not wait for its first event
the client gone before the body          nothing (uvicorn writes nothing once it knows)
the app fails between head and body      nothing: uvicorn closes the connection, which
                                         the client sees as an answer that never came
                                         (it saw a head and no body before)
=======================================  ===============================================

``install()`` makes uvicorn's httptools protocol build this cycle for every request (it
looks the class up by its module's name at each request's head); the proxy serves with
httptools only (``app.cli``).
"""

from __future__ import annotations

from typing import Any

import uvicorn.protocols.http.httptools_impl as _httptools
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle


class _CatchHead:
    """A transport that keeps what is written to it (the head, one write)."""

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data


class _HeadFirst:
    """The real transport, the held head put in front of the first write through it."""

    __slots__ = ("transport", "head")

    def __init__(self, transport: Any, head: bytes) -> None:
        self.transport = transport
        self.head = head

    def write(self, data: bytes) -> None:
        head = self.head
        if head:
            self.head = b""
            data = head + data
        self.transport.write(data)

    def close(self) -> None:
        self.transport.close()


def _sized(message: Any) -> bool:
    for name, _ in message.get("headers", ()):  # noqa: SIM110  (a loop: no generator made per answer)
        if len(name) == 14 and name.lower() == b"content-length":
            return True
    return False


class SizedHeadCycle(RequestResponseCycle):
    """uvicorn's request-response cycle, a sized answer's head held for its body."""

    held = b""  # the head's bytes, written with the next body

    async def send(self, message: Any) -> None:
        held = self.held
        if held:
            self.held = b""
            transport = self.transport
            joined = self.transport = _HeadFirst(transport, held)  # type: ignore[assignment]
            try:
                await RequestResponseCycle.send(self, message)
            finally:
                self.transport = transport
            if joined.head and not self.disconnected:  # nothing written (HEAD, an error)
                transport.write(joined.head)
            return
        if message["type"] == "http.response.start" and not self.response_started and _sized(message):
            transport = self.transport
            head = self.transport = _CatchHead()  # type: ignore[assignment]
            try:
                await RequestResponseCycle.send(self, message)
            finally:
                self.transport = transport
            self.held = head.data
            return
        await RequestResponseCycle.send(self, message)


def install() -> None:
    """uvicorn's httptools protocol builds ``SizedHeadCycle`` for every request."""
    _httptools.RequestResponseCycle = SizedHeadCycle  # type: ignore[misc]
