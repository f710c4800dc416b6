"""Tool stage (docs/rules.md §4 R3-a, R3-a′, R3-b; §5.4 custom calls; §7.1 namespaces; §7.2).

Events go in as a Chat decoder emits them (stream: identity on the first ``ToolCall``, then
argument deltas, ``ToolCallEnd``s at the end, ``Usage``, ``Finish``; non-stream: one
``ToolCall`` with the whole text, then ``ToolCallEnd``) and the exact output is asserted.
Where the Responses encoder exists, the client-visible events are checked through it too.
"""

from __future__ import annotations

import hashlib
import random

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformers.context import Ctx, ToolInfo
from transformers.events import Finish, Start, Text, ToolCall, ToolCallEnd, Usage
from transformers.protocols import SPECS
from transformers.tool_stage import (
    ToolStage,
    is_json,
    is_raw_patch,
    needed,
    resolve_custom_input,
    wrap_function_patch,
)

try:  # written by another engineer; the encoder part of the tests is skipped without it
    from transformers.responses_encode import ResponsesStreamEncoder
except ImportError:  # pragma: no cover
    ResponsesStreamEncoder = None

needs_encoder = pytest.mark.skipif(ResponsesStreamEncoder is None, reason="transformers.responses_encode not there yet")

MIMO = ("mimo_raw_patch", "invalid_json_passthrough")
APPLY_PATCH_DEF = {"type": "custom", "name": "apply_patch", "description": "FREEFORM", "format": {"type": "grammar"}}
EXEC_DEF = {"type": "custom", "name": "exec", "description": "run"}

RAW = '*** Begin Patch\n*** Add File: a.txt\n+héllo "q" \\ ✓\n*** End Patch'
TRUNCATED = "*** Begin Patch\n*** Update File: a\n@@\n-x\n+y"
STARS = "*** Begin Patch ***\n*** Add File: a.txt\n+x\n*** End Patch ***"
USAGE = {
    "input_tokens": 10,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 5,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 15,
}


def mk_ctx(
    quirks=(),
    functions=("shell_command", "read_file"),
    custom=("apply_patch",),
    namespaces=None,
    ssp=None,
) -> Ctx:
    defs = {"apply_patch": APPLY_PATCH_DEF, "exec": EXEC_DEF}
    return Ctx(
        quirks=frozenset(quirks),
        upstream_model="mimo-v2.6-flash" if "mimo_raw_patch" in quirks else "deepseek-v4",
        tools=ToolInfo(
            functions=set(functions),
            custom={n: defs[n] for n in custom},
            namespaces=dict(namespaces or {}),
            single_string_param=dict(ssp or {}),
        ),
    )


def chat_ctx(quirks=MIMO, ssp=None, functions=("apply_patch", "shell_command")) -> Ctx:
    return mk_ctx(quirks, functions=functions, custom=(), ssp={"apply_patch": "input"} if ssp is None else ssp)


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    out, prev = [], 0
    for p in points + [len(text)]:
        out.append(text[prev:p])
        prev = p
    return out


def stream_events(calls, finish=None):
    """calls: [(call_id, name, [chunks])] → events as the Chat stream decoder emits them."""
    evs = [Start("chatcmpl-1", "m", 1)]
    for i, (cid, name, chunks) in enumerate(calls):
        evs.append(ToolCall(i, "", cid, name))
        evs.extend(ToolCall(i, ch) for ch in chunks)
    for i, (cid, name, chunks) in enumerate(calls):
        evs.append(ToolCallEnd(i, "".join(chunks), cid, name))
    evs.append(Usage(USAGE))
    evs.append(finish or Finish())
    return evs


def nonstream_events(calls, finish=None):
    """Events as decode_chat_completion emits them: one ToolCall per call, then the ends."""
    evs = [Start("chatcmpl-1", "m", 1)]
    evs.extend(ToolCall(i, args, cid, name) for i, (cid, name, args) in enumerate(calls))
    evs.extend(ToolCallEnd(i, args, cid, name) for i, (cid, name, args) in enumerate(calls))
    evs.append(Usage(USAGE))
    evs.append(finish or Finish())
    return evs


def run(ctx: Ctx, events, client="responses"):
    st_ = ToolStage(ctx, SPECS[client].tool_kinds)
    out = []
    for ev in events:
        out.extend(st_.feed(ev))
    out.extend(st_.end())
    return out


def run_incremental(ctx, events, client="responses"):
    """Output after each input event (to check what is held back)."""
    st_ = ToolStage(ctx, SPECS[client].tool_kinds)
    steps = [st_.feed(ev) for ev in events]
    steps.append(st_.end())
    return steps


def encode(ctx: Ctx, events) -> list[dict]:
    enc = ResponsesStreamEncoder(ctx, response_id="resp_1", created_at=1)
    out = []
    for ev in events:
        out.extend(enc.feed(ev))
    out.extend(enc.end())
    return out


def custom_ok(raw_args: str, input_: str, cid="call_1"):
    """Expected stage output for one resolved apply_patch custom call."""
    return [
        Start("chatcmpl-1", "m", 1),
        ToolCall(0, "", cid, "apply_patch", None, True),
        ToolCall(0, input_, cid, "apply_patch", None, True),
        ToolCallEnd(0, input_, cid, "apply_patch", None, False),
        Usage(USAGE),
        Finish(),
    ]


def failed_only(out):
    """Assert the error path and return the failed Finish."""
    finishes = [e for e in out if type(e) is Finish]
    assert len(finishes) == 1 and out[-1] is finishes[0]
    f = finishes[0]
    assert f.status == "failed" and f.error["code"] == "invalid_tool_arguments"
    assert not any(type(e) is ToolCallEnd for e in out)
    assert Usage(USAGE) in out  # usage still reported
    return f


# ---------------------------------------------------------------------------- markers


@pytest.mark.parametrize(
    "text,ok",
    [
        pytest.param(RAW, True, id="R3-a-plain"),
        pytest.param("\n  " + RAW + "\n\n", True, id="R3-a-surrounding-whitespace"),
        pytest.param(RAW.replace("\n", "\r\n") + "\r\n", True, id="R3-a-crlf"),
        pytest.param("*** Begin Patch\n*** End Patch", True, id="R3-a-empty-body"),
        pytest.param(TRUNCATED, False, id="T3-4-truncated"),
        pytest.param(STARS, False, id="R3-a-stars-variant"),
        pytest.param("*** Begin Patch ***\n*** Add File: a\n+x\n*** End Patch", False, id="R3-a-stars-begin"),
        pytest.param("*** Begin Patch\n*** Add File: a\n+x\n*** End Patch ***", False, id="R3-a-stars-end"),
        pytest.param("*** Begin Patch", False, id="R3-a-begin-only"),
        pytest.param("*** Begin Patch*** End Patch", False, id="R3-a-no-newline"),
        pytest.param("x*** Begin Patch\n*** End Patch", False, id="R3-a-prefix-text"),
        pytest.param('{"input":"*** Begin Patch\\n*** End Patch"}', False, id="R3-a-json-wrapper"),
        pytest.param("", False, id="R3-a-empty"),
    ],
)
def test_is_raw_patch(text, ok):
    assert is_raw_patch(text) is ok


@pytest.mark.parametrize(
    "text,ok",
    [
        ("", True),
        ("{}", True),
        (' {"a": 1} ', True),
        ('{"v":' + str(2**80) + "}", True),
        ('{"v":1e400}', True),
        ('"\\ud800"', True),
        ('{"command":"echo a\x01b"}', False),
        ("[NaN]", False),
        ("{", False),
        (RAW, False),
    ],
    ids=["empty", "obj", "ws", "bigint", "huge-exp", "lone-surrogate", "T3-9-ctrl", "nan", "open", "raw-patch"],
)
def test_is_json(text, ok):
    assert is_json(text) is ok


# ---------------------------------------------------------------------------- custom: R3-a


@pytest.mark.parametrize(
    "raw,quirks,custom,tool,expected,repairs",
    [
        pytest.param(RAW, MIMO, ("apply_patch",), "apply_patch", RAW, ["mimo_raw_patch"], id="T3-1-raw"),
        pytest.param(
            orjson.dumps({"input": RAW + "\n"}).decode(),
            MIMO,
            ("apply_patch",),
            "apply_patch",
            RAW + "\n",
            [],
            id="T3-2-json",
        ),
        pytest.param(
            orjson.dumps({"input": RAW}).decode(), (), ("apply_patch",), "apply_patch", RAW, [], id="T3-2-json-non-mimo"
        ),
        pytest.param(
            " \n" + RAW + "\n",
            MIMO,
            ("apply_patch",),
            "apply_patch",
            " \n" + RAW + "\n",
            ["mimo_raw_patch"],
            id="R3-a-untrimmed",
        ),
        pytest.param(TRUNCATED, MIMO, ("apply_patch",), "apply_patch", None, [], id="T3-4"),
        pytest.param(RAW, ("invalid_json_passthrough",), ("apply_patch",), "apply_patch", None, [], id="T3-5"),
        pytest.param(RAW, MIMO, ("apply_patch", "exec"), "exec", None, [], id="T3-6"),
        pytest.param(RAW, MIMO, (), "apply_patch", None, [], id="T3-7"),
        pytest.param(
            '{"input":"*** Begin Patch\\n*** Add File: a\\n+x',
            MIMO,
            ("apply_patch",),
            "apply_patch",
            None,
            [],
            id="T3-8",
        ),
        pytest.param(STARS, MIMO, ("apply_patch",), "apply_patch", None, [], id="R3-a-stars"),
        pytest.param('{"input":5}', MIMO, ("apply_patch",), "apply_patch", None, [], id="input-not-string"),
        pytest.param(
            '["*** Begin Patch\\n*** End Patch"]', MIMO, ("apply_patch",), "apply_patch", None, [], id="json-array"
        ),
    ],
)
def test_resolve_custom_input(raw, quirks, custom, tool, expected, repairs):
    ctx = mk_ctx(quirks, custom=custom)
    assert resolve_custom_input(raw, tool_name=tool, ctx=ctx) == expected
    assert ctx.repairs == repairs


def t31_chunks() -> list[str]:
    # arbitrary split points, one inside the "é" / "✓" neighbourhood and one inside a marker
    return split(RAW, [3, 17, 40, 41, 42, 45, 46, 52, 53, len(RAW) - 5])


def test_T3_1_stage_output_exact():
    ctx = mk_ctx(MIMO)
    chunks = t31_chunks()
    assert "".join(chunks) == RAW and len(chunks) > 5
    out = run(ctx, stream_events([("call_1", "apply_patch", chunks)]))
    assert out == custom_ok(RAW, RAW)
    assert ctx.repairs == ["mimo_raw_patch"]


def test_T3_1_custom_deltas_are_buffered():
    """§5.4: never stream the argument text of a custom call before it is resolved."""
    ctx = mk_ctx(MIMO)
    evs = stream_events([("call_1", "apply_patch", t31_chunks())])
    steps = run_incremental(ctx, evs)
    end_at = next(n for n, e in enumerate(evs) if type(e) is ToolCallEnd)
    before = [e for step in steps[:end_at] for e in step]
    assert before == [Start("chatcmpl-1", "m", 1), ToolCall(0, "", "call_1", "apply_patch", None, True)]
    assert steps[end_at] == [
        ToolCall(0, RAW, "call_1", "apply_patch", None, True),
        ToolCallEnd(0, RAW, "call_1", "apply_patch", None, False),
    ]


@needs_encoder
def test_T3_1_through_responses_encoder():
    ctx = mk_ctx(MIMO)
    out = encode(ctx, run(ctx, stream_events([("call_1", "apply_patch", t31_chunks())])))
    types = [e["type"] for e in out]
    added = [e for e in out if e["type"] == "response.output_item.added"]
    assert len(added) == 1
    item = added[0]["item"]
    assert (item["type"], item["call_id"], item["name"], item["input"]) == (
        "custom_tool_call",
        "call_1",
        "apply_patch",
        "",
    )
    deltas = [e["delta"] for e in out if e["type"] == "response.custom_tool_call_input.delta"]
    assert deltas == [RAW]  # one delta (docs/rules.md §5.4)
    (done,) = [e for e in out if e["type"] == "response.custom_tool_call_input.done"]
    assert done["input"] == RAW
    (idone,) = [e for e in out if e["type"] == "response.output_item.done"]
    assert idone["item"]["type"] == "custom_tool_call" and idone["item"]["input"] == RAW
    assert types[-1] == "response.completed" and out[-1]["response"]["status"] == "completed"
    assert not any("function_call" in t for t in types)
    assert not any(e.get("item", {}).get("type") == "function_call" for e in out)
    assert out[-1]["response"]["output"][0]["input"] == RAW


@pytest.mark.parametrize("shape", ["stream", "nonstream"])
def test_T3_2_json_wrapper_decoded(shape):
    ctx = mk_ctx(MIMO)
    body = "*** Begin Patch\n*** Add File: b\n+ok\n*** End Patch\n"
    args = orjson.dumps({"input": body}).decode()
    if shape == "stream":
        evs = stream_events([("call_1", "apply_patch", split(args, [1, 5, 9, 20]))])
    else:
        evs = nonstream_events([("call_1", "apply_patch", args)])
    assert run(ctx, evs) == custom_ok(args, body)
    assert ctx.repairs == []


# ---------------------------------------------------------------------------- T3-3 nothing lost

_LINE_BITS = ["+中文字符 “引号” ", "😀🚀", ' "dq" ', " \\back\\slash ", "\ttab\t", "ключ", "日本語テキスト", "plain"]


def big_patch(target: int = 20_000) -> str:
    """A >= 20 000-byte raw patch; some lines end in CRLF, the text ends with a newline."""
    rnd = random.Random(3)
    parts = ["*** Begin Patch\n", "*** Add File: 目录/文件.txt\n"]
    size = 0
    while size < target:
        line = "+" + "".join(rnd.choice(_LINE_BITS) for _ in range(rnd.randint(1, 6)))
        line += "\r\n" if rnd.random() < 0.3 else "\n"
        parts.append(line)
        size += len(line.encode())
    parts.append("*** End Patch\n")
    return "".join(parts)


BIG = big_patch()


def sha(s: str) -> str:
    return hashlib.sha256(s.encode("utf-8", "surrogatepass")).hexdigest()


def test_T3_3_fixture_shape():
    b = BIG.encode()
    assert len(b) >= 20_000
    for needle in ("中", "😀", '"', "\\", "\t", "\r\n"):
        assert needle in BIG
    assert is_raw_patch(BIG) and not is_json(BIG)


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(BIG)), max_size=60))
def test_T3_3_raw_patch_sha_stream(cuts):
    ctx = mk_ctx(MIMO)
    out = run(ctx, stream_events([("call_1", "apply_patch", split(BIG, cuts))]))
    assert out == custom_ok(BIG, BIG)
    (final,) = [e for e in out if type(e) is ToolCall and e.arguments]
    assert sha(final.arguments) == sha(BIG)
    assert ctx.repairs == ["mimo_raw_patch"]


def test_T3_3_raw_patch_sha_nonstream():
    ctx = mk_ctx(MIMO)
    out = run(ctx, nonstream_events([("call_1", "apply_patch", BIG)]))
    assert out == custom_ok(BIG, BIG)
    assert sha(out[2].arguments) == sha(out[3].arguments) == sha(BIG)


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_T3_3_json_wrapped_big_patch_stream(data):
    args = orjson.dumps({"input": BIG}).decode()
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(args)), max_size=60))
    ctx = mk_ctx(MIMO)
    out = run(ctx, stream_events([("call_1", "apply_patch", split(args, cuts))]))
    assert out == custom_ok(args, BIG)
    assert ctx.repairs == []


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(BIG)), max_size=60))
def test_T3_3_chat_wrap_big_patch(cuts):
    ctx = chat_ctx()
    out = run(ctx, stream_events([("call_1", "apply_patch", split(BIG, cuts))]), client="chat")
    wrapped = orjson.dumps({"input": BIG}).decode()
    assert out[2] == ToolCall(0, wrapped, "call_1", "apply_patch")
    assert sha(orjson.loads(out[2].arguments)["input"]) == sha(BIG)


# ---------------------------------------------------------------------------- custom error path


@pytest.mark.parametrize(
    "args,quirks,custom,name,reason",
    [
        pytest.param(TRUNCATED, MIMO, ("apply_patch",), "apply_patch", None, id="T3-4"),
        pytest.param(TRUNCATED, MIMO, ("apply_patch",), "apply_patch", "max_output_tokens", id="T3-4-length"),
        pytest.param(RAW, ("invalid_json_passthrough",), ("apply_patch",), "apply_patch", None, id="T3-5-non-mimo"),
        pytest.param(RAW, (), ("apply_patch",), "apply_patch", None, id="T3-5-no-quirks"),
        pytest.param(RAW, MIMO, ("apply_patch", "exec"), "exec", None, id="T3-6"),
        pytest.param(
            '{"input":"*** Begin Patch\\n*** Add File: a\\n+x', MIMO, ("apply_patch",), "apply_patch", None, id="T3-8"
        ),
        pytest.param(STARS, MIMO, ("apply_patch",), "apply_patch", None, id="R3-a-stars"),
        pytest.param("", MIMO, ("apply_patch",), "apply_patch", None, id="empty-args"),
    ],
)
@pytest.mark.parametrize("shape", ["stream", "nonstream"])
def test_custom_not_resolved_fails_the_turn(args, quirks, custom, name, reason, shape):
    ctx = mk_ctx(quirks, custom=custom)
    fin = Finish("incomplete", "max_output_tokens") if reason else Finish()
    if shape == "stream":
        evs = stream_events([("call_1", name, split(args, [4, 11, 30]))], fin)
    else:
        evs = nonstream_events([("call_1", name, args)], fin)
    out = run(ctx, evs)
    assert out[:-1] == [
        Start("chatcmpl-1", "m", 1),
        ToolCall(0, "", "call_1", name, None, True),
        Usage(USAGE),
    ]
    f = failed_only(out)
    assert f.error["message"].startswith(f'custom tool {name} arguments are not {{"input": string}}')
    assert ("max_output_tokens" in f.error["message"]) is bool(reason)
    assert ctx.repairs == []


@needs_encoder
def test_T3_4_through_responses_encoder():
    ctx = mk_ctx(MIMO)
    out = encode(ctx, run(ctx, stream_events([("call_1", "apply_patch", [TRUNCATED])])))
    assert out[-1]["type"] == "response.failed"
    assert out[-1]["response"]["error"]["code"] == "invalid_tool_arguments"
    assert not any(e["type"] == "response.custom_tool_call_input.delta" for e in out)
    assert sum(e["type"] in ("response.completed", "response.failed", "response.incomplete") for e in out) == 1


def test_T3_7_apply_patch_not_in_tools():
    """Not registered at all: a plain call with non-JSON text to an unknown tool → error path."""
    ctx = mk_ctx(MIMO, custom=())
    evs = stream_events([("call_1", "apply_patch", [RAW[:10], RAW[10:]])])
    out = run(ctx, evs)
    assert out[:-1] == evs[:4] + [Usage(USAGE)]  # deltas streamed untouched, the end withheld
    f = failed_only(out)
    assert (
        f.error["message"]
        == "tool call apply_patch arguments are not valid JSON (the tool is not registered in this request)"
    )
    assert ctx.repairs == []


def test_T3_7_apply_patch_registered_as_function_not_wrapped():
    """A Responses client offering apply_patch as a plain function gets no R3-a wrap, only R3-b."""
    ctx = mk_ctx(MIMO, functions=("apply_patch",), custom=())
    evs = stream_events([("call_1", "apply_patch", [RAW])])
    assert run(ctx, evs) == evs
    assert ctx.repairs == ["invalid_json_passthrough"]


def test_custom_failure_among_other_calls_keeps_order_and_one_finish():
    ctx = mk_ctx(MIMO)
    evs = stream_events([("call_1", "read_file", ['{"path":"x"}']), ("call_2", "apply_patch", [TRUNCATED])])
    out = run(ctx, evs)
    assert out == [
        Start("chatcmpl-1", "m", 1),
        ToolCall(0, "", "call_1", "read_file"),
        ToolCall(0, '{"path":"x"}'),
        ToolCall(1, "", "call_2", "apply_patch", None, True),
        ToolCallEnd(0, '{"path":"x"}', "call_1", "read_file"),
        Usage(USAGE),
        out[-1],
    ]
    assert out[-1].status == "failed" and out[-1].error["code"] == "invalid_tool_arguments"


# ---------------------------------------------------------------------------- R3-b

CTRL = '{"command":"echo a\x01b"}'


def t39_events(finish=None):
    return stream_events(
        [("call_a", "shell_command", ['{"command":', '"echo a\x01', 'b"}']), ("call_b", "read_file", ['{"path":"x"}'])],
        finish,
    )


def test_T3_9_mixed_passthrough_exact():
    ctx = mk_ctx(MIMO)
    evs = t39_events()
    out = run(ctx, evs)
    assert out == evs
    assert all(a is b for a, b in zip(out, evs))  # same objects: bytes untouched
    assert ctx.repairs == ["invalid_json_passthrough"]


def test_T3_9_held_until_finish():
    ctx = mk_ctx(MIMO)
    evs = t39_events()
    steps = run_incremental(ctx, evs)
    end0 = next(n for n, e in enumerate(evs) if type(e) is ToolCallEnd)
    assert all(steps[n] == [evs[n]] for n in range(end0))  # streamed live
    assert all(steps[n] == [] for n in range(end0, len(evs) - 1))  # held from the invalid end on
    assert steps[len(evs) - 1] == evs[end0:]


@needs_encoder
def test_T3_9_through_responses_encoder():
    ctx = mk_ctx(MIMO)
    out = encode(ctx, run(ctx, t39_events()))
    assert out[-1]["type"] == "response.completed"
    deltas = "".join(
        e["delta"] for e in out if e["type"] == "response.function_call_arguments.delta" and e["output_index"] == 0
    )
    (adone,) = [e for e in out if e["type"] == "response.function_call_arguments.done" and e["output_index"] == 0]
    idone = [e for e in out if e["type"] == "response.output_item.done"]
    assert [e["item"]["type"] for e in idone] == ["function_call", "function_call"]
    final = out[-1]["response"]["output"]
    assert deltas == adone["arguments"] == idone[0]["item"]["arguments"] == final[0]["arguments"] == CTRL
    assert final[1]["arguments"] == '{"path":"x"}'
    assert orjson.dumps(out[-1])  # serializable as is


@pytest.mark.parametrize(
    "quirks,functions,finish,why",
    [
        pytest.param(MIMO, ("read_file",), Finish(), "the tool is not registered in this request", id="T3-10"),
        pytest.param(
            MIMO,
            ("shell_command", "read_file"),
            Finish("incomplete", "max_output_tokens"),
            "the upstream output was cut at max_output_tokens",
            id="R3-b-length",
        ),
        pytest.param(
            ("mimo_raw_patch",),
            ("shell_command", "read_file"),
            Finish(),
            "invalid_json_passthrough is off for this model",
            id="R3-b-quirk-off",
        ),
    ],
)
def test_R3_b_error_path(quirks, functions, finish, why):
    ctx = mk_ctx(quirks, functions=functions)
    evs = t39_events(finish)
    out = run(ctx, evs)
    end0 = next(n for n, e in enumerate(evs) if type(e) is ToolCallEnd)
    # everything streamed, the invalid call's end left out, the valid end and usage kept
    assert out[:-1] == evs[:end0] + [evs[end0 + 1], Usage(USAGE)]
    f = out[-1]
    assert f == Finish(
        "failed",
        error={
            "code": "invalid_tool_arguments",
            "message": f"tool call shell_command arguments are not valid JSON ({why})",
            "type": "server_error",
            "param": None,
        },
    )
    assert ctx.repairs == []


@pytest.mark.parametrize(
    "finish", [Finish("incomplete", "content_filter"), Finish("completed", None)], ids=["content-filter", "completed"]
)
def test_R3_b_other_terminal_reasons_pass(finish):
    ctx = mk_ctx(MIMO)
    evs = t39_events(finish)
    assert run(ctx, evs) == evs


def test_R3_b_upstream_failure_stands():
    ctx = mk_ctx(MIMO, functions=())
    err = {"code": "server_error", "message": "boom", "type": "server_error", "param": None}
    evs = t39_events(Finish("failed", error=err))
    out = run(ctx, evs)
    assert out == evs  # released unchanged, the upstream's error is the one Finish
    assert ctx.repairs == []


def test_R3_b_valid_calls_only_untouched_and_live():
    ctx = mk_ctx(MIMO)
    evs = stream_events([("c", "read_file", ['{"pa', 'th":"x"}'])])
    steps = run_incremental(ctx, evs)
    assert [e for s in steps for e in s] == evs
    assert all(s == [e] for s, e in zip(steps, evs))
    assert ctx.repairs == []


def test_R3_b_empty_arguments_are_valid():
    ctx = mk_ctx(("mimo_raw_patch",))  # no passthrough: "" must not hit the error path
    evs = stream_events([("c", "shell_command", [])])
    assert run(ctx, evs) == evs


@pytest.mark.parametrize("shape", ["stream", "nonstream"])
def test_T3_10_unregistered_nonstream_and_stream(shape):
    ctx = mk_ctx(MIMO, functions=())
    calls = [("c", "mystery", "not json")]
    evs = nonstream_events(calls) if shape == "nonstream" else stream_events([("c", "mystery", ["not ", "json"])])
    out = run(ctx, evs)
    assert out[-1].status == "failed" and out[-1].error["code"] == "invalid_tool_arguments"
    assert not any(type(e) is ToolCallEnd for e in out)


# ---------------------------------------------------------------------------- T3-11 / T3-12 non-stream


@pytest.mark.parametrize(
    "calls,finish",
    [
        pytest.param([("call_1", "apply_patch", RAW)], Finish(), id="T3-11"),
        pytest.param([(None, "apply_patch", RAW)], Finish(), id="T3-12-legacy-function_call"),
    ],
)
def test_T3_11_T3_12_nonstream(calls, finish):
    ctx = mk_ctx(MIMO)
    cid = calls[0][0]
    out = run(ctx, nonstream_events(calls, finish))
    assert out == custom_ok(RAW, RAW, cid)
    assert ctx.repairs == ["mimo_raw_patch"]


@needs_encoder
def test_T3_11_response_output():
    from transformers.responses_encode import encode_response

    ctx = mk_ctx(MIMO)
    resp = encode_response(run(ctx, nonstream_events([("call_1", "apply_patch", RAW)])), ctx, response_id="resp_1")
    assert resp["status"] == "completed"
    (item,) = resp["output"]
    assert (item["type"], item["call_id"], item["name"], item["input"]) == (
        "custom_tool_call",
        "call_1",
        "apply_patch",
        RAW,
    )


# ------------------------------------------------- R3-a′ (a one-string function apply_patch, both protocols)


@pytest.mark.parametrize(
    "param,args,expected,repairs",
    [
        pytest.param("input", RAW, orjson.dumps({"input": RAW}).decode(), ["mimo_raw_patch_function"], id="R3-a'-wrap"),
        pytest.param(
            "patch",
            RAW + "\n",
            orjson.dumps({"patch": RAW + "\n"}).decode(),
            ["mimo_raw_patch_function"],
            id="R3-a'-wrap-other-param",
        ),
        pytest.param(
            "input",
            '{"input": "*** Begin Patch\\n*** End Patch"}',
            '{"input": "*** Begin Patch\\n*** End Patch"}',
            [],
            id="R3-a'-json-untouched",
        ),
    ],
)
@pytest.mark.parametrize("shape", ["stream", "nonstream"])
@pytest.mark.parametrize("client", ["chat", "responses"])
def test_R3_a_prime(param, args, expected, repairs, shape, client):
    ctx = chat_ctx(ssp={"apply_patch": param})
    if shape == "stream":
        evs = stream_events([("call_1", "apply_patch", split(args, [2, 9, 16, 33]))])
    else:
        evs = nonstream_events([("call_1", "apply_patch", args)])
    out = run(ctx, evs, client=client)
    assert out == [
        Start("chatcmpl-1", "m", 1),
        ToolCall(0, "", "call_1", "apply_patch"),
        ToolCall(0, expected, "call_1", "apply_patch"),
        ToolCallEnd(0, expected, "call_1", "apply_patch", None, False),
        Usage(USAGE),
        Finish(),
    ]
    if repairs:
        assert orjson.loads(expected)[param] == args  # byte-exact after decoding
    assert ctx.repairs == repairs


@pytest.mark.parametrize("client", ["chat", "responses"])
def test_R3_a_prime_truncated_passthrough(client):
    ctx = chat_ctx()
    evs = stream_events([("call_1", "apply_patch", [TRUNCATED[:7], TRUNCATED[7:]])])
    out = run(ctx, evs, client=client)
    assert out == [
        Start("chatcmpl-1", "m", 1),
        ToolCall(0, "", "call_1", "apply_patch"),
        ToolCall(0, TRUNCATED, "call_1", "apply_patch"),
        ToolCallEnd(0, TRUNCATED, "call_1", "apply_patch", None, False),
        Usage(USAGE),
        Finish(),
    ]
    assert ctx.repairs == ["invalid_json_passthrough"]


@pytest.mark.parametrize("client", ["chat", "responses"])
def test_R3_a_prime_truncated_without_passthrough_fails(client):
    ctx = chat_ctx(quirks=("mimo_raw_patch",))
    out = run(ctx, stream_events([("call_1", "apply_patch", [TRUNCATED])]), client=client)
    assert out[:-1] == [Start("chatcmpl-1", "m", 1), ToolCall(0, "", "call_1", "apply_patch"), Usage(USAGE)]
    failed_only(out)


@pytest.mark.parametrize(
    "quirks,ssp",
    [
        pytest.param(("invalid_json_passthrough",), None, id="R3-a'-non-mimo"),
        pytest.param(MIMO, {}, id="R3-a'-not-single-string"),
    ],
)
@pytest.mark.parametrize("client", ["chat", "responses"])
def test_R3_a_prime_not_applicable_streams_untouched(quirks, ssp, client):
    ctx = chat_ctx(quirks=quirks, ssp=ssp)
    evs = stream_events([("call_1", "apply_patch", [RAW[:5], RAW[5:]])])
    steps = run_incremental(ctx, evs, client=client)
    end0 = next(n for n, e in enumerate(evs) if type(e) is ToolCallEnd)
    assert all(steps[n] == [evs[n]] for n in range(end0))  # not buffered
    assert [e for s in steps for e in s] == evs  # R3-b passthrough, unchanged
    assert ctx.repairs == ["invalid_json_passthrough"]


@pytest.mark.parametrize("client", ["chat", "responses"])
def test_R3_a_prime_wrap_buffers_deltas(client):
    ctx = chat_ctx()
    evs = stream_events([("call_1", "apply_patch", [RAW[:5], RAW[5:]])])
    steps = run_incremental(ctx, evs, client=client)
    assert steps[1] == [ToolCall(0, "", "call_1", "apply_patch")]
    assert steps[2] == [] and steps[3] == []


# what the client offered decides, never its protocol: one table for both (docs/rules.md §4 R3-a′)
# (case id, custom tools offered, one-string functions offered, client) → what the client gets
OFFERED = [
    ("custom-responses", ("apply_patch",), {}, "responses", "custom"),
    ("custom-and-function-responses", ("apply_patch",), {"apply_patch": "input"}, "responses", "custom"),
    ("function-responses", (), {"apply_patch": "input"}, "responses", "wrapped"),
    ("function-chat", (), {"apply_patch": "input"}, "chat", "wrapped"),
    ("function-other-param-responses", (), {"apply_patch": "patch"}, "responses", "wrapped"),
    ("function-two-params-responses", (), {}, "responses", "raw"),
    ("function-two-params-chat", (), {}, "chat", "raw"),
]


@pytest.mark.parametrize("custom, ssp, client, gets", [r[1:] for r in OFFERED], ids=[r[0] for r in OFFERED])
def test_R3_a_one_rule_for_both_protocols(custom, ssp, client, gets):
    ctx = mk_ctx(MIMO, functions=("apply_patch",) if ssp or not custom else (), custom=custom, ssp=ssp)
    assert needed(ctx)
    out = run(ctx, stream_events([("call_1", "apply_patch", [RAW[:9], RAW[9:]])]), client=client)
    (end,) = [e for e in out if type(e) is ToolCallEnd]
    if gets == "custom":
        assert out == custom_ok(RAW, RAW) and ctx.repairs == ["mimo_raw_patch"]
    elif gets == "wrapped":
        assert orjson.loads(end.arguments) == {next(iter(ssp.values())): RAW}
        assert not any(e.custom for e in out if type(e) is ToolCall)
        assert ctx.repairs == ["mimo_raw_patch_function"]
    else:  # a plain function: R3-b passes the raw text through, byte for byte
        assert end.arguments == RAW and ctx.repairs == ["invalid_json_passthrough"]


@needs_encoder
def test_R3_a_prime_responses_client_gets_a_function_call():
    """kosong's / Kimi Code's Responses provider: apply_patch offered as a function → a
    function_call whose arguments are {"input": raw}, never a custom_tool_call."""
    ctx = chat_ctx()
    events = run(ctx, stream_events([("call_1", "apply_patch", [RAW[:4], RAW[4:]])]))
    done = [e for e in encode(ctx, events) if e.get("type") == "response.output_item.done"]
    assert [(d["item"]["type"], d["item"]["name"]) for d in done] == [("function_call", "apply_patch")]
    assert orjson.loads(done[0]["item"]["arguments"]) == {"input": RAW}


def test_wrap_function_patch_helper():
    ctx = chat_ctx()
    assert wrap_function_patch(RAW, tool_name="apply_patch", ctx=ctx) == orjson.dumps({"input": RAW}).decode()
    assert wrap_function_patch(RAW, tool_name="shell_command", ctx=ctx) is None
    assert wrap_function_patch(TRUNCATED, tool_name="apply_patch", ctx=ctx) is None
    assert wrap_function_patch(RAW, tool_name="apply_patch", ctx=chat_ctx(quirks=())) is None
    assert ctx.repairs == ["mimo_raw_patch_function"]


def test_chat_client_no_custom_or_namespace_work():
    ctx = mk_ctx(MIMO, namespaces={"mcp__gh__get_me": ("mcp__gh__", "get_me")})
    evs = stream_events(
        [("c1", "mcp__gh__get_me", ["{}"]), ("c2", "apply_patch", [orjson.dumps({"input": RAW}).decode()])]
    )
    assert run(ctx, evs, client="chat") == evs
    assert ctx.repairs == []


# ---------------------------------------------------------------------------- namespaces (§7.1)

NS = {"mcp__gh__get_me": ("mcp__gh__", "get_me"), "collaboration__spawn_agent": ("collaboration", "spawn_agent")}


def test_namespace_split_stream():
    ctx = mk_ctx(MIMO, functions=("mcp__gh__get_me", "collaboration__spawn_agent"), namespaces=NS)
    evs = stream_events(
        [("c1", "mcp__gh__get_me", ['{"a"', ":1}"]), ("c2", "collaboration__spawn_agent", ['{"task":"x"}'])]
    )
    out = run(ctx, evs)
    assert out == [
        Start("chatcmpl-1", "m", 1),
        ToolCall(0, "", "c1", "get_me", "mcp__gh__"),
        ToolCall(0, '{"a"'),
        ToolCall(0, ":1}"),
        ToolCall(1, "", "c2", "spawn_agent", "collaboration"),
        ToolCall(1, '{"task":"x"}'),
        ToolCallEnd(0, '{"a":1}', "c1", "get_me", "mcp__gh__"),
        ToolCallEnd(1, '{"task":"x"}', "c2", "spawn_agent", "collaboration"),
        Usage(USAGE),
        Finish(),
    ]
    assert out[2] is evs[2]  # argument deltas are the same objects
    assert ctx.repairs == ["namespace_split", "namespace_split"]


def test_namespace_invalid_json_passthrough():
    """R3-b covers namespace functions (flattened names) too."""
    ctx = mk_ctx(MIMO, functions=("mcp__gh__get_me",), namespaces=NS)
    evs = stream_events([("c1", "mcp__gh__get_me", ["{bad"])])
    out = run(ctx, evs)
    assert out[-3] == ToolCallEnd(0, "{bad", "c1", "get_me", "mcp__gh__")
    assert out[-1] == Finish()
    assert ctx.repairs == ["namespace_split", "invalid_json_passthrough"]


@needs_encoder
def test_namespace_through_responses_encoder():
    ctx = mk_ctx(MIMO, functions=("mcp__gh__get_me",), namespaces=NS)
    out = encode(ctx, run(ctx, stream_events([("c1", "mcp__gh__get_me", ["{}"])])))
    (idone,) = [e for e in out if e["type"] == "response.output_item.done"]
    assert (idone["item"]["name"], idone["item"]["namespace"]) == ("get_me", "mcp__gh__")


# ---------------------------------------------------------------------------- late identity, §7.2


def test_late_identity_plain_is_held_then_released_whole():
    ctx = mk_ctx(MIMO)  # custom tools present, so a nameless call might be custom
    evs = [
        Start(),
        ToolCall(0, '{"a":'),
        ToolCall(0, "", "call_9", "read_file"),
        ToolCall(0, "1}"),
        ToolCallEnd(0, '{"a":1}', "call_9", "read_file"),
        Finish(),
    ]
    steps = run_incremental(ctx, evs)
    assert steps[1] == [ToolCall(0, "")]
    assert steps[2] == [ToolCall(0, '{"a":', "call_9", "read_file")]
    assert steps[3] == [evs[3]] and steps[4] == [evs[4]]


def test_late_identity_custom():
    ctx = mk_ctx(MIMO)
    evs = [Start(), ToolCall(0, RAW[:9]), ToolCall(0, RAW[9:], "call_1", "apply_patch"), ToolCallEnd(0, RAW), Finish()]
    out = run(ctx, evs)
    assert out == [
        Start(),
        ToolCall(0, ""),
        ToolCall(0, "", "call_1", "apply_patch", None, True),
        ToolCall(0, RAW, "call_1", "apply_patch", None, True),
        ToolCallEnd(0, RAW, "call_1", "apply_patch", None, False),
        Finish(),
    ]


@needs_encoder
def test_late_identity_keeps_index_order_through_encoder():
    """T2-9 shape: index 0 named after index 1 is complete → index 0 still gets output_index 0."""
    ctx = mk_ctx(MIMO)
    evs = [
        Start(),
        ToolCall(0, '{"a":1}'),
        ToolCall(1, "", "c1", "read_file"),
        ToolCall(1, '{"path":"x"}'),
        ToolCall(0, "", "c0", "shell_command"),
        ToolCallEnd(0, '{"a":1}', "c0", "shell_command"),
        ToolCallEnd(1, '{"path":"x"}', "c1", "read_file"),
        Finish(),
    ]
    out = encode(ctx, run(ctx, evs))
    added = [(e["output_index"], e["item"]["call_id"]) for e in out if e["type"] == "response.output_item.added"]
    assert added == [(0, "c0"), (1, "c1")]


def test_nameless_call_passes_without_R3_b():
    """§7.2: a call that never gets a name is left for the encoder to drop, not failed here."""
    ctx = mk_ctx(MIMO)
    evs = [Start(), ToolCall(0, "not json"), ToolCallEnd(0, "not json"), Usage(USAGE), Finish()]
    out = run(ctx, evs)
    assert out == [
        Start(),
        ToolCall(0, ""),
        ToolCall(0, "not json"),
        ToolCallEnd(0, "not json"),
        Usage(USAGE),
        Finish(),
    ]


def test_other_events_untouched_and_nothing_after_finish():
    ctx = mk_ctx(MIMO)
    st_ = ToolStage(ctx, SPECS["responses"].tool_kinds)
    t = Text("hi")
    assert st_.feed(t)[0] is t
    assert st_.feed(Finish()) == [Finish()]
    assert st_.feed(Text("late")) == [] and st_.end() == []


# ---------------------------------------------------------------------------- nothing lost (plain)


@settings(max_examples=80, deadline=None)
@given(
    args=st.text(max_size=300),
    cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=10),
    name=st.sampled_from(["shell_command", "read_file", "mcp__gh__get_me"]),
    client=st.sampled_from(["responses", "chat"]),
)
def test_plain_nothing_lost(args, cuts, name, client):
    ctx = mk_ctx(MIMO, functions=("shell_command", "read_file", "mcp__gh__get_me"), namespaces=NS)
    evs = stream_events([("c", name, split(args, cuts))])
    out = run(ctx, evs, client=client)
    assert "".join(e.arguments for e in out if type(e) is ToolCall) == args
    (end,) = [e for e in out if type(e) is ToolCallEnd]
    assert end.arguments == args
    assert out[-1] == Finish()


# ---------------------------------------------------------------------------- needed()


@pytest.mark.parametrize(
    "quirks,custom,namespaces,ssp,client,expected",
    [
        pytest.param((), (), None, None, "responses", False, id="nothing"),
        pytest.param((), (), None, None, "chat", False, id="nothing-chat"),
        pytest.param(("mimo_raw_patch",), (), None, None, "responses", False, id="mimo-no-tools"),
        pytest.param((), ("apply_patch",), None, None, "responses", True, id="custom"),
        pytest.param((), (), NS, None, "responses", True, id="namespaces"),
        pytest.param(("invalid_json_passthrough",), (), None, None, "chat", True, id="passthrough"),
        pytest.param(("mimo_raw_patch",), (), None, {"apply_patch": "input"}, "chat", True, id="chat-wrap"),
        pytest.param(("mimo_raw_patch",), (), None, {"apply_patch": "input"}, "responses", True, id="responses-wrap"),
        pytest.param((), (), None, {"apply_patch": "input"}, "responses", False, id="responses-wrap-non-mimo"),
        pytest.param((), (), None, {"apply_patch": "input"}, "chat", False, id="chat-wrap-non-mimo"),
        pytest.param(("mimo_raw_patch",), (), None, {"edit": "input"}, "chat", False, id="chat-other-ssp"),
    ],
)
def test_needed(quirks, custom, namespaces, ssp, client, expected):
    assert needed(mk_ctx(quirks, custom=custom, namespaces=namespaces, ssp=ssp)) is expected


# ---------------------------------------------------------------------------- whole pipeline
# Chat chunks → ChatStreamDecoder → ToolStage → ResponsesStreamEncoder, when both exist.

try:
    from transformers.chat_decode import ChatStreamDecoder, decode_chat_completion
except ImportError:  # pragma: no cover
    ChatStreamDecoder = None

needs_pipeline = pytest.mark.skipif(
    ChatStreamDecoder is None or ResponsesStreamEncoder is None,
    reason="chat decoder or Responses encoder not there yet",
)


def chat_chunks(args_pieces, name="apply_patch", cid="call_1", finish_reason="tool_calls"):
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "mimo-v2.6-flash"}
    first = {"index": 0, "id": cid, "type": "function", "function": {"name": name, "arguments": ""}}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [first]}}]}]
    for p in args_pieces:
        tc = {"index": 0, "function": {"arguments": p}}
        chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [tc]}}]})
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason}]})
    chunks.append({**base, "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
    return chunks


def pipeline(ctx, chunks):
    dec, stage = ChatStreamDecoder(ctx), ToolStage(ctx, SPECS["responses"].tool_kinds)
    enc = ResponsesStreamEncoder(ctx, response_id="resp_1", created_at=1)
    out = []
    for ch in chunks:
        for ev in dec.feed(ch):
            for ev2 in stage.feed(ev):
                out.extend(enc.feed(ev2))
    for ev in dec.end():
        for ev2 in stage.feed(ev):
            out.extend(enc.feed(ev2))
    for ev2 in stage.end():
        out.extend(enc.feed(ev2))
    out.extend(enc.end())
    return out


@needs_pipeline
def test_T3_1_pipeline_from_chat_chunks():
    ctx = mk_ctx(MIMO)
    out = pipeline(ctx, chat_chunks(t31_chunks()))
    assert [e["type"] for e in out if "custom_tool_call" in e["type"] or "output_item" in e["type"]] == [
        "response.output_item.added",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.output_item.done",
    ]
    assert out[-1]["type"] == "response.completed" and out[-1]["response"]["status"] == "completed"
    (item,) = out[-1]["response"]["output"]
    assert (item["type"], item["call_id"], item["name"], item["input"]) == (
        "custom_tool_call",
        "call_1",
        "apply_patch",
        RAW,
    )
    assert sha(item["input"]) == sha(RAW)


@needs_pipeline
def test_T3_9_pipeline_from_chat_chunks():
    ctx = mk_ctx(MIMO)
    base = {"id": "chatcmpl-1", "created": 1, "model": "mimo-v2.6-flash"}
    c0 = {"index": 0, "id": "call_a", "type": "function", "function": {"name": "shell_command", "arguments": CTRL[:9]}}
    c1 = {
        "index": 1,
        "id": "call_b",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path":"x"}'},
    }
    chunks = [
        {**base, "choices": [{"index": 0, "delta": {"tool_calls": [c0]}}]},
        {
            **base,
            "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": CTRL[9:]}}]}}],
        },
        {**base, "choices": [{"index": 0, "delta": {"tool_calls": [c1]}, "finish_reason": "tool_calls"}]},
    ]
    out = pipeline(ctx, chunks)
    assert out[-1]["type"] == "response.completed"
    final = out[-1]["response"]["output"]
    assert [(o["type"], o["arguments"]) for o in final] == [("function_call", CTRL), ("function_call", '{"path":"x"}')]
    deltas = "".join(
        e["delta"] for e in out if e["type"] == "response.function_call_arguments.delta" and e["output_index"] == 0
    )
    assert deltas == CTRL


@needs_pipeline
@pytest.mark.parametrize(
    "message",
    [
        pytest.param(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "apply_patch", "arguments": RAW}}
                ],
            },
            id="T3-11",
        ),
        pytest.param(
            {"role": "assistant", "content": None, "function_call": {"name": "apply_patch", "arguments": RAW}},
            id="T3-12",
        ),
    ],
)
def test_T3_11_T3_12_pipeline_nonstream(message):
    from transformers.responses_encode import encode_response

    ctx = mk_ctx(MIMO)
    obj = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "mimo-v2.6-flash",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
    stage = ToolStage(ctx, SPECS["responses"].tool_kinds)
    evs = [e2 for e in decode_chat_completion(obj, ctx) for e2 in stage.feed(e)] + stage.end()
    resp = encode_response(evs, ctx, response_id="resp_1")
    assert resp["status"] == "completed"
    (item,) = resp["output"]
    assert (item["type"], item["name"], item["input"]) == ("custom_tool_call", "apply_patch", RAW)
    assert ctx.repairs.count("mimo_raw_patch") == 1
