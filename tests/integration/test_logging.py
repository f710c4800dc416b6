"""One JSON log line per request with the agreed fields; keys never written."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import structlog

from app import logs

from .conftest import CHAT_URL, chat_chunk, sse_response


@pytest.fixture(autouse=True)
def _restore_logging() -> Any:
    """logs.setup binds the logger to this test's captured stderr: undo it afterwards."""
    yield
    structlog.reset_defaults()


def lines(err: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in err.splitlines() if x.startswith("{")]


async def test_request_line_fields_and_no_secrets(client_factory: Any, mock: Any, capsys: Any) -> None:
    logs.setup("debug")
    c = await client_factory(auth={"keys": ["sk-client-secret-123"]})
    mock.post(CHAT_URL).mock(
        return_value=sse_response([chat_chunk({"content": "x"}), chat_chunk({}, "stop")], done=True)
    )
    r = await c.post(
        "/v1/chat/completions",
        json={"model": "chat-model", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": "Bearer sk-client-secret-123"},
    )
    assert r.status_code == 200
    await c.post(
        "/v1/chat/completions",
        json={"model": "chat-model", "messages": []},
        headers={"authorization": "Bearer sk-wrong-456"},
    )
    err = capsys.readouterr().err
    assert "sk-client-secret-123" not in err and "sk-upstream-secret" not in err and "sk-wrong-456" not in err
    reqs = [x for x in lines(err) if x.get("event") == "request"]
    ok = next(x for x in reqs if x.get("status") == 200)
    assert ok["request_id"] == r.headers["x-request-id"]
    for field in (
        "route",
        "client_protocol",
        "provider",
        "upstream_protocol",
        "model",
        "status",
        "duration_ms",
        "ttfb_ms",
        "terminal",
    ):
        assert field in ok, field
    assert ok["terminal"] == "completed" and ok["provider"] == "chatup" and ok["upstream_protocol"] == "chat"
    assert any(x.get("status") == 401 for x in reqs)


def test_redact_processor() -> None:
    ev = {"authorization": "Bearer abc", "api_key": "k", "note": "sent Bearer sk-live-xyz upstream", "input_tokens": 5}
    out = logs.redact(None, "info", dict(ev))
    assert out["authorization"] == "[redacted]" and out["api_key"] == "[redacted]"
    assert "sk-live-xyz" not in out["note"] and out["input_tokens"] == 5


@pytest.mark.parametrize("client_proto", ["chat", "responses"])
@pytest.mark.parametrize("stream", [True, False])
async def test_log_and_metrics_say_what_the_client_received(
    client_factory: Any, mock: Any, capsys: Any, stream: bool, client_proto: str
) -> None:
    """An upstream error mid-answer, then more bytes and a finish: the client got a failure,
    and so say the log line and the outcome counter (the later finish changes nothing)."""
    logs.setup("info")
    c = await client_factory()
    events = [
        chat_chunk({"role": "assistant", "content": "x"}),
        {"error": {"message": "boom", "type": "server_error", "code": "server_error"}},
        chat_chunk({"content": "late"}),
        chat_chunk({}, "stop"),
    ]
    if stream:
        mock.post(CHAT_URL).mock(return_value=sse_response(events, done=True))
    else:
        mock.post(CHAT_URL).mock(
            return_value=httpx.Response(
                200,
                json={
                    "id": "c1",
                    "object": "chat.completion",
                    "created": 1,
                    "model": "up-chat",
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}
                    ],
                    "error": {"message": "boom", "type": "server_error", "code": "server_error"},
                },
            )
        )
    if client_proto == "chat":
        r = await c.post(
            "/v1/chat/completions",
            json={"model": "chat-model", "stream": stream, "messages": [{"role": "user", "content": "hi"}]},
        )
        failed = r.text.rstrip().endswith("}") and '{"error"' in r.text if stream else r.status_code == 502
    else:
        r = await c.post("/v1/responses", json={"model": "chat-model", "stream": stream, "input": "hi"})
        failed = '"response.failed"' in r.text if stream else r.json()["status"] == "failed"
    assert failed, r.text
    line = next(x for x in lines(capsys.readouterr().err) if x.get("event") == "request")
    assert line["terminal"] == ("error" if client_proto == "chat" and not stream else "failed")
    if stream:
        m = c._transport.app.metrics  # type: ignore[attr-defined]
        assert m.get("switchboard_stream_outcomes_total", outcome="failed", client=client_proto) == 1
        assert m.get("switchboard_stream_outcomes_total", outcome="completed", client=client_proto) == 0
