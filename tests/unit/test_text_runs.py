"""transformers/text_runs.py: a Responses upstream's runs of text deltas read off their bytes against the stream's own
template give the client the very bytes, terminal and repairs that reading every event
gives (the same Bridge with its runs out of use), whatever the events hold, however the
upstream writes them and wherever the reads cut them; and the runs are taken, in bulk,
where they can be."""

from __future__ import annotations

import itertools
import json
import re
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.cuts import pieces
from tests.unit.test_responses_text_delta import spied
from transformers import ids, text_runs
from transformers.bridge import open_bridge
from transformers.context import Ctx
from transformers.responses_decode import ResponsesStreamDecoder
from transformers.text_runs import TextRuns


@pytest.fixture(autouse=True)
def _templates(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process's templates are kept up to _KEEP: each test starts with none kept."""
    monkeypatch.setattr(text_runs, "_COMPILED", {})


_text = st.one_of(
    st.sampled_from(["hi", " the", "a\nb", 'say "x"', "back\\slash", "\x00", "\x7f", "\u2028", "é東京", "🧑‍💻", "/"]),
    st.text(min_size=1, max_size=8),
)

# how an upstream writes its JSON: orjson's way, keys sorted (OpenAI's order), blanks after the
# colons, non-ASCII escaped (Python's json)
_STYLES = ("orjson", "sorted", "spaced", "ascii")


def _raw(obj: dict, style: str) -> bytes:
    if style == "sorted":
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    if style == "spaced":
        return orjson.dumps(obj).replace(b'":', b'": ')
    if style == "ascii":
        return json.dumps(obj, separators=(",", ":")).encode()
    return orjson.dumps(obj)


# a step of the stream after its opening: (kind, value)
_step = st.one_of(
    *[st.tuples(st.just("text"), _text)] * 16,
    st.tuples(st.just("text_other_item"), _text),  # another item's delta, no item added
    st.tuples(st.just("empty"), st.just("")),  # an empty delta: nothing to write
    st.tuples(st.just("with_item"), _text),  # a delta carrying an "item": the normalizer's
    st.tuples(st.just("dup"), _text),  # two delta keys: the last one counts
    st.tuples(st.just("seq"), st.sampled_from([b"07", b"-1", b"1.5", b"12345678901234567890", b'"3"', b"null"])),
    st.tuples(st.just("obf"), st.sampled_from(["", "aZ9", 'q"x', "\\", "é"])),
    st.tuples(st.just("logprobs"), st.just("")),  # a field the template did not have
    st.tuples(st.just("junk"), st.sampled_from([b"\xff\xfe", b"\xc3", b"\\ud800", b"\\u00e9", b'","x":"y', b"\\/"])),
    st.tuples(st.just("refusal"), _text),
    st.tuples(st.just("reasoning"), _text),
    st.tuples(st.just("new_part"), st.just("")),  # the part done, a new part added: content_index 1
    st.tuples(st.just("odd"), st.sampled_from([b"data: ping", b": keep-alive", b"", b"data: 42", b"event: x"])),
    st.tuples(st.just("crlf"), _text),  # a delta whose lines end with CRLF
    st.tuples(st.just("done"), st.booleans()),  # the message done: its text and more (True), or another
    # a delta's lines after another line of the same event: one event, not a delta
    st.tuples(st.just("prefixed"), st.sampled_from([b"data: 1\n", b"id: 5\n", b": note\n", b"data: {}\n"])),
)


def _wire(steps: list[tuple[str, object]], style: str, named: bool, obfuscated: bool, end: str) -> bytes:
    seq = itertools.count()
    part = [0]
    texts: list[str] = []  # the message's texts

    def ev(obj: dict, *, raw_seq: bytes | None = None, nl: bytes = b"\n") -> bytes:
        obj = dict(obj)
        obj["sequence_number"] = next(seq)
        data = _raw(obj, style)
        if raw_seq is not None:
            data = re.sub(rb'("sequence_number": ?)\d+', lambda m: m.group(1) + raw_seq, data)
        head = b"event: " + obj["type"].encode() + nl if named else b""
        return head + b"data: " + data + nl + nl

    def delta(text: str, **extra: object) -> dict:
        obj: dict = {"type": "response.output_text.delta", "item_id": "msg_up", "output_index": 0}
        obj["content_index"] = part[0]
        obj["delta"] = text
        obj["logprobs"] = []
        if obfuscated:
            obj["obfuscation"] = "x" * (len(text) % 4)
        obj.update(extra)
        return obj

    resp = {"id": "resp_up", "object": "response", "created_at": 7, "model": "m", "status": "in_progress", "output": []}
    msg = {"id": "msg_up", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    out = [
        ev({"type": "response.created", "response": resp}),
        ev({"type": "response.in_progress", "response": resp}),
        ev({"type": "response.output_item.added", "output_index": 0, "item": msg}),
        ev({"type": "response.content_part.added", "item_id": "msg_up", "output_index": 0, "content_index": 0}),
    ]
    for kind, v in steps:
        if kind == "text":
            out.append(ev(delta(v)))  # type: ignore[arg-type]
            texts.append(v)  # type: ignore[arg-type]
        elif kind == "text_other_item":
            out.append(ev(delta(v, item_id="msg_other")))  # type: ignore[arg-type]
        elif kind == "empty":
            out.append(ev(delta("")))
        elif kind == "with_item":
            out.append(ev(delta(v, item={"type": "message", "id": "msg_new"})))  # type: ignore[arg-type]
        elif kind == "dup":
            data, second = ev(delta("ab")), b',"delta":' + orjson.dumps(v)
            out.append(re.sub(rb'"delta": ?"ab"', lambda m, second=second: m.group(0) + second, data))
        elif kind == "seq":
            out.append(ev(delta("s"), raw_seq=v))  # type: ignore[arg-type]
        elif kind == "obf":
            out.append(ev(delta("o", obfuscation=v)))
        elif kind == "logprobs":
            out.append(ev(delta("l", logprobs=[{"token": "l", "logprob": -0.1}])))
        elif kind == "junk":  # bytes put in place of a text: not UTF-8, a lone surrogate, escapes
            out.append(ev(delta("QQ")).replace(b"QQ", v))  # type: ignore[arg-type]
        elif kind == "refusal":
            out.append(ev({"type": "response.refusal.delta", "item_id": "msg_up", "output_index": 0, "delta": v}))
        elif kind == "reasoning":
            out.append(
                ev(
                    {
                        "type": "response.reasoning_summary_text.delta",
                        "item_id": "rs_up",
                        "summary_index": 0,
                        "delta": v,
                    }
                )
            )
        elif kind == "new_part":
            done = {"type": "response.content_part.done", "item_id": "msg_up", "output_index": 0}
            out.append(ev(dict(done, content_index=part[0])))
            part[0] += 1
            added = {"type": "response.content_part.added", "item_id": "msg_up", "output_index": 0}
            out.append(ev(dict(added, content_index=part[0])))
        elif kind == "done":  # the item done: the decoder writes what its deltas missed of it
            text = "".join(texts) + "!" if v else "other"
            item = dict(msg, status="completed", content=[{"type": "output_text", "text": text, "annotations": []}])
            out.append(ev({"type": "response.output_item.done", "output_index": 0, "item": item}))
        elif kind == "odd":
            out.append(v + b"\n\n")  # type: ignore[operator]
        elif kind == "prefixed":
            out.append(v + ev(delta("p")))  # type: ignore[operator]
        else:  # crlf
            out.append(ev(delta(v), nl=b"\r\n"))  # type: ignore[arg-type]
    if end == "completed":
        out.append(ev({"type": "response.completed", "response": dict(resp, status="completed")}))
    elif end == "cut":  # the stream stops inside an event
        out.append(ev(delta("tail"))[:-7])
    return b"".join(out)


_MINTED = re.compile(rb"(msg|rs|fc|call|resp)_[0-9a-f]{16,}|\"(created_at|completed_at)\":\d{6,}")


def _bridge(wire: bytes, cuts: list[int], runs: bool, client: str = "responses", ws: bool = False):
    n = itertools.count()
    with (
        mock.patch.object(ids, "_random", lambda k: next(n).to_bytes(k, "big")),
        mock.patch.object(ids, "_now_ns", lambda: 0),
    ):
        body: dict = {"model": "pub", "stream": True}
        if client == "responses":
            body["input"] = "hi"
        else:
            body["messages"] = [{"role": "user", "content": "hi"}]
        ctx = Ctx(upstream_model="m", public_model="pub")
        _, b = open_bridge(body, client, "responses", ctx, websocket=ws)
        if not runs:
            b.runs = None
        out = [b.receive_data(piece) for piece in pieces(wire, cuts)]
        out.append(b.end())
    return _MINTED.sub(b"<minted>", b"".join(out)), b.terminal, b.error_code, list(b.repairs)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_step, min_size=4, max_size=40),
    st.sampled_from(_STYLES),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["completed", "truncated", "cut"]),
    st.lists(st.integers(1, 400), max_size=8),
    st.sampled_from([("responses", False), ("responses", True), ("chat", False)]),
)
def test_same_as_reading_every_event(steps, style, named, obfuscated, end, cuts, way):
    client, ws = way
    wire = _wire(steps, style, named, obfuscated, end)
    assert _bridge(wire, cuts, True, client, ws) == _bridge(wire, cuts, False, client, ws)


# streams where a run meets each state that must send it the full way
_CASES = {
    "after a refusal (the open part is the refusal's)": [("text", "a"), ("refusal", "r"), ("text", "b"), ("text", "c")],
    "after reasoning": [("reasoning", "hm"), ("text", "a"), ("text", "b"), ("reasoning", "x"), ("text", "c")],
    "a new part": [("text", "a"), ("text", "b"), ("new_part", ""), ("text", "c"), ("text", "d")],
    "another item's deltas": [("text", "a"), ("text_other_item", "b"), ("text_other_item", "c"), ("text", "d")],
    "odd blocks between": [("text", "a"), ("odd", b": keep-alive"), ("text", "b"), ("odd", b""), ("text", "c")],
    "a line before a delta's": [("text", "a"), ("prefixed", b"data: 1\n"), ("text", "b"), ("prefixed", b"id: 5\n")],
    "junk in a run": [("text", "a"), ("text", "b"), ("junk", b"\xc3"), ("text", "c"), ("seq", b"07"), ("text", "d")],
    "the item done": [("text", "a"), ("text", "b"), ("done", True), ("text", "c")],
}


@pytest.mark.parametrize("steps", _CASES.values(), ids=_CASES.keys())
@pytest.mark.parametrize(("client", "ws"), [("responses", False), ("responses", True), ("chat", False)])
def test_cut_at_every_event(steps: list[tuple[str, object]], client: str, ws: bool) -> None:
    """Each stream read whole, then cut once at every event's end, and twice (before and
    after the last delta): the same as reading every event."""
    wire = _wire([*steps, ("done", True)], "orjson", True, True, "completed")
    ends = [m.end() for m in re.finditer(rb"\n\n", wire)]
    for cuts in ([], *([e] for e in ends), [ends[-4], ends[-3] - ends[-4]]):
        assert _bridge(wire, cuts, True, client, ws) == _bridge(wire, cuts, False, client, ws), cuts


@pytest.mark.parametrize("style", ["orjson", "sorted", "spaced"])
@pytest.mark.parametrize(("client", "ws"), [("responses", False), ("responses", True), ("chat", False)])
def test_a_run_is_read_at_once(style: str, client: str, ws: bool) -> None:
    """A stream of plain deltas in one read: the decoder reads the first delta (the template),
    the rest go to it in one run, and the client gets what it gets without runs."""
    wire = _wire([("text", f"t{i} é\n") for i in range(40)], style, True, True, "completed")
    with (
        spied(ResponsesStreamDecoder, "text") as one,
        mock.patch.object(
            ResponsesStreamDecoder, "texts", autospec=True, side_effect=ResponsesStreamDecoder.texts
        ) as many,
    ):
        fast = _bridge(wire, [], True, client, ws)
    assert [text for _, text in one if text is not None] == ["t0 é\n"]
    assert [len(c.args[2]) for c in many.call_args_list] == [39]
    assert fast == _bridge(wire, [], False, client, ws)


def test_a_synthesised_compaction_takes_every_delta_the_full_way() -> None:
    """The compaction stage gathers the model's summary from the text: no run skips it."""
    wire = _wire([("text", f"t{i}") for i in range(10)], "orjson", True, False, "completed")

    def answer(runs: bool) -> bytes:
        n = itertools.count()
        with (
            mock.patch.object(ids, "_random", lambda k: next(n).to_bytes(k, "big")),
            mock.patch.object(ids, "_now_ns", lambda: 0),
            mock.patch.object(ResponsesStreamDecoder, "texts", side_effect=AssertionError) as many,
        ):
            ctx = Ctx(upstream_model="m", public_model="pub", compaction=True, compaction_key=b"k" * 32)
            _, b = open_bridge({"model": "pub", "stream": True, "input": "hi"}, "responses", "responses", ctx)
            if not runs:
                b.runs = None
            out = b.receive_data(wire) + b.end()
        assert many.call_count == 0 and b.terminal == "completed"
        return _MINTED.sub(b"<minted>", out)

    assert answer(True) == answer(False)


def _per_read(wire: bytes, k: int) -> list[int]:
    """Cuts that make each read ``k`` whole events of ``wire``."""
    ends = [m.end() for m in re.finditer(rb"\n\n", wire)][k - 1 :: k]
    return [b - a for a, b in itertools.pairwise([0, *ends])]


@pytest.mark.parametrize(
    ("k", "text", "runs"),
    [(1, "w", False), (2, "w", False), (3, "w", False), (3, "w" * 150, True), (1, "w" * 600, True), (5, "w", True)],
)
def test_which_reads_are_offered_to_the_runs(k: int, text: str, runs: bool) -> None:
    """A read shorter than _RUN_READ bytes (an event or two, as an upstream at token rate
    writes them) goes the full way, where a run of one or two costs more than it saves, and
    nothing of it teaches the template: a stream read so never learns.  A longer read is
    offered, however many events it holds (the length alone is the gate)."""
    wire = _wire([("text", f"{text}{i}") for i in range(12)], "orjson", False, False, "completed")  # ~146 B a delta
    cuts = _per_read(wire, k)
    with (
        mock.patch.object(TextRuns, "learn", autospec=True, side_effect=TextRuns.learn) as learn,
        mock.patch.object(
            ResponsesStreamDecoder, "texts", autospec=True, side_effect=ResponsesStreamDecoder.texts
        ) as many,
    ):
        fast = _bridge(wire, cuts, True)
    assert (many.call_count > 0) is runs and (learn.call_count > 0) is runs
    assert all(len(c.args[2]) <= k for c in many.call_args_list)  # a run within a read
    assert fast == _bridge(wire, cuts, False)


def _block(obj: dict, style: str = "orjson") -> bytes:
    return b"event: response.output_text.delta\ndata: " + _raw(obj, style)


_DELTA = {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0}


@pytest.mark.parametrize(
    ("block", "learns"),
    [
        (_block(dict(_DELTA, delta="hi", sequence_number=4)), True),
        (_block(dict(_DELTA, delta="hi", sequence_number=4), "sorted"), True),
        (_block(dict(_DELTA, delta="hi", sequence_number=4), "spaced"), True),
        (_block(dict(_DELTA, delta="hi")), True),  # no number: nothing to vary
        (_block(dict(_DELTA, delta="a\nb\u2028", obfuscation="Zq")), True),
        (_block(dict(_DELTA, delta="é")), True),
        (_block(dict(_DELTA, delta="é"), "ascii"), False),  # \u00e9: not how orjson writes it
        (_block(dict(_DELTA, delta="hi", item_id="msg\\1")), False),  # an escape in the item id
        (_block(dict(_DELTA, delta="hi", note="delta")), False),  # "delta" twice in the block
        (_block(dict(_DELTA, delta="hi", sequence_number=-1)), False),  # not a number the hole takes
        (_block(dict(_DELTA, delta="hi", obfuscation="a\\b")), False),
        (_block(dict(_DELTA, delta="hi", meta={"item_id": "x"})), False),  # the item id's key twice
    ],
)
def test_learning(block: bytes, learns: bool) -> None:
    runs = TextRuns()
    obj = orjson.loads(block.partition(b"data: ")[2])
    runs.learn(block, obj, obj["delta"])
    assert runs.armed is learns
    if learns:  # the block itself is a run of one, its text read back as it was written
        end, iid, texts = runs.take(block + b"\n\n" + block + b"\n\nevent: x", 0)
        assert (end, iid, texts) == (2 * len(block) + 4, b"msg_1", [orjson.dumps(obj["delta"])] * 2)


def test_a_run_stops_at_another_item() -> None:
    runs = TextRuns()
    good = _block(dict(_DELTA, delta="éa", sequence_number=1))
    runs.learn(good, orjson.loads(good.partition(b"data: ")[2]), "éa")
    other = good.replace(b"msg_1", b"msg_2")
    assert runs.take(good + b"\n\n" + other + b"\n\n", 0) == (len(good) + 2, b"msg_1", [orjson.dumps("éa")])
    assert runs.take(other + b"\n\n" + other + b"\n\n", 0)[1:] == (b"msg_2", [orjson.dumps("éa")] * 2)


def test_from_a_run_that_is_not_utf8_on_a_read_goes_the_full_way() -> None:
    steps = [("text", f"w{i}") for i in range(6)] + [("junk", b"\xc3\x28")] + [("text", f"v{i}") for i in range(6)]
    wire = _wire(steps, "orjson", True, False, "completed")
    with mock.patch.object(
        ResponsesStreamDecoder, "texts", autospec=True, side_effect=ResponsesStreamDecoder.texts
    ) as many:
        fast = _bridge(wire, [], True)
    # the run from "w1" holds the invalid bytes (the junk delta's "QQ" replaced by them): from
    # it on, the read goes the full way
    assert many.call_count == 0
    assert fast == _bridge(wire, [], False)
    # cut at the invalid byte: the second read finishes the event it cut the full way,
    # invalid bytes and all, then has its own run
    cut = wire.index(b"\xc3\x28")
    with mock.patch.object(
        ResponsesStreamDecoder, "texts", autospec=True, side_effect=ResponsesStreamDecoder.texts
    ) as many:
        fast = _bridge(wire, [cut], True)
    assert [len(c.args[2]) for c in many.call_args_list] == [5, 6]
    assert fast == _bridge(wire, [cut], False)


def test_learning_is_bounded() -> None:
    """A stream learns at most _LEARN times; past _KEEP templates in the process nothing new
    is compiled, and a stream that learnt nothing is spent."""
    runs = TextRuns()
    block = _block(dict(_DELTA, delta="hi", unseen_field=1))
    obj = orjson.loads(block.partition(b"data: ")[2])
    full = dict.fromkeys(range(text_runs._KEEP))
    with mock.patch.object(text_runs, "_COMPILED", full):
        for _ in range(text_runs._LEARN):
            assert not runs.spent
            runs.learn(block, obj, "hi")
        assert len(full) == text_runs._KEEP and not runs.armed and runs.spent
    runs.learn(block, obj, "hi")  # no learning left
    assert not runs.armed


def test_a_spent_stream_drops_its_runs() -> None:
    """An upstream that writes its deltas with escapes orjson does not use never gives a
    template: after _LEARN deltas the Bridge stops looking for runs."""
    wire = _wire([("text", "é")] * 20, "ascii", False, False, "completed")
    _, b = open_bridge({"model": "pub", "stream": True, "input": "hi"}, "responses", "responses", Ctx())
    half = wire.index(b"\n\n", len(wire) // 2) + 2
    b.receive_data(wire[:half])  # (a read offers at most _RUN_OPENING deltas)
    assert b.runs is not None and not b.runs.spent
    b.receive_data(wire[half:])
    assert b.runs is None or b.runs.spent
    b.receive_data(b": keep-alive\n\n" * 50)  # the next read offered to the runs (>= _RUN_READ)
    assert b.runs is None


def test_the_fake_upstreams_stream_is_one_run() -> None:
    """The bench's 218-event Responses stream: its 200 deltas are one run after the first."""
    from bench.fake_upstream import responses_steps

    wire = b"".join(responses_steps("bench-n200", 200))
    with mock.patch.object(
        ResponsesStreamDecoder, "texts", autospec=True, side_effect=ResponsesStreamDecoder.texts
    ) as many:
        fast = _bridge(wire, [], True)
    assert [len(c.args[2]) for c in many.call_args_list] == [199]
    assert fast == _bridge(wire, [], False)
