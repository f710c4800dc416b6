"""ResponsesNormalizer: item ids resolved once at the stream boundary (docs/rules.md §2, T1-1…T1-4)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from transformers.context import Ctx
from transformers.normalize import ResponsesNormalizer

FIXTURES = Path(__file__).parent.parent / "fixtures"
UUID_HEX = "[0-9a-f-]{32,36}"


def load(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]


def run(events: list[dict[str, Any]], ctx: Ctx | None = None) -> list[dict[str, Any]]:
    n = ResponsesNormalizer(ctx)
    return [n.feed(copy.deepcopy(e)) for e in events]


def added(i: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": i, "item": item}


def done(i: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.done", "output_index": i, "item": item}


def test_T1_1_mantle_fixture() -> None:
    ctx = Ctx()
    out = run(load("responses_mantle_function_call.jsonl"), ctx)
    assert out[2]["item"] == {"id": "fc_A", "type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    assert out[3]["response"]["output"] == [
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "id": "fc_A"}
    ]
    assert ctx.repairs == [
        "responses_stray_output_index",
        "responses_item_id_adopted",  # done: item_id → id
        "responses_item_id_adopted",  # completed.output[0]: slot 0
    ]


def test_T1_2_done_only_minted_id_reused_in_completed() -> None:
    ctx = Ctx()
    out = run(
        [
            done(0, {"type": "function_call", "call_id": "c9", "name": "f", "arguments": "{}"}),
            {"type": "response.completed", "response": {"output": [{"type": "function_call", "call_id": "c9"}]}},
        ],
        ctx,
    )
    fid = out[0]["item"]["id"]
    assert re.fullmatch(f"fc_{UUID_HEX}", fid)
    assert out[1]["response"]["output"][0]["id"] == fid
    assert ctx.repairs == ["responses_item_id_minted", "responses_item_id_adopted"]


def test_T1_3_delta_without_item_id_routed_by_output_index() -> None:
    ctx = Ctx()
    out = run(
        [
            added(0, {"id": "rs_0", "type": "reasoning", "summary": []}),
            added(1, {"id": "msg_X", "type": "message", "role": "assistant", "content": []}),
            {"type": "response.output_text.delta", "output_index": 1, "content_index": 0, "delta": "hi"},
            {"type": "response.reasoning_summary_text.delta", "output_index": 0, "summary_index": 0, "delta": "r"},
        ],
        ctx,
    )
    assert out[2]["item_id"] == "msg_X"
    assert out[3]["item_id"] == "rs_0"
    assert ctx.repairs == ["responses_delta_item_id_remap"] * 2


def test_T1_3_remap_reported_once_per_slot() -> None:
    ctx = Ctx()
    out = run(
        [added(1, {"id": "msg_X", "type": "message"})]
        + [{"type": "response.output_text.delta", "output_index": 1, "delta": str(i)} for i in range(3)],
        ctx,
    )
    assert [e["item_id"] for e in out[1:]] == ["msg_X"] * 3
    assert ctx.repairs == ["responses_delta_item_id_remap"]


def test_T1_4_idless_message_and_reasoning() -> None:
    out = run(
        [
            added(0, {"type": "reasoning", "summary": []}),
            added(1, {"type": "message", "role": "assistant", "content": []}),
            done(0, {"type": "reasoning", "summary": []}),
            done(1, {"type": "message", "role": "assistant", "content": []}),
        ]
    )
    rs_added, msg_added, rs_done, msg_done = (e["item"]["id"] for e in out)
    assert re.fullmatch(f"rs_{UUID_HEX}", rs_added)
    assert re.fullmatch(f"msg_{UUID_HEX}", msg_added)
    assert rs_added != msg_added
    assert rs_done == rs_added and msg_done == msg_added


def test_T1_4_two_idless_items_same_type_distinct_ids() -> None:
    out = run([added(0, {"type": "message"}), added(1, {"type": "message"})])
    assert out[0]["item"]["id"] != out[1]["item"]["id"]


MINT_PREFIX = [
    ("function_call", "fc_"),
    ("message", "msg_"),
    ("reasoning", "rs_"),
    ("compaction", "cmp_"),
    ("custom_tool_call", "ctc_"),
    ("web_search_call", "item_"),
    ("something_new", "item_"),
]


@pytest.mark.parametrize(("item_type", "prefix"), MINT_PREFIX, ids=[f"T1-4-mint-{t}" for t, _ in MINT_PREFIX])
def test_mint_prefix_by_type(item_type: str, prefix: str) -> None:
    (ev,) = run([done(3, {"type": item_type})])
    assert re.fullmatch(f"{prefix}{UUID_HEX}", ev["item"]["id"])


# (id, events in, index of the event to check, expected event out, expected repairs)
TABLE: list[tuple[str, list[dict[str, Any]], int, dict[str, Any], list[str]]] = [
    (
        "delta-with-item-id-untouched",
        [
            added(0, {"id": "msg_1", "type": "message"}),
            {"type": "response.output_text.delta", "item_id": "msg_9", "output_index": 0, "delta": "x"},
        ],
        1,
        {"type": "response.output_text.delta", "item_id": "msg_9", "output_index": 0, "delta": "x"},
        [],
    ),
    (
        "delta-unknown-slot-untouched",
        [{"type": "response.function_call_arguments.delta", "output_index": 4, "delta": "x"}],
        0,
        {"type": "response.function_call_arguments.delta", "output_index": 4, "delta": "x"},
        [],
    ),
    (
        "T1-3-function-args-done-remapped",
        [
            added(0, {"id": "fc_1", "type": "function_call", "call_id": "c", "name": "f", "arguments": ""}),
            {"type": "response.function_call_arguments.done", "output_index": 0, "arguments": "{}"},
        ],
        1,
        {"type": "response.function_call_arguments.done", "output_index": 0, "arguments": "{}", "item_id": "fc_1"},
        ["responses_delta_item_id_remap"],
    ),
    (
        "T1-3-custom-input-delta-remapped",
        [
            added(2, {"id": "ctc_1", "type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": ""}),
            {"type": "response.custom_tool_call_input.delta", "output_index": 2, "delta": "*** Begin"},
        ],
        1,
        {"type": "response.custom_tool_call_input.delta", "output_index": 2, "delta": "*** Begin", "item_id": "ctc_1"},
        ["responses_delta_item_id_remap"],
    ),
    (
        "item-id-key-dropped-when-id-present",
        [done(0, {"id": "fc_1", "item_id": "fc_1", "type": "function_call"})],
        0,
        done(0, {"id": "fc_1", "type": "function_call"}),
        [],
    ),
    (
        "stray-output-index-used-as-slot",
        [
            added(5, {"id": "fc_5", "type": "function_call"}),
            {"type": "response.output_item.done", "item": {"type": "function_call", "output_index": 5}},
        ],
        1,
        {"type": "response.output_item.done", "item": {"type": "function_call", "id": "fc_5"}},
        ["responses_stray_output_index", "responses_item_id_adopted"],
    ),
    (
        "incomplete-output-resolved-by-position",
        [
            added(0, {"id": "rs_1", "type": "reasoning"}),
            added(1, {"id": "msg_1", "type": "message"}),
            {
                "type": "response.incomplete",
                "response": {
                    "output": [{"type": "reasoning"}, {"item_id": "msg_1", "output_index": 1, "type": "message"}]
                },
            },
        ],
        2,
        {
            "type": "response.incomplete",
            "response": {"output": [{"type": "reasoning", "id": "rs_1"}, {"type": "message", "id": "msg_1"}]},
        },
        ["responses_item_id_adopted", "responses_stray_output_index", "responses_item_id_adopted"],
    ),
    (
        "failed-output-resolved-by-position",
        [
            added(0, {"id": "fc_1", "type": "function_call"}),
            {"type": "response.failed", "response": {"output": [{"type": "function_call"}], "error": None}},
        ],
        1,
        {"type": "response.failed", "response": {"output": [{"type": "function_call", "id": "fc_1"}], "error": None}},
        ["responses_item_id_adopted"],
    ),
    (
        "created-output-untouched",
        [{"type": "response.created", "response": {"id": "r", "output": [{"type": "message"}]}}],
        0,
        {"type": "response.created", "response": {"id": "r", "output": [{"type": "message"}]}},
        [],
    ),
    (
        "non-dict-item-untouched",
        [{"type": "response.output_item.added", "output_index": 0, "item": None}],
        0,
        {"type": "response.output_item.added", "output_index": 0, "item": None},
        [],
    ),
]


@pytest.mark.parametrize(("events", "at", "expected", "repairs"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE])
def test_normalizer_table(events: list[dict[str, Any]], at: int, expected: dict[str, Any], repairs: list[str]) -> None:
    ctx = Ctx()
    out = run(events, ctx)
    assert out[at] == expected
    assert ctx.repairs == repairs


def test_feed_returns_same_dict_and_works_without_ctx() -> None:
    n = ResponsesNormalizer()
    ev = done(0, {"type": "message"})
    assert n.feed(ev) is ev
    assert ev["item"]["id"].startswith("msg_")


def test_every_item_has_id_after_fixture() -> None:
    for name in ("responses_mantle_function_call.jsonl", "responses_reasoning_function_call.jsonl"):
        for ev in run(load(name)):
            if "item" in ev:
                assert ev["item"]["id"]
                assert "output_index" not in ev["item"] and "item_id" not in ev["item"]
