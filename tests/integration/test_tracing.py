"""Traces (app/tracing.py) through the app, exported over OTLP/HTTP to a real receiver on
loopback that decodes what it gets with opentelemetry-proto; upstreams mocked by respx."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from app.main import create_app

from .conftest import USAGE_CHAT, chat_chunk, make_config, parse_sse, sse_response

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
PROMPT = "read a.py and ls, secret-prompt-words"
ANSWER = "Hello from the good upstream"
BAD_URL = "http://bad.test/v1/chat/completions"
GOOD_URL = "http://chat.test/v1/chat/completions"
SERVER, CLIENT = 2, 3  # Span.SpanKind in the OTLP protobuf


class Receiver:
    """An OTLP/HTTP traces receiver: POST /v1/traces, protobuf, decoded as it comes."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        got = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                got.paths.append(self.path)
                got.headers.append({k.lower(): v for k, v in self.headers.items()})
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                got.requests.append(req)
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def spans(self) -> list[Any]:
        return [s for r in self.requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]

    def resources(self) -> list[dict[str, Any]]:
        return [attrs(rs.resource.attributes) for r in self.requests for rs in r.resource_spans]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    return getattr(v, kind)


def attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in kvs}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def config(receiver: Receiver, **tracing: Any) -> dict[str, Any]:
    return {
        "providers": [
            {"name": "bad", "protocol": "chat", "base_url": "http://bad.test/v1", "api_key": "sk-bad"},
            {"name": "good", "protocol": "chat", "base_url": "http://chat.test/v1", "api_key": "sk-good"},
        ],
        "models": [
            {
                "name": "m",
                "targets": [
                    {"provider": "bad", "upstream_model": "up-bad"},
                    {"provider": "good", "upstream_model": "up-chat"},
                ],
            }
        ],
        "server": {"keepalive_seconds": 0, "retries": {"backoff_base_seconds": 0}},
        "tracing": {"endpoint": receiver.url, "headers": {"x-collector-token": "tok"}, **tracing},
    }


async def run(
    data: dict[str, Any], mock: Any, headers: dict[str, str] | None = None, prompt: str = PROMPT
) -> tuple[Any, list[Any]]:
    """One bridged (Responses → Chat) stream request whose first target answers 500; the
    response and the requests each upstream got.  The app's lifespan ends before this
    returns (its tracing flushed)."""
    seen: list[httpx.Request] = []

    def bad(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(500, json={"error": {"message": "boom", "type": "server_error"}})

    def good(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return sse_response(
            [
                chat_chunk({"role": "assistant", "content": ""}),
                chat_chunk({"content": ANSWER}),
                chat_chunk({}, "stop"),
                chat_chunk(None, None, choices=[], usage=USAGE_CHAT),
            ],
            done=True,
        )

    mock.post(BAD_URL).mock(side_effect=bad)
    mock.post(GOOD_URL).mock(side_effect=good)
    app = create_app(make_config("httpx", **data))
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8080") as c:
            body = {
                "model": "m",
                "stream": True,
                "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}],
            }
            r = await c.post("/v1/responses", json=body, headers=headers or {})
    finally:
        await ctx.__aexit__(None, None, None)  # shuts the tracer provider down: flushed
    return r, seen


def traceparent_of(req: httpx.Request) -> tuple[str, str] | None:
    tp = req.headers.get("traceparent")
    if tp is None:
        return None
    _, trace, span, _ = tp.split("-")
    return trace, span


def all_strings(spans: list[Any]) -> str:
    out = []
    for s in spans:
        out += [str(v) for v in attrs(s.attributes).values()]
        for e in s.events:
            out.append(e.name)
            out += [str(v) for v in attrs(e.attributes).values()]
    return "\n".join(out)


@pytest.fixture
async def mock() -> AsyncIterator[Any]:
    import respx

    with respx.mock(assert_all_called=False, assert_all_mocked=True) as r:
        yield r


async def test_bridged_retried_stream_is_one_server_span_and_a_client_span_per_attempt(
    receiver: Receiver, mock: Any
) -> None:
    client_tp = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
    r, seen = await run(config(receiver, enabled=True), mock, {"traceparent": client_tp, "x-request-id": "rid-t1"})
    assert r.status_code == 200
    events = parse_sse(r.content)
    assert events[-1]["type"] == "response.completed"
    assert [str(q.url) for q in seen] == [BAD_URL, GOOD_URL]

    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    assert receiver.headers[0]["x-collector-token"] == "tok"
    assert receiver.headers[0]["content-type"] == "application/x-protobuf"
    assert receiver.resources()[0]["service.name"] == "switchboard"
    spans = receiver.spans()
    servers = [s for s in spans if s.kind == SERVER]
    clients = sorted((s for s in spans if s.kind == CLIENT), key=lambda s: attrs(s.attributes)["switchboard.attempt"])
    assert len(servers) == 1 and len(clients) == 2 and len(spans) == 3
    server = servers[0]

    # the client's traceparent adopted: same trace, the client's span the parent
    assert server.trace_id.hex() == CLIENT_TRACE
    assert server.parent_span_id.hex() == CLIENT_SPAN
    assert server.name == "responses m"
    a = attrs(server.attributes)
    assert a["gen_ai.operation.name"] == "responses"
    assert a["gen_ai.request.model"] == "m"
    assert a["gen_ai.provider.name"] == "good"
    assert a["gen_ai.response.model"] == "up-chat"
    assert a["gen_ai.usage.input_tokens"] == 11 and a["gen_ai.usage.output_tokens"] == 7
    assert a["gen_ai.response.id"].startswith("resp_")
    assert a["gen_ai.response.id"] == events[-1]["response"]["id"]
    assert a["gen_ai.response.finish_reasons"] == ["completed"]
    assert a["switchboard.time_to_first_token"] > 0
    assert a["http.response.status_code"] == 200
    assert a["switchboard.request_id"] == "rid-t1"
    assert a["switchboard.attempts"] == 2
    assert "error.type" not in a
    assert server.end_time_unix_nano >= server.start_time_unix_nano

    # a CLIENT child per attempt, and the upstream got each one's own traceparent
    for n, (span, req) in enumerate(zip(clients, seen, strict=True), 1):
        assert span.trace_id.hex() == CLIENT_TRACE
        assert span.parent_span_id == server.span_id
        ca = attrs(span.attributes)
        assert ca["switchboard.attempt"] == n
        assert ca["gen_ai.operation.name"] == "chat"
        assert ca["server.port"] == 80 and ca["http.request.method"] == "POST"
        assert traceparent_of(req) == (CLIENT_TRACE, span.span_id.hex())
    bad, good = clients
    ba, ga = attrs(bad.attributes), attrs(good.attributes)
    assert bad.name == "chat up-bad" and good.name == "chat up-chat"
    assert ba["server.address"] == "bad.test" and ba["url.full"] == BAD_URL
    assert ba["http.response.status_code"] == 500 and ba["error.type"] == "server_error"
    assert ba["switchboard.attempt.outcome"] != "ok"
    assert ga["server.address"] == "chat.test" and ga["url.full"] == GOOD_URL
    assert ga["http.response.status_code"] == 200 and ga["switchboard.attempt.outcome"] == "ok"
    assert "error.type" not in ga
    assert bad.status.code == 2 and server.status.code != 2  # STATUS_CODE_ERROR
    # the stream's attempt span lasts while its body is read
    assert good.end_time_unix_nano >= good.start_time_unix_nano

    # capture_content off: neither the prompt nor the answer anywhere
    text = all_strings(spans)
    assert "secret-prompt-words" not in text and ANSWER not in text
    assert not any(s.events for s in spans)


async def test_a_new_trace_without_a_client_traceparent(receiver: Receiver, mock: Any) -> None:
    r, seen = await run(config(receiver, enabled=True), mock)
    assert r.status_code == 200
    spans = receiver.spans()
    server = next(s for s in spans if s.kind == SERVER)
    assert server.parent_span_id == b""
    assert len(server.trace_id) == 16 and server.trace_id.hex() != CLIENT_TRACE
    tps = [traceparent_of(q) for q in seen]
    assert all(tp is not None and tp[0] == server.trace_id.hex() for tp in tps)


async def test_capture_content_records_the_body_and_answer_as_events(receiver: Receiver, mock: Any) -> None:
    r, _ = await run(config(receiver, enabled=True, capture_content=True), mock)
    assert r.status_code == 200
    server = next(s for s in receiver.spans() if s.kind == SERVER)
    ev = {e.name: attrs(e.attributes) for e in server.events}
    assert "secret-prompt-words" in ev["gen_ai.request.body"]["body"]
    assert ANSWER in ev["gen_ai.response.body"]["body"]
    for s in receiver.spans():  # never as an attribute
        assert "secret-prompt-words" not in " ".join(str(v) for v in attrs(s.attributes).values())


async def test_captured_content_is_masked(receiver: Receiver, mock: Any) -> None:
    # a configured secret in the client's text (a pasted provider key) never reaches the collector
    r, _ = await run(config(receiver, enabled=True, capture_content=True), mock, prompt="my key is sk-good, ok")
    assert r.status_code == 200
    server = next(s for s in receiver.spans() if s.kind == SERVER)
    body = {e.name: attrs(e.attributes) for e in server.events}["gen_ai.request.body"]["body"]
    assert "my key is" in body and "sk-good" not in body


async def test_sample_ratio_zero_exports_nothing_yet_propagates(receiver: Receiver, mock: Any) -> None:
    r, seen = await run(config(receiver, enabled=True, sample_ratio=0.0), mock)
    assert r.status_code == 200
    assert receiver.spans() == []
    tp = seen[-1].headers["traceparent"]
    assert int(tp.rsplit("-", 1)[1], 16) & 1 == 0  # not sampled: said upstream (the sampled bit)


async def test_tracing_off_sends_nothing_and_no_traceparent(receiver: Receiver, mock: Any) -> None:
    r, seen = await run(config(receiver), mock, {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"})
    assert r.status_code == 200
    assert len(seen) == 2
    assert all("traceparent" not in q.headers for q in seen)
    assert receiver.requests == []
