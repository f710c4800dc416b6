"""The FastAPI application: routes, auth, body limit, error rendering, lifecycle.

The middleware chain is empty on purpose (docs/rules.md, "No middleware"): auth and the body limit are two
function calls inside the two proxy routes, and errors are rendered by exception handlers.

Fast path: the proxy routes (``POST /v1/chat/completions``, ``/v1/responses``,
``/v1/messages``, and a ``{model}`` route's proxy methods: Gemini's ``:generateContent`` and
``:streamGenerateContent``) are dispatched by
``Switchboard.__call__`` (the app's outermost ASGI layer) straight to a raw ASGI handler,
without Starlette routing, FastAPI's middleware stack or its exception-handler wrappers
(each of those wraps ``send``, and a stream sends once per upstream chunk).  That handler
does auth, the body limit and ``prepare()`` itself and renders its errors exactly as the
exception handlers below do (same status, the protocol's error body, ``x-request-id``/``retry-after``
headers, log line; an unexpected exception is logged, answered 500 if nothing was sent yet,
and re-raised to the server).  Everything else goes through FastAPI.  The routes are
registered in FastAPI too, with the same handler minus its own catch-all (which FastAPI's
``on_unexpected`` then does), so routing answers stay FastAPI's (405 on another method, the
trailing-slash redirect) and a path under a ``root_path`` still reaches them.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import hmac
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import httpx
import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.telemetry import TelemetryConfig
from starlette.requests import ClientDisconnect

from app import accounting, compact, logs, metrics, stored, tokens
from app.admin import AdminAuth, admin_routes
from app.capture import Capture
from app.config import Config, ConfigError, load_config
from app.console import Sampler, console_routes
from app.drain import Drain
from app.failover import Resilience
from app.guard import Guard
from app.keys import KeyRegistry, Keys, KeysError
from app.limits import Limiter, MemoryCounters, RedisCounters
from app.logs import log
from app.pipeline import ProxyResponse
from app.prepare import Prepared, check_body, error_body, new_request_id, prepare, scope_headers
from app.signatures import Signatures, bare_calls
from app.store import Store, open_store
from app.stored import Turn
from app.usage import UsageLog, usage_routes
from app.ws import serve_socket
from providers.codex_models import codex_entry
from providers.errors import known_codes
from providers.upstream import Route, Router
from transformers.errors import ProxyError, RequestError
from transformers.protocols import SPECS, ProtocolSpec

if TYPE_CHECKING:
    from app.tracing import Tracing


def _key_digests(named: list[tuple[str, str]]) -> list[tuple[bytes, str]]:
    """(digest, name) of every client key (``AuthCfg.named``)."""
    out = []
    for name, k in named:
        if k.startswith("sha256:"):
            out.append((bytes.fromhex(k[7:]), name))
        else:
            out.append((hashlib.sha256(k.encode()).digest(), name))
    return out


OPEN_OWNER = "-"  # the owner of what an open proxy (no client keys) stores


def _json(status: int, obj: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json", headers=headers)


# the proxy routes of the protocols whose route is one path (a ``{model}`` route is
# dispatched by ``_model_path``)
_PROXY_ROUTES = {s.route: s.name for s in SPECS.values() if "{model}" not in s.route}
# GET /: what this server is and where to go next
_INDEX: dict[str, Any] = {
    "name": "switchboard",
    "about": "OpenAI-compatible reverse proxy for coding agents: point a client's base_url at /v1",
    "api": {"base_url": "/v1", "routes": [*_PROXY_ROUTES, "/v1/models"]},
    "gemini_api": {
        "base_url": "/v1beta",
        "routes": ["/v1beta/models/{model}:generateContent", "/v1beta/models/{model}:streamGenerateContent"],
    },
    "console": "/console (admin keys only)",
    "health": "/healthz",
    "ready": "/readyz",
    "metrics": "/metrics",
    "docs": "README.md and docs/ in the Switchboard repository (docs/clients.md: setting up a client)",
}


def client_headers(scope: Any, spec: ProtocolSpec) -> dict[str, str]:
    """The request's headers; for a protocol whose clients may send their key in the query
    (its row's ``key_query``: Gemini's ``?key=``), that key as the row's header when no
    header carries one."""
    h = scope_headers(scope)
    if spec.key_query:
        param, header = spec.key_query
        if "authorization" not in h and header not in h:
            for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1")):
                if k == param and v:
                    h[header] = v
                    break
    return h


def _asks_sse(scope: Any, spec: ProtocolSpec) -> bool:
    """The query holds every parameter of the row's ``stream_query`` (Gemini's ``alt=sse``),
    or the row has none (its streams are SSE)."""
    if not spec.stream_query:
        return True
    query = set(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
    return all(kv in query for kv in spec.stream_query)


def model_in(template: str, path: str) -> str | None:
    """The model of ``path`` on a ``{model}`` route ``template``; None when it is not one."""
    head, _, tail = template.partition("{model}")
    if tail and path.startswith(head) and path.endswith(tail) and len(path) > len(head) + len(tail):
        return path[len(head) : -len(tail)]
    return None


def path_call(spec: ProtocolSpec, path: str) -> tuple[str, bool]:
    """(model, stream) of a request on a ``{model}`` route: its row's ``route`` or
    ``stream_route``; a 404 when the path is neither."""
    for route, stream in ((spec.route, False), (spec.stream_route, True)):
        model = model_in(route, path)
        if model is not None:
            return model, stream
    raise ProxyError(404, f"Unknown route POST {path[:200]}", code="not_found")


ASGIHandler = Callable[[Any, Any, Any], Awaitable[None]]


# FastAPI's own OpenTelemetry, off: it turns itself on whenever a global provider is set (a
# process run under ``opentelemetry-instrument``) or FASTAPI_OTEL_AUTO_CONFIGURE is true, and
# would then export every request's URL (a Gemini client's ``?key=``), its exceptions and
# messages, past the proxy's masking.  The proxy's traces are its own (app/tracing.py, opt-in
# by config, content only when asked).
NO_FASTAPI_TELEMETRY: TelemetryConfig = {
    "tracing": False,
    "metrics": False,
    "logs": False,
    "operation_spans": False,
    "auto_configure": False,
}


class Switchboard(FastAPI):
    """FastAPI with the proxy routes dispatched before anything else (see the module docstring),
    behind the browser guard (``app.guard``)."""

    fast_routes: dict[str, ASGIHandler] = {}
    # the proxy methods of a ``{model}`` route (Gemini's ``:generateContent``): (row, handler)
    model_routes: tuple[tuple[ProtocolSpec, ASGIHandler], ...] = ()
    socket_routes: dict[str, ASGIHandler] = {}
    guard: Guard = Guard()
    metrics: metrics.Metrics = metrics.Metrics()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http" or kind == "websocket":
            refusal = self.guard.check(scope)
            if refusal is not None:
                await _refuse(self.metrics, refusal, scope, receive, send)
                return
            cors = self.guard.cors_headers(scope) if kind == "http" else None
            if cors is not None:  # a browser page whose Origin is allowed
                if scope["method"] == "OPTIONS":
                    await send({"type": "http.response.start", "status": 204, "headers": cors})
                    await send({"type": "http.response.body", "body": b""})
                    return
                send = _with_headers(send, cors)
            if kind == "http" and scope["method"] == "POST":
                path = scope["path"]
                handler = self.fast_routes.get(path)
                if handler is None:
                    for spec, h in self.model_routes:
                        if model_in(spec.route, path) is not None or model_in(spec.stream_route, path) is not None:
                            handler = h
                            break
                if handler is not None:
                    await handler(scope, receive, send)
                    return
            elif kind == "websocket":
                handler = self.socket_routes.get(scope["path"])
                if handler is not None:
                    await handler(scope, receive, send)
                    return
        await super().__call__(scope, receive, send)


def _with_headers(send: Any, extra: list[tuple[bytes, bytes]]) -> Any:
    async def wrapped(msg: Any) -> None:
        if msg["type"] == "http.response.start":
            msg = {**msg, "headers": [*msg.get("headers", ()), *extra]}
        await send(msg)

    return wrapped


async def _refuse(counters: metrics.Metrics, e: ProxyError, scope: Any, receive: Any, send: Any) -> None:
    rid = new_request_id()
    metrics.log_rejected(counters, scope.get("path", ""), e.status, e.code, rid)
    if scope["type"] == "websocket":
        await send(
            {
                "type": "websocket.http.response.start",
                "status": e.status,
                "headers": [(b"content-type", b"application/json"), (b"x-request-id", rid.encode())],
            }
        )
        await send({"type": "websocket.http.response.body", "body": e.body(rid)})
        return
    await _error_response(e.status, e.body(rid), {"x-request-id": rid})(scope, receive, send)


class _RawEndpoint:
    """A raw ASGI endpoint for Starlette's router (a plain function would be wrapped as a
    request/response handler)."""

    __slots__ = ("fn",)

    def __init__(self, fn: ASGIHandler) -> None:
        self.fn = fn

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.fn(scope, receive, send)


def _warn_secret(server: Any) -> None:
    """server.secret_key unset, or set through its deprecated alias: said once at start."""
    if not server.secret:
        log.warning(
            "no_secret_key",
            message="server.secret_key is not set: reasoning replays as summary text only, and compaction summaries "
            "are sealed with a key of this process alone (another instance or a restart cannot open them); "
            "`switchboard serve` keeps one beside the store instead",
        )
    elif not server.secret_key:
        log.warning("deprecated_setting", setting="server.reasoning_envelope_key", use="server.secret_key")


def _tracing(config: Config) -> Tracing | None:
    """The app's tracing when ``tracing.enabled``; its module, and OpenTelemetry's with it
    (some 10 MB and 60 ms at start), is imported only then."""
    if not config.tracing.enabled:
        return None
    from app.tracing import Tracing

    return Tracing.build(config.tracing, config.secrets())


def _parsed(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("latin-1")


def _on_sighup(loop: asyncio.AbstractEventLoop, reload: Callable[[], None]) -> None:
    """SIGHUP reloads the limits (``Service.reload``) instead of ending the process (its
    default), in the main thread of a server process (elsewhere nothing changes)."""
    if threading.current_thread() is threading.main_thread():
        loop.add_signal_handler(signal.SIGHUP, reload)


def owner_envelope_key(secret: bytes, owner: str) -> bytes:
    """The envelope key of client key ``owner`` (``Service.envelope_key_for``); empty
    without a secret."""
    return hmac.new(secret, b"switchboard-owner\x00" + owner.encode(), hashlib.sha256).digest() if secret else b""


class Service:
    """What the routes of one app share: the router, the client keys, the secrets' mask, the
    counters and the lifecycle."""

    def __init__(self, config: Config, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.config = config
        self.router = Router.build(config, transport=transport)
        self.digests = _key_digests(config.auth.named())
        self.secrets = config.secrets()
        pairs = [(t.provider, t.upstream_model or m.name) for m in config.models for t in m.target_list()]
        self.counters = metrics.Metrics(
            (p.name for p in config.providers),
            known_codes(),
            models=(model for _, model in pairs),
            # the names clients may send (a glob entry's are the clients' own: "other")
            public_models=(m.name for m in config.models if not any(c in m.name for c in "*?[")),
            keys=(name for name, _ in config.auth.named()),
        )
        self.envelope_key = config.server.secret.encode()
        self._owner_keys: dict[str, bytes] = {}  # client key name → its envelope key
        self.ready = False
        self.sockets = 0  # open Responses WebSocket connections (app.ws)
        # fallbacks, retries and breakers (app.failover); the SIGTERM drain (app.drain): open
        # answers register with it, ``drain.draining``/``drain.event`` say it started
        self.resilience = Resilience(config.server.retries, config.server.breaker, pairs, self.counters)
        self.drain = Drain(config.server.drain)
        self.signals = False  # install the drain's signal handlers at start-up (switchboard serve)
        # the response store (app/store.py), None when storing is off; a WebSocket falls back
        # to it for a previous_response_id not on its socket (app.stored.stored_chain)
        self.store: Store | None = open_store(config.store, self.counters)
        # per-key limits (app/limits.py): shared through the Redis store, else per process
        shared = getattr(self.store, "redis", None)
        self.limiter = Limiter(
            config,
            RedisCounters(shared, config.store.key_prefix, config.store.cluster)
            if shared is not None
            else MemoryCounters(),
            self.counters,
        )
        # usage records (app/usage.py), in the store's backend
        self.usage = UsageLog(config, self.store, self.counters)
        # Gemini's thought signatures for the Chat clients that drop them (app/signatures.py)
        self.signatures = Signatures(self.store)
        # client keys made at run time (app/keys.py), in the store's backend, refreshed
        # from it every half second; the config's keys (self.digests) stay as they are
        self.keys = KeyRegistry(Keys(config, self.store), on_change=self._runtime_keys)
        # the console's sampler of the metrics (app/console.py), with admin keys only
        self.sampler: Sampler | None = None
        # OpenTelemetry spans (app/tracing.py), None when tracing is off
        self.tracing: Tracing | None = _tracing(config)
        # capture of exchanges for switchboard replay (app/capture.py), None when off
        self.capture = Capture(config.capture, self.secrets) if config.capture.enabled else None

    @asynccontextmanager
    async def lifespan(self, _: FastAPI) -> AsyncIterator[None]:
        await self.keys.start()
        if not self.digests and self.keys.none:
            log.warning(
                "open_proxy",
                message="no client API keys configured (auth.keys): anyone who can reach this port can use every "
                "configured provider",
            )
        _warn_secret(self.config.server)
        await self.usage.start()
        await self.limiter.start()
        if self.sampler is not None:
            await self.sampler.start()
        self.ready = True
        if self.signals:
            loop = asyncio.get_running_loop()
            self.drain.install(loop)
            _on_sighup(loop, self.reload)
            _release_startup_memory()
        # where it listens: set by switchboard serve (app/cli.py) once the socket is bound
        where = {"listen": os.environ["SWITCHBOARD_LISTEN"]} if "SWITCHBOARD_LISTEN" in os.environ else {}
        log.info("ready", **where, models=len(self.router.routes), providers=len(self.config.providers))
        try:
            yield
        finally:
            self.ready = False
            self.drain.done()
            await self.keys.aclose()
            await self.limiter.aclose()
            if self.sampler is not None:
                await self.sampler.aclose()
            await self.router.aclose()
            await self.usage.aclose()
            if self.store is not None:
                await self.store.aclose()
            if self.tracing is not None:
                await self.tracing.shutdown()  # the spans still queued, exported

    def reload(self) -> None:
        """SIGHUP: the keys' limits and the models' prices read again from the config file
        (``SWITCHBOARD_CONFIG``); nothing else changes and no stream is touched (a request
        admitted before keeps its ticket).  A file that does not load leaves them as they were."""
        path = os.environ.get("SWITCHBOARD_CONFIG")
        if not path:
            return
        try:
            fresh = load_config(path)
        except ConfigError as e:
            log.error("reload_failed", error=str(e))
            return
        self.limiter.reload(fresh)
        log.info("reloaded", what="limits")

    def _runtime_keys(self, policies: dict[str, Any]) -> None:
        """The runtime keys changed (app/keys.py): their limits, and their names as metric labels."""
        self.limiter.runtime = policies
        self.counters.add_keys(policies)

    def envelope_key_for(self, owner: str) -> bytes:
        """The key that seals and opens this client key's envelopes (reasoning, compaction):
        derived from the server's secret and the key's name, so a blob sealed for one client
        key does not open in another's request (its summary would reach that key's upstream
        request).  Empty without a secret."""
        k = self._owner_keys.get(owner)
        if k is None:
            k = owner_envelope_key(self.envelope_key, owner)
            if len(self._owner_keys) < 4096:  # (names come from the config: a few)
                self._owner_keys[owner] = k
        return k

    def authorize(self, h: Any) -> str:
        """Check the client key in headers ``h`` (a dict or Starlette's Headers); the key's
        name (``auth.keys``: what owns its stored responses)."""
        if not self.digests and self.keys.none:
            return OPEN_OWNER
        auth = h.get("authorization", "")
        key = (
            auth[7:].strip()
            if auth[:7].lower() == "bearer "
            else h.get("api-key") or h.get("x-api-key") or h.get("x-goog-api-key") or ""
        )
        if not key:
            raise ProxyError(401, "Missing API key: send 'Authorization: Bearer <key>'.", code="missing_api_key")
        d = hashlib.sha256(key.encode()).digest()
        owner = None
        for x, name in self.digests:  # every digest compared: the time does not tell which matched
            if hmac.compare_digest(d, x) and owner is None:
                owner = name
        if owner is None and self.keys.by_digest:  # a key made at run time (app/keys.py)
            try:
                owner = self.keys.lookup(d, time.time())
            except KeysError as e:
                raise ProxyError(401, str(e), code=e.code) from None
        if owner is None and self.keys.unread:
            # the runtime keys were never read (their backend did not answer since the
            # start): this may be one, so not "incorrect"; a client tries again
            raise ProxyError(
                503,
                "The API keys could not be read yet; try again.",
                code="keys_unavailable",
                headers={"retry-after": "1"},
            )
        if owner is None:
            raise ProxyError(401, "Incorrect API key provided.", code="invalid_api_key")
        return owner

    def may_use(self, owner: str, model: str) -> bool:
        """Whether client key ``owner`` may use ``model`` (its ``limits.models`` globs, as the
        limiter checks a request)."""
        pol = self.limiter.policy(owner)
        return pol is None or pol.models is None or any(fnmatch.fnmatchcase(model, g) for g in pol.models)

    def models_for(self, owner: str) -> list[Route]:
        """The configured models client key ``owner`` may use, in the config's order."""
        return [r for name, r in self.router.routes.items() if self.may_use(owner, name)]

    async def read_body(self, receive: Any, cl: str | None) -> bytes:
        """The request body, at most ``server.max_body_bytes`` (Starlette's Request.stream(),
        without the Request)."""
        limit = self.config.server.max_body_bytes
        if cl and cl.isdigit() and int(cl) > limit:
            raise ProxyError(
                413, f"request body of {cl} bytes exceeds the limit of {limit} bytes", code="request_too_large"
            )
        parts: list[bytes] = []
        size = 0
        deadline = asyncio.get_running_loop().time() + self.config.server.body_timeout_seconds
        while True:
            msg = await self._receive_by(receive, deadline)
            kind = msg["type"]
            if kind == "http.request":
                chunk = msg.get("body", b"")
                if chunk:
                    size += len(chunk)
                    if size > limit:
                        raise ProxyError(
                            413, f"request body exceeds the limit of {limit} bytes", code="request_too_large"
                        )
                    parts.append(chunk)
                if not msg.get("more_body", False):
                    break
            elif kind == "http.disconnect":
                raise ClientDisconnect()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def _receive_by(self, receive: Any, deadline: float) -> Any:
        """The next ASGI message of the body, or 408 when the deadline passes first."""
        try:
            async with asyncio.timeout_at(deadline):
                return await receive()
        except TimeoutError:
            secs = self.config.server.body_timeout_seconds
            raise ProxyError(
                408,
                f"the request body did not arrive within {secs:g}s (server.body_timeout_seconds)",
                code="request_timeout",
                headers={"connection": "close"},
            ) from None

    def prepare(
        self,
        raw: bytes,
        client: str,
        rid: str,
        headers: dict[str, str],
        started: float,
        *,
        body: dict[str, Any] | None = None,
        answered: dict[str, Any] | None = None,
        websocket: bool = False,
        incomplete_as_completed: bool | None = None,
        owner: str = OPEN_OWNER,
        signatures: dict[str, str] | None = None,
        json_array: bool = False,
    ) -> Prepared:
        """``app.prepare.prepare`` with what this app holds (router, secrets, counters,
        fallbacks and breakers, the drain): one request of any route or transport, for the
        client key named ``owner``."""
        server = self.config.server
        p = prepare(
            self.router,
            raw,
            client,
            rid,
            envelope_key=self.envelope_key_for(owner),
            incomplete_as_completed=(
                server.incomplete_as_completed if incomplete_as_completed is None else incomplete_as_completed
            ),
            keepalive=server.keepalive_seconds,
            started=started,
            client_headers=headers,
            secrets=self.secrets,
            counters=self.counters,
            body=body,
            answered=answered,
            websocket=websocket,
            resilience=self.resilience,
            drainer=self.drain,
            owner=owner,
            signatures=signatures,
            json_array=json_array,
        )
        if self.tracing is not None:
            p.trace = self.tracing.begin(p, headers, raw)
        if self.capture is not None:
            self.capture.begin(p, body if body is not None else _parsed(raw), answered)
        return p

    async def _kept_signatures(self, raw: bytes, owner: str, rid: str) -> tuple[dict[str, Any], dict[str, str]]:
        """A Chat request's body, and the thought signatures kept for the calls of its current
        turn that came back without one, when its model is routed to Gemini (app/signatures.py)."""
        body = check_body(raw, "chat")
        model = body.get("model")
        route = self.router.resolve(model) if isinstance(model, str) else None
        if route is None or "gemini_thought_signatures" not in route.quirks:
            return body, {}
        bare = bare_calls(body)
        return body, (await self.signatures.recall(owner, bare, rid) if bare else {})

    def proxy_handler(self, client: str, outer: bool) -> ASGIHandler:
        """The raw ASGI handler of one proxy route; ``outer``: called by the fast path, so it
        also does what FastAPI's ServerErrorMiddleware + ``on_unexpected`` would."""
        spec = SPECS[client]
        in_path = "{model}" in spec.route  # the model and the stream are the path's
        counters = self.counters

        async def proxy(scope: Any, receive: Any, send: Any) -> None:
            started = time.perf_counter()
            rid = new_request_id(scope)
            if not outer:
                scope.setdefault("state", {})["request_id"] = rid  # for on_unexpected
            response: ProxyResponse | None = None
            turn: Turn | None = None
            p: Prepared | None = None
            try:
                try:
                    h = client_headers(scope, spec)
                    owner = self.authorize(h)
                    raw = await self.read_body(receive, h.get("content-length"))
                    body = None
                    json_array = False
                    if in_path:  # the model and the stream flag are the URL's
                        model, stream = path_call(spec, scope["path"])
                        body = check_body(raw, client)
                        body["model"] = model
                        body["stream"] = stream
                        # a stream asked without the row's SSE switch (Gemini's alt=sse): one JSON array
                        json_array = stream and not _asks_sse(scope, spec)
                    elif spec.stored:
                        body = check_body(raw, client)
                        # stateless (store:false, no previous_response_id, no item_reference, as
                        # Codex): no store I/O
                        if (
                            body.get("store") is not False
                            or body.get("previous_response_id")
                            or (b"item_reference" in raw and stored.has_references(body))
                        ):
                            turn = await stored.begin(
                                self.store, self.router, body, owner, self.config.server.max_body_bytes
                            )
                    kept: dict[str, str] | None = None
                    if spec.recalls_signatures and self.signatures.store is not None and b"tool_calls" in raw:
                        body, kept = await self._kept_signatures(raw, owner, rid)
                    p = self.prepare(
                        raw,
                        client,
                        rid,
                        h,
                        started,
                        body=body,
                        answered=turn.answered if turn is not None else None,
                        owner=owner,
                        signatures=kept,
                        json_array=json_array,
                    )
                    if turn is not None and turn.resolved:
                        p.ctx.repaired("item_reference_resolved")
                    if p.stream and spec.stream_route:
                        p.route_name = spec.stream_route
                    ticket = await accounting.admit(self, owner, p, len(raw))
                except (ProxyError, RequestError) as e:
                    metrics.log_rejected(counters, scope["path"], e.status, e.code, rid)
                    if p is not None and p.trace is not None:  # refused after prepare (limits)
                        p.trace.refused(e.status, e.code)
                    await _error_answer(e, rid, client)(scope, receive, send)
                    return
                response = ProxyResponse(p)
                if turn is not None and self.store is not None:  # stored before its terminal's bytes leave
                    response.hold = partial(stored.finish, self.store, turn)
                try:
                    await response(scope, receive, send)
                finally:  # the key's limits settled, the usage recorded (a fallback's own p)
                    seen = response.p.ctx.signatures_seen
                    if spec.recalls_signatures and seen and "gemini_thought_signatures" in response.p.route.quirks:
                        await self.signatures.remember(owner, seen, rid)  # after the client's last byte
                    await accounting.close(self, owner, ticket, response.p, len(raw))
            except ClientDisconnect:
                # the client left while sending its body: nobody to answer, nothing went wrong
                counters.inc(
                    "switchboard_requests_total", route=scope["path"], client=client, provider="-", status="499"
                )
                log.info("request", request_id=rid, route=scope["path"], status=499, terminal="client_cancel")
            except Exception as e:
                if not outer:
                    raise
                log.exception("internal_error", request_id=rid, path=scope["path"], error=type(e).__name__)
                if response is None or not response.started:
                    await _internal_error(e, rid)(scope, receive, send)
                    return  # answered and logged with its traceback
                raise  # a started answer can only be cut: the server closes the connection

        return proxy


def create_app(config: Config, *, transport: httpx.AsyncBaseTransport | None = None, signals: bool = False) -> FastAPI:
    """``signals``: this app is the server process's (``switchboard serve``): SIGTERM drains it."""
    svc = Service(config, transport)
    svc.signals = signals
    logs.set_mask(svc.secrets)
    app = Switchboard(
        title="Switchboard",
        lifespan=svc.lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        telemetry=NO_FASTAPI_TELEMETRY,
    )
    app.state.router = svc.router
    app.state.service = svc
    app.state.config = config
    app.state.metrics = app.metrics = svc.counters
    app.guard = Guard(
        origins=config.server.allowed_origins,
        hosts=config.server.allowed_hosts,
        open_proxy=not svc.digests,
        server_host=config.server.host,
    )
    fast: dict[str, ASGIHandler] = {}
    for path, client in _PROXY_ROUTES.items():
        fast[path] = svc.proxy_handler(client, outer=True)
        app.router.add_route(path, _RawEndpoint(svc.proxy_handler(client, outer=False)), methods=["POST"])  # type: ignore[arg-type]
    app.fast_routes = fast
    app.model_routes = tuple(
        (spec, svc.proxy_handler(spec.name, outer=True)) for spec in SPECS.values() if "{model}" in spec.route
    )
    app.router.add_route(compact.PATH, _RawEndpoint(compact.compact_handler(svc)), methods=["POST"])  # type: ignore[arg-type]
    app.socket_routes = {"/v1/responses": partial(serve_socket, svc)}
    _protocol_routes(app, svc)
    _info_routes(app, svc)
    stored.routes(app, svc)
    usage_routes(app, svc)
    admin = AdminAuth(svc)
    admin_routes(app, svc, admin)
    app.state.admin = admin
    if config.auth.admin_keys:
        svc.sampler = Sampler(svc)
        console_routes(app, svc, admin, svc.sampler)
    _error_handlers(app, svc)
    return app


def _release_startup_memory() -> bool:
    """Give back to the system the memory start-up used and freed: imports, the config's
    validation and the app's construction leave ~2 MB of free pages inside the C heap, which
    the allocator keeps (glibc returns only the heap's top).  ``malloc_trim`` hands every
    free page back, once, before the first request.  False where the C library has none
    (musl)."""
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim(0)
    return True


def _info_routes(app: FastAPI, svc: Service) -> None:
    router = svc.router

    @app.get("/v1/responses")
    async def responses_ws_fallback(request: Request) -> Response:
        # a GET without the WebSocket upgrade (the upgrade itself is app.ws)
        return _error_json(
            426,
            "GET /v1/responses is the WebSocket transport: send the upgrade, or POST /v1/responses",
            "upgrade_required",
        )

    codex_blocks = {m.name: m.codex for m in svc.config.models}

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        # every model the client key may use: OpenAI's list, and Codex's catalogue when Codex
        # asks (``?client_version=``: a model_catalog_url, or the built-in provider signed in)
        rid = request.state.request_id = new_request_id(request.scope)
        owner = svc.authorize(request.headers)
        routes = svc.models_for(owner)
        body: dict[str, Any] = {"object": "list", "data": [r.info.openai() for r in routes]}
        version = request.query_params.get("client_version")
        if version is not None or request.headers.get("originator", "").startswith("codex"):
            named = [r for r in routes if not any(c in r.public_model for c in "*?[")]  # a glob names no model
            body["models"] = [
                codex_entry(r.info, codex_blocks.get(r.public_model), profile=r.provider.profile, priority=i)
                for i, r in enumerate(named, 1)
            ]
            log.info(
                "codex_catalogue", request_id=rid, key_name=owner, client_version=version, models=len(body["models"])
            )
        return _json(200, body, headers={"x-request-id": rid})

    @app.get("/v1/models/{model_id:path}")
    async def model(request: Request) -> Response:
        # the id read off the path, not declared (as in app/stored.py's routes)
        rid = request.state.request_id = new_request_id(request.scope)
        owner = svc.authorize(request.headers)
        model_id: str = request.path_params["model_id"]
        r = router.routes.get(model_id)
        if r is None or not svc.may_use(owner, model_id):
            raise ProxyError(404, f"The model '{model_id[:200]}' does not exist", code="model_not_found", param="model")
        return _json(200, r.info.openai(), headers={"x-request-id": rid})

    @app.get("/")
    async def index() -> Response:
        """Where to go next, for a person who opened the address in a browser or with curl."""
        return _json(200, _INDEX)

    @app.get("/healthz")
    @app.get("/health")
    async def healthz() -> Response:
        return _json(200, {"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        if svc.drain.draining:
            return _json(503, {"status": "draining", "open": len(svc.drain.open)})
        if not svc.ready:
            return _json(503, {"status": "starting"})
        body: dict[str, Any] = {"status": "ready", "models": len(router.routes)}
        breakers = svc.resilience.states()
        if breakers:  # an upstream down is not this instance unready: detail only
            body["breakers"] = breakers
        if svc.store is not None:
            # degraded, not down: stateless requests are served without the store
            body["store"] = "ok" if await svc.store.ping() else "degraded"
        if svc.limiter.degraded:  # the limits' Redis did not answer lately: requests go through unchecked
            body["limits"] = "degraded"
        return _json(200, body)

    @app.get("/metrics")
    async def metrics_route() -> Response:
        # with --workers N, every worker's (app/workers.py: prometheus_client's multiprocess
        # mode).  Written in a thread: tens of ms for a few thousand series, which the event
        # loop's requests would otherwise wait for (the GIL is passed every few ms)
        return Response(await asyncio.to_thread(svc.counters.render), media_type=metrics.CONTENT_TYPE)


def _protocol_routes(app: FastAPI, svc: Service) -> None:
    """Each protocol row's routes besides a one-path proxy route: the methods of a
    ``{model}`` route (its ``route`` and ``stream_route`` proxied, a ``{model}`` count route
    counted: one path, dispatched here), its token count route (``count``: app/tokens.py)
    and its own model list (``models``); every error in the row's shape."""
    for spec in SPECS.values():
        count = _count_handler(svc, spec) if spec.count is not None else None
        if "{model}" in spec.route:
            _model_path(app, svc, spec, count)
        if count is not None and spec.count is not None and "{model}" not in spec.count.route:
            path = spec.count.route
            app.router.add_route(path, _RawEndpoint(partial(count, model=None)), methods=["POST"])  # type: ignore[arg-type]
        if spec.models is not None:
            _model_list(app, svc, spec)


CountHandler = Callable[..., Awaitable[None]]


def _model_path(app: FastAPI, svc: Service, spec: ProtocolSpec, count: CountHandler | None) -> None:
    """``POST <head>{model}<tail>``: the row's proxy route and stream route, and its count
    route when it has ``{model}`` in it (Gemini's ``:generateContent``,
    ``:streamGenerateContent``, ``:countTokens``); a 404 for any other path under the head."""
    proxy = svc.proxy_handler(spec.name, outer=False)
    counted = spec.count.route if count is not None and spec.count is not None else ""

    async def post(scope: Any, receive: Any, send: Any) -> None:
        path = scope["path"]
        try:
            path_call(spec, path)
        except ProxyError as e:
            model = model_in(counted, path) if counted else None
            if model is None or count is None:
                rid = new_request_id(scope)
                metrics.log_rejected(svc.counters, path, e.status, e.code, rid)
                await _error_answer(e, rid, spec.name)(scope, receive, send)
                return
            await count(scope, receive, send, model=model)
            return
        await proxy(scope, receive, send)

    head = spec.route.partition("{model}")[0]
    app.router.add_route(head + "{name:path}", _RawEndpoint(post), methods=["POST"])  # type: ignore[arg-type]


def _count_handler(svc: Service, spec: ProtocolSpec) -> CountHandler:
    """The token count of a request of ``spec``'s clients: the upstream's own or estimated
    (app/tokens.py); ``model``: the path's, else None and the body's."""
    c = spec.count
    assert c is not None

    async def count(scope: Any, receive: Any, send: Any, *, model: str | None) -> None:
        path = scope["path"]
        rid = new_request_id(scope)
        scope.setdefault("state", {})["request_id"] = rid  # for on_unexpected
        try:
            svc.authorize(client_headers(scope, spec))
            raw = await svc.read_body(receive, scope_headers(scope).get("content-length"))
            body = orjson.loads(raw)
            counted = c.read(body)
        except (ProxyError, RequestError) as e:
            metrics.log_rejected(svc.counters, path, e.status, e.code, rid)
            await _error_answer(e, rid, spec.name)(scope, receive, send)
            return
        except orjson.JSONDecodeError:
            err = RequestError("the request body is not valid JSON", code="invalid_json")
            await _error_answer(err, rid, spec.name)(scope, receive, send)
            return
        if model is None:
            named = body.get("model")
            model = named if isinstance(named, str) else None
        route = svc.router.resolve(model) if model is not None else None
        try:
            n, source = await tokens.count(spec, route, counted, rid)
        except RequestError as e:  # (the request rows refused it: as the proxy route would)
            await _error_answer(e, rid, spec.name)(scope, receive, send)
            return
        headers = {"x-request-id": rid, "x-switchboard-token-count": source}
        await _json(200, {c.field: n}, headers=headers)(scope, receive, send)

    return count


def _model_list(app: FastAPI, svc: Service, spec: ProtocolSpec) -> None:
    """A protocol's own model list (its row's ``models``): every configured model, and one."""
    ml = spec.models
    assert ml is not None
    router = svc.router

    def entry(model_id: str) -> dict[str, Any]:
        return ml.entry(model_id, router.routes[model_id].info)

    @app.get(ml.route)
    async def listing(request: Request) -> Response:
        rid = request.state.request_id = new_request_id(request.scope)
        try:
            svc.authorize(client_headers(request.scope, spec))
        except ProxyError as e:
            return _error_answer(e, rid, spec.name)
        return _json(200, {ml.field: [entry(m) for m in router.routes]}, headers={"x-request-id": rid})

    @app.get(ml.route + "/{model_id:path}")
    async def one(request: Request) -> Response:
        rid = request.state.request_id = new_request_id(request.scope)
        model_id: str = request.path_params["model_id"]
        try:
            svc.authorize(client_headers(request.scope, spec))
            if model_id not in router.routes:
                raise ProxyError(404, ml.missing.format(model=model_id[:200]), code="model_not_found")
        except ProxyError as e:
            return _error_answer(e, rid, spec.name)
        return _json(200, entry(model_id), headers={"x-request-id": rid})


def _error_handlers(app: FastAPI, svc: Service) -> None:
    @app.exception_handler(ProxyError)
    @app.exception_handler(RequestError)
    async def on_error(request: Request, e: Exception) -> Response:
        assert isinstance(e, ProxyError | RequestError)
        rid = getattr(request.state, "request_id", None) or new_request_id()
        metrics.log_rejected(svc.counters, request.url.path, e.status, e.code, rid)
        return _error_answer(e, rid)

    @app.exception_handler(RequestValidationError)
    async def on_validation(request: Request, e: Exception) -> Response:
        return _error_json(400, str(e), None)

    @app.exception_handler(404)
    async def on_404(request: Request, e: Exception) -> Response:
        path = request.url.path
        return _route_error(path, 404, f"Unknown route {request.method} {path[:200]}", "not_found")

    @app.exception_handler(405)
    async def on_405(request: Request, e: Exception) -> Response:
        path = request.url.path
        return _route_error(path, 405, f"Method {request.method} not allowed on {path[:200]}", "method_not_allowed")

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, e: Exception) -> Response:
        rid = getattr(request.state, "request_id", None) or new_request_id()
        log.exception("internal_error", request_id=rid, path=request.url.path, error=type(e).__name__)
        return _internal_error(e, rid)


def _route_error(path: str, status: int, message: str, code: str) -> Response:
    """An unknown route or method, in the shape of the protocol whose prefix the path is under:
    Anthropic's under ``/v1/messages`` (Claude Code reads a 404 on ``/v1/messages/evaluate_
    safeguards`` as "not enabled"), Google's under ``/v1beta/``, OpenAI's everywhere else."""
    for spec in SPECS.values():
        prefix = spec.error_prefix
        if prefix and (path == prefix or path.startswith(prefix + "/")):
            rid = new_request_id()
            body = spec.error(status, {"message": message}, rid)
            return _error_response(status, body, {"x-request-id": rid})
    return _error_json(status, message, code)


def _error_json(status: int, message: str, code: str | None) -> Response:
    return _json(status, {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}})


def _error_answer(e: ProxyError | RequestError, rid: str, client: str = "chat") -> Response:
    """The error answer of a refused request in its client's protocol (its row's ``error``),
    with its request id."""
    err = e.to_dict() if isinstance(e, RequestError) else orjson.loads(e.body())["error"]
    headers = {"x-request-id": rid, **(e.headers if isinstance(e, ProxyError) else {})}
    return _error_response(e.status, error_body(client, e.status, err, rid), headers)


def _error_response(status: int, body: bytes, headers: dict[str, str]) -> Response:
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def _internal_error(e: Exception, rid: str) -> Response:
    return _json(
        500,
        {
            "error": {
                "message": f"internal error ({type(e).__name__}); request id {rid}",
                "type": "server_error",
                "param": None,
                "code": "internal_error",
                "request_id": rid,
            }
        },
        headers={"x-request-id": rid},
    )
