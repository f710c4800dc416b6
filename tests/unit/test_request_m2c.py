"""transformers/request_m2c.py: an Anthropic Messages request (Claude Code's shape) as a Chat
Completions request."""

from __future__ import annotations

from typing import Any

import pytest

from transformers.context import Ctx
from transformers.errors import RequestError
from transformers.request_m2c import messages_to_chat

TOOLS = [
    {"name": "Bash", "description": "Run a command", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
]  # fmt: skip


def ctx(*quirks: str) -> Ctx:
    return Ctx(quirks=frozenset(quirks), upstream_model="kimi-k2.6")


def claude_code_turn() -> dict[str, Any]:
    return {
        "model": "claude-sonnet",
        "max_tokens": 32000,
        "stream": True,
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "tools": TOOLS,
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": False},
        "thinking": {"type": "adaptive", "display": "updates"},
        "metadata": {"user_id": "u"},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "list files"}, {"type": "text", "text": ""}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "I should run ls.", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "Running ls."},
                    {"type": "tool_use", "id": "functions.Bash:0", "name": "Bash", "input": {"command": "ls"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "functions.Bash:0", "content": [{"type": "text", "text": "a.py"}]},
                    {"type": "text", "text": "thanks"},
                ],
            },
            {"role": "system", "content": "<env>cwd: /w</env>"},
        ],
    }  # fmt: skip


def test_a_claude_code_turn() -> None:
    c = ctx()
    out = messages_to_chat(claude_code_turn(), c)
    assert out["model"] == "kimi-k2.6" and out["max_tokens"] == 32000
    assert out["stream"] is True and out["stream_options"] == {"include_usage": True}
    assert out["reasoning_effort"] == "medium" and "metadata" not in out and "thinking" not in out
    assert out["messages"] == [
        {"role": "system", "content": "You are Claude Code."},
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": "Running ls.",
            "reasoning_content": "I should run ls.",
            "tool_calls": [{"id": "functions.Bash:0", "type": "function", "function": {"name": "Bash", "arguments": '{"command":"ls"}'}}],
        },
        {"role": "tool", "tool_call_id": "functions.Bash:0", "content": "a.py"},
        {"role": "user", "content": "thanks"},
        {"role": "system", "content": "<env>cwd: /w</env>"},  # in place, as Claude Code put it
    ]  # fmt: skip
    assert [t["function"]["name"] for t in out["tools"]] == ["Bash"]
    assert out["tool_choice"] == "auto" and "parallel_tool_calls" not in out
    assert c.tools.dropped == ["web_search_20250305"] and "Bash" in c.tools.functions
    assert sorted(set(c.repairs)) == ["hosted_tool_dropped", "redacted_thinking_dropped"]


@pytest.mark.parametrize(
    ("choice", "want", "parallel"),
    [
        ({"type": "any"}, "required", None),
        ({"type": "tool", "name": "Bash", "disable_parallel_tool_use": True}, {"type": "function", "function": {"name": "Bash"}}, False),
        ({"type": "none"}, "none", None),
    ],
)  # fmt: skip
def test_tool_choice(choice: dict[str, Any], want: Any, parallel: bool | None) -> None:
    out = messages_to_chat(
        {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS[:1], "tool_choice": choice}, ctx()
    )
    assert out["tool_choice"] == want and out.get("parallel_tool_calls") == parallel


def test_images_errors_stops_and_thinking_param() -> None:
    body = {
        "messages": [
            {"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "AAAA"}},
                {"type": "text", "text": "what is it"},
            ]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": "no such file"}]},
        ],
        "stop_sequences": ["END"],
        "temperature": 0.2,
        "thinking": {"type": "disabled"},
    }  # fmt: skip
    out = messages_to_chat(body, ctx("thinking_param"))
    assert out["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}},
        {"type": "text", "text": "what is it"},
    ]
    assert out["messages"][1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "Read", "arguments": "{}"}}]}  # fmt: skip
    assert out["messages"][2] == {"role": "tool", "tool_call_id": "t1", "content": "[error] no such file"}
    assert out["stop"] == ["END"] and out["temperature"] == 0.2 and out["thinking"] == {"type": "disabled"}
    with pytest.raises(RequestError) as e:
        messages_to_chat({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": "x"}]}]}, ctx())
    assert e.value.param == "messages[0].content[0].id"
    with pytest.raises(RequestError) as e:
        messages_to_chat({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}, ctx())
    assert e.value.param == "messages[0].content[0].tool_use_id"


# -- any body: a Chat request or a 400 naming the field, never an exception of another kind ---

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
_block = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking", "doc"])},
    optional={"text": _json, "id": _json, "name": _json, "input": _json, "tool_use_id": _json, "content": _json,
              "source": _json, "thinking": _json, "is_error": _json},
)  # fmt: skip
_message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "system"]),
        "content": st.one_of(_json, st.lists(_block, max_size=3)),
    }
)
_body = st.fixed_dictionaries(
    {"messages": st.one_of(st.lists(_message, max_size=4), _json)},
    optional={"system": _json, "tools": st.one_of(_json, st.lists(_json, max_size=2)), "tool_choice": _json,
              "thinking": _json, "max_tokens": _json, "stop_sequences": _json, "stream": _json},
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(_body)
def test_any_body_is_a_chat_request_or_a_400(body: dict[str, Any]) -> None:
    try:
        out = messages_to_chat(body, ctx())
    except RequestError as e:
        assert e.status == 400 and e.message
        return
    assert isinstance(out["messages"], list)
    for m in out["messages"]:
        assert m["role"] in ("system", "user", "assistant", "tool")
