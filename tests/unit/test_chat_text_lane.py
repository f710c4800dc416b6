"""transformers/chat_text_lane.py: a Chat upstream's text and reasoning chunks read off their
bytes against the stream's own templates (and a plain reasoning chunk written by the
encoder's ``reasoning_delta``) give the client the very bytes, terminal and repairs that
parsing every chunk and feeding its events gives, whatever the chunks hold and wherever the
reads cut them."""

from __future__ import annotations

import contextlib
import itertools
import re
from unittest import mock

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.protocol_samples import CLIENTS, hello
from tests.unit.cuts import pieces
from tests.unit.test_responses_text_delta import spied
from transformers import ids
from transformers.bridge import open_bridge
from transformers.chat_decode import ChatStreamDecoder
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
    st.tuples(st.just("reasoning"), _text),
    st.tuples(st.just("reasoning"), _text),
    # how upstreams write reasoning: vLLM's newer key, DeepSeek's null content, both keys
    # (vLLM in between), an empty one before the other, reasoning with text in one chunk
    st.tuples(st.sampled_from(["reasoning_key", "null_content", "both_keys", "empty_first", "with_text"]), _text),
    # reasoning in a chunk that also finishes, carries the usage, or a refusal
    st.tuples(st.sampled_from(["reasoning_finish", "reasoning_usage", "reasoning_refusal"]), _text),
    # a key of the same name in a nested object (the sentinel check): never the text read,
    # which stays "N" while the nested one changes
    st.tuples(st.just("nested"), st.sampled_from(["N", "N", "M"])),
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
        elif kind == "reasoning_key":
            data = _raw(_chunk({"reasoning": v}, n, varying=varying), style)
        elif kind == "null_content":
            data = _raw(_chunk({"content": None, "reasoning_content": v}, n, varying=varying), style)
        elif kind == "both_keys":
            data = _raw(_chunk({"reasoning_content": v, "reasoning": v}, n, varying=varying), style)
        elif kind == "empty_first":
            data = _raw(_chunk({"reasoning_content": "", "reasoning": v}, n, varying=varying), style)
        elif kind == "with_text":
            data = _raw(_chunk({"reasoning_content": v, "content": v}, n, varying=varying), style)
        elif kind == "reasoning_finish":
            data = _raw(_chunk({"reasoning_content": v}, n, varying=varying, finish="stop"), style)
        elif kind == "reasoning_refusal":
            data = _raw(_chunk({"reasoning_content": v, "refusal": "no"}, n, varying=varying), style)
        elif kind == "reasoning_usage":
            c = _chunk({"reasoning_content": v}, n, varying=varying)
            c["usage"] = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
            data = _raw(c, style)
        elif kind == "nested":
            data = _raw(_chunk({"reasoning": "N", "x": {"reasoning_content": v}}, n, varying=varying), style)
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


def _none(*_: object) -> None:
    return None


def _bridge(
    wire: bytes,
    cuts: list[int],
    lane: bool,
    client: str = "responses",
    quirks: frozenset[str] = frozenset(),
    key: bytes = b"",
) -> tuple[bytes, str, list[str]]:
    """The client's answer to ``wire`` read in pieces ``cuts``, with the lanes and the
    decoder's ``reasoning`` or without."""
    n = itertools.count()
    with (
        mock.patch.object(ids, "_random", lambda k: next(n).to_bytes(k, "big")),
        mock.patch.object(ids, "_now_ns", lambda: 0),
    ):
        _, b = open_bridge(
            hello(client), client, "chat", Ctx(quirks=quirks, upstream_model="m", public_model="pub", envelope_key=key)
        )
        if not lane:
            b.lane = b.rlane = None
        # without: every reasoning chunk through the decoder's feed too
        off = contextlib.nullcontext() if lane else mock.patch.object(ChatStreamDecoder, "reasoning", _none)
        with off:
            out = [b.receive_data(piece) for piece in pieces(wire, cuts)]
            out.append(b.end())
    return _MINTED.sub(b"<minted>", b"".join(out)), b.terminal, list(b.repairs)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_step, max_size=12),
    st.sampled_from(["orjson", "spaced", "ascii"]),
    st.booleans(),
    st.lists(st.integers(1, 120), max_size=8),
    st.sampled_from(CLIENTS),
    st.sampled_from([frozenset(), frozenset({"inline_think"}), frozenset({"reasoning_key_reasoning"})]),
    st.sampled_from([b"", b"k" * 32]),
)
def test_same_as_parsing_every_chunk(steps, style, varying, cuts, client, quirks, key):
    """(A Chat client of a Chat upstream has the passthrough for its text chunks: the same.
    ``key``: reasoning sealed into the reasoning item's envelope, all of its text.)"""
    wire = _wire(steps, style, varying)
    assert _bridge(wire, cuts, True, client, quirks, key) == _bridge(wire, cuts, False, client, quirks, key)


def _steps_wire(*steps: tuple[str, str]) -> bytes:
    return _wire(list(steps), "orjson", False)


def test_reasoning_where_the_decoder_holds_a_think_tag():
    """``inline_think`` holding a content that may begin ``<think>``: a reasoning chunk then
    releases it first (the full path), on either client."""
    held_first = _steps_wire(("text", "<thi"), ("reasoning", "r1"), ("reasoning", "r2"), ("text", "nk>"))
    learnt_first = _steps_wire(("reasoning", "r0"), ("reasoning", "r1"), ("text", "<thi"), ("reasoning", "r2"))
    for wire in (held_first, learnt_first):
        for client in ("responses", "chat"):
            fast = _bridge(wire, [], True, client, frozenset({"inline_think"}))
            assert fast == _bridge(wire, [], False, client, frozenset({"inline_think"}))
            assert fast[0].index(b"<thi") < fast[0].index(b"r2")


def test_reasoning_in_the_chunk_that_finishes():
    """The finish reason of a chunk that also holds reasoning is the stream's (the full path):
    no finish chunk after it."""
    role = _chunk({"role": "assistant", "content": ""}, 0, varying=False)
    chunks = [
        role,
        _chunk({"reasoning_content": "a"}, 1, varying=False),
        _chunk({"reasoning_content": "b"}, 2, varying=False),
    ]
    chunks.append(_chunk({"reasoning_content": "c"}, 3, varying=False, finish="length"))
    wire = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    for client in ("responses", "chat"):
        fast = _bridge(wire, [], True, client)
        assert fast == _bridge(wire, [], False, client)
        assert fast[1] == "incomplete"


def test_a_nested_key_of_the_same_name_is_not_learnt():
    """The text found once, but in a nested object's key, not where the decoder reads it: the
    sentinel check refuses that template (the lane learns the key read, ``reasoning``, where
    the nested value is constant bytes), so a later nested value is never taken for the text."""
    wire = _steps_wire(*[("nested", "N")] * 3, *[("nested", "M")] * 3)
    with spied(ChatTextLane, "text") as got:
        out = _bridge(wire, [], True)
    assert out == _bridge(wire, [], False)
    assert out[0].count(b'"delta":"N"') == 6 and b'"delta":"M"' not in out[0]
    # the first "N" teaches the lane; the "M" ones, the finish chunk and [DONE] are not the template
    assert [r for _, r in got] == ["N", "N", None, None, None, None, None]


def test_a_key_spelt_with_an_escape_is_not_mistaken_for_another():
    """The delta's own key written with a ``\\u`` escape (the same key to JSON) and a nested
    key of that name in plain letters holding the same text: the text is found once, at the
    nested one, which is not what the decoder reads; the escape sends the template to the
    sentinel check, which refuses it."""
    for name, kind in (("content", "text"), ("reasoning_content", "reasoning")):
        spelt = "\\u00" + format(ord(name[0]), "x") + name[1:]
        data = b'{"choices":[{"index":0,"delta":{"%s":"a"},"x":{"%s":"a"}}]}' % (spelt.encode(), name.encode())
        assert orjson.loads(data)["choices"][0]["delta"] == {name: "a"}
        lane = ChatTextLane(kind)
        lane.learn(data, "a")
        assert not lane.armed, name


def test_reasoning_chunks_after_the_first_are_read_off_their_bytes():
    wire = _steps_wire(("reasoning", "a"), ("reasoning", "b"), ("reasoning_key", "c"), ("reasoning", "d"))
    with spied(ChatTextLane, "text") as got:
        out = _bridge(wire, [], True, "chat")
    assert out == _bridge(wire, [], False, "chat")
    # the text lane is not offered reasoning; the reasoning lane, learnt from "a", reads "b"
    # and "d", not "c" (another key), the finish nor [DONE]
    assert [r for _, r in got] == ["b", None, "d", None, None]


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
