"""Integration fixtures: the ASGI app on an in-memory transport, upstreams mocked by respx."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
import respx

from app.config import parse_config
from app.main import create_app
from transformers.sse import SSEParser

CHAT_URL = "http://chat.test/v1/chat/completions"
RESP_URL = "http://resp.test/v1/responses"

BASE_CONFIG: dict[str, Any] = {
    "providers": [
        {
            "name": "chatup",
            "profile": "openai-compatible",
            "protocol": "chat",
            "base_url": "http://chat.test/v1",
            "api_key": "sk-upstream-secret",
            "timeouts": {"first_byte": 2, "idle": 2},
        },
        {
            "name": "respup",
            "profile": "openai-compatible",
            "protocol": "responses",
            "base_url": "http://resp.test/v1",
            "api_key": "sk-upstream-secret",
        },
        {"name": "kimi", "profile": "kimi", "protocol": "chat", "base_url": "http://chat.test/v1"},
        {"name": "mimo", "profile": "openai-compatible", "protocol": "chat", "base_url": "http://chat.test/v1"},
        {"name": "demo", "profile": "demo"},
    ],
    "models": [
        {"name": "chat-model", "provider": "chatup", "upstream_model": "up-chat"},
        {"name": "resp-model", "provider": "respup", "upstream_model": "up-resp"},
        {"name": "kimi-k2.6", "provider": "kimi"},
        {"name": "mimo-v2.6-flash", "provider": "mimo"},
        {"name": "demo", "provider": "demo"},
    ],
}


def make_config(transport: str = "httpx", **overrides: Any) -> Any:
    """The config.  ``transport``: the upstream client's (``server.upstream_transport``) unless
    the overrides name one.  respx intercepts httpx's own transport only, so a test whose
    upstream it mocks runs on that one; a test with a real upstream on loopback runs on the
    proxy's own (providers/transport.py), the default in production."""
    data = {**BASE_CONFIG, **overrides}
    data["server"] = {"upstream_transport": transport, **(data.get("server") or {})}
    return parse_config(data, "<test>")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test whose app talks to a real upstream on loopback (no respx) runs on both upstream
    transports: the proxy's own and httpx's, the oracle (a test with its own ``transport``
    parameter chooses for itself)."""
    names = metafunc.fixturenames
    if "upstream_transport" in names and "mock" not in names and "transport" not in names:
        metafunc.parametrize("upstream_transport", ["fast", "httpx"], indirect=True)


@pytest.fixture
def upstream_transport(request: pytest.FixtureRequest) -> str:
    """The app's upstream transport: the test's parameter, else httpx's when respx mocks the
    upstream (it intercepts httpx's own transport only)."""
    return getattr(request, "param", "httpx")


@pytest.fixture
async def client_factory(upstream_transport: str) -> AsyncIterator[Any]:
    apps: list[Any] = []
    transport = upstream_transport

    async def make(**overrides: Any) -> httpx.AsyncClient:
        app = create_app(make_config(transport, **overrides))
        ctx = app.router.lifespan_context(app)
        await ctx.__aenter__()
        apps.append(ctx)
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8080")

    yield make
    for ctx in apps:
        await ctx.__aexit__(None, None, None)


@pytest.fixture
async def client(client_factory: Any) -> httpx.AsyncClient:
    return await client_factory()


@pytest.fixture
def mock() -> Any:
    with respx.mock(assert_all_called=False, assert_all_mocked=True) as r:
        yield r


def sse_body(events: list[Any], *, event_names: bool = False, done: bool = False) -> bytes:
    out = []
    for e in events:
        data = e if isinstance(e, bytes) else orjson.dumps(e)
        if event_names and isinstance(e, dict):
            out.append(b"event: " + e["type"].encode() + b"\n")
        out.append(b"data: " + data + b"\n\n")
    if done:
        out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def sse_response(events: list[Any], **kw: Any) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=sse_body(events, **kw))


def parse_sse(raw: bytes) -> list[Any]:
    p = SSEParser()
    evs = p.feed(raw) + p.end()
    out: list[Any] = []
    for e in evs:
        out.append("[DONE]" if e.data == "[DONE]" else orjson.loads(e.data))
    return out


def chat_chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {
        "id": "chatcmpl-up1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "up-chat",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
    }
    c.update(extra)
    return c


USAGE_CHAT = {
    "prompt_tokens": 11,
    "completion_tokens": 7,
    "total_tokens": 18,
    "prompt_tokens_details": {"cached_tokens": 3},
    "completion_tokens_details": {"reasoning_tokens": 2},
}


def chat_stream_two_calls() -> list[Any]:
    """Reasoning, text, then two parallel tool calls, then usage."""
    return [
        chat_chunk({"role": "assistant", "content": ""}),
        chat_chunk({"reasoning_content": "think "}),
        chat_chunk({"reasoning_content": "hard"}),
        chat_chunk({"content": "Hel"}),
        chat_chunk({"content": "lo"}),
        chat_chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "functions.Read:0",
                        "type": "function",
                        "function": {"name": "Read", "arguments": ""},
                    }
                ]
            }
        ),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path":'}}]}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"a.py"}'}}]}),
        chat_chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "functions.Bash:1",
                        "type": "function",
                        "function": {"name": "Bash", "arguments": '{"cmd":"ls"}'},
                    }
                ]
            }
        ),
        chat_chunk({}, "tool_calls"),
        chat_chunk(None, None, choices=[], usage=USAGE_CHAT),
    ]


def resp_stream_two_calls() -> list[dict[str, Any]]:
    r = {
        "id": "resp_up1",
        "object": "response",
        "status": "in_progress",
        "model": "up-resp",
        "output": [],
        "created_at": 1,
    }
    fc0 = {
        "id": "fc_0",
        "type": "function_call",
        "status": "in_progress",
        "call_id": "call_0",
        "name": "Read",
        "arguments": "",
    }
    fc1 = {
        "id": "fc_1",
        "type": "function_call",
        "status": "in_progress",
        "call_id": "call_1",
        "name": "Bash",
        "arguments": "",
    }
    rs = {"id": "rs_0", "type": "reasoning", "summary": []}
    msg = {"id": "msg_0", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    done_rs = {**rs, "summary": [{"type": "summary_text", "text": "think hard"}], "encrypted_content": "gAAA-opaque"}
    done_msg = {**msg, "status": "completed", "content": [{"type": "output_text", "text": "Hello", "annotations": []}]}
    done0 = {**fc0, "status": "completed", "arguments": '{"path":"a.py"}'}
    done1 = {**fc1, "status": "completed", "arguments": '{"cmd":"ls"}'}
    usage = {
        "input_tokens": 11,
        "input_tokens_details": {"cached_tokens": 3},
        "output_tokens": 7,
        "output_tokens_details": {"reasoning_tokens": 2},
        "total_tokens": 18,
    }
    seq = [
        {"type": "response.created", "response": r},
        {"type": "response.output_item.added", "output_index": 0, "item": rs},
        {
            "type": "response.reasoning_summary_text.delta",
            "item_id": "rs_0",
            "output_index": 0,
            "summary_index": 0,
            "delta": "think ",
        },
        {
            "type": "response.reasoning_summary_text.delta",
            "item_id": "rs_0",
            "output_index": 0,
            "summary_index": 0,
            "delta": "hard",
        },
        {"type": "response.output_item.done", "output_index": 0, "item": done_rs},
        {"type": "response.output_item.added", "output_index": 1, "item": msg},
        {
            "type": "response.output_text.delta",
            "item_id": "msg_0",
            "output_index": 1,
            "content_index": 0,
            "delta": "Hel",
        },
        {
            "type": "response.output_text.delta",
            "item_id": "msg_0",
            "output_index": 1,
            "content_index": 0,
            "delta": "lo",
        },
        {"type": "response.output_item.done", "output_index": 1, "item": done_msg},
        {"type": "response.output_item.added", "output_index": 2, "item": fc0},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_0", "output_index": 2, "delta": '{"path":'},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_0", "output_index": 2, "delta": '"a.py"}'},
        {"type": "response.output_item.done", "output_index": 2, "item": done0},
        {"type": "response.output_item.added", "output_index": 3, "item": fc1},
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_1",
            "output_index": 3,
            "delta": '{"cmd":"ls"}',
        },
        {"type": "response.output_item.done", "output_index": 3, "item": done1},
        {
            "type": "response.completed",
            "response": {**r, "status": "completed", "output": [done_rs, done_msg, done0, done1], "usage": usage},
        },
    ]
    for i, e in enumerate(seq):
        e["sequence_number"] = i
    return seq
