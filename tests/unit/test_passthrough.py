"""transformers/passthrough.py: a Chat → Chat stream gives the same bytes, repairs and
terminal with passthrough as through the full path, whatever the upstream sends and however
its bytes are cut; and text chunks of the encoder's own shape do take it.  The same for
ChatStreamDecoder.text, the full path's own shortcut for a plain text chunk (any client)."""

from __future__ import annotations

import contextlib
import re
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.cuts import pieces
from transformers import bridge
from transformers.bridge import Bridge, open_bridge
from transformers.chat_decode import ChatStreamDecoder
from transformers.context import Ctx
from transformers.passthrough import ChatPassthrough
from transformers.sse import SSEParser

BODY = {
    "model": "pub",
    "messages": [{"role": "user", "content": "hi"}],
    "tools": [{"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}],
    "stream": True,
    "stream_options": {"include_usage": True},
}


def chunk(delta: dict | None = None, *, finish=None, model="pub", cid="chatcmpl-1", usage=None, extra=None) -> dict:
    c = {"id": cid, "object": "chat.completion.chunk", "created": 7, "model": model}
    c["choices"] = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    if usage is not None:
        c["usage"] = usage
    if extra:
        c.update(extra)
    return c


def run(events: list[bytes], cuts: list[int] | None, *, passthrough: bool, quirks=frozenset(), model="pub", runs=True):
    """``passthrough``: as the Bridge is (``runs``: False, each event checked on its own)."""
    ctx = Ctx(quirks=quirks, upstream_model=model, public_model="pub")
    _, b = open_bridge(BODY, "chat", "chat", ctx)
    if not passthrough:
        b.passthrough = None
    reads = events if cuts is None else pieces(b"".join(events), cuts)  # None: one read per event
    misses = bridge._LANE_MISSES
    bridge._LANE_MISSES = misses if runs else 0
    try:
        out = [b.receive_data(piece) for piece in reads]
    finally:
        bridge._LANE_MISSES = misses
    out.append(b.end())
    return _MINTED.sub(b"<minted>", b"".join(out)), sorted(ctx.repairs), b.terminal, b.error_code


# ids the encoder mints (random) and a created it takes from the clock
_MINTED = re.compile(rb"chatcmpl-[0-9a-f]{32}|call_[0-9a-f]{8,}|\"created\":\d{6,}")


_text = st.one_of(
    st.sampled_from(
        ["hi", " the", "", "a\nb", 'say "x"', "back\\slash", "\x00", "\u2028", "é東京", "🧑‍💻", "<think>", "</think>"]
    ),
    st.text(max_size=8),
)
_event = st.one_of(
    _text.map(lambda t: chunk({"content": t})),
    _text.map(lambda t: chunk({"role": "assistant", "content": t})),
    _text.map(lambda t: chunk({"reasoning_content": t})),
    _text.map(lambda t: chunk({"content": t}, model="other")),
    _text.map(lambda t: chunk({"content": t}, cid="chatcmpl-2")),
    _text.map(lambda t: chunk({"content": t}, extra={"system_fingerprint": "fp"})),
    # text and more in one chunk
    _text.map(lambda t: chunk({"content": t}, finish="stop")),
    _text.map(lambda t: chunk({"content": t, "reasoning_content": "hm"})),
    _text.map(lambda t: chunk({"content": t, "reasoning_content": None, "role": "assistant"})),
    _text.map(lambda t: chunk({"content": t}, usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})),
    _text.map(lambda t: chunk({"content": t, "tool_calls": [{"index": 0, "id": "call_2", "function": {"name": "f"}}]})),
    st.just(
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "call_1", "type": "function", "function": {"name": "shell", "arguments": ""}}
                ]
            }
        )
    ),
    _text.map(lambda t: chunk({"tool_calls": [{"index": 0, "function": {"arguments": t}}]})),
    st.just(chunk({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]})),
    st.just(chunk({}, finish="stop")),
    st.just(chunk({}, finish="tool_calls")),
    st.just(chunk(None, usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3})),
    st.just({"error": {"message": "boom sk-secret", "type": "server_error"}}),
)


def sse(ev: dict) -> bytes:
    return b"data: " + orjson.dumps(ev) + b"\n\n"


def _template_text(raw: bytes) -> bytes:
    """A text chunk of the encoder's shape with these bytes between the quotes."""
    return sse(chunk({"content": "\x01"})).replace(b'"\\u0001"', b'"' + raw + b'"')


# the same events framed otherwise than ``data: …\n\n``, or with bytes no JSON writer sends
_framed = st.one_of(
    _event.map(lambda e: sse(e)[:-2] + b"\r\n\r\n"),
    _event.map(lambda e: sse(e).replace(b"data: ", b"data:", 1)),
    _event.map(lambda e: b"event: x\n" + sse(e)),
    _event.map(lambda e: b": keep-alive\n" + sse(e)),
    st.sampled_from([b"\xff", b"a\xc3", b"\xed\xa0\x80", b"\xc3\xa9", b"a\tb", b"\x7f"]).map(_template_text),
    st.just(b"\n"),
    st.just(b"\r"),
)
_wire = st.one_of(_event.map(sse), _framed)
_stream = st.lists(_wire, max_size=14) | st.lists(_wire, max_size=14).map(lambda evs: evs + [b"data: [DONE]\n\n"])


@settings(max_examples=400)
@given(
    _stream,
    st.lists(st.integers(1, 80), max_size=12) | st.none(),
    st.booleans(),
    st.sampled_from(["pub", "up"]),
    st.booleans(),
)
def test_same_as_the_full_path(events, cuts, think, model, runs):
    quirks = frozenset({"inline_think"}) if think else frozenset()
    assert run(events, cuts, passthrough=True, quirks=quirks, model=model, runs=runs) == run(
        events, cuts, passthrough=False, quirks=quirks, model=model
    )


def test_text_chunks_of_the_encoders_shape_take_it(monkeypatch):
    # CRLF line ends: each event through the SSE parser, and the check on its data
    events = [sse(chunk({"role": "assistant", "content": ""})).replace(b"\n", b"\r\n")]
    events += [sse(chunk({"content": t})).replace(b"\n\n", b"\r\n\r\n") for t in ("one", " two", "a\nb", "é")]
    events += [sse(chunk({}, finish="stop")).replace(b"\n", b"\r\n"), b"data: [DONE]\r\n\r\n"]
    monkeypatch.setattr(bridge, "_LANE_MISSES", 0)  # each event on its own (no runs)
    ctx = Ctx(upstream_model="pub", public_model="pub")
    _, b = open_bridge(BODY, "chat", "chat", ctx)
    seen: list[bool] = []
    passes = Bridge._passes

    def spy(self, data, pt, dec):
        seen.append(passes(self, data, pt, dec))
        return seen[-1]

    monkeypatch.setattr(Bridge, "_passes", spy)
    out = b.receive_data(b"".join(events)) + b.end()
    assert seen == [False, True, True, True, True, False, False]  # role chunk arms it; finish and [DONE] do not pass
    for e in events[1:5]:
        assert e.replace(b"\r\n\r\n", b"\n\n") in out


_OPENING = [sse(chunk({"role": "assistant", "content": ""})), sse(chunk({"content": "one"}))]


def test_runs_of_text_chunks_go_out_as_they_came(monkeypatch):
    texts = (" two", "é東京", "\u2028", "\x7f", "🧑‍💻", "a\nb", 'say "x"', "back\\slash", "\x00\x08\x1f\r\t\x0c")
    run_ = b"".join(sse(chunk({"content": t})) for t in texts)
    ctx = Ctx(upstream_model="pub", public_model="pub")
    _, b = open_bridge(BODY, "chat", "chat", ctx)
    for e in _OPENING:
        b.receive_data(e)
    fed: list[bytes] = []
    feed = SSEParser.feed
    monkeypatch.setattr(SSEParser, "feed", lambda self, data: fed.append(data) or feed(self, data))
    assert b.receive_data(run_) == run_
    assert fed == []  # nothing was cut into events
    # a run cut mid-event: the waiting event is finished by the parser, the rest is a run again
    assert b.receive_data(run_[:30]) == b""
    assert b.receive_data(run_[30:]) == run_
    assert fed == [run_[:30], run_[30 : run_.index(b"\n\n") + 2]]


@pytest.mark.parametrize(
    "odd",
    [
        _template_text(b"a\tb"),  # a raw control character: not JSON, the full path skips it
        _template_text(b"\xff"),  # not UTF-8: the full path writes U+FFFD
        _template_text(b"a\xc3"),
        _template_text(b"\xed\xa0\x80"),  # a surrogate's UTF-8 form
        _template_text(b"\\u00e9"),  # escapes orjson would not write
        _template_text(b"\\/"),
        _template_text(b"\\u0008"),
        _template_text(b"\\u001F"),
        _template_text(b"a\\"),
        sse(chunk({"content": "x"}))[:-2] + b"\r\n\r\n",
        sse(chunk({"content": "x"})).replace(b"data: ", b"data:", 1),
        b": keep-alive\n\n",
    ],
)
@pytest.mark.parametrize("where", ["alone", "after a run", "in one read"])
def test_what_no_run_forwards(odd, where):
    good = sse(chunk({"content": "x"}))
    if where == "alone":
        events, cuts = [*_OPENING, odd, good], None
    elif where == "after a run":
        events, cuts = [*_OPENING, good + odd + good], None
    else:
        events, cuts = [*_OPENING, good, odd, good], [len(_OPENING[0]), len(_OPENING[1])]
    assert run(events, cuts, passthrough=True) == run(events, cuts, passthrough=False)


@pytest.mark.parametrize("waiting", [b"data: A\n", b"event: x\n", b": hi\n", b"data: A\r", b'data: {"x":'])
def test_a_waiting_event_is_finished_first(waiting):
    """The parser holds the start of an event: a run at the next read's start belongs to it."""
    good = sse(chunk({"content": "x"}))
    events = [*_OPENING, good + waiting, good + good]
    assert run(events, None, passthrough=True) == run(events, None, passthrough=False)


@pytest.mark.parametrize("cuts", [None, []])
def test_an_inline_think_is_no_run(cuts):
    """The decoder still probes for ``<think>``: its text is a repair, not a run."""
    texts = ("<think>", "hm", "</think>", "ok", "fine")
    events = [sse(chunk({"role": "assistant", "content": ""}))] + [sse(chunk({"content": t})) for t in texts]
    quirks = frozenset({"inline_think"})
    assert run(events, cuts, passthrough=True, quirks=quirks) == run(events, cuts, passthrough=False, quirks=quirks)


def test_template_check():
    pt = ChatPassthrough()
    assert not pt.armed
    pt.arm('{"a":1,"t":', "}")
    assert pt.text('{"a":1,"t":"x"}') and pt.text('{"a":1,"t":"a\\nb"}')
    assert not pt.text('{"a":1,"t":""}')  # empty text: the decoder makes nothing
    assert not pt.text('{"a":1,"t":"\\u00e9"}')  # orjson writes é, not its escape
    assert not pt.text('{"a":1,"t":"x","u":"y"}')  # another field
    assert not pt.text('{"a":1,"t":1}')
    assert not pt.text('{"a":2,"t":"x"}')


# -- ChatStreamDecoder.text: a plain text chunk without walking every field ---------------

_RESP_MINTED = re.compile(rb"(msg|rs|fc|call|resp)_[0-9a-f]{16,}|\"(created_at|completed_at)\":\d{6,}")


def _decoded(events: list[bytes], cuts: list[int] | None, client: str, think: bool, lane: bool):
    """``events`` through the full path (no passthrough), with or without ``text``."""
    ctx = Ctx(quirks=frozenset({"inline_think"}) if think else frozenset(), upstream_model="pub", public_model="pub")
    body = BODY if client == "chat" else {"model": "pub", "input": "hi", "tools": RESP_TOOLS, "stream": True}
    _, b = open_bridge(body, client, "chat", ctx)
    b.passthrough = None
    reads = events if cuts is None else pieces(b"".join(events), cuts)
    with mock.patch.object(ChatStreamDecoder, "text", lambda self, c: None) if not lane else contextlib.nullcontext():
        out = b"".join(b.receive_data(piece) for piece in reads) + b.end()
    out = _RESP_MINTED.sub(b"<minted>", _MINTED.sub(b"<minted>", out))
    return out, sorted(ctx.repairs), b.terminal, b.error_code


RESP_TOOLS = [{"type": "function", "name": "shell", "parameters": {"type": "object"}}]


@settings(max_examples=300)
@given(
    _stream,
    st.lists(st.integers(1, 80), max_size=12) | st.none(),
    st.sampled_from(["chat", "responses"]),
    st.booleans(),
)
def test_decoder_text_is_feed(events, cuts, client, think):
    """Whatever the upstream sends, the same answer with the decoder's text lane as without."""
    assert _decoded(events, cuts, client, think, True) == _decoded(events, cuts, client, think, False)


def test_decoder_text_takes_plain_chunks_only():
    dec = ChatStreamDecoder(Ctx())
    plain = chunk({"content": "hi"})
    assert dec.text(plain) is None  # not started: the first chunk makes the Start
    dec.feed(chunk({"role": "assistant", "content": ""}))
    assert dec.text(plain) == "hi"
    assert dec.text(chunk({"content": "hi", "role": "assistant", "reasoning_content": None})) == "hi"
    for odd in (
        chunk({"content": ""}),
        chunk({"content": "hi"}, finish="stop"),
        chunk({"content": "hi"}, usage={"prompt_tokens": 1}),
        chunk({"content": "hi", "reasoning_content": "hm"}),
        chunk({"content": "hi", "refusal": "no"}),
        chunk({"content": "hi", "tool_calls": []}),
        chunk({"content": "hi", "function_call": {"name": "f"}}),
        chunk({"content": ["hi"]}),
        chunk(None),
        dict(plain, error={"message": "x"}),
        dict(plain, choices=[{"index": 0, "delta": {"content": "hi"}, "usage": {"prompt_tokens": 1}}]),
        dict(plain, choices=["x"]),
        dict(plain, choices={"0": {}}),
    ):
        assert dec.text(odd) is None, odd
    probing = ChatStreamDecoder(Ctx(quirks=frozenset({"inline_think"})))
    probing.feed(chunk({"role": "assistant", "content": ""}))
    assert probing.text(plain) is None  # still probing for <think>: a repair may apply
    dec.feed(chunk({}, finish="stop"))
    dec.end()
    assert dec.text(plain) is None  # done
