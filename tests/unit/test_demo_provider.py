"""The built-in demo provider: when it reasons, what it answers, and its usage counts."""

from __future__ import annotations

import httpx
import orjson
import pytest

from providers import demo

REASONING = "The user wants a reply; keep it short."
USER = [{"role": "user", "content": "hi there"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
    },
}


@pytest.mark.parametrize(
    "extra,reasons",
    [
        pytest.param({}, False, id="nothing"),
        pytest.param({"reasoning_effort": "low"}, True, id="effort-low"),
        pytest.param({"reasoning_effort": "minimal"}, True, id="effort-minimal"),
        pytest.param({"reasoning_effort": "none"}, False, id="effort-none"),
        pytest.param({"reasoning_effort": None}, False, id="effort-null"),
        pytest.param({"thinking": {"type": "enabled"}}, True, id="thinking-enabled"),
        pytest.param({"thinking": {"type": "disabled"}}, False, id="thinking-disabled"),
    ],
)
def test_reasoning_when_asked(extra, reasons):
    assert demo.plan({"messages": USER, **extra})["reasoning"] == (REASONING if reasons else "")


@pytest.mark.parametrize(
    "body,expect",
    [
        pytest.param(
            {"messages": USER}, {"text": "Hello from Switchboard's demo provider. You said: hi there"}, id="text"
        ),
        pytest.param(
            {"messages": [{"role": "tool", "content": "42"}]}, {"text": "The tool returned: 42"}, id="tool-result"
        ),
        pytest.param(
            {"messages": USER, "tools": [WEATHER], "tool_choice": "required"},
            {
                "tool_call": {
                    "id": "functions.get_weather:0",
                    "name": "get_weather",
                    "arguments": '{"location":"echo hello from switchboard"}',
                }
            },
            id="required-tool",
        ),
        pytest.param(
            {"messages": USER, "tools": [WEATHER], "tool_choice": "none"},
            {"text": "Hello from Switchboard's demo provider. You said: hi there"},
            id="tool-choice-none",
        ),
    ],
)
def test_plan_table(body, expect):
    assert demo.plan(body) == {"reasoning": "", **expect}


@pytest.mark.parametrize(
    "extra,completion,reasoning",
    [
        # "Hello from Switchboard's demo provider. You said: hi there" = 9 words; REASONING = 8
        pytest.param({}, 9, 0, id="text"),
        pytest.param({"reasoning_effort": "low"}, 9 + 8, 8, id="text-reasoning"),
        pytest.param({"tools": [WEATHER], "tool_choice": "required"}, 1, 0, id="tool-call"),
        pytest.param(
            {"tools": [WEATHER], "tool_choice": "required", "reasoning_effort": "high"},
            1 + 8,
            8,
            id="tool-call-reasoning",
        ),
    ],
)
async def test_usage_counts_reasoning_tokens(extra, completion, reasoning, monkeypatch):
    body = {"model": "demo", "messages": USER, **extra}
    want = {
        "prompt_tokens": 3,
        "completion_tokens": completion,
        "total_tokens": 3 + completion,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }
    obj = demo.completion(body, "chatcmpl-x", 1)
    assert obj["usage"] == want
    assert obj["choices"][0]["message"].get("reasoning_content", "") == (REASONING if reasoning else "")
    # the stream reports the same usage in its last chunk before [DONE]
    monkeypatch.setattr(demo, "WORD_DELAY", 0)
    chunks = [
        c
        async for c in demo.stream({**body, "stream": True, "stream_options": {"include_usage": True}}, "chatcmpl-x", 1)
    ]
    assert chunks[-1] == b"data: [DONE]\n\n"
    assert orjson.loads(chunks[-2][len(b"data: ") :])["usage"] == want


ODD = {
    "type": "function",
    "function": {
        "name": "odd",
        "parameters": {
            "type": "object",
            "properties": {"a": 5, "b": {"enum": {"x": 1}}, "c": {"type": {"t": 1}}},
            "required": [["a"], "b", "c"],
        },
    },
}


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"messages": ["hi"]}, id="message-string"),
        pytest.param({"messages": [None]}, id="message-null"),
        pytest.param({"messages": "hi"}, id="messages-string"),
        pytest.param(
            {
                "messages": [{"role": "assistant", "tool_calls": 5}, {"role": "user", "content": "call it"}],
                "tools": [WEATHER],
            },
            id="tool-calls-number",
        ),
        pytest.param(
            {"messages": USER, "tools": [{"type": "function"}], "tool_choice": "required"}, id="tool-without-function"
        ),
        pytest.param(
            {"messages": USER, "tools": [{"type": "function", "function": "f"}], "tool_choice": "required"},
            id="function-string",
        ),
        pytest.param(
            {
                "messages": USER,
                "tools": [{"type": "function", "function": {"name": "f", "parameters": "p"}}],
                "tool_choice": "required",
            },
            id="parameters-string",
        ),
        pytest.param({"messages": USER, "tools": [ODD], "tool_choice": "required"}, id="odd-schema"),
        pytest.param(
            {"messages": USER, "tools": [WEATHER], "tool_choice": {"type": "function", "function": "x"}},
            id="tool-choice-function-string",
        ),
        pytest.param({"messages": USER, "stream_options": "x", "stream": True}, id="stream-options-string"),
    ],
)
async def test_malformed_requests_get_an_answer(body, monkeypatch):
    """The demo answers whatever reaches it (the app refuses these first, but the demo is
    also a plain upstream): no exception, a complete answer."""
    monkeypatch.setattr(demo, "WORD_DELAY", 0)
    assert demo.completion(body, "c", 1)["choices"][0]["finish_reason"] in ("stop", "tool_calls")
    chunks = [c async for c in demo.stream(body, "c", 1)]
    assert chunks[-1] == b"data: [DONE]\n\n"


@pytest.mark.parametrize("raw", [b"[1]", b"null", b"{bad"])
async def test_transport_refuses_a_body_that_is_not_an_object(raw):
    r = await demo.DemoTransport().handle_async_request(
        httpx.Request("POST", "http://demo/v1/chat/completions", content=raw)
    )
    assert r.status_code == 400
