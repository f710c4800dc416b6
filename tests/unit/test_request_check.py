"""Client request checks (transformers/request_check.py): the nesting bound, integers
beyond 64 bits, and valid bodies passing the shape checks."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformers import request_check
from transformers.context import QUIRKS, Ctx
from transformers.errors import RequestError
from transformers.request_check import (
    CHAT,
    MAX_DEPTH,
    RESPONSES,
    check_depth,
    check_integers,
    check_request,
    check_values,
    may_hold_big_float,
    too_deep,
)
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


def test_the_meter_writes_the_wrapped_body_and_keeps_no_reference_to_it() -> None:
    """The meter's reused lists: its output is the body wrapped in ``_WRAP`` lists, and
    after a pass or a refusal the lists hold no body (a large one would stay alive)."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert check_depth(body) == _wrapped(body)
    refused(check_depth, {"a": nested(MAX_DEPTH)})
    assert check_depth(body) == _wrapped(body)  # the lists are whole again after a refusal
    assert request_check._SHELLS
    for outer, inner in request_check._SHELLS:
        assert inner == [None] and orjson.dumps(outer) == _wrapped(None)


def _wrapped(body: Any) -> bytes:
    w = body
    for _ in range(request_check._WRAP):
        w = [w]
    return orjson.dumps(w)


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


def _verdict(fn: Any, *args: Any) -> tuple[str, str] | None:
    try:
        fn(*args)
    except RequestError as e:
        return (e.param or "", e.code or "")
    return None


# numbers as a client may write them: ints of any size, with signs, exponents and fractions
_NUMBER = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(lambda n: str(n).encode()),
    st.integers(min_value=2**63 - 3, max_value=2**64 + 3).map(lambda n: str(n).encode()),
    st.integers(min_value=2**63 - 3, max_value=2**63 + 3).map(lambda n: b"-%d" % n),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: orjson.dumps(f)),
    st.sampled_from([b"1e19", b"1E+19", b"-1.5e18", b"12345678901234567890.0", b"0.5e+3"]),
)
# strings that look like numbers or exponents, or carry many '+' (base64)
_STRING = st.one_of(
    st.text(alphabet="0123456789e+E-. ab", max_size=40),
    st.sampled_from(["1e+19", "x" + "+" * 70 + "1e+30", "12345678901234567890123", "a+b", "9e+"]),
).map(lambda t: orjson.dumps(t))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_NUMBER, _STRING), min_size=1, max_size=6))
def test_the_exponent_shortcut_refuses_exactly_what_the_raw_scan_refuses(values: list[bytes]) -> None:
    """check_values skips the raw digit-run scan when orjson's writing of the body shows no
    big float: the verdict (and the path it names) must be the exact scan's."""
    raw = b'{"model":"m","a":[' + b",".join(values) + b'],"b":{"c":' + values[-1] + b"}}"
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return  # too big even for a double: check_body names it from the raw scan alone
    assert _verdict(check_values, raw, body) == _verdict(check_integers, raw)


def test_the_exponent_shortcut_is_on_and_bounded() -> None:
    assert request_check._EXPONENT_SHORTCUT  # this orjson writes big floats as <digits>e+<digits>
    assert not may_hold_big_float(b'[{"a":"x+y","b":1.5,"c":12,"d":"e+"}]')
    assert may_hold_big_float(orjson.dumps([2.0**63]))
    assert may_hold_big_float(b'["9e+1"]')  # a string that looks like one: the exact scan decides
    looks = request_check._PLUS_LOOKS
    assert not may_hold_big_float(orjson.dumps(["+" * looks]))  # every sign looked at
    assert may_hold_big_float(orjson.dumps(["+" * (looks + 1)]))  # past the bound: the exact scan decides


def test_without_the_shortcut_the_raw_scan_still_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(request_check, "_EXPONENT_SHORTCUT", False)
    raw = b'{"a":[1,18446744073709551616]}'
    e = refused(check_values, raw, orjson.loads(raw))
    assert (e.param, e.code) == ("a[1]", "integer_above_max_value")


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
    check_request(orjson.dumps(chat), chat, CHAT)
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
    check_request(orjson.dumps(resp), resp, RESPONSES)
