"""Chat → Messages request translation (transformers/request_c2m.py), one test per table row."""

from __future__ import annotations

from typing import Any

import pytest

from transformers.context import Ctx
from transformers.errors import RequestError
from transformers.request_c2m import DEFAULT_MAX_TOKENS, SIGNED, chat_to_messages
from transformers.request_r2c import responses_to_chat


def c2m(body: dict[str, Any], **ctx: Any) -> tuple[dict[str, Any], Ctx]:
    c = Ctx(upstream_model="claude-x", **ctx)
    return chat_to_messages({"model": "m", **body}, c), c


CALL = {"id": "functions.Bash:0", "type": "function", "function": {"name": "Bash", "arguments": '{"cmd":"ls"}'}}


def test_system_and_developer_go_to_the_top_in_order() -> None:
    out, ctx = c2m(
        {
            "messages": [
                {"role": "system", "content": "one"},
                {"role": "user", "content": "hi"},
                {"role": "developer", "content": [{"type": "text", "text": "two"}]},
            ]
        }
    )
    assert out["system"] == [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    assert out["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert ctx.repairs == ["system_at_head_messages"]  # "two" was not at the head


def test_a_tool_loop_alternates_and_maps_ids() -> None:
    out, _ = c2m(
        {
            "messages": [
                {"role": "user", "content": "list"},
                {"role": "assistant", "content": "", "tool_calls": [CALL, {**CALL, "id": "call_2"}]},
                {"role": "tool", "tool_call_id": "functions.Bash:0", "content": "a.py"},
                {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "b.py"}]},
                {"role": "user", "content": "and?"},
            ]
        }
    )
    roles = [m["role"] for m in out["messages"]]
    assert roles == ["user", "assistant", "user"]
    uses = out["messages"][1]["content"]
    assert [u["type"] for u in uses] == ["tool_use", "tool_use"] and uses[0]["input"] == {"cmd": "ls"}
    # ids as they came: the request rows make them valid where Anthropic's pattern is required
    assert uses[0]["id"] == "functions.Bash:0" and uses[1]["id"] == "call_2"
    last = out["messages"][2]["content"]
    # results first, in order, then the user's text
    assert [b["type"] for b in last] == ["tool_result", "tool_result", "text"]
    assert last[0]["tool_use_id"] == uses[0]["id"] and last[0]["content"] == [{"type": "text", "text": "a.py"}]
    assert last[1]["content"] == [{"type": "text", "text": "b.py"}]


def test_a_result_after_user_text_goes_before_it() -> None:
    out, _ = c2m(
        {
            "messages": [
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "user", "content": "note"},
                {"role": "tool", "tool_call_id": "functions.Bash:0", "content": "ok"},
            ]
        }
    )
    assert [b["type"] for b in out["messages"][1]["content"]] == ["tool_result", "text"]


def test_images_and_unknown_parts() -> None:
    out, ctx = c2m(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": ""},
                        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}},
                        {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}},
                        {"type": "input_audio", "input_audio": {"data": "..", "format": "wav"}},
                        {"type": "image_url", "image_url": {"url": "ftp://nope"}},
                    ],
                }
            ]
        }
    )
    assert out["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "QUJD"}},
        {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
    ]
    assert ctx.repairs == ["content_part_dropped", "content_part_dropped"]  # named, never silent


def test_arguments_that_are_no_object_are_wrapped() -> None:
    raw = "*** Begin Patch\n*** End Patch"
    call = {**CALL, "function": {"name": "apply_patch", "arguments": raw}}
    out, ctx = c2m({"messages": [{"role": "assistant", "tool_calls": [call]}]})
    assert out["messages"][0]["content"][0]["input"] == {"input": raw}
    assert ctx.repairs == ["tool_input_wrapped"]


def test_reasoning_without_signature_goes_unsigned_and_signed_blocks_as_they_came() -> None:
    out, _ = c2m({"messages": [{"role": "assistant", "content": "x", "reasoning_content": "why"}]})
    assert out["messages"][0]["content"][0] == {"type": "thinking", "thinking": "why", "signature": ""}
    signed = [{"type": "thinking", "thinking": "why", "signature": "sig"}, {"type": "redacted_thinking", "data": "d"}]
    ctx = Ctx(upstream_model="claude-x", signed={0: signed})
    out = chat_to_messages({"messages": [{"role": "assistant", "content": "x", "reasoning_content": "why"}]}, ctx)
    assert out["messages"][0]["content"][:2] == signed


def test_signed_reasoning_survives_the_responses_form() -> None:
    ctx = Ctx(upstream_model="claude-x")
    chat = responses_to_chat(
        {
            "model": "m",
            "input": [
                {"type": "message", "role": "user", "content": "hi"},
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "why"}], "encrypted_content": "sig"},
                {"type": "reasoning", "summary": [], "encrypted_content": "redacted-data"},
                {"type": "function_call", "call_id": "c1", "name": "Bash", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            ],
        },
        ctx,
        signed=True,
    )
    assert all(SIGNED not in m for m in chat["messages"])  # the hub's body: the blocks are in ctx.signed
    out = chat_to_messages(chat, ctx)
    assert out["messages"][1]["content"][:2] == [
        {"type": "thinking", "thinking": "why", "signature": "sig"},
        {"type": "redacted_thinking", "data": "redacted-data"},
    ]
    # without signed (a Chat upstream) no such key reaches the Chat body
    plain = responses_to_chat({"model": "m", "input": [{"type": "reasoning", "summary": [], "encrypted_content": "s"},
                                                      {"type": "message", "role": "assistant", "content": "x"}]},
                              Ctx())  # fmt: skip
    assert all(SIGNED not in m for m in plain["messages"])


@pytest.mark.parametrize(
    ("body", "want"),
    [
        ({"max_completion_tokens": 500}, 500),
        ({"max_tokens": 300}, 300),
        ({}, DEFAULT_MAX_TOKENS),
        ({"max_tokens": 0}, DEFAULT_MAX_TOKENS),
    ],
)
def test_max_tokens_is_always_sent(body: dict[str, Any], want: int) -> None:
    out, _ = c2m({"messages": [{"role": "user", "content": "hi"}], **body})
    assert out["max_tokens"] == want


def test_max_tokens_from_the_catalogue() -> None:
    out, _ = c2m({"messages": [{"role": "user", "content": "hi"}]}, max_output_tokens=64000)
    assert out["max_tokens"] == 64000


@pytest.mark.parametrize(
    ("choice", "parallel", "want"),
    [
        ("auto", None, {"type": "auto"}),
        ("required", None, {"type": "any"}),
        ("none", None, {"type": "none"}),
        ({"type": "function", "function": {"name": "Bash"}}, None, {"type": "tool", "name": "Bash"}),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
        (None, None, None),
    ],
)
def test_tool_choice(choice: Any, parallel: Any, want: Any) -> None:
    tools = [{"type": "function", "function": {"name": "Bash", "description": "run", "parameters": {"type": "object"}}}]
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], "tools": tools}
    if choice is not None:
        body["tool_choice"] = choice
    if parallel is not None:
        body["parallel_tool_calls"] = parallel
    out, _ = c2m(body)
    assert out["tools"] == [{"name": "Bash", "input_schema": {"type": "object"}, "description": "run"}]
    assert out.get("tool_choice") == want


def test_a_tool_that_is_no_function_is_named() -> None:
    out, ctx = c2m({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "web_search"}]})
    assert "tools" not in out and ctx.tools.dropped == ["web_search"] and ctx.repairs == ["hosted_tool_dropped"]


@pytest.mark.parametrize(
    ("effort", "limit", "budget"),
    [("low", 8192, 2048), ("medium", 32000, 8192), ("high", 8192, 4096), ("minimal", 8192, None), ("high", 1500, None)],
)
def test_reasoning_effort_becomes_a_thinking_budget(effort: str, limit: int, budget: int | None) -> None:
    out, ctx = c2m(
        {
            "messages": [{"role": "user", "content": "hi"}],
            "reasoning_effort": effort,
            "max_tokens": limit,
            "temperature": 0.2,
        }  # fmt: skip
    )
    if budget is None:
        assert "thinking" not in out and out["temperature"] == 0.2
    else:
        assert out["thinking"] == {"type": "enabled", "budget_tokens": budget}
        assert "temperature" not in out and ctx.repairs == ["thinking_sampling_dropped"]


def test_glm_style_thinking_switch_and_sampling() -> None:
    out, _ = c2m({"messages": [{"role": "user", "content": "hi"}], "thinking": {"type": "enabled"}})
    assert out["thinking"]["type"] == "enabled"
    out, ctx = c2m({"messages": [{"role": "user", "content": "hi"}], "temperature": 1.7, "top_p": 0.9})
    assert out["temperature"] == 1 and out["top_p"] == 0.9 and ctx.repairs == ["temperature_clamped"]


def test_the_rest_of_the_top_level() -> None:
    out, _ = c2m(
        {
            "messages": [{"role": "user", "content": "hi"}],
            "stop": "END",
            "user": "u1",
            "stream": True,
            "stream_options": {"include_usage": True},
            "seed": 3,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
        }
    )
    assert out["stop_sequences"] == ["END"] and out["metadata"] == {"user_id": "u1"} and out["stream"] is True
    assert out["output_config"] == {"format": {"type": "json_schema", "schema": {"type": "object"}}}
    assert "seed" not in out and "stream_options" not in out and out["model"] == "claude-x"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": "x"}, "messages"),
        ({"messages": [1]}, "messages[0]"),
        ({"messages": [{"role": "bot", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
        ({"messages": [{"role": "assistant", "tool_calls": [{"id": "a", "function": {}}]}]},
         "messages[0].tool_calls[0].function.name"),
        ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}]}, "messages[0].tool_calls[0].id"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
        ({"messages": [], "n": 2}, "n"),
        ({"messages": [], "response_format": {"type": "json_object"}}, "response_format"),
        ({"messages": [], "tools": [{"type": "function", "function": {}}]}, "tools[0].function.name"),
    ],
)  # fmt: skip
def test_refusals_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(RequestError) as e:
        c2m(body)
    assert e.value.param == param


def test_top_k_is_kept_and_goes_with_the_other_sampling_settings_under_thinking() -> None:
    out, _ = c2m({"messages": [{"role": "user", "content": "hi"}], "top_k": 40})
    assert out["top_k"] == 40
    out, ctx = c2m({"messages": [{"role": "user", "content": "hi"}], "top_k": 40, "reasoning_effort": "high"})
    assert "top_k" not in out and "thinking_sampling_dropped" in ctx.repairs
