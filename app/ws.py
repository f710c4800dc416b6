"""The Responses WebSocket transport: ``GET /v1/responses`` upgraded (docs/clients.md).

Theory of operation
-------------------
Codex's built-in OpenAI provider (and a custom provider with ``supports_websockets``)
opens one socket per conversation and sends one ``response.create`` text frame per
request; the answer is the Responses event stream, one event per text frame.  Everything
between the frames is HTTP's path unchanged: a frame becomes a request body (rebuilt to
the full, stateless input by ``transformers.ws_session.WSSession`` when it continues the
previous response), goes through ``prepare()`` and is pumped by the same
``ProxyResponse`` as an HTTP request, behind two small adapters:

* its ``send`` takes the HTTP messages ``ProxyResponse`` writes: a 200 body is the
  Bridge's WebSocket framing (one event per line, ``WSFraming``) and each line goes out as
  one text frame; an error status (answered before the first byte) becomes the Responses
  WebSocket error frame ``{"type":"error","status":N,"error":{…},"headers":{…}}``, which
  Codex maps exactly like the HTTP answer;
* its ``receive`` reports ``http.disconnect`` when the socket goes away, so a client that
  leaves mid-turn cancels the upstream exactly as on HTTP.

One reader task per socket moves the client's messages into a queue (an ``asyncio.Queue``
read is safe to cancel; a frame that arrives during a turn, such as
``response.processed``, waits there).  Bounds: sockets per process
(``server.websocket.max_connections``; the next upgrade is answered 426, and Codex falls
back to HTTP for the session), transcript bytes per socket, an idle timeout (the socket is
closed; the client reconnects), a lifetime (the next request is answered
``websocket_connection_limit_reached``, which Codex retries on a new socket), the frame
size (``server.max_body_bytes``) and pings (uvicorn's, ``ping_interval_seconds``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import orjson

from app import accounting, stored
from app.logs import log
from app.metrics import log_rejected
from app.pipeline import ProxyResponse
from app.prepare import new_request_id, scope_headers
from transformers.errors import ProxyError, RequestError
from transformers.request_check import check_parsed
from transformers.ws_session import Ignore, Reply, Turn, Warmup, WSSession, error_frame

# the app's Service (app/main.py), as this module uses it: its router, store, counters, drain
Service = Any

_LIMIT_MESSAGE = (
    "Responses websocket connection limit reached ({minutes:g} minutes). Create a new websocket connection to continue."
)


async def serve_socket(svc: Service, scope: Any, receive: Any, send: Any) -> None:
    """One WebSocket connection on ``/v1/responses``, from the upgrade to the close."""
    cfg = svc.config.server.websocket
    cid = new_request_id()
    msg = await receive()
    if msg["type"] != "websocket.connect":
        return
    if not cfg.enabled:
        await _deny(
            send, 426, "WebSocket transport is not enabled; use HTTP POST /v1/responses", "upgrade_required", cid
        )
        svc.counters.inc("switchboard_websocket_connections_total", event="refused_disabled")
        return
    h = scope_headers(scope)
    try:
        owner = svc.authorize(h)
    except ProxyError as e:
        await _deny(send, e.status, e.message, e.code, cid)
        svc.counters.inc("switchboard_websocket_connections_total", event="refused_auth")
        return
    if svc.sockets >= cfg.max_connections:
        # 426, not 503: Codex falls back to HTTP for the session, and the turn works
        await _deny(
            send,
            426,
            f"this instance serves at most {cfg.max_connections} WebSocket connections; use HTTP POST /v1/responses",
            "websocket_capacity",
            cid,
        )
        svc.counters.inc("switchboard_websocket_connections_total", event="refused_capacity")
        return
    await send({"type": "websocket.accept", "headers": [(b"x-request-id", cid.encode())]})
    svc.sockets += 1
    svc.counters.inc("switchboard_websocket_connections_total", event="accepted")
    conn = _Connection(svc, cid, h, owner, receive, send)
    svc.drain.register(conn)
    try:
        await conn.run()
    finally:
        svc.drain.unregister(conn)
        svc.sockets -= 1
        conn.close_reader()
        svc.counters.inc("switchboard_websocket_connections_total", event="closed_" + conn.closed_by)
        log.info(
            "websocket",
            connection_id=cid,
            turns=conn.turns,
            duration_ms=round((time.monotonic() - conn.opened) * 1000, 2),
            closed_by=conn.closed_by,
        )


async def _deny(send: Any, status: int, message: str, code: str | None, rid: str) -> None:
    """Refuse the upgrade with an HTTP answer (the denial-response extension)."""
    log.info("websocket_refused", connection_id=rid, status=status, code=code)
    body = ProxyError(status, message, code=code).body(rid)
    await send(
        {
            "type": "websocket.http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"x-request-id", rid.encode())],
        }
    )
    await send({"type": "websocket.http.response.body", "body": body})


class _Gone(Exception):
    """The socket closed while a frame was being sent."""


class _NotFound(Exception):
    """A continuation of a response neither the socket nor the store knows."""


_STOP = {"type": "switchboard.stop"}  # put in the inbox by the drain (see _Connection.stop)


class _Connection:
    __slots__ = (
        "svc",
        "cid",
        "headers",
        "owner",
        "chain",
        "receive",
        "send",
        "session",
        "inbox",
        "_later",
        "gone",
        "reader",
        "opened",
        "turns",
        "closed_by",
        "holds_listener",
        "_status",
        "_start_headers",
        "_error",
    )

    def __init__(self, svc: Service, cid: str, headers: dict[str, str], owner: str, receive: Any, send: Any) -> None:
        self.svc = svc
        self.cid = cid
        self.headers = headers
        self.owner = owner  # the client key's name: what this socket stores is scoped to it
        # the ids of the stored responses that make up the socket's transcript, oldest first
        # (None: some of it was not stored, e.g. store=false turns, as Codex sends)
        self.chain: list[str] | None = None
        self.receive = receive
        self.send = send
        self.session = WSSession(svc.config.server.websocket.max_transcript_bytes)
        # frames the client pipelined ahead of the one being answered: at most this many are
        # held (the reader then stops reading the socket: TCP pushes back on the client)
        self.inbox: asyncio.Queue[Any] = asyncio.Queue(maxsize=svc.config.server.websocket.max_pipelined_frames)
        self._later: asyncio.Task[None] | None = None  # a signal waiting for room in the inbox
        self.gone = asyncio.Event()
        self.reader: asyncio.Task[None] | None = None
        self.opened = time.monotonic()
        self.turns = 0
        self.closed_by = "client"
        self.holds_listener = False  # a turn is in flight (app.drain keeps the listener open)
        self._status = 200
        self._start_headers: list[tuple[bytes, bytes]] = []
        self._error: list[bytes] = []

    # -- the socket ---------------------------------------------------------------------------

    async def _read(self) -> None:
        try:
            while True:
                msg = await self.receive()
                if msg["type"] == "websocket.disconnect":
                    break
                await self.inbox.put(msg)
        finally:
            self.gone.set()
            self._signal(None)

    def _signal(self, what: Any) -> None:
        """Put ``what`` (the end of the socket, or the drain's stop) in the inbox, after the
        frames already there, whether or not it is full."""
        try:
            self.inbox.put_nowait(what)
        except asyncio.QueueFull:
            self._later = asyncio.get_running_loop().create_task(self.inbox.put(what))

    def close_reader(self) -> None:
        if self.reader is not None:
            self.reader.cancel()

    async def _frame(self, obj: dict[str, Any]) -> None:
        await self._text(orjson.dumps(obj).decode())

    async def _text(self, text: str) -> None:
        if self.gone.is_set():
            raise _Gone
        try:
            await self.send({"type": "websocket.send", "text": text})
        except OSError:  # uvicorn's ClientDisconnected: the peer went away
            self.gone.set()
            raise _Gone from None

    async def _next(self, draining: asyncio.Event) -> Any:
        """The next client message, or ``_STOP`` as soon as the drain begins."""
        if not self.inbox.empty() or draining.is_set():
            return self.inbox.get_nowait() if not self.inbox.empty() else _STOP
        get = asyncio.ensure_future(self.inbox.get())
        stop = asyncio.ensure_future(draining.wait())
        try:
            await asyncio.wait((get, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not get.done():
                get.cancel()
        return get.result() if get.done() and not get.cancelled() else _STOP

    async def _close(self, reason: str, code: int = 1000) -> None:
        self.closed_by = reason
        if not self.gone.is_set():
            with contextlib.suppress(OSError):
                await self.send({"type": "websocket.close", "code": code, "reason": reason})

    def stop(self, code: str) -> None:
        """The drain (app.drain): close this socket once no response is in flight (a turn in
        flight is registered on its own and ends first, completed or ``code``)."""
        self._signal(_STOP)

    async def run(self) -> None:
        cfg = self.svc.config.server.websocket
        drain = self.svc.drain
        self.reader = asyncio.ensure_future(self._read())
        try:
            while True:
                if drain.draining:
                    # no new work on a draining instance: the client reconnects (elsewhere,
                    # once the load balancer has seen /readyz say draining)
                    await self._close("shutdown", 1012)
                    return
                try:
                    async with asyncio.timeout(cfg.idle_timeout_seconds):
                        msg = await self._next(drain.event)
                except TimeoutError:
                    await self._close("idle")
                    return
                if msg is None:
                    return
                if msg is _STOP:
                    continue  # the loop's head closes the socket
                text = msg.get("text")
                action = self.session.frame(text if text is not None else None)
                if isinstance(action, Ignore):
                    continue
                if isinstance(action, Reply):
                    log.info("websocket_frame_refused", connection_id=self.cid, code=action.frame["error"]["code"])
                    await self._frame(action.frame)
                    continue
                if time.monotonic() - self.opened > cfg.max_lifetime_seconds:
                    await self._frame(
                        error_frame(
                            400,
                            _LIMIT_MESSAGE.format(minutes=cfg.max_lifetime_seconds / 60),
                            "websocket_connection_limit_reached",
                        )
                    )
                    await self._close("lifetime")
                    return
                self.turns += 1
                if isinstance(action, Warmup):
                    await self._warmup(action)
                else:
                    await self._turn(action)
                if self.gone.is_set():
                    return
        except _Gone:
            return

    # -- one request --------------------------------------------------------------------------

    def _prepare(self, body: dict[str, Any], rid: str, answered: dict[str, Any] | None = None) -> Any:
        started = time.perf_counter()
        # the frame's bytes were checked (ws_session.frame); the rebuilt body is checked as it
        # is, not written to bytes and parsed back (open_bridge leaves it unchanged: the
        # transcript shares its items; tests/unit/test_bridge_leaves_body.py)
        body = check_parsed(body, "responses")
        return self.svc.prepare(
            b"", "responses", rid, self.headers, started, body=body, answered=answered, websocket=True, owner=self.owner
        )

    async def _refused(self, e: ProxyError | RequestError, rid: str) -> None:
        log_rejected(self.svc.counters, "/v1/responses", e.status, e.code, rid)
        err = e.to_dict() if isinstance(e, RequestError) else orjson.loads(e.body())["error"]
        err["request_id"] = rid
        headers = {"x-request-id": rid, **(e.headers if isinstance(e, ProxyError) else {})}
        await self._frame({"type": "error", "status": e.status, "error": err, "headers": headers})

    async def _warmup(self, action: Warmup) -> None:
        rid = new_request_id()
        try:
            p = self._prepare(action.body, rid)
        except (ProxyError, RequestError) as e:
            await self._refused(e, rid)
            return
        for line in p.bridge.empty().splitlines():
            await self._text(line.decode())
        self.session.warmed(p.bridge.encoder.response["id"], action.body)
        self.chain = None
        log.info("request", request_id=rid, route="/v1/responses", transport="websocket", terminal="warmup")

    async def _turn(self, action: Turn) -> None:
        rid = new_request_id()
        try:
            resolved = 0
            if stored.has_references(action.body):  # item_reference: the stored items (app/stored.py)
                resolved = await stored.resolve_references(self.svc.store, self.svc.router, action.body, self.owner)
            turn = await self._stored(action)
            answered = turn.answered if turn is not None else None
            if answered is None and action.previous is not None:
                answered = {"previous_response_id": action.previous}
            p = self._prepare(action.body, rid, answered)
            if resolved:
                p.ctx.repaired("item_reference_resolved")
            size = len(p.upstream_body)  # (the frame rebuilt into the whole request: what the upstream reads)
            ticket = await accounting.admit(self.svc, self.owner, p, size)
        except _NotFound:
            self.session.failed()
            self.chain = None
            log.info("websocket_frame_refused", connection_id=self.cid, code="previous_response_not_found")
            await self._frame(self.session.not_found(action.previous))
            return
        except (ProxyError, RequestError) as e:
            self.session.failed()
            self.chain = None
            await self._refused(e, rid)
            return
        self._status = 200
        self._error.clear()
        self.holds_listener = True
        response = ProxyResponse(p)
        try:
            limits = ticket.event() if ticket is not None else None
            if limits is not None:  # the key's windows, as Codex reads them before a response
                await self._frame(limits)
            await response({"type": "http"}, self._turn_receive, self._turn_send)
        except _Gone:
            self.session.failed()
            raise
        finally:
            self.holds_listener = False
            self.svc.drain.released()
            await accounting.close(self.svc, self.owner, ticket, response.p, size)
        p = response.p
        if p.bridge.terminal == "completed":
            resp = p.bridge.encoder.response
            self.session.completed(resp["id"], resp.get("output") or [])
        else:
            self.session.failed()
        self.chain = None
        if turn is not None and self.svc.store is not None and p.bridge.terminal == "completed":
            await stored.finish(self.svc.store, turn, p)
            self.chain = [*turn.ancestors, p.bridge.encoder.response["id"]]

    async def _stored(self, action: Turn) -> stored.Turn | None:
        """The response store's part of a turn: a ``foreign`` continuation rebuilt from the
        stored conversation (a client that reconnected; ``_NotFound`` when there is none),
        and the record to store when the request stores (``store`` not false).  A turn
        continuing a stored chain is stored as its new items on top of that chain."""
        store = self.svc.store
        body = action.body
        if store is None:
            if action.foreign:
                raise _NotFound
            await stored.begin(None, self.svc.router, body, self.owner)  # store=true → 400 store_disabled
            return None
        ancestors = self.chain if action.previous is not None else []
        if action.foreign:
            assert action.previous is not None
            chain = await stored.stored_chain(store, action.previous, self.owner)
            if not chain:
                raise _NotFound
            self.session.rebase(action, stored.history(chain, strip_ids=True))
            ancestors = [r.id for r in chain]
        if body.get("store") is False:
            return None
        answered: dict[str, Any] = {"store": True}
        if action.previous is not None:
            answered["previous_response_id"] = action.previous
        if ancestors is None:  # the socket's history was not all stored: this record holds it whole
            return stored.Turn(owner=self.owner, items=list(body["input"]), answered=answered)
        items = action.new if action.previous is not None else body["input"]
        return stored.Turn(owner=self.owner, items=list(items), ancestors=list(ancestors), answered=answered)

    async def _turn_receive(self) -> dict[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def _turn_send(self, msg: dict[str, Any]) -> None:
        kind = msg["type"]
        if kind == "http.response.start":
            self._status = msg["status"]
            self._start_headers = list(msg.get("headers") or ())
            return
        body: bytes = msg.get("body", b"")
        if self._status != 200:
            # an error answered before the first byte: one error frame
            self._error.append(body)
            if not msg.get("more_body", False):
                await self._error_frame(b"".join(self._error))
            return
        for line in body.splitlines():
            if line:
                await self._text(line.decode())

    async def _error_frame(self, body: bytes) -> None:
        try:
            err = orjson.loads(body)["error"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            err = {"message": "upstream error", "type": "server_error", "param": None, "code": None}
        keep = (b"x-request-id", b"retry-after")
        headers = {k.decode(): v.decode() for k, v in self._start_headers if k.lower() in keep}
        await self._frame({"type": "error", "status": self._status, "error": err, "headers": headers})
