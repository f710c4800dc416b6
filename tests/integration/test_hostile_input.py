"""Untrusted client bodies never crash a request: a malformed or hostile body gets HTTP 400
``invalid_request_error`` naming the offending param, before any upstream call.

Table driven: every case runs on its route against every upstream kind (the in-process
``demo`` provider, a mocked Chat upstream, a mocked Responses upstream), stream and
non-stream; no upstream may be called.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from app.main import create_app
from providers.demo import DemoTransport

from .conftest import CHAT_URL, RESP_URL, chat_chunk, make_config, resp_stream_two_calls, sse_body

CHAT = "/v1/chat/completions"
RESP = "/v1/responses"
MODELS = ("demo", "chat-model", "resp-model")

BIG = b"123456789012345678901234567890"
NEG_BIG = b"-9223372036854775809"
U64_MAX = 18446744073709551615
I64_MIN = -9223372036854775808


def chat_base() -> dict[str, Any]:
    return {
        "model": "demo",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "list files"}]},
            {
                "role": "assistant",
                "content": "ok",
                "tool_calls": [
                    {"id": "functions.ls:0", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "functions.ls:0", "content": "a.py"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "ls",
                    "description": "list",
                    "parameters": {"type": "object", "properties": {"dir": {"type": "string"}}, "required": ["dir"]},
                },
            }
        ],
    }


def resp_base() -> dict[str, Any]:
    return {
        "model": "demo",
        "instructions": "be brief",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
            {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": [{"type": "input_text", "text": "a.py"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hm"}]},
            {
                "type": "custom_tool_call",
                "call_id": "call_2",
                "name": "apply_patch",
                "input": "*** Begin Patch\n*** End Patch",
            },
            {"type": "custom_tool_call_output", "call_id": "call_2", "output": "done"},
        ],
        "tools": [
            {
                "type": "function",
                "name": "ls",
                "description": "list",
                "parameters": {"type": "object", "properties": {"dir": {"type": "string"}}, "required": ["dir"]},
            },
            {"type": "custom", "name": "apply_patch", "description": "patch", "format": {"type": "text"}},
            {"type": "namespace", "name": "mcp__gh__", "tools": [{"type": "function", "name": "get_me"}]},
        ],
    }


def nest(n: int) -> bytes:
    """``n`` nested arrays, as JSON text."""
    return b"[" * n + b"]" * n


def deep_schema(n: int) -> bytes:
    """A schema with ``n`` levels of ``properties``: 2n + 1 nested objects."""
    return b'{"type":"object","properties":{"a":' * n + b'{"type":"string"}' + b"}}" * n


class Raw:
    """A JSON text spliced into a body as is (too deep for orjson to write, a big integer…)."""

    def __init__(self, text: bytes) -> None:
        self.text = text


def _set(body: Any, path: tuple[Any, ...], value: Any) -> None:
    node = body
    for seg in path[:-1]:
        node = node[seg]
    if isinstance(node, list) and path[-1] == len(node):
        node.append(value)
    else:
        node[path[-1]] = value


def build(base: dict[str, Any], path: tuple[Any, ...], value: Any, model: str, stream: bool) -> bytes:
    body = {**base, "model": model, "stream": stream}
    raws: dict[bytes, bytes] = {}

    def mark(v: Any) -> Any:
        if isinstance(v, Raw):
            key = f"@@raw{len(raws)}@@".encode()
            raws[b'"' + key + b'"'] = v.text
            return key.decode()
        return v

    _set(body, path, mark(value))
    raw = orjson.dumps(body)
    for k, v in raws.items():
        raw = raw.replace(k, v)
    return raw


# (case id, route, path to replace, value, param named by the 400, code)
Case = tuple[str, str, tuple[Any, ...], Any, str | None, str]
DEEP = "nesting_too_deep"
TYPE = "invalid_type"
MISSING = "missing_required_parameter"

CASES: list[Case] = [
    # nesting: orjson reads 1024 levels, writes 254
    *[
        (f"chat-deep-metadata-{n}", CHAT, ("metadata",), Raw(nest(n)), "metadata" + "[0]" * 127, DEEP)
        for n in (255, 300, 1023)
    ],
    *[
        (f"resp-deep-metadata-{n}", RESP, ("metadata",), Raw(nest(n)), "metadata" + "[0]" * 127, DEEP)
        for n in (255, 300, 1023)
    ],
    ("chat-deep-unknown-field", CHAT, ("x_extra",), Raw(nest(600)), "x_extra" + "[0]" * 127, DEEP),
    (
        "chat-deep-tool-schema",
        CHAT,
        ("tools", 0, "function", "parameters"),
        Raw(deep_schema(500)),
        "tools[0].function.parameters" + ".properties.a" * 62,
        DEEP,
    ),
    (
        "resp-deep-tool-schema",
        RESP,
        ("tools", 0, "parameters"),
        Raw(deep_schema(500)),
        "tools[0].parameters" + ".properties.a" * 62 + ".properties",
        DEEP,
    ),
    (
        "chat-deep-content-part",
        CHAT,
        ("messages", 1, "content", 0, "x"),
        Raw(nest(400)),
        "messages[1].content[0].x" + "[0]" * 123,
        DEEP,
    ),
    (
        "resp-deep-input-part",
        RESP,
        ("input", 0, "content", 0, "x"),
        Raw(nest(400)),
        "input[0].content[0].x" + "[0]" * 123,
        DEEP,
    ),
    (
        "resp-deep-text-format",
        RESP,
        ("text",),
        Raw(b'{"format":{"type":"json_schema","name":"s","schema":' + deep_schema(300) + b"}}"),
        "text.format.schema" + ".properties.a" * 62 + ".properties",
        DEEP,
    ),
    # Chat messages and content parts
    ("chat-message-string", CHAT, ("messages",), ["hi"], "messages[0]", TYPE),
    ("chat-message-null", CHAT, ("messages",), [None], "messages[0]", TYPE),
    ("chat-message-number", CHAT, ("messages", 2), 7, "messages[2]", TYPE),
    ("chat-role-number", CHAT, ("messages", 1, "role"), 5, "messages[1].role", TYPE),
    ("chat-role-missing", CHAT, ("messages", 1), {"content": "hi"}, "messages[1].role", MISSING),
    ("chat-content-number", CHAT, ("messages", 1, "content"), 5, "messages[1].content", TYPE),
    ("chat-content-object", CHAT, ("messages", 1, "content"), {"text": "hi"}, "messages[1].content", TYPE),
    ("chat-part-string", CHAT, ("messages", 1, "content", 0), "hi", "messages[1].content[0]", TYPE),
    ("chat-part-text-number", CHAT, ("messages", 1, "content", 0, "text"), 5, "messages[1].content[0].text", TYPE),
    ("chat-part-type-list", CHAT, ("messages", 1, "content", 0, "type"), ["text"], "messages[1].content[0].type", TYPE),
    (
        "chat-part-refusal-number",
        CHAT,
        ("messages", 2, "content"),
        [{"type": "refusal", "refusal": 5}],
        "messages[2].content[0].refusal",
        TYPE,
    ),
    (
        "chat-part-image-url-number",
        CHAT,
        ("messages", 1, "content", 0),
        {"type": "image_url", "image_url": 5},
        "messages[1].content[0].image_url",
        TYPE,
    ),
    ("chat-tool-calls-number", CHAT, ("messages", 2, "tool_calls"), 5, "messages[2].tool_calls", TYPE),
    ("chat-tool-call-string", CHAT, ("messages", 2, "tool_calls", 0), "x", "messages[2].tool_calls[0]", TYPE),
    (
        "chat-tool-call-id-list",
        CHAT,
        ("messages", 2, "tool_calls", 0, "id"),
        ["x"],
        "messages[2].tool_calls[0].id",
        TYPE,
    ),
    (
        "chat-tool-call-function-string",
        CHAT,
        ("messages", 2, "tool_calls", 0, "function"),
        "ls",
        "messages[2].tool_calls[0].function",
        TYPE,
    ),
    (
        "chat-tool-call-name-list",
        CHAT,
        ("messages", 2, "tool_calls", 0, "function", "name"),
        ["ls"],
        "messages[2].tool_calls[0].function.name",
        TYPE,
    ),
    ("chat-tool-call-id-object", CHAT, ("messages", 3, "tool_call_id"), {}, "messages[3].tool_call_id", TYPE),
    # Chat tools and tool_choice
    ("chat-tool-number", CHAT, ("tools", 0), 5, "tools[0]", TYPE),
    ("chat-tool-type-list", CHAT, ("tools", 0, "type"), ["function"], "tools[0].type", TYPE),
    ("chat-tool-function-string", CHAT, ("tools", 0, "function"), "ls", "tools[0].function", TYPE),
    ("chat-tool-name-number", CHAT, ("tools", 0, "function", "name"), 5, "tools[0].function.name", TYPE),
    (
        "chat-tool-description-list",
        CHAT,
        ("tools", 0, "function", "description"),
        ["d"],
        "tools[0].function.description",
        TYPE,
    ),
    (
        "chat-schema-required-entry",
        CHAT,
        ("tools", 0, "function", "parameters", "required"),
        [["dir"]],
        "tools[0].function.parameters.required[0]",
        TYPE,
    ),
    (
        "chat-schema-required-number",
        CHAT,
        ("tools", 0, "function", "parameters", "required"),
        3,
        "tools[0].function.parameters.required",
        TYPE,
    ),
    (
        "chat-builtin-function-name",
        CHAT,
        ("tools", 1),
        {"type": "builtin_function", "function": {"name": ["$web_search"]}},
        "tools[1].function.name",
        TYPE,
    ),
    (
        "chat-custom-tool-description",
        CHAT,
        ("tools", 1),
        {"type": "custom", "custom": {"name": "p", "description": 5}},
        "tools[1].custom.description",
        TYPE,
    ),
    ("chat-tool-choice-number", CHAT, ("tool_choice",), 5, "tool_choice", TYPE),
    (
        "chat-tool-choice-function",
        CHAT,
        ("tool_choice",),
        {"type": "function", "function": "ls"},
        "tool_choice.function",
        TYPE,
    ),
    (
        "chat-tool-choice-allowed",
        CHAT,
        ("tool_choice",),
        {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": 5}},
        "tool_choice.allowed_tools.tools",
        TYPE,
    ),
    ("chat-response-format-string", CHAT, ("response_format",), "json", "response_format", TYPE),
    # Responses input items and content parts
    ("resp-item-string", RESP, ("input",), ["hi"], "input[0]", TYPE),
    ("resp-item-null", RESP, ("input", 1), None, "input[1]", TYPE),
    ("resp-item-type-list", RESP, ("input", 0, "type"), ["message"], "input[0].type", TYPE),
    ("resp-item-type-object", RESP, ("input", 1, "type"), {"t": 1}, "input[1].type", TYPE),
    ("resp-item-role-number", RESP, ("input", 0, "role"), 5, "input[0].role", TYPE),
    ("resp-message-role-missing", RESP, ("input", 0), {"type": "message", "content": "hi"}, "input[0].role", MISSING),
    ("resp-content-number", RESP, ("input", 0, "content"), 5, "input[0].content", TYPE),
    ("resp-part-number", RESP, ("input", 0, "content", 0), 5, "input[0].content[0]", TYPE),
    ("resp-part-text-number", RESP, ("input", 0, "content", 0, "text"), 5, "input[0].content[0].text", TYPE),
    ("resp-part-type-object", RESP, ("input", 0, "content", 0, "type"), {}, "input[0].content[0].type", TYPE),
    ("resp-call-id-list", RESP, ("input", 1, "call_id"), ["call_1"], "input[1].call_id", TYPE),
    ("resp-call-name-number", RESP, ("input", 1, "name"), 5, "input[1].name", TYPE),
    ("resp-call-namespace-list", RESP, ("input", 1, "namespace"), ["ns"], "input[1].namespace", TYPE),
    ("resp-custom-call-input-number", RESP, ("input", 4, "input"), 5, "input[4].input", TYPE),
    ("resp-output-part-number", RESP, ("input", 2, "output", 0), 5, "input[2].output[0]", TYPE),
    ("resp-output-call-id-list", RESP, ("input", 2, "call_id"), ["call_1"], "input[2].call_id", TYPE),
    ("resp-reasoning-summary-string", RESP, ("input", 3, "summary"), "hm", "input[3].summary", TYPE),
    ("resp-reasoning-part-text", RESP, ("input", 3, "summary", 0, "text"), ["hm"], "input[3].summary[0].text", TYPE),
    ("resp-reasoning-encrypted-number", RESP, ("input", 3, "encrypted_content"), 5, "input[3].encrypted_content", TYPE),
    # Responses tools, tool_choice, text
    ("resp-tool-number", RESP, ("tools", 0), 5, "tools[0]", TYPE),
    ("resp-tool-type-list", RESP, ("tools", 0, "type"), ["function"], "tools[0].type", TYPE),
    ("resp-tool-name-number", RESP, ("tools", 0, "name"), 5, "tools[0].name", TYPE),
    ("resp-tool-name-missing", RESP, ("tools", 0), {"type": "function", "parameters": {}}, "tools[0].name", MISSING),
    ("resp-tool-description-list", RESP, ("tools", 0, "description"), ["d"], "tools[0].description", TYPE),
    (
        "resp-schema-required-entry",
        RESP,
        ("tools", 0, "parameters", "required"),
        [5],
        "tools[0].parameters.required[0]",
        TYPE,
    ),
    ("resp-custom-description-number", RESP, ("tools", 1, "description"), 5, "tools[1].description", TYPE),
    ("resp-custom-format-string", RESP, ("tools", 1, "format"), "grammar", "tools[1].format", TYPE),
    ("resp-namespace-name-number", RESP, ("tools", 2, "name"), 5, "tools[2].name", TYPE),
    ("resp-namespace-name-list", RESP, ("tools", 2, "name"), ["mcp"], "tools[2].name", TYPE),
    ("resp-namespace-tools-string", RESP, ("tools", 2, "tools"), "get_me", "tools[2].tools", TYPE),
    ("resp-namespace-child-number", RESP, ("tools", 2, "tools", 0), 5, "tools[2].tools[0]", TYPE),
    ("resp-namespace-child-name", RESP, ("tools", 2, "tools", 0, "name"), {"n": 1}, "tools[2].tools[0].name", TYPE),
    (
        "resp-namespace-child-no-name",
        RESP,
        ("tools", 2, "tools", 0),
        {"type": "function"},
        "tools[2].tools[0].name",
        MISSING,
    ),
    ("resp-tool-choice-number", RESP, ("tool_choice",), 5, "tool_choice", TYPE),
    (
        "resp-tool-choice-name-list",
        RESP,
        ("tool_choice",),
        {"type": "function", "name": ["ls"]},
        "tool_choice.name",
        TYPE,
    ),
    (
        "resp-tool-choice-allowed",
        RESP,
        ("tool_choice",),
        {"type": "allowed_tools", "mode": "auto", "tools": 5},
        "tool_choice.tools",
        TYPE,
    ),
    ("resp-text-format-string", RESP, ("text",), {"format": "json"}, "text.format", TYPE),
    ("resp-previous-response-id-number", RESP, ("previous_response_id",), 5, "previous_response_id", TYPE),
    # integers beyond 64 bits (orjson reads them as floats)
    ("chat-seed-big", CHAT, ("seed",), Raw(BIG), "seed", "integer_above_max_value"),
    ("chat-seed-negative-big", CHAT, ("seed",), Raw(NEG_BIG), "seed", "integer_below_min_value"),
    (
        "chat-big-in-metadata",
        CHAT,
        ("metadata",),
        Raw(b'{"k":[1,' + BIG + b"]}"),
        "metadata.k[1]",
        "integer_above_max_value",
    ),
    (
        "chat-big-in-tool-schema",
        CHAT,
        ("tools", 0, "function", "parameters", "properties", "dir", "maximum"),
        Raw(BIG),
        "tools[0].function.parameters.properties.dir.maximum",
        "integer_above_max_value",
    ),
    (
        "chat-max-tokens-2-64",
        CHAT,
        ("max_tokens",),
        Raw(b"18446744073709551616"),
        "max_tokens",
        "integer_above_max_value",
    ),
    ("chat-huge-digits", CHAT, ("seed",), Raw(b"9" * 5000), "seed", "integer_above_max_value"),  # "infinity" to orjson
    ("resp-seed-big", RESP, ("seed",), Raw(BIG), "seed", "integer_above_max_value"),
    (
        "resp-max-output-tokens-big",
        RESP,
        ("max_output_tokens",),
        Raw(BIG),
        "max_output_tokens",
        "integer_above_max_value",
    ),
    ("resp-big-in-input-item", RESP, ("input", 1, "x_seq"), Raw(NEG_BIG), "input[1].x_seq", "integer_below_min_value"),
]

# invalid UTF-8: (case id, route, raw bytes spliced into a string value)
UTF8_CASES = [
    ("lone-continuation", b"\x80"),
    ("invalid-start", b"\xff"),
    ("encoded-surrogate", b"\xed\xa0\x80"),
    ("overlong", b"\xc0\xaf"),
    ("beyond-unicode", b"\xf4\x90\x80\x80"),
    ("truncated", b"\xe2\x82"),
]


def _params(cases: list[Case]) -> list[Any]:
    return [pytest.param(*c, id=c[0]) for c in cases]


def streamed(body: bytes) -> httpx.Response:
    """An SSE answer as a real transport gives it: a body still to be read."""

    async def chunks() -> AsyncIterator[bytes]:
        yield body

    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=chunks())


class Upstreams:
    """Every upstream the app could call (mocked Chat and Responses upstreams, the demo
    provider), each recording the requests it got."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.demo: list[httpx.Request] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        stream = orjson.loads(request.content).get("stream")
        if str(request.url) == CHAT_URL:
            if stream:
                return streamed(
                    sse_body([chat_chunk({"role": "assistant", "content": "hi"}), chat_chunk({}, "stop")], done=True)
                )
            return httpx.Response(
                200,
                json={
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "created": 1,
                    "model": "up-chat",
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
                    ],
                },
            )
        assert str(request.url) == RESP_URL, request.url
        events = resp_stream_two_calls()
        if stream:
            return streamed(sse_body(events, event_names=True))
        return httpx.Response(200, json=events[-1]["response"])

    @property
    def called(self) -> bool:
        return bool(self.requests or self.demo)


@pytest.fixture
async def proxy(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[httpx.AsyncClient, Upstreams]]:
    ups = Upstreams()
    real = DemoTransport.handle_async_request

    async def spy(self: DemoTransport, request: httpx.Request) -> httpx.Response:
        ups.demo.append(request)
        return await real(self, request)

    monkeypatch.setattr(DemoTransport, "handle_async_request", spy)
    monkeypatch.setattr("providers.demo.WORD_DELAY", 0)
    app = create_app(make_config(), transport=httpx.MockTransport(ups.handle))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8080") as c:
            yield c, ups


def assert_400(r: httpx.Response, param: str | None, code: str, ups: Upstreams, where: str) -> None:
    assert r.status_code == 400, (where, r.text[:500])
    body = r.json()
    assert set(body) == {"error"}, where
    e = body["error"]
    assert e["type"] == "invalid_request_error", where
    assert {"message", "type", "param", "code"} <= set(e), where
    assert (e["param"], e["code"]) == (param, code), (where, e)
    assert not ups.called, where


VARIANTS = [(m, s) for m in MODELS for s in (False, True)]


@pytest.mark.parametrize("case, route, path, value, param, code", _params(CASES))
async def test_hostile_body_is_400_naming_param(
    proxy: tuple[httpx.AsyncClient, Upstreams],
    case: str,
    route: str,
    path: tuple[Any, ...],
    value: Any,
    param: str,
    code: str,
) -> None:
    client, ups = proxy
    for model, stream in VARIANTS:
        base = chat_base() if route == CHAT else resp_base()
        raw = build(base, path, value, model, stream)
        r = await client.post(route, content=raw, headers={"content-type": "application/json"})
        assert_400(r, param, code, ups, f"{model} stream={stream}")


@pytest.mark.parametrize("route", [CHAT, RESP], ids=["chat", "responses"])
@pytest.mark.parametrize("case, bad", UTF8_CASES, ids=[c[0] for c in UTF8_CASES])
async def test_invalid_utf8_is_400(
    proxy: tuple[httpx.AsyncClient, Upstreams], case: str, bad: bytes, route: str
) -> None:
    client, ups = proxy
    for model, stream in VARIANTS:
        base = chat_base() if route == CHAT else resp_base()
        # a long digit run too, so the exact-integer parse would also see the bytes
        raw = build({**base, "prompt_cache_key": "1234567890123456789012"}, ("user",), "@@bad@@", model, stream)
        raw = raw.replace(b"@@bad@@", b"x" + bad + b"y")
        r = await client.post(route, content=raw, headers={"content-type": "application/json"})
        assert_400(r, None, "invalid_json", ups, f"{model} stream={stream}")


@pytest.mark.parametrize("route", [CHAT, RESP], ids=["chat", "responses"])
async def test_edge_values_still_pass(proxy: tuple[httpx.AsyncClient, Upstreams], route: str) -> None:
    """What the checks must not refuse: nesting up to the bound, 64-bit integers at both
    ends (passed upstream exactly), long digit runs inside strings, unknown fields."""
    client, ups = proxy
    for model, stream in VARIANTS:
        base = chat_base() if route == CHAT else resp_base()
        base["metadata"] = "@@deep@@"
        base["user"] = "id-12345678901234567890123456789"
        base["x_extra"] = {"seed_hi": U64_MAX, "seed_lo": I64_MIN, "f": 1.5e300, "n": None}
        raw = build(base, ("x_deep",), Raw(nest(126)), model, stream)  # 127 levels with the body
        raw = raw.replace(b'"@@deep@@"', b'{"a":' + nest(100) + b"}")
        ups.requests.clear()
        r = await client.post(route, content=raw, headers={"content-type": "application/json"})
        where = f"{model} stream={stream}"
        assert r.status_code == 200, (where, r.text[:500])
        if stream:
            assert ("data: [DONE]" in r.text) if route == CHAT else ("event: response.completed" in r.text), where
        if model != "demo" and (route == CHAT) == (model == "chat-model"):
            sent = ups.requests[-1].content  # same protocol: unknown fields go through untouched
            assert b'"seed_hi":18446744073709551615' in sent and b'"seed_lo":-9223372036854775808' in sent, where
            assert nest(126) in sent, where


def test_table_covers_both_routes() -> None:
    routes = {c[1] for c in CASES}
    assert routes == {CHAT, RESP}
    assert len({c[0] for c in CASES}) == len(CASES)
