"""app/h11_chunks.py: chunks already buffered come out as one Data event, in order,
with nothing waited for and every error and end kept."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import h11
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import app.h11_chunks as h11_chunks
from app.h11_chunks import CoalescingChunkedReader, LlhttpChunkedReader, install
from tests.unit.cuts import pieces

HEAD = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"


def chunked(parts: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def client() -> h11.Connection:
    install()
    c = h11.Connection(h11.CLIENT)
    c.send(h11.Request(method="GET", target="/", headers=[("host", "x")]))
    c.send(h11.EndOfMessage())
    return c


def events(c: h11.Connection) -> list:
    out = []
    while True:
        ev = c.next_event()
        if ev is h11.NEED_DATA or ev is h11.PAUSED:
            return out
        out.append(ev)
        if isinstance(ev, h11.EndOfMessage):
            return out


@dataclass
class Read:
    """What a connection answered: its data, and whether the message ended (kept as far as
    it got when an error stops the reading)."""

    got: list[bytes] = field(default_factory=list)
    ended: bool = False


def feed(c: h11.Connection, body: bytes, cuts: list[int], read: Read) -> None:
    """Feed ``body`` to ``c`` in the pieces ``cuts`` make, noting what comes out in ``read``."""
    for piece in pieces(body, cuts):
        c.receive_data(piece)
        for ev in events(c):
            if isinstance(ev, h11.Data):
                read.got.append(bytes(ev.data))
            read.ended = read.ended or isinstance(ev, h11.EndOfMessage)


def test_installed_for_new_connections():
    c = client()
    c.receive_data(HEAD)
    assert isinstance(c.next_event(), h11.Response)
    assert isinstance(c._reader, LlhttpChunkedReader)


def test_buffered_chunks_one_data_then_end():
    c = client()
    c.receive_data(HEAD + chunked([b"data: a\n\n", b"data: b\n\n", b"data: c\n\n"]))
    evs = events(c)
    assert isinstance(evs[0], h11.Response)
    assert [type(e) for e in evs[1:]] == [h11.Data, h11.EndOfMessage]
    assert evs[1].data == b"data: a\n\ndata: b\n\ndata: c\n\n"
    assert evs[1].chunk_start and evs[1].chunk_end


def test_nothing_waited_for():
    """A chunk cut by the read: what is complete comes now, the rest when it arrives."""
    c = client()
    body = chunked([b"one", b"two", b"three"])
    cut = body.index(b"three") + 2
    c.receive_data(HEAD + body[:cut])
    evs = events(c)
    assert b"".join(bytes(e.data) for e in evs if isinstance(e, h11.Data)) == b"onetwoth"
    assert evs[-1].chunk_end is False
    c.receive_data(body[cut:])
    evs = events(c)
    assert [type(e) for e in evs] == [h11.Data, h11.EndOfMessage]
    assert evs[0].data == b"ree" and evs[0].chunk_start is False


def test_malformed_chunk_after_good_ones():
    """The good chunks first, then the same protocol error the original reader raises."""
    c = client()
    c.receive_data(HEAD + b"3\r\nabc\r\n3\r\ndef\r\nzz\r\n")
    assert isinstance(c.next_event(), h11.Response)
    ev = c.next_event()
    assert isinstance(ev, h11.Data) and ev.data == b"abcdef"
    with pytest.raises(h11.RemoteProtocolError):
        c.next_event()


READERS_UNDER_TEST = [CoalescingChunkedReader, LlhttpChunkedReader]


@pytest.mark.parametrize("reader", READERS_UNDER_TEST)
@pytest.mark.parametrize("cut", [None, 50, 52, 53, 54, 55])  # HEAD is 47 bytes
def test_malformed_footer_after_a_whole_chunk(reader, cut):
    """A chunk's data with anything but CRLF after it: what h11's own reader does (no data,
    its protocol error), whether the chunk came whole in one read or cut."""
    from h11._readers import ChunkedReader

    wire = b"3\r\nabcXY3\r\ndef\r\n0\r\n\r\n"
    cuts = [] if cut is None else [cut]
    assert _run(reader, wire, cuts) == _run(ChunkedReader, wire, cuts)
    assert _run(reader, wire, cuts)[2] == "RemoteProtocolError"


def test_truncated_body_fails_as_before():
    c = client()
    c.receive_data(HEAD + b"3\r\nabc\r\n")
    c.receive_data(b"")  # the peer closed
    assert isinstance(c.next_event(), h11.Response)
    assert c.next_event().data == b"abc"
    with pytest.raises(h11.RemoteProtocolError):
        c.next_event()


@given(st.lists(st.binary(min_size=1, max_size=40), max_size=12), st.lists(st.integers(1, 60), max_size=30))
def test_same_bytes_at_every_split(parts, cuts):
    body = HEAD + chunked(parts)
    read = Read()
    feed(client(), body, cuts, read)
    assert b"".join(read.got) == b"".join(parts) and read.ended


def _run(reader_cls, wire: bytes, cuts: list[int]) -> tuple[bytes, bool, str]:
    """(data, ended, error class) reading ``wire`` (a chunked body) cut at ``cuts``."""
    with _reading(reader_cls) as c:
        read = Read()
        try:
            feed(c, HEAD + wire, cuts, read)
            if not read.ended:
                c.receive_data(b"")  # the peer closed
                events(c)
        except h11.RemoteProtocolError as e:
            return b"".join(read.got), read.ended, type(e).__name__
        return b"".join(read.got), read.ended, ""


@contextlib.contextmanager
def _reading(reader_cls) -> Iterator[h11.Connection]:
    """A client connection whose request went out, reading chunked bodies with ``reader_cls``."""
    from h11._readers import READERS
    from h11._state import SEND_BODY

    saved = READERS[SEND_BODY]["chunked"]
    READERS[SEND_BODY]["chunked"] = reader_cls
    try:
        c = h11.Connection(h11.CLIENT)
        c.send(h11.Request(method="GET", target="/", headers=[("host", "x")]))
        c.send(h11.EndOfMessage())
        yield c
    finally:
        READERS[SEND_BODY]["chunked"] = saved


_piece = st.one_of(
    st.binary(min_size=1, max_size=30).map(lambda b: b"%x\r\n%b\r\n" % (len(b), b)),
    st.binary(min_size=1, max_size=10).map(lambda b: b"%X;ext=1 \r\n%b\r\n" % (len(b), b)),
    # sizes the digits-only fast path reads (upper case, leading zeros) and the ones it leaves
    # to h11's grammar (17-20 digits, 21 digits, a sign, a space, an underscore)
    st.binary(min_size=10, max_size=20).map(lambda b: b"%04X\r\n%b\r\n" % (len(b), b)),
    st.sampled_from([b"00000000000000000001\r\nx\r\n", b"000000000000000000001\r\nx\r\n"]),
    st.sampled_from([b"+1\r\nx\r\n", b" 1\r\nx\r\n", b"0_1\r\nx\r\n", b"1 \r\nx\r\n"]),
    st.sampled_from([b"zz\r\n", b"3\r\nabcXY", b"\r\n", b"0\r\nx-trailer: 1\r\n\r\n", b"1;\r\n"]),
)


# a chunk size of more than 20 hex digits: h11 refuses it (its own limit), llhttp reads it
_LONG_SIZE = b"000000000000000000001\r\n"


@pytest.mark.parametrize("reader", READERS_UNDER_TEST)
@settings(max_examples=400)
@given(st.lists(_piece, max_size=10), st.booleans(), st.lists(st.integers(1, 50), max_size=20))
def test_same_as_h11s_reader(reader, pieces, terminate, cuts):
    """Against h11's own ChunkedReader on valid and broken bodies, at any split: the same
    data, the same end, the same error (good data before an error is delivered first).
    For llhttp's reader that is also every body it refuses and h11 reads (whitespace after
    a size, an empty extension), read again from the last chunk boundary."""
    from h11._readers import ChunkedReader

    wire = b"".join(pieces) + (b"0\r\n\r\n" if terminate else b"")
    if reader is LlhttpChunkedReader:
        assume(_LONG_SIZE not in wire)  # test_llhttp_differences
    assert _run(reader, wire, cuts) == _run(ChunkedReader, wire, cuts)


def _trailing(reader_cls, wire: bytes) -> bytes:
    """What the connection keeps after the message (h11: not reusable unless empty)."""
    with _reading(reader_cls) as c:
        c.receive_data(HEAD + wire)
        assert isinstance(events(c)[-1], h11.EndOfMessage)
        return c.trailing_data[0]


def test_llhttp_differences():
    """The two things llhttp's reader takes that h11's does not, and what it keeps after a
    body's end (any byte but CR and LF stays: the connection is not reused)."""
    from h11._readers import ChunkedReader

    wire = _LONG_SIZE + b"x\r\n0\r\n\r\n"
    assert _run(LlhttpChunkedReader, wire, []) == (b"x", True, "")
    assert _run(ChunkedReader, wire, []) == (b"", False, "RemoteProtocolError")
    body = chunked([b"abc"])
    assert _trailing(ChunkedReader, body + b"\r\n") == b"\r\n"
    assert _trailing(LlhttpChunkedReader, body + b"\r\n") == b""  # skipped
    for junk in (b"XY", b"HTTP/1.1 200 OK\r\n\r\n", b"\r\nZ"):
        assert _trailing(LlhttpChunkedReader, body + junk)
        assert _trailing(ChunkedReader, body + junk)


def test_llhttp_refusal_past_what_it_keeps(monkeypatch):
    """More than _RAW_MAX bytes read with no chunk boundary at a read's end: llhttp's
    refusal is the error (h11 would read on); with the bytes kept, h11's reading wins."""
    big = chunked([b"a" * 3000, b"b" * 3000])[:-5]  # two chunks, no end yet
    wire = big + b"1 \r\nz\r\n0\r\n\r\n"  # a size llhttp refuses (a space after it)
    cuts = list(range(100, len(big), 1000))  # every read ends inside a chunk
    assert _run(LlhttpChunkedReader, wire, cuts) == (b"a" * 3000 + b"b" * 3000 + b"z", True, "")
    monkeypatch.setattr(h11_chunks, "_RAW_MAX", 2000)
    from h11._receivebuffer import ReceiveBuffer

    r = LlhttpChunkedReader()
    buf = ReceiveBuffer()
    got = []
    for piece in pieces(wire, cuts):
        buf += piece
        ev = r(buf)
        if ev is not None:
            got.append(ev.data)
    assert b"".join(got) == b"a" * 3000 + b"b" * 3000  # all it read before the refusal
    for _ in range(2):  # the refusal, and again if asked again
        with pytest.raises(h11.LocalProtocolError):
            r(buf)


def test_llhttp_reader_keeps_up_with_reads():
    """Each read's chunk data is answered at once, the buffer left empty; a cut chunk's part
    too, its rest with the next read."""
    from h11._receivebuffer import ReceiveBuffer

    r = LlhttpChunkedReader()
    buf = ReceiveBuffer()
    buf += b"3\r\nabc\r\n4\r\nde"
    ev = r(buf)
    assert isinstance(ev, h11.Data) and ev.data == b"abcde" and ev.chunk_start and not ev.chunk_end
    assert not buf and r(buf) is None
    buf += b"fg\r\n"
    ev = r(buf)
    assert ev.data == b"fg" and not ev.chunk_start and ev.chunk_end
    buf += b"0\r\n\r\n"
    assert isinstance(r(buf), h11.EndOfMessage)
