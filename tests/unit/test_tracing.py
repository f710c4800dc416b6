"""app/tracing.py alone: spans recorded in memory (the SDK's InMemorySpanExporter)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import app.tracing as tracing
from app.config import parse_config
from app.prepare import prepare
from app.tracing import CONTENT_MAX, Tracing, traceparent
from providers.config import TracingCfg
from providers.upstream import Router
from transformers.errors import ProxyError

CFG = parse_config(
    {
        "providers": [
            {
                "name": "up",
                "protocol": "chat",
                "base_url": "https://user:pw@api.example.com:8443/v1",
                "query": {"api-key": "sk-in-query"},
            }
        ],
        "models": [{"name": "m", "provider": "up", "upstream_model": "up-m"}],
    },
    "<test>",
)
BODY = {"model": "m", "input": "say hi, secret-words", "stream": True}
CLIENT_TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def make(**cfg: Any) -> tuple[Tracing, InMemorySpanExporter]:
    exp = InMemorySpanExporter()
    return Tracing(TracingCfg(enabled=True, **cfg), exporter=exp), exp


def prepared(client: str = "responses", body: dict[str, Any] | None = None) -> Any:
    router = Router.build(CFG)
    raw = orjson.dumps(body or BODY)
    return prepare(
        router,
        raw,
        client,
        "req_1",
        envelope_key=b"",
        incomplete_as_completed=False,
        started=time.perf_counter() - 0.05,
        client_headers={},
    )


def spans(t: Tracing, exp: InMemorySpanExporter) -> list[Any]:
    assert t.flush()
    return list(exp.get_finished_spans())


def test_off_by_default_is_none() -> None:
    assert Tracing.build(TracingCfg()) is None
    assert CFG.tracing.enabled is False
    assert CFG.tracing.endpoint == "http://127.0.0.1:4318/v1/traces"
    assert CFG.tracing.service_name == "switchboard" and CFG.tracing.sample_ratio == 1.0
    assert CFG.tracing.capture_content is False
    with pytest.raises(ValueError):
        TracingCfg(sample_ratio=1.5)


def test_collector_credentials_are_secrets() -> None:
    cfg = parse_config(
        {
            "providers": [{"name": "d", "profile": "demo"}],
            "models": [{"name": "m", "provider": "d"}],
            "tracing": {"enabled": True, "headers": {"Authorization": "Bearer collector-secret-1"}},
        },
        "<test>",
    )
    assert "collector-secret-1" not in cfg.secrets()("x Bearer collector-secret-1 y")


def test_request_span_adopts_the_client_traceparent_and_starts_at_the_request_start() -> None:
    t, exp = make()
    p = prepared()
    rt = t.begin(p, {"traceparent": CLIENT_TP})
    assert rt.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    rt.end(p, 200, "completed")
    rt.end(p, 200, "completed")  # once only
    (s,) = spans(t, exp)
    assert s.kind == SpanKind.SERVER and s.name == "responses m"
    assert f"{s.parent.span_id:016x}" == "00f067aa0ba902b7" and s.parent.is_remote
    assert (s.end_time - s.start_time) >= 40_000_000  # from p.started, 50 ms before begin
    a = dict(s.attributes)
    assert a["gen_ai.operation.name"] == "responses" and a["gen_ai.request.model"] == "m"
    assert a["gen_ai.provider.name"] == "up" and a["gen_ai.response.model"] == "up-m"
    assert a["switchboard.request_id"] == "req_1" and a["http.response.status_code"] == 200
    assert "error.type" not in a and "gen_ai.usage.input_tokens" not in a
    assert s.status.status_code != StatusCode.ERROR
    assert s.resource.attributes["service.name"] == "switchboard"


def test_a_malformed_traceparent_starts_a_new_trace() -> None:
    t, exp = make()
    p = prepared()
    rt = t.begin(p, {"traceparent": "00-zz-yy-01"})
    rt.end(p, 200, "completed")
    (s,) = spans(t, exp)
    assert s.parent is None


async def test_attempt_span_sends_its_traceparent_and_stays_open_for_a_stream(monkeypatch: Any) -> None:
    t, exp = make()
    p = prepared()
    rt = t.begin(p, {})
    seen: list[str] = []

    async def ok(q: Any) -> tuple[Any, Any]:
        seen.append(q.forward_headers["traceparent"])
        return httpx.Response(200), None

    monkeypatch.setattr(tracing, "exchange_attempt", ok)
    await rt.attempt(p)
    assert rt.open is not None
    assert seen == [traceparent(rt.open)]
    assert spans(t, exp) == []  # the stream's span is open until the request ends
    p.bridge.usage = {
        "input_tokens": 5,
        "output_tokens": 3,
        "input_tokens_details": {"cached_tokens": 1, "cache_write_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 2},
    }
    p.first_token = 0.25
    rt.end(p, 200, "completed")
    client, server = sorted(spans(t, exp), key=lambda s: s.kind.value)[::-1]
    assert server.kind == SpanKind.SERVER and client.kind == SpanKind.CLIENT
    assert client.parent.span_id == server.context.span_id
    assert client.name == "chat up-m"
    ca = dict(client.attributes)
    # no userinfo, no query (it holds a key)
    assert ca["url.full"] == "https://api.example.com:8443/v1/chat/completions"
    assert ca["server.address"] == "api.example.com" and ca["server.port"] == 8443
    assert ca["http.response.status_code"] == 200 and ca["switchboard.attempt"] == 1
    assert ca["switchboard.attempt.outcome"] == "ok"
    a = dict(server.attributes)
    assert a["gen_ai.usage.input_tokens"] == 5 and a["gen_ai.usage.output_tokens"] == 3
    assert a["gen_ai.usage.reasoning.output_tokens"] == 2
    assert a["switchboard.time_to_first_token"] == 0.25


async def test_failed_attempt_span_holds_the_upstream_status_and_error(monkeypatch: Any) -> None:
    t, exp = make()
    p = prepared()
    rt = t.begin(p, {})

    async def fail(q: Any) -> tuple[Any, Any]:
        rt.upstream_status = 503  # (app.exchange.exchange sets it)
        raise ProxyError(502, "down", type="upstream_error", code="server_error")

    monkeypatch.setattr(tracing, "exchange_attempt", fail)
    with pytest.raises(ProxyError):
        await rt.attempt(p)
    rt.end(p, 502, "error", "server_error")
    client, server = sorted(spans(t, exp), key=lambda s: s.kind.value)[::-1]
    assert dict(client.attributes)["http.response.status_code"] == 503
    assert dict(client.attributes)["error.type"] == "server_error"
    assert client.status.status_code == StatusCode.ERROR
    assert dict(server.attributes)["error.type"] == "server_error"
    assert dict(server.attributes)["http.response.status_code"] == 502
    assert server.status.status_code == StatusCode.ERROR


def test_error_type_as_the_log_line_names_it() -> None:
    t, exp = make()
    for terminal, status, want in (("client_cancel", 499, "client_cancel"), ("failed", 200, "failed")):
        p = prepared()
        t.begin(p, {}).end(p, status, terminal)
        assert dict(spans(t, exp)[-1].attributes)["error.type"] == want


def test_refused_request() -> None:
    t, exp = make()
    p = prepared()
    t.begin(p, {}).refused(429, "rate_limit_exceeded")
    (s,) = spans(t, exp)
    assert dict(s.attributes)["error.type"] == "rate_limit_exceeded"


def test_no_content_unless_captured_and_then_bounded() -> None:
    t, exp = make()
    p = prepared()
    t.begin(p, {}, orjson.dumps(BODY)).end(p, 200, "completed")
    (s,) = spans(t, exp)
    assert not s.events
    assert "secret-words" not in repr(dict(s.attributes))

    t, exp = make(capture_content=True)
    big = {**BODY, "input": "é" * (CONTENT_MAX * 2)}
    p = prepared(body=big)
    t.begin(p, {}, orjson.dumps(big)).end(p, 200, "completed")
    (s,) = spans(t, exp)
    (ev,) = [e for e in s.events if e.name == "gen_ai.request.body"]
    assert len(ev.attributes["body"].encode()) <= CONTENT_MAX + 3


def test_unsampled_is_not_recorded_but_has_a_context() -> None:
    t, exp = make(sample_ratio=0.0)
    p = prepared()
    rt = t.begin(p, {})
    assert len(rt.trace_id) == 32
    rt.end(p, 200, "completed")
    assert spans(t, exp) == []
    # a client's sampled parent decides for its trace (ParentBased)
    rt = t.begin(p, {"traceparent": CLIENT_TP})
    rt.end(p, 200, "completed")
    assert len(spans(t, exp)) == 1


async def test_shutdown_flushes() -> None:
    t, exp = make()
    p = prepared()
    t.begin(p, {}).end(p, 200, "completed")
    await t.shutdown()
    assert len(exp.get_finished_spans()) == 1
