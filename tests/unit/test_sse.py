"""SSE parser: line endings, split UTF-8, comments, multi-line data, flush at EOF."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transformers.sse import DONE, SSEEvent, SSEOverflow, SSEParser, encode, encode_comment


def parse_all(chunks: list[bytes]) -> list[SSEEvent]:
    p = SSEParser()
    out: list[SSEEvent] = []
    for c in chunks:
        out.extend(p.feed(c))
    out.extend(p.end())
    return out


@pytest.mark.parametrize(
    "chunks, expected",
    [
        pytest.param([b"data: a\n\n"], [SSEEvent(None, "a")], id="lf"),
        pytest.param([b"data: a\r\n\r\n"], [SSEEvent(None, "a")], id="crlf"),
        pytest.param([b"data: a\r\r"], [SSEEvent(None, "a")], id="cr"),
        pytest.param(
            [b"data: a\r", b"\n\r", b"\ndata: b\n\n"], [SSEEvent(None, "a"), SSEEvent(None, "b")], id="crlf-split"
        ),
        pytest.param([b"event: x\ndata: 1\n\n"], [SSEEvent("x", "1")], id="event-name"),
        pytest.param([b": keep-alive\n\ndata: 1\n\n"], [SSEEvent(None, "1")], id="comment"),
        pytest.param([b"data: 1\ndata: 2\n\n"], [SSEEvent(None, "1\n2")], id="multiline"),
        pytest.param([b"data:1\n\n"], [SSEEvent(None, "1")], id="no-space"),
        pytest.param([b"data:  1\n\n"], [SSEEvent(None, " 1")], id="one-space-only"),
        pytest.param([b"event: x\n\n", b"data: 1\n\n"], [SSEEvent(None, "1")], id="event-without-data-resets"),
        pytest.param([b"data: \xe2\x9c", b"\x93\n\n"], [SSEEvent(None, "\u2713")], id="utf8-split"),
        pytest.param([b"data: a\xe2\x80\xa8b\n\n"], [SSEEvent(None, "a\u2028b")], id="u2028-is-not-a-line-break"),
        pytest.param([b"data: last"], [SSEEvent(None, "last")], id="eof-without-blank-line"),
        pytest.param([b"id: 7\nretry: 10\ndata: x\n\n"], [SSEEvent(None, "x")], id="id-retry-ignored"),
        pytest.param([b"data: [DONE]\n\n"], [SSEEvent(None, "[DONE]")], id="done"),
    ],
)
def test_parse(chunks: list[bytes], expected: list[SSEEvent]) -> None:
    assert parse_all(chunks) == expected


def test_encode_roundtrip() -> None:
    wire = encode(b'{"a":1}', "response.created") + encode_comment() + encode(b"2") + DONE
    assert parse_all([wire]) == [SSEEvent("response.created", '{"a":1}'), SSEEvent(None, "2"), SSEEvent(None, "[DONE]")]


payloads = st.lists(
    st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",))), min_size=1, max_size=8
)


@given(payloads, st.data(), st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_any_split_any_line_ending_loses_nothing(datas: list[str], data: st.DataObject, eol: bytes) -> None:
    wire = b"".join(b"data: " + d.encode() + eol + eol for d in datas)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=10)))
    chunks, prev = [], 0
    for c in cuts:
        chunks.append(wire[prev:c])
        prev = c
    chunks.append(wire[prev:])
    assert [e.data for e in parse_all(chunks)] == datas


def test_overflow_bounds_a_line_and_an_event() -> None:
    p = SSEParser(max_bytes=1024)
    p.feed(b"data: " + b"x" * 1000)
    with pytest.raises(SSEOverflow):
        p.feed(b"y" * 100)  # one line that never ends
    p = SSEParser(max_bytes=1024)
    for _ in range(9):
        p.feed(b"data: " + b"x" * 100 + b"\n")  # many data lines, no blank line
    with pytest.raises(SSEOverflow):
        p.feed(b"data: " + b"x" * 200 + b"\n")
    p = SSEParser(max_bytes=1024)
    for _ in range(50):  # complete events release what they held
        assert len(p.feed(b"data: " + b"x" * 600 + b"\n\n")) == 1
