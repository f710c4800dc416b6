"""Incremental Server-Sent Events parser and serializer, on bytes.

Theory of operation
-------------------
``SSEParser.feed(chunk)`` takes whatever bytes the transport delivered and returns the
events completed by them, as ``SSEEvent(event, data)``; ``SSEParser.end()`` returns what
a stream that stops without a final blank line still held (a peer that closes right after
its last ``data:`` line).  The parser follows the WHATWG rules that matter on the wire:

* a line ends at CR, LF or CRLF, and a CRLF may be split across two reads (a trailing CR
  is held back until the next byte is seen);
* work stays on bytes until a whole line is there, so a UTF-8 character split across
  reads is decoded once it is complete (U+2028 and friends are *not* line breaks here,
  which is why the upstream client must not use ``aiter_lines``);
* ``:`` starts a comment line (keep-alives), ignored;
* several ``data:`` lines join with ``\\n``; one space after the colon is dropped;
* an event is dispatched at a blank line, only if it had data.

The bytes are cut at blank lines first: an unfinished event waits in the buffer whole, and
each finished one is either one of the two shapes upstreams send (one ``data: `` line, as
Chat; an ``event: `` line then one ``data: `` line, as Responses), read with two slices, or
anything else, read line by line with the rules above (the tests check both against a
line-by-line reference at every split).

A peer that never ends a line or an event cannot make the parser hold more than
``MAX_EVENT_BYTES``: past it ``feed`` raises ``SSEOverflow`` (the caller fails the stream).

``encode(data, event)`` frames one event: ``event:`` line when given, one ``data:`` line
(our payloads are orjson output, which never contains a raw newline), blank line.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["SSEEvent", "SSEParser", "SSEOverflow", "MAX_EVENT_BYTES", "encode", "encode_comment", "DONE"]


MAX_EVENT_BYTES = 16 * 1024 * 1024


class SSEOverflow(ValueError):
    """An event (or a line) longer than MAX_EVENT_BYTES."""


class SSEEvent(NamedTuple):
    event: str | None
    data: str


DONE = b"data: [DONE]\n\n"
_new = tuple.__new__  # SSEEvent without the Python-level __new__ of a NamedTuple


class SSEParser:
    __slots__ = ("_buf", "_event", "_data", "_held", "max_bytes")

    def __init__(self, max_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buf = b""
        self._event: str | None = None
        self._data: list[bytes] = []
        self._held = 0  # bytes in _data
        self.max_bytes = max_bytes

    @property
    def pending(self) -> bool:
        """Bytes of an unfinished event (or line) wait for the rest."""
        return bool(self._buf)

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        buf = self._buf + chunk if self._buf else chunk
        held = b""
        # bytes are looked for as ints (13: CR, 10: LF): ``b"\r" in buf`` first tries its
        # operand as an int, a TypeError made and dropped, ~3k instructions per test
        if 13 in buf:
            if buf.endswith(b"\r"):
                # might be the first half of a CRLF: decide when the next byte comes
                buf, held = buf[:-1], b"\r"
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        # whole events end at a blank line; the unfinished one waits for its end, whole
        blocks = buf.split(b"\n\n")
        self._buf = blocks.pop() + held
        if len(self._buf) > self.max_bytes:
            raise SSEOverflow(f"an upstream event is longer than {self.max_bytes} bytes")
        if not blocks:
            return []
        out: list[SSEEvent] = []
        for block in blocks:
            # the two shapes upstreams send, without the line-by-line rules: one ``data:``
            # line (Chat), or an ``event:`` line and one ``data:`` line (Responses)
            if block[:6] == b"data: ":
                if 10 not in block:
                    out.append(_new(SSEEvent, (None, block[6:].decode("utf-8", "replace"))))
                    continue
            elif block[:7] == b"event: ":
                nl = block.find(10)
                if nl > 0 and block[nl + 1 : nl + 7] == b"data: " and block.find(10, nl + 1) < 0:
                    name = block[7:nl].decode("utf-8", "replace")
                    out.append(_new(SSEEvent, (name, block[nl + 7 :].decode("utf-8", "replace"))))
                    continue
            lines = block.split(b"\n")
            lines.append(b"")
            out += self._lines(lines)
        return out

    def end(self) -> list[SSEEvent]:
        """Flush at end of stream: a last event without its blank line still counts."""
        lines: list[bytes] = []
        if self._buf:
            rest = self._buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            lines.extend(rest.split(b"\n"))
            self._buf = b""
        lines.append(b"")
        return self._lines(lines)

    def _lines(self, lines: list[bytes]) -> list[SSEEvent]:
        out: list[SSEEvent] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    payload = data[0] if len(data) == 1 else b"\n".join(data)
                    out.append(SSEEvent(self._event, payload.decode("utf-8", "replace")))
                    data.clear()
                    self._held = 0
                self._event = None
                continue
            if line[:5] == b"data:":  # the common line, without the general split
                value = line[6:] if line[5:6] == b" " else line[5:]
                data.append(value)
                self._held += len(value)
                if self._held > self.max_bytes:
                    raise SSEOverflow(f"an upstream event is longer than {self.max_bytes} bytes")
                continue
            if line[0] == 0x3A:  # ':' comment / keep-alive
                continue
            name, sep, value = line.partition(b":")
            if sep and value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                data.append(value)
                self._held += len(value)
                if self._held > self.max_bytes:
                    raise SSEOverflow(f"an upstream event is longer than {self.max_bytes} bytes")
            elif name == b"event":
                self._event = value.decode("utf-8", "replace")
            # "id" and "retry" carry nothing the proxy needs
        return out


def encode(data: bytes, event: str | None = None) -> bytes:
    if event is None:
        return b"data: " + data + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


def encode_comment(text: str = "keep-alive") -> bytes:
    return b": " + text.encode() + b"\n\n"
