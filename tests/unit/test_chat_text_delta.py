"""ChatStreamEncoder.text_delta: a text chunk serialized by the encoder itself gives the very
bytes (and the same later chunks) that ``feed`` + the framing give, whatever came before it,
framed or not; and the Bridge's Chat streams, from either upstream protocol, are the same
with it as without it."""

from __future__ import annotations

import itertools
import re
from unittest import mock

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_responses_text_delta import (
    _chat_chunk,
    _event,
    _finish,
    _responses_upstream,
    _text,
    bridged,
    encoded,
    spied,
)
from transformers import ids
from transformers.chat_encode import ChatStreamEncoder
from transformers.context import Ctx
from transformers.events import Start, Text

_frame = st.sampled_from([(b"", b""), (b"data: ", b"\n\n"), (b"%s<", b">%d")])


def _encode(
    events: list, fast: bool, frame: tuple[bytes, bytes], quirks: frozenset[str] = frozenset(), later: int = -1
) -> list[bytes]:
    """Each chunk's JSON; the fast path's chunks come framed, checked and unframed here
    (``later``: from that event on, framed otherwise)."""
    n = itertools.count()
    with (
        mock.patch.object(ids, "_random", lambda k: next(n).to_bytes(k, "big")),
        mock.patch.object(ids, "_now_ns", lambda: 0),
    ):
        return _chunks(events, fast, frame, quirks, later)


def _chunks(
    events: list, fast: bool, frame: tuple[bytes, bytes], quirks: frozenset[str] = frozenset(), later: int = -1
) -> list[bytes]:
    ctx = Ctx(public_model="pub", quirks=quirks)
    enc = ChatStreamEncoder(ctx, include_usage=True, chunk_id="chatcmpl-1", created=7)
    return encoded(enc, events, fast, {0: frame, later: (b"<", b">")})


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_event, max_size=25),
    _finish,
    _frame,
    st.booleans(),
    # reasoning written under the upstream's key too (reasoning_delta's two holes)
    st.sampled_from([frozenset(), frozenset({"reasoning_key_reasoning"})]),
    st.integers(-1, 26),
)
def test_same_bytes_as_feed(events, finish, frame, start, quirks, later):
    events = ([Start()] if start else []) + events + ([finish] if finish else [])
    assert _encode(events, True, frame, quirks, later) == _encode(events, False, frame, quirks)


def test_taken_only_when_the_chunk_goes_out_at_once():
    enc = ChatStreamEncoder(Ctx(public_model="pub"), chunk_id="chatcmpl-1", created=7)
    enc.frame_deltas(lambda _kind: (b"data: ", b"\n\n"))
    assert enc.text_delta("x") is None  # not begun: the role chunk comes first
    enc.feed(Start())
    assert enc.text_delta('a"\n') == b"data: " + orjson.dumps(enc.feed(Text('a"\n'))[0]) + b"\n\n"
    assert enc.text_delta("") == b"data: " + orjson.dumps(enc.feed(Text(""))[0]) + b"\n\n"  # as feed: a chunk


def test_a_percent_sign_in_the_chunk_is_written_as_it_is():
    """The chunk's own bytes (a model named with '%', an id) around the text are a format's
    literal text: written as they are, whatever the text."""
    enc = ChatStreamEncoder(Ctx(public_model="m%s%%d%"), chunk_id="chatcmpl-%d", created=7)
    enc.frame_deltas(lambda _kind: (b"%b", b"%"))
    enc.feed(Start())
    for text in ("50%", "%s", "%%", "x"):
        assert enc.text_delta(text) == b"%b" + orjson.dumps(enc.feed(Text(text))[0]) + b"%"


_MINTED = re.compile(rb"chatcmpl-[0-9A-Za-z]{8,}|\"created\":\d{6,}")


def _chat_upstream(texts: list[str]) -> bytes:
    """Text, then a tool call whose chunks queue the text behind it, then text again."""
    out = [_chat_chunk({"role": "assistant", "content": ""})]
    out += [_chat_chunk({"content": t}) for t in texts]
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a"'}}
    out.append(_chat_chunk({"tool_calls": [call]}))
    out += [_chat_chunk({"content": t}) for t in texts]
    out.append(_chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}))
    out.append(_chat_chunk({"reasoning_content": "hm"}))
    out += [_chat_chunk({"content": t}) for t in texts]
    out.append(_chat_chunk({}, finish="tool_calls"))
    return b"".join(out) + b"data: [DONE]\n\n"


def _bridge(upstream: str, wire: bytes, cuts: list[int], fast: bool) -> bytes:
    body = {
        "model": "pub",
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    }
    out = bridged(body, "chat", upstream, wire, cuts, None if fast else ChatStreamEncoder, False)
    return _MINTED.sub(b"<minted>", out)


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(["chat", "responses"]),
    st.lists(_text, max_size=6),
    st.lists(st.integers(1, 90), max_size=10),
)
def test_bridge_same_bytes_with_and_without(upstream, texts, cuts):
    wire = _chat_upstream(texts) if upstream == "chat" else _responses_upstream(texts)
    assert _bridge(upstream, wire, cuts, True) == _bridge(upstream, wire, cuts, False)


def test_bridge_takes_it_for_plain_text():
    with spied(ChatStreamEncoder, "text_delta") as calls:
        _bridge("responses", _responses_upstream(["a", "b"]), [], True)
    assert [(t, r is not None) for t, r in calls] == [("a", True), ("b", True)]


def test_a_model_name_with_the_sentinels_character():
    """The template is cut at the content's sentinel, not at a model named the same."""
    enc = ChatStreamEncoder(Ctx(public_model="\x00"), chunk_id="chatcmpl-1", created=7)
    enc.frame_deltas(lambda _kind: (b"data: ", b"\n\n"))
    enc.feed(Start())
    assert enc.text_delta("hi") == b"data: " + orjson.dumps(enc.feed(Text("hi"))[0]) + b"\n\n"
