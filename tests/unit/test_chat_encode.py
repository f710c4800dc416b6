"""Unified events → Chat Completions client chunks / object (transformers.chat_encode).

The clients are kosong (kimi-cli) and the openai SDK.  Every emitted chunk is validated with
the SDK's ``ChatCompletionChunk`` model, and tool-call streams are reassembled with kosong's
rule (docs/rules.md §6): a delta with a non-empty ``function.name`` starts a NEW call, an
argument-only delta appends to the pending call, ``index`` is ignored, and text or
reasoning in between ends the pending call.  ``kosong_sim`` is that rule in a few lines;
``kosong_real`` runs the installed kosong package itself on the same chunks.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from transformers.chat_decode import ChatStreamDecoder
from transformers.chat_encode import ChatStreamEncoder, encode_chat_completion
from transformers.context import Ctx, flatten_name
from transformers.events import (
    Finish,
    Passthrough,
    Reasoning,
    ReasoningEnd,
    Refusal,
    Start,
    Text,
    ToolCall,
    ToolCallEnd,
    Usage,
)

CID, CREATED = "chatcmpl-up1", 1700000000
START = Start(CID, "up-model", CREATED)
USAGE = {
    "input_tokens": 10,
    "input_tokens_details": {"cached_tokens": 4},
    "output_tokens": 5,
    "output_tokens_details": {"reasoning_tokens": 2},
    "total_tokens": 15,
}


def ctx(**kw):
    kw.setdefault("public_model", "pub-model")
    return Ctx(**kw)


def enc(events, c=None, **kw):
    e = ChatStreamEncoder(c or ctx(), **kw)
    out = []
    for ev in events:
        out.extend(e.feed(ev))
    out.extend(e.end())
    assert e.end() == [] and e.feed(Text("late")) == []
    for chunk in out:
        if "error" not in chunk:
            ChatCompletionChunk.model_validate(chunk)
    return out, e


def head(i=CID, model="pub-model", created=CREATED):
    return {"id": i, "object": "chat.completion.chunk", "created": created, "model": model}


def chunk(delta, finish=None, **h):
    return {**head(**h), "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def role(**h):
    return chunk({"role": "assistant"}, **h)


def deltas(out):
    return [c["choices"][0]["delta"] for c in out if "choices" in c and c["choices"]]


def kosong_sim(chunks):
    """kosong's merge rule → (text, think, [[id, name, args], ...]); asserts no orphan deltas."""
    text, think, calls = [], [], []
    pending = None
    for c in chunks:
        assert "error" not in c
        if not c["choices"]:
            continue
        d = c["choices"][0]["delta"]
        if d.get("reasoning_content") is not None:
            think.append(d["reasoning_content"])
            pending = None
        if d.get("content"):
            text.append(d["content"])
            pending = None
        for tc in d.get("tool_calls") or ():
            fn = tc.get("function") or {}
            if fn.get("name"):
                pending = [tc.get("id"), fn["name"], fn.get("arguments") or ""]
                calls.append(pending)
            elif fn.get("arguments"):
                assert pending is not None, f"orphan argument delta {tc!r}"
                pending[2] += fn["arguments"]
    return "".join(text), "".join(think), calls


def kosong_real(chunks):
    """The installed kosong: KimiStreamedMessage + kosong.generate's merge loop."""
    from kosong import generate
    from kosong.chat_provider.kimi import KimiStreamedMessage
    from kosong.message import TextPart, ThinkPart

    parsed = [ChatCompletionChunk.model_validate(c) for c in chunks]

    async def agen():
        for p in parsed:
            yield p

    class Provider:
        async def generate(self, system_prompt, tools, history):
            return KimiStreamedMessage(agen())

    res = asyncio.run(generate(Provider(), "", [], []))
    msg = res.message
    text = "".join(p.text for p in msg.content if isinstance(p, TextPart))
    think = "".join(p.think for p in msg.content if isinstance(p, ThinkPart))
    calls = [[t.id, t.function.name, t.function.arguments or ""] for t in msg.tool_calls or []]
    return text, think, calls


# -- basics ----------------------------------------------------------------------------------


def test_text_reasoning_refusal_stream():
    out, e = enc([START, Reasoning("why"), Text("Hel"), Text("lo"), Refusal("no"), Finish()])
    assert out == [
        role(),
        chunk({"reasoning_content": "why"}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}),
        chunk({"refusal": "no"}),
        chunk({}, "stop"),
    ]
    assert not e.failed


@pytest.mark.parametrize(
    "start, kw, expect",
    [
        pytest.param(Start("chatcmpl-keep", "m", 1), {}, "chatcmpl-keep", id="upstream-chatcmpl-preserved"),
        pytest.param(Start("resp_123", "m", 1), {}, None, id="responses-id-minted"),
        pytest.param(Start(None, "m", 1), {}, None, id="none-minted"),
        pytest.param(Start("chatcmpl-keep", "m", 1), {"chunk_id": "chatcmpl-given"}, "chatcmpl-given", id="kwarg-wins"),
    ],
)
def test_ids(start, kw, expect):
    out, _ = enc([start, Text("a"), Finish()], **kw)
    ids = {c["id"] for c in out}
    assert len(ids) == 1
    (i,) = ids
    if expect is None:
        assert re.fullmatch(r"chatcmpl-[0-9a-f]{32}", i)
    else:
        assert i == expect


def test_model_and_created_fallbacks():
    out, _ = enc([Start("chatcmpl-x", "up", 42), Finish()], Ctx())
    assert {(c["model"], c["created"]) for c in out} == {("up", 42)}
    out, _ = enc([Start("chatcmpl-x", "up", 42), Finish()], ctx(), created=7)
    assert {(c["model"], c["created"]) for c in out} == {("pub-model", 7)}


def test_passthrough_and_reasoning_end_skipped():
    out, _ = enc(
        [
            START,
            Reasoning("r"),
            ReasoningEnd("rs_1", "enc"),
            Passthrough({"type": "web_search_call"}),
            Text("t"),
            Finish(),
        ]
    )
    assert out == [role(), chunk({"reasoning_content": "r"}), chunk({"content": "t"}), chunk({}, "stop")]


# -- finish_reason table and usage (docs/rules.md §7.2, §7.4, F2, F19) ---------------------------------


@pytest.mark.parametrize(
    "finish, with_call, reason",
    [
        pytest.param(Finish(), False, "stop", id="completed-stop"),
        pytest.param(Finish(), True, "tool_calls", id="completed-with-call-tool_calls"),
        pytest.param(Finish("incomplete", "max_output_tokens"), False, "length", id="incomplete-length"),
        pytest.param(Finish("incomplete", "max_output_tokens"), True, "length", id="incomplete-with-call-length"),
        pytest.param(Finish("incomplete", "content_filter"), False, "content_filter", id="content_filter"),
    ],
)
def test_finish_reason_table(finish, with_call, reason):
    calls = [ToolCall(0, "{}", "call_1", "f"), ToolCallEnd(0, "{}", "call_1", "f")] if with_call else [Text("x")]
    out, e = enc([START, *calls, finish])
    assert out[-1] == chunk({}, reason)
    assert not e.failed


def test_usage_chunk_after_finish():
    out, _ = enc([START, Text("x"), Usage(USAGE), Finish()], include_usage=True)
    assert out[-2:] == [
        chunk({}, "stop"),
        {
            **head(),
            "choices": [],
            "usage": {
                "prompt_tokens": 10,
                "completion_tokens": 5,
                "total_tokens": 15,
                "prompt_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 2},
            },
        },
    ]


def test_usage_chunk_zeros_when_upstream_sent_none():
    out, _ = enc([START, Text("x"), Finish()], include_usage=True)
    assert out[-1] == {
        **head(),
        "choices": [],
        "usage": {
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "total_tokens": 0,
            "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    }


def test_no_usage_chunk_unless_asked():
    out, _ = enc([START, Text("x"), Usage(USAGE), Finish()])
    assert out == [role(), chunk({"content": "x"}), chunk({}, "stop")]


# -- errors (docs/rules.md F1, F24) ----------------------------------------------------------------------


def test_failed_finish_is_error_chunk():
    err = {"code": "rate_limit_exceeded", "message": "slow down", "type": "rate_limit_error", "param": None}
    out, e = enc([START, Text("x"), Finish("failed", error=err)], include_usage=True)
    assert out == [
        role(),
        chunk({"content": "x"}),
        {"error": {"message": "slow down", "type": "rate_limit_error", "code": "rate_limit_exceeded", "param": None}},
    ]
    assert e.failed


def test_end_without_finish_is_truncation_error():
    out, e = enc([START, Text("x")])
    assert out[-1] == {
        "error": {
            "message": "upstream stream ended before completion",
            "type": "server_error",
            "code": "upstream_stream_truncated",
            "param": None,
        }
    }
    assert e.failed


def test_mismatch_is_error_chunk():
    out, e = enc(
        [
            START,
            ToolCall(0, '{"value":9007199254740992}', "call_7", "f"),
            ToolCallEnd(0, '{"value":9007199254740993}', "call_7", "f", mismatch=True),
            Finish(),
        ]
    )
    assert out == [
        role(),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_7",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"value":9007199254740992}'},
                    }
                ]
            }
        ),
        {
            "error": {
                "message": 'function call arguments mismatch for call_id "call_7"',
                "type": "server_error",
                "code": "tool_arguments_mismatch",
                "param": None,
            }
        },
    ]
    assert e.failed


def test_failure_flushes_queued_text_but_not_unfinished_calls():
    out, e = enc(
        [START, ToolCall(0, "{", None, None), Text("t"), Finish("failed", error={"code": "x", "message": "m"})]
    )
    assert out == [
        role(),
        chunk({"content": "t"}),
        {"error": {"message": "m", "type": "server_error", "code": "x", "param": None}},
    ]


# -- tool calls toward kosong (docs/rules.md §3 Chat-client rule, §6, §7.4, F4) ---------------------


def test_T2_8_no_delta_before_name():
    out, _ = enc(
        [
            START,
            ToolCall(0, '{"a":'),
            ToolCall(0, "", "call_9", "read_file"),
            ToolCall(0, "1}"),
            ToolCallEnd(0, '{"a":1}', "call_9", "read_file"),
            Finish(),
        ]
    )
    assert out == [
        role(),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_9",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"a":'},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        chunk({}, "tool_calls"),
    ]


def test_two_parallel_interleaved_calls_are_contiguous():
    events = [
        START,
        ToolCall(0, '{"p":', "call_a", "a"),
        ToolCall(1, '{"q":', "call_b", "b"),
        ToolCall(0, "1"),
        ToolCall(1, "2"),
        ToolCall(0, "}"),
        ToolCall(1, "}"),
        ToolCallEnd(0, '{"p":1}', "call_a", "a"),
        ToolCallEnd(1, '{"q":2}', "call_b", "b"),
        Finish(),
    ]
    out, _ = enc(events)
    assert out == [
        role(),
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "call_a", "type": "function", "function": {"name": "a", "arguments": '{"p":'}}
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}),
        chunk(
            {
                "tool_calls": [
                    {"index": 1, "id": "call_b", "type": "function", "function": {"name": "b", "arguments": '{"q":2}'}}
                ]
            }
        ),
        chunk({}, "tool_calls"),
    ]
    expected = ("", "", [["call_a", "a", '{"p":1}'], ["call_b", "b", '{"q":2}']])
    assert kosong_sim(out) == expected
    assert kosong_real(out) == expected


def test_T2_9_late_name_of_first_call_keeps_client_order():
    out, _ = enc(
        [
            START,
            ToolCall(0, '{"p":'),
            ToolCall(1, '{"q":2}', "call_b", "b"),
            ToolCallEnd(1, '{"q":2}', "call_b", "b"),  # index 1 complete, index 0 still unnamed
            ToolCall(0, "", "call_a", "a"),
            ToolCall(0, "1}"),
            ToolCallEnd(0, '{"p":1}', "call_a", "a"),
            Finish(),
        ]
    )
    assert out == [
        role(),
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "call_a", "type": "function", "function": {"name": "a", "arguments": '{"p":'}}
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        chunk(
            {
                "tool_calls": [
                    {"index": 1, "id": "call_b", "type": "function", "function": {"name": "b", "arguments": '{"q":2}'}}
                ]
            }
        ),
        chunk({}, "tool_calls"),
    ]


def test_text_after_call_start_waits_until_calls_end():
    out, _ = enc(
        [
            START,
            Text("a"),
            ToolCall(0, "{", "call_1", "f"),
            Text("b"),
            Reasoning("r"),
            Text("c"),
            ToolCall(0, "}"),
            ToolCallEnd(0, "{}", "call_1", "f"),
            Text("d"),
            Finish(),
        ]
    )
    assert out == [
        role(),
        chunk({"content": "a"}),
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{"}}
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}),
        chunk({"content": "b"}),
        chunk({"reasoning_content": "r"}),
        chunk({"content": "c"}),
        chunk({"content": "d"}),
        chunk({}, "tool_calls"),
    ]
    assert kosong_real(out) == ("abcd", "r", [["call_1", "f", "{}"]])


def test_queued_adjacent_text_is_merged():
    out, _ = enc(
        [
            START,
            ToolCall(0, "", None, None),
            Text("x"),
            Text("y"),
            ToolCall(0, "{}", "c", "f"),
            ToolCallEnd(0, "{}", "c", "f"),
            Finish(),
        ]
    )
    assert deltas(out)[2:] == [{"content": "xy"}, {}]


def test_call_id_minted_when_missing():
    out, _ = enc([START, ToolCall(0, "{}", None, "f"), ToolCallEnd(0, "{}", None, "f"), Finish()])
    tc = out[1]["choices"][0]["delta"]["tool_calls"][0]
    assert re.fullmatch(r"call_[0-9a-f]{32}", tc["id"])


def test_late_id_is_waited_for_not_minted():
    e = ChatStreamEncoder(ctx())
    assert e.feed(START) == [role()]
    assert e.feed(ToolCall(0, '{"a":', None, "f")) == []  # named, but the id may still come
    assert e.feed(ToolCall(0, "1", "call_late")) == [
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_late",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"a":1'},
                    }
                ]
            }
        )
    ]
    assert e.feed(ToolCall(0, "}")) == [chunk({"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]})]
    assert e.feed(ToolCallEnd(0, '{"a":1}', "call_late", "f")) == []
    assert e.feed(Finish()) == [chunk({}, "tool_calls")]
    assert e.end() == [] and not e.failed


def test_namespace_flattened():
    long_ns = "mcp__" + "x" * 70 + "__"
    out, _ = enc(
        [
            START,
            ToolCall(0, "{}", "call_1", "get_me", namespace="mcp__gh__"),
            ToolCallEnd(0, "{}"),
            ToolCall(1, "{}", "call_2", "spawn_agent", namespace="collaboration"),
            ToolCallEnd(1, "{}"),
            ToolCall(2, "{}", "call_3", "t", namespace=long_ns),
            ToolCallEnd(2, "{}"),
            Finish(),
        ]
    )
    names = [d["tool_calls"][0]["function"]["name"] for d in deltas(out) if "tool_calls" in d]
    assert names == ["mcp__gh__get_me", "collaboration__spawn_agent", flatten_name(long_ns, "t")]
    assert len(names[2]) == 64


def test_identity_only_in_end_event():
    out, _ = enc(
        [START, ToolCall(0, '{"task":"x"}'), ToolCallEnd(0, '{"task":"x"}', "call_L", "spawn_agent"), Finish()]
    )
    assert out[1] == chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_L",
                    "type": "function",
                    "function": {"name": "spawn_agent", "arguments": '{"task":"x"}'},
                }
            ]
        }
    )


def test_unnamed_call_dropped_others_kept():
    c = ctx()
    out, e = enc(
        [
            START,
            ToolCall(0, '{"x":1}', "call_0"),
            ToolCall(1, "{}", "call_1", "f"),
            ToolCallEnd(0, '{"x":1}', "call_0"),
            ToolCallEnd(1, "{}", "call_1", "f"),
            Finish(),
        ],
        c,
    )
    assert kosong_sim(out) == ("", "", [["call_1", "f", "{}"]])
    assert out[1]["choices"][0]["delta"]["tool_calls"][0]["index"] == 0
    assert c.repairs == ["tool_call_unnamed_dropped"] and not e.failed


def test_only_unnamed_calls_fail_the_turn():
    out, e = enc([START, ToolCall(0, '{"x":1}', "call_0"), ToolCallEnd(0, '{"x":1}', "call_0"), Finish()])
    assert out[-1]["error"]["code"] == "upstream_tool_call_dropped" and e.failed


# property: any interleaving of N calls (late identity, arbitrary splits, text in between)
@st.composite
def event_streams(draw):
    n = draw(st.integers(1, 4))
    per_call, originals = [], []
    for i in range(n):
        args = draw(st.text(max_size=30))
        cuts = sorted(draw(st.lists(st.integers(0, len(args)), max_size=4)))
        pieces = [args[a:b] for a, b in zip([0, *cuts], [*cuts, len(args)], strict=True)]
        evs = [ToolCall(i, p) for p in pieces]
        name_at = draw(st.integers(0, len(evs)))
        id_at = draw(st.integers(0, len(evs) + 1))
        ns = draw(st.sampled_from([None, "ns_"]))
        evs.insert(name_at, ToolCall(i, "", None, f"fn{i}", namespace=ns))
        evs.insert(id_at, ToolCall(i, "", f"call_{i}"))
        evs.append(ToolCallEnd(i, args, f"call_{i}", f"fn{i}", namespace=ns))
        per_call.append(evs)
        originals.append([f"call_{i}", f"ns_fn{i}" if ns else f"fn{i}", args])
    queues = per_call
    order, started = [], 0
    texts = []
    while any(queues):
        cands = [i for i in range(started) if queues[i]] + ([started] if started < n else [])
        i = draw(st.sampled_from(cands))
        started += i == started
        order.append(queues[i].pop(0))
        if draw(st.integers(0, 5)) == 0:
            t = draw(st.text(min_size=1, max_size=5))
            texts.append(t)
            order.append(Text(t))
    return [START, *order, Finish()], originals, "".join(texts)


def _check_tool_deltas(out):
    for d in deltas(out):
        for tc in d.get("tool_calls", ()):
            if "id" in tc:  # announcement: everything at once, name known
                assert tc["type"] == "function" and tc["function"]["name"]
            else:  # continuation: arguments only
                assert set(tc) == {"index", "function"} and set(tc["function"]) == {"arguments"}
                assert tc["function"]["arguments"]


@settings(max_examples=400, deadline=None)
@given(event_streams())
def test_kosong_reassembles_any_interleaving(data):
    events, originals, text = data
    out, e = enc(events)
    assert not e.failed
    _check_tool_deltas(out)
    assert kosong_sim(out) == (text, "", originals)
    # client indices are 0, 1, 2… in emission order, and each id is announced once
    ann = [tc for d in deltas(out) for tc in d.get("tool_calls", ()) if "id" in tc]
    assert [tc["index"] for tc in ann] == list(range(len(originals)))


@settings(max_examples=25, deadline=None)
@given(event_streams())
def test_real_kosong_reassembles_any_interleaving(data):
    events, originals, text = data
    out, _ = enc(events)
    assert kosong_real(out) == (text, "", originals)


# same protocol end to end: Chat upstream chunks → decoder → encoder → kosong
@st.composite
def upstream_chunks(draw):
    n = draw(st.integers(1, 3))
    queues, originals = [], []
    for i in range(n):
        args = draw(st.text(max_size=20))
        cuts = sorted(draw(st.lists(st.integers(0, len(args)), max_size=3)))
        pieces = [args[a:b] for a, b in zip([0, *cuts], [*cuts, len(args)], strict=True)]
        ds = [{"index": i, "function": {"arguments": p}} for p in pieces]
        ds.insert(
            draw(st.integers(0, len(ds))),
            {"index": i, "id": f"call_{i}", "type": "function", "function": {"name": f"fn{i}"}},
        )
        queues.append(ds)
        originals.append([f"call_{i}", f"fn{i}", args])
    order, started = [], 0
    while any(queues):
        cands = [i for i in range(started) if queues[i]] + ([started] if started < n else [])
        i = draw(st.sampled_from(cands))
        started += i == started
        order.append(queues[i].pop(0))
    chunks = [
        {
            "id": "chatcmpl-u",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": {"tool_calls": [d]}, "finish_reason": None}],
        }
        for d in order
    ]
    chunks.append(
        {
            "id": "chatcmpl-u",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
        }
    )
    return chunks, originals


@settings(max_examples=200, deadline=None)
@given(upstream_chunks())
def test_chat_to_chat_round_trip(data):
    chunks, originals = data
    c = ctx()
    d = ChatStreamDecoder(c)
    events = [ev for ch in chunks for ev in d.feed(ch)] + d.end()
    out, e = enc(events, c)
    assert {o["id"] for o in out} == {"chatcmpl-u"}
    assert kosong_sim(out) == ("", "", originals)
    assert out[-1]["choices"][0]["finish_reason"] == "tool_calls"


# -- non-stream --------------------------------------------------------------------------------


def test_nonstream_object():
    obj = encode_chat_completion(
        [
            START,
            Reasoning("why"),
            Text("ok"),
            ToolCall(0, '{"x":', "call_1", "a"),
            ToolCall(1, "{}", "call_2", "get_me", namespace="mcp__gh__"),
            ToolCall(0, "1}"),
            ToolCallEnd(0, '{"x":1}', "call_1", "a"),
            ToolCallEnd(1, "{}", "call_2", "get_me", namespace="mcp__gh__"),
            Usage(USAGE),
            Finish(),
        ],
        ctx(),
    )
    assert obj == {
        "id": CID,
        "object": "chat.completion",
        "created": CREATED,
        "model": "pub-model",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "ok",
                    "refusal": None,
                    "annotations": [],
                    "reasoning_content": "why",
                    "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "a", "arguments": '{"x":1}'}},
                        {
                            "id": "call_2",
                            "type": "function",
                            "function": {"name": "mcp__gh__get_me", "arguments": "{}"},
                        },
                    ],
                },
                "finish_reason": "tool_calls",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "total_tokens": 15,
            "prompt_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 2},
        },
    }
    ChatCompletion.model_validate(obj)


@pytest.mark.parametrize(
    "events, finish_reason, message",
    [
        pytest.param(
            [Text("a"), Text("b"), Finish()],
            "stop",
            {"role": "assistant", "content": "ab", "refusal": None, "annotations": []},
            id="stop",
        ),
        pytest.param(
            [Refusal("no"), Finish("incomplete", "content_filter")],
            "content_filter",
            {"role": "assistant", "content": None, "refusal": "no", "annotations": []},
            id="refusal-content_filter",
        ),
        pytest.param(
            [Text("a"), Finish("incomplete", "max_output_tokens")],
            "length",
            {"role": "assistant", "content": "a", "refusal": None, "annotations": []},
            id="length",
        ),
    ],
)
def test_nonstream_finish_table(events, finish_reason, message):
    obj = encode_chat_completion([START, *events], ctx(), completion_id="chatcmpl-z", created=9)
    ChatCompletion.model_validate(obj)
    assert (obj["id"], obj["created"]) == ("chatcmpl-z", 9)
    assert obj["choices"][0]["finish_reason"] == finish_reason
    assert obj["choices"][0]["message"] == message
    assert obj["usage"]["total_tokens"] == 0


@pytest.mark.parametrize(
    "events, code",
    [
        pytest.param(
            [Text("a"), Finish("failed", error={"code": "server_error", "message": "m"})], "server_error", id="failed"
        ),
        pytest.param(
            [ToolCall(0, "{", "c", "f"), ToolCallEnd(0, "}", "c", "f", mismatch=True), Finish()],
            "tool_arguments_mismatch",
            id="mismatch",
        ),
        pytest.param([Text("a")], "upstream_stream_truncated", id="no-finish"),
        pytest.param(
            [ToolCall(0, "{}", "c"), ToolCallEnd(0, "{}", "c"), Finish()],
            "upstream_tool_call_dropped",
            id="unnamed-only",
        ),
    ],
)
def test_nonstream_errors(events, code):
    obj = encode_chat_completion([START, *events], ctx())
    assert set(obj) == {"error"}
    assert obj["error"]["code"] == code
    assert set(obj["error"]) == {"message", "type", "code", "param"}


def test_nonstream_minted_ids():
    obj = encode_chat_completion(
        [Start("resp_1", "m", 1), ToolCall(0, "{}", None, "f"), ToolCallEnd(0, "{}"), Finish()], ctx()
    )
    ChatCompletion.model_validate(obj)
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{32}", obj["id"])
    assert re.fullmatch(r"call_[0-9a-f]{32}", obj["choices"][0]["message"]["tool_calls"][0]["id"])
