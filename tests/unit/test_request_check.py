"""Client request checks (transformers/request_check.py): the nesting bound, integers
beyond 64 bits, and valid bodies passing the shape checks."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from transformers import request_check
from transformers.context import QUIRKS, Ctx
from transformers.errors import RequestError
from transformers.request_check import MAX_DEPTH, check_depth, check_integers, check_request, too_deep
from transformers.request_quirks import prepare_chat
from transformers.request_r2c import responses_to_chat


def nested(n: int) -> Any:
    v: Any = "leaf"
    for _ in range(n):
        v = [v]
    return v


def refused(fn: Any, *args: Any) -> RequestError:
    with pytest.raises(RequestError) as info:
        fn(*args)
    assert info.value.status == 400 and info.value.type == "invalid_request_error"
    return info.value


# -- depth -----------------------------------------------------------------------------------


@pytest.mark.parametrize("meter", ["orjson", "walk"])
def test_depth_bound_is_exact(meter: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if meter == "walk":
        monkeypatch.setattr(request_check, "_WRAP", 0)
    check_depth({"a": nested(MAX_DEPTH - 1)})  # MAX_DEPTH containers with the body
    e = refused(check_depth, {"a": nested(MAX_DEPTH)})
    assert e.code == "nesting_too_deep"
    assert e.param == "a" + "[0]" * (MAX_DEPTH - 1)


def test_too_deep_names_the_first_path_and_stops_early() -> None:
    body = {"ok": nested(5), "x": [{"y": nested(2000)}]}
    assert too_deep(body, 10) == ("x", 0, "y", *([0] * 7))
    assert too_deep({"a": nested(3)}, 10) is None
    assert too_deep("scalar") is None


def test_translated_bodies_stay_writable_at_the_bound() -> None:
    """At MAX_DEPTH the deepest translation (a Responses tool schema under Chat's
    tools[].function) must still serialise."""
    schema: Any = {"type": "string"}
    for _ in range((MAX_DEPTH - 4) // 2):
        schema = {"type": "object", "properties": {"a": schema}}
    body = {"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f", "parameters": schema}]}
    check_depth(body)
    out = prepare_chat(responses_to_chat(body, Ctx(quirks=QUIRKS)), Ctx(quirks=QUIRKS), translated=True)
    orjson.dumps({"type": "response.created", "response": out})


# -- integers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        b"18446744073709551615",
        b"-9223372036854775808",
        b"1234567890123456789.5",
        b"1.2345678901234567890e5",
        b'"12345678901234567890123"',
        b"-1234567890123456789",
    ],
)
def test_integers_orjson_keeps_pass(text: bytes) -> None:
    check_integers(b'{"a":[' + text + b"]}")


@pytest.mark.parametrize(
    "text, code",
    [
        (b"18446744073709551616", "integer_above_max_value"),
        (b"-9223372036854775809", "integer_below_min_value"),
        (b"9" * 5000, "integer_above_max_value"),
    ],
)
def test_integers_beyond_64_bits_refused(text: bytes, code: str) -> None:
    e = refused(check_integers, b'{"a":{"b":[1,' + text + b"]}}")
    assert (e.param, e.code) == ("a.b[1]", code)


def test_integer_check_leaves_unreadable_bodies_alone() -> None:
    check_integers(b'{"a":"\xff", "b": 12345678901234567890123}')  # invalid UTF-8: the caller's error
    check_integers(b"[" * 5000 + b"12345678901234567890123")


# -- shapes ----------------------------------------------------------------------------------


def test_valid_bodies_pass() -> None:
    chat = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "s"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "t"},
                    {"type": "image_url", "image_url": {"url": "u"}},
                    {"type": "image_url", "image_url": "u"},
                    {"type": "video_url", "video_url": {"url": "v"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "r",
                "tool_calls": [
                    {"id": "functions.f:0", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "functions.f:0", "content": [{"type": "text", "text": "x"}]},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}], "partial": True},
        ],
        "tools": [
            {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": ["a"]}}},
            {"type": "builtin_function", "function": {"name": "$web_search"}},
            {"type": "custom", "custom": {"name": "c", "format": {"type": "text"}}},
        ],
        "tool_choice": {
            "type": "allowed_tools",
            "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "f"}}]},
        },
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {}}},
    }
    check_request(orjson.dumps(chat), chat, "chat")
    resp = {
        "model": "m",
        "input": [
            {"role": "user", "content": "hi"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "a", "annotations": []}],
            },
            {"type": "reasoning", "summary": [], "encrypted_content": "gAAA"},
            {"type": "function_call", "call_id": "c", "name": "f", "namespace": "ns", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image", "image_url": "u"}]},
            {"type": "item_reference", "id": "x"},
            {"type": "some_future_item", "payload": [1, {"a": None}]},
        ],
        "tools": [
            {"type": "namespace", "name": "ns", "tools": [{"name": "f"}, {"type": "custom", "name": "g"}]},
            {"type": "web_search"},
            {"type": "mcp", "server_label": "s"},
        ],
        "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "namespace", "name": "ns"}]},
        "text": {"format": {"type": "text"}},
    }
    check_request(orjson.dumps(resp), resp, "responses")
