"""Request preparation: one client request made ready for its upstream, before any I/O.

``prepare()`` is pure: it checks the client body (``transformers/request_check.py``), picks
the route (model → provider, upstream model, quirks), opens the Bridge (which translates the
body for the upstream) and returns a ``Prepared``: everything the pump (``app/pipeline.py``)
and the exchange (``app/exchange.py``) need for this request, and a way to prepare the same
request for another target of its model (``retarget``, the fallbacks of ``app/failover.py``).
The helpers for request ids and headers live here too: every route uses them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import quote

import orjson

from app.logs import log
from app.metrics import Metrics
from providers.upstream import Route, Router
from transformers import envelope
from transformers.bridge import Bridge, open_bridge
from transformers.context import Ctx
from transformers.errors import ProxyError
from transformers.ids import random_hex
from transformers.masking import NO_SECRETS, SecretMask
from transformers.protocols import HUB, SPECS, check_body

__all__ = [
    "PROCESS_SECRET",
    "error_body",
    "Prepared",
    "check_body",
    "header_list",
    "new_request_id",
    "prepare",
    "report_envelopes",
    "retarget",
    "safe_header_value",
    "scope_headers",
]


@dataclass(slots=True)
class Prepared:
    request_id: str
    client: str  # the client's protocol (a row of transformers/protocols.SPECS)
    upstream: str  # the upstream's protocol
    route: Route
    ctx: Ctx
    bridge: Bridge
    stream: bool
    upstream_body: bytes
    started: float
    route_name: str
    headers: dict[str, str] = field(default_factory=dict)
    forward_headers: dict[str, str] = field(default_factory=dict)
    keepalive: float = 15.0  # seconds of upstream silence before a heartbeat (0 = never)
    secrets: SecretMask = NO_SECRETS  # masks the configured secrets in upstream text
    metrics: Metrics = field(default_factory=Metrics)  # the app's counters
    owner: str = "-"  # the client key's configured name ("-": an open proxy)
    transport: str = "http"  # http | websocket (app.ws)
    # fallbacks (app.failover): the same request prepared for another target of its model
    # (None: the model has one target), the app's breakers/budgets, the attempt number
    again: Any = None
    resilience: Any = None
    attempts: int = 1
    drainer: Any = None  # the app's Drain (app.drain): open answers register with it
    stop: str = ""  # set by the drain: the code this answer must end with now
    # a non-streamed answer's (status, body) made from the Bridge's body, before anything is
    # sent, so that the log line and the counters say what the client got (app.compact)
    reshape: Any = None
    # a stream's time to first token: seconds from ``started`` to the first output (text,
    # reasoning, tool call arguments) written for the client; None until then
    first_token: float | None = None
    # the HTTP status the client got (set with the log line: app.exchange.finish_log)
    status: int = 0
    # its spans (app.tracing.RequestTrace) when tracing is on, else None
    trace: Any = None
    # the capture's recording of this exchange (app/capture.py), None when not captured
    capture: Any = None


def retarget(p: Prepared, route: Route) -> Prepared:
    """The request of ``p`` prepared for ``route``, another target of its model: the client's
    body translated again for that target's protocol and quirks (pure, as ``prepare``)."""
    if p.again is None:
        raise AssertionError("a one-target model has no other target")
    q: Prepared = p.again(route)
    q.route_name, q.reshape = p.route_name, p.reshape  # what the route's handler set (app.compact)
    q.trace = p.trace  # (app.tracing)
    if p.capture is not None:  # the same exchange goes on being recorded (app/capture.py)
        q.capture = q.bridge.tap = p.capture
    return q


def prepare(
    router: Router,
    raw: bytes,
    client: str,
    request_id: str,
    *,
    envelope_key: bytes,
    incomplete_as_completed: bool,
    keepalive: float = 15.0,
    started: float,
    client_headers: dict[str, str],
    secrets: SecretMask = NO_SECRETS,
    counters: Metrics | None = None,
    websocket: bool = False,
    body: dict[str, Any] | None = None,
    answered: dict[str, Any] | None = None,
    resilience: Any = None,
    drainer: Any = None,
    target: Route | None = None,
    owner: str = "-",
    signatures: dict[str, str] | None = None,
    json_array: bool = False,
) -> Prepared:
    """``body``: the already checked body (the app read it before its store lookups; ``raw``
    is then unused); ``answered``: response fields the app honoured itself (the Bridge echoes
    them: ``store``, ``previous_response_id`` of a stored conversation); ``signatures``: the
    thought signatures the app kept for calls that came back without them (app/signatures.py);
    ``json_array``: a stream asked without the row's ``stream_query`` (Gemini's ``alt=sse``),
    answered as one JSON array."""
    call = dict(locals())  # to prepare the same request for another target (retarget)
    if body is None:
        body = check_body(raw, client)
    model = body["model"]
    route = target or router.resolve(model)
    if route is None:
        raise ProxyError(
            404,
            f"The model '{model[:200]}' does not exist or you do not have access to it.",
            code="model_not_found",
            param="model",
        )
    # a model with fallbacks keeps the client's body as it came (translation may change it)
    pristine = orjson.dumps(body) if route.targets else None
    upstream = route.provider.protocol_for(client)
    spec = SPECS[client]
    if spec.via_hub and SPECS[upstream].native_items and HUB in route.provider.cfg.protocols:
        upstream = HUB  # an upstream that speaks both: the one the translation goes through
    ctx = Ctx(
        quirks=route.quirks,
        upstream_model=route.upstream_model,
        public_model=route.public_model,
        max_output_tokens=route.info.max_output_tokens,
        envelope_key=envelope_key,
        compaction_key=envelope_key or PROCESS_SECRET,
        thought_signatures=dict(signatures) if signatures else {},
        # (a WebSocket turn's body has no bytes of its own here: the walks run)
        may_carry_envelopes=not raw or envelope.PREFIX.encode() in raw,
    )
    try:
        out, bridge = open_bridge(
            body,
            client,
            upstream,
            ctx,
            incomplete_as_completed=incomplete_as_completed,
            mask=secrets,
            websocket=websocket,
            answered=answered,
            json_array=json_array,
        )
    finally:
        if ctx.envelope_rejected:
            report_envelopes(ctx, route.provider.name, request_id, counters)
    headers: dict[str, str] = {}
    if ctx.tools.dropped:
        headers["x-switchboard-dropped-tools"] = header_list(ctx.tools.dropped)
    if ctx.dropped_items:
        headers["x-switchboard-dropped-items"] = header_list(ctx.dropped_items)
    ua = safe_header_value(client_headers.get("user-agent"))
    forward = {"user-agent": ua} if ua else {}
    for name, quirk in spec.vendor_headers:
        value = safe_header_value(client_headers.get(name))
        if not value:
            continue
        if upstream == client and quirk in route.quirks:
            # the client's vendor header, to that vendor's own upstream (Anthropic's betas)
            forward[name] = value
        else:  # the compatible endpoints and other protocols get none: named
            ctx.dropped_fields.append(name)
    if ctx.dropped_fields:
        headers["x-switchboard-dropped-fields"] = header_list(ctx.dropped_fields)
    return Prepared(
        request_id=request_id,
        client=client,
        upstream=upstream,
        route=route,
        ctx=ctx,
        bridge=bridge,
        # (Gemini's own API takes the stream from the URL: not in its body)
        stream=bool(out["stream"] if SPECS[upstream].stream_in_body else out.pop("stream")),
        upstream_body=orjson.dumps(out),
        started=started,
        keepalive=keepalive,
        route_name=spec.route,
        headers=headers,
        forward_headers=forward,
        secrets=secrets,
        metrics=counters if counters is not None else Metrics(),
        transport="websocket" if websocket else "http",
        again=None if pristine is None else partial(_again, call, pristine),
        resilience=resilience,
        drainer=drainer,
        owner=owner,
    )


def _again(call: dict[str, Any], pristine: bytes, route: Route) -> Prepared:
    return prepare(**{**call, "body": orjson.loads(pristine), "target": route})


# seals compaction summaries when no server.secret_key is configured: valid in this process
# only (the app warns at startup; docs/configuration.md)
PROCESS_SECRET = os.urandom(32)


def report_envelopes(ctx: Ctx, provider: str, request_id: str, counters: Metrics | None) -> None:
    """Proxy envelopes that did not open (transformers/envelope.py): counted and logged at
    warning, never silently ignored (a reasoning one fell back to its summary text; a
    compaction one was refused)."""
    for kind, status in ctx.envelope_rejected:
        if counters is not None:
            counters.inc("switchboard_envelope_rejected_total", kind=kind, reason=status)
        log.warning("envelope_rejected", request_id=request_id, provider=provider, kind=kind, reason=status)


_HEADER_MAX = 512
_UNSAFE = re.compile(r"[^\x20-\x7e]")


def safe_header_value(v: str | None) -> str | None:
    """A client's header value fit to forward upstream: printable ASCII only (httpx encodes
    header values as ASCII), at most _HEADER_MAX characters; None when nothing is left."""
    if not v:
        return None
    v = _UNSAFE.sub("", v)[:_HEADER_MAX].strip()
    return v or None


def header_list(values: list[str]) -> str:
    """Client strings as one response header value: each percent-encoded (no CR/LF, comma or
    non-ASCII byte can reach the header), the whole at most _HEADER_MAX characters."""
    out = ",".join(quote(v, safe="!#$&'*+-.^_`|~:/@()[]") for v in values)
    return out if len(out) <= _HEADER_MAX else out[: _HEADER_MAX - 3] + "..."


def scope_headers(scope: Any) -> dict[str, str]:
    """An ASGI request's headers as a dict, first occurrence wins (as Starlette's ``Headers.get``)."""
    h: dict[str, str] = {}
    for k, v in scope["headers"]:
        key = k.decode("latin-1")
        if key not in h:
            h[key] = v.decode("latin-1")
    return h


# a client's own X-Request-Id is adopted when it is a plain token of at most 128 characters
# (it reaches logs and headers: nothing else is taken), else the proxy makes one
_GIVEN_RID = re.compile(rb"[A-Za-z0-9._:\-]{1,128}")


def error_body(client: str, status: int, err: dict[str, Any], request_id: str) -> bytes:
    """An error answer's body in the client's protocol (its row's ``error``: OpenAI's error
    object, Anthropic's, Google's)."""
    return SPECS[client].error(status, err, request_id)


def new_request_id(scope: Any = None) -> str:
    """The request's id: the client's ``X-Request-Id`` when it sent a plain one (``scope``:
    the ASGI scope), else ``req_`` and 32 hex digits."""
    if scope is not None:
        for k, v in scope.get("headers") or ():
            if len(k) == 12 and k.lower() == b"x-request-id":
                if _GIVEN_RID.fullmatch(v):
                    return v.decode()
                break
    return "req_" + random_hex()
