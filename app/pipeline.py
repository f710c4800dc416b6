"""The pump: one client request → one upstream exchange → the client's answer.

Theory of operation
-------------------
All protocol work happens in the sans-IO ``transformers.bridge.Bridge``; this module does
the I/O around it.  ``prepare()`` (pure, before any I/O) checks the client body, picks the
route and opens the Bridge, which translates the body for the upstream.
``ProxyResponse`` is the ASGI response that pumps:

1. **Exchange.**  Send the upstream request while watching the client: a disconnect before
   the first upstream byte cancels it, a slow upstream hits the first-byte timeout, and any
   upstream failure is answered with an HTTP status and an OpenAI error (nothing was sent
   yet): an error status, a 200 whose body is an error object, a body that cannot be read.
   A ``400 invalid_encrypted_content`` is retried once without the replayed reasoning blobs
   (quirk ``encrypted_content_retry``).
2. **Answer.**  Non-streaming: ``bridge.complete(body)``.  Streaming: upstream chunks go to
   ``bridge.receive_data`` and its bytes to the client, coalesced only when upstream
   chunks are already buffered (``_FLUSH_*``), a large read fed a slice at a time so its
   first events go out while the rest is transformed (``_SLICE_BYTES``); heartbeats
   during long upstream silences; transport faults become ``bridge.fail(...)``; after the
   terminal event the answer is closed at once and the rest of the upstream body drained
   (bounded) so its connection goes back to the pool.  From the first byte on, every
   failure is the protocol's own error event, never a cut stream; a client disconnect
   cancels the task, which closes the upstream response.
3. **Account.**  One log line and the counters, saying what the client received.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import quote

import httpx
import orjson
from starlette.responses import Response

from app.drain import SHUTDOWN_MESSAGE
from app.failover import STREAM_FAULTS, Failover
from app.logs import log
from app.metrics import Metrics
from providers.errors import error_in_ok_body, failed_answer_error, upstream_error
from providers.upstream import Provider, Route, Router, target_for
from transformers.bridge import AnswerError, Bridge, open_bridge
from transformers.context import Ctx
from transformers.encrypted_retry import is_invalid_encrypted_content, strip_encrypted_reasoning
from transformers.errors import ProxyError
from transformers.ids import random_hex
from transformers.masking import NO_SECRETS, SecretMask
from transformers.request_check import check_body

__all__ = ["Prepared", "ProxyResponse", "check_body", "new_request_id", "prepare"]


@dataclass(slots=True)
class Prepared:
    request_id: str
    client: str  # chat | responses
    upstream: str  # chat | responses
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


def retarget(p: Prepared, route: Route) -> Prepared:
    """The request of ``p`` prepared for ``route``, another target of its model: the client's
    body translated again for that target's protocol and quirks (pure, as ``prepare``)."""
    if p.again is None:
        raise AssertionError("a one-target model has no other target")
    q: Prepared = p.again(route)
    q.route_name, q.reshape = p.route_name, p.reshape  # what the route's handler set (app.compact)
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
) -> Prepared:
    """``body``: the already checked body (the app read it before its store lookups; ``raw``
    is then unused); ``answered``: response fields the app honoured itself (the Bridge echoes
    them: ``store``, ``previous_response_id`` of a stored conversation)."""
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
    ctx = Ctx(
        quirks=route.quirks,
        upstream_model=route.upstream_model,
        public_model=route.public_model,
        max_output_tokens=route.info.max_output_tokens,
        envelope_key=envelope_key,
        compaction_key=envelope_key or PROCESS_SECRET,
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
    return Prepared(
        request_id=request_id,
        client=client,
        upstream=upstream,
        route=route,
        ctx=ctx,
        bridge=bridge,
        stream=bool(out["stream"]),
        upstream_body=orjson.dumps(out),
        started=started,
        keepalive=keepalive,
        route_name="/v1/chat/completions" if client == "chat" else "/v1/responses",
        headers=headers,
        forward_headers={"user-agent": ua} if ua else {},
        secrets=secrets,
        metrics=counters if counters is not None else Metrics(),
        transport="websocket" if websocket else "http",
        again=None if pristine is None else partial(_again, call, pristine),
        resilience=resilience,
        drainer=drainer,
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


class ProxyResponse(Response):
    """ASGI response that pumps the upstream exchange through the Bridge (module docstring)."""

    def __init__(self, p: Prepared) -> None:  # no super().__init__: nothing is rendered up front
        self.p = p
        self.task: asyncio.Task[Any] | None = None
        self.background = None
        self.started = False  # http.response.start sent (the app's catch-all can no longer answer)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        p = self.p
        prov = p.route.provider
        status = 200
        ttfb = None
        terminal = ""
        me = asyncio.current_task()
        watch: asyncio.Future[Any] | None = None
        cancelled_by_client = False

        def on_disconnect(t: asyncio.Future[Any]) -> None:
            nonlocal cancelled_by_client
            if not t.cancelled() and me is not None:
                cancelled_by_client = True
                me.cancel()

        def watch_client() -> None:
            nonlocal watch
            watch = asyncio.ensure_future(_wait_disconnect(receive))
            watch.add_done_callback(on_disconnect)

        watching = asyncio.get_running_loop().call_later(_WATCH_AFTER, watch_client)
        resp: httpx.Response | None = None
        drain: Any = None
        if p.drainer is not None:
            p.drainer.register(self)
        try:
            resp, whole = await self._head(p)
            p = self.p
            prov = p.route.provider
            ttfb = time.perf_counter() - p.started
            head = [(b"x-request-id", p.request_id.encode()), *[(k.encode(), v.encode()) for k, v in p.headers.items()]]
            if not p.stream:
                out = _complete(p, whole)  # type: ignore[arg-type]
                if p.reshape is not None:
                    status, out = p.reshape(out)
                    if status != 200:
                        terminal = "error"
                self.started = True
                await send(
                    {
                        "type": "http.response.start",
                        "status": status,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", b"%d" % len(out)),
                            *head,
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": out})
                return
            self.started = True
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream; charset=utf-8"),
                        (b"cache-control", b"no-cache"),
                        (b"x-accel-buffering", b"no"),
                        *head,
                    ],
                }
            )
            if whole is not None:  # an upstream that ignored `stream`
                await send({"type": "http.response.body", "body": p.bridge.replay(whole), "more_body": False})
                return
            drain = await _stream(p, prov, resp, send)
        except ProxyError as e:
            p = self.p
            status = e.status
            terminal = "error"
            p.metrics.inc("switchboard_upstream_errors_total", provider=p.route.provider.name, code=str(e.code))
            self.started = True
            await _send_error(send, e, p.request_id)
        except asyncio.CancelledError:
            p = self.p
            if p.stop and not cancelled_by_client and not self.started and me is not None:
                me.uncancel()  # the drain's deadline: answered, not cut
                err = ProxyError(503, SHUTDOWN_MESSAGE, type="server_error", code=p.stop, headers={"retry-after": "1"})
                status, terminal = 503, "error"
                self.started = True
                await _send_error(send, err, p.request_id)
            elif not cancelled_by_client:
                raise
            else:
                terminal = "client_cancel"
                status = 499
        finally:
            p = self.p
            if p.drainer is not None:
                p.drainer.unregister(self)
            watching.cancel()
            if watch is not None:
                watch.remove_done_callback(on_disconnect)
                watch.cancel()
            _finish_log(p, status, ttfb, terminal or p.bridge.terminal or "failed")
            if p.resilience is not None and ttfb is not None and p.bridge.error_code in STREAM_FAULTS:
                p.resilience.report(p.route, "failure")  # the upstream broke after its head
            try:
                if drain is not None:  # the client has its whole answer; not part of its duration
                    await _drain(drain)
            finally:
                if resp is not None:
                    await resp.aclose()
                if cancelled_by_client:
                    # the task's cancellation was ours: swallow it so the server closes cleanly
                    t = asyncio.current_task()
                    if t is not None:
                        t.uncancel()

    def stop(self, code: str) -> None:
        """End this answer now, the protocol's way, with ``code`` (the drain's deadline)."""
        if self.p.stop or self.p.bridge.terminal:
            return  # already ending, or its answer is complete
        self.p.stop = code
        if self.task is not None:
            self.task.cancel()

    async def _head(self, p: Prepared) -> tuple[httpx.Response, dict[str, Any] | None]:
        """The upstream answer head (and a whole JSON answer), after the fallbacks and
        retries of app.failover when the app has them; ``self.p`` is then the target's."""
        self.task = asyncio.current_task()
        if p.resilience is None:
            return await _attempt(p)
        fo = Failover(p, p.resilience)
        try:
            return await fo.run(_attempt, retarget)
        finally:
            self.p = fo.p


async def _attempt(p: Prepared) -> tuple[httpx.Response, dict[str, Any] | None]:
    """One upstream attempt: the response with a success status, and its whole JSON answer
    when one is due before the first byte (a non-stream request, or JSON to a stream one)."""
    prov = p.route.provider
    resp = await _exchange(p, prov)
    if p.stream and not _is_json(resp.headers.get("content-type")):
        return resp, None
    try:
        return resp, await _whole_answer(p, prov, resp)
    finally:
        await resp.aclose()


async def _exchange(p: Prepared, prov: Provider) -> httpx.Response:
    """Send the upstream request; its response once the status is a success (an error
    status is raised as the client's ProxyError, after the one encrypted-content retry)."""
    target = target_for(prov, p.upstream, p.stream, p.forward_headers)
    payload = p.upstream_body
    for attempt in (0, 1):
        resp = await _open(prov, target.request(payload, p.forward_headers))
        if resp.status_code < 400:
            return resp
        body = await _read_capped(resp, _ERROR_BODY_MAX)
        await resp.aclose()
        retry = None
        if (
            attempt == 0
            and p.upstream == "responses"
            and p.ctx.on("encrypted_content_retry")
            and is_invalid_encrypted_content(resp.status_code, body)
        ):
            retry = strip_encrypted_reasoning(orjson.loads(payload))
        if retry is None:
            raise upstream_error(resp.status_code, body, resp.headers, prov.name, p.secrets)
        p.ctx.repaired("encrypted_content_retry")
        payload = orjson.dumps(retry)
    raise AssertionError("unreachable")  # pragma: no cover


async def _whole_answer(p: Prepared, prov: Provider, resp: httpx.Response) -> dict[str, Any]:
    """A whole JSON answer (also to a stream request: an error object, or an upstream that
    ignored ``stream``) as an object; an error object or an unreadable body raised."""
    try:
        body = await _read_capped(resp, _BODY_MAX)
    except httpx.HTTPError as e:
        raise ProxyError(
            502,
            f"upstream {prov.name} failed while sending its answer: {type(e).__name__}",
            type="upstream_error",
            code="upstream_stream_error",
        ) from None
    obj = _json_object(body)  # parsed once: the error check below reads the same object
    err = error_in_ok_body(obj, body, resp.headers, prov.name, p.secrets)
    if err is not None:
        raise err
    return obj


def _complete(p: Prepared, obj: dict[str, Any]) -> bytes:
    """Non-streaming: the Bridge's answer object, or its failure as the HTTP error."""
    try:
        return p.bridge.complete(obj)[1]
    except AnswerError as e:
        if e.__cause__ is not None:
            log.warning(
                "upstream_bad_response", request_id=p.request_id, error=type(e.__cause__).__name__, exc_info=e.__cause__
            )
        if e.bad:
            raise ProxyError(
                502,
                str(e.error.get("message") or "the upstream answered with a body the proxy could not process"),
                type="upstream_error",
                code="upstream_bad_response",
            ) from None
        raise failed_answer_error(e.error, p.secrets) from None


async def _stream(p: Prepared, prov: Provider, resp: httpx.Response, send: Any) -> Any:
    """Pump the upstream stream through the Bridge to the client; returns the upstream body
    iterator to drain when the terminal event came before the upstream's end."""
    bridge = p.bridge
    # The response's own stream, iterated directly: what ``resp.aiter_raw()`` adds around it
    # per read (one more async generator to resume, a byte count, a chunker that hands an
    # unchunked read on as it is) serves nothing here; its one other act, closing the
    # response at the body's end, is done below.  One iterator: the rest of the body is
    # drained after the break.
    stream: httpx.AsyncByteStream = resp.stream  # type: ignore[assignment]
    raw = stream.__aiter__()
    rest = None
    pending: list[bytes] = []  # client bytes held back (coalescing: see _FLUSH_BYTES)
    size = 0
    since = 0.0  # time of the last timed send
    clock = time.perf_counter
    waiting: list[Any] = [False, clock()]  # [blocked on the upstream, since when]
    ticker = _Heartbeats(bridge, send, p.keepalive, waiting) if p.keepalive > 0 else None
    responses = p.client == "responses"
    left = b""  # the rest of a large read, for the Bridge a slice at a time (_SLICE_BYTES)
    try:
        try:
            while True:
                if left:  # the rest of a large read: its next slice
                    chunk, left = _slice(left)
                else:
                    # Run the next read eagerly: it completes at once while upstream chunks are
                    # already buffered; only then is the client's output held back.
                    step = raw.__anext__()
                    try:
                        blocked = step.send(None)  # type: ignore[attr-defined]
                    except StopIteration as ready:
                        chunk = ready.value
                    except StopAsyncIteration:
                        break
                    else:  # the read waits for the network: send what we have, then wait
                        if pending:
                            body = b"".join(pending)
                            pending.clear()
                            size = 0
                            await send({"type": "http.response.body", "body": body, "more_body": True})
                        waiting[0] = True
                        try:
                            chunk = await _Resume(step, blocked)
                        except StopAsyncIteration:
                            break
                        finally:
                            waiting[0] = False
                            waiting[1] = clock()
                    if len(chunk) > _SLICE_BYTES:
                        chunk, left = _slice(chunk)
                out = bridge.receive_data(chunk)
                if bridge.finished or (bridge.terminal and responses):
                    if out:
                        pending.append(out)
                    if left:  # the read's rest in one piece, as if it had not been sliced
                        pending.append(bridge.receive_data(left))
                    rest = raw
                    break  # terminal event: answer and close right away (PAINS 2)
                if out:
                    if not pending:
                        now = clock()
                        if now - since >= _FLUSH_SECONDS:  # nothing sent lately: send now
                            since = now
                            await send({"type": "http.response.body", "body": out, "more_body": True})
                            continue
                    pending.append(out)
                    size += len(out)
                    if size >= _FLUSH_BYTES or clock() - since >= _FLUSH_SECONDS:
                        body = b"".join(pending)
                        pending.clear()
                        size = 0
                        since = clock()
                        await send({"type": "http.response.body", "body": body, "more_body": True})
            if rest is None:  # the body ended: its connection back in the pool before the last bytes go out
                await resp.aclose()
            out = bridge.end()
        except httpx.ReadTimeout:
            out = bridge.fail("upstream_idle_timeout", f"upstream {prov.name} was silent for {prov.timeout.read:g}s")
            out += bridge.end()
        except asyncio.CancelledError:
            if not p.stop:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # the drain's deadline: the protocol's failure, not a cut stream
            rest = None
            out = bridge.fail(p.stop, SHUTDOWN_MESSAGE) + bridge.end()
        except httpx.HTTPError as e:
            out = bridge.fail("upstream_stream_error", f"upstream {prov.name} stream failed: {type(e).__name__}")
            out += bridge.end()
    finally:
        if ticker is not None:
            ticker.cancel()
    pending.append(out)
    await send({"type": "http.response.body", "body": b"".join(pending), "more_body": False})
    return rest


def _is_json(ctype: str | None) -> bool:
    media = (ctype or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ProxyError(
            502,
            "the upstream answered with a body that is not JSON",
            type="upstream_error",
            code="upstream_bad_response",
        ) from None
    if not isinstance(obj, dict):
        raise ProxyError(
            502,
            "the upstream answered with a body that is not a JSON object",
            type="upstream_error",
            code="upstream_bad_response",
        )
    return obj


class _Heartbeats:
    """A stream's heartbeat task (``_heartbeats``), started once the stream has lasted one
    interval: the task's first act is to wait for the end of the first silent interval,
    which cannot come sooner, so its beats are the same; a shorter stream (most are) costs a
    timer instead of a task started, stepped and cancelled."""

    __slots__ = ("timer", "task")

    def __init__(self, bridge: Bridge, send: Any, interval: float, waiting: list[Any]) -> None:
        self.task: asyncio.Future[None] | None = None
        self.timer = asyncio.get_running_loop().call_later(interval, self._start, bridge, send, interval, waiting)

    def _start(self, bridge: Bridge, send: Any, interval: float, waiting: list[Any]) -> None:
        self.task = asyncio.ensure_future(_heartbeats(bridge, send, interval, waiting))

    def cancel(self) -> None:
        self.timer.cancel()
        if self.task is not None:
            self.task.cancel()


async def _heartbeats(bridge: Bridge, send: Any, interval: float, waiting: list[Any]) -> None:
    """While the upstream is silent for ``interval`` seconds, send the client a heartbeat
    (PAINS 21): long reasoning gaps must not trip the client's idle timeout.  It wakes when
    the silence reaches ``interval`` (a deadline from the last upstream bytes or heartbeat,
    not a fixed tick: the client never waits longer than one interval), and sends only
    while the stream loop is blocked on an upstream read, so it never interleaves with its
    sends."""
    clock = time.perf_counter
    while True:
        due = waiting[1] + interval - clock()
        if due > 0:
            await asyncio.sleep(due)
            continue
        if not waiting[0]:  # the loop is busy with bytes that just came: look again soon
            await asyncio.sleep(min(interval, 0.01))
            continue
        beat = bridge.heartbeat()
        waiting[1] = clock()
        if beat:
            await send({"type": "http.response.body", "body": beat, "more_body": True})


async def _open(prov: Any, req: httpx.Request) -> httpx.Response:
    """Send and wait for the response headers, mapping failures to OpenAI errors.

    Straight to the transport: what ``client.send(req, stream=True)`` adds on top (auth and
    redirect loops, event hooks, elapsed timer, cookie jar) is unused here, apart from the
    cookie jar: an upstream's Set-Cookie is not stored and replayed (the shared client's jar
    would have sent one caller's upstream cookies with everybody's requests)."""
    try:
        async with asyncio.timeout(prov.first_byte):
            resp = await prov.transport.handle_async_request(req)
            resp.request = req
            return resp
    except TimeoutError:
        raise ProxyError(
            504,
            f"upstream {prov.name} sent no response within {prov.first_byte:g}s",
            type="upstream_error",
            code="upstream_timeout",
        ) from None
    except httpx.TimeoutException:
        raise ProxyError(
            504, f"upstream {prov.name} timed out", type="upstream_error", code="upstream_timeout"
        ) from None
    except httpx.HTTPError as e:
        raise ProxyError(
            502,
            f"upstream {prov.name} is unreachable: {type(e).__name__}",
            type="upstream_error",
            code="upstream_unreachable",
        ) from None


# Coalescing.  Each upstream chunk used to cost one ASGI send and one socket write; when
# several upstream chunks are already buffered (a fast upstream, or the proxy behind), their
# output now goes out together: held back while the next read completes at once, sent as
# soon as a read would wait, or when _FLUSH_BYTES are pending, or _FLUSH_SECONDS after the
# last send (so at most one send per _FLUSH_SECONDS during a burst: an event waits that long
# at most).  An output with nothing sent for _FLUSH_SECONDS goes out at once: the first
# event, and every event at a token rate (chunks arriving one by one), go out as before.
_FLUSH_BYTES = 16 * 1024
_FLUSH_SECONDS = 0.0001
# Slicing.  A read of many events (a burst the upstream sent at once: up to 64 KiB) goes
# through the Bridge a slice of about _SLICE_BYTES at a time, cut after an event's blank
# line, each slice's output going out by the coalescing rule above: the client reads (and
# parses) the first events while the proxy transforms the rest, instead of waiting for the
# whole read.  The Bridge gives the same bytes at any cut (tests/unit/test_bridge_blocks.py;
# through the app: tests/integration/test_stream_slices.py).
_SLICE_BYTES = 16 * 1024


def _slice(chunk: bytes) -> tuple[bytes, bytes]:
    """``chunk`` cut after the first blank line past _SLICE_BYTES: (slice, rest); the whole
    chunk and b"" when it is no longer than that or has no such line before its end."""
    if len(chunk) <= _SLICE_BYTES:
        return chunk, b""
    j = chunk.find(b"\n\n", _SLICE_BYTES - 2)
    if j < 0 or j + 2 >= len(chunk):
        return chunk, b""
    return chunk[: j + 2], chunk[j + 2 :]


class _Resume:
    """Await the rest of an awaitable whose first step already ran and yielded ``first``:
    what ``await`` does (``yield from``), by hand, for a step started eagerly."""

    __slots__ = ("step", "first")

    def __init__(self, step: Any, first: Any) -> None:
        self.step = step
        self.first = first

    def __await__(self) -> Any:
        step = self.step
        value = self.first
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                step.close()
                raise
            except BaseException as e:  # cancellation, timeouts: delivered where the read waits
                try:
                    value = step.throw(e)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    value = step.send(sent)
                except StopIteration as done:
                    return done.value


_DRAIN_BYTES = 64 * 1024
_DRAIN_SECONDS = 1.0


_ERROR_BODY_MAX = 64 * 1024  # of an upstream error answer: enough for any message
_BODY_MAX = 64 * 1024 * 1024  # of a non-streamed upstream answer


async def _read_capped(resp: httpx.Response, limit: int) -> bytes:
    """The upstream body, at most ``limit`` bytes: an error answer is cut there (its start
    holds the message), a longer answer is refused (memory stays bounded per request)."""
    parts: list[bytes] = []
    size = 0
    # an uncompressed body off the response's own stream (two async generators less, as in
    # _stream); a compressed one through httpx's decoder
    chunks = resp.aiter_bytes() if "content-encoding" in resp.headers else resp.stream
    async for chunk in chunks:  # type: ignore[union-attr]
        size += len(chunk)
        if size > limit:
            if limit == _ERROR_BODY_MAX:
                parts.append(chunk[: limit - (size - len(chunk))])
                break
            raise ProxyError(
                502,
                f"the upstream's answer is larger than {limit} bytes",
                type="upstream_error",
                code="upstream_bad_response",
            )
        parts.append(chunk)
    return b"".join(parts)


async def _drain(raw: Any) -> None:
    """Read what is left of an upstream body after the terminal event (the client already has
    its whole answer): a body read to its end lets httpcore put the connection back in the pool
    instead of closing it.  Bounded in bytes and time; past either bound the connection is
    simply closed, as before."""
    size = 0
    try:
        # what is already buffered (the common case: the body's last chunk, or its [DONE]
        # and last chunk) is read eagerly, with no timer; a read that waits gets the timer
        while True:
            step = raw.__anext__()
            try:
                blocked = step.send(None)
            except StopIteration as ready:
                size += len(ready.value)
                if size > _DRAIN_BYTES:
                    return
                continue
            except StopAsyncIteration:
                return
            break
        async with asyncio.timeout(_DRAIN_SECONDS):
            try:
                chunk = await _Resume(step, blocked)
            except StopAsyncIteration:
                return
            size += len(chunk)
            if size > _DRAIN_BYTES:
                return
            async for chunk in raw:
                size += len(chunk)
                if size > _DRAIN_BYTES:
                    break
    except (TimeoutError, httpx.HTTPError):
        pass


# The client is watched from _WATCH_AFTER on: an answer done sooner (most non-streamed ones,
# short streams) costs a timer, not a task started and cancelled.  A disconnect before then
# is found when the watch starts (uvicorn has marked the request disconnected meanwhile), so
# the upstream exchange is cancelled at most _WATCH_AFTER late.
_WATCH_AFTER = 0.02


async def _wait_disconnect(receive: Any) -> None:
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return


async def _send_error(send: Any, e: ProxyError, request_id: str) -> None:
    body = e.body(request_id)
    hdrs = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    hdrs += [(b"x-request-id", request_id.encode()), *[(k.encode(), v.encode()) for k, v in e.headers.items()]]
    await send({"type": "http.response.start", "status": e.status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body})


def _finish_log(p: Prepared, status: int, ttfb: float | None, terminal: str) -> None:
    dur = time.perf_counter() - p.started
    prov = p.route.provider.name
    p.metrics.answered(p.route_name, p.client, prov, status, dur, ttfb, (terminal or "none") if p.stream else None)
    repairs = p.ctx.repairs
    if repairs:
        for rule in repairs:
            p.metrics.inc("switchboard_repairs_total", rule=rule, provider=prov)
        log.debug("repairs", request_id=p.request_id, provider=prov, rules=sorted(set(repairs)))
    if p.ctx.tools.dropped:
        log.warning("hosted_tools_dropped", request_id=p.request_id, provider=prov, tools=p.ctx.tools.dropped)
    if p.ctx.dropped_items:
        # DESIGN rule 2: a turn that lost an item is never logged ``completed``
        log.warning("input_items_dropped", request_id=p.request_id, provider=prov, items=p.ctx.dropped_items)
        if terminal == "completed":
            terminal = "completed_items_dropped"
    bridge = p.bridge
    if bridge.crashed is not None:
        log.warning(
            "stream_guard",
            request_id=p.request_id,
            provider=prov,
            code=bridge.error_code,
            error=type(bridge.crashed).__name__,
            exc_info=bridge.crashed,
        )
    if terminal == "failed" and bridge.error_code:
        p.metrics.inc("switchboard_stream_failures_total", provider=prov, code=bridge.error_code)
    log.info(
        "request",
        request_id=p.request_id,
        route=p.route_name,
        client_protocol=p.client,
        provider=prov,
        upstream_protocol=p.upstream,
        model=p.route.public_model,
        upstream_model=p.route.upstream_model,
        stream=p.stream,
        transport=p.transport,
        attempts=p.attempts,
        status=status,
        duration_ms=round(dur * 1000, 2),
        ttfb_ms=round(ttfb * 1000, 2) if ttfb is not None else None,
        terminal=terminal,
    )
