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
                    "arguments": '{"location":"Paris"}',
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


# ----------------------------------------------------------------------- tool calls like a model's

SCHEMAS = {
    "flat-required": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["path"],
    },
    "nothing-required": {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}},
    "no-properties": {"type": "object", "properties": {}},
    "enum-and-types": {
        "type": "object",
        "properties": {
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 3, "maximum": 7},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "step": {"type": "integer", "multipleOf": 5, "minimum": 6},
            "verbose": {"type": "boolean"},
            "maybe": {"type": ["string", "null"]},
            "nothing": {"type": "null"},
            "fixed": {"const": "v1"},
        },
        "required": ["unit", "days", "ratio", "step", "verbose", "maybe", "nothing", "fixed"],
        "additionalProperties": False,
    },
    "formats": {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "email": {"type": "string", "format": "email"},
            "site": {"type": "string", "format": "uri"},
            "id": {"type": "string", "format": "uuid"},
            "code": {"type": "string", "minLength": 12, "maxLength": 12},
            "short": {"type": "string", "maxLength": 2},
        },
        "required": ["when", "day", "email", "site", "id", "code", "short"],
    },
    "nested": {
        "type": "object",
        "properties": {
            "edits": {
                "type": "array",
                "minItems": 2,
                "items": {
                    "type": "object",
                    "properties": {
                        "file": {"type": "string"},
                        "range": {
                            "type": "object",
                            "properties": {"start": {"type": "integer"}, "end": {"type": "integer"}},
                            "required": ["start", "end"],
                        },
                        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "minItems": 2},
                    },
                    "required": ["file", "range", "tags"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["edits"],
    },
    "refs-and-unions": {
        "type": "object",
        "$defs": {
            "target": {"type": "object", "properties": {"host": {"type": "string"}}, "required": ["host"]},
            "node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}, "required": ["next"]},
        },
        "properties": {
            "target": {"$ref": "#/$defs/target"},
            "mode": {"anyOf": [{"type": "null"}, {"type": "string", "enum": ["fast", "safe"]}]},
            "either": {"oneOf": [{"type": "integer", "minimum": 10}, {"type": "string"}]},
            "both": {
                "allOf": [
                    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                    {"properties": {"b": {"type": "integer"}}, "required": ["b"]},
                ]
            },
        },
        "required": ["target", "mode", "either", "both"],
    },
    "codex-shell": {
        "type": "object",
        "properties": {
            "command": {"type": "array", "items": {"type": "string"}},
            "workdir": {"type": "string"},
            "timeout_ms": {"type": "number"},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
    "codex-exec-command": {
        "type": "object",
        "properties": {"cmd": {"type": "string"}, "yield_time_ms": {"type": "number"}},
        "required": ["cmd"],
    },
    "prefix-items": {
        "type": "object",
        "properties": {"pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]}},
        "required": ["pair"],
    },
    "min-properties": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "string"}},
        "minProperties": 2,
    },
}


def _tool(name: str, params: dict) -> dict:
    return {"type": "function", "function": {"name": name, "description": f"the {name} tool", "parameters": params}}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_tool_call_arguments_satisfy_the_schema(name):
    jsonschema = pytest.importorskip("jsonschema")  # in requirements-test.lock (llm-comply needs it)
    schema = SCHEMAS[name]
    p = demo.plan({"messages": USER, "tools": [_tool(name, schema)]})
    args = orjson.loads(p["tool_call"]["arguments"])
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(args)
    assert isinstance(args, dict)


@pytest.mark.parametrize(
    "name,expect",
    [
        ("flat-required", {"path": "README.md"}),
        ("nothing-required", {"q": "switchboard"}),  # a call is never empty when the tool takes something
        ("no-properties", {}),
        ("codex-shell", {"command": ["echo", "hello from switchboard"]}),
        ("codex-exec-command", {"cmd": "echo hello from switchboard"}),
    ],
)
def test_tool_call_arguments_are_plausible(name, expect):
    p = demo.plan({"messages": USER, "tools": [_tool(name, SCHEMAS[name])]})
    assert orjson.loads(p["tool_call"]["arguments"]) == expect


def test_recursive_ref_terminates():
    """A schema no finite value satisfies (a required self-reference) still gets an answer."""
    node = {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}, "required": ["next"]}
    schema = {"type": "object", "$defs": {"node": node}, "properties": {"head": {"$ref": "#/$defs/node"}}}
    args = orjson.loads(demo.plan({"messages": USER, "tools": [_tool("walk", schema)]})["tool_call"]["arguments"])
    depth = 0
    v = args["head"]
    while isinstance(v, dict):
        v, depth = v["next"], depth + 1
    assert 1 < depth <= 8 and v == "demo"


READ = _tool("read_file", SCHEMAS["flat-required"])
SHELL = _tool("shell", SCHEMAS["codex-shell"])
SEARCH = _tool("search", SCHEMAS["nothing-required"])
SEARCH_DOCS = _tool("search_docs", SCHEMAS["nothing-required"])


def _said(text: str) -> list[dict]:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]


@pytest.mark.parametrize(
    "messages,tools,choice,called",
    [
        pytest.param(_said("hi"), [READ, SHELL], None, "read_file", id="auto-first-tool"),
        pytest.param(_said("hi"), [READ, SHELL], "auto", "read_file", id="auto-string"),
        pytest.param(_said("please run shell for me"), [READ, SHELL], None, "shell", id="prompt-names-it"),
        pytest.param(_said("use search_docs now"), [SEARCH, SEARCH_DOCS], None, "search_docs", id="longest-name-wins"),
        pytest.param(_said("shellfish"), [READ, SHELL], None, "read_file", id="name-inside-a-word-is-not-named"),
        pytest.param(_said("run shell"), [READ, SHELL], "required", "shell", id="required"),
        pytest.param(
            _said("run shell"),
            [READ, SHELL],
            {"type": "function", "function": {"name": "read_file"}},
            "read_file",
            id="forced-beats-the-prompt",
        ),
        pytest.param(
            _said("hi"), [READ, SHELL], {"type": "function", "name": "shell"}, "shell", id="forced-responses-shape"
        ),
        pytest.param(
            _said("hi"),
            [READ, SHELL, SEARCH],
            {
                "type": "allowed_tools",
                "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "search"}}]},
            },
            "search",
            id="allowed-tools",
        ),
        pytest.param(_said("run shell"), [READ, SHELL], "none", None, id="choice-none-answers-text"),
        pytest.param(
            [
                *_said("run shell"),
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            ],
            [READ, SHELL],
            None,
            None,
            id="after-a-tool-result-text",
        ),
        pytest.param(
            _said("hi"), [{"type": "custom", "custom": {"name": "apply_patch"}}], None, None, id="no-function-tools"
        ),
    ],
)
def test_which_tool_is_called(messages, tools, choice, called):
    body = {"messages": messages, "tools": tools}
    if choice is not None:
        body["tool_choice"] = choice
    p = demo.plan(body)
    if called is None:
        assert "tool_call" not in p and p["text"]
    else:
        assert p["tool_call"]["name"] == called
        assert p["tool_call"]["id"] == f"functions.{called}:0"


def test_second_call_numbers_its_id():
    history = [
        *_said("hi"),
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "functions.read_file:0",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "functions.read_file:0", "content": "text"},
        {"role": "assistant", "content": "The tool returned: text"},
        {"role": "user", "content": "again"},
    ]
    assert demo.plan({"messages": history, "tools": [READ]})["tool_call"]["id"] == "functions.read_file:1"


def test_usage_reads_every_message_but_the_newest_from_cache() -> None:
    body = {"model": "demo", "messages": [{"role": "system", "content": "be brief"},
                                          {"role": "user", "content": "say hello to me"},
                                          {"role": "assistant", "content": "hello"},
                                          {"role": "user", "content": "again"}]}  # fmt: skip
    usage = demo.completion(body, "chatcmpl-x", 1)["usage"]
    assert usage["prompt_tokens"] == 2 + 4 + 1 + 1 + 1
    assert usage["prompt_tokens_details"] == {"cached_tokens": 2 + 4 + 1}
