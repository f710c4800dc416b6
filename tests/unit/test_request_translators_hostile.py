"""The request translators and request quirks on hostile input, without the app's checks
in front: a body either translates (and the result serialises) or raises RequestError,
never another exception; no tool is dropped silently and dropped names are strings."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformers.context import QUIRKS, Ctx
from transformers.errors import RequestError
from transformers.request_c2r import chat_to_responses, toolinfo_from_chat
from transformers.request_check import MAX_DEPTH, check_body, check_parsed
from transformers.request_quirks import prepare_chat, prepare_responses
from transformers.request_r2c import responses_to_chat
from transformers.schema import sanitize_tools


def refused(fn: Any, *args: Any) -> RequestError:
    with pytest.raises(RequestError) as info:
        fn(*args)
    assert info.value.status == 400 and info.value.type == "invalid_request_error"
    return info.value


def test_schema_walk_is_bounded() -> None:
    schema: Any = {"type": "string"}
    for _ in range(5000):
        schema = {"properties": {"a": schema}}
    tools = [{"type": "function", "function": {"name": "f", "strict": True, "parameters": schema}}]
    sanitize_tools(tools, frozenset(QUIRKS), lambda rule: None)  # no RecursionError


CHAT_BODY = {
    "model": "m",
    "stream": True,
    "messages": [
        {"role": "system", "content": "s"},
        {"role": "developer", "content": [{"type": "text", "text": "d"}]},
        {"role": "user", "content": [{"type": "text", "text": "t"}, {"type": "image_url", "image_url": {"url": "u"}}]},
        {
            "role": "assistant",
            "content": [{"type": "refusal", "refusal": "no"}],
            "reasoning_content": "r",
            "tool_calls": [{"id": "functions.f:0", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "functions.f:0", "content": "out"},
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {
                    "type": "object",
                    "required": ["a"],
                    "properties": {"a": {"type": "string"}},
                    "anyOf": [{"required": ["a"]}],
                },
            },
        },
        {"type": "builtin_function", "function": {"name": "$web_search"}},
        {"type": "custom", "custom": {"name": "c", "description": "d"}},
    ],
    "tool_choice": {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "f"}}]},
    },
    "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {}}},
}
RESP_BODY = {
    "model": "m",
    "stream": True,
    "store": False,
    "instructions": "i",
    "input": [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "t"}, {"type": "input_image", "image_url": "u"}],
        },
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}], "encrypted_content": "pxy1.x.y"},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "content": [{"type": "output_text", "text": "a"}, {"type": "refusal", "refusal": "r"}],
        },
        {"type": "function_call", "call_id": "call_1", "name": "f", "namespace": "ns__", "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": "p"},
        {"type": "function_call_output", "call_id": "call_1", "output": [{"type": "input_text", "text": "o"}]},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": "done"},
    ],
    "tools": [
        {
            "type": "function",
            "name": "g",
            "parameters": {"type": "object", "required": ["a"], "oneOf": [{"required": ["a"]}]},
        },
        {"type": "custom", "name": "apply_patch", "description": "d", "format": {"type": "grammar", "definition": "x"}},
        {"type": "namespace", "name": "ns__", "tools": [{"type": "function", "name": "f"}]},
        {"type": "web_search"},
    ],
    "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "g"}]},
    "reasoning": {"effort": "high"},
    "text": {"format": {"type": "json_schema", "name": "s", "schema": {}}},
}

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10, 10), st.floats(allow_nan=False), st.text(max_size=5)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8,
)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        out.append((*prefix, k))
        out.extend(_paths(v, (*prefix, k)))
    return out


def _mutated(data: st.DataObject, base: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(base)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(body)))
        parent: Any = body
        for seg in path[:-1]:
            parent = parent[seg]
        if data.draw(st.integers(0, 4)) == 0:
            del parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(data.draw(json_values))
    return body


def _translate(body: dict[str, Any], client: str, upstream: str, quirks: frozenset[str]) -> None:
    ctx = Ctx(quirks=quirks, upstream_model="up", envelope_key=b"k" * 32)
    try:
        if client == "chat" and upstream == "chat":
            ctx.tools = toolinfo_from_chat(body.get("tools"))
            out = prepare_chat(body, ctx, translated=False)
        elif client == "chat":
            out = prepare_responses(chat_to_responses(body, ctx), ctx, translated=True)
        elif upstream == "chat":
            out = prepare_chat(responses_to_chat(body, ctx), ctx, translated=True)
        else:
            out = prepare_responses(body, ctx, translated=False)
    except RequestError:
        return
    orjson.dumps(out)
    assert all(isinstance(name, str) for name in ctx.tools.dropped)


QUIRK_SETS = [frozenset(), frozenset(QUIRKS), frozenset(QUIRKS - {"moonshot_fields"})]
TRANSLATORS = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@TRANSLATORS
@given(data=st.data())
def test_translators_on_mutated_chat_bodies(data: st.DataObject) -> None:
    """Without check_body in front: each translator stands on its own."""
    body = _mutated(data, CHAT_BODY)
    if not isinstance(body.get("messages"), list):
        return  # check_body's own top-level rule
    _translate(body, "chat", data.draw(st.sampled_from(["chat", "responses"])), data.draw(st.sampled_from(QUIRK_SETS)))


@TRANSLATORS
@given(data=st.data())
def test_translators_on_mutated_responses_bodies(data: st.DataObject) -> None:
    body = _mutated(data, RESP_BODY)
    if not isinstance(body.get("input"), (str, list, type(None))) or not isinstance(
        body.get("instructions"), (str, type(None))
    ):
        return  # check_body's own top-level rules
    _translate(
        body, "responses", data.draw(st.sampled_from(["chat", "responses"])), data.draw(st.sampled_from(QUIRK_SETS))
    )


def _verdict(fn: Any, *args: Any) -> tuple[str | None, str | None] | None:
    try:
        fn(*args)
    except RequestError as e:
        return (e.param, e.code)
    return None


@TRANSLATORS
@given(data=st.data())
def test_check_parsed_refuses_what_check_body_refuses(data: st.DataObject) -> None:
    """A WebSocket turn's body is checked as parsed (check_parsed), an HTTP body from its
    bytes (check_body): the same verdict, naming the same path, on any mutated body.  The
    parsed side is the body as its bytes parse, as a frame's is: a value JSON cannot carry
    (an infinite float, which orjson writes as ``null``) is never in a parsed body."""
    protocol = data.draw(st.sampled_from(["chat", "responses"]))
    raw = orjson.dumps(_mutated(data, CHAT_BODY if protocol == "chat" else RESP_BODY))
    assert _verdict(check_parsed, orjson.loads(raw), protocol) == _verdict(check_body, raw, protocol)


def test_check_parsed_refuses_a_body_too_deep() -> None:
    deep: Any = "leaf"
    for _ in range(MAX_DEPTH):
        deep = [deep]
    body = {**RESP_BODY, "metadata": {"x": deep}}
    assert _verdict(check_parsed, body, "responses") == _verdict(check_body, orjson.dumps(body), "responses")
    assert _verdict(check_parsed, body, "responses") == (f"metadata.x{'[0]' * (MAX_DEPTH - 2)}", "nesting_too_deep")


@pytest.mark.parametrize(
    "tools",
    [
        [{"type": "namespace", "name": 5, "tools": [{"type": "function", "name": "f"}]}],
        [{"type": "namespace", "name": ["ns"], "tools": [{"type": "function", "name": "f"}]}],
        [{"type": "custom", "name": "c", "description": 5}],
        [{"type": "custom", "name": "c", "description": ["d"]}],
        [{"type": "function", "name": 5}],
    ],
)
def test_r2c_tool_type_confusion_is_a_request_error(tools: list[Any]) -> None:
    e = refused(responses_to_chat, {"model": "m", "input": "hi", "tools": tools}, Ctx())
    assert e.param and e.param.startswith("tools[0]")


@pytest.mark.parametrize(
    "items, param",
    [
        ([{"type": ["message"], "role": "user", "content": "x"}], "input[0].type"),
        ([{"type": "message", "role": {"r": 1}, "content": "x"}], "input[0].role"),
    ],
)
def test_r2c_item_type_confusion_is_a_request_error(items: list[Any], param: str) -> None:
    assert refused(responses_to_chat, {"model": "m", "input": items}, Ctx()).param == param


def test_c2r_type_confusion() -> None:
    msgs = [{"role": "assistant", "content": [{"type": "refusal", "refusal": 5}], "tool_calls": 5}]
    assert refused(chat_to_responses, {"model": "m", "messages": msgs}, Ctx()).param == "messages[0].tool_calls"
    ctx = Ctx()
    out = chat_to_responses(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [
                {"type": "builtin_function", "function": {"name": ["$web_search"]}},
                {"type": "function", "function": {"name": "f", "parameters": {"required": [["a"]], "properties": {}}}},
            ],
        },
        ctx,
    )
    assert ctx.tools.dropped == ["builtin_function"] and out["tools"][0]["name"] == "f"
    assert (
        toolinfo_from_chat(
            [
                {
                    "type": "function",
                    "function": {
                        "name": "f",
                        "parameters": {"required": [{"a": 1}], "properties": {"a": {"type": "string"}}},
                    },
                }
            ]
        ).single_string_param
        == {}
    )
