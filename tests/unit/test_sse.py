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


def split_at(wire: bytes, data: st.DataObject) -> list[bytes]:
    """``wire`` cut at up to 10 places hypothesis picks."""
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=10)))
    chunks, prev = [], 0
    for c in cuts:
        chunks.append(wire[prev:c])
        prev = c
    chunks.append(wire[prev:])
    return chunks


payloads = st.lists(
    st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",))), min_size=1, max_size=8
)


@given(payloads, st.data(), st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_any_split_any_line_ending_loses_nothing(datas: list[str], data: st.DataObject, eol: bytes) -> None:
    wire = b"".join(b"data: " + d.encode() + eol + eol for d in datas)
    chunks = split_at(wire, data)
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


def reference(wire: bytes) -> list[SSEEvent]:
    """The WHATWG rules, line by line, on the whole stream at once (what the parser's fast
    shapes must agree with)."""
    text = wire.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    lines = text.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the stream ended with a line break
    lines.append(b"")  # end(): what is left counts as a finished event
    out: list[SSEEvent] = []
    event, data = None, []
    for line in lines:
        if not line:
            if data:
                out.append(SSEEvent(event, b"\n".join(data).decode("utf-8", "replace")))
            event, data = None, []
            continue
        if line.startswith(b":"):
            continue
        name, sep, value = line.partition(b":")
        if sep and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            data.append(value)
        elif name == b"event":
            event = value.decode("utf-8", "replace")
    return out


_values = st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12)
_lines = st.one_of(
    _values.map(lambda v: b"data: " + v.encode()),
    _values.map(lambda v: b"data:" + v.encode()),
    _values.map(lambda v: b"event: " + v.encode()),
    _values.map(lambda v: b"event:" + v.encode()),
    _values.map(lambda v: b": " + v.encode()),
    st.sampled_from([b"", b"", b"", b"id: 3", b"retry: 10", b"data", b"event", b"junk line"]),
)


@given(st.lists(_lines, max_size=24), st.data(), st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_any_mix_of_lines_at_any_split_parses_as_the_rules_say(
    lines: list[bytes], data: st.DataObject, eol: bytes
) -> None:
    wire = b"".join(line + eol for line in lines)
    if data.draw(st.booleans()) and wire:
        wire = wire[: -len(eol)]  # a stream that stops without its last line break
    chunks = split_at(wire, data)
    assert parse_all(chunks) == reference(wire)
