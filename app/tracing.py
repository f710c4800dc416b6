"""OpenTelemetry traces, opt-in by config (``tracing:``; docs/operations.md, "Traces").

One ``Tracing`` per app (``Service.tracing``), None when tracing is off: the hot path then
pays one ``is not None`` check per hook (``Prepared.trace`` stays None).  When on, each
request gets a ``RequestTrace``: a SERVER span named ``{gen_ai.operation.name}
{gen_ai.request.model}`` (GenAI semantic conventions), started at the request's start and
ended with its log line, and one CLIENT child span per upstream attempt, whose context goes
upstream as the W3C ``traceparent`` header.  A client's own ``traceparent`` (and
``tracestate``) is adopted: the request span is its child.

The spans go out through a ``BatchSpanProcessor`` (a background thread: nothing is exported
on the event loop) to an ``OTLPSpanExporter`` (OTLP/HTTP, protobuf).  The provider is this
app's own: no global tracer provider is set, so a library that traces through the global
one is unaffected.  ``shutdown`` (the app's lifespan end) flushes what is queued.

No prompt or answer text is recorded unless ``tracing.capture_content`` is true: then the
client's request body and the answer are span events, each cut at ``CONTENT_MAX`` bytes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import orjson
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from app.exchange import attempt as exchange_attempt
from providers.config import TracingCfg
from providers.retry import classify
from transformers.errors import ProxyError
from transformers.masking import NO_SECRETS, SecretMask

__all__ = ["CONTENT_MAX", "RequestTrace", "Tracing", "traceparent"]

CONTENT_MAX = 16 * 1024  # bytes of captured content per event (capture_content)
_SUCCEEDED = frozenset({"completed", "incomplete"})  # (as app.exchange.finish_log)
_STREAM_FAULTS = frozenset({"upstream_idle_timeout", "upstream_stream_error", "upstream_stream_truncated"})
_PROPAGATOR = TraceContextTextMapPropagator()
_EMPTY = Context()


def traceparent(span: Span) -> str:
    """The W3C ``traceparent`` value of ``span``'s context."""
    sc = span.get_span_context()
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{sc.trace_flags:02x}"


class Tracing:
    """One app's tracer provider, span processor and exporter (module docstring)."""

    def __init__(self, cfg: TracingCfg, exporter: SpanExporter | None = None, mask: SecretMask = NO_SECRETS) -> None:
        self.capture = cfg.capture_content
        self.mask = mask  # captured content goes through the configured secrets' mask, as log lines do
        self.provider = TracerProvider(
            sampler=ParentBased(TraceIdRatioBased(cfg.sample_ratio)),
            resource=Resource.create({"service.name": cfg.service_name}),
            shutdown_on_exit=False,  # the app's lifespan shuts it down
        )
        if exporter is None:
            exporter = OTLPSpanExporter(endpoint=cfg.endpoint, headers=dict(cfg.headers) or None)
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("switchboard")
        self._urls: dict[tuple[int, str], tuple[str, str, int | None]] = {}

    @classmethod
    def build(cls, cfg: TracingCfg, mask: SecretMask = NO_SECRETS) -> Tracing | None:
        """The app's tracing, None when ``tracing.enabled`` is false."""
        return cls(cfg, mask=mask) if cfg.enabled else None

    def begin(self, p: Any, headers: dict[str, str], raw: bytes = b"") -> RequestTrace:
        """The trace of prepared request ``p`` (started at ``p.started``), the client's
        ``traceparent`` in ``headers`` adopted; ``raw``: its body (captured when configured)."""
        parent = _PROPAGATOR.extract(headers) if "traceparent" in headers else _EMPTY
        op = p.client
        model = p.route.public_model
        start = time.time_ns() - int((time.perf_counter() - p.started) * 1e9)
        span = self.tracer.start_span(
            f"{op} {model}",
            context=parent,
            kind=SpanKind.SERVER,
            start_time=start,
            attributes={
                "gen_ai.operation.name": op,
                "gen_ai.request.model": model,
                "gen_ai.provider.name": p.route.provider.name,
                "switchboard.request_id": p.request_id,
                "switchboard.stream": p.stream,
                "switchboard.transport": p.transport,
                "http.route": p.route_name,
            },
        )
        t = RequestTrace(self, span)
        if self.capture and span.is_recording():
            body = raw or p.upstream_body
            span.add_event("gen_ai.request.body", {"body": _cut(self.mask(body.decode("utf-8", "replace")))})
        return t

    def endpoint(self, prov: Any, protocol: str) -> tuple[str, str, int | None]:
        """(url.full, server.address, server.port) of a provider's endpoint: no userinfo,
        no query (it may hold a key)."""
        key = (id(prov), protocol)
        got = self._urls.get(key)
        if got is None:
            u = httpx.URL(prov.url(protocol))
            port = u.port or (443 if u.scheme == "https" else 80)
            netloc = u.host if u.port is None else f"{u.host}:{u.port}"
            got = self._urls[key] = (f"{u.scheme}://{netloc}{u.path}", u.host, port)
        return got

    def flush(self, timeout_ms: int = 5000) -> bool:
        return self.provider.force_flush(timeout_ms)

    async def shutdown(self) -> None:
        """Export what is queued and stop (blocking I/O: in a thread)."""
        await asyncio.to_thread(self.provider.shutdown)


class RequestTrace:
    """One request's spans: the SERVER span, its CLIENT span per upstream attempt."""

    __slots__ = ("tracing", "span", "ctx", "trace_id", "open", "upstream_status", "ended")

    def __init__(self, tracing: Tracing, span: Span) -> None:
        self.tracing = tracing
        self.span = span
        self.ctx = set_span_in_context(span, _EMPTY)
        self.trace_id = f"{span.get_span_context().trace_id:032x}"
        self.open: Span | None = None  # the attempt whose answer is being read (a stream)
        self.upstream_status = 0  # set by app.exchange.exchange: a failed attempt's HTTP status
        self.ended = False

    async def attempt(self, p: Any) -> tuple[Any, Any]:
        """``app.exchange.attempt(p)`` in a CLIENT span, whose ``traceparent`` goes upstream.
        A stream's span stays open until the request ends (its body is read then)."""
        prov = p.route.provider
        url, host, port = self.tracing.endpoint(prov, p.upstream)
        span = self.tracing.tracer.start_span(
            f"{p.upstream} {p.route.upstream_model}",
            context=self.ctx,
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": p.upstream,
                "gen_ai.provider.name": prov.name,
                "gen_ai.request.model": p.route.upstream_model,
                "http.request.method": "POST",
                "server.address": host,
                "server.port": port or 0,
                "url.full": url,
                "switchboard.attempt": p.attempts,
            },
        )
        fwd = p.forward_headers
        fwd["traceparent"] = traceparent(span)
        state = span.get_span_context().trace_state
        if state:
            fwd["tracestate"] = state.to_header()
        self.upstream_status = 0
        try:
            got = await exchange_attempt(p)
        except ProxyError as e:
            outcome = classify(e.code)[0]
            if self.upstream_status:
                span.set_attribute("http.response.status_code", self.upstream_status)
            span.set_attributes({"switchboard.attempt.outcome": outcome, "error.type": e.code or str(e.status)})
            span.set_status(Status(StatusCode.ERROR))
            span.end()
            raise
        except BaseException as e:
            span.set_attributes({"switchboard.attempt.outcome": "cancelled", "error.type": type(e).__name__})
            span.end()
            raise
        span.set_attributes({"http.response.status_code": got[0].status_code, "switchboard.attempt.outcome": "ok"})
        if got[1] is None:  # a stream: read after this
            self.open = span
        else:
            span.end()
        return got

    def end(self, p: Any, status: int, terminal: str, error: str = "") -> None:
        """The request's end (after ``app.exchange.finish_log``, with what it was given)."""
        if self.ended:
            return
        self.ended = True
        span = self.span
        bridge = p.bridge
        if status >= 400 or terminal not in _SUCCEEDED:  # the error as finish_log names it
            if not error:
                if terminal == "client_cancel":
                    error = "client_cancel"
                elif terminal == "failed":
                    error = bridge.error_code or "failed"
                else:
                    error = str(status) if status >= 400 else terminal
        att = self.open
        if att is not None:
            self.open = None
            if bridge.error_code in _STREAM_FAULTS:
                att.set_attributes({"error.type": bridge.error_code, "switchboard.attempt.outcome": "stream_fault"})
                att.set_status(Status(StatusCode.ERROR))
            att.end()
        if span.is_recording():
            attrs: dict[str, Any] = {
                "gen_ai.provider.name": p.route.provider.name,
                "gen_ai.response.model": p.route.upstream_model,
                "http.response.status_code": status,
                "switchboard.attempts": p.attempts,
                "switchboard.upstream_protocol": p.upstream,
                "switchboard.terminal": terminal,
            }
            tokens = bridge.tokens()
            if tokens is not None:
                attrs["gen_ai.usage.input_tokens"] = tokens[0]
                attrs["gen_ai.usage.output_tokens"] = tokens[1]
                attrs["gen_ai.usage.cache_read.input_tokens"] = tokens[2]
                attrs["gen_ai.usage.reasoning.output_tokens"] = tokens[4]
            if p.first_token is not None:
                attrs["switchboard.time_to_first_token"] = p.first_token  # seconds
            answer = _answer(p)
            if answer is not None:
                rid = answer.get("id")
                if isinstance(rid, str):
                    attrs["gen_ai.response.id"] = rid
            reasons = _finish_reasons(p, answer, terminal)
            if reasons:
                attrs["gen_ai.response.finish_reasons"] = reasons
            if error:
                attrs["error.type"] = error
                span.set_status(Status(StatusCode.ERROR))
            span.set_attributes(attrs)
            if self.tracing.capture and answer is not None:
                text = self.tracing.mask(orjson.dumps(answer).decode())
                span.add_event("gen_ai.response.body", {"body": _cut(text)})
        span.end()

    def refused(self, status: int, code: str | None) -> None:
        """The request was refused before its upstream exchange (its key's limits)."""
        if self.ended:
            return
        self.ended = True
        self.span.set_attributes({"http.response.status_code": status, "error.type": code or str(status)})
        self.span.set_status(Status(StatusCode.ERROR))
        self.span.end()


def _answer(p: Any) -> dict[str, Any] | None:
    """The client's answer object when the Bridge holds one: a Responses client's response,
    a whole answer's object, a Messages stream's message; else None (a Chat stream)."""
    bridge = p.bridge
    try:
        obj = bridge.response_object()
        if obj is None:
            obj = getattr(bridge, "_result", None)
        message = getattr(bridge.encoder, "message", None)  # a Messages encoder's message so far
        if obj is None and message is not None and bridge.terminal:
            obj = message()
    except Exception:  # best effort: a trace never fails a request
        return None
    return obj if isinstance(obj, dict) else None


def _finish_reasons(p: Any, answer: dict[str, Any] | None, terminal: str) -> list[str]:
    if answer is not None:
        choices = answer.get("choices")
        if isinstance(choices, list):
            return [str(c.get("finish_reason")) for c in choices if isinstance(c, dict) and c.get("finish_reason")]
        stop = answer.get("stop_reason")
        if isinstance(stop, str):
            return [stop]
        details = answer.get("incomplete_details")
        if isinstance(details, dict) and details.get("reason"):
            return [str(details["reason"])]
        status = answer.get("status")
        if isinstance(status, str):
            return [status]
    return [terminal] if terminal else []


def _cut(text: str) -> str:
    raw = text.encode()
    if len(raw) <= CONTENT_MAX:
        return text
    return raw[:CONTENT_MAX].decode("utf-8", "ignore") + "…"
