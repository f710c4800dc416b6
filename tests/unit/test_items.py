"""The item and tool policy table (transformers/items.py) held to the code, cell by cell, and
to what the pinned clients send."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from transformers import items
from transformers.bridge import open_bridge
from transformers.compaction import compaction_item
from transformers.context import Ctx
from transformers.errors import RequestError

ROOT = Path(__file__).resolve().parents[2]
KEY = b"k" * 32

NATIVE = ("responses_native", "native_compaction", "strip_reasoning_envelope")
QUIRKS: dict[str, tuple[str, ...]] = {"native": NATIVE, "responses": ("strip_reasoning_envelope",), "chat": ()}
UPSTREAM = {"native": "responses", "responses": "responses", "chat": "chat"}


def ctx(kind: str) -> Ctx:
    return Ctx(quirks=frozenset(QUIRKS[kind]), upstream_model="up", public_model="pub", compaction_key=KEY)


def user(text: str = "hi") -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


EXEC = {"type": "custom", "name": "exec", "description": "Run JavaScript", "format": {"type": "text"}}
WAIT = {"type": "function", "name": "wait", "parameters": {"type": "object", "properties": {"ms": {"type": "number"}}}}
CODE_MODE_TOOLS = [
    {"type": "namespace", "name": "functions", "description": "", "tools": [EXEC, WAIT]},
    {"type": "namespace", "name": "clock", "tools": [{"type": "function", "name": "sleep", "parameters": {}}]},
]

# one sample per input item type (with what it needs around it: a call's output)
SAMPLES: dict[str, list[dict[str, Any]]] = {
    "message": [user("hello")],
    "reasoning": [
        user(),
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
    ],
    "function_call": [
        user(),
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
    ],
    "function_call_output": [
        user(),
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
    ],
    "custom_tool_call": [
        user(),
        {"type": "custom_tool_call", "call_id": "c2", "name": "exec", "namespace": "functions", "input": "text('x')"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "x"},
    ],
    "custom_tool_call_output": [
        user(),
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "ok"},
    ],
    "compaction": [compaction_item("earlier: the user asked for tests", ctx("chat")), user()],
    "compaction_trigger": [user(), {"type": "compaction_trigger"}],
    "item_reference": [user(), {"type": "item_reference", "id": "msg_upstream_own"}],
    "additional_tools": [{"type": "additional_tools", "role": "developer", "tools": CODE_MODE_TOOLS}, user()],
    "local_shell_call": [
        user(),
        {
            "type": "local_shell_call",
            "id": "ls_1",
            "call_id": "c3",
            "status": "completed",
            "action": {"type": "exec", "command": ["ls"]},
        },  # fmt: skip
        {"type": "local_shell_call_output", "call_id": "c3", "output": "a.txt"},
    ],
    "local_shell_call_output": [
        user(),
        {"type": "local_shell_call", "id": "ls_1", "call_id": "c3", "action": {"type": "exec", "command": ["ls"]}},
        {"type": "local_shell_call_output", "call_id": "c3", "output": "a.txt"},
    ],
    "mcp_call": [
        user(),
        {"type": "mcp_call", "id": "mcp_1", "server_label": "gh", "name": "get_me", "arguments": "{}", "output": "me"},
    ],
    "tool_search_call": [user(), {"type": "tool_search_call", "call_id": "ts1", "arguments": {"query": "git"}}],
    "tool_search_output": [user(), {"type": "tool_search_output", "call_id": "ts1", "tools": [WAIT]}],
    "computer_call": [user(), {"type": "computer_call", "call_id": "cc1", "action": {"type": "click"}}],
    "computer_call_output": [user(), {"type": "computer_call_output", "call_id": "cc1", "output": {}}],
    "mcp_approval_request": [user(), {"type": "mcp_approval_request", "id": "a1", "name": "x", "arguments": "{}"}],
    "mcp_approval_response": [user(), {"type": "mcp_approval_response", "approval_request_id": "a1", "approve": True}],
    "context_compaction": [{"type": "context_compaction", "encrypted_content": "blob"}, user()],
    "web_search_call": [user(), {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {}}],
    "file_search_call": [user(), {"type": "file_search_call", "id": "fs_1", "queries": ["q"]}],
    "image_generation_call": [user(), {"type": "image_generation_call", "id": "ig_1", "result": "iVBOR"}],
    "code_interpreter_call": [user(), {"type": "code_interpreter_call", "id": "ci_1", "code": "1+1"}],
    "mcp_list_tools": [user(), {"type": "mcp_list_tools", "id": "ml_1", "server_label": "gh", "tools": []}],
    "ghost_snapshot": [user(), {"type": "ghost_snapshot", "ghost_commit": {"id": "abc"}}],
}


def body(input_items: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    fn = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
    return {"model": "pub", "input": input_items, "tools": [fn], "stream": True, **kw}


def test_every_row_has_a_sample_and_every_sample_a_row() -> None:
    assert set(SAMPLES) == set(items.INPUT_ITEMS)


def _send(kind: str, input_items: list[dict[str, Any]], **kw: Any) -> tuple[dict[str, Any], Ctx]:
    c = ctx(kind)
    out, _ = open_bridge(body(orjson.loads(orjson.dumps(input_items)), **kw), "responses", UPSTREAM[kind], c)
    return out, c


@pytest.mark.parametrize("kind", items.KINDS)
@pytest.mark.parametrize("item_type", sorted(items.INPUT_ITEMS))
def test_each_cell_does_what_the_table_says(item_type: str, kind: str) -> None:
    action = items.INPUT_ITEMS[item_type].action(kind)  # type: ignore[arg-type]
    sample = SAMPLES[item_type]
    if item_type == "compaction" and kind == "native":  # the upstream's own; ours is expanded everywhere
        sample = [{"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA-theirs"}, user()]
    index = next(i for i, it in enumerate(sample) if it.get("type") == item_type)
    if action in ("refuse", "resolve") and kind != "native":
        # resolve: one that reaches the transformers was not resolved by the app's store
        with pytest.raises(RequestError) as e:
            _send(kind, sample)
        assert e.value.param == f"input[{index}]" and item_type in e.value.message
        return
    out, c = _send(kind, sample)
    sent = out.get("input") if kind != "chat" else out["messages"]
    if action in ("pass", "resolve"):
        assert sample[index] in sent, f"{item_type} must pass as sent"
        assert not c.dropped_items
    elif action == "translate":
        assert not c.dropped_items and "input_item_dropped" not in c.repairs
        if kind != "chat":
            assert sample[index] not in sent  # rewritten, not passed as is
    elif action == "drop":
        assert c.dropped_items == [f"input[{index}]:{item_type}"]
        assert "hosted_call_dropped" in c.repairs
        assert all(it.get("type") != item_type for it in sent if isinstance(it, dict))
    else:  # refuse on native cannot be: native passes everything
        raise AssertionError(f"{item_type}: native {action}")


@pytest.mark.parametrize("kind", items.KINDS)
def test_unknown_item_type(kind: str) -> None:
    sample = [user(), {"type": "hologram_call", "id": "h1"}]
    if kind == "native":
        out, c = _send(kind, sample)
        assert sample[1] in out["input"] and not c.dropped_items
        return
    out, c = _send(kind, sample)
    assert c.dropped_items == ["input[1]:hologram_call"] and "unknown_item_dropped" in c.repairs


@pytest.mark.parametrize("kind", items.KINDS)
@pytest.mark.parametrize("tool_type", sorted(items.TOOLS))
def test_each_tool_cell_does_what_the_table_says(tool_type: str, kind: str) -> None:
    action = items.TOOLS[tool_type].action(kind)  # type: ignore[arg-type]
    tool: dict[str, Any] = {"type": tool_type}
    if tool_type in ("function", "custom"):
        tool["name"] = "t"
    if tool_type == "namespace":
        tool.update(name="ns", tools=[WAIT])
    fn = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
    c = ctx(kind)
    out, _ = open_bridge({"model": "pub", "input": "hi", "tools": [tool, fn]}, "responses", UPSTREAM[kind], c)
    names = [t.get("function", {}).get("name") if kind == "chat" else t.get("type") for t in out["tools"]]
    if action == "pass":
        assert tool_type in names and not c.tools.dropped
    elif action == "translate":
        assert len(names) == 2 and not c.tools.dropped
    else:
        assert action == "drop" and c.tools.dropped == [tool_type] and names == ["f"]


def test_code_mode_toward_chat_flattens_the_namespaces() -> None:
    out, c = _send("chat", SAMPLES["additional_tools"], tools=None)
    names = [t["function"]["name"] for t in out["tools"]]
    assert names == ["functions__exec", "functions__wait", "clock__sleep"]
    assert c.tools.namespaces["functions__exec"] == ("functions", "exec")
    assert "functions__exec" in c.tools.custom  # freeform input, as custom tools
    assert out["messages"] == [{"role": "user", "content": "hi"}]  # the item itself is no message
    assert "additional_tools_hoisted" in c.repairs


def test_code_mode_toward_responses_hoists_the_tools_and_keeps_the_namespaces() -> None:
    fn = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
    out, c = _send("responses", SAMPLES["additional_tools"])
    assert [t["type"] for t in out["tools"]] == ["function", "namespace", "namespace"]
    assert out["tools"][0]["name"] == fn["name"] and out["tools"][1]["tools"][0]["name"] == "exec"
    assert all(it.get("type") != "additional_tools" for it in out["input"])
    # native: untouched (OpenAI serves responses-lite)
    out, c = _send("native", SAMPLES["additional_tools"])
    assert out["input"][0]["type"] == "additional_tools" and len(out["tools"]) == 1


def test_code_mode_tool_choice_naming_a_namespaced_tool() -> None:
    choice = {"type": "custom", "name": "exec", "namespace": "functions"}
    out, _ = _send("chat", SAMPLES["additional_tools"], tool_choice=choice)
    assert out["tool_choice"] == {"type": "function", "function": {"name": "functions__exec"}}


def test_code_mode_history_keeps_the_namespace_toward_chat() -> None:
    out, _ = _send("chat", SAMPLES["additional_tools"][:1] + SAMPLES["custom_tool_call"])
    call = out["messages"][1]["tool_calls"][0]
    assert call["function"] == {"name": "functions__exec", "arguments": '{"input":"text(\'x\')"}'}


def test_local_shell_and_mcp_calls_translated() -> None:
    out, c = _send("chat", SAMPLES["local_shell_call"] + SAMPLES["mcp_call"][1:])
    msgs = out["messages"]
    assert msgs[1]["tool_calls"][0]["function"] == {
        "name": "local_shell",
        "arguments": '{"type":"exec","command":["ls"]}',
    }
    assert msgs[2] == {"role": "tool", "tool_call_id": "c3", "content": "a.txt"}
    assert msgs[3]["tool_calls"][0]["function"]["name"] == "gh__get_me"
    assert msgs[4]["content"] == "me"
    assert c.repairs.count("hosted_call_translated") == 2


def test_additional_tools_without_a_tools_array_is_refused() -> None:
    with pytest.raises(RequestError) as e:
        _send("chat", [{"type": "additional_tools", "role": "developer"}, user()])
    assert e.value.param == "input[0].tools"


# -- what the pinned clients send is in the table ---------------------------------------------

# item and tool types named by Codex 0.171's binary and issues (docs/clients.md), besides
# those seen in the recorded requests below
CODEX_0171_NAMES = {
    "additional_tools", "tool_search_call", "tool_search_output", "image_generation_call", "web_search_call",
    "local_shell_call", "ghost_snapshot", "context_compaction", "compaction", "compaction_trigger",
}  # fmt: skip
# `mcp_tool_call` in the binary is Codex's own history item, sent to the API as `mcp_call`;
# `defer_loading` is a field of a tool, not a type (a Chat upstream gets the tool offered)


def _types_in(obj: Any, out: dict[str, set[str]]) -> None:
    """Collect input item types and tool types from recorded request bodies."""
    if isinstance(obj, dict):
        if isinstance(obj.get("input"), list):
            for it in obj["input"]:
                if isinstance(it, dict):
                    out["items"].add(items.item_type(it))
                    for t in it.get("tools") or () if it.get("type") == "additional_tools" else ():
                        out["tools"].add(t.get("type"))
        for t in obj.get("tools") or () if isinstance(obj.get("tools"), list) else ():
            if isinstance(t, dict) and isinstance(t.get("type"), str):
                out["tools"].add(t["type"])
        for v in obj.values():
            _types_in(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _types_in(v, out)


def _recorded_requests() -> list[Path]:
    found = sorted((ROOT / "tests" / "fixtures").glob("*request*.json"))
    found += sorted((ROOT / "tests" / "fixtures").glob("codex_tools_*.json"))
    found += sorted((ROOT / "tests" / "e2e" / "fixtures").glob("*.json"))
    return found


def test_every_type_a_pinned_client_sends_is_in_the_table() -> None:
    seen: dict[str, set[str]] = {"items": set(), "tools": set()}
    files = _recorded_requests()
    assert len(files) >= 3
    for path in files:
        _types_in(json.loads(path.read_text()), seen)
    seen["items"] |= CODEX_0171_NAMES
    assert {"message", "function_call", "function_call_output"} <= seen["items"]
    assert sorted(seen["items"] - set(items.INPUT_ITEMS)) == []
    assert sorted(seen["tools"] - set(items.TOOLS) - {None}) == []


def test_the_docs_render_the_table() -> None:
    doc = (ROOT / "docs" / "items.md").read_text()
    for table in (items.INPUT_ITEMS, items.TOOLS):
        for name, p in table.items():
            row = f"| `{name}` | {p.native} | {p.responses} | {p.chat} |"
            assert row in doc, row


def test_a_long_unknown_type_is_named_bounded() -> None:
    out, c = _send("chat", [user(), {"type": "x" * 5000}])
    assert c.dropped_items == ["input[1]:" + "x" * 64] and "unknown_item_dropped" in c.repairs
