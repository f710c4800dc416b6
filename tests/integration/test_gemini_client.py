"""Gemini's own API as a client protocol (Gemini CLI) through the app: toward Chat, Responses
and Messages upstreams, streamed and whole; the key in ``x-goog-api-key``, ``?key=`` or a
Bearer header; errors in Google's shape before the first byte and in a started stream; the
model list and ``countTokens``; a tool step's second request with the call's id and the
sealed reasoning put back."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from transformers import envelope

from .conftest import (
    BASE_CONFIG,
    CHAT_URL,
    RESP_URL,
    chat_chunk,
    chat_stream_two_calls,
    parse_sse,
    resp_stream_two_calls,
    sse_response,
)

MSG_URL = "http://msg.test/v1/messages"
KEY = "sk-client"
GEN = "/v1beta/models/{}:generateContent"
STREAM = "/v1beta/models/{}:streamGenerateContent?alt=sse"

BODY = {
    "contents": [{"role": "user", "parts": [{"text": "read a.py and ls"}]}],
    "systemInstruction": {"role": "user", "parts": [{"text": "You are Gemini CLI."}]},
    "tools": [
        {
            "functionDeclarations": [
                {"name": "Read", "parametersJsonSchema": {"type": "object", "properties": {"path": {"type": "string"}}}},
                {"name": "Bash", "parameters": {"type": "OBJECT", "properties": {"cmd": {"type": "STRING"}}}},
            ]
        }
    ],
    "generationConfig": {"maxOutputTokens": 1000, "temperature": 0, "thinkingConfig": {"includeThoughts": True,
                                                                                     "thinkingBudget": 8192}},
}  # fmt: skip


def config(**server: Any) -> dict[str, Any]:
    providers = [
        *BASE_CONFIG["providers"],
        {"name": "anth", "profile": "anthropic", "base_url": "http://msg.test", "api_key": "k"},
    ]
    models = [*BASE_CONFIG["models"], {"name": "claude", "provider": "anth"}]
    return {
        "providers": providers,
        "models": models,
        "auth": {"keys": [KEY]},
        "server": {"secret_key": "s" * 32, **server},
    }


def chunks(raw: bytes) -> list[dict[str, Any]]:
    return [e for e in parse_sse(raw) if e != "[DONE]"]


def parts(evs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for e in evs if "candidates" in e for p in e["candidates"][0]["content"]["parts"]]


@pytest.fixture
async def gc(client_factory: Any) -> httpx.AsyncClient:
    return await client_factory(**config())


async def test_a_streamed_turn_from_a_chat_upstream(gc: httpx.AsyncClient, mock: Any) -> None:
    route = mock.post(CHAT_URL).mock(return_value=sse_response(chat_stream_two_calls(), done=True))
    r = await gc.post(STREAM.format("chat-model"), json=BODY, headers={"x-goog-api-key": KEY})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    assert b"[DONE]" not in r.content and b"event:" not in r.content
    evs = chunks(r.content)
    ps = parts(evs)
    assert [p["text"] for p in ps if p.get("thought")] == ["think ", "hard"]
    assert "".join(p.get("text", "") for p in ps if not p.get("thought")) == "Hello"
    calls = [p for p in ps if "functionCall" in p]
    assert [c["functionCall"] for c in calls] == [
        {"id": "functions.Read:0", "name": "Read", "args": {"path": "a.py"}},
        {"id": "functions.Bash:1", "name": "Bash", "args": {"cmd": "ls"}},
    ]
    # the step's reasoning sealed on the first call, for the next request
    assert envelope.is_envelope(calls[0]["thoughtSignature"]) and "thoughtSignature" not in calls[1]
    last = evs[-1]
    assert last["candidates"][0]["finishReason"] == "STOP"
    assert last["usageMetadata"]["promptTokenCount"] > 0 and "totalTokenCount" in last["usageMetadata"]
    sent = orjson.loads(route.calls[0].request.content)
    assert sent["model"] == "up-chat" and sent["stream"] is True
    assert sent["messages"] == [
        {"role": "system", "content": "You are Gemini CLI."},
        {"role": "user", "content": "read a.py and ls"},
    ]
    assert sent["tools"][1]["function"]["parameters"] == {"type": "object", "properties": {"cmd": {"type": "string"}}}
    assert sent["max_tokens"] == 1000 and sent["temperature"] == 0 and sent["reasoning_effort"] == "medium"

    # the tool step: Gemini CLI sends the model content back as it came, then the responses
    model = {
        "role": "model",
        "parts": [p for p in ps if "functionCall" in p or (p.get("text") and not p.get("thought"))],
    }
    results = {
        "role": "user",
        "parts": [
            {"functionResponse": {"id": "functions.Read:0", "name": "Read", "response": {"output": "print(1)"}}},
            {"functionResponse": {"id": "functions.Bash:1", "name": "Bash", "response": {"output": "a.py"}}},
        ],
    }
    route.mock(return_value=sse_response([chat_chunk({"content": "done"}), chat_chunk({}, "stop")], done=True))
    body2 = {**BODY, "contents": [*BODY["contents"], model, results]}
    r = await gc.post(STREAM.format("chat-model"), json=body2, headers={"x-goog-api-key": KEY})
    assert r.status_code == 200, r.text
    sent = orjson.loads(route.calls[1].request.content)
    assistant, tool1, tool2 = sent["messages"][2:]
    assert assistant["content"] == "Hello" and assistant["reasoning_content"] == "think hard"
    assert [c["id"] for c in assistant["tool_calls"]] == ["functions.Read:0", "functions.Bash:1"]
    assert "extra_content" not in assistant["tool_calls"][0]  # (our envelope never reaches another vendor)
    assert tool1 == {"role": "tool", "tool_call_id": "functions.Read:0", "content": "print(1)"}
    assert tool2 == {"role": "tool", "tool_call_id": "functions.Bash:1", "content": "a.py"}


async def test_a_stream_without_alt_sse_is_one_json_array_streamed(gc: httpx.AsyncClient, mock: Any) -> None:
    """Without ``alt=sse`` Gemini's API streams a JSON array of its responses; so does the
    proxy: the same chunks as the SSE stream, in one array, ``application/json``."""
    h = {"x-goog-api-key": KEY}
    mock.post(CHAT_URL).mock(return_value=sse_response(chat_stream_two_calls(), done=True))
    sse = await gc.post(STREAM.format("chat-model"), json=BODY, headers=h)
    r = await gc.post(STREAM.format("chat-model").removesuffix("?alt=sse"), json=BODY, headers=h)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.content.startswith(b"[{") and r.content.endswith(b"}\n]") and b"\n,{" in r.content
    got = orjson.loads(r.content)
    assert parts(got) == parts(chunks(sse.content))
    assert got[-1]["candidates"][0]["finishReason"] == "STOP"
    # broken off: Gemini's error object is the array's last element, and the array is closed
    mock.post(CHAT_URL).mock(return_value=sse_response([chat_chunk({"content": "He"})]))
    r = await gc.post(STREAM.format("chat-model").replace("alt=sse", "alt=json"), json=BODY, headers=h)
    got = orjson.loads(r.content)
    assert parts(got)[0] == {"text": "He"} and got[-1]["error"]["status"] == "INTERNAL"


async def test_calls_without_ids_get_minted_ones_paired_by_name(gc: httpx.AsyncClient, mock: Any) -> None:
    route = mock.post(CHAT_URL).mock(return_value=httpx.Response(200, json=_chat_answer("ok")))
    contents = [
        BODY["contents"][0],
        {"role": "model", "parts": [{"functionCall": {"name": "Bash", "args": {"cmd": "ls"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "Bash", "response": {"output": "a.py"}}}]},
    ]
    for _ in range(2):
        r = await gc.post(GEN.format("chat-model"), json={**BODY, "contents": contents}, params={"key": KEY})
        assert r.status_code == 200, r.text
    a, b = (orjson.loads(c.request.content)["messages"] for c in route.calls)
    assert a == b  # the same ids every time
    call_id = a[2]["tool_calls"][0]["id"]
    assert call_id.startswith("gm_") and a[3] == {"role": "tool", "tool_call_id": call_id, "content": "a.py"}


def _chat_answer(text: str) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "up-chat",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }


async def test_a_whole_answer(gc: httpx.AsyncClient, mock: Any) -> None:
    mock.post(CHAT_URL).mock(return_value=httpx.Response(200, json=_chat_answer("Hello")))
    r = await gc.post(GEN.format("chat-model"), json=BODY, headers={"authorization": f"Bearer {KEY}"})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["candidates"][0]["content"] == {"role": "model", "parts": [{"text": "Hello"}]}
    assert got["candidates"][0]["finishReason"] == "STOP"
    assert got["usageMetadata"] == {"promptTokenCount": 5, "candidatesTokenCount": 2, "totalTokenCount": 7}


async def test_a_responses_upstream(gc: httpx.AsyncClient, mock: Any) -> None:
    route = mock.post(RESP_URL).mock(return_value=sse_response(resp_stream_two_calls(), event_names=True))
    r = await gc.post(STREAM.format("resp-model"), json=BODY, headers={"x-goog-api-key": KEY})
    assert r.status_code == 200, r.text
    ps = parts(chunks(r.content))
    assert [p["functionCall"]["name"] for p in ps if "functionCall" in p] == ["Read", "Bash"]
    sent = orjson.loads(route.calls[0].request.content)
    assert sent["instructions"] == "You are Gemini CLI." and sent["model"] == "up-resp"


async def test_a_messages_upstream(gc: httpx.AsyncClient, mock: Any) -> None:
    answer = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [{"type": "text", "text": "hi"}, {"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                                      "input": {"cmd": "ls"}}],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 4},
    }  # fmt: skip
    route = mock.post(MSG_URL).mock(return_value=httpx.Response(200, json=answer))
    r = await gc.post(GEN.format("claude"), json=BODY, headers={"x-goog-api-key": KEY})
    assert r.status_code == 200, r.text
    ps = r.json()["candidates"][0]["content"]["parts"]
    assert ps == [{"text": "hi"}, {"functionCall": {"id": "toolu_1", "name": "Bash", "args": {"cmd": "ls"}}}]
    sent = orjson.loads(route.calls[0].request.content)
    # (Anthropic caches at breakpoints: the proxy places them where Claude Code would, docs/caching.md)
    mark = {"cache_control": {"type": "ephemeral"}}
    assert sent["system"] == [{"type": "text", "text": "You are Gemini CLI.", **mark}]
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "read a.py and ls", **mark}]}]
    assert [t["name"] for t in sent["tools"]] == ["Read", "Bash"] and sent["max_tokens"] == 1000


@pytest.mark.parametrize(
    ("headers", "params", "status"),
    [
        ({}, {}, 401),
        ({"x-goog-api-key": "wrong"}, {}, 401),
        ({}, {"key": "wrong"}, 401),
    ],
)
async def test_auth_errors_in_googles_shape(
    gc: httpx.AsyncClient, headers: dict[str, str], params: dict[str, str], status: int
) -> None:
    r = await gc.post(GEN.format("chat-model"), json=BODY, headers=headers, params=params)
    assert r.status_code == status
    err = r.json()["error"]
    assert err["code"] == status and err["status"] == "UNAUTHENTICATED" and err["message"]


async def test_request_errors_in_googles_shape(gc: httpx.AsyncClient, mock: Any) -> None:
    h = {"x-goog-api-key": KEY}
    r = await gc.post(GEN.format("no-such-model"), json=BODY, headers=h)
    assert r.status_code == 404 and r.json()["error"]["status"] == "NOT_FOUND"
    r = await gc.post(GEN.format("chat-model"), json={"contents": []}, headers=h)
    assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT"
    r = await gc.post(GEN.format("chat-model"), content=b"{", headers=h)
    assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT"
    r = await gc.post("/v1beta/models/chat-model:embedContent", json=BODY, headers=h)
    assert r.status_code == 404 and r.json()["error"]["status"] == "NOT_FOUND"
    r = await gc.get("/v1beta/nothing-here", headers=h)
    assert r.status_code == 404 and r.json()["error"]["status"] == "NOT_FOUND"


async def test_upstream_errors_before_and_after_the_first_byte(gc: httpx.AsyncClient, mock: Any) -> None:
    h = {"x-goog-api-key": KEY}
    route = mock.post(CHAT_URL).mock(
        return_value=httpx.Response(429, json={"error": {"message": "slow down", "code": "rate_limit_exceeded"}})
    )
    r = await gc.post(STREAM.format("chat-model"), json=BODY, headers=h)
    assert r.status_code == 429 and r.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    # a stream that breaks off: Gemini's error object as its last data line
    route.mock(return_value=sse_response([chat_chunk({"content": "He"})]))
    r = await gc.post(STREAM.format("chat-model"), json=BODY, headers=h)
    assert r.status_code == 200
    evs = chunks(r.content)
    assert parts(evs)[0] == {"text": "He"}
    assert evs[-1]["error"]["code"] == 500 and evs[-1]["error"]["status"] == "INTERNAL"


async def test_models_and_count_tokens(gc: httpx.AsyncClient) -> None:
    h = {"x-goog-api-key": KEY}
    r = await gc.get("/v1beta/models", headers=h)
    assert r.status_code == 200
    names = [m["name"] for m in r.json()["models"]]
    assert "models/chat-model" in names
    r = await gc.get("/v1beta/models/chat-model", headers=h)
    assert r.status_code == 200 and r.json()["name"] == "models/chat-model"
    assert "generateContent" in r.json()["supportedGenerationMethods"]
    r = await gc.get("/v1beta/models/nope", headers=h)
    assert r.status_code == 404 and r.json()["error"]["status"] == "NOT_FOUND"
    assert (await gc.get("/v1beta/models")).status_code == 401
    r = await gc.post("/v1beta/models/chat-model:countTokens", json={"contents": BODY["contents"]}, headers=h)
    assert r.status_code == 200 and r.json()["totalTokens"] > 0
    assert r.headers["x-switchboard-token-count"] == "estimate"


async def test_anthropics_signed_thinking_comes_back_to_it(gc: httpx.AsyncClient, mock: Any) -> None:
    """Toward Anthropic with thinking on: its signed thinking block rides the call's
    thoughtSignature and goes back before the tool result as Anthropic signed it."""
    answer = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "thinking", "thinking": "let me look", "signature": "ANTHROPIC-SIG=="},
                    {"type": "redacted_thinking", "data": "REDACTED=="},
                    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"cmd": "ls"}}],
        "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 4},
    }  # fmt: skip
    final = {**answer, "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"}
    route = mock.post(MSG_URL).mock(side_effect=[httpx.Response(200, json=answer), httpx.Response(200, json=final)])
    h = {"x-goog-api-key": KEY}
    r = await gc.post(GEN.format("claude"), json=BODY, headers=h)
    assert r.status_code == 200, r.text
    ps = r.json()["candidates"][0]["content"]["parts"]
    model = {"role": "model", "parts": [p for p in ps if not p.get("thought")]}  # as Gemini CLI keeps them
    assert "ANTHROPIC-SIG" not in str(model)  # sealed
    results = {"role": "user", "parts": [{"functionResponse": {"id": "toolu_1", "name": "Bash",
                                                               "response": {"output": "a.py"}}}]}  # fmt: skip
    r = await gc.post(GEN.format("claude"), json={**BODY, "contents": [*BODY["contents"], model, results]}, headers=h)
    assert r.status_code == 200, r.text
    sent = orjson.loads(route.calls[1].request.content)
    assistant = sent["messages"][1]
    assert assistant["content"][:2] == [
        {"type": "thinking", "thinking": "let me look", "signature": "ANTHROPIC-SIG=="},
        {"type": "redacted_thinking", "data": "REDACTED=="},
    ]
    assert assistant["content"][2]["type"] == "tool_use" and assistant["content"][2]["id"] == "toolu_1"
    assert sent["messages"][2]["content"][0]["tool_use_id"] == "toolu_1"
