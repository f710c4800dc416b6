"""Chat Completions upstream chunks / objects → unified events (transformers.chat_decode)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformers.chat_decode import ChatStreamDecoder, decode_chat_completion
from transformers.context import Ctx
from transformers.events import (
    Finish,
    Reasoning,
    Refusal,
    Start,
    Text,
    ToolCall,
    ToolCallEnd,
    Usage,
)
from transformers.usage import from_chat

ID, MODEL, CREATED = "chatcmpl-1", "up-model", 1700000000
START = Start(ID, MODEL, CREATED)
TRUNCATED = Finish(
    status="failed",
    error={
        "code": "upstream_stream_truncated",
        "message": "upstream stream ended without a finish_reason",
        "type": "server_error",
        "param": None,
    },
)


def ch(delta=None, finish=None, **top):
    """One upstream chunk with choices[0] = {delta, finish_reason}."""
    c = {"id": ID, "object": "chat.completion.chunk", "created": CREATED, "model": MODEL}
    c["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    c.update(top)
    return c


def tc(**kw):
    return ch({"tool_calls": [kw]})


def run(chunks, quirks=()):
    ctx = Ctx(quirks=frozenset(quirks))
    d = ChatStreamDecoder(ctx)
    out = []
    for c in chunks:
        out.extend(d.feed(c))
    out.extend(d.end())
    assert d.end() == []  # idempotent
    return out


# -- text, reasoning, refusal ----------------------------------------------------------------


def test_text_stream():
    evs = run([ch({"role": "assistant", "content": ""}), ch({"content": "Hel"}), ch({"content": "lo"}), ch({}, "stop")])
    assert evs == [START, Text("Hel"), Text("lo"), Finish()]


@pytest.mark.parametrize(
    "delta, text",
    [
        pytest.param({"reasoning_content": "r1"}, "r1", id="reasoning_content"),
        pytest.param({"reasoning": "r2"}, "r2", id="reasoning-vllm"),
        pytest.param(
            {
                "reasoning_details": [
                    {"type": "reasoning.text", "text": "r3"},
                    {"type": "reasoning.encrypted", "data": "x"},
                ]
            },
            "r3",
            id="reasoning_details",
        ),
        pytest.param({"reasoning_content": "dup", "reasoning": "dup"}, "dup", id="duplicated-keys-once"),
        pytest.param({"reasoning_content": None, "reasoning": "r4"}, "r4", id="null-reasoning_content"),
    ],
)
def test_reasoning_keys(delta, text):
    assert run([ch(delta), ch({}, "stop")]) == [START, Reasoning(text), Finish()]


def test_reasoning_then_text_then_refusal_order():
    evs = run([ch({"reasoning_content": "think", "content": "a"}), ch({"refusal": "no"}), ch({}, "stop")])
    assert evs == [START, Reasoning("think"), Text("a"), Refusal("no"), Finish()]


def test_empty_strings_and_nulls_emit_nothing():
    evs = run([ch({"content": None, "reasoning_content": ""}), ch({"content": "", "tool_calls": None}), ch({}, "stop")])
    assert evs == [START, Finish()]


# -- finish_reason table (docs/rules.md §7.2) -----------------------------------------------------------


@pytest.mark.parametrize(
    "fr, finish",
    [
        pytest.param("stop", Finish(), id="stop-completed"),
        pytest.param("tool_calls", Finish(), id="tool_calls-completed"),
        pytest.param("function_call", Finish(), id="function_call-completed"),
        pytest.param("length", Finish("incomplete", "max_output_tokens"), id="length-incomplete"),
        pytest.param("content_filter", Finish("incomplete", "content_filter"), id="content_filter-incomplete"),
        pytest.param("eos", Finish(), id="unknown-completed"),
    ],
)
def test_finish_table(fr, finish):
    assert run([ch({"content": "x"}), ch({}, fr)]) == [START, Text("x"), finish]


def test_truncated_stream_fails_F1():
    assert run([ch({"content": "x"})]) == [START, Text("x"), TRUNCATED]


def test_truncated_stream_does_not_close_open_calls():
    evs = run([tc(index=0, id="call_1", function={"name": "f", "arguments": '{"a"'})])
    assert evs == [START, ToolCall(0, '{"a"', "call_1", "f"), TRUNCATED]


def test_no_chunk_at_all():
    assert run([]) == [Start(), TRUNCATED]


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "err, expected",
    [
        pytest.param(
            {"message": "Rate limit", "type": "rate_limit_error", "code": "rate_limit_exceeded"},
            {"code": "rate_limit_exceeded", "message": "Rate limit", "type": "rate_limit_error", "param": None},
            id="openai-shape",
        ),
        pytest.param(
            {"message": "boom", "code": 500},
            {"code": "500", "message": "boom", "type": "server_error", "param": None},
            id="int-code",
        ),
        pytest.param(
            {"message": "ctx", "type": "invalid_request_error", "param": "messages"},
            {"code": "invalid_request_error", "message": "ctx", "type": "invalid_request_error", "param": "messages"},
            id="no-code",
        ),
        pytest.param(
            "overloaded",
            {"code": "upstream_error", "message": "overloaded", "type": "server_error", "param": None},
            id="bare-string",
        ),
    ],
)
def test_error_chunk(err, expected):
    ctx = Ctx()
    d = ChatStreamDecoder(ctx)
    out = d.feed(ch({"content": "a"}, usage={"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}))
    out += d.feed({"error": err})
    assert out == [
        START,
        Text("a"),
        Usage(from_chat({"prompt_tokens": 3, "completion_tokens": 1})),
        Finish("failed", error=expected),
    ]
    assert d.feed(ch({"content": "late"}, "stop")) == []
    assert d.end() == []


def test_error_as_first_chunk():
    evs = run([{"error": {"message": "m", "code": "server_error"}}])
    assert evs == [
        Start(),
        Finish("failed", error={"code": "server_error", "message": "m", "type": "server_error", "param": None}),
    ]


# -- usage (docs/rules.md §6, §7.2 usage table, F19) -----------------------------------------------


def test_usage_after_finish_chunk_with_empty_choices():
    u = {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 4},
        "completion_tokens_details": {"reasoning_tokens": 2},
    }
    evs = run(
        [
            ch({"content": "x"}),
            ch({}, "stop"),
            {
                "id": ID,
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": MODEL,
                "choices": [],
                "usage": u,
            },
        ]
    )
    assert evs == [
        START,
        Text("x"),
        Usage(
            {
                "input_tokens": 10,
                "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 2},
                "total_tokens": 15,
            }
        ),
        Finish(),
    ]


def test_usage_moonshot_choice_usage_cached_tokens():
    chunk = ch({}, "stop")
    chunk["choices"][0]["usage"] = {
        "prompt_tokens": 100,
        "completion_tokens": 7,
        "total_tokens": 107,
        "cached_tokens": 64,
    }
    evs = run([ch({"content": "x"}), chunk])
    assert evs == [
        START,
        Text("x"),
        Usage(
            {
                "input_tokens": 100,
                "input_tokens_details": {"cached_tokens": 64, "cache_write_tokens": 0},
                "output_tokens": 7,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 107,
            }
        ),
        Finish(),
    ]


def test_usage_deepseek_prompt_cache_hit_tokens():
    u = {
        "prompt_tokens": 50,
        "completion_tokens": 9,
        "total_tokens": 59,
        "prompt_cache_hit_tokens": 32,
        "prompt_cache_miss_tokens": 18,
    }
    evs = run([ch({"content": "x"}), ch({}, "stop", usage=u)])
    assert evs[-2] == Usage(
        {
            "input_tokens": 50,
            "input_tokens_details": {"cached_tokens": 32, "cache_write_tokens": 0},
            "output_tokens": 9,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 59,
        }
    )


def test_usage_null_on_every_chunk_is_ignored():
    evs = run([ch({"content": "x"}, usage=None), ch({}, "stop", usage=None)])
    assert evs == [START, Text("x"), Finish()]


# -- tool calls (docs/rules.md §3, T2-8, T2-9, F4) ---------------------------------------------------


def test_T2_8_args_before_identity():
    evs = run(
        [
            tc(index=0, function={"arguments": '{"a":'}),
            tc(index=0, id="call_9", function={"name": "read_file"}),
            tc(index=0, function={"arguments": "1}"}),
            ch({}, "tool_calls"),
        ]
    )
    assert evs == [
        START,
        ToolCall(0, '{"a":'),
        ToolCall(0, "", "call_9", "read_file"),
        ToolCall(0, "1}"),
        ToolCallEnd(0, '{"a":1}', "call_9", "read_file"),
        Finish(),
    ]


def test_T2_9_parallel_late_name_keeps_order():
    evs = run(
        [
            tc(index=0, function={"arguments": '{"p":'}),
            tc(index=1, id="call_b", type="function", function={"name": "b", "arguments": '{"q":'}),
            tc(index=1, function={"arguments": "2}"}),
            tc(index=0, id="call_a", function={"name": "a"}),
            tc(index=0, function={"arguments": "1}"}),
            ch({}, "tool_calls"),
        ]
    )
    assert evs == [
        START,
        ToolCall(0, '{"p":'),
        ToolCall(1, '{"q":', "call_b", "b"),
        ToolCall(1, "2}"),
        ToolCall(0, "", "call_a", "a"),
        ToolCall(0, "1}"),
        ToolCallEnd(0, '{"p":1}', "call_a", "a"),
        ToolCallEnd(1, '{"q":2}', "call_b", "b"),
        Finish(),
    ]


def test_identity_repeated_on_every_delta_is_passed_once():
    evs = run(
        [
            tc(index=0, id="call_1", type="function", function={"name": "f", "arguments": ""}),
            tc(index=0, id="call_1", type="function", function={"name": "f", "arguments": "{}"}),
            ch({}, "tool_calls"),
        ]
    )
    assert evs == [
        START,
        ToolCall(0, "", "call_1", "f"),
        ToolCall(0, "{}"),
        ToolCallEnd(0, "{}", "call_1", "f"),
        Finish(),
    ]


def test_chunks_without_index():
    evs = run(
        [
            tc(id="call_1", function={"name": "a", "arguments": ""}),
            tc(function={"arguments": '{"x":1}'}),  # continues the last call
            tc(id="call_2", function={"name": "b", "arguments": "{"}),  # new unseen id → new call
            tc(function={"arguments": "}"}),
            tc(id="call_1", function={"arguments": ""}),  # known id: call 0, nothing new
            ch({}, "tool_calls"),
        ]
    )
    assert evs == [
        START,
        ToolCall(0, "", "call_1", "a"),
        ToolCall(0, '{"x":1}'),
        ToolCall(1, "{", "call_2", "b"),
        ToolCall(1, "}"),
        ToolCallEnd(0, '{"x":1}', "call_1", "a"),
        ToolCallEnd(1, "{}", "call_2", "b"),
        Finish(),
    ]


def test_collapsed_index_with_distinct_ids_F4():
    ctx = Ctx()
    d = ChatStreamDecoder(ctx)
    evs = []
    for c in [
        tc(index=0, id="call_1", function={"name": "a", "arguments": '{"n":1}'}),
        tc(index=0, id="call_2", function={"name": "b", "arguments": '{"n":'}),
        tc(index=0, function={"arguments": "2}"}),
        ch({}, "tool_calls"),
    ]:
        evs += d.feed(c)
    evs += d.end()
    assert evs == [
        START,
        ToolCall(0, '{"n":1}', "call_1", "a"),
        ToolCall(1, '{"n":', "call_2", "b"),
        ToolCall(1, "2}"),
        ToolCallEnd(0, '{"n":1}', "call_1", "a"),
        ToolCallEnd(1, '{"n":2}', "call_2", "b"),
        Finish(),
    ]
    assert ctx.repairs == ["chat_tool_index_reused"]


def test_sparse_upstream_indices_become_ordinals():
    evs = run(
        [
            tc(index=3, id="c3", function={"name": "x", "arguments": "{}"}),
            tc(index=1, id="c1", function={"name": "y", "arguments": "[]"}),
            ch({}, "tool_calls"),
        ]
    )
    assert evs[1:3] == [ToolCall(0, "{}", "c3", "x"), ToolCall(1, "[]", "c1", "y")]
    assert evs[3:5] == [ToolCallEnd(0, "{}", "c3", "x"), ToolCallEnd(1, "[]", "c1", "y")]


def test_legacy_function_call_stream():
    ctx = Ctx()
    d = ChatStreamDecoder(ctx)
    evs = []
    for c in [
        ch({"function_call": {"name": "f", "arguments": ""}}),
        ch({"function_call": {"arguments": '{"a":1}'}}),
        ch({}, "function_call"),
    ]:
        evs += d.feed(c)
    evs += d.end()
    assert evs == [
        START,
        ToolCall(0, "", None, "f"),
        ToolCall(0, '{"a":1}'),
        ToolCallEnd(0, '{"a":1}', None, "f"),
        Finish(),
    ]
    assert ctx.repairs == ["chat_legacy_function_call"]


def test_text_between_tool_deltas_is_kept_in_order():
    evs = run(
        [
            tc(index=0, id="c", function={"name": "f", "arguments": "{"}),
            ch({"content": "hm"}),
            tc(index=0, function={"arguments": "}"}),
            ch({}, "tool_calls"),
        ]
    )
    assert evs == [
        START,
        ToolCall(0, "{", "c", "f"),
        Text("hm"),
        ToolCall(0, "}"),
        ToolCallEnd(0, "{}", "c", "f"),
        Finish(),
    ]


# nothing lost: any interleaving and split of parallel calls reassembles byte for byte
@st.composite
def parallel_calls(draw):
    n = draw(st.integers(1, 4))
    calls = []
    for i in range(n):
        args = draw(st.text(min_size=0, max_size=40))
        cuts = sorted(draw(st.lists(st.integers(0, len(args)), max_size=5)))
        pieces = [args[a:b] for a, b in zip([0, *cuts], [*cuts, len(args)], strict=True)]
        name_at = draw(st.integers(0, len(pieces)))  # identity may come late
        deltas = [{"index": i, "function": {"arguments": p}} for p in pieces]
        deltas.insert(name_at, {"index": i, "id": f"call_{i}", "function": {"name": f"fn{i}"}})
        calls.append((args, deltas))
    # interleave, keeping each call's own order; the first delta of call i precedes call i+1's
    queues = [list(d) for _, d in calls]
    order = []
    started = 0
    while any(queues):
        choices = [i for i in range(started) if queues[i]]
        if started < n:
            choices.append(started)
        i = draw(st.sampled_from(choices))
        if i == started:
            started += 1
        order.append(queues[i].pop(0))
    return [a for a, _ in calls], order


@settings(max_examples=300, deadline=None)
@given(parallel_calls())
def test_nothing_lost_parallel_calls(data):
    originals, deltas = data
    evs = run([tc(**d) for d in deltas] + [ch({}, "tool_calls")])
    ends = [e for e in evs if isinstance(e, ToolCallEnd)]
    assert [e.arguments for e in ends] == originals
    assert [(e.call_id, e.name) for e in ends] == [(f"call_{i}", f"fn{i}") for i in range(len(originals))]
    for i, orig in enumerate(originals):
        assert "".join(e.arguments for e in evs if isinstance(e, ToolCall) and e.index == i) == orig
        ids = [e.call_id for e in evs if isinstance(e, ToolCall) and e.index == i and e.call_id]
        assert ids == [f"call_{i}"]


# -- inline <think> (docs/rules.md §7.2, quirk inline_think) -------------------------------------------


def _merge(evs):
    """Collapse adjacent Text/Reasoning events (the split points are not part of the contract)."""
    out = []
    for e in evs:
        if out and type(e) is type(out[-1]) and isinstance(e, (Text, Reasoning)):
            out[-1] = type(e)(out[-1].text + e.text)
        else:
            out.append(e)
    return out


@pytest.mark.parametrize(
    "pieces",
    [
        pytest.param(["<think>abc</think>\nhi"], id="whole"),
        pytest.param(["<thi", "nk>ab", "c</th", "ink>\nhi"], id="tags-split"),
        pytest.param(["<", "t", "h", "i", "n", "k", ">", "abc", "<", "/", "think", ">", "\nhi"], id="byte-by-byte"),
        pytest.param(["<think>", "abc", "</think>", "\nhi"], id="tags-alone"),
        pytest.param(["<think>abc<", "/think>\nh", "i"], id="close-split-after-lt"),
    ],
)
def test_inline_think_split(pieces):
    chunks = [ch({"content": p}) for p in pieces] + [ch({}, "stop")]
    assert _merge(run(chunks, {"inline_think"})) == [START, Reasoning("abc"), Text("\nhi"), Finish()]
    # quirk off: content is content
    assert _merge(run(chunks)) == [START, Text("<think>abc</think>\nhi"), Finish()]


def test_inline_think_exact_events():
    ctx = Ctx(quirks=frozenset({"inline_think"}))
    d = ChatStreamDecoder(ctx)
    assert d.feed(ch({"content": "<thi"})) == [START]
    assert d.feed(ch({"content": "nk>ab"})) == [Reasoning("ab")]
    assert d.feed(ch({"content": "c</th"})) == [Reasoning("c")]
    assert d.feed(ch({"content": "ink>\nhi"})) == [Text("\nhi")]
    assert d.feed(ch({"content": "<think>x</think>"})) == [Text("<think>x</think>")]  # only at the start
    assert ctx.repairs == ["inline_think"]


@pytest.mark.parametrize(
    "pieces, expected",
    [
        pytest.param(["<the", "me>"], [Text("<the"), Text("me>")], id="not-a-think-tag"),
        pytest.param(["<thi"], [Text("<thi")], id="held-prefix-flushed-at-end"),
        pytest.param(["<think>ab", "c</thi"], [Reasoning("ab"), Reasoning("c"), Reasoning("</thi")], id="unterminated"),
        pytest.param([" <think>a</think>"], [Text(" <think>a</think>")], id="not-at-very-start"),
        pytest.param(["<think></think>x"], [Text("x")], id="empty-think"),
        pytest.param(["<think>a<b</think>"], [Reasoning("a<b")], id="lt-inside"),
    ],
)
def test_inline_think_edges(pieces, expected):
    chunks = [ch({"content": p}) for p in pieces] + [ch({}, "stop")]
    assert run(chunks, {"inline_think"}) == [START, *expected, Finish()]


def test_inline_think_held_bytes_flushed_before_tool_call():
    evs = run(
        [ch({"content": "<thi"}), tc(index=0, id="c", function={"name": "f", "arguments": "{}"}), ch({}, "tool_calls")],
        {"inline_think"},
    )
    assert evs == [START, Text("<thi"), ToolCall(0, "{}", "c", "f"), ToolCallEnd(0, "{}", "c", "f"), Finish()]


@settings(max_examples=300, deadline=None)
@given(
    think=st.text(max_size=30).filter(lambda s: "</think>" not in s),
    rest=st.text(max_size=30),
    cuts=st.lists(st.integers(0, 80), max_size=8),
)
def test_inline_think_any_split(think, rest, cuts):
    content = f"<think>{think}</think>{rest}"
    cuts = sorted({c for c in cuts if c <= len(content)})
    pieces = [content[a:b] for a, b in zip([0, *cuts], [*cuts, len(content)], strict=True)]
    evs = run([ch({"content": p}) for p in pieces] + [ch({}, "stop")], {"inline_think"})
    r = "".join(e.text for e in evs if isinstance(e, Reasoning))
    t = "".join(e.text for e in evs if isinstance(e, Text))
    assert (r, t) == (think, rest)
    kinds = [type(e) for e in evs if isinstance(e, (Text, Reasoning))]
    assert kinds == sorted(kinds, key=lambda k: k is Text)  # all reasoning before any text
    assert all(e.text for e in evs if isinstance(e, (Text, Reasoning)))


# -- non-stream ------------------------------------------------------------------------------


def completion(message, finish="stop", usage=None, **top):
    obj = {
        "id": ID,
        "object": "chat.completion",
        "created": CREATED,
        "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
    }
    if usage is not None:
        obj["usage"] = usage
    obj.update(top)
    return obj


def test_nonstream_full():
    obj = completion(
        {
            "content": "ok",
            "reasoning_content": "why",
            "refusal": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "a", "arguments": '{"x":1}'}},
                {"id": "call_2", "type": "function", "function": {"name": "b", "arguments": ""}},
            ],
        },
        "tool_calls",
        {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    )
    assert decode_chat_completion(obj, Ctx()) == [
        START,
        Reasoning("why"),
        Text("ok"),
        ToolCall(0, '{"x":1}', "call_1", "a"),
        ToolCall(1, "", "call_2", "b"),
        ToolCallEnd(0, '{"x":1}', "call_1", "a"),
        ToolCallEnd(1, "", "call_2", "b"),
        Usage(from_chat({"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8})),
        Finish(),
    ]


RAW_PATCH = '*** Begin Patch\n*** Add File: a.txt\n+héllo "q" \\ ✓\n*** End Patch'


def test_T3_12_nonstream_legacy_function_call():
    obj = completion(
        {"content": None, "function_call": {"name": "apply_patch", "arguments": RAW_PATCH}}, "function_call"
    )
    ctx = Ctx()
    assert decode_chat_completion(obj, ctx) == [
        START,
        ToolCall(0, RAW_PATCH, None, "apply_patch"),
        ToolCallEnd(0, RAW_PATCH, None, "apply_patch"),
        Finish(),
    ]
    assert ctx.repairs == ["chat_legacy_function_call"]


@pytest.mark.parametrize(
    "message, finish, expected",
    [
        pytest.param({"content": "", "refusal": "I can't"}, "stop", [Refusal("I can't"), Finish()], id="refusal"),
        pytest.param(
            {"content": "x", "reasoning": "r"},
            "length",
            [Reasoning("r"), Text("x"), Finish("incomplete", "max_output_tokens")],
            id="reasoning-key-length",
        ),
        pytest.param(
            {"content": [{"type": "text", "text": "a"}, {"type": "refusal", "refusal": "n"}]},
            "content_filter",
            [Text("a"), Refusal("n"), Finish("incomplete", "content_filter")],
            id="content-parts",
        ),
        pytest.param({"content": None}, None, [Finish()], id="empty-no-finish-reason"),
    ],
)
def test_nonstream_variants(message, finish, expected):
    assert decode_chat_completion(completion(message, finish), Ctx()) == [START, *expected]


def test_nonstream_moonshot_choice_usage_wins():
    obj = completion({"content": "x"}, usage={"prompt_tokens": 1, "completion_tokens": 1})
    obj["choices"][0]["usage"] = {"prompt_tokens": 9, "completion_tokens": 2, "cached_tokens": 4}
    evs = decode_chat_completion(obj, Ctx())
    assert evs[-2] == Usage(
        {
            "input_tokens": 9,
            "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0},
            "output_tokens": 2,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 11,
        }
    )


@pytest.mark.parametrize(
    "content, quirk, expected",
    [
        pytest.param("<think>r</think>t", True, [Reasoning("r"), Text("t")], id="on"),
        pytest.param("<think>r</think>t", False, [Text("<think>r</think>t")], id="off"),
        pytest.param("<think>only", True, [Reasoning("only")], id="unterminated"),
    ],
)
def test_nonstream_inline_think(content, quirk, expected):
    ctx = Ctx(quirks=frozenset({"inline_think"} if quirk else ()))
    assert decode_chat_completion(completion({"content": content}), ctx) == [START, *expected, Finish()]


def test_nonstream_error_object():
    evs = decode_chat_completion(
        {"error": {"message": "bad", "type": "invalid_request_error", "code": "context_length_exceeded"}}, Ctx()
    )
    assert evs == [
        Start(),
        Finish(
            "failed",
            error={"code": "context_length_exceeded", "message": "bad", "type": "invalid_request_error", "param": None},
        ),
    ]
