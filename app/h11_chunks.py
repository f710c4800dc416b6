"""Upstream chunked bodies read as one ``Data`` event per read, not one per HTTP chunk, by llhttp.

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

That loop is still ~1.5 µs of Python per chunk, one chunk per SSE event.
``LlhttpChunkedReader``, the reader installed, has llhttp (``httptools``, the C parser
uvicorn serves with) parse each read instead, ~0.25 µs a chunk, and keeps
``CoalescingChunkedReader`` as the authority: a read llhttp refuses is read again by it from
the last chunk boundary, so h11's grammar decides what is accepted (its class docstring
has the two exceptions, both harmless).  Instructions per text event through the proxy:
Chat 18,028 -> 10,436, Responses 32,242 -> 24,867 (``python -m bench.instructions``).

``install()`` puts it in h11's reader table (``READERS[SEND_BODY]["chunked"]``, read by
every ``h11.Connection`` when a body starts, and by ``app.http11``); the app's own server is
uvicorn on httptools, so in this process the table serves the upstream connections only.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import httptools
from h11 import Data, EndOfMessage, LocalProtocolError, RemoteProtocolError
from h11._readers import READERS, _decode_header_lines, chunk_header_re
from h11._state import SEND_BODY

__all__ = ["CoalescingChunkedReader", "LlhttpChunkedReader", "install"]

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


# what llhttp reads before a body: a head that frames it as chunked, and ``Connection: close``
# so that a byte after the body's end (but CR and LF, which it skips) is its error, not the
# start of another message
_LLHTTP_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
# the most bytes kept since the last chunk boundary to read again if llhttp refuses a chunk
_RAW_MAX = 256 * 1024


class _Sink:
    """llhttp's callbacks (httptools looks them up once, at the parser's making): each piece
    of chunk data appended as it is parsed, and counters of chunk heads and ends (C callables
    with no argument: no Python frame per chunk)."""

    __slots__ = ("on_body", "on_chunk_header", "on_chunk_complete", "ended")

    def __init__(self, parts: list[bytes]) -> None:
        self.on_body = parts.append
        self.on_chunk_header = itertools.count().__next__
        self.on_chunk_complete = itertools.count().__next__
        self.ended = False

    def on_message_complete(self) -> None:
        self.ended = True


class LlhttpChunkedReader:
    """A chunked body parsed by llhttp (``httptools``, uvicorn's own parser, in C), with
    ``CoalescingChunkedReader`` as the authority wherever llhttp refuses what it reads.

    llhttp parses each read whole: its chunks' data come out as one ``Data`` (a cut chunk's
    part included), nothing waited for, the bytes leave the buffer; about 1 µs less per chunk
    than the Python loop, which is one chunk per event of an SSE upstream.  Its grammar is
    stricter than h11's in a few places (whitespace after a chunk size, some chunk
    extensions, some trailers): a read it refuses is read again by ``CoalescingChunkedReader``
    from the last chunk boundary, and that reader answers from then on, its data less what
    llhttp already gave.  So what h11 accepts is accepted and what it refuses is refused,
    with the same data before the error, but for two things llhttp takes that h11 does not:
    a chunk size of more than 20 hex digits (leading zeros; h11's own limit) and CR or LF
    bytes after the body's end (skipped; h11 leaves them in the buffer, so the connection is
    not reused).  Any other byte after the end is left in the buffer, as h11 leaves it.

    A chunk boundary is where a read ended after a chunk's CRLF, every chunk begun ended
    (the two counters): the bytes read since the last one (``_RAW_MAX`` at most; past it,
    llhttp's refusal is the error) are kept for the reading again."""

    __slots__ = ("_parser", "_parts", "_sink", "_raw", "_raw_size", "_given", "_then", "_next", "_at_boundary")

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._sink = _Sink(self._parts)
        # made at the first read: the reader is made with the answer's head, on the way to
        # the client's first byte; the parser's making (~1.4 µs) waits for the body
        self._parser: Any = None
        self._raw: list[bytes] | None = []  # the reads since the last chunk boundary
        self._raw_size = 0
        self._given = 0  # data bytes answered since the last chunk boundary
        self._then: Any = None  # CoalescingChunkedReader, once llhttp refused a read
        self._next: Any = None  # EndOfMessage, or an error, after data already answered
        self._at_boundary = True

    def __call__(self, buf: Any) -> Data | EndOfMessage | None:
        then = self._then
        if then is not None:
            return then(buf)
        held = self._next
        if held is not None:
            if held.__class__ is EndOfMessage:
                self._next = None
                return held
            raise held  # and again, should it be called again
        data: bytearray = buf._data
        if not data:
            return None
        sink = self._sink
        parts = self._parts
        parser = self._parser
        if parser is None:
            parser = self._parser = httptools.HttpResponseParser(sink)
            parser.feed_data(_LLHTTP_HEAD)
        try:
            parser.feed_data(data)
        except httptools.HttpParserError as e:
            if not sink.ended:
                return self._refused(buf, e)
            # bytes after the body's end (not CR or LF): left in the buffer, as h11 leaves
            # them (the connection is not reused)
            ended, keep = True, True
        else:
            ended, keep = sink.ended, False
        n = len(parts)
        out = parts[0] if n == 1 else b"".join(parts) if n else None
        parts.clear()
        started = self._at_boundary
        boundary = not ended and sink.on_chunk_header() == sink.on_chunk_complete() and data.endswith(b"\r\n")
        self._at_boundary = boundary
        if boundary:
            self._raw = []
            self._raw_size = self._given = 0
        elif not ended and self._raw is not None:
            self._raw.append(bytes(data))
            self._raw_size += len(data)
            self._given += len(out) if out is not None else 0
            if self._raw_size > _RAW_MAX:
                self._raw = None  # too much to read again: llhttp's refusal will be the error
        if not keep:
            del data[:]
            buf._next_line_search = 0
            buf._multiple_lines_search = 0
        if ended:
            end = EndOfMessage()
            if out is None:
                return end
            self._next = end
        if out is None:
            return None
        return Data(data=out, chunk_start=started, chunk_end=boundary or ended)

    def _refused(self, buf: Any, e: Exception) -> Data | EndOfMessage | None:
        """llhttp refused this read: read again from the last chunk boundary by the Python
        reader (the data already answered skipped), which answers from now on."""
        parts = self._parts
        self._parser = None
        if self._raw is None:  # what it parsed of this read first, then its refusal
            err = self._next = LocalProtocolError(f"malformed chunked body: {e}")
            if not parts:
                raise err
            out = b"".join(parts)
            parts.clear()
            return Data(data=out, chunk_start=self._at_boundary, chunk_end=False)
        parts.clear()
        buf._data[0:0] = b"".join(self._raw)
        buf._next_line_search = 0
        buf._multiple_lines_search = 0
        self._raw = None
        self._then = _Skipping(CoalescingChunkedReader(), self._given)
        return self._then(buf)

    def read_eof(self) -> Any:
        if self._then is not None:
            return self._then.read_eof()
        raise RemoteProtocolError(
            "peer closed connection without sending complete message body (incomplete chunked read)"
        )


class _Skipping:
    """A reader whose first ``skip`` bytes of data were already answered."""

    __slots__ = ("_reader", "_skip")

    def __init__(self, reader: CoalescingChunkedReader, skip: int) -> None:
        self._reader = reader
        self._skip = skip

    def __call__(self, buf: Any) -> Data | EndOfMessage | None:
        while True:
            ev = self._reader(buf)
            skip = self._skip
            if not skip or ev.__class__ is not Data:
                return ev
            d = ev.data
            if len(d) > skip:
                self._skip = 0
                return Data(data=d[skip:], chunk_start=False, chunk_end=ev.chunk_end)
            self._skip = skip - len(d)

    def read_eof(self) -> Any:
        return self._reader.read_eof()


def install() -> None:
    """Make h11 read chunked bodies with ``LlhttpChunkedReader`` (idempotent)."""
    READERS[SEND_BODY]["chunked"] = LlhttpChunkedReader  # type: ignore[index]
