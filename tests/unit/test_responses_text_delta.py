"""ResponsesStreamEncoder.text_delta: a text delta serialized by the encoder itself gives the
very bytes (and the same later events) that ``feed`` + ``orjson.dumps`` give, whatever came
before it; and the Bridge's Responses streams (SSE and WebSocket framing) are the same with
it as without it.  ResponsesStreamDecoder.text, its upstream side: the Bridge gives the same
answer with it as through the decoder's ``feed``."""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Iterator
from typing import Any
from unittest import mock

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.protocol_samples import CLIENTS, hello
from tests.unit.cuts import pieces
from transformers import responses_encode
from transformers.bridge import WSFraming, open_bridge
from transformers.context import Ctx
from transformers.events import (
    Finish,
    Reasoning,
    ReasoningEnd,
    Refusal,
    Start,
    Text,
    ToolCall,
    ToolCallEnd,
    Usage,
)
from transformers.responses_decode import ResponsesStreamDecoder
from transformers.responses_encode import ResponsesStreamEncoder

_text = st.one_of(
    st.sampled_from(["hi", " the", "", "a\nb", 'say "x"', "back\\slash", "\x00", "\u2028", "é東京", "🧑‍💻"]),
    st.text(max_size=8),
)
_event = st.one_of(
    st.builds(Text, _text),
    st.builds(Text, _text),
    st.builds(Text, _text),
    st.builds(Refusal, _text),
    st.builds(Reasoning, _text, kind=st.sampled_from(["summary", "raw"]), summary_index=st.integers(0, 1)),
    st.builds(Reasoning, _text),
    st.builds(Reasoning, _text),
    st.builds(ReasoningEnd),
    st.builds(ToolCall, st.integers(0, 1), arguments=st.sampled_from(["", '{"a"', ":1}"]), name=st.just("f")),
    # argument text alone (the decoders' ``args``), and with identity that may come late
    st.builds(ToolCall, st.integers(0, 1), arguments=st.sampled_from(['{"a"', ":1}", "%s", "é\n", ""])),
    st.builds(ToolCall, st.integers(0, 1), arguments=st.sampled_from(['{"a"', ":1}", "%s", "é\n", ""])),
    st.builds(
        ToolCall,
        st.integers(0, 1),
        arguments=st.sampled_from(["", '{"a"', "x"]),
        call_id=st.sampled_from([None, "call_up", "call_2"]),
        name=st.sampled_from([None, "f", "g"]),
        namespace=st.sampled_from([None, "ns"]),
        custom=st.sampled_from([None, True, False]),
        item_id=st.sampled_from([None, "fc_up"]),
    ),
    st.builds(ToolCallEnd, st.integers(0, 1)),
    st.builds(ToolCallEnd, st.integers(0, 1), arguments=st.sampled_from([None, '{"a":1}']), mismatch=st.booleans()),
    st.just(Usage({"input_tokens": 3, "output_tokens": 5, "total_tokens": 8})),
)
_finish = st.one_of(st.none(), st.sampled_from([Finish("completed"), Finish("incomplete", reason="max_output_tokens")]))


def _deterministic():
    """Minted ids and clocks from counters, so two runs of one stream can be compared."""
    n = itertools.count()
    return (
        mock.patch.object(responses_encode, "_hex", lambda: f"{next(n):032x}"),
        mock.patch.object(responses_encode, "_now", lambda: 1700000000),
    )


def _encode(events: list, fast: bool, frames: dict[int, tuple[bytes, bytes]] | None = None) -> list[bytes]:
    """Each event's bytes; ``frames``: before the i-th event, ``frame_deltas`` with that frame
    (the fast path's deltas come framed, the unframed JSON is what the test compares)."""
    a, b = _deterministic()
    with a, b:
        enc = ResponsesStreamEncoder(Ctx(public_model="pub"), response_id="resp_1", created_at=7)
        return encoded(enc, events, fast, frames)


def encoded(enc: Any, events: list, fast: bool, frames: dict[int, tuple[bytes, bytes]] | None) -> list[bytes]:
    """Each event's bytes from encoder ``enc``, a text by ``text_delta``, a reasoning delta by
    ``reasoning_delta`` and a tool call by ``args_delta`` when ``fast`` (and ``feed`` when
    they decline), framed as
    ``frames`` says from the i-th event on, the frame checked and taken off."""
    out: list[bytes] = []
    frame = (b"", b"")
    for i, ev in enumerate(events):
        if frames and i in frames:
            frame = frames[i]
            enc.frame_deltas(lambda _kind, frame=frame: frame)
        data = None
        if fast and type(ev) is Text:
            data = enc.text_delta(ev.text)
        elif fast and type(ev) is Reasoning:
            data = enc.reasoning_delta(ev)
        elif fast and type(ev) is ToolCall:
            data = enc.args_delta(ev)
        if data is not None:
            before, after = frame
            assert data.startswith(before) and data.endswith(after)
            out.append(data[len(before) : len(data) - len(after)])
            continue
        out.extend(orjson.dumps(o) for o in enc.feed(ev))
    out.extend(orjson.dumps(o) for o in enc.end())
    return out


_frame = st.sampled_from(
    [(b"", b""), (b"event: response.output_text.delta\ndata: ", b"\n\n"), (b"", b"\n"), (b"%d<", b">%s%%")]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_event, max_size=25), _finish, st.dictionaries(st.integers(0, 26), _frame, max_size=3))
def test_same_bytes_as_feed(events, finish, frames):
    events = [Start(), *events] + ([finish] if finish else [])
    assert _encode(events, fast=True, frames=frames) == _encode(events, fast=False)


def test_taken_only_inside_an_open_output_text_part():
    enc = ResponsesStreamEncoder(Ctx(public_model="pub"), response_id="resp_1", created_at=7)
    assert enc.text_delta("x") is None  # nothing started
    enc.feed(Start())
    assert enc.text_delta("x") is None  # no message open
    enc.feed(Text("a"))
    data = enc.text_delta('b"\n')
    assert data is not None
    ev = orjson.loads(data)
    assert ev["type"] == "response.output_text.delta" and ev["delta"] == 'b"\n' and ev["sequence_number"] == 5
    assert enc.text_delta("") is None  # an empty text makes no event
    enc.feed(Refusal("no"))
    assert enc.text_delta("x") is None  # the open part is a refusal
    enc.feed(Finish("completed"))
    assert enc.text_delta("x") is None  # done
    assert enc.end() == []


_MINTED = re.compile(rb"(msg|rs|fc|call|resp)_[0-9a-f]{16,}|\"(created_at|completed_at)\":\d{6,}")


def _chat_chunk(delta: dict, finish=None) -> bytes:
    c = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m"}
    c["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    return b"data: " + orjson.dumps(c) + b"\n\n"


def _resp_event(ev: dict) -> bytes:
    return b"event: " + ev["type"].encode() + b"\ndata: " + orjson.dumps(ev) + b"\n\n"


def _chat_upstream(texts: list[str]) -> bytes:
    out = [_chat_chunk({"role": "assistant", "content": ""})]
    out += [_chat_chunk({"content": t}) for t in texts]
    out.append(_chat_chunk({"reasoning_content": "hm"}))
    out += [_chat_chunk({"content": t}) for t in texts]
    out.append(_chat_chunk({}, finish="stop"))
    return b"".join(out) + b"data: [DONE]\n\n"


def _responses_upstream(texts: list[str]) -> bytes:
    resp = {"id": "resp_up", "object": "response", "created_at": 7, "model": "m", "status": "in_progress", "output": []}
    out = [_resp_event({"type": "response.created", "response": resp})]
    for i, t in enumerate(texts):
        out.append(
            _resp_event(
                {
                    "type": "response.output_text.delta",
                    "item_id": "msg_up",
                    "output_index": 0,
                    "content_index": 0,
                    "delta": t,
                }
            )
        )
        if i == 1:
            out.append(
                _resp_event({"type": "response.refusal.delta", "item_id": "msg_up", "output_index": 0, "delta": "no"})
            )
    done = dict(resp, status="completed")
    out.append(_resp_event({"type": "response.completed", "response": done}))
    return b"".join(out)


def bridged(body: dict, client: str, upstream: str, wire: bytes, cuts: list[int], without: Any, ws: bool) -> bytes:
    """The client's bytes for ``wire`` read in pieces ``cuts`` make (minted ids masked);
    ``without``: an encoder class whose ``text_delta`` is put out of use (None: in use).  A
    Responses upstream's runs, which take such deltas by the run, are out of use: what is
    tested here is the one delta's way (the runs': tests/unit/test_text_runs.py)."""
    _, b = open_bridge(body, client, upstream, Ctx(upstream_model="m", public_model="pub"))
    b.runs = None
    if ws:
        b.framing = WSFraming()
    patch = mock.patch.object(without, "text_delta", lambda self, text: None) if without else contextlib.nullcontext()
    with patch:
        out = [b.receive_data(piece) for piece in pieces(wire, cuts)]
        out.append(b.end())
    return _MINTED.sub(b"<minted>", b"".join(out))


def _bridge(upstream: str, wire: bytes, cuts: list[int], fast: bool, ws: bool) -> bytes:
    body = {"model": "pub", "stream": True, "input": "hi"}
    return bridged(body, "responses", upstream, wire, cuts, None if fast else ResponsesStreamEncoder, ws)


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(["chat", "responses"]),
    st.lists(_text, max_size=6),
    st.lists(st.integers(1, 90), max_size=10),
    st.booleans(),
)
def test_bridge_same_bytes_with_and_without(upstream, texts, cuts, ws):
    wire = _chat_upstream(texts) if upstream == "chat" else _responses_upstream(texts)
    fast = _bridge(upstream, wire, cuts, True, ws)
    assert fast == _bridge(upstream, wire, cuts, False, ws)


@contextlib.contextmanager
def spied(cls: Any, name: str) -> Iterator[list[tuple[Any, Any]]]:
    """The (argument, result) of each call of the one-argument method ``cls.name`` meanwhile."""
    calls: list[tuple[Any, Any]] = []
    real = getattr(cls, name)

    def spy(self: Any, arg: Any) -> Any:
        r = real(self, arg)
        calls.append((arg, r))
        return r

    with mock.patch.object(cls, name, spy):
        yield calls


def test_bridge_takes_it_for_plain_deltas():
    with spied(ResponsesStreamEncoder, "text_delta") as got:
        _bridge("responses", _responses_upstream(["a", "b", "c"]), [], True, False)
    calls = [(t, r is not None) for t, r in got]
    # the first opens the message and its part (full path), the second is the template; the
    # refusal between "b" and "c" closes the text part, so "c" opens a new one (full path)
    assert {t: any(r for u, r in calls if u == t) for t, _ in calls} == {"a": False, "b": True, "c": False}


# -- ResponsesStreamDecoder.text: an upstream text delta without the decoder's dispatch ----

_delta = st.fixed_dictionaries(
    {"type": st.just("response.output_text.delta")},
    optional={
        "item_id": st.sampled_from(["msg_up", "msg_other", "", None, 3, ["x"]]),
        "output_index": st.sampled_from([0, 1, "0"]),
        "content_index": st.sampled_from([0, 1]),
        "delta": st.one_of(_text, st.sampled_from([None, 5, ["x"]])),
        "item": st.sampled_from([None, {"type": "message", "id": "msg_new"}, "x"]),
        "sequence_number": st.integers(0, 9),
        "logprobs": st.just([]),
    },
)
_other = st.sampled_from(
    [
        {"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_up"}},
        {"type": "response.output_item.added", "output_index": 1, "item": {"type": "message"}},
        {"type": "response.refusal.delta", "item_id": "msg_up", "output_index": 0, "delta": "no"},
        {"type": "response.output_text.done", "item_id": "msg_up", "output_index": 0, "text": "whole"},
        {"type": "response.output_item.done", "output_index": 0, "item": {"type": "message", "id": "msg_up"}},
        {"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 2, "delta": "hm"},
    ]
)


_CHAT_MINTED = re.compile(rb"chatcmpl-[0-9a-f]{32}|\"created\":\d{6,}|\"responseId\":\"[0-9a-f]+\"")


def _upstream_events(events: list[dict], created: bool, terminal: bool) -> bytes:
    resp = {"id": "resp_up", "object": "response", "created_at": 7, "model": "m", "status": "in_progress", "output": []}
    out = [_resp_event({"type": "response.created", "response": resp})] if created else []
    out += [_resp_event(e) for e in events]
    if terminal:
        out.append(_resp_event({"type": "response.completed", "response": dict(resp, status="completed")}))
        out.append(_resp_event({"type": "response.output_text.delta", "item_id": "msg_up", "delta": "late"}))
    return b"".join(out)


def _through(wire: bytes, client: str, lane: bool, compact: bool) -> tuple[bytes, list[str], str]:
    body = hello(client)
    ctx = Ctx(upstream_model="m", public_model="pub")
    if compact:
        ctx.compaction = True
    _, b = open_bridge(body, client, "responses", ctx)
    a, c = _deterministic()
    patch = mock.patch.object(ResponsesStreamDecoder, "text", lambda self, ev: None)
    with a, c, patch if not lane else contextlib.nullcontext():
        out = b.receive_data(wire) + b.end()
    return _CHAT_MINTED.sub(b"<minted>", _MINTED.sub(b"<minted>", out)), sorted(ctx.repairs), b.terminal


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(_delta, _delta, _other), max_size=12),
    st.booleans(),
    st.booleans(),
    st.sampled_from(CLIENTS),
    st.booleans(),
)
def test_decoder_text_is_feed(events, created, terminal, client, compact):
    """Whatever the upstream sends, the Bridge gives the same bytes, repairs and terminal
    with the decoder's text lane as without it."""
    wire = _upstream_events(events, created, terminal)
    assert _through(wire, client, True, compact) == _through(wire, client, False, compact)


def test_decoder_text_takes_plain_deltas_only():
    dec = ResponsesStreamDecoder(Ctx())
    plain = {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "delta": "hi"}
    assert dec.text(plain) is None  # not started: the first event makes the Start
    dec.feed({"type": "response.created", "response": {"id": "r"}})
    assert dec.text(plain) == "hi"
    assert dec.text(dict(plain, delta="")) is None  # an empty delta makes nothing
    assert dec.text(dict(plain, item_id=7)) is None  # the normalizer drops it (a repair)
    assert dec.text(dict(plain, item_id="")) is None  # the normalizer may remap it by output_index
    assert dec.text(dict(plain, item={"type": "message"})) is None  # the normalizer resolves it
    assert dec.text({k: v for k, v in plain.items() if k != "item_id"}) is None  # a remap by output_index
    # the text is kept as feed keeps it: the item's done finds nothing missing
    done = {"type": "message", "id": "msg_1", "content": [{"type": "output_text", "text": "hi"}]}
    assert not any(type(e) is Text for e in dec.feed({"type": "response.output_item.done", "item": done}))
    dec.feed({"type": "response.completed", "response": {"id": "r", "status": "completed"}})
    assert dec.text(plain) is None  # finished
