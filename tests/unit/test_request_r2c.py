"""Responses request → Chat request (docs/rules.md §1 request-level case, §5.2, §7.1, R3-d, T3-13,
docs/rules.md F13, F14, F16, F17, F18)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from transformers.context import Ctx, flatten_name
from transformers.envelope import seal
from transformers.errors import RequestError
from transformers.request_quirks import prepare_chat
from transformers.request_r2c import responses_to_chat

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
KEY = b"unit-test-envelope-key"
PATCH = '*** Begin Patch\n*** Update File: a.py\n@@\n-print("héllo")\n+print("héllo ✓")\n*** End Patch'


def codex_request() -> dict:
    return json.loads((FIXTURES / "codex_request.json").read_text(encoding="utf-8"))


def ctx(*quirks: str, **kw) -> Ctx:
    return Ctx(quirks=frozenset(quirks), upstream_model=kw.pop("upstream_model", "up-model"), **kw)


def user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def fc(call_id: str, name: str = "f", arguments: str = "{}", **kw) -> dict:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments, **kw}


def fco(call_id: str, output="ok") -> dict:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def rs(text: str, **kw) -> dict:
    return {"type": "reasoning", "summary": [{"type": "summary_text", "text": text}], **kw}


def asst(text: str) -> dict:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def tc(id_: str, name: str = "f", arguments: str = "{}") -> dict:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


# -- docs/rules.md §1 request-level case --------------------------------------------------------------

SEED000_INPUT = [
    user("read a.py"),
    fc("functions.Read:0", "Read", '{"path":"a.py"}'),
    fco("functions.Read:0", "print(1)"),
]


def test_seed000_codex_to_kimi_keeps_canonical_id():
    out = responses_to_chat({"model": "kimi-k2.6", "input": copy.deepcopy(SEED000_INPUT)}, ctx())
    assert out["messages"][1]["tool_calls"][0]["id"] == "functions.Read:0"
    assert out["messages"][2]["tool_call_id"] == "functions.Read:0"
    assert out == {
        "model": "up-model",
        "messages": [
            {"role": "user", "content": "read a.py"},
            {"role": "assistant", "content": None, "tool_calls": [tc("functions.Read:0", "Read", '{"path":"a.py"}')]},
            {"role": "tool", "tool_call_id": "functions.Read:0", "content": "print(1)"},
        ],
    }


@pytest.mark.parametrize(
    ("quirks", "raw", "wire"),
    [
        pytest.param((), "functions.Read:0", "functions.Read:0", id="T0-1-chat"),
        pytest.param(("strict_tool_ids",), "functions.Read:0", "functions_Read_0", id="T0-1-strict"),
        pytest.param((), "Write:6", "Write_6", id="T0-2-chat"),
        pytest.param((), "functions.Read:0|fc_abc", "functions_Read_0_fc_abc", id="T0-3-chat"),
        pytest.param(
            (),
            "functions.mcp__atlassian__confluence_search_pages_by_cql_query:12",
            "functions.mcp__atlassian__confluence_search_pages_by_cql_query:12",
            id="T0-5-chat",
        ),
        pytest.param((), "call_abc123", "call_abc123", id="T0-10-chat"),
    ],
)
def test_request_ids_follow_chat_policy(quirks, raw, wire):
    c = ctx(*quirks)
    out = responses_to_chat({"input": [user("x"), fc(raw), fco(raw)]}, c)
    assert out["messages"][1]["tool_calls"][0]["id"] == wire
    assert out["messages"][2]["tool_call_id"] == wire
    assert ("tool_call_ids_normalized" in c.repairs) is (raw != wire)


def test_strict_ids_uniqueness_T0_9():
    out = responses_to_chat(
        {
            "input": [
                user("x"),
                fc("functions_Read_0"),
                fco("functions_Read_0"),
                fc("functions.Read:0"),
                fco("functions.Read:0"),
            ]
        },
        ctx("strict_tool_ids"),
    )
    assert [m.get("tool_call_id") or m["tool_calls"][0]["id"] for m in out["messages"][1:]] == [
        "functions_Read_0",
        "functions_Read_0",
        "functions_Read_0_2",
        "functions_Read_0_2",
    ]


# -- §5.2 the full Codex request ------------------------------------------------------------

CUSTOM_DESCRIPTION = (
    "Use the `apply_patch` tool to edit files. This is a FREEFORM tool, so do not wrap the patch in JSON."
    '\n\nCall this tool with a JSON object {"input": "<text>"}: the string is passed to the tool verbatim as '
    "its raw freeform input."
    '\n\nThe input must match this lark grammar:\nstart: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF\n'
    'end_patch: "*** End Patch" LF?\n'
)

CODEX_EXPECTED = {
    "model": "kimi-k2.6-upstream",
    "messages": [
        {
            "role": "system",
            "content": "You are Codex, a coding agent based on GPT-5. You and the user share the same workspace.",
        },
        {
            "role": "system",
            "content": "<permissions instructions>\nsandbox_mode: workspace-write\napproval_policy: on-request\n</permissions instructions>",
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "fix the bug"},
                {
                    "type": "image_url",
                    "image_url": {
                        "url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
                    },
                },
            ],
        },
        {
            "role": "assistant",
            "content": "Let me list the files.",
            "reasoning_content": "**Listing files**\n\nI should look at the workspace first.",
            "tool_calls": [tc("call_1", "shell_command", '{"command":"ls"}')],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
        {"role": "assistant", "content": None, "tool_calls": [tc("call_3", "mcp__gh__get_me", "{}")]},
        {"role": "tool", "tool_call_id": "call_3", "content": '{"login":"octocat","id":1}'},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [tc("call_2", "apply_patch", orjson.dumps({"input": PATCH}).decode())],
        },
        {"role": "tool", "tool_call_id": "call_2", "content": "Success. Updated the following files:\nM a.py\n"},
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "shell_command",
                "description": "Runs a shell command and returns its output.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "command": {"type": "string", "description": "The shell script to execute."},
                        "workdir": {"type": "string"},
                        "timeout_ms": {"type": "number"},
                    },
                    "required": ["command"],
                    "additionalProperties": False,
                },
                "strict": False,
            },
        },
        {
            "type": "function",
            "function": {
                "name": "apply_patch",
                "description": CUSTOM_DESCRIPTION,
                "parameters": {
                    "type": "object",
                    "properties": {"input": {"type": "string", "description": "The raw freeform input."}},
                    "required": ["input"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "mcp__gh__get_me",
                "description": "Get the authenticated user.",
                "parameters": {"type": "object", "properties": {}},
            },
        },
    ],
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "reasoning_effort": "high",
    "response_format": {
        "type": "json_schema",
        "json_schema": {
            "name": "codex_output_schema",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"answer": {"type": "string"}},
                "required": ["answer"],
                "additionalProperties": False,
            },
        },
    },
    "max_tokens": 32768,
    "stream": True,
    "stream_options": {"include_usage": True},
}


def test_codex_request_full_translation():
    body = codex_request()
    before = copy.deepcopy(body)
    c = ctx(upstream_model="kimi-k2.6-upstream", max_output_tokens=32768)
    out = responses_to_chat(body, c)
    assert out == CODEX_EXPECTED
    assert body == before  # the client's body is not mutated
    assert c.tools.functions == {"shell_command", "mcp__gh__get_me"}
    assert set(c.tools.custom) == {"apply_patch"}
    assert c.tools.custom["apply_patch"] == body["tools"][1]
    assert c.tools.namespaces == {"mcp__gh__get_me": ("mcp__gh__", "get_me")}
    assert c.tools.dropped == ["web_search"]
    assert c.repairs == ["hosted_tool_dropped"]
    # custom_tool_call input is byte-exact after decoding the arguments
    args = out["messages"][7]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(args) == {"input": body["input"][8]["input"]}


def test_codex_request_for_kimi_profile():
    """Same request with the quirks a Kimi profile turns on, then the final quirk pass."""
    c = ctx("kimi_request", "reasoning_replay", "thinking_param", upstream_model="kimi-k2.6", max_output_tokens=32768)
    out = prepare_chat(responses_to_chat(codex_request(), c), c, translated=True)
    assert out["thinking"] == {"type": "enabled"}
    assert "reasoning_effort" not in out
    assert out["max_completion_tokens"] == 32768 and "max_tokens" not in out
    assert out["prompt_cache_key"] == "0199b2c4-7e1f-7d30-9c2a-3f5e6a7b8c9d"
    assert out["messages"][3]["reasoning_content"] == "**Listing files**\n\nI should look at the workspace first."
    assert out["messages"][5]["reasoning_content"] == "tool call"
    assert out["messages"][7]["reasoning_content"] == "tool call"
    assert c.repairs.count("reasoning_placeholder") == 2
    # everything else is exactly the default translation
    drop = {"thinking", "max_completion_tokens", "prompt_cache_key", "messages"}
    assert {k: v for k, v in out.items() if k not in drop} == {
        k: v for k, v in CODEX_EXPECTED.items() if k not in drop | {"reasoning_effort", "max_tokens"}
    } | {"model": "kimi-k2.6"}


# -- T3-13 / R3-d replay ---------------------------------------------------------------------

RAW_PATCH = '*** Begin Patch\n*** Add File: a.txt\n+héllo "q" \\ ✓\n*** End Patch'


def t313_input(reasoning_item: dict) -> list[dict]:
    return [
        user("add a.txt"),
        reasoning_item,
        {"type": "custom_tool_call", "call_id": "call_1", "name": "apply_patch", "input": RAW_PATCH},
        {
            "type": "custom_tool_call_output",
            "call_id": "call_1",
            "output": "Success. Updated the following files:\nA a.txt\n",
        },
    ]


def test_T3_13_replay_with_envelope_sealed_reasoning():
    exact = "  I will add a.txt.\n\n(with  spacing kept)  "
    item = rs("I will add a.txt.", encrypted_content=seal(exact, KEY))
    c = ctx("mimo_request", "reasoning_replay", envelope_key=KEY)
    out = responses_to_chat({"input": t313_input(item)}, c)
    assert out["messages"] == [
        {"role": "user", "content": "add a.txt"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": exact,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "apply_patch", "arguments": orjson.dumps({"input": RAW_PATCH}).decode()},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Success. Updated the following files:\nA a.txt\n"},
    ]
    assert json.loads(out["messages"][1]["tool_calls"][0]["function"]["arguments"])["input"] == RAW_PATCH
    assert "reasoning_placeholder" not in c.repairs


def test_T3_13_wrong_key_falls_back_to_summary():
    item = rs("summary text", encrypted_content=seal("sealed text", b"other-key"))
    out = responses_to_chat({"input": t313_input(item)}, ctx(envelope_key=KEY))
    assert out["messages"][1]["reasoning_content"] == "summary text"


def test_T3_13_without_reasoning_gets_placeholder():
    items = [it for it in t313_input(rs("x")) if it["type"] != "reasoning"]
    c = ctx("reasoning_replay")
    out = prepare_chat(responses_to_chat({"input": items}, c), c, translated=True)
    assert out["messages"][1]["reasoning_content"] == "tool call"
    assert c.repairs == ["reasoning_placeholder"]


def test_reasoning_key_reasoning():
    out = responses_to_chat({"input": t313_input(rs("think"))}, ctx("reasoning_key_reasoning"))
    assert out["messages"][1]["reasoning"] == "think"
    assert "reasoning_content" not in out["messages"][1]


def test_openai_encrypted_content_alone_is_dropped():
    item = {"type": "reasoning", "summary": [], "encrypted_content": "gAAAAABopaque"}
    out = responses_to_chat({"input": t313_input(item)}, ctx(envelope_key=KEY))
    assert "reasoning_content" not in out["messages"][1]


def test_reasoning_from_raw_content_when_no_summary():
    item = {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "raw thought"}]}
    out = responses_to_chat({"input": t313_input(item)}, ctx())
    assert out["messages"][1]["reasoning_content"] == "raw thought"


# -- reasoning placement ---------------------------------------------------------------------


def test_reasoning_attaches_forward_and_trailing_attaches_back():
    items = [
        user("u1"),
        rs("r1"),
        fc("c1"),
        fco("c1"),
        rs("r2a"),
        rs("r2b"),
        asst("answer"),
        rs("trailing"),
    ]
    c = ctx("reasoning_replay")
    out = responses_to_chat({"input": items}, c)
    assert out["messages"] == [
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": None, "reasoning_content": "r1", "tool_calls": [tc("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "assistant", "content": "answer", "reasoning_content": "r2a\n\nr2b\n\ntrailing"},
    ]
    assert c.repairs == []


def test_trailing_reasoning_attaches_back_before_placeholder():
    items = [user("u"), fc("c1"), fco("c1"), rs("late")]
    c = ctx("reasoning_replay")
    out = responses_to_chat({"input": items}, c)
    assert out["messages"][1]["reasoning_content"] == "late"
    assert "reasoning_placeholder" not in c.repairs


def test_reasoning_never_crosses_a_user_turn():
    items = [user("u1"), asst("a1"), rs("orphan thought"), user("u2"), asst("a2")]
    out = responses_to_chat({"input": items}, ctx())
    assert out["messages"] == [
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "a1", "reasoning_content": "orphan thought"},
        {"role": "user", "content": "u2"},
        {"role": "assistant", "content": "a2"},
    ]


def test_reasoning_before_user_without_assistant_is_dropped():
    c = ctx()
    out = responses_to_chat({"input": [user("u1"), rs("lost"), user("u2")]}, c)
    assert out["messages"] == [{"role": "user", "content": "u1"}, {"role": "user", "content": "u2"}]
    assert c.repairs == ["reasoning_unattached_dropped"]


def test_assistant_text_then_calls_form_one_message():
    items = [user("u"), rs("r"), asst(""), fc("a"), fc("b", "g", ""), fco("b", "B"), fco("a", "A")]
    c = ctx()
    out = responses_to_chat({"input": items}, c)
    assert out["messages"] == [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": None, "reasoning_content": "r", "tool_calls": [tc("a"), tc("b", "g", "{}")]},
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
    ]
    assert c.repairs == ["empty_arguments"]


def test_reasoning_between_text_and_call_splits_messages():
    items = [user("u"), asst("text"), rs("r"), fc("a"), fco("a")]
    out = responses_to_chat({"input": items}, ctx())
    assert out["messages"][1:] == [
        {"role": "assistant", "content": "text"},
        {"role": "assistant", "content": None, "reasoning_content": "r", "tool_calls": [tc("a")]},
        {"role": "tool", "tool_call_id": "a", "content": "ok"},
    ]


# -- transcript validation (docs/rules.md F17, F18) ------------------------------------------------------


def test_out_of_place_output_is_moved_after_its_call():
    items = [user("u"), fc("a"), user("interjection"), fco("a")]
    c = ctx()
    out = responses_to_chat({"input": items}, c)
    assert out["messages"] == [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": None, "tool_calls": [tc("a")]},
        {"role": "tool", "tool_call_id": "a", "content": "ok"},
        {"role": "user", "content": "interjection"},
    ]
    assert c.repairs == ["tool_output_reordered"]


def test_output_before_its_call_is_moved():
    out = responses_to_chat({"input": [user("u"), fco("a", "early"), fc("a")]}, ctx())
    assert out["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [tc("a")]},
        {"role": "tool", "tool_call_id": "a", "content": "early"},
    ]


def test_missing_output_is_a_400_naming_the_input_index():
    with pytest.raises(RequestError) as err:
        responses_to_chat({"input": [user("u"), fc("a"), fc("b"), fco("a")]}, ctx())
    assert err.value.param == "input[2]"
    assert err.value.status == 400
    assert "'b'" in err.value.message


def test_orphan_output_becomes_user_text():
    c = ctx()
    out = responses_to_chat(
        {"input": [user("u"), fco("ghost", "42"), {"type": "function_call_output", "output": "x"}]}, c
    )
    assert out["messages"] == [
        {"role": "user", "content": "u"},
        {"role": "user", "content": "[tool output for ghost]: 42"},
        {"role": "user", "content": "[tool output for (no call_id)]: x"},
    ]
    assert c.repairs == ["orphan_tool_output_to_user", "orphan_tool_output_to_user"]


def test_second_output_for_same_call_is_an_orphan():
    out = responses_to_chat({"input": [user("u"), fc("a"), fco("a", "1"), fco("a", "2")]}, ctx())
    assert out["messages"][2:] == [
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "user", "content": "[tool output for a]: 2"},
    ]


def test_array_output_text_joined_and_images_moved_to_user():
    output = [
        {"type": "input_text", "text": "line 1"},
        {"type": "input_image", "image_url": "data:image/png;base64,AAA"},
        {"type": "input_text", "text": "line 2"},
    ]
    out = responses_to_chat({"input": [user("u"), fc("a"), fc("b"), fco("a", output), fco("b", "B")]}, ctx())
    assert out["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [tc("a"), tc("b")]},
        {"role": "tool", "tool_call_id": "a", "content": "line 1\nline 2"},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}}]},
    ]


# -- tools ------------------------------------------------------------------------------------


def test_namespace_flatten_long_names_and_call_names():
    ns = "mcp__a_very_long_server_name_for_testing__"
    long_name = "search_pages_by_confluence_query_language_expression"
    flat = flatten_name(ns, long_name)
    assert len(flat) == 64 and flat != ns + long_name
    body = {
        "input": [user("u"), fc("c1", long_name, "{}", namespace=ns), fco("c1")],
        "tools": [
            {
                "type": "namespace",
                "name": ns,
                "tools": [
                    {"type": "function", "name": long_name, "parameters": {"type": "object", "properties": {}}},
                    {"type": "function", "name": "short", "parameters": {"type": "object", "properties": {}}},
                ],
            },
            {"type": "namespace", "name": "collab", "tools": [{"type": "function", "name": "spawn_agent"}]},
        ],
    }
    c = ctx()
    out = responses_to_chat(body, c)
    assert [t["function"]["name"] for t in out["tools"]] == [flat, ns + "short", "collab__spawn_agent"]
    assert out["messages"][1]["tool_calls"][0]["function"]["name"] == flat
    assert c.tools.namespaces == {
        flat: (ns, long_name),
        ns + "short": (ns, "short"),
        "collab__spawn_agent": ("collab", "spawn_agent"),
    }
    assert c.tools.functions == set(c.tools.namespaces)
    # missing parameters → forced object schema
    assert out["tools"][2]["function"]["parameters"] == {"type": "object", "properties": {}}
    assert c.repairs == ["tool_schema_type_object"]


@pytest.mark.parametrize(
    "hosted",
    [
        "web_search",
        "image_generation",
        "file_search",
        "tool_search",
        "local_shell",
        "code_interpreter",
        "computer_use_preview",
    ],
)
def test_hosted_tool_dropped(hosted):
    c = ctx()
    fn = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
    out = responses_to_chat(
        {"input": "hi", "tools": [{"type": hosted}, fn], "tool_choice": "auto", "parallel_tool_calls": True}, c
    )
    assert [t["function"]["name"] for t in out["tools"]] == ["f"]
    assert c.tools.dropped == [hosted]
    assert c.repairs == ["hosted_tool_dropped"]
    # the only tools: refused (the model could not do what it was asked), unless tool_choice none
    with pytest.raises(RequestError) as e:
        responses_to_chat({"input": "hi", "tools": [{"type": hosted}], "tool_choice": "auto"}, ctx())
    assert e.value.param == "tools[0]" and hosted in e.value.message
    c = ctx()
    out = responses_to_chat({"input": "hi", "tools": [{"type": hosted}], "tool_choice": "none"}, c)
    assert out == {"model": "up-model", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    "params",
    [None, {"type": None, "properties": {"a": {"type": "string"}}}, {"properties": {}}],
    ids=["absent", "type-null", "type-missing"],
)
def test_schema_type_forced_object(params):
    tool = {"type": "function", "name": "codex_app__automation_update"}
    if params is not None:
        tool["parameters"] = params
    c = ctx()
    out = responses_to_chat({"input": "hi", "tools": [tool]}, c)
    got = out["tools"][0]["function"]["parameters"]
    assert got["type"] == "object"
    if params is not None:
        assert {k: v for k, v in got.items() if k != "type"} == {k: v for k, v in params.items() if k != "type"}
    assert c.repairs == ["tool_schema_type_object"]


def fn_tool(name: str) -> dict:
    return {"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}


@pytest.mark.parametrize(
    ("choice", "expected_choice", "expected_names"),
    [
        ("auto", "auto", ["a", "b", "ns__c"]),
        ("none", "none", ["a", "b", "ns__c"]),
        ("required", "required", ["a", "b", "ns__c"]),
        ({"type": "function", "name": "a"}, {"type": "function", "function": {"name": "a"}}, ["a", "b", "ns__c"]),
        (
            {"type": "function", "name": "c", "namespace": "ns"},
            {"type": "function", "function": {"name": "ns__c"}},
            ["a", "b", "ns__c"],
        ),
        ({"type": "custom", "name": "b"}, {"type": "function", "function": {"name": "b"}}, ["a", "b", "ns__c"]),
        (
            {
                "type": "allowed_tools",
                "mode": "required",
                "tools": [{"type": "function", "name": "a"}, {"type": "namespace", "name": "ns"}],
            },
            "required",
            ["a", "ns__c"],
        ),
        ({"type": "namespace", "name": "ns"}, "auto", ["a", "b", "ns__c"]),
        ({"type": "web_search"}, "auto", ["a", "b", "ns__c"]),
    ],
    ids=["auto", "none", "required", "function", "namespaced", "custom", "allowed_tools", "namespace", "hosted"],
)
def test_tool_choice_mapping(choice, expected_choice, expected_names):
    tools = [
        fn_tool("a"),
        {"type": "custom", "name": "b"},
        {"type": "namespace", "name": "ns", "tools": [fn_tool("c")]},
    ]
    out = responses_to_chat({"input": "hi", "tools": tools, "tool_choice": choice, "parallel_tool_calls": False}, ctx())
    assert out["tool_choice"] == expected_choice
    assert [t["function"]["name"] for t in out["tools"]] == expected_names
    assert out["parallel_tool_calls"] is False


# -- top-level fields -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quirks", "effort", "expected"),
    [
        ((), "high", {"reasoning_effort": "high"}),
        ((), "none", {"reasoning_effort": "none"}),
        (("thinking_param",), "high", {"thinking": {"type": "enabled"}}),
        (("thinking_param",), "low", {"thinking": {"type": "enabled"}}),
        (("thinking_param",), "minimal", {"thinking": {"type": "disabled"}}),
        (("thinking_param",), "none", {"thinking": {"type": "disabled"}}),
    ],
)
def test_reasoning_effort(quirks, effort, expected):
    out = responses_to_chat({"input": "hi", "reasoning": {"effort": effort, "summary": "auto"}}, ctx(*quirks))
    assert {k: v for k, v in out.items() if k not in ("model", "messages")} == expected


@pytest.mark.parametrize(
    ("quirks", "body_max", "ctx_max", "expected"),
    [
        ((), 1000, None, {"max_tokens": 1000}),
        ((), None, 2048, {"max_tokens": 2048}),
        ((), 1000, 2048, {"max_tokens": 1000}),
        ((), None, None, {}),
        (("max_completion_tokens",), 1000, None, {"max_completion_tokens": 1000}),
        (("mimo_request",), None, 131072, {"max_completion_tokens": 131072}),
    ],
)
def test_max_tokens(quirks, body_max, ctx_max, expected):
    body = {"input": "hi"}
    if body_max is not None:
        body["max_output_tokens"] = body_max
    out = responses_to_chat(body, ctx(*quirks, max_output_tokens=ctx_max))
    assert {k: v for k, v in out.items() if k not in ("model", "messages")} == expected


@pytest.mark.parametrize(
    ("quirks", "kept"),
    [((), False), (("kimi_request",), True), (("moonshot_fields",), True)],
)
def test_prompt_cache_key(quirks, kept):
    out = responses_to_chat({"input": "hi", "prompt_cache_key": "k"}, ctx(*quirks))
    assert ("prompt_cache_key" in out) is kept


def test_dropped_and_kept_top_level_fields():
    body = {
        "model": "client-model",
        "input": "hi",
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "service_tier": "priority",
        "client_metadata": {"a": 1},
        "truncation": "auto",
        "metadata": {"m": "1"},
        "user": "u",
        "previous_response_id": "resp_1",
        "text": {"verbosity": "low", "format": {"type": "text"}},
        "temperature": 0.2,
        "top_p": 0.9,
        "stream": False,
        "some_future_field": True,
    }
    out = responses_to_chat(body, ctx())
    assert out == {
        "model": "up-model",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.2,
        "top_p": 0.9,
    }


def test_json_object_format():
    out = responses_to_chat({"input": "hi", "text": {"format": {"type": "json_object"}}}, ctx())
    assert out["response_format"] == {"type": "json_object"}


# -- input validation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": 42}, "input"),
        ({"input": {"type": "message"}}, "input"),
        ({"input": ["x"]}, "input[0]"),
        ({"input": [user("u"), {"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[1].call_id"),
        ({"input": [user("u"), {"type": "function_call", "call_id": "c", "arguments": "{}"}]}, "input[1].name"),
        ({"input": [{"type": "message", "role": "tool", "content": "x"}]}, "input[0].role"),
        ({"input": "hi", "instructions": ["x"]}, "instructions"),
    ],
)
def test_invalid_input(body, param):
    with pytest.raises(RequestError) as err:
        responses_to_chat(body, ctx())
    assert err.value.param == param


def test_items_without_type_and_unknown_items():
    c = ctx()
    body = {
        "input": [
            {"role": "user", "content": "plain"},
            {"role": "assistant", "content": "easy"},
            {"type": "item_reference", "id": "msg_1"},
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
            {
                "role": "developer",
                "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
            },
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "p1"}, {"type": "input_text", "text": "p2"}],
            },
        ]
    }
    out = responses_to_chat(body, c)
    assert out["messages"] == [
        {"role": "user", "content": "plain"},
        {"role": "assistant", "content": "easy"},
        {"role": "system", "content": "a\nb"},
        {"role": "user", "content": "p1\np2"},
    ]
    assert c.repairs == ["input_item_dropped", "input_item_dropped"]


# -- nothing lost ----------------------------------------------------------------------------


@given(st.text(), st.text(min_size=1))
def test_custom_input_and_arguments_survive_byte_exact(raw, arguments):
    body = {
        "input": [
            user("u"),
            {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": raw},
            {"type": "custom_tool_call_output", "call_id": "c1", "output": raw},
            fc("c2", "f", arguments),
            fco("c2", arguments),
        ]
    }
    out = responses_to_chat(body, ctx())
    call1 = out["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert orjson.loads(call1) == {"input": raw}
    assert out["messages"][2]["content"] == raw
    assert out["messages"][3]["tool_calls"][0]["function"]["arguments"] == arguments
    assert out["messages"][4]["content"] == arguments


@pytest.mark.parametrize(
    "params, want",
    [
        (
            {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]},
            {"apply_patch": "input"},
        ),
        (
            {"type": "object", "properties": {"patch": {"type": "string"}}, "required": ["patch"]},
            {"apply_patch": "patch"},
        ),
        ({"type": "object", "properties": {"input": {"type": "string"}}}, {}),  # not required
        ({"type": "object", "properties": {"input": {"type": "integer"}}, "required": ["input"]}, {}),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                "required": ["a", "b"],
            },
            {},
        ),
        (None, {}),
    ],
    ids=["one-string", "other-name", "not-required", "not-string", "two-required", "no-schema"],
)
def test_responses_function_tools_record_the_one_string_shape(params, want):
    """R3-a′ for Responses clients (kosong's / Kimi Code's Responses providers offer apply_patch
    as a function): the same shape the Chat client path records."""
    tool = {"type": "function", "name": "apply_patch", **({"parameters": params} if params else {})}
    c = ctx()
    responses_to_chat({"model": "m", "input": "hi", "tools": [tool]}, c)
    assert c.tools.single_string_param == want
    assert c.tools.functions == {"apply_patch"} and c.tools.custom == {}
