"""Chat request → Responses request (docs/rules.md §7.3, §1 Responses policy, §6 kosong requests, T1-6)."""

from __future__ import annotations

import copy

import pytest

from transformers.context import Ctx
from transformers.errors import RequestError
from transformers.request_c2r import chat_to_responses, toolinfo_from_chat
from transformers.request_quirks import prepare_responses


def ctx(*quirks: str, **kw) -> Ctx:
    return Ctx(quirks=frozenset(quirks), upstream_model=kw.pop("upstream_model", "gpt-5.2"), **kw)


def tc(id_: str, name: str = "f", arguments: str = "{}") -> dict:
    return {"type": "function", "id": id_, "function": {"name": name, "arguments": arguments}}


SHELL_TOOL = {
    "type": "function",
    "function": {
        "name": "Shell",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
            "required": ["command"],
        },
    },
}
PATCH_TOOL = {
    "type": "function",
    "function": {
        "name": "apply_patch",
        "description": "Apply a patch.",
        "parameters": {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]},
    },
}

KOSONG = {
    "model": "gpt-5.2",
    "messages": [
        {"role": "system", "content": "You are Kimi Code CLI."},
        {"role": "user", "content": "list the files"},
        {
            "role": "assistant",
            "reasoning_content": "I should run ls.",
            "tool_calls": [tc("functions.Shell:0", "Shell", '{"command":"ls"}')],
        },
        {"role": "tool", "tool_call_id": "functions.Shell:0", "content": "a.txt\nb.txt"},
        {"role": "assistant", "content": "There are two files.", "reasoning_content": "Done."},
        {"role": "system", "content": "Plan mode is off."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "and what is in this picture?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
            ],
        },
    ],
    "tools": [SHELL_TOOL, {"type": "builtin_function", "function": {"name": "$web_search"}}, PATCH_TOOL],
    "tool_choice": "auto",
    "stream": True,
    "stream_options": {"include_usage": True},
    "max_completion_tokens": 32000,
    "temperature": 0.6,
    "prompt_cache_key": "session-1",
    "reasoning_effort": "medium",
}

KOSONG_EXPECTED = {
    "model": "gpt-5.2-upstream",
    "instructions": "You are Kimi Code CLI.",
    "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list the files"}]},
        {"type": "function_call", "call_id": "functions.Shell:0", "name": "Shell", "arguments": '{"command":"ls"}'},
        {"type": "function_call_output", "call_id": "functions.Shell:0", "output": "a.txt\nb.txt"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "There are two files."}]},
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Plan mode is off."}]},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "and what is in this picture?"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAA", "detail": "auto"},
            ],
        },
    ],
    "tools": [
        {
            "type": "function",
            "name": "Shell",
            "description": "Run a shell command.",
            "parameters": SHELL_TOOL["function"]["parameters"],
            "strict": False,
        },
        {
            "type": "function",
            "name": "apply_patch",
            "description": "Apply a patch.",
            "parameters": PATCH_TOOL["function"]["parameters"],
            "strict": False,
        },
    ],
    "tool_choice": "auto",
    "max_output_tokens": 32000,
    "reasoning": {"effort": "medium", "summary": "auto"},
    "temperature": 0.6,
    "prompt_cache_key": "session-1",
    "stream": True,
    "store": False,
}


def test_kosong_request_to_responses():
    body = copy.deepcopy(KOSONG)
    c = ctx(upstream_model="gpt-5.2-upstream")
    out = chat_to_responses(body, c)
    assert out == KOSONG_EXPECTED
    assert body == KOSONG  # not mutated
    assert c.tools.functions == {"Shell", "apply_patch"}
    assert c.tools.single_string_param == {"Shell": "command", "apply_patch": "input"}
    assert c.tools.dropped == ["$web_search"]
    assert c.repairs == ["reasoning_dropped_for_responses", "builtin_function_dropped"]
    # the final pass for a translated request changes nothing here
    c2 = ctx(upstream_model="gpt-5.2-upstream")
    assert prepare_responses(out, c2, translated=True) == out
    assert c2.repairs == []


@pytest.mark.parametrize(
    ("raw", "wire"),
    [
        pytest.param(["functions.Read:0"], ["functions.Read:0"], id="T0-1-responses"),
        pytest.param(["Write:6"], ["Write_6"], id="T0-2-responses"),
        pytest.param(["functions.Read:0|fc_abc"], ["functions.Read:0"], id="T0-3-responses"),
        pytest.param(
            ["functions.Read:0|fc_1", "functions.Read:0|fc_2"],
            ["functions.Read:0", "functions.Read:0_2"],
            id="T0-4-responses",
        ),
        pytest.param(
            ["functions.mcp__atlassian__confluence_search_pages_by_cql_query:12"],
            ["functions_mcp__atlassian__confluence_search_pages_by_cql_query_1"],
            id="T0-5-responses",
        ),
        pytest.param(
            [
                "functions.mcp__atlassian__confluence_search_pages_by_cql_query:12",
                "functions.mcp__atlassian__confluence_search_pages_by_cql_query:13",
            ],
            [
                "functions_mcp__atlassian__confluence_search_pages_by_cql_query_1",
                "functions_mcp__atlassian__confluence_search_pages_by_cql_query_2",
            ],
            id="T0-6-responses",
        ),
        pytest.param(["call_abc123"], ["call_abc123"], id="T0-10-responses"),
    ],
)
def test_call_ids_follow_responses_policy(raw, wire):
    messages = [{"role": "user", "content": "u"}]
    messages.append({"role": "assistant", "content": None, "tool_calls": [tc(r) for r in raw]})
    messages += [{"role": "tool", "tool_call_id": r, "content": "ok"} for r in raw]
    out = chat_to_responses({"messages": messages}, ctx())
    calls = [it["call_id"] for it in out["input"] if it["type"] == "function_call"]
    outputs = [it["call_id"] for it in out["input"] if it["type"] == "function_call_output"]
    assert calls == wire
    assert outputs == wire


def test_seed000_same_input_to_openai_responses_keeps_call_id():
    messages = [
        {"role": "user", "content": "read a.py"},
        {"role": "assistant", "tool_calls": [tc("functions.Read:0", "Read", '{"path":"a.py"}')]},
        {"role": "tool", "tool_call_id": "functions.Read:0", "content": "print(1)"},
    ]
    out = chat_to_responses({"messages": messages}, ctx())
    assert out["input"][1] == {
        "type": "function_call",
        "call_id": "functions.Read:0",
        "name": "Read",
        "arguments": '{"path":"a.py"}',
    }
    assert out["input"][2]["call_id"] == "functions.Read:0"


def test_dropped_chat_only_fields():
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stop": ["\n"],
        "seed": 7,
        "logit_bias": {"1": 2},
        "logprobs": True,
        "top_logprobs": 2,
        "stream_options": {"include_usage": True},
        "frequency_penalty": 0.1,
        "presence_penalty": 0.1,
        "n": 1,
        "thinking": {"type": "enabled"},
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "stream": False,
    }
    out = chat_to_responses(body, ctx())
    assert out == {
        "model": "gpt-5.2",
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        "stream": False,
        "store": False,
    }


def test_n_greater_than_one_is_a_400():
    with pytest.raises(RequestError) as err:
        chat_to_responses({"messages": [{"role": "user", "content": "hi"}], "n": 2}, ctx())
    assert err.value.param == "n"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": "hi"}, "messages"),
        (
            {"messages": [{"role": "user", "content": "u"}, {"role": "tool", "content": "x"}]},
            "messages[1].tool_call_id",
        ),
        (
            {"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f"}}]}]},
            "messages[0].tool_calls[0].id",
        ),
        ({"messages": [{"role": "function", "name": "f", "content": "x"}]}, "messages[0].role"),
        ({"messages": [42]}, "messages[0]"),
    ],
)
def test_invalid_requests(body, param):
    with pytest.raises(RequestError) as err:
        chat_to_responses(body, ctx())
    assert err.value.param == param


def test_tool_choice_response_format_max_tokens_verbosity():
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [SHELL_TOOL],
        "tool_choice": {"type": "function", "function": {"name": "Shell"}},
        "parallel_tool_calls": False,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "out", "schema": {"type": "object"}, "strict": True},
        },
        "verbosity": "low",
        "max_tokens": 100,
    }
    out = chat_to_responses(body, ctx())
    assert out["tool_choice"] == {"type": "function", "name": "Shell"}
    assert out["parallel_tool_calls"] is False
    assert out["text"] == {
        "format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": True},
        "verbosity": "low",
    }
    assert out["max_output_tokens"] == 100


def test_catalogue_max_output_tokens_when_client_sends_none():
    out = chat_to_responses({"messages": [{"role": "user", "content": "hi"}]}, ctx(max_output_tokens=4096))
    assert out["max_output_tokens"] == 4096


def test_tool_schema_forced_and_strict_explicit():
    tool = {"type": "function", "function": {"name": "f", "parameters": {"properties": {}}, "strict": True}}
    c = ctx()
    out = chat_to_responses({"messages": [{"role": "user", "content": "hi"}], "tools": [tool]}, c)
    assert out["tools"] == [
        {"type": "function", "name": "f", "parameters": {"properties": {}, "type": "object"}, "strict": True}
    ]
    assert c.repairs == ["tool_schema_type_object"]


def test_tool_content_parts_and_refusal():
    messages = [
        {"role": "user", "content": "u"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            "tool_calls": [tc("c1")],
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}],
        },
        {"role": "assistant", "content": None, "refusal": "I can't."},
    ]
    out = chat_to_responses({"messages": messages}, ctx())
    assert out["input"][1:] == [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ab"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "xy"},
        {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]},
    ]


def test_T1_6_mantle_request():
    body = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "OK"},
            {"role": "user", "content": "again"},
        ],
        "tools": [SHELL_TOOL],
        "tool_choice": "none",
        "parallel_tool_calls": False,
    }
    c = ctx("mantle_request")
    out = chat_to_responses(body, c)
    assert out["input"][1] == {"type": "message", "role": "assistant", "content": "OK"}
    assert "tools" not in out and "tool_choice" not in out and "parallel_tool_calls" not in out
    assert c.repairs == ["mantle_request"]


@pytest.mark.parametrize(
    ("tools", "single"),
    [
        ([PATCH_TOOL], {"apply_patch": "input"}),
        ([SHELL_TOOL], {"Shell": "command"}),
        (
            [
                {
                    "type": "function",
                    "function": {
                        "name": "g",
                        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                    },
                }
            ],
            {},
        ),
        (
            [
                {
                    "type": "function",
                    "function": {
                        "name": "h",
                        "parameters": {
                            "type": "object",
                            "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                            "required": ["a", "b"],
                        },
                    },
                }
            ],
            {},
        ),
        ([{"type": "function", "function": {"name": "k"}}], {}),
        ([{"type": "builtin_function", "function": {"name": "$web_search"}}], {}),
        (None, {}),
    ],
    ids=["apply_patch", "one-required-of-two", "integer", "two-required", "no-params", "builtin", "none"],
)
def test_toolinfo_from_chat(tools, single):
    info = toolinfo_from_chat(tools)
    assert info.single_string_param == single
    names = {t["function"]["name"] for t in tools or () if t["type"] == "function"}
    assert info.functions == names
