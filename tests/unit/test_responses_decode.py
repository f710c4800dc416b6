"""ResponsesStreamDecoder / decode_response: upstream Responses → unified events.

docs/rules.md §2 (T1-1…T1-4, decoder side), §3 (T2-1…T2-7, decoder side), §5.3-5.4, plus truncation,
error events, incomplete/failed, passthrough items, usage and a "nothing lost" property.
Every case asserts the exact list of unified events.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformers.context import Ctx
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
from transformers.responses_decode import ResponsesStreamDecoder, decode_response

FIXTURES = Path(__file__).parent.parent / "fixtures"

ZERO_USAGE = {
    "input_tokens": 0,
    "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
    "output_tokens": 0,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 0,
}
TRUNCATED = {
    "code": "upstream_stream_truncated",
    "message": "upstream closed the stream before a terminal event",
    "type": "server_error",
    "param": None,
}


# -- builders ---------------------------------------------------------------------------


def load(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]


def created(rid: str = "resp_1", model: str = "m", at: int = 7) -> dict[str, Any]:
    return {"type": "response.created", "response": {"id": rid, "model": model, "created_at": at, "output": []}}


def added(i: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": i, "item": item}


def done(i: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.done", "output_index": i, "item": item}


def fc(iid: str | None, call_id: str | None, name: str | None = None, args: str = "", **kw: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "function_call", "arguments": args, **kw}
    if iid is not None:
        item["id"] = iid
    if call_id is not None:
        item["call_id"] = call_id
    if name is not None:
        item["name"] = name
    return item


def ctc(iid: str, call_id: str, name: str = "apply_patch", inp: str = "") -> dict[str, Any]:
    return {"id": iid, "type": "custom_tool_call", "call_id": call_id, "name": name, "input": inp}


def msg(iid: str | None, *texts: str, refusal: str | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "output_text", "text": t, "annotations": []} for t in texts]
    if refusal is not None:
        content.append({"type": "refusal", "refusal": refusal})
    item: dict[str, Any] = {"type": "message", "role": "assistant", "content": content}
    if iid is not None:
        item["id"] = iid
    return item


def rs(iid: str | None, *summary: str, enc: str | None = None, raw: tuple[str, ...] = ()) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "reasoning", "summary": [{"type": "summary_text", "text": s} for s in summary]}
    if raw:
        item["content"] = [{"type": "reasoning_text", "text": r} for r in raw]
    if enc is not None:
        item["encrypted_content"] = enc
    if iid is not None:
        item["id"] = iid
    return item


def args_delta(iid: str | None, delta: Any, **kw: Any) -> dict[str, Any]:
    ev = {"type": "response.function_call_arguments.delta", "delta": delta, **kw}
    if iid is not None:
        ev["item_id"] = iid
    return ev


def args_done(iid: str | None, args: str, **kw: Any) -> dict[str, Any]:
    ev = {"type": "response.function_call_arguments.done", "arguments": args, **kw}
    if iid is not None:
        ev["item_id"] = iid
    return ev


def input_delta(iid: str, delta: str, **kw: Any) -> dict[str, Any]:
    return {"type": "response.custom_tool_call_input.delta", "item_id": iid, "delta": delta, **kw}


def input_done(iid: str, inp: str, **kw: Any) -> dict[str, Any]:
    return {"type": "response.custom_tool_call_input.done", "item_id": iid, "input": inp, **kw}


def text_delta(iid: str | None, delta: str, **kw: Any) -> dict[str, Any]:
    ev = {"type": "response.output_text.delta", "content_index": 0, "delta": delta, **kw}
    if iid is not None:
        ev["item_id"] = iid
    return ev


def summary_delta(iid: str, delta: str, idx: int = 0) -> dict[str, Any]:
    return {"type": "response.reasoning_summary_text.delta", "item_id": iid, "summary_index": idx, "delta": delta}


def completed(
    output: list[dict[str, Any]] | None = None, usage: dict[str, Any] | None = None, rid: str = "resp_1"
) -> dict[str, Any]:
    resp: dict[str, Any] = {"id": rid, "status": "completed", "output": output or []}
    if usage is not None:
        resp["usage"] = usage
    return {"type": "response.completed", "response": resp}


def decode(events: list[dict[str, Any]], ctx: Ctx | None = None, *, eof: bool = True) -> list[Any]:
    d = ResponsesStreamDecoder(ctx or Ctx())
    out: list[Any] = []
    for e in events:
        out += d.feed(copy.deepcopy(e))
    if eof:
        out += d.end()
    return out


S = Start("resp_1", "m", 7)
TASK = '{"task":"x"}'


def tc(
    index: int,
    args: str,
    call_id: str | None,
    name: str | None,
    item_id: str | None,
    namespace: str | None = None,
    custom: bool = False,
) -> ToolCall:
    return ToolCall(index, args, call_id, name, namespace, custom, item_id)


# -- the table: (id, upstream events, expected unified events, expected repairs) ---------------------

CASES: list[tuple[str, list[dict[str, Any]], list[Any], list[str]]] = [
    (
        "T1-1-mantle-one-tool-call",
        load("responses_mantle_function_call.jsonl"),
        [
            Start(),
            tc(0, "", "c1", "f", "fc_A"),
            tc(0, "{}", "c1", "f", "fc_A"),
            ToolCallEnd(0, "{}", "c1", "f", None),
            Finish("completed"),
        ],
        ["responses_stray_output_index", "responses_item_id_adopted", "responses_item_id_adopted"],
    ),
    (
        "T1-3-delta-routed-by-output-index",
        [
            created(),
            added(0, rs("rs_0")),
            added(1, msg("msg_X")),
            text_delta(None, "He", output_index=1),
            text_delta(None, "llo", output_index=1),
            done(0, rs("rs_0")),
            done(1, msg("msg_X", "Hello")),
            completed([rs("rs_0"), msg("msg_X", "Hello")]),
        ],
        [S, Text("He"), Text("llo"), ReasoningEnd("rs_0", None), Finish("completed")],
        ["responses_delta_item_id_remap"],  # reported once per slot
    ),
    (
        "T2-1-args-only-in-done",
        [
            created(),
            added(0, fc("fc_1", "call_1", "spawn_agent")),
            args_done("fc_1", TASK),
            completed(),
        ],
        [
            S,
            tc(0, "", "call_1", "spawn_agent", "fc_1"),
            tc(0, TASK, "call_1", "spawn_agent", "fc_1"),
            ToolCallEnd(0, TASK, "call_1", "spawn_agent", None),
            Finish("completed"),
        ],
        ["done_args_suffix"],
    ),
    (
        "T2-1-args-only-in-output-item-done",
        [
            created(),
            added(0, fc("fc_1", "call_1", "spawn_agent")),
            done(0, fc("fc_1", "call_1", "spawn_agent", TASK)),
            completed([fc("fc_1", "call_1", "spawn_agent", TASK)]),
        ],
        [
            S,
            tc(0, "", "call_1", "spawn_agent", "fc_1"),
            tc(0, TASK, "call_1", "spawn_agent", "fc_1"),
            ToolCallEnd(0, TASK, "call_1", "spawn_agent", None),
            Finish("completed"),
        ],
        ["done_args_suffix"],
    ),
    (
        "T2-2-prefix-emits-only-suffix",
        [
            created(),
            added(0, fc("fc_1", "call_1", "spawn_agent")),
            args_delta("fc_1", '{"task":'),
            args_done("fc_1", TASK),
            done(0, fc("fc_1", "call_1", "spawn_agent", TASK)),
            completed(),
        ],
        [
            S,
            tc(0, "", "call_1", "spawn_agent", "fc_1"),
            tc(0, '{"task":', "call_1", "spawn_agent", "fc_1"),
            tc(0, '"x"}', "call_1", "spawn_agent", "fc_1"),
            ToolCallEnd(0, TASK, "call_1", "spawn_agent", None),
            Finish("completed"),
        ],
        ["done_args_suffix"],
    ),
    (
        "T2-3-equivalent-json-no-extra-delta",
        [
            created(),
            added(0, fc("fc_1", "call_1", "f")),
            args_delta("fc_1", '{"task":"x","priority":1}'),
            args_done("fc_1", '{\n  "priority": 1,\n  "task": "x"\n}'),
            done(0, fc("fc_1", "call_1", "f", '{\n  "priority": 1,\n  "task": "x"\n}')),
            completed(),
        ],
        [
            S,
            tc(0, "", "call_1", "f", "fc_1"),
            tc(0, '{"task":"x","priority":1}', "call_1", "f", "fc_1"),
            ToolCallEnd(0, '{"task":"x","priority":1}', "call_1", "f", None),
            Finish("completed"),
        ],
        ["done_args_equivalent"],
    ),
    (
        "T2-4-large-ints-mismatch",
        [
            created(),
            added(0, fc("fc_1", "call_big", "f")),
            args_delta("fc_1", '{"value":9007199254740992}'),
            args_done("fc_1", '{"value":9007199254740993}'),
            done(0, fc("fc_1", "call_big", "f", '{"value":9007199254740993}')),
            completed(),
        ],
        [
            S,
            tc(0, "", "call_big", "f", "fc_1"),
            tc(0, '{"value":9007199254740992}', "call_big", "f", "fc_1"),
            ToolCallEnd(0, '{"value":9007199254740993}', "call_big", "f", None, mismatch=True),
            Finish("completed"),
        ],
        ["done_args_mismatch"],
    ),
    (
        "T2-5-late-identity-after-args",
        [
            created(),
            added(0, fc("fc_L", "call_L")),
            args_delta("fc_L", TASK),
            args_done("fc_L", TASK, name="spawn_agent", namespace="collaboration"),
            completed(),
        ],
        [
            S,
            tc(0, "", "call_L", None, "fc_L"),
            tc(0, TASK, "call_L", None, "fc_L"),
            tc(0, "", "call_L", "spawn_agent", "fc_L", "collaboration"),
            ToolCallEnd(0, TASK, "call_L", "spawn_agent", "collaboration"),
            Finish("completed"),
        ],
        ["late_tool_identity"],
    ),
    (
        "T2-5-late-identity-in-output-item-done",
        [
            created(),
            added(0, fc("fc_L", "call_L")),
            args_delta("fc_L", TASK),
            done(0, fc("fc_L", "call_L", "spawn_agent", TASK, namespace="collaboration")),
            completed(),
        ],
        [
            S,
            tc(0, "", "call_L", None, "fc_L"),
            tc(0, TASK, "call_L", None, "fc_L"),
            tc(0, "", "call_L", "spawn_agent", "fc_L", "collaboration"),
            ToolCallEnd(0, TASK, "call_L", "spawn_agent", "collaboration"),
            Finish("completed"),
        ],
        ["late_tool_identity"],
    ),
    (
        "T2-6-identity-and-args-only-in-done",
        [
            created(),
            added(0, fc("fc_L", "call_L")),
            args_done("fc_L", TASK, name="spawn_agent", namespace="collaboration"),
            done(0, fc("fc_L", "call_L", "spawn_agent", TASK, namespace="collaboration")),
            completed(),
        ],
        [
            S,
            tc(0, "", "call_L", None, "fc_L"),
            tc(0, TASK, "call_L", "spawn_agent", "fc_L", "collaboration"),
            ToolCallEnd(0, TASK, "call_L", "spawn_agent", "collaboration"),
            Finish("completed"),
        ],
        ["late_tool_identity", "done_args_suffix"],
    ),
    (
        "T2-6-call-id-learnt-late",
        [
            created(),
            added(0, fc("fc_L", None)),
            args_delta("fc_L", "{}"),
            done(0, fc("fc_L", "call_late", "f", "{}")),
            completed(),
        ],
        [
            S,
            tc(0, "", None, None, "fc_L"),
            tc(0, "{}", None, None, "fc_L"),
            tc(0, "", "call_late", "f", "fc_L"),
            ToolCallEnd(0, "{}", "call_late", "f", None),
            Finish("completed"),
        ],
        ["late_tool_identity"],
    ),
    (
        "T2-7-done-resolved-by-item-id-and-by-call-id",
        [
            created(),
            added(0, fc("fc_1", "call_1", "a")),
            added(1, fc("fc_2", "call_2", "b")),
            args_done("fc_1", '{"n":1}'),
            {"type": "response.function_call_arguments.done", "call_id": "call_2", "arguments": '{"n":2}'},
            done(1, fc("fc_2", "call_2", "b", '{"n":2}')),
            done(0, fc("fc_1", "call_1", "a", '{"n":1}')),
            completed(),
        ],
        [
            S,
            tc(0, "", "call_1", "a", "fc_1"),
            tc(1, "", "call_2", "b", "fc_2"),
            tc(0, '{"n":1}', "call_1", "a", "fc_1"),
            tc(1, '{"n":2}', "call_2", "b", "fc_2"),
            ToolCallEnd(1, '{"n":2}', "call_2", "b", None),
            ToolCallEnd(0, '{"n":1}', "call_1", "a", None),
            Finish("completed"),
        ],
        ["done_args_suffix", "done_args_suffix"],
    ),
    (
        "parallel-interleaved-deltas-keep-their-index",
        [
            created(),
            added(0, fc("fc_1", "call_1", "a")),
            added(1, fc("fc_2", "call_2", "b")),
            args_delta("fc_2", '{"y":'),
            args_delta("fc_1", '{"x":'),
            args_delta("fc_2", "2}"),
            args_delta("fc_1", "1}"),
            completed([fc("fc_1", "call_1", "a", '{"x":1}'), fc("fc_2", "call_2", "b", '{"y":2}')]),
        ],
        [
            S,
            tc(0, "", "call_1", "a", "fc_1"),
            tc(1, "", "call_2", "b", "fc_2"),
            tc(1, '{"y":', "call_2", "b", "fc_2"),
            tc(0, '{"x":', "call_1", "a", "fc_1"),
            tc(1, "2}", "call_2", "b", "fc_2"),
            tc(0, "1}", "call_1", "a", "fc_1"),
            ToolCallEnd(0, '{"x":1}', "call_1", "a", None),
            ToolCallEnd(1, '{"y":2}', "call_2", "b", None),
            Finish("completed"),
        ],
        [],
    ),
    (
        "empty-deltas-accepted",
        [
            created(),
            added(0, fc("fc_1", "call_1", "f")),
            args_delta("fc_1", ""),
            args_delta("fc_1", "{}"),
            args_delta("fc_1", ""),
            args_delta("fc_1", None),
            text_delta("msg_1", ""),
            done(0, fc("fc_1", "call_1", "f", "{}")),
            completed(),
        ],
        [
            S,
            tc(0, "", "call_1", "f", "fc_1"),
            tc(0, "{}", "call_1", "f", "fc_1"),
            ToolCallEnd(0, "{}", "call_1", "f", None),
            Finish("completed"),
        ],
        [],
    ),
    (
        "added-with-arguments-already-present",
        [created(), added(0, fc("fc_1", "call_1", "f", "{}")), done(0, fc("fc_1", "call_1", "f", "{}")), completed()],
        [S, tc(0, "{}", "call_1", "f", "fc_1"), ToolCallEnd(0, "{}", "call_1", "f", None), Finish("completed")],
        [],
    ),
    (
        "deltas-without-added-open-the-call",
        [created(), args_delta("fc_9", "{}"), done(0, fc("fc_9", "call_9", "f", "{}")), completed()],
        [
            S,
            tc(0, "{}", None, None, "fc_9"),
            tc(0, "", "call_9", "f", "fc_9"),
            ToolCallEnd(0, "{}", "call_9", "f", None),
            Finish("completed"),
        ],
        ["late_tool_identity"],
    ),
    (
        "delta-before-added-identity-from-added",
        [
            created(),
            args_delta("fc_9", "{}"),
            added(0, fc("fc_9", "call_9", "f")),
            added(0, fc("fc_9", "call_9", "f")),
            completed(),
        ],
        [
            S,
            tc(0, "{}", None, None, "fc_9"),
            tc(0, "", "call_9", "f", "fc_9"),
            ToolCallEnd(0, "{}", "call_9", "f", None),
            Finish("completed"),
        ],
        ["late_tool_identity"],
    ),
    (
        "call-without-arguments-at-all",
        [created(), added(0, fc("fc_1", "call_1", "f")), done(0, fc("fc_1", "call_1", "f")), completed()],
        [S, tc(0, "", "call_1", "f", "fc_1"), ToolCallEnd(0, "", "call_1", "f", None), Finish("completed")],
        [],
    ),
    (
        "custom-tool-call-streamed",
        [
            created(),
            added(0, ctc("ctc_1", "call_2")),
            input_delta("ctc_1", "*** Begin Patch\n", call_id="call_2"),
            input_delta("ctc_1", "*** End Patch"),
            input_done("ctc_1", "*** Begin Patch\n*** End Patch"),
            done(0, ctc("ctc_1", "call_2", inp="*** Begin Patch\n*** End Patch")),
            completed(),
        ],
        [
            S,
            tc(0, "", "call_2", "apply_patch", "ctc_1", custom=True),
            tc(0, "*** Begin Patch\n", "call_2", "apply_patch", "ctc_1", custom=True),
            tc(0, "*** End Patch", "call_2", "apply_patch", "ctc_1", custom=True),
            ToolCallEnd(0, "*** Begin Patch\n*** End Patch", "call_2", "apply_patch", None),
            Finish("completed"),
        ],
        [],
    ),
    (
        "custom-tool-call-input-only-in-done",
        [
            created(),
            added(0, ctc("ctc_1", "call_2")),
            input_done("ctc_1", "*** Begin Patch\n*** End Patch"),
            completed(),
        ],
        [
            S,
            tc(0, "", "call_2", "apply_patch", "ctc_1", custom=True),
            tc(0, "*** Begin Patch\n*** End Patch", "call_2", "apply_patch", "ctc_1", custom=True),
            ToolCallEnd(0, "*** Begin Patch\n*** End Patch", "call_2", "apply_patch", None),
            Finish("completed"),
        ],
        ["done_args_suffix"],
    ),
    (
        "custom-tool-call-no-json-equivalence",
        [
            created(),
            added(0, ctc("ctc_1", "call_2", "t")),
            input_delta("ctc_1", '{"a":1}'),
            input_done("ctc_1", '{ "a": 1 }'),
            completed(),
        ],
        [
            S,
            tc(0, "", "call_2", "t", "ctc_1", custom=True),
            tc(0, '{"a":1}', "call_2", "t", "ctc_1", custom=True),
            ToolCallEnd(0, '{ "a": 1 }', "call_2", "t", None, mismatch=True),
            Finish("completed"),
        ],
        ["done_args_mismatch"],
    ),
    (
        "text-streamed-then-done-no-duplicate",
        load("responses_text_minimal.jsonl"),
        [
            Start("resp_1"),
            Text("Hel"),
            Text("lo"),
            Usage({**ZERO_USAGE, "input_tokens": 12, "output_tokens": 2, "total_tokens": 14}),
            Finish("completed"),
        ],
        [],
    ),
    (
        "text-never-streamed-emitted-from-done",
        [created(), added(0, msg("msg_1")), done(0, msg("msg_1", "Hello")), completed([msg("msg_1", "Hello")])],
        [S, Text("Hello"), Finish("completed")],
        [],
    ),
    (
        "text-partly-streamed-suffix-from-done",
        [
            created(),
            added(0, msg("msg_1")),
            text_delta("msg_1", "Hel"),
            done(0, msg("msg_1", "Hel", "lo")),
            completed(),
        ],
        [S, Text("Hel"), Text("lo"), Finish("completed")],
        [],
    ),
    (
        "text-final-contradicts-stream-nothing-added",
        [created(), text_delta("msg_1", "Hello"), done(0, msg("msg_1", "Goodbye")), completed()],
        [S, Text("Hello"), Finish("completed")],
        [],
    ),
    (
        "text-deltas-with-no-item-reference-not-duplicated",
        [created(), text_delta(None, "Hi"), done(0, msg("msg_1", "Hi!")), completed()],
        [S, Text("Hi"), Text("!"), Finish("completed")],
        [],
    ),
    (
        "refusal-delta-and-done",
        [
            created(),
            added(0, msg("msg_1")),
            {"type": "response.refusal.delta", "item_id": "msg_1", "delta": "I can"},
            done(0, msg("msg_1", refusal="I can't")),
            completed(),
        ],
        [S, Refusal("I can"), Refusal("'t"), Finish("completed")],
        [],
    ),
    (
        "reasoning-then-function-call-fixture",
        load("responses_reasoning_function_call.jsonl"),
        [
            Start("resp_2", "gpt-5", 1700000000),
            Reasoning("Need ls.", "summary", 0),
            ReasoningEnd("rs_1", "pxy1.b64"),
            tc(0, "", "call_1", "shell_command", "fc_call_1"),
            tc(0, '{"command":"ls"}', "call_1", "shell_command", "fc_call_1"),
            ToolCallEnd(0, '{"command":"ls"}', "call_1", "shell_command", None),
            Usage(
                {
                    "input_tokens": 900,
                    "input_tokens_details": {"cached_tokens": 800, "cache_write_tokens": 0},
                    "output_tokens": 30,
                    "output_tokens_details": {"reasoning_tokens": 12},
                    "total_tokens": 930,
                }
            ),
            Finish("completed"),
        ],
        [],
    ),
    (
        "reasoning-summary-never-streamed",
        [
            created(),
            added(0, rs("rs_1")),
            summary_delta("rs_1", "A"),
            done(0, rs("rs_1", "AB", "C", enc="e")),
            completed(),
        ],
        [
            S,
            Reasoning("A", "summary", 0),
            Reasoning("B", "summary", 0),
            Reasoning("C", "summary", 1),
            ReasoningEnd("rs_1", "e"),
            Finish("completed"),
        ],
        [],
    ),
    (
        "reasoning-raw-text",
        [
            created(),
            added(0, rs("rs_1")),
            {"type": "response.reasoning_text.delta", "item_id": "rs_1", "content_index": 0, "delta": "think"},
            done(0, rs("rs_1", raw=("think more",))),
            completed(),
        ],
        [
            S,
            Reasoning("think", "raw", 0),
            Reasoning(" more", "raw", 0),
            ReasoningEnd("rs_1", None),
            Finish("completed"),
        ],
        [],
    ),
    (
        "open-reasoning-closed-at-completed",
        [created(), added(0, rs("rs_1")), summary_delta("rs_1", "x"), completed()],
        [S, Reasoning("x", "summary", 0), ReasoningEnd("rs_1", None), Finish("completed")],
        [],
    ),
    (
        "passthrough-hosted-item-once",
        [
            created(),
            added(0, {"id": "ws_1", "type": "web_search_call", "status": "in_progress"}),
            done(0, {"id": "ws_1", "type": "web_search_call", "status": "completed", "action": {"query": "q"}}),
            completed([{"id": "ws_1", "type": "web_search_call", "status": "completed", "action": {"query": "q"}}]),
        ],
        [
            S,
            Passthrough({"id": "ws_1", "type": "web_search_call", "status": "completed", "action": {"query": "q"}}),
            Finish("completed"),
        ],
        [],
    ),
    (
        "passthrough-unknown-idless-item-normalized",
        [created(), done(0, {"type": "future_thing", "output_index": 0, "x": 1}), completed()],
        [S, Passthrough({"type": "future_thing", "x": 1, "id": "<minted item_>"}), Finish("completed")],
        ["responses_stray_output_index", "responses_item_id_minted"],
    ),
    (
        "done-only-upstream-everything-in-completed",
        [
            created(),
            completed(
                [
                    rs("rs_1", "why", enc="E"),
                    msg("msg_1", "Hi"),
                    fc("fc_1", "call_1", "f", "{}"),
                    {"id": "ig_1", "type": "image_generation_call", "result": "b64"},
                ],
                usage={"input_tokens": 5, "output_tokens": 3},
            ),
        ],
        [
            S,
            Reasoning("why", "summary", 0),
            ReasoningEnd("rs_1", "E"),
            Text("Hi"),
            tc(0, "{}", "call_1", "f", "fc_1"),
            ToolCallEnd(0, "{}", "call_1", "f", None),
            Passthrough({"id": "ig_1", "type": "image_generation_call", "result": "b64"}),
            Usage({**ZERO_USAGE, "input_tokens": 5, "output_tokens": 3, "total_tokens": 8}),
            Finish("completed"),
        ],
        [],
    ),
    (
        "call-closed-from-completed-output-with-suffix",
        [
            created(),
            added(0, fc("fc_1", "call_1", "f")),
            args_delta("fc_1", '{"a"'),
            completed([fc("fc_1", "call_1", "f", '{"a":1}')]),
        ],
        [
            S,
            tc(0, "", "call_1", "f", "fc_1"),
            tc(0, '{"a"', "call_1", "f", "fc_1"),
            tc(0, ":1}", "call_1", "f", "fc_1"),
            ToolCallEnd(0, '{"a":1}', "call_1", "f", None),
            Finish("completed"),
        ],
        ["done_args_suffix"],
    ),
    (
        "incomplete-with-usage-and-reason",
        [
            created(),
            text_delta("msg_1", "par"),
            {
                "type": "response.incomplete",
                "response": {
                    "id": "resp_1",
                    "status": "incomplete",
                    "incomplete_details": {"reason": "max_output_tokens"},
                    "output": [],
                    "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
                },
            },
        ],
        [
            S,
            Text("par"),
            Usage({**ZERO_USAGE, "input_tokens": 1, "output_tokens": 2, "total_tokens": 3}),
            Finish("incomplete", reason="max_output_tokens"),
        ],
        [],
    ),
    (
        "failed-error-normalized",
        [
            created(),
            added(0, fc("fc_1", "call_1", "f")),
            args_delta("fc_1", "{"),
            {
                "type": "response.failed",
                "response": {
                    "id": "resp_1",
                    "status": "failed",
                    "error": {"code": "context_length_exceeded", "message": "too long"},
                    "output": [],
                },
            },
        ],
        [
            S,
            tc(0, "", "call_1", "f", "fc_1"),
            tc(0, "{", "call_1", "f", "fc_1"),
            ToolCallEnd(0, "{", "call_1", "f", None),
            Finish(
                "failed",
                error={"code": "context_length_exceeded", "message": "too long", "type": "server_error", "param": None},
            ),
        ],
        [],
    ),
    (
        "failed-without-error-object",
        [created(), {"type": "response.failed", "response": {"id": "resp_1", "status": "failed", "error": None}}],
        [
            S,
            Finish(
                "failed",
                error={
                    "code": "upstream_failed",
                    "message": "upstream reported response.failed",
                    "type": "server_error",
                    "param": None,
                },
            ),
        ],
        [],
    ),
    (
        "error-event-then-failed-gives-one-finish",
        [
            created(),
            text_delta("msg_1", "a"),
            {
                "type": "error",
                "code": "rate_limit_exceeded",
                "message": "slow down",
                "param": None,
                "sequence_number": 3,
            },
            {"type": "response.failed", "response": {"id": "resp_1", "error": {"code": "other", "message": "m"}}},
            text_delta("msg_1", "ignored"),
        ],
        [
            S,
            Text("a"),
            Finish(
                "failed",
                error={"code": "rate_limit_exceeded", "message": "slow down", "type": "server_error", "param": None},
            ),
        ],
        [],
    ),
    (
        "error-event-nested-shape",
        [
            created(),
            {
                "type": "error",
                "error": {"type": "invalid_request_error", "code": "invalid_prompt", "message": "no", "param": "input"},
            },
        ],
        [
            S,
            Finish(
                "failed",
                error={"code": "invalid_prompt", "message": "no", "type": "invalid_request_error", "param": "input"},
            ),
        ],
        [],
    ),
    (
        "truncated-stream-closes-open-call",
        [created(), added(0, fc("fc_1", "call_1", "f")), args_delta("fc_1", '{"a":'), added(1, rs("rs_1"))],
        [
            S,
            tc(0, "", "call_1", "f", "fc_1"),
            tc(0, '{"a":', "call_1", "f", "fc_1"),
            ToolCallEnd(0, '{"a":', "call_1", "f", None),
            ReasoningEnd("rs_1", None),
            Finish("failed", error=TRUNCATED),
        ],
        [],
    ),
    (
        "empty-stream-still-start-and-finish",
        [],
        [Start(), Finish("failed", error=TRUNCATED)],
        [],
    ),
    (
        "start-emitted-before-first-non-created-event-and-once",
        [
            text_delta("msg_1", "a"),
            created(),
            {"type": "response.in_progress", "response": {"id": "resp_1"}},
            completed(),
        ],
        [Start(), Text("a"), Finish("completed")],
        [],
    ),
    (
        "start-taken-from-in-progress-when-first",
        [{"type": "response.in_progress", "response": {"id": "resp_9", "model": "x", "created_at": 3}}, completed()],
        [Start("resp_9", "x", 3), Finish("completed")],
        [],
    ),
    (
        "unknown-and-lifecycle-events-ignored",
        [
            created(),
            {"type": "response.content_part.added", "item_id": "msg_1", "part": {"type": "output_text", "text": ""}},
            {"type": "response.output_text.annotation.added", "item_id": "msg_1"},
            {"type": "response.brand_new_event", "x": 1},
            {"type": "response.reasoning_summary_part.added", "item_id": "rs_1", "summary_index": 0},
            {"foo": "no type at all"},
            completed(),
        ],
        [S, Finish("completed")],
        [],
    ),
    (
        "events-after-finish-ignored",
        [created(), completed(), text_delta("msg_1", "late"), completed(), created()],
        [S, Finish("completed")],
        [],
    ),
    (
        "usage-normalised-partial-object",
        [
            created(),
            completed(
                usage={
                    "input_tokens": 10,
                    "input_tokens_details": None,
                    "output_tokens": 4,
                    "output_tokens_details": {"reasoning_tokens": 2},
                }
            ),
        ],
        [
            S,
            Usage(
                {
                    **ZERO_USAGE,
                    "input_tokens": 10,
                    "output_tokens": 4,
                    "output_tokens_details": {"reasoning_tokens": 2},
                    "total_tokens": 14,
                }
            ),
            Finish("completed"),
        ],
        [],
    ),
]


def _fill_minted(expected: list[Any], got: list[Any]) -> list[Any]:
    """Replace '<minted prefix>' placeholders by the id the decoder produced, after checking its shape."""
    out = []
    for e, g in zip(expected, got, strict=False):
        if isinstance(e, Passthrough) and isinstance(e.item.get("id"), str) and e.item["id"].startswith("<minted "):
            prefix = e.item["id"][len("<minted ") : -1]
            assert isinstance(g, Passthrough) and re.fullmatch(prefix + "[0-9a-f]{32}", g.item["id"])
            e = Passthrough({**e.item, "id": g.item["id"]})
        out.append(e)
    return out + expected[len(out) :]


@pytest.mark.parametrize(("events", "expected", "repairs"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decoder_table(events: list[dict[str, Any]], expected: list[Any], repairs: list[str]) -> None:
    ctx = Ctx()
    got = decode(events, ctx)
    assert got == _fill_minted(expected, got)
    assert ctx.repairs == repairs


def test_T1_2_done_only_minted_id_one_call() -> None:
    ctx = Ctx()
    d = ResponsesStreamDecoder(ctx)
    ev_done = done(0, fc(None, "c9", "f", "{}"))
    ev_completed = completed([fc(None, "c9", "f", "{}")])
    got = d.feed(ev_done) + d.feed(ev_completed) + d.end()
    fid = ev_done["item"]["id"]
    assert re.fullmatch("fc_[0-9a-f-]{32,36}", fid)
    assert ev_completed["response"]["output"][0]["id"] == fid
    assert got == [Start(), tc(0, "{}", "c9", "f", fid), ToolCallEnd(0, "{}", "c9", "f", None), Finish("completed")]
    assert ctx.repairs == ["responses_item_id_minted", "responses_item_id_adopted"]


def test_T1_4_idless_message_and_reasoning_get_ids() -> None:
    d = ResponsesStreamDecoder(Ctx())
    evs = [
        added(0, rs(None)),
        added(1, msg(None)),
        done(0, rs(None, "s")),
        done(1, msg(None, "t")),
        completed([rs(None, "s"), msg(None, "t")]),
    ]
    got: list[Any] = []
    for e in evs:
        got += d.feed(e)
    rid, mid = evs[0]["item"]["id"], evs[1]["item"]["id"]
    assert rid.startswith("rs_") and mid.startswith("msg_") and rid != mid
    assert evs[2]["item"]["id"] == rid and evs[3]["item"]["id"] == mid
    assert got == [Start(), Reasoning("s", "summary", 0), ReasoningEnd(rid, None), Text("t"), Finish("completed")]


def test_end_after_finish_is_empty_and_end_is_idempotent() -> None:
    d = ResponsesStreamDecoder(Ctx())
    assert d.feed(created()) == [S]
    assert d.feed(completed()) == [Finish("completed")]
    assert d.end() == []
    d2 = ResponsesStreamDecoder(Ctx())
    d2.feed(created())
    assert d2.end() == [Finish("failed", error=TRUNCATED)]
    assert d2.end() == []
    assert d2.feed(completed()) == []


# -- decode_response: non-streaming objects ---------------------------------------------------------

RESPONSE_CASES: list[tuple[str, dict[str, Any], list[Any]]] = [
    (
        "completed-object",
        {
            "id": "resp_o",
            "object": "response",
            "model": "gpt-5",
            "created_at": 11,
            "status": "completed",
            "output": [
                rs("rs_1", "plan", enc="E"),
                msg("msg_1", "Hi"),
                fc("fc_1", "call_1", "f", '{"a":1}', namespace="mcp__gh__"),
            ],
            "usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
        },
        [
            Start("resp_o", "gpt-5", 11),
            Reasoning("plan", "summary", 0),
            ReasoningEnd("rs_1", "E"),
            Text("Hi"),
            tc(0, '{"a":1}', "call_1", "f", "fc_1", "mcp__gh__"),
            ToolCallEnd(0, '{"a":1}', "call_1", "f", "mcp__gh__"),
            Usage({**ZERO_USAGE, "input_tokens": 3, "output_tokens": 4, "total_tokens": 7}),
            Finish("completed"),
        ],
    ),
    (
        "incomplete-object",
        {
            "id": "resp_o",
            "status": "incomplete",
            "incomplete_details": {"reason": "content_filter"},
            "output": [msg("msg_1", "par")],
        },
        [Start("resp_o"), Text("par"), Finish("incomplete", reason="content_filter")],
    ),
    (
        "failed-object",
        {"id": "resp_o", "status": "failed", "error": {"code": "server_error", "message": "boom"}, "output": []},
        [
            Start("resp_o"),
            Finish("failed", error={"code": "server_error", "message": "boom", "type": "server_error", "param": None}),
        ],
    ),
    (
        "no-status-custom-call",
        {"id": "resp_o", "output": [ctc("ctc_1", "call_2", inp="*** Begin Patch\n*** End Patch")]},
        [
            Start("resp_o"),
            tc(0, "*** Begin Patch\n*** End Patch", "call_2", "apply_patch", "ctc_1", custom=True),
            ToolCallEnd(0, "*** Begin Patch\n*** End Patch", "call_2", "apply_patch", None),
            Finish("completed"),
        ],
    ),
]


@pytest.mark.parametrize(("obj", "expected"), [c[1:] for c in RESPONSE_CASES], ids=[c[0] for c in RESPONSE_CASES])
def test_decode_response(obj: dict[str, Any], expected: list[Any]) -> None:
    ctx = Ctx()
    assert decode_response(obj, ctx) == expected
    assert ctx.repairs == []


def test_decode_response_mantle_object_ids_resolved() -> None:
    ctx = Ctx()
    obj = {
        "id": "resp_m",
        "status": "completed",
        "output": [
            {
                "item_id": "fc_M",
                "output_index": 0,
                "type": "function_call",
                "call_id": "c",
                "name": "f",
                "arguments": "{}",
            }
        ],
    }
    got = decode_response(obj, ctx)
    assert got == [
        Start("resp_m"),
        tc(0, "{}", "c", "f", "fc_M"),
        ToolCallEnd(0, "{}", "c", "f", None),
        Finish("completed"),
    ]
    assert obj["output"][0] == {"id": "fc_M", "type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}


# -- nothing lost: random delta splits ------------------------------------------------------------------


@st.composite
def _split_stream(draw: st.DrawFn) -> tuple[str, list[str], str, bool]:
    full = draw(st.text(max_size=40))
    streamed_upto = draw(st.integers(min_value=0, max_value=len(full)))
    cuts = sorted(draw(st.lists(st.integers(min_value=0, max_value=streamed_upto), max_size=6)))
    pieces, prev = [], 0
    for c in [*cuts, streamed_upto]:
        pieces.append(full[prev:c])  # '' pieces are empty deltas, accepted
        prev = c
    # where the authoritative text shows up: nowhere, arguments.done, output_item.done, both, completed.output
    done_kind = draw(st.sampled_from(["none", "args_done", "item_done", "both", "completed"]))
    custom = draw(st.booleans())
    return full, pieces, done_kind, custom


@settings(max_examples=300, deadline=None)
@given(_split_stream())
def test_nothing_lost_random_splits(case: tuple[str, list[str], str, bool]) -> None:
    full, pieces, done_kind, custom = case
    if custom:
        item = ctc("x_1", "call_1", "t")
        mk_delta, mk_done, key = input_delta, input_done, "input"
    else:
        item = fc("x_1", "call_1", "f")
        mk_delta, mk_done, key = args_delta, args_done, "arguments"
    final_item = {**item, key: full}
    events: list[dict[str, Any]] = [created(), added(0, item)]
    events += [mk_delta("x_1", p) for p in pieces]
    if done_kind in ("args_done", "both"):
        events.append(mk_done("x_1", full))
    if done_kind in ("item_done", "both"):
        events.append(done(0, final_item))
    events.append(completed([final_item] if done_kind == "completed" else []))
    got = decode(events)
    expected_text = "".join(pieces) if done_kind == "none" else full
    calls = [e for e in got if isinstance(e, ToolCall)]
    ends = [e for e in got if isinstance(e, ToolCallEnd)]
    assert all(c.index == 0 and c.call_id == "call_1" and c.custom is custom for c in calls)
    assert "".join(c.arguments for c in calls) == expected_text
    assert len(ends) == 1 and ends[0].arguments == expected_text and not ends[0].mismatch
    assert got[0] == S and got[-1] == Finish("completed")
