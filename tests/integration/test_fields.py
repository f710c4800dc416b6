"""Request fields through the app: a vendor's private fields reach only that vendor, every
field an upstream does not get is named in ``x-switchboard-dropped-fields``, counted and
logged; the Messages edges answer as Anthropic does."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from .conftest import BASE_CONFIG, CHAT_URL, RESP_URL, chat_stream_two_calls, sse_response

OAI_URL = "http://oai.test/v1/responses"
MSG_URL = "http://msg.test/v1/messages"


def config() -> dict[str, Any]:
    providers = [
        *BASE_CONFIG["providers"],
        {"name": "oai", "profile": "openai", "protocol": "responses", "base_url": "http://oai.test/v1", "api_key": "k"},
        {"name": "anth", "profile": "anthropic", "base_url": "http://msg.test", "api_key": "k"},
        {"name": "compat", "profile": "openai-compatible", "protocol": "messages", "base_url": "http://msg.test/v1",
         "api_key": "k"},
    ]  # fmt: skip
    models = [
        *BASE_CONFIG["models"],
        {"name": "gpt-5", "provider": "oai"},
        {"name": "claude", "provider": "anth"},
        {"name": "compat-model", "provider": "compat"},
    ]
    return {"providers": providers, "models": models}


CODEX = {
    "model": "",
    "input": [{"role": "user", "content": "hi"}],
    "store": False,
    "stream": False,
    "service_tier": "auto",
    "client_metadata": {"x-codex-installation-id": "i-1", "workspace": "/home/alice/secret-project"},
}
RESP_OK = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1,
    "status": "completed",
    "model": "m",
    "output": [
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "ok", "annotations": []}]},
    ],
    "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
}  # fmt: skip
MSG_OK = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


@pytest.mark.parametrize(
    ("model", "url", "answer", "kept"),
    [
        ("gpt-5", OAI_URL, RESP_OK, True),  # Codex's own vendor
        ("resp-model", RESP_URL, RESP_OK, False),  # another Responses server
    ],
)
async def test_codex_client_metadata_reaches_only_openai(
    client_factory: Any, mock: Any, model: str, url: str, answer: dict[str, Any], kept: bool
) -> None:
    c = await client_factory(**config())
    route = mock.post(url).mock(return_value=httpx.Response(200, json=answer))
    r = await c.post("/v1/responses", json={**CODEX, "model": model})
    assert r.status_code == 200, r.text
    sent = orjson.loads(route.calls.last.request.content)
    assert ("client_metadata" in sent) is kept
    assert ("/home/alice" in route.calls.last.request.content.decode()) is kept
    if kept:
        assert "x-switchboard-dropped-fields" not in r.headers
    else:
        assert r.headers["x-switchboard-dropped-fields"] == "service_tier,client_metadata"
        m = (await c.get("/metrics")).text
        assert 'switchboard_fields_dropped_total{field="client_metadata",provider="respup"} 1.0' in m


async def test_codex_to_a_chat_upstream_names_what_has_no_chat_form(client_factory: Any, mock: Any) -> None:
    c = await client_factory(**config())
    route = mock.post(CHAT_URL).mock(return_value=sse_response(chat_stream_two_calls(), done=True))
    body = {**CODEX, "model": "chat-model", "stream": True, "truncation": "auto", "x_new": 1}
    r = await c.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    assert "/home/alice" not in route.calls.last.request.content.decode()
    assert r.headers["x-switchboard-dropped-fields"] == "service_tier,client_metadata,truncation,x_new"


CLAUDE = {
    "model": "",
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "hi"}],
    "metadata": {"user_id": "user_abc_account_1_session_2"},
    "safeguards": {"home_directory": "/home/alice", "working_directory": "/home/alice/secret-project"},
    "context_management": {"edits": []},
}


@pytest.mark.parametrize(("model", "kept"), [("claude", True), ("compat-model", False)])
async def test_claude_code_safeguards_reach_only_anthropic(
    client_factory: Any, mock: Any, model: str, kept: bool
) -> None:
    c = await client_factory(**config())
    route = mock.post(MSG_URL).mock(return_value=httpx.Response(200, json=MSG_OK))
    headers = {"anthropic-beta": "context-management-2025-06-27"}
    r = await c.post("/v1/messages", json={**CLAUDE, "model": model}, headers=headers)
    assert r.status_code == 200, r.text
    req = route.calls.last.request
    sent = orjson.loads(req.content)
    assert ("safeguards" in sent, "metadata" in sent, "context_management" in sent) == (kept, kept, kept)
    assert ("anthropic-beta" in req.headers) is kept
    assert ("/home/alice" in req.content.decode()) is kept
    if not kept:
        assert r.headers["x-switchboard-dropped-fields"] == "metadata,safeguards,context_management,anthropic-beta"


# -- Messages edges ------------------------------------------------------------------------


async def test_empty_messages_are_refused_as_anthropic_does(client_factory: Any, mock: Any) -> None:
    c = await client_factory(**config())
    route = mock.post(MSG_URL).mock(return_value=httpx.Response(200, json=MSG_OK))
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = await c.post(path, json={"model": "claude", "max_tokens": 10, "messages": []})
        assert r.status_code == 400, (path, r.text)
        body = r.json()
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
        assert "at least one message" in body["error"]["message"]
    assert route.call_count == 0  # nothing went upstream


@pytest.mark.parametrize("path", ["/v1/messages/evaluate_safeguards", "/v1/messages/batches/x/results"])
async def test_unknown_paths_under_messages_answer_in_anthropics_shape(client: httpx.AsyncClient, path: str) -> None:
    r = await client.post(path, json={})
    assert r.status_code == 404
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "not_found_error", body
    assert r.headers["x-request-id"] == body["request_id"]


async def test_unknown_paths_elsewhere_stay_openai_shaped(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/embeddings", json={})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
