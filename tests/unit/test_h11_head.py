"""app/h11_head.py: a response head reads as h11's own reader reads it (the same event, or
the same error and message), on real heads and on generated ones, whole or cut anywhere."""

from __future__ import annotations

import h11
import pytest
from h11._readers import READERS, maybe_read_from_SEND_RESPONSE_server
from h11._receivebuffer import ReceiveBuffer
from h11._state import SEND_RESPONSE, SERVER
from hypothesis import given, settings
from hypothesis import strategies as st

from app import h11_head
from app.h11_head import install, read_response_head
from tests.unit.cuts import pieces

OPENAI_LIKE = b"""HTTP/1.1 200 OK
Date: Mon, 30 Nov 2026 19:00:00 GMT
Content-Type: text/event-stream; charset=utf-8
Transfer-Encoding: chunked
Connection: keep-alive
openai-processing-ms: 123
x-ratelimit-limit-requests: 10000
x-ratelimit-remaining-tokens: 29999456
x-request-id: req_0123456789abcdef
strict-transport-security: max-age=31536000; includeSubDomains; preload
set-cookie: __cf_bm=abc-1.0.1.1; path=/; expires=Mon, 30-Nov-26 19:30:00 GMT; HttpOnly; Secure
set-cookie: _cfuvid=xyz; path=/; HttpOnly
Server: cloudflare
alt-svc: h3=":443"; ma=86400

""".replace(b"\n", b"\r\n")

HEADS = [
    OPENAI_LIKE,
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n",
    b"HTTP/1.1 200 OK\r\n\r\n",
    b"HTTP/1.0 404\r\nX-Empty:\r\nX-Spaces:   \t \r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\n",
    b"HTTP/1.1 200 OK\nbare: lf\nline: endings\n\n",  # h11 takes LF alone too
    b"HTTP/1.1 200 OK\r\nX-Inner:  a \t b  \r\nX-Obs: caf\xc3\xa9 \x80\xff\x7f\x01\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX-Fold: first\r\n  second\r\n\tthird\r\n\r\n",  # obs-fold: h11's own
    b"HTTP/1.1 200 OK\r\n  starts folded\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nServer: x\r\nServer\r\n\r\n",  # a known name, no colon
    b"HTTP/1.1 200 OK\r\n: no name\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nName : space before colon\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nBad\x00: nul in name\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: nul\x00in value\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: bare\rcr\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: vt\x0b\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: \x0cff\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: ends in cr\r\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\ntransfer-encoding: chunked\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nCONTENT-LENGTH:  5, 5 \r\nX: y\r\n\r\n",  # one value, said twice
    b"HTTP/1.1 200 OK\r\nContent-Length: 5,6\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: x5\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 12345678901234567890123\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\nContent-Length: 7\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nTransfer-Encoding: gzip\r\n\r\n",
    # a framing error, then a line h11 cannot decode: h11 decodes every line first
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nbad name: x\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: x\r\nTransfer-Encoding: gzip\r\n\r\n",
    b"HTTP/1.1 2000 Too long\r\n\r\n",
    b"HTTX/1.1 200 OK\r\n\r\n",
    b"\r\n\r\n",
    b"\x16\x03\x01 TLS where HTTP was due\r\n\r\n",
]


def _read(reader, data: bytes, cuts: list[int] | None = None) -> tuple[str, object]:
    """What ``reader`` makes of ``data`` fed in pieces: ("event", fields), ("error", message)
    or ("need", None), as h11's connection would call it after each piece."""
    buf = ReceiveBuffer()
    for piece in pieces(data, cuts or []):
        buf += piece
        try:
            ev = reader(buf)
        except h11.LocalProtocolError as e:
            return "error", str(e)
        if ev is not None:
            return "event", (
                type(ev).__name__,
                ev.status_code,
                ev.reason,
                ev.http_version,
                list(ev.headers._full_items),  # names as sent and lower-cased, values
                bytes(buf._data),
            )
    return "need", None


@pytest.mark.parametrize("head", HEADS, ids=range(len(HEADS)))
def test_each_head_reads_as_h11_reads_it(head: bytes) -> None:
    for data in (head, head + b"body bytes after the head"):
        assert _read(read_response_head, data) == _read(maybe_read_from_SEND_RESPONSE_server, data)


def test_the_fast_path_is_taken_for_well_formed_heads() -> None:
    """A head h11 accepts without obs-fold never falls back (what the speed is for)."""
    lines = ReceiveBuffer()
    lines += OPENAI_LIKE
    extracted = lines.maybe_extract_lines()
    assert extracted is not None
    items = h11_head._header_items(extracted[1:])
    assert items is not None and len(items) == 13
    assert items[0] == (b"Date", b"date", b"Mon, 30 Nov 2026 19:00:00 GMT")
    assert items[2] == (b"Transfer-Encoding", b"transfer-encoding", b"chunked")
    assert all(type(n) is bytes and type(lo) is bytes and type(v) is bytes for n, lo, v in items)


_NAME = st.one_of(
    st.sampled_from([b"Content-Type", b"x-request-id", b"Set-Cookie", b"content-length", b"transfer-encoding"]),
    st.binary(min_size=0, max_size=8),
)
_VALUE = st.one_of(
    st.sampled_from([b"text/event-stream", b"12", b"chunked", b"  padded\t ", b"a \t b", b"caf\xc3\xa9"]),
    st.binary(min_size=0, max_size=12),
)
_LINE = st.one_of(
    st.tuples(_NAME, st.sampled_from([b":", b": ", b":\t", b" :", b""]), _VALUE).map(b"".join),
    st.binary(max_size=10).map(lambda b: b" " + b),  # a continuation line
)


@settings(max_examples=400, deadline=None)
@given(
    status=st.sampled_from([b"HTTP/1.1 200 OK", b"HTTP/1.1 204", b"HTTP/1.0 101 Switching", b"HTTP/1.1 99 x"]),
    lines=st.lists(_LINE, max_size=6),
    eol=st.sampled_from([b"\r\n", b"\n"]),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=4),
)
def test_generated_heads_read_as_h11_reads_them(status: bytes, lines: list[bytes], eol: bytes, cuts: list[int]) -> None:
    head = eol.join([status, *lines]) + eol + eol
    if b"\n" in b"".join(lines):
        return  # a line break inside a line makes other lines: generated as such above
    for data in (head, head + b"rest"):
        assert _read(read_response_head, data, cuts) == _read(maybe_read_from_SEND_RESPONSE_server, data, cuts)


def test_install_puts_the_reader_in_h11s_table_for_response_heads() -> None:
    install()
    assert READERS[(SERVER, SEND_RESPONSE)] is read_response_head
    c = h11.Connection(h11.CLIENT)
    c.send(h11.Request(method="GET", target="/", headers=[("host", "x")]))
    c.send(h11.EndOfMessage())
    c.receive_data(OPENAI_LIKE + b"5\r\nhello\r\n0\r\n\r\n")
    ev = c.next_event()
    assert isinstance(ev, h11.Response) and ev.status_code == 200
    assert (b"x-request-id", b"req_0123456789abcdef") in list(ev.headers)
    assert bytes(c.next_event().data) == b"hello"  # type: ignore[union-attr]


# -- the headers of the events h11 builds (httpcore's upstream requests) ---------------------

_h11_nav = h11_head._h11_normalize_and_validate


def _nav(fn, headers) -> tuple[str, object]:
    try:
        return "headers", list(fn(headers)._full_items)
    except h11.LocalProtocolError as e:
        return "error", (str(e), e.error_status_hint)


REQUEST_HEADERS = [
    [(b"Host", b"api.openai.com"), (b"Content-Length", b"12"), (b"authorization", b"Bearer sk-abc")],
    [(b"User-Agent", b"codex_cli_rs/0.169.0 (Mac OS 15.1.0; arm64) iTerm.app/3.5.10")],
    [(b"X-Empty", b"")],
    [(b"X-Inner", b"a \t b"), (b"X-Obs", b"caf\xc3\xa9\x7f\x01\x80")],
    [("host", "x"), ("x-str", "str items go through h11 whole")],
    [(b"host", "a str value"), ("a-str-name", b"v")],
    [(b"X", b" leading space")],
    [(b"X", b"trailing tab\t")],
    [(b"X", b"nul\x00")],
    [(b"X", b"cr\rlf")],
    [(b"X", b"lf\n")],
    [(b"X", b"\x0b")],
    [(b"X", b"ff\x0c ff")],
    [(b"Bad Name", b"v")],
    [(b"", b"v")],
    [(b"Content-Length", b"1"), (b"Content-Length", b"2")],
    [(b"Content-Length", b"1, 1")],
    [(b"Content-Length", b"x")],
    [(b"Transfer-Encoding", b"gzip")],
    [(b"Transfer-Encoding", b"Chunked")],
]


@pytest.mark.parametrize("headers", REQUEST_HEADERS, ids=range(len(REQUEST_HEADERS)))
def test_request_headers_are_checked_as_h11_checks_them(headers: list) -> None:
    assert _nav(h11_head.normalize_and_validate, headers) == _nav(_h11_nav, headers)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(
                st.sampled_from([b"Host", b"content-length", b"Transfer-Encoding", b"x-a"]), st.binary(max_size=6)
            ),
            st.one_of(st.sampled_from([b"1", b"chunked", b"a b", b" x", b"x\t"]), st.binary(max_size=10)),
        ),
        max_size=5,
    )
)
def test_generated_request_headers_are_checked_as_h11_checks_them(headers: list) -> None:
    assert _nav(h11_head.normalize_and_validate, headers) == _nav(_h11_nav, headers)


def test_install_checks_the_requests_h11_builds() -> None:
    install()
    req = h11.Request(method="POST", target="/v1/x", headers=[(b"Host", b"h"), (b"X-Key", b"Bearer a b")])
    assert list(req.headers) == [(b"host", b"h"), (b"x-key", b"Bearer a b")]
    with pytest.raises(h11.LocalProtocolError, match="Illegal header value"):
        h11.Request(method="POST", target="/", headers=[(b"Host", b"h"), (b"X", b"a\r\nInjected: yes")])
