"""Anthropic Messages clients (Claude Code) through the app toward a Chat upstream: the
Messages events in order, the whole message, errors in Anthropic's shape, x-api-key auth."""

from __future__ import annotations

import re
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.conftest import (
    CHAT_URL,
    RESP_URL,
    chat_stream_two_calls,
    parse_sse,
    resp_stream_two_calls,
    sse_response,
)
from transformers.ids import from_anthropic_id

BODY = {
    "model": "chat-model",
    "max_tokens": 1024,
    "system": [{"type": "text", "text": "You are Claude Code."}],
    "messages": [{"role": "user", "content": "read a.py and ls"}],
    "tools": [
        {"name": "Read", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
        {"name": "Bash", "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
    ],
}


def events(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for block in raw.decode().split("\n\n"):
        lines = block.strip().split("\n")
        if len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "):
            ev = orjson.loads(lines[1][6:])
            assert ev["type"] == lines[0][7:]
            out.append(ev)
    return out


async def test_a_streamed_turn_with_thinking_text_and_two_calls(client: httpx.AsyncClient, mock: Any) -> None:
    route = mock.post(CHAT_URL).mock(return_value=sse_response(chat_stream_two_calls(), done=True))
    r = await client.post("/v1/messages?beta=true", json={**BODY, "stream": True}, headers={"x-api-key": "x"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    evs = events(r.content)
    kinds = [e["type"] + (":" + e["content_block"]["type"] if e["type"] == "content_block_start" else "") for e in evs]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert [k for k in kinds if k.startswith("content_block_start")] == [
        "content_block_start:thinking",
        "content_block_start:text",
        "content_block_start:tool_use",
        "content_block_start:tool_use",
    ]
    calls = [
        e["content_block"]
        for e in evs
        if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use"
    ]
    # Kimi's native ids are no Anthropic ids: mapped for the client, reversibly
    assert [(from_anthropic_id(c["id"]), c["name"], c["input"]) for c in calls] == [
        ("functions.Read:0", "Read", {}),
        ("functions.Bash:1", "Bash", {}),
    ]
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", c["id"]) for c in calls)
    args: dict[int, str] = {}
    for e in evs:
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta":
            args[e["index"]] = args.get(e["index"], "") + e["delta"]["partial_json"]
    assert list(args.values()) == ['{"path":"a.py"}', '{"cmd":"ls"}']
    assert evs[-2]["delta"]["stop_reason"] == "tool_use"
    sent = orjson.loads(route.calls[0].request.content)
    assert sent["messages"][0] == {"role": "system", "content": "You are Claude Code."}
    assert [t["function"]["name"] for t in sent["tools"]] == ["Read", "Bash"] and sent["max_tokens"] == 1024


async def test_a_whole_message(client: httpx.AsyncClient, mock: Any) -> None:
    answer = {
        "id": "c", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi there"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
    }  # fmt: skip
    mock.post(CHAT_URL).mock(return_value=httpx.Response(200, json=answer))
    r = await client.post("/v1/messages", json=BODY)
    assert r.status_code == 200, r.text
    msg = r.json()
    assert msg["type"] == "message" and msg["role"] == "assistant" and msg["model"] == "chat-model"
    assert msg["content"] == [{"type": "text", "text": "Hi there"}] and msg["stop_reason"] == "end_turn"
    assert msg["usage"]["input_tokens"] == 10 and msg["usage"]["output_tokens"] == 3


@pytest.mark.parametrize(
    ("body", "status", "kind"),
    [
        ({**BODY, "model": "nope"}, 404, "not_found_error"),
        ({"model": "chat-model"}, 400, "invalid_request_error"),
    ],
)
async def test_errors_in_anthropics_shape(client: httpx.AsyncClient, body: Any, status: int, kind: str) -> None:
    r = await client.post("/v1/messages", json=body)
    assert r.status_code == status, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == kind and err["error"]["message"]
    assert err["request_id"] == r.headers["x-request-id"]


async def test_an_upstream_failure_before_the_first_byte(client: httpx.AsyncClient, mock: Any) -> None:
    mock.post(CHAT_URL).mock(
        return_value=httpx.Response(429, json={"error": {"message": "slow down"}}, headers={"retry-after": "2"})
    )
    r = await client.post("/v1/messages", json={**BODY, "stream": True})
    assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"


async def test_x_api_key_is_a_client_key(client_factory: Any, mock: Any) -> None:
    c = await client_factory(auth={"keys": ["sk-claude"]})
    mock.post(CHAT_URL).mock(return_value=sse_response(chat_stream_two_calls(), done=True))
    r = await c.post("/v1/messages", json={**BODY, "stream": True})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = await c.post("/v1/messages", json={**BODY, "stream": True}, headers={"x-api-key": "sk-claude"})
    assert r.status_code == 200


async def test_count_tokens_is_estimated_high_rather_than_low(client: httpx.AsyncClient) -> None:
    body = {"model": "chat-model", "messages": [{"role": "user", "content": "x" * 3000}], "tools": BODY["tools"]}
    r = await client.post("/v1/messages/count_tokens?beta=true", json=body)
    assert r.status_code == 200, r.text
    n = r.json()["input_tokens"]
    assert 1000 < n < 1300  # 3,000 characters of text: ~750 tokens of English; never fewer counted
    r = await client.post("/v1/messages/count_tokens", json={"model": "m"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("stream", [True, False])
async def test_a_turn_on_a_responses_upstream(client: httpx.AsyncClient, mock: Any, stream: bool) -> None:
    evs_up = resp_stream_two_calls()
    whole = next(e["response"] for e in evs_up if isinstance(e, dict) and e.get("type") == "response.completed")
    answer = sse_response(evs_up, event_names=True) if stream else httpx.Response(200, json=whole)
    route = mock.post(RESP_URL).mock(return_value=answer)
    r = await client.post("/v1/messages", json={**BODY, "model": "resp-model", "stream": stream})
    assert r.status_code == 200, r.text
    sent = orjson.loads(route.calls[0].request.content)
    assert sent["instructions"] == "You are Claude Code." and sent["input"][0]["role"] == "user"
    assert [t["name"] for t in sent["tools"]] == ["Read", "Bash"]
    if stream:
        evs = events(r.content)
        blocks = [e["content_block"] for e in evs if e["type"] == "content_block_start"]
        stop = evs[-2]["delta"]["stop_reason"]
    else:
        blocks = r.json()["content"]
        stop = r.json()["stop_reason"]
    assert [b["type"] for b in blocks if b["type"] == "tool_use"] == ["tool_use", "tool_use"]
    assert stop == "tool_use"


# -- a Messages upstream -------------------------------------------------------------------

MSG_URL = "http://ant.test/v1/messages"
ANT = {"name": "ant", "profile": "anthropic", "base_url": "http://ant.test", "api_key": "sk-ant"}


async def ant_client(client_factory: Any) -> httpx.AsyncClient:
    c: httpx.AsyncClient = await client_factory(
        providers=[ANT], models=[{"name": "claude", "provider": "ant", "upstream_model": "claude-up"}]
    )
    return c


async def test_count_tokens_comes_from_a_messages_upstream(client_factory: Any, mock: Any) -> None:
    c = await ant_client(client_factory)
    route = mock.post(MSG_URL + "/count_tokens").mock(return_value=httpx.Response(200, json={"input_tokens": 4321}))
    body = {**BODY, "model": "claude", "stream": True}
    r = await c.post("/v1/messages/count_tokens", json=body)
    assert r.status_code == 200 and r.json() == {"input_tokens": 4321}
    assert r.headers["x-switchboard-token-count"] == "upstream"
    sent = route.calls.last.request
    assert sent.headers["x-api-key"] == "sk-ant" and sent.headers["anthropic-version"] == "2023-06-01"
    got = orjson.loads(sent.content)
    assert got["model"] == "claude-up" and "max_tokens" not in got and "stream" not in got


@pytest.mark.parametrize("answer", [httpx.Response(404, json={"type": "error"}), httpx.Response(200, json={"x": 1}),
                                    httpx.ConnectError("refused")])  # fmt: skip
async def test_count_tokens_falls_back_to_the_estimate(client_factory: Any, mock: Any, answer: Any) -> None:
    c = await ant_client(client_factory)
    if isinstance(answer, Exception):
        mock.post(MSG_URL + "/count_tokens").mock(side_effect=answer)
    else:
        mock.post(MSG_URL + "/count_tokens").mock(return_value=answer)
    r = await c.post("/v1/messages/count_tokens", json={**BODY, "model": "claude"})
    assert r.status_code == 200 and r.json()["input_tokens"] > 0
    assert r.headers["x-switchboard-token-count"] == "estimate"


async def test_a_chat_upstream_is_estimated(client: httpx.AsyncClient, mock: Any) -> None:
    r = await client.post("/v1/messages/count_tokens", json=BODY)
    assert r.status_code == 200 and r.headers["x-switchboard-token-count"] == "estimate"
    assert not mock.calls  # nothing asked upstream


@pytest.mark.parametrize("client_proto", ["messages", "chat", "responses"])
async def test_an_overloaded_messages_upstream_answers_in_the_clients_protocol(
    client_factory: Any, mock: Any, client_proto: str
) -> None:
    c = await ant_client(client_factory)
    err = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    mock.post(MSG_URL).mock(return_value=httpx.Response(529, json=err))
    path, body = {
        "messages": ("/v1/messages", {**BODY, "model": "claude"}),
        "chat": ("/v1/chat/completions", {"model": "claude", "messages": [{"role": "user", "content": "hi"}]}),
        "responses": ("/v1/responses", {"model": "claude", "input": "hi"}),
    }[client_proto]
    r = await c.post(path, json=body)
    assert r.status_code == 503, r.text
    if client_proto == "messages":
        assert r.json()["error"]["type"] == "overloaded_error"
    else:
        assert r.json()["error"]["code"] == "server_is_overloaded"


async def test_an_error_event_mid_stream_ends_the_messages_stream_once(client_factory: Any, mock: Any) -> None:
    c = await ant_client(client_factory)
    up = (
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","usage":{"input_tokens":3}}}\n\n'
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}\n\n'
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    )
    mock.post(MSG_URL).mock(return_value=httpx.Response(200, content=up, headers={"content-type": "text/event-stream"}))
    r = await c.post("/v1/messages", json={**BODY, "model": "claude", "stream": True})
    evs = events(r.content)
    assert evs[0]["message"]["usage"]["input_tokens"] == 3  # the upstream's input count, at the start
    assert [e["type"] for e in evs if e["type"] in ("error", "message_stop")] == ["error"]
    assert evs[-1]["type"] == "error"
    assert "".join(e["delta"].get("text", "") for e in evs if e["type"] == "content_block_delta") == "Hel"
    r = await c.post("/v1/responses", json={"model": "claude", "input": "hi", "stream": True})
    types = [e["type"] for e in parse_sse(r.content)]
    assert types[-1] == "response.failed" and types.count("response.failed") == 1


WHOLE = {
    "id": "msg_up", "type": "message", "role": "assistant", "model": "claude-up",
    "content": [
        {"type": "thinking", "thinking": "plan", "signature": "sig-1"},
        {"type": "text", "text": "Hello"},
        {"type": "tool_use", "id": "toolu_9", "name": "Bash", "input": {"cmd": "ls"}},
    ],
    "stop_reason": "tool_use", "stop_sequence": None,
    "usage": {"input_tokens": 4, "cache_read_input_tokens": 10, "cache_creation_input_tokens": 2, "output_tokens": 6},
}  # fmt: skip


@pytest.mark.parametrize("client_proto", ["messages", "chat", "responses"])
async def test_a_whole_answer_of_a_messages_upstream(client_factory: Any, mock: Any, client_proto: str) -> None:
    c = await ant_client(client_factory)
    route = mock.post(MSG_URL).mock(return_value=httpx.Response(200, json=WHOLE))
    path, body = {
        "messages": ("/v1/messages", {**BODY, "model": "claude"}),
        "chat": ("/v1/chat/completions", {"model": "claude", "messages": [{"role": "user", "content": "hi"}]}),
        "responses": ("/v1/responses", {"model": "claude", "input": "hi", "store": False}),
    }[client_proto]
    r = await c.post(path, json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    sent = orjson.loads(route.calls.last.request.content)
    assert sent["model"] == "claude-up" and sent["stream"] is False and sent["max_tokens"] > 0
    if client_proto == "messages":
        assert out["content"] == WHOLE["content"] and out["stop_reason"] == "tool_use"
        assert out["usage"] == {"input_tokens": 4, "cache_creation_input_tokens": 2, "cache_read_input_tokens": 10,
                                "output_tokens": 6}  # fmt: skip
    elif client_proto == "chat":
        choice = out["choices"][0]
        assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Hello"
        assert choice["message"]["tool_calls"][0]["id"] == "toolu_9"
        assert choice["message"]["tool_calls"][0]["function"] == {"name": "Bash", "arguments": '{"cmd":"ls"}'}
        assert out["usage"]["prompt_tokens"] == 16 and out["usage"]["prompt_tokens_details"]["cached_tokens"] == 10
    else:
        kinds = [i["type"] for i in out["output"]]
        assert kinds == ["reasoning", "message", "function_call"] and out["status"] == "completed"
        assert out["output"][0]["encrypted_content"] == "sig-1"  # Anthropic's signature, for the next turn
        assert out["usage"]["input_tokens"] == 16 and out["usage"]["input_tokens_details"]["cached_tokens"] == 10


@pytest.mark.parametrize(
    ("stop", "messages_stop", "chat_finish", "status"),
    [("max_tokens", "max_tokens", "length", "incomplete"), ("refusal", "refusal", "content_filter", "incomplete"),
     ("model_context_window_exceeded", "model_context_window_exceeded", "length", "incomplete"),
     ("stop_sequence", "stop_sequence", "stop", "completed"), ("pause_turn", "pause_turn", "stop", "completed")],
)  # fmt: skip
async def test_stop_reasons_map_to_every_client(
    client_factory: Any, mock: Any, stop: str, messages_stop: str, chat_finish: str, status: str
) -> None:
    c = await ant_client(client_factory)
    seq = "END" if stop == "stop_sequence" else None
    answer = {**WHOLE, "content": [{"type": "text", "text": "Hel"}], "stop_reason": stop, "stop_sequence": seq}
    mock.post(MSG_URL).mock(return_value=httpx.Response(200, json=answer))
    r = await c.post("/v1/messages", json={**BODY, "model": "claude"})
    assert (r.json()["stop_reason"], r.json()["stop_sequence"]) == (messages_stop, seq)  # as Anthropic said
    r = await c.post("/v1/chat/completions", json={"model": "claude", "messages": [{"role": "user", "content": "hi"}]})
    assert r.json()["choices"][0]["finish_reason"] == chat_finish
    r = await c.post("/v1/responses", json={"model": "claude", "input": "hi", "store": False})
    assert r.json()["status"] == status
