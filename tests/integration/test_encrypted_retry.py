"""Quirk encrypted_content_retry: OpenAI rejects foreign reasoning blobs; retry once without them."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from .conftest import BASE_CONFIG

OAI_URL = "http://oai.test/v1/responses"
FINAL = {
    "id": "resp_ok",
    "object": "response",
    "created_at": 1,
    "status": "completed",
    "model": "gpt-5",
    "output": [
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "fine", "annotations": []}],
        }
    ],
}
REQ = {
    "model": "gpt-5",
    "store": False,
    "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA-from-another-org"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "again"}]},
    ],
}
INVALID = {
    "error": {
        "message": "The encrypted content could not be verified.",
        "type": "invalid_request_error",
        "code": "invalid_encrypted_content",
        "param": None,
    }
}


def _config(profile: str) -> dict[str, Any]:
    return {
        "providers": [
            *BASE_CONFIG["providers"],
            {
                "name": "oai",
                "profile": profile,
                "protocol": "responses",
                "base_url": "http://oai.test/v1",
                "api_key": "k",
            },
        ],
        "models": [*BASE_CONFIG["models"], {"name": "gpt-5", "provider": "oai"}],
    }


async def test_retry_once_without_foreign_blobs(client_factory: Any, mock: Any) -> None:
    c = await client_factory(**_config("openai"))
    route = mock.post(OAI_URL).mock(side_effect=[httpx.Response(400, json=INVALID), httpx.Response(200, json=FINAL)])
    r = await c.post("/v1/responses", json=REQ)
    assert r.status_code == 200, r.text
    assert r.json()["output"][0]["content"][0]["text"] == "fine"
    first, second = (orjson.loads(call.request.content) for call in route.calls)
    assert [i["type"] for i in first["input"]].count("reasoning") == 1
    assert [i["type"] for i in second["input"]] == ["message", "message", "message"]


async def test_no_retry_for_generic_profile(client_factory: Any, mock: Any) -> None:
    c = await client_factory(**_config("openai-compatible"))
    route = mock.post(OAI_URL).mock(side_effect=[httpx.Response(400, json=INVALID), httpx.Response(200, json=FINAL)])
    r = await c.post("/v1/responses", json=REQ)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_encrypted_content"
    assert route.call_count == 1


async def test_second_rejection_is_reported(client_factory: Any, mock: Any) -> None:
    c = await client_factory(**_config("openai"))
    route = mock.post(OAI_URL).mock(side_effect=[httpx.Response(400, json=INVALID), httpx.Response(400, json=INVALID)])
    r = await c.post("/v1/responses", json=REQ)
    assert r.status_code == 400 and route.call_count == 2
