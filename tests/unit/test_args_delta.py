"""A tool call's plain argument deltas (the decoders' ``args``, a Chat upstream's read off
their bytes by the Bridge's ``alane``, the tool stage's ``plain_call``, then the encoder's
``args_delta``) give the client the very bytes, terminal and repairs that the decoder's
``feed`` and the encoder's ``feed`` give, whatever the chunks and events hold and wherever
the reads cut them: from a Chat upstream and a Responses one, to either client, SSE or
WebSocket framing, with the tool stage's call kinds (plain, custom, the ``apply_patch``
wrap, namespaced), its held invalid calls, and an upstream's done events checked against
every delta given."""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Iterator
from unittest import mock

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.protocol_samples import CLIENTS, hello
from tests.unit.cuts import pieces
from tests.unit.test_responses_text_delta import spied
from transformers import chat_encode, ids, responses_encode
from transformers.bridge import WSFraming, open_bridge
from transformers.chat_decode import ChatStreamDecoder
from transformers.context import Ctx
from transformers.responses_decode import ResponsesStreamDecoder

_args = st.one_of(
    st.sampled_from(['{"cmd":', '"ls', ' -la"}', "\\", '"', "\x00", "é東京", "🧑‍💻", "%s", "%%d", "\n"]),
    st.sampled_from(["*** Begin Patch\n", "*** Add File: a\n+x\n", "*** End Patch", "", "{}"]),
    st.text(max_size=5),
)
_NAMES = ["shell", "shell", "apply_patch", "mcp__gh__get_me", "other"]
_MINTED = re.compile(
    rb"(msg|rs|fc|ctc|call|resp|chatcmpl)[-_][0-9a-f]{16,}|\"(created|created_at|completed_at)\":\d{6,}"
)


def _none(*_: object) -> None:
    return None


@contextlib.contextmanager
def _counted() -> Iterator[None]:
    """Minted ids and timestamps counted, not random: both runs of a wire mint the same."""
    n = itertools.count()
    hexes = itertools.count()
    with (
        mock.patch.object(ids, "_random", lambda k: next(n).to_bytes(k, "big")),
        mock.patch.object(ids, "_now_ns", lambda: 0),
        mock.patch.object(responses_encode, "_hex", lambda: f"{next(hexes):032x}"),
    ):
        yield


def _body(client: str, tools: str) -> dict:
    """A request offering no tools, or the kinds the stage tells apart: a plain function, a
    custom ``apply_patch`` (Responses) or a one-string-parameter one (Chat: the wrap with
    ``mimo_raw_patch``), a namespaced one (Responses)."""
    body: dict = {"model": "pub", "stream": True}
    one = {"type": "object", "properties": {"patch": {"type": "string"}}, "required": ["patch"]}
    if client == "responses":
        body["input"] = "hi"
        if tools == "all":
            body["tools"] = [
                {"type": "function", "name": "shell", "parameters": {"type": "object"}},
                {"type": "custom", "name": "apply_patch"},
                {"type": "namespace", "name": "mcp__gh__", "tools": [{"type": "function", "name": "get_me"}]},
            ]
        elif tools == "wrap":
            body["tools"] = [
                {"type": "function", "name": "shell", "parameters": {"type": "object"}},
                {"type": "function", "name": "apply_patch", "parameters": one},
            ]
    else:  # every other client (tests/protocol_samples.py), its two functions in its own form
        functions = [{"name": "shell", "parameters": {"type": "object"}}, {"name": "apply_patch", "parameters": one}]
        body = hello(client, functions if tools != "none" else None)
    return body


def _run(
    wire: bytes, cuts: list[int], fast: bool, client: str, upstream: str, *, ws: bool, tools: str, quirks: frozenset
) -> tuple[bytes, str, list[str]]:
    """The client's answer to ``wire`` read in pieces ``cuts``, with the decoders' ``args``
    and the argument lane (``fast``) or every event through their ``feed``."""
    with _counted(), contextlib.ExitStack() as off:
        if not fast:  # both decoders' args give nothing: every event through feed
            off.enter_context(mock.patch.object(ChatStreamDecoder, "args", _none))
            off.enter_context(mock.patch.object(ResponsesStreamDecoder, "args", _none))
        ctx = Ctx(quirks=quirks, upstream_model="m", public_model="pub")
        _, b = open_bridge(_body(client, tools), client, upstream, ctx)
        if not fast:
            b.alane = None
        if ws and client == "responses":
            b.framing = WSFraming()
        out = [b.receive_data(piece) for piece in pieces(wire, cuts)]
        out.append(b.end())
    return _MINTED.sub(b"<minted>", b"".join(out)), b.terminal, list(b.repairs)


# -- a Chat upstream ------------------------------------------------------------------------


def _chat_chunk(delta: dict, *, finish: str | None = None, usage: bool = False) -> dict:
    c: dict = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 7, "model": "m"}
    c["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    if usage:
        c["usage"] = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    return c


# an argument chunk of call ``index``, and what else it may hold: the call's own id, another
# id, a name again, text, reasoning, a refusal, a finish, usage, a second call, arguments that
# are not a string
_EXTRA = [
    "plain",
    "plain",
    "plain",
    "own_id",
    "other_id",
    "name",
    "empty_content",
    "null_content",
    "content",
    "reasoning",
    "empty_reasoning",
    "refusal",
    "finish",
    "usage",
    "two_calls",
    "object_args",
    "no_index",
    "str_index",
    "true_index",
    "float_index",
    "type",
]
_chat_step = st.one_of(
    st.tuples(st.just("args"), st.integers(0, 2), _args, st.sampled_from(_EXTRA)),
    st.tuples(st.just("args"), st.integers(0, 2), _args, st.just("plain")),
    st.tuples(st.just("args"), st.integers(0, 2), _args, st.just("plain")),
    st.tuples(
        st.just("start"),
        st.integers(0, 2),
        st.sampled_from(_NAMES + [None]),
        st.sampled_from(["call_a", "call_b", "call_c", None, 5]),
        _args,
    ),
    st.tuples(st.just("text"), _args),
    st.tuples(st.just("text"), st.sampled_from(["<thi", "nk>x", "<think>"])),  # inline_think holds these
)


def _chat_wire(steps: list[tuple], ending: str) -> bytes:
    chunks: list[dict] = [_chat_chunk({"role": "assistant", "content": ""})]
    for step in steps:
        if step[0] == "text":
            chunks.append(_chat_chunk({"content": step[1]}))
            continue
        if step[0] == "start":
            _, idx, name, cid, a = step
            fn = {"arguments": a} if name is None else {"name": name, "arguments": a}
            tc: dict = {"index": idx, "type": "function", "function": fn}
            if cid is not None:
                tc["id"] = cid
            chunks.append(_chat_chunk({"tool_calls": [tc]}))
            continue
        _, idx, a, extra = step
        fn = {"arguments": a}
        tc = {"index": idx, "function": fn}
        delta: dict = {"tool_calls": [tc]}
        kw: dict = {}
        if extra == "own_id":
            tc["id"] = f"call_{'abc'[idx]}"
        elif extra == "other_id":
            tc["id"] = "call_z"
        elif extra == "name":
            fn["name"] = "shell"
        elif extra == "empty_content":
            delta["content"] = ""
        elif extra == "null_content":
            delta["content"] = None
        elif extra == "content":
            delta["content"] = "t"
        elif extra == "reasoning":
            delta["reasoning_content"] = "r"
        elif extra == "empty_reasoning":
            delta["reasoning_content"] = ""
        elif extra == "refusal":
            delta["refusal"] = "no"
        elif extra == "finish":
            kw["finish"] = "tool_calls"
        elif extra == "usage":
            kw["usage"] = True
        elif extra == "two_calls":
            delta["tool_calls"].append({"index": (idx + 1) % 3, "function": {"arguments": "x"}})
        elif extra == "object_args":
            fn["arguments"] = {"a": 1}
        elif extra == "no_index":
            del tc["index"]
        elif extra == "str_index":
            tc["index"] = str(idx)
        elif extra == "true_index":  # (equal to 1 as a dict key, not an index to the decoder)
            tc["index"] = True
        elif extra == "float_index":
            tc["index"] = float(idx)
        elif extra == "type":
            tc["type"] = "function"
        chunks.append(_chat_chunk(delta, **kw))
    if ending != "cut":
        chunks.append(_chat_chunk({}, finish="length" if ending == "length" else "tool_calls"))
        chunks.append({**_chat_chunk({}, usage=True), "choices": []})
    wire = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)
    return wire + (b"data: [DONE]\n\n" if ending != "cut" else b"")


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_chat_step, max_size=14),
    st.sampled_from(["tool_calls", "tool_calls", "length", "cut"]),
    st.lists(st.integers(1, 150), max_size=8),
    st.sampled_from(CLIENTS),
    st.booleans(),
    st.sampled_from(["none", "all", "wrap"]),
    st.sampled_from(
        [frozenset(), frozenset({"invalid_json_passthrough"}), frozenset({"mimo_raw_patch", "inline_think"})]
    ),
)
def test_chat_upstream_same_as_the_decoders_feed(steps, ending, cuts, client, ws, tools, quirks):
    wire = _chat_wire(steps, ending)
    kw = {"ws": ws, "tools": tools, "quirks": quirks}
    assert _run(wire, cuts, True, client, "chat", **kw) == _run(wire, cuts, False, client, "chat", **kw)


# -- a Responses upstream -------------------------------------------------------------------

_FC = "response.function_call_arguments.delta"
_CTC = "response.custom_tool_call_input.delta"


def _item(k: int, custom: bool, name: str | None, cid: str | None, ns: bool) -> dict:
    item: dict = {"id": f"{'ctc' if custom else 'fc'}_{k}", "type": "custom_tool_call" if custom else "function_call"}
    item["status"] = "in_progress"
    if cid is not None:
        item["call_id"] = cid
    if name is not None:
        item["name"] = name
    if ns:
        item["namespace"] = "mcp__gh__"
    item["input" if custom else "arguments"] = ""
    return item


_resp_step = st.one_of(
    # an argument delta: its item id (well-formed and not), call id, text
    st.tuples(
        st.just("delta"),
        st.integers(0, 2),
        st.booleans(),
        st.sampled_from(["own", "own", "own", "", None, 5, "fc_9"]),
        st.sampled_from([None, None, "own", "call_late", 7]),
        st.one_of(_args, st.just(None), st.just(3)),
        st.booleans(),
    ),
    st.tuples(
        st.just("added"),
        st.integers(0, 2),
        st.booleans(),
        st.sampled_from(["shell", "apply_patch", None]),
        st.sampled_from(["call_a", None]),
        st.booleans(),
    ),
    # the done events: a text of their own, or (as upstreams send them) the call's whole text
    # streamed so far, or that and a suffix the deltas missed
    st.tuples(st.just("done"), st.integers(0, 2), st.booleans(), st.one_of(_args, st.sampled_from(["=all", "=all+"]))),
    st.tuples(st.just("item_done"), st.integers(0, 2), st.booleans(), st.sampled_from(["shell", None])),
    st.tuples(st.just("item_done_all"), st.integers(0, 2), st.booleans(), st.sampled_from(["shell", None])),
    st.tuples(st.just("text"), _args),
)


def _resp_wire(steps: list[tuple], ending: str) -> bytes:
    resp = {"id": "resp_up", "object": "response", "created_at": 7, "model": "m", "status": "in_progress", "output": []}
    events: list[dict] = [{"type": "response.created", "response": resp}]
    streamed: dict[tuple, list[str]] = {}  # (k, custom) → the text of its own item's deltas
    for step in steps:
        kind, *rest = step
        if kind == "text":
            events.append(
                {"type": "response.output_text.delta", "item_id": "msg_up", "output_index": 5, "delta": rest[0]}
            )
        elif kind == "added":
            k, custom, name, cid, ns = rest
            events.append(
                {"type": "response.output_item.added", "output_index": k, "item": _item(k, custom, name, cid, ns)}
            )
        elif kind == "delta":
            k, custom, iid, cid, d, oi = rest
            ev: dict = {"type": _CTC if custom else _FC}
            if iid is not None:
                ev["item_id"] = f"{'ctc' if custom else 'fc'}_{k}" if iid == "own" else iid
            if oi:
                ev["output_index"] = k
            if cid is not None:
                ev["call_id"] = "call_a" if cid == "own" else cid
            if d is not None:
                ev["delta"] = d
            if iid == "own" and d.__class__ is str:
                streamed.setdefault((k, custom), []).append(d)
            events.append(ev)
        elif kind == "done":
            k, custom, final = rest
            if final in ("=all", "=all+"):
                final = "".join(streamed.get((k, custom), [])) + ("}" if final == "=all+" else "")
            key = "input" if custom else "arguments"
            t = "response.custom_tool_call_input.done" if custom else "response.function_call_arguments.done"
            events.append({"type": t, "item_id": f"{'ctc' if custom else 'fc'}_{k}", "output_index": k, key: final})
        else:
            k, custom, name = rest
            item = _item(k, custom, name, None, False)
            if kind == "item_done_all":
                item["input" if custom else "arguments"] = "".join(streamed.get((k, custom), []))
            events.append({"type": "response.output_item.done", "output_index": k, "item": item})
    if ending != "cut":
        events.append({"type": f"response.{ending}", "response": dict(resp, status=ending)})
    return b"".join(b"event: " + str(e["type"]).encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_resp_step, max_size=14),
    st.sampled_from(["completed", "completed", "incomplete", "cut"]),
    st.lists(st.integers(1, 150), max_size=8),
    st.sampled_from(CLIENTS),
    st.booleans(),
    st.sampled_from(["none", "all"]),
)
def test_responses_upstream_same_as_the_decoders_feed(steps, ending, cuts, client, ws, tools):
    wire = _resp_wire(steps, ending)
    kw = {"ws": ws, "tools": tools, "quirks": frozenset()}
    assert _run(wire, cuts, True, client, "responses", **kw) == _run(wire, cuts, False, client, "responses", **kw)


# -- which deltas the writers take -----------------------------------------------------------


def test_a_live_calls_deltas_after_the_first_are_the_writers():
    """A Chat upstream's call: its opening (id and name) releases it the full way; then each
    argument chunk is the decoder's ``args`` and the encoder's writer, for either client."""
    steps = [("start", 0, "shell", "call_a", '{"c":'), *[("args", 0, a, "plain") for a in ('"l', "s", '"}')]]
    wire = _chat_wire(steps, "tool_calls")
    for client in ("responses", "chat"):
        kw = {"ws": False, "tools": "all", "quirks": frozenset()}
        enc = responses_encode.ResponsesStreamEncoder if client == "responses" else chat_encode.ChatStreamEncoder
        with spied(enc, "args_delta") as got:
            fast = _run(wire, [], True, client, "chat", **kw)
        assert fast == _run(wire, [], False, client, "chat", **kw)
        assert [(ev.arguments, w is not None) for ev, w in got] == [('"l', True), ("s", True), ('"}', True)]


def test_a_custom_or_wrapped_call_keeps_the_stages_way():
    """``apply_patch`` offered as a custom tool (a Responses client) or a one-string function
    with ``mimo_raw_patch`` (either client): its argument text is the stage's to buffer, so
    no delta goes to the writer; the answer is the full path's."""
    patch = ["*** Begin Patch\n", "*** Add File: a\n+x\n", "*** End Patch"]
    steps = [("start", 0, "apply_patch", "call_a", ""), *[("args", 0, p, "plain") for p in patch]]
    wire = _chat_wire(steps, "tool_calls")
    for client, tools in (("responses", "all"), ("responses", "wrap"), ("chat", "wrap")):
        kw = {"ws": False, "tools": tools, "quirks": frozenset({"mimo_raw_patch"})}
        enc = responses_encode.ResponsesStreamEncoder if client == "responses" else chat_encode.ChatStreamEncoder
        with spied(enc, "args_delta") as got:
            fast = _run(wire, [], True, client, "chat", **kw)
        assert fast == _run(wire, [], False, client, "chat", **kw)
        assert got == [], (client, tools)
        assert b"*** End Patch" in fast[0] and fast[1] == "completed"


def test_a_responses_upstreams_deltas():
    """Function and custom calls from a Responses upstream: once released by their added
    event, every delta is the writer's (a custom call's delta carries its call id)."""
    steps = [
        ("added", 0, False, "shell", "call_a", False),
        *[("delta", 0, False, "own", None, a, True) for a in ('{"c":', '"ls"}')],
        ("item_done", 0, False, "shell"),
        ("added", 1, True, "apply_patch", "call_b", False),
        *[("delta", 1, True, "own", None, a, True) for a in ("*** Begin", " Patch")],
    ]
    wire = _resp_wire(steps, "completed")
    kw = {"ws": False, "tools": "all", "quirks": frozenset()}
    with spied(responses_encode.ResponsesStreamEncoder, "args_delta") as got:
        fast = _run(wire, [], True, "responses", "responses", **kw)
    assert fast == _run(wire, [], False, "responses", "responses", **kw)
    assert [w is not None for _, w in got] == [True, True, True, True]
    assert b'"type":"response.custom_tool_call_input.delta","item_id":"ctc_1","call_id":"call_b"' in fast[0]


def _calls(*extras: str, ending: str = "tool_calls") -> bytes:
    """Two calls opened, then an argument chunk of the first with each of ``extras``."""
    steps: list[tuple] = [("start", 0, "shell", "call_a", "{"), ("start", 1, "other", "call_b", "{")]
    return _chat_wire(steps + [("args", 0, '"x"', e) for e in extras] + [("args", 0, "}", "plain")], ending)


def test_chunks_that_hold_more_than_argument_text():
    """A finish reason (the stream's, also when nothing follows), usage, a second call, an
    index that is not an integer (``true`` equals 1 as a key: not to the decoder), a name
    the call does not have yet: the full path, the same answer."""
    for extras, ending in (
        (("finish",), "cut"),
        (("finish",), "length"),
        (("usage",), "cut"),
        (("two_calls",), "tool_calls"),
        (("true_index", "float_index", "str_index"), "tool_calls"),
        (("other_id", "own_id", "name"), "tool_calls"),
    ):
        wire = _calls(*extras, ending=ending)
        for client in ("responses", "chat"):
            kw = {"ws": False, "tools": "none", "quirks": frozenset()}
            assert _run(wire, [], True, client, "chat", **kw) == _run(wire, [], False, client, "chat", **kw)
    # (the cut stream with a finish in an argument chunk still completes: the finish counted)
    assert (
        _run(_calls("finish", ending="cut"), [], True, "chat", "chat", ws=False, tools="none", quirks=frozenset())[1]
        == "completed"
    )


def test_text_the_decoder_holds_goes_first():
    """``inline_think`` holding a text that may open ``<think>``: an argument chunk then
    releases it first (the full path)."""
    steps = [("start", 0, "shell", "call_a", "{"), ("text", "<thi"), ("args", 0, "}", "plain")]
    wire = _chat_wire(steps, "tool_calls")
    for client in ("responses", "chat"):
        kw = {"ws": False, "tools": "none", "quirks": frozenset({"inline_think"})}
        fast = _run(wire, [], True, client, "chat", **kw)
        assert fast == _run(wire, [], False, client, "chat", **kw)
        assert b"<thi" in fast[0]


def test_an_upstream_call_id_after_a_minted_one():
    """A Responses upstream's call released without a call id (one is minted), a delta
    written from the format with it, then a delta that brings the upstream's id (the full
    path: the id replaces the minted one), then more: written with the upstream's id."""
    for custom in (False, True):
        steps = [
            ("added", 0, custom, "apply_patch" if custom else "shell", None, False),
            ("delta", 0, custom, "own", None, "a", True),
            ("delta", 0, custom, "own", "call_late", "b", True),
            ("delta", 0, custom, "own", None, "c", True),
        ]
        wire = _resp_wire(steps, "completed")
        for client in ("responses", "chat"):
            kw = {"ws": False, "tools": "all", "quirks": frozenset()}
            fast = _run(wire, [], True, client, "responses", **kw)
            assert fast == _run(wire, [], False, client, "responses", **kw)
            assert b"call_late" in fast[0]


def test_the_stage_hands_on_no_call_while_it_holds():
    """``plain_call``: a known plain call, nothing held (an invalid call waiting for the
    finish), the stage not done."""
    from transformers.events import Finish, ToolCall, ToolCallEnd
    from transformers.tool_stage import ToolStage

    ctx = Ctx(quirks=frozenset({"invalid_json_passthrough"}), upstream_model="m")
    stage = ToolStage(ctx, False)
    assert not stage.plain_call(0)  # unknown
    stage.feed(ToolCall(0, "{", "call_a", "f"))
    stage.feed(ToolCall(1, "{", "call_b", "g"))
    assert stage.plain_call(0) and stage.plain_call(1)
    stage.feed(ToolCallEnd(0, "{", "call_a", "f"))  # not JSON: held until the finish
    assert not stage.plain_call(1)
    assert stage.feed(ToolCall(1, "}")) == []  # (held too)
    stage.feed(Finish("completed"))
    assert not stage.plain_call(1)


@contextlib.contextmanager
def _taken() -> Iterator[list[tuple]]:
    """The ``(key, text, result)`` of each call of ``ChatStreamDecoder.args_to`` meanwhile."""
    calls: list[tuple] = []
    real = ChatStreamDecoder.args_to

    def spy(self: ChatStreamDecoder, key: tuple, a: str) -> object:
        r = real(self, key, a)
        calls.append((key, a, r))
        return r

    with mock.patch.object(ChatStreamDecoder, "args_to", spy):
        yield calls


def _lane_wire(*tail: tuple) -> bytes:
    return _chat_wire([("start", 0, "shell", "call_a", "{"), *tail], "tool_calls")


def _both(wire: bytes) -> tuple[bytes, str, list[str]]:
    """The answer with the lane and without, to either client: the same; the Responses one."""
    kw = {"ws": False, "tools": "none", "quirks": frozenset()}
    got = None
    for client in ("chat", "responses"):
        fast = _run(wire, [], True, client, "chat", **kw)
        assert fast == _run(wire, [], False, client, "chat", **kw), client
        got = fast
    return got  # type: ignore[return-value]


def test_the_lane_reads_the_argument_chunks_after_the_first():
    """The first argument chunk is parsed (the decoder's ``args``) and teaches the lane its
    template; the next ones are read off their bytes (``args`` is not asked again), escapes
    and all; a chunk of another shape (a name, another id) is parsed again."""
    wire = _lane_wire(*[("args", 0, a, "plain") for a in ('"a', '\\"b\\n', "é東", "}")])
    with spied(ChatStreamDecoder, "args") as parsed, _taken() as taken:
        _both(wire)
    # asked of the call's opening (no call yet), the first argument chunk, the finish chunk
    assert [r is not None for _, r in parsed] == [False, True, False] * 2
    assert [(k, r.arguments) for k, _, r in taken if r is not None][1:4] == [
        ((0, None, False), a) for a in ('\\"b\\n', "é東", "}")
    ]
    wire = _lane_wire(
        ("args", 0, "x", "plain"), ("args", 0, "y", "name"), ("args", 0, "z", "own_id"), ("args", 0, "w", "plain")
    )
    with spied(ChatStreamDecoder, "args") as parsed:
        _both(wire)
    assert [r.arguments for _, r in parsed if r is not None] == ["x", "y", "z"] * 2


def test_a_reused_index_is_the_new_calls():
    """An index the upstream reuses for a new call (a new id on it): the template's chunks
    after it add to the new call, as the decoder's ``_by_index`` says now; a template that
    names the call is not the new call's until that one has a name (the full path names it)."""
    wire = _lane_wire(
        ("args", 0, "a", "plain"),
        ("args", 0, "b", "plain"),
        ("start", 0, "other", "call_new", ""),
        ("args", 0, "c", "plain"),
        ("args", 0, "d", "plain"),
    )
    out = _both(wire)[0]
    assert b'"arguments":"{ab","name":"shell","call_id":"call_a"' in out
    assert b'"arguments":"cd","name":"other","call_id":"call_new"' in out
    named = _lane_wire(
        ("args", 0, "a", "name"),
        ("args", 0, "b", "name"),
        ("start", 0, None, "call_new", ""),
        ("args", 0, "c", "name"),
        ("args", 0, "d", "name"),
    )
    with _taken() as taken:
        _both(named)
    assert ((0, None, True), "c", None) in taken  # the lane's, declined: unnamed


def test_the_lane_learns_only_the_key_the_decoder_reads():
    """A template is learnt where the decoder reads the call's argument text, with the
    template's call as its key; not at another ``arguments`` key holding the same text while
    the one read is written with an escape (``\\/``, which orjson does not write)."""
    from transformers.chat_text_lane import ChatTextLane

    call = b'{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_a","function":{"arguments":%b}}]}}]%b}'
    lane = ChatTextLane("arguments")
    lane.learn(call % (b'"a/b"', b""), "a/b")
    assert lane.armed and lane.key == (1, "call_a", False)
    assert lane.text(call % (b'"x\\"y"', b"")) == 'x"y' and lane.text(call % (b'""', b"")) is None
    for other in (b',"x":{"arguments":"a/b"}', b',"function_call":{"arguments":"a/b"}'):
        data = call % (b'"a\\/b"', other)
        assert orjson.loads(data)["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] == "a/b"
        lane = ChatTextLane("arguments")
        lane.learn(data, "a/b")
        assert not lane.armed, other


def test_the_done_events_see_every_delta_the_short_path_took():
    """An upstream's done events carry the call's whole text (the deltas' own, or with a
    suffix they missed): the decoder compares it with every delta it gave, the short path's
    too, so nothing is repeated and a missed suffix is streamed once (``done_args_suffix``)."""
    for final, repairs in (("=all", []), ("=all+", ["done_args_suffix"])):
        steps = [
            ("added", 1, False, "shell", "call_a", False),
            *[("delta", 1, False, "own", None, a, True) for a in ('{"a"', ":1")],
            ("done", 1, False, final),
            ("item_done", 1, False, "shell"),
        ]
        wire = _resp_wire(steps, "completed")
        for client in ("responses", "chat"):
            kw = {"ws": False, "tools": "none", "quirks": frozenset()}
            with spied(ResponsesStreamDecoder, "args") as parsed:
                fast = _run(wire, [], True, client, "responses", **kw)
            assert fast == _run(wire, [], False, client, "responses", **kw)
            assert [r.arguments for _, r in parsed if r is not None] == ['{"a"', ":1"]
            assert fast[2] == repairs
