"""One JSON log line per request with the agreed fields; keys never written."""

from __future__ import annotations

import json
from typing import Any

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
