"""Errors speak OpenAI (docs/rules.md, "Errors speak the client's protocol"): before the first byte an HTTP status + error object,
after it the protocol's own error event.  Secrets never echoed or forwarded."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from .conftest import CHAT_URL, RESP_URL, chat_chunk, parse_sse, sse_response

CHAT = {"model": "chat-model", "messages": [{"role": "user", "content": "hi"}]}
RESP = {"model": "chat-model", "input": "hi"}


def err(r: httpx.Response) -> dict[str, Any]:
    body = r.json()
    assert set(body) == {"error"}, body
    e = body["error"]
    assert {"message", "type", "param", "code"} <= set(e)
    assert r.headers["x-request-id"].startswith("req_")
    return e


async def test_unknown_model_404(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/chat/completions", json={**CHAT, "model": "nope"})
    assert r.status_code == 404
    e = err(r)
    assert e["code"] == "model_not_found" and e["param"] == "model"


@pytest.mark.parametrize(
    "path, body, param",
    [
        ("/v1/chat/completions", b"{not json", None),
        ("/v1/chat/completions", b"[1,2]", None),
        ("/v1/chat/completions", orjson.dumps({"model": "chat-model", "messages": "hi"}), "messages"),
        ("/v1/chat/completions", orjson.dumps({"model": 5, "messages": []}), "model"),
        ("/v1/chat/completions", orjson.dumps({"messages": []}), "model"),
        ("/v1/chat/completions", orjson.dumps({**CHAT, "stream": "yes"}), "stream"),
        ("/v1/responses", orjson.dumps({"model": "chat-model"}), "input"),
        ("/v1/responses", orjson.dumps({"model": "chat-model", "input": 3}), "input"),
    ],
)
async def test_bad_request_400_names_param(
    client: httpx.AsyncClient, path: str, body: bytes, param: str | None
) -> None:
    r = await client.post(path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    e = err(r)
    assert e["type"] == "invalid_request_error"
    assert e["param"] == param


@pytest.mark.parametrize(
    "headers, code", [({}, "missing_api_key"), ({"authorization": "Bearer wrong"}, "invalid_api_key")]
)
async def test_auth_401(client_factory: Any, headers: dict[str, str], code: str) -> None:
    c = await client_factory(auth={"keys": ["sk-client-good"]})
    r = await c.post("/v1/chat/completions", json=CHAT, headers=headers)
    assert r.status_code == 401
    e = err(r)
    assert e["code"] == code
    assert "sk-client-good" not in r.text and "wrong" not in r.text


async def test_auth_ok_and_hashed_keys(client_factory: Any, mock: Any) -> None:
    import hashlib

    digest = hashlib.sha256(b"sk-hashed").hexdigest()
    c = await client_factory(auth={"keys": ["sk-client-good", f"sha256:{digest}"]})
    route = mock.post(CHAT_URL).mock(
        return_value=httpx.Response(
            200,
            json={
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": "x",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            },
        )
    )
    for key in ("sk-client-good", "sk-hashed"):
        r = await c.post("/v1/chat/completions", json=CHAT, headers={"authorization": f"Bearer {key}"})
        assert r.status_code == 200, r.text
        # the client's key never goes upstream: the provider's own key does
        assert route.calls.last.request.headers["authorization"] == "Bearer sk-upstream-secret"


async def test_models_requires_auth_when_keys(client_factory: Any) -> None:
    c = await client_factory(auth={"keys": ["k"]})
    assert (await c.get("/v1/models")).status_code == 401
    assert (await c.get("/v1/models", headers={"authorization": "Bearer k"})).status_code == 200


async def test_body_too_large_413(client_factory: Any) -> None:
    c = await client_factory(server={"max_body_bytes": 2048})
    r = await c.post("/v1/chat/completions", json={**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]})
    assert r.status_code == 413
    assert err(r)["code"] == "request_too_large"


@pytest.mark.parametrize(
    "status, body, want_status, want_code",
    [
        (
            400,
            {
                "error": {
                    "message": "bad tools",
                    "type": "invalid_request_error",
                    "code": "invalid_value",
                    "param": "tools",
                }
            },
            400,
            "invalid_value",
        ),
        (
            400,
            {"error": {"message": "This model's maximum context length is 8192 tokens"}},
            400,
            "context_length_exceeded",
        ),
        (
            429,
            {"error": {"message": "Rate limit reached", "type": "rate_limit_error", "code": "rate_limit_exceeded"}},
            429,
            "rate_limit_exceeded",
        ),
        (
            429,
            {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}},
            429,
            "insufficient_quota",
        ),
        (401, {"error": {"message": "Invalid API key"}}, 502, "upstream_auth_failed"),
        (500, {"error": {"message": "boom"}}, 502, "server_error"),
        (503, "overloaded", 503, "server_is_overloaded"),
    ],
)
async def test_upstream_http_errors_mapped(
    client: httpx.AsyncClient, mock: Any, status: int, body: Any, want_status: int, want_code: str
) -> None:
    content = orjson.dumps(body) if not isinstance(body, str) else body.encode()
    mock.post(CHAT_URL).mock(return_value=httpx.Response(status, content=content, headers={"retry-after": "7"}))
    for path, req in (("/v1/chat/completions", {**CHAT, "stream": True}), ("/v1/responses", {**RESP, "stream": True})):
        r = await client.post(path, json=req)
        assert r.status_code == want_status, r.text
        e = err(r)
        assert e["code"] == want_code
        assert "chatup" in e["message"]
        assert "sk-upstream-secret" not in r.text
        if status == 429:
            assert r.headers["retry-after"] == "7"


async def test_upstream_unreachable_502(client: httpx.AsyncClient, mock: Any) -> None:
    mock.post(CHAT_URL).mock(side_effect=httpx.ConnectError("refused"))
    r = await client.post("/v1/responses", json=RESP)
    assert r.status_code == 502
    assert err(r)["code"] == "upstream_unreachable"


async def test_upstream_first_byte_timeout_504(client_factory: Any, mock: Any) -> None:
    import asyncio

    # one attempt: the retries of a timeout are test_failover's (each would wait first_byte again)
    client = await client_factory(server={"retries": {"max_attempts": 1}})

    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return httpx.Response(200, json={})

    mock.post(CHAT_URL).mock(side_effect=slow)
    r = await client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 504
    assert err(r)["code"] == "upstream_timeout"


def broken_stream() -> httpx.Response:
    async def gen():  # type: ignore[no-untyped-def]
        yield b"data: " + orjson.dumps(chat_chunk({"role": "assistant", "content": "par"})) + b"\n\n"
        yield b"data: " + orjson.dumps(chat_chunk({"content": "tial"})) + b"\n\n"
        raise httpx.ReadError("connection reset")

    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=gen())


async def test_midstream_failure_responses_client_gets_failed(client: httpx.AsyncClient, mock: Any) -> None:
    mock.post(CHAT_URL).mock(side_effect=lambda req: broken_stream())
    r = await client.post("/v1/responses", json={**RESP, "stream": True})
    assert r.status_code == 200
    events = parse_sse(r.content)
    types = [e["type"] for e in events]
    assert "response.output_text.delta" in types
    assert types[-2:] == ["error", "response.failed"]
    assert events[-1]["response"]["error"]["code"] == "upstream_stream_error"
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == "partial"


async def test_midstream_failure_chat_client_gets_error_chunk(client: httpx.AsyncClient, mock: Any) -> None:
    mock.post(CHAT_URL).mock(side_effect=lambda req: broken_stream())
    r = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    chunks = parse_sse(r.content)
    assert "[DONE]" not in chunks
    assert chunks[-1]["error"]["code"] == "upstream_stream_error"


@pytest.mark.parametrize("path, req", [("/v1/chat/completions", CHAT), ("/v1/responses", RESP)])
async def test_truncated_stream_never_silent(
    client: httpx.AsyncClient, mock: Any, path: str, req: dict[str, Any]
) -> None:
    # the upstream closes cleanly but without finish_reason / [DONE]
    mock.post(CHAT_URL).mock(return_value=sse_response([chat_chunk({"role": "assistant", "content": "cut"})]))
    r = await client.post(path, json={**req, "stream": True})
    out = parse_sse(r.content)
    if path == "/v1/responses":
        assert out[-1]["type"] == "response.failed"
        assert out[-1]["response"]["error"]["code"] == "upstream_stream_truncated"
    else:
        assert out[-1]["error"]["code"] == "upstream_stream_truncated"


async def test_midstream_upstream_error_event_responses(client: httpx.AsyncClient, mock: Any) -> None:
    events = [
        {
            "type": "response.created",
            "response": {"id": "resp_x", "object": "response", "status": "in_progress", "output": []},
        },
        {"type": "error", "code": "context_length_exceeded", "message": "too long", "param": None},
        {
            "type": "response.failed",
            "response": {
                "id": "resp_x",
                "object": "response",
                "status": "failed",
                "output": [],
                "error": {"code": "context_length_exceeded", "message": "too long"},
            },
        },
    ]
    mock.post(RESP_URL).mock(return_value=sse_response(events))
    r = await client.post("/v1/responses", json={**RESP, "model": "resp-model", "stream": True})
    out = parse_sse(r.content)
    assert [e["type"] for e in out][-2:] == ["error", "response.failed"]
    assert out[-1]["response"]["error"]["code"] == "context_length_exceeded"
    assert len([e for e in out if e["type"] == "response.failed"]) == 1


async def test_ws_upgrade_gets_426(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/responses", headers={"upgrade": "websocket", "connection": "Upgrade"})
    assert r.status_code == 426


async def test_models_both_shapes_and_health(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/models")
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list" and "demo" in [m["id"] for m in body["data"]]
    assert "models" not in body
    r = await client.get("/v1/models", params={"client_version": "0.169.0"})
    assert {m["slug"] for m in r.json()["models"]} >= {"demo", "mimo-v2.6-flash"}
    mimo = next(m for m in r.json()["models"] if m["slug"] == "mimo-v2.6-flash")
    assert mimo["context_window"] == 1_048_576 and mimo["max_output_tokens"] == 131_072
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).status_code == 200


async def test_unknown_route_is_openai_error(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/nope", json={})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


async def test_metrics_count_requests(client: httpx.AsyncClient, mock: Any) -> None:
    mock.post(CHAT_URL).mock(
        return_value=sse_response([chat_chunk({"content": "x"}), chat_chunk({}, "stop")], done=True)
    )
    await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    r = await client.get("/metrics")
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = r.text
    # (prometheus_client writes every value as a float)
    assert (
        'switchboard_requests_total{client="chat",provider="chatup",route="/v1/chat/completions",status="200"} 1.0\n'
        in text
    )
    assert 'switchboard_stream_outcomes_total{client="chat",outcome="completed"} 1.0\n' in text


async def test_unknown_previous_response_id_is_previous_response_not_found(
    client: httpx.AsyncClient, mock: Any
) -> None:
    route = mock.post(CHAT_URL)
    r = await client.post(
        "/v1/responses", json={"model": "chat-model", "input": "and then?", "previous_response_id": "resp_123"}
    )
    assert r.status_code == 404
    e = err(r)
    assert e["param"] == "previous_response_id" and e["code"] == "previous_response_not_found"
    assert e["type"] == "invalid_request_error" and "resp_123" in e["message"]
    assert route.call_count == 0


async def test_unknown_model_name_is_not_echoed_in_full(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/chat/completions", json={**CHAT, "model": "m" * 100_000})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert len(r.content) < 2_000
