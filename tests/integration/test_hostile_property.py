"""Property: whatever a client sends, the proxy answers 2xx or a 4xx OpenAI error object,
never 5xx; a 2xx stream always ends with its protocol's terminal.

Bodies are valid Chat / Responses / Anthropic Messages requests (tools, tool calls, content
parts, reasoning; the Messages one Claude Code's own, ``tests/fixtures/
claude_code_messages_request.json``) mutated at random JSON paths — a value replaced by another type, ``null``, deep nesting,
a huge string, an integer beyond 64 bits, invalid UTF-8 bytes; a key deleted or added —
plus arbitrary JSON objects built from the fields the proxy knows.  They go through the real
ASGI app to every upstream kind (the demo provider, mocked Chat, Responses and Messages
upstreams, each quirk switched on).  A Messages client's error is Anthropic's shape and its
stream is checked as Claude Code reads it (``test_hostile_upstream.messages_view``).
Gemini API bodies (Gemini CLI's shape: thought signatures, function calls without ids,
function responses, OpenAPI parameter schemas) go to every upstream kind the same way; a
Gemini client's error is Google's shape and its stream ends with one terminal.
"""

from __future__ import annotations

import asyncio
import copy
import pathlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.main import OPEN_OWNER, create_app, owner_envelope_key
from transformers import envelope
from transformers.context import QUIRKS
from transformers.sse import SSEParser

from .conftest import BASE_CONFIG, chat_chunk, make_config, resp_stream_two_calls, sse_body
from .fault_upstream import msg_json, msg_stream
from .test_hostile_input import MODELS, chat_base, resp_base
from .test_hostile_upstream import messages_view

CHAT = "/v1/chat/completions"
RESP = "/v1/responses"
MSG = "/v1/messages"
FIXTURE = pathlib.Path(__file__).parents[1] / "fixtures" / "claude_code_messages_request.json"

PROPERTY = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)


def _streamed(body: bytes) -> httpx.Response:
    async def chunks() -> AsyncIterator[bytes]:
        yield body

    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=chunks())


# besides the table's upstreams: every quirk switched on at once (Chat and Responses
# upstreams), Moonshot, Bedrock Mantle and OpenAI profiles, Kimi and MiMo models
EXTRA_PROVIDERS = [
    {
        "name": "allchat",
        "profile": "openai-compatible",
        "protocol": "chat",
        "base_url": "http://chat.test/v1",
        "quirks": {"enable": sorted(QUIRKS)},
    },
    {
        "name": "allresp",
        "profile": "openai-compatible",
        "protocol": "responses",
        "base_url": "http://resp.test/v1",
        "quirks": {"enable": sorted(QUIRKS)},
    },
    {"name": "moonshot", "profile": "kimi", "base_url": "https://api.moonshot.ai/v1", "api_key": "k"},
    {
        "name": "mantle",
        "profile": "bedrock-mantle",
        "protocol": "responses",
        "base_url": "http://resp.test/v1",
        "api_key": "k",
    },
    {"name": "oai", "profile": "openai", "protocol": "responses", "base_url": "http://resp.test/v1", "api_key": "k"},
    # Messages upstreams: an Anthropic-compatible one (…/v1), Anthropic itself (its base URL
    # without /v1: the proxy adds it), Kimi's Anthropic endpoint, every quirk switched on
    {
        "name": "msgup",
        "profile": "openai-compatible",
        "protocol": "messages",
        "base_url": "http://msg.test/v1",
        "api_key": "k",
    },
    {"name": "anthropic", "profile": "anthropic", "base_url": "http://msg.test", "api_key": "k"},
    {
        "name": "kimimsg",
        "profile": "kimi",
        "protocol": "messages",
        "base_url": "http://msg.test/anthropic",
        "api_key": "k",
    },
    # Gemini's OpenAI-compatible endpoint: thought signatures restored, its refusals removed
    {"name": "gem", "profile": "gemini", "base_url": "http://chat.test/v1", "api_key": "k"},
    {
        "name": "allmsg",
        "profile": "openai-compatible",
        "protocol": "messages",
        "base_url": "http://msg.test/v1",
        "quirks": {"enable": sorted(QUIRKS)},
    },
]
EXTRA_MODELS = [
    {"name": n, "provider": p}
    for n, p in (
        ("all-chat", "allchat"),
        ("all-resp", "allresp"),
        ("kimi-moon", "moonshot"),
        ("mantle-model", "mantle"),
        ("oai-model", "oai"),
        ("msg-model", "msgup"),
        ("claude-model", "anthropic"),
        ("kimi-msg", "kimimsg"),
        ("all-msg", "allmsg"),
        ("gemini-3-pro-preview", "gem"),
    )
]
SEALED = envelope.seal("", owner_envelope_key(b"h" * 48, OPEN_OWNER), {"functions.ls:0": "R2VtaW5p"})
MESSAGES_MODELS = ("msg-model", "claude-model", "kimi-msg", "all-msg")
ALL_MODELS = (*MODELS, "kimi-k2.6", "mimo-v2.6-flash", *(m["name"] for m in EXTRA_MODELS))


def upstream(request: httpx.Request) -> httpx.Response:
    stream = orjson.loads(request.content).get("stream")
    if request.url.path.endswith("/chat/completions"):
        if stream:
            return _streamed(
                sse_body([chat_chunk({"role": "assistant", "content": "hi"}), chat_chunk({}, "stop")], done=True)
            )
        return httpx.Response(
            200,
            json={
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": "up-chat",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            },
        )
    if request.url.path.endswith("/v1/messages"):
        if stream:
            return _streamed(sse_body(msg_stream(), event_names=True))
        return httpx.Response(200, json=msg_json())
    assert request.url.path.endswith("/responses"), request.url
    events = resp_stream_two_calls()
    if stream:
        return _streamed(sse_body(events, event_names=True))
    return httpx.Response(200, json=events[-1]["response"])


class Proxy:
    """The app on an event loop of its own, driven synchronously (one per test)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        config = make_config(
            providers=BASE_CONFIG["providers"] + EXTRA_PROVIDERS,
            models=BASE_CONFIG["models"] + EXTRA_MODELS,
            server={"secret_key": "h" * 48},  # the envelopes open, as in production
        )
        self.app = create_app(config, transport=httpx.MockTransport(upstream))
        self.life = self.app.router.lifespan_context(self.app)
        self.loop.run_until_complete(self.life.__aenter__())
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://127.0.0.1:8080")

    def post(self, path: str, raw: bytes) -> httpx.Response:
        return self.loop.run_until_complete(
            self.client.post(path, content=raw, headers={"content-type": "application/json"})
        )

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.run_until_complete(self.life.__aexit__(None, None, None))
        self.loop.close()


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[Proxy]:
    monkeypatch.setattr("providers.demo.WORD_DELAY", 0)
    p = Proxy()
    try:
        yield p
    finally:
        p.close()


def check_answer(r: httpx.Response, path: str) -> None:
    """A 4xx error object, a JSON answer, or a stream that ends with its terminal, by what
    the answer says it is (a mutation may have flipped the body's ``stream``)."""
    assert r.status_code < 500, r.text[:800]
    if path.startswith("/v1beta/"):
        check_gemini_answer(r)
        return
    if path == MSG:
        check_messages_answer(r)
        return
    if r.status_code >= 400:
        body = r.json()
        assert set(body) == {"error"}, body
        assert {"message", "type", "param", "code"} <= set(body["error"]), body
        return
    if not r.headers.get("content-type", "").startswith("text/event-stream"):
        assert isinstance(r.json(), dict)
        return
    p = SSEParser()
    events = p.feed(r.content) + p.end()
    assert events, "an empty stream"
    if path == CHAT:
        last = events[-1].data
        assert last == "[DONE]" or "error" in orjson.loads(last), last[:300]
    else:
        last = orjson.loads(events[-1].data)
        assert last["type"] in ("response.completed", "response.failed", "response.incomplete"), last["type"]


def check_messages_answer(r: httpx.Response) -> None:
    """A Messages client's: Anthropic's error object, a whole message, or a stream as Claude
    Code reads it (one terminal, blocks opened and closed in order)."""
    if r.status_code >= 400:
        body = r.json()
        assert set(body) == {"type", "error", "request_id"} and body["type"] == "error", body
        assert set(body["error"]) == {"type", "message"} and isinstance(body["error"]["message"], str), body
        return
    if not r.headers.get("content-type", "").startswith("text/event-stream"):
        out = r.json()
        assert isinstance(out, dict) and out.get("type") == "message", str(out)[:800]
        return
    messages_view(r.content)


# -- mutation ----------------------------------------------------------------------------------


def paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every JSON path below ``obj`` (not ``obj`` itself)."""
    out: list[tuple[Any, ...]] = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        out.append((*prefix, k))
        out.extend(paths(v, (*prefix, k)))
    return out


class Splice:
    """Bytes put in the encoded body in place of a placeholder string."""

    def __init__(self, raw: bytes, inside_string: bool = False) -> None:
        self.raw = raw
        self.inside_string = inside_string


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)

BAD_UTF8 = [b"\x80", b"\xff", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80", b"\xe2\x82"]

replacements = st.one_of(
    json_values,
    st.sampled_from([None, 0, -1, True, 1.5, "", "x", [], {}, [None], {"type": None}, ["text"], {"name": 5}]),
    st.integers(1, 1100).map(lambda n: Splice(b"[" * n + b"]" * n)),
    st.integers(1, 600).map(lambda n: Splice(b'{"a":' * n + b"0" + b"}" * n)),
    st.integers(19, 400).map(lambda n: Splice(b"9" * n)),
    st.integers(19, 40).map(lambda n: Splice(b"-" + b"9" * n)),
    st.integers(1, 200_000).map(lambda n: "y" * n),
    st.sampled_from(BAD_UTF8).map(lambda b: Splice(b, inside_string=True)),
)


def encode(body: dict[str, Any], splices: dict[str, Splice]) -> bytes:
    raw = orjson.dumps(body)
    for key, sp in splices.items():
        if sp.inside_string:
            raw = raw.replace(key.encode(), b"a" + sp.raw + b"b")
        else:
            raw = raw.replace(b'"' + key.encode() + b'"', sp.raw)
    return raw


def mutate(data: st.DataObject, body: dict[str, Any]) -> bytes:
    splices: dict[str, Splice] = {}
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        all_paths = paths(body)
        if not all_paths:
            break
        path = data.draw(st.sampled_from(all_paths), label="path")
        parent: Any = body
        for seg in path[:-1]:
            parent = parent[seg]
        action = data.draw(st.sampled_from(["replace", "replace", "replace", "delete", "add"]), label="action")
        if action == "delete":
            del parent[path[-1]]
            continue
        if action == "add" and isinstance(parent, dict):
            parent[
                data.draw(st.sampled_from(["type", "role", "content", "name", "text", "tools", "function", "x"]))
            ] = data.draw(json_values, label="added")
            continue
        value = copy.deepcopy(data.draw(replacements, label="value"))  # sampled values are shared objects
        if isinstance(value, Splice):
            key = f"@@s{len(splices)}@@"
            splices[key] = value
            value = key
        parent[path[-1]] = value
    return encode(body, splices)


@PROPERTY
@given(data=st.data())
def test_mutated_chat_bodies_never_5xx(proxy: Proxy, data: st.DataObject) -> None:
    body = {**chat_base(), "model": data.draw(st.sampled_from(ALL_MODELS)), "stream": data.draw(st.booleans())}
    body["messages"].insert(1, {"role": "developer", "content": [{"type": "text", "text": "d"}]})
    body["tools"].append(
        {"type": "custom", "custom": {"name": "apply_patch", "description": "p", "format": {"type": "text"}}}
    )
    body["tool_choice"] = data.draw(
        st.sampled_from(["auto", "required", {"type": "function", "function": {"name": "ls"}}])
    )
    body["stream_options"] = {"include_usage": True}
    # a sealed thought signature (Gemini's carrier for a Chat client), for the mutations to hit
    body["messages"][3]["tool_calls"][0]["extra_content"] = {"google": {"thought_signature": SEALED}}
    raw = mutate(data, body)
    check_answer(proxy.post(CHAT, raw), CHAT)


@PROPERTY
@given(data=st.data())
def test_mutated_responses_bodies_never_5xx(proxy: Proxy, data: st.DataObject) -> None:
    body = {**resp_base(), "model": data.draw(st.sampled_from(ALL_MODELS)), "stream": data.draw(st.booleans())}
    body["input"].insert(
        1,
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "ok"}, {"type": "refusal", "refusal": "no"}],
        },
    )
    body["input"][0]["content"].append({"type": "input_image", "image_url": "data:image/png;base64,AAAA"})
    body["tool_choice"] = data.draw(
        st.sampled_from(
            [
                "auto",
                {"type": "function", "name": "ls"},
                {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "ls"}]},
            ]
        )
    )
    body["reasoning"] = {"effort": "high", "summary": "auto"}
    body["text"] = {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}}
    raw = mutate(data, body)
    check_answer(proxy.post(RESP, raw), RESP)


FIELDS = [
    "model",
    "messages",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "stream",
    "stream_options",
    "response_format",
    "text",
    "reasoning",
    "max_tokens",
    "max_output_tokens",
    "n",
    "previous_response_id",
    "parallel_tool_calls",
    "store",
    "metadata",
    "reasoning_effort",
    "thinking",
    "seed",
]


@PROPERTY
@given(data=st.data())
def test_arbitrary_bodies_never_5xx(proxy: Proxy, data: st.DataObject) -> None:
    path = data.draw(st.sampled_from([CHAT, RESP]))
    if data.draw(st.integers(0, 9)) == 0:  # not even JSON, sometimes
        check_answer(proxy.post(path, data.draw(st.binary(max_size=64))), path)
        return
    body = data.draw(st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=8))
    body["model"] = data.draw(st.sampled_from([*ALL_MODELS, 5, None]))
    if data.draw(st.integers(0, 4)):
        key = "messages" if path == CHAT else "input"
        body[key] = data.draw(
            st.lists(
                st.one_of(
                    json_values,
                    st.fixed_dictionaries(
                        {"role": st.sampled_from(["user", "assistant", "tool", "system", 5]), "content": json_values},
                        optional={"tool_calls": json_values, "tool_call_id": json_values, "refusal": json_values},
                    ),
                    st.fixed_dictionaries(
                        {
                            "type": st.sampled_from(
                                ["message", "function_call", "function_call_output", "reasoning", "custom_tool_call"]
                            )
                        },
                        optional={
                            "role": json_values,
                            "content": json_values,
                            "call_id": json_values,
                            "name": json_values,
                            "output": json_values,
                            "summary": json_values,
                        },
                    ),
                ),
                max_size=4,
            )
        )
    if data.draw(st.booleans()):
        body["tools"] = data.draw(
            st.lists(
                st.one_of(
                    json_values,
                    st.fixed_dictionaries(
                        {
                            "type": st.sampled_from(
                                ["function", "custom", "namespace", "builtin_function", "web_search"]
                            )
                        },
                        optional={
                            "name": json_values,
                            "function": json_values,
                            "custom": json_values,
                            "tools": json_values,
                            "description": json_values,
                            "parameters": json_values,
                        },
                    ),
                ),
                max_size=3,
            )
        )
    check_answer(proxy.post(path, orjson.dumps(body)), path)


# -- Anthropic Messages clients ------------------------------------------------------------------


def _short(obj: Any) -> Any:
    """Claude Code's request with its long texts cut (the mutations pick among fewer paths
    and the bodies stay small; the shape is what matters here)."""
    if isinstance(obj, str):
        return obj[:120]
    if isinstance(obj, list):
        return [_short(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _short(v) for k, v in obj.items()}
    return obj


def messages_base() -> dict[str, Any]:
    """Claude Code's second request of a turn (thinking, text and a tool_use answered by a
    tool_result, its system reminder inside ``messages``), with two of its tools, an image
    and a server tool added."""
    body = _short(orjson.loads(FIXTURE.read_bytes())["requests"][1])
    body["tools"] = [t for t in body["tools"] if t["name"] in ("Bash", "Read")]
    body["tools"].append({"type": "web_search_20250305", "name": "web_search", "max_uses": 3})
    body["messages"][0]["content"].append(
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    )
    body["messages"][-1]["content"].append({"type": "text", "text": "go on"})
    return body


MESSAGES_TOOL_CHOICES = [None, {"type": "auto"}, {"type": "any"}, {"type": "tool", "name": "Bash"}, {"type": "none"}]


@PROPERTY
@given(data=st.data())
def test_mutated_messages_bodies_never_5xx(proxy: Proxy, data: st.DataObject) -> None:
    """Toward a Chat, a Responses and a Messages upstream (and the demo)."""
    body = messages_base()
    body["model"] = data.draw(st.sampled_from((*ALL_MODELS, *MESSAGES_MODELS, *MESSAGES_MODELS)))
    body["stream"] = data.draw(st.booleans())
    choice = data.draw(st.sampled_from(MESSAGES_TOOL_CHOICES))
    if choice is not None:
        body["tool_choice"] = copy.deepcopy(choice)
    body["thinking"] = data.draw(
        st.sampled_from([{"type": "adaptive", "display": "updates"}, {"type": "enabled", "budget_tokens": 2048}])
    )
    raw = mutate(data, body)
    check_answer(proxy.post(MSG, raw), MSG)


MESSAGES_FIELDS = [
    "model",
    "messages",
    "system",
    "max_tokens",
    "tools",
    "tool_choice",
    "stream",
    "thinking",
    "metadata",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "context_management",
    "output_config",
    "container",
    "mcp_servers",
    "service_tier",
]
BLOCK_TYPES = ["text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking", "document", "x"]


@PROPERTY
@given(data=st.data())
def test_arbitrary_messages_bodies_never_5xx(proxy: Proxy, data: st.DataObject) -> None:
    if data.draw(st.integers(0, 9)) == 0:  # not even JSON, sometimes
        check_answer(proxy.post(MSG, data.draw(st.binary(max_size=64))), MSG)
        return
    body = data.draw(st.dictionaries(st.sampled_from(MESSAGES_FIELDS), json_values, max_size=8))
    body["model"] = data.draw(st.sampled_from([*ALL_MODELS, *MESSAGES_MODELS, 5, None]))
    block = st.fixed_dictionaries(
        {"type": st.sampled_from(BLOCK_TYPES)},
        optional={
            "text": json_values,
            "id": json_values,
            "name": json_values,
            "input": json_values,
            "tool_use_id": json_values,
            "content": json_values,
            "is_error": json_values,
            "thinking": json_values,
            "signature": json_values,
            "data": json_values,
            "source": json_values,
            "cache_control": json_values,
        },
    )
    if data.draw(st.integers(0, 4)):
        body["messages"] = data.draw(
            st.lists(
                st.one_of(
                    json_values,
                    st.fixed_dictionaries(
                        {
                            "role": st.sampled_from(["user", "assistant", "system", "tool", 5]),
                            "content": st.one_of(json_values, st.lists(st.one_of(block, json_values), max_size=4)),
                        }
                    ),
                ),
                max_size=4,
            )
        )
    if data.draw(st.booleans()):
        body["system"] = data.draw(
            st.one_of(st.text(max_size=20), st.lists(st.one_of(block, json_values), max_size=3), json_values)
        )
    if data.draw(st.booleans()):
        body["tools"] = data.draw(
            st.lists(
                st.one_of(
                    json_values,
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "type": st.sampled_from(["custom", "web_search_20250305", "bash_20250124", None, 5]),
                            "name": json_values,
                            "description": json_values,
                            "input_schema": json_values,
                            "cache_control": json_values,
                        },
                    ),
                ),
                max_size=3,
            )
        )
    if data.draw(st.booleans()):
        body["tool_choice"] = data.draw(
            st.one_of(
                json_values,
                st.fixed_dictionaries(
                    {"type": st.sampled_from(["auto", "any", "tool", "none", 5])},
                    optional={"name": json_values, "disable_parallel_tool_use": json_values},
                ),
            )
        )
    check_answer(proxy.post(MSG, orjson.dumps(body)), MSG)


# -- Gemini's own API (Gemini CLI) -------------------------------------------------------------


def check_gemini_answer(r: httpx.Response) -> None:
    """A Gemini client's: Google's error object, a whole answer, or a stream of bare data
    lines whose last one, and only it, is the terminal (a finishReason or an error)."""
    if r.status_code >= 400:
        body = r.json()
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "status"}, body
        assert body["error"]["code"] == r.status_code, body
        return
    if not r.headers.get("content-type", "").startswith("text/event-stream"):
        out = r.json()
        assert isinstance(out, dict) and isinstance(out["candidates"][0]["content"]["parts"], list), str(out)[:800]
        return
    p = SSEParser()
    events = [orjson.loads(e.data) for e in p.feed(r.content) + p.end()]
    assert events, "an empty stream"
    ends = [i for i, e in enumerate(events) if "error" in e or e["candidates"][0].get("finishReason")]
    assert ends == [len(events) - 1], str(events)[-800:]


def gemini_base() -> dict[str, Any]:
    """A Gemini CLI request of a tool step: its system instruction, tools (one in JSON Schema,
    one in Gemini's OpenAPI form), the model's call with a signature and no id, the
    function response, thinking on."""
    sealed = envelope.seal("I should list the files.", owner_envelope_key(b"h" * 48, OPEN_OWNER), {"c1": "GSIG"})
    return {
        "systemInstruction": {"role": "user", "parts": [{"text": "You are Gemini CLI."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "list the files"}]},
            {"role": "model", "parts": [{"text": "Listing.", "thoughtSignature": "skip_thought_signature_validator"},
                                        {"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}},
                                         "thoughtSignature": sealed}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "run_shell_command",
                                                             "response": {"output": "a.py"}}}]},
        ],
        "tools": [{"functionDeclarations": [
            {"name": "run_shell_command", "description": "run",
             "parametersJsonSchema": {"type": "object", "properties": {"command": {"type": "string"}}}},
            {"name": "read_file", "parameters": {"type": "OBJECT", "properties": {"path": {"type": "STRING"}}}},
        ]}, {"googleSearch": {}}],
        "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
        "generationConfig": {"maxOutputTokens": 1000, "temperature": 1, "topK": 64,
                             "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 8192}},
    }  # fmt: skip


def gemini_path(model: Any, stream: bool) -> str:
    return f"/v1beta/models/{model}:" + ("streamGenerateContent?alt=sse" if stream else "generateContent")


@PROPERTY
@given(data=st.data())
def test_mutated_gemini_bodies_never_5xx(proxy: Proxy, data: st.DataObject) -> None:
    """Toward a Chat, a Responses and a Messages upstream (and the demo)."""
    model = data.draw(st.sampled_from((*ALL_MODELS, *MESSAGES_MODELS)))
    path = gemini_path(model, data.draw(st.booleans()))
    check_answer(proxy.post(path, mutate(data, gemini_base())), path)


GEMINI_FIELDS = ["contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "safetySettings", "model"]
PART_KEYS = ["text", "thought", "thoughtSignature", "functionCall", "functionResponse", "inlineData", "fileData"]


@PROPERTY
@given(data=st.data())
def test_arbitrary_gemini_bodies_never_5xx(proxy: Proxy, data: st.DataObject) -> None:
    model = data.draw(st.sampled_from((*ALL_MODELS, *MESSAGES_MODELS)))
    path = gemini_path(model, data.draw(st.booleans()))
    if data.draw(st.integers(0, 9)) == 0:  # not even JSON, sometimes
        check_answer(proxy.post(path, data.draw(st.binary(max_size=64))), path)
        return
    body = data.draw(st.dictionaries(st.sampled_from(GEMINI_FIELDS), json_values, max_size=6))
    if data.draw(st.integers(0, 4)):
        part = st.dictionaries(st.sampled_from(PART_KEYS), json_values, max_size=3)
        content = st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "model", "function", "x"])},
            optional={"parts": st.lists(part, max_size=3)},
        )
        body["contents"] = data.draw(st.lists(st.one_of(json_values, content), max_size=4))
    check_answer(proxy.post(path, orjson.dumps(body)), path)
