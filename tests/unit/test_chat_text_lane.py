"""transformers/chat_text_lane.py: a Chat upstream's text chunks read off their bytes against
the stream's own template give the client the very bytes, terminal and repairs that parsing
every chunk gives, whatever the chunks hold and wherever the reads cut them."""

from __future__ import annotations

import itertools
import re
from unittest import mock

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.cuts import pieces
from tests.unit.test_responses_text_delta import spied
from transformers import ids
from transformers.bridge import open_bridge
from transformers.chat_text_lane import ChatTextLane
from transformers.context import Ctx

_text = st.one_of(
    st.sampled_from(["hi", " the", "a\nb", 'say "x"', "back\\slash", "\x00", "\u2028", "é東京", "🧑‍💻", "/"]),
    st.sampled_from(["<think>", "hm", "</think>", "<thi", "nk>x", "<think>a</think>b"]),  # inline_think
    st.text(min_size=1, max_size=8),
)


def _raw(obj: dict, style: str) -> bytes:
    """A chunk as an upstream may write it: orjson's way, with spaces, with escaped non-ASCII."""
    if style == "spaced":
        return orjson.dumps(obj).replace(b'":', b'": ')
    if style == "ascii":
        import json

        return json.dumps(obj, separators=(",", ":")).encode()
    return orjson.dumps(obj)


def _chunk(delta: dict, n: int, *, varying: bool, finish: str | None = None, dup: bool = False) -> dict:
    c: dict = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 7, "model": "m"}
    if varying:  # a field that changes from chunk to chunk (OpenAI's obfuscation)
        c["obfuscation"] = "x" * (n % 3)
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    c["choices"] = [choice]
    return c


_step = st.one_of(
    st.tuples(st.just("text"), _text),
    st.tuples(st.just("text"), _text),
    st.tuples(st.just("text"), _text),
    st.tuples(st.just("reasoning"), _text),
    st.tuples(st.just("call"), st.sampled_from(['{"a"', ":1}", ""])),
    st.tuples(st.just("dup"), _text),  # two content keys: the last one counts
    st.tuples(st.just("finish"), st.just("")),  # text after it: the decoder has ended
    st.tuples(st.just("junk"), st.sampled_from([b"\xff\xfe", b"\xc3", b"\\ud800", b'","x":"y'])),
)


def _wire(steps: list[tuple[str, object]], style: str, varying: bool) -> bytes:
    out = [b"data: " + _raw(_chunk({"role": "assistant", "content": ""}, 0, varying=varying), style) + b"\n\n"]
    for n, (kind, v) in enumerate(steps, 1):
        if kind == "text":
            data = _raw(_chunk({"content": v}, n, varying=varying), style)
        elif kind == "reasoning":
            data = _raw(_chunk({"reasoning_content": v}, n, varying=varying), style)
        elif kind == "call":
            call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": v}}
            data = _raw(_chunk({"tool_calls": [call]}, n, varying=varying), style)
        elif kind == "finish":
            data = _raw(_chunk({}, n, varying=varying, finish="stop"), style)
        elif kind == "dup":
            data = _raw(_chunk({"content": "ab"}, n, varying=varying), style)
            data = data.replace(b'"content":', b'"content":"zz","content":', 1)
            data = data.replace(b'"content": ', b'"content": "zz", "content": ', 1)
        else:  # bytes put in place of a text: not UTF-8, a lone surrogate, a broken string
            data = _raw(_chunk({"content": "QQ"}, n, varying=varying), style).replace(b"QQ", v)  # type: ignore[arg-type]
        out.append(b"data: " + data + b"\n\n")
    out.append(b"data: " + _raw(_chunk({}, 99, varying=varying, finish="stop"), style) + b"\n\n")
    return b"".join(out) + b"data: [DONE]\n\n"


_MINTED = re.compile(rb"(msg|rs|fc|call|resp)_[0-9a-f]{16,}|\"(created_at|completed_at)\":\d{6,}")


def _bridge(
    wire: bytes,
    cuts: list[int],
    lane: bool,
    client: str = "responses",
    quirks: frozenset[str] = frozenset(),
) -> tuple[bytes, str, list[str]]:
    """The client's answer to ``wire`` read in pieces ``cuts``, with the lane or without."""
    n = itertools.count()
    with mock.patch.object(ids, "_random", lambda k: next(n).to_bytes(k, "big")):
        body: dict = {"model": "pub", "stream": True}
        if client == "responses":
            body["input"] = "hi"
        else:
            body["messages"] = [{"role": "user", "content": "hi"}]
        _, b = open_bridge(body, client, "chat", Ctx(quirks=quirks, upstream_model="m", public_model="pub"))
        if not lane:
            b.lane = None
        out = [b.receive_data(piece) for piece in pieces(wire, cuts)]
        out.append(b.end())
    return _MINTED.sub(b"<minted>", b"".join(out)), b.terminal, list(b.repairs)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_step, max_size=12),
    st.sampled_from(["orjson", "spaced", "ascii"]),
    st.booleans(),
    st.lists(st.integers(1, 120), max_size=8),
    st.sampled_from(["responses", "chat"]),
    st.sampled_from([frozenset(), frozenset({"inline_think"})]),
)
def test_same_as_parsing_every_chunk(steps, style, varying, cuts, client, quirks):
    """(A Chat client of a Chat upstream has the passthrough, not the lane: the same.)"""
    wire = _wire(steps, style, varying)
    assert _bridge(wire, cuts, True, client, quirks) == _bridge(wire, cuts, False, client, quirks)


def test_it_takes_the_text_chunks_after_the_first():
    wire = _wire([("text", "a"), ("text", "b"), ("call", '{"a"'), ("text", "c"), ("text", "d\n")], "orjson", False)
    with spied(ChatTextLane, "text") as got:
        _bridge(wire, [], True)
    calls = [r for _, r in got]
    # learnt from "a"; then every chunk is offered: the texts read off their bytes, the tool
    # call's, the finish and [DONE] not (the full path)
    assert calls == ["b", None, "c", "d\n", None, None]


def test_learning():
    lane = ChatTextLane()
    data = orjson.dumps(_chunk({"content": "hé"}, 1, varying=False))
    lane.learn(data, "hé")
    assert lane.armed
    assert lane.text(data.replace("hé".encode(), b"x\\ny")) == "x\ny"
    assert lane.text(data.replace("hé".encode(), b"")) is None  # an empty text: the full path
    assert lane.text(data.replace("hé".encode(), b'a","b')) is None
    assert lane.text(data.replace("hé".encode(), b"\xff")) is None  # not UTF-8
    assert lane.text(data + b" ") is None
    twice = ChatTextLane()
    twice.learn(orjson.dumps({"choices": [{"delta": {"content": "a"}}], "x": {"content": "a"}}), "a")
    assert not twice.armed  # the text found twice: which one is it?
    spaced = ChatTextLane()
    for _ in range(10):
        spaced.learn(b'{"choices": [{"delta": {"content": "a"}}]}', "a")
    assert not spaced.armed and spaced._tries == 0  # written otherwise: it stops trying


def test_it_gives_up_on_an_upstream_that_varies_its_chunks():
    """A field that changes per chunk (OpenAI's obfuscation): the template learnt from the
    first text chunk misses the next ones; after _MISSES of them the lane is no longer tried."""
    from transformers import chat_text_lane

    def chunk(i: int, delta: dict, finish: str | None = None) -> bytes:
        c = {**_chunk(delta, i, varying=False, finish=finish), "obfuscation": "o" * i}  # a new one each time
        return b"data: " + orjson.dumps(c) + b"\n\n"

    wire = chunk(0, {"role": "assistant", "content": ""})
    wire += b"".join(chunk(i, {"content": f"t{i}"}) for i in range(1, 21))
    wire += chunk(21, {}, "stop") + b"data: [DONE]\n\n"
    with spied(ChatTextLane, "text") as tried:
        out = _bridge(wire, [], True)
    assert out == _bridge(wire, [], False)
    assert tried and all(r is None for _, r in tried)  # never a hit
    assert len(tried) == chat_text_lane._MISSES  # then not tried any more
