"""Upstream chunked bodies read as one ``Data`` event per read, not one per HTTP chunk.

Theory of operation
-------------------
httpx reads an HTTP/1.1 upstream through httpcore, which parses with h11.  h11's
``ChunkedReader`` returns one ``Data`` event per HTTP chunk, and an SSE upstream sends one
chunk per event, so a read of 64 KiB that holds 200 events became 200 trips through
h11, httpcore's ``_receive_event``, four async generators (httpcore's connection and pool
streams, httpx's response stream and ``aiter_raw``) and the pipeline's loop: ~12 µs per
event, twice what the Bridge spends on it.

``CoalescingChunkedReader`` replaces h11's reader: it parses every chunk *already in h11's
buffer* in one pass (the same grammar and errors as h11's: ``chunk_header_re``, the CRLF
after each chunk, the trailer) and answers their data as one ``Data`` event; the bytes it
consumed leave the buffer once per call (h11's reader cut the buffer's bytearray once per
chunk, moving the rest of a 64 KiB read each time).  A size line of hex digits alone, what
upstreams send, is one small pattern's match, and a chunk whose data and CRLF are both there
is taken in one step; any other size line goes through h11's ``chunk_header_re``.  It never
waits for bytes that have not arrived, so an event is not delayed: a token-rate stream (one
chunk per read) goes through as before.  What comes after the joined data keeps its order:

==================================  ===================================================
in the buffer                       this reader answers
==================================  ===================================================
whole chunks, part of one           one ``Data`` with all their data (a cut chunk's
                                    part included), now
no chunk data                       ``None`` (h11: need data)
chunks, then the last chunk         the ``Data`` now, ``EndOfMessage`` once the trailer
                                    is complete
chunks, then a malformed header     the ``Data`` now, ``LocalProtocolError`` next call
or chunk end                        (h11 reports it as ``RemoteProtocolError``)
the peer closed mid-body            ``RemoteProtocolError`` (incomplete chunked read)
==================================  ===================================================

``install()`` puts it in h11's reader table (``READERS[SEND_BODY]["chunked"]``, read by
every ``h11.Connection`` when a body starts); the app's own server is uvicorn on httptools,
so in this process the table serves httpcore's upstream connections only.
"""

from __future__ import annotations

import re
from typing import Any

from h11 import Data, EndOfMessage, LocalProtocolError, RemoteProtocolError
from h11._readers import READERS, _decode_header_lines, chunk_header_re
from h11._state import SEND_BODY

__all__ = ["CoalescingChunkedReader", "install"]

_CRLF = b"\r\n"
# a chunk size line of hex digits alone (h11's chunk_size accepts up to 20: kept below)
_plain_size = re.compile(rb"([0-9A-Fa-f]{1,16})\r\n").match


class CoalescingChunkedReader:
    __slots__ = ("_left", "_crlf", "_trailer", "_next")

    def __init__(self) -> None:
        self._left = 0  # bytes of the current chunk still to come
        self._crlf = False  # the current chunk's data is complete: its CRLF comes next
        self._trailer = False  # the last chunk came: the trailer (and blank line) next
        self._next: Any = None  # an error found after data already answered

    def __call__(self, buf: Any) -> Data | EndOfMessage | None:
        held = self._next
        if held is not None:
            self._next = None
            raise held
        if self._trailer:
            return self._end(buf)
        data: bytearray = buf._data
        n = len(data)
        pos = 0
        left = self._left
        crlf = self._crlf
        first_starts = left == 0
        spans: list[tuple[int, int]] = []
        err: LocalProtocolError | None = None
        last = False
        try:
            while pos < n:
                if left:
                    take = left if left < n - pos else n - pos
                    spans.append((pos, pos + take))
                    pos += take
                    left -= take
                    if left:
                        break
                    crlf = True
                elif crlf:
                    if n - pos < 2:
                        if data[pos:n] != _CRLF[: n - pos]:
                            raise LocalProtocolError(f"malformed chunk footer: {bytes(data[pos:n])!r}")
                        break
                    if data[pos : pos + 2] != _CRLF:
                        raise LocalProtocolError(f"malformed chunk footer: {bytes(data[pos : pos + 2])!r}")
                    pos += 2
                    crlf = False
                else:
                    m = _plain_size(data, pos)
                    if m is not None:  # hex digits only, what upstreams send
                        left = int(m[1], 16)
                        pos = m.end()
                    else:  # extensions, whitespace, junk (or not all here): h11's own grammar decides
                        i = data.find(_CRLF, pos)
                        if i < 0:
                            break
                        line = bytes(data[pos : i + 2])
                        m = chunk_header_re.fullmatch(line)
                        if m is None:
                            raise LocalProtocolError(f"illegal chunk header: {line!r}")
                        left = int(m["chunk_size"], 16)
                        pos = i + 2
                    if left == 0:
                        last = True
                        break
                    end = pos + left
                    if end + 2 <= n and data.startswith(_CRLF, end):  # the whole chunk is here
                        spans.append((pos, end))
                        pos = end + 2
                        left = 0
        except LocalProtocolError as e:
            err = e
        self._left = left
        self._crlf = crlf
        out = None
        if spans:
            if len(spans) == 1:
                a, b = spans[0]
                out = bytes(data[a:b])
            else:
                with memoryview(data) as mv:
                    out = b"".join([mv[a:b] for a, b in spans])
        if pos:
            del data[:pos]
            buf._next_line_search = 0
            buf._multiple_lines_search = 0
        if last:
            self._trailer = True
        if out is not None:
            if err is not None:
                self._next = err
            return Data(data=out, chunk_start=first_starts, chunk_end=left == 0)
        if err is not None:
            raise err
        return self._end(buf) if last else None

    @staticmethod
    def _end(buf: Any) -> EndOfMessage | None:
        lines = buf.maybe_extract_lines()
        if lines is None:
            return None
        return EndOfMessage(headers=list(_decode_header_lines(lines)))

    def read_eof(self) -> Any:
        raise RemoteProtocolError(
            "peer closed connection without sending complete message body (incomplete chunked read)"
        )


def install() -> None:
    """Make h11 read chunked bodies with ``CoalescingChunkedReader`` (idempotent)."""
    READERS[SEND_BODY]["chunked"] = CoalescingChunkedReader  # type: ignore[index]
