"""The request translators and request quirks on hostile input, without the app's checks
in front: a body either translates (and the result serialises) or raises RequestError,
never another exception; no tool is dropped silently and dropped names are strings.

Toward a Messages upstream too: ``chat_to_messages`` (transformers/request_c2m.py) and
``prepare_messages`` (transformers/request_messages.py), on mutated Chat / Responses /
Messages bodies and on any JSON-ish body at all."""

from __future__ import annotations

import copy
from typing import Any, cast

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.protocol_samples import UPSTREAMS, hello
from transformers.bridge import DIRECTIONS
from transformers.context import QUIRKS, Ctx
from transformers.errors import RequestError
from transformers.protocols import SPECS, check_body, check_parsed
from transformers.request_c2m import chat_to_messages
from transformers.request_c2r import chat_to_responses, toolinfo_from_chat
from transformers.request_check import MAX_DEPTH
from transformers.request_messages import prepare_messages
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
    """The Bridge's row of (client, upstream) translating ``body`` (transformers/protocols.py)."""
    ctx = Ctx(quirks=quirks, upstream_model="up", envelope_key=b"k" * 32)
    try:
        out = DIRECTIONS[(client, upstream)].translate(copy.deepcopy(body), ctx)
        assert isinstance(out, dict), out
    except RequestError:
        return
    orjson.dumps(out)
    assert all(isinstance(name, str) for name in ctx.tools.dropped)


QUIRK_SETS = [frozenset(), frozenset(QUIRKS), frozenset(QUIRKS - {"moonshot_fields"})]
# toward a Messages upstream: none, Anthropic's own rows, an Anthropic-compatible endpoint's
# (providers/profiles.py), everything
MESSAGES_QUIRK_SETS = [
    frozenset(),
    frozenset({"anthropic_signatures", "messages_server_tools", "anthropic_beta"}),
    frozenset({"messages_thinking_replay", "messages_compat"}),
    frozenset(QUIRKS) | {"messages_thinking_replay", "messages_compat"},
]
TRANSLATORS = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@TRANSLATORS
@given(data=st.data())
def test_translators_on_mutated_chat_bodies(data: st.DataObject) -> None:
    """Without check_body in front: each translator stands on its own."""
    body = _mutated(data, CHAT_BODY)
    if not isinstance(body.get("messages"), list):
        return  # check_body's own top-level rule
    _translate(body, "chat", data.draw(st.sampled_from(UPSTREAMS)), data.draw(st.sampled_from(QUIRK_SETS)))


@TRANSLATORS
@given(data=st.data())
def test_translators_on_mutated_responses_bodies(data: st.DataObject) -> None:
    body = _mutated(data, RESP_BODY)
    if not isinstance(body.get("input"), (str, list, type(None))) or not isinstance(
        body.get("instructions"), (str, type(None))
    ):
        return  # check_body's own top-level rules
    _translate(body, "responses", data.draw(st.sampled_from(UPSTREAMS)), data.draw(st.sampled_from(QUIRK_SETS)))


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


# -- toward a Messages upstream -------------------------------------------------------------------

MSG_BODY = {
    "model": "m",
    "stream": True,
    "max_tokens": 32000,
    "system": [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2"},
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": ""},
    ],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "run ls"}, {"type": "text", "text": ""}]},
        {"role": "system", "content": "# Environment"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "t", "signature": "c2lnbmF0dXJl"},
                {"type": "thinking", "thinking": "u", "signature": "pxy1.x.y"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Running it."},
                {"type": "tool_use", "id": "functions.Bash:0", "name": "Bash", "input": {"command": "ls"}},
                {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "functions.Bash:0", "content": "a.py", "is_error": False},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": [
                        {"type": "text", "text": ""},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                    ],
                    "cache_control": {"type": "ephemeral"},
                },
                {"type": "text", "text": "go on"},
            ],
        },
        {"role": "assistant", "content": ""},
    ],
    "tools": [
        {"name": "Bash", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}},
        {"type": "custom", "name": "Read", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
    ],
    "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
    "thinking": {"type": "adaptive", "display": "updates"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "container": "c",
    "mcp_servers": [{"type": "url", "url": "https://x"}],
    "metadata": {"user_id": "u"},
    "output_config": {"effort": "high"},
}
# a Chat body with what chat_to_messages reads besides CHAT_BODY's: the limits, stop, the
# effort, sampling, a user, a json_schema format and a data: image
CHAT_TO_MSG_BODY = {
    **CHAT_BODY,
    "max_completion_tokens": 4096,
    "stop": ["\n\n", ""],
    "reasoning_effort": "high",
    "temperature": 1.5,
    "top_p": 0.9,
    "user": "u",
    "n": 1,
    "parallel_tool_calls": False,
    "tool_choice": {"type": "function", "function": {"name": "f"}},
    "messages": [
        *cast(list[Any], CHAT_BODY["messages"]),
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "r",
            "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "g", "arguments": "[1]"}}],
        },
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "o"}]},
    ],  # fmt: skip
}

JSONISH = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=6),
        st.sampled_from(
            [
                "user",
                "assistant",
                "system",
                "tool",
                "developer",
                "text",
                "image",
                "tool_use",
                "tool_result",
                "thinking",
                "redacted_thinking",
                "function",
                "custom",
                "auto",
                "any",
                "none",
                "required",
                "enabled",
                "adaptive",
                "data:image/png;base64,AA",
                "https://x",
                "pxy1.a.b",
                "functions.f:0",
                "sbx_00",
                "{}",
                "[1]",
            ]  # fmt: skip
        ),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=14,
)
MSG_FIELDS = sorted(set(MSG_BODY) | set(CHAT_TO_MSG_BODY) | {"top_k", "stop_sequences", "max_output_tokens"})
MSG_KEYS = ["type", "role", "content", "text", "id", "name", "input", "tool_use_id", "thinking", "signature",
            "data", "source", "tool_calls", "tool_call_id", "function", "arguments", "image_url", "url",
            "reasoning_content", "refusal", "cache_control", "input_schema", "parameters", "is_error"]  # fmt: skip


def _shaped(leaf: Any) -> Any:
    """JSON made of the translators' own keys, a few levels deep: arbitrary, yet reaching
    into the walks over messages, blocks and tools."""
    return st.recursive(
        leaf,
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.sampled_from(MSG_KEYS), c, max_size=5),
        max_leaves=16,
    )


@TRANSLATORS
@given(data=st.data())
def test_chat_to_messages_on_mutated_chat_bodies(data: st.DataObject) -> None:
    """Any mutation of a Chat body, even its top level: a Messages body or a RequestError."""
    body = _mutated(data, data.draw(st.sampled_from([CHAT_BODY, CHAT_TO_MSG_BODY])))
    _translate(body, "chat", "messages", data.draw(st.sampled_from(MESSAGES_QUIRK_SETS)))


@TRANSLATORS
@given(data=st.data())
def test_responses_to_messages_on_mutated_responses_bodies(data: st.DataObject) -> None:
    body = _mutated(data, RESP_BODY)
    if not isinstance(body.get("input"), (str, list, type(None))) or not isinstance(
        body.get("instructions"), (str, type(None))
    ):
        return  # check_body's own top-level rules (responses_to_chat's, as above)
    _translate(body, "responses", "messages", data.draw(st.sampled_from(MESSAGES_QUIRK_SETS)))


@TRANSLATORS
@given(data=st.data())
def test_prepare_messages_on_mutated_messages_bodies(data: st.DataObject) -> None:
    """A Messages client's body to a Messages upstream: its top level is all the app checks
    of it (the types of ``check_body``'s table), so any mutation below is possible."""
    _translate(_mutated(data, MSG_BODY), "messages", "messages", data.draw(st.sampled_from(MESSAGES_QUIRK_SETS)))


@TRANSLATORS
@given(data=st.data())
def test_every_row_translates_a_mutated_body_of_its_clients(data: st.DataObject) -> None:
    """Every client row's sample body (tests/protocol_samples.py, a function offered), mutated
    below its top level, toward every upstream row: a RequestError or a body, never a crash."""
    client = data.draw(st.sampled_from(UPSTREAMS))
    fn = {"name": "Read", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}
    body = _mutated(data, hello(client, [fn]))
    top = SPECS[client].check.types
    if any(body.get(k) is not None and not isinstance(body[k], t) for k, t in top.items()):
        return  # check_body's own top-level rules
    _translate(body, client, data.draw(st.sampled_from(UPSTREAMS)), data.draw(st.sampled_from(QUIRK_SETS)))


@TRANSLATORS
@given(data=st.data())
def test_messages_translators_on_any_jsonish_body(data: st.DataObject) -> None:
    """chat_to_messages and prepare_messages, each on its own, on any JSON-ish object: a dict
    or a RequestError, never another exception."""
    body = data.draw(st.dictionaries(st.sampled_from(MSG_FIELDS), st.one_of(JSONISH, _shaped(JSONISH)), max_size=10))
    if data.draw(st.booleans()):
        body["messages"] = data.draw(st.lists(_shaped(JSONISH), max_size=5))
    quirks = data.draw(st.sampled_from(MESSAGES_QUIRK_SETS))
    for fn in (chat_to_messages, prepare_messages):
        ctx = Ctx(quirks=quirks, upstream_model=data.draw(st.sampled_from(["up", ""])), envelope_key=b"k" * 32)
        try:
            out = fn(copy.deepcopy(body), ctx)
        except RequestError as e:
            assert e.status == 400 and isinstance(e.param, (str, type(None)))
            continue
        assert isinstance(out, dict), (fn.__name__, out)
        assert all(isinstance(name, str) for name in ctx.tools.dropped)


def test_prepare_messages_leaves_the_clients_body_alone() -> None:
    body = copy.deepcopy(MSG_BODY)
    prepare_messages(body, Ctx(upstream_model="up"))
    assert body == MSG_BODY
