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
* its ``receive`` reports ``http.disconnect`` when the socket goes away (or the response
  is cut), so a client that leaves mid-turn cancels the upstream exactly as on HTTP.

One reader task per socket moves the client's messages into a queue (an ``asyncio.Queue``
read is safe to cancel).  The connection's loop takes them at once, turns included:
``response.cancel``, ``response.steer`` and ``response.inject`` are answered as they come
(transformers/ws_lanes.py); a create goes to its lane (``stream_id``), whose worker task
runs its creates one after the other, lanes at the same time (``max_active_responses``),
one frame at a time on the socket (a lock).  A cut (cancel, or steering at a safe
boundary) makes the turn's ``receive`` report ``http.disconnect``, so the pump stops the
upstream call exactly as for a client that left; the lines it had written still go out,
then ``Bridge.interrupt`` ends the response (cancelled, or steered and followed by its
successor).

Bounds: sockets per process (``server.websocket.max_connections``; the next upgrade is
answered 426, and Codex falls back to HTTP for the session), creates waiting on lanes
(``max_pipelined_frames``; the socket is not read meanwhile), named lanes
(``max_lanes``), transcript bytes per socket, an idle timeout (the socket is closed when
no response is running; the client reconnects), a lifetime (the next request is answered
``websocket_connection_limit_reached``, which Codex retries on a new socket), the frame
size (``server.max_body_bytes``) and pings (uvicorn's, ``ping_interval_seconds``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from functools import partial
from typing import Any

import orjson

from app import accounting, stored
from app.logs import log
from app.metrics import log_rejected
from app.pipeline import ProxyResponse
from app.prepare import new_request_id, scope_headers
from transformers import ws_lanes
from transformers.errors import ProxyError, RequestError
from transformers.protocols import check_parsed
from transformers.ws_lanes import Steering, Track, inject_failed, lane_of, tag
from transformers.ws_session import Control, Create, Ignore, Reply, Turn, Warmup, WSSession, error_frame

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


class _Run:
    """One response in flight on a lane: what its client received (``track``), how it was
    cut (``cut``: ``cancelled`` or ``steered``), the event that ends its upstream call
    (``stopped``), the lines the pump had written when the cut stopped it (``leftover``),
    and the injects to answer at its end."""

    __slots__ = (
        "lane",
        "turn",
        "p",
        "track",
        "cut",
        "steer",
        "steerable",
        "stopped",
        "injects",
        "leftover",
        "status",
        "start_headers",
        "error",
    )

    def __init__(self, lane: str | None, turn: Turn) -> None:
        self.lane = lane
        self.turn = turn
        self.p: Any = None  # the ProxyResponse pumping it
        self.track = Track()
        self.cut: str | None = None
        self.steer = False  # steering accepted: cut at the next safe boundary
        self.steerable = True  # not bound to a conversation, no automatic compaction
        self.stopped = asyncio.Event()
        self.injects: list[dict[str, Any]] = []
        self.leftover: list[str] = []  # lines written for the client when the cut stopped the pump
        self.status = 200
        self.start_headers: list[tuple[bytes, bytes]] = []
        self.error: list[bytes] = []


class _Lane:
    __slots__ = ("sid", "queue", "worker", "run")

    def __init__(self, sid: str | None) -> None:
        self.sid = sid
        self.queue: deque[Create] = deque()  # creates waiting their turn (FIFO)
        self.worker: asyncio.Task[None] | None = None
        self.run: _Run | None = None  # the response in flight


class _Connection:
    __slots__ = (
        "svc",
        "cid",
        "headers",
        "owner",
        "chains",
        "receive",
        "send",
        "session",
        "steering",
        "inbox",
        "_later",
        "gone",
        "reader",
        "opened",
        "turns",
        "closed_by",
        "lanes",
        "queued",
        "room",
        "slots",
        "idle",
        "_lock",
    )

    def __init__(self, svc: Service, cid: str, headers: dict[str, str], owner: str, receive: Any, send: Any) -> None:
        cfg = svc.config.server.websocket
        self.svc = svc
        self.cid = cid
        self.headers = headers
        self.owner = owner  # the client key's name: what this socket stores is scoped to it
        # per lane, the ids of the stored responses that make up its transcript, oldest first
        # (None: some of it was not stored, e.g. store=false turns, as Codex sends)
        self.chains: dict[str | None, list[str] | None] = {}
        self.receive = receive
        self.send = send
        self.session = WSSession(cfg.max_transcript_bytes)
        self.steering = Steering(cfg.max_steers_per_response)
        # frames read from the socket and not yet taken: at most this many are held (the
        # reader then stops reading the socket: TCP pushes back on the client)
        self.inbox: asyncio.Queue[Any] = asyncio.Queue(maxsize=cfg.max_pipelined_frames)
        self._later: asyncio.Task[None] | None = None  # a signal waiting for room in the inbox
        self.gone = asyncio.Event()
        self.reader: asyncio.Task[None] | None = None
        self.opened = time.monotonic()
        self.turns = 0
        self.closed_by = "client"
        self.lanes: dict[str | None, _Lane] = {}
        self.queued = 0  # creates waiting on their lanes (at most max_pipelined_frames)
        self.room = asyncio.Event()  # set when a waiting create was taken
        self.slots = asyncio.Semaphore(cfg.max_active_responses)
        self.idle = asyncio.Event()  # set while no lane has work
        self.idle.set()
        self._lock = asyncio.Lock()  # one frame at a time on the socket

    @property
    def holds_listener(self) -> bool:
        """A response is in flight (app.drain keeps the listener open)."""
        return any(lane.run is not None for lane in self.lanes.values())

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
            self.room.set()
            for lane in self.lanes.values():
                if lane.run is not None:
                    lane.run.stopped.set()
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
        for lane in self.lanes.values():
            if lane.worker is not None:
                lane.worker.cancel()

    async def _frame(self, obj: dict[str, Any], lane: str | None = None) -> None:
        if lane is not None:
            obj = {**obj, "stream_id": lane}
        await self._text(orjson.dumps(obj).decode())

    async def _text(self, text: str) -> None:
        if self.gone.is_set():
            raise _Gone
        async with self._lock:
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

    async def _quiet(self) -> None:
        """Wait until no lane has work (or the socket is gone)."""
        if self.idle.is_set() or self.gone.is_set():
            return
        idle = asyncio.ensure_future(self.idle.wait())
        gone = asyncio.ensure_future(self.gone.wait())
        try:
            await asyncio.wait((idle, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            idle.cancel()
            gone.cancel()

    async def run(self) -> None:
        cfg = self.svc.config.server.websocket
        drain = self.svc.drain
        self.reader = asyncio.ensure_future(self._read())
        try:
            while True:
                if drain.draining:
                    # no new work on a draining instance: the client reconnects (elsewhere,
                    # once the load balancer has seen /readyz say draining); the responses
                    # in flight end first
                    await self._quiet()
                    await self._close("shutdown", 1012)
                    return
                try:
                    async with asyncio.timeout(cfg.idle_timeout_seconds):
                        msg = await self._next(drain.event)
                except TimeoutError:
                    if not self.idle.is_set():
                        continue  # silent while answering: not idle
                    await self._close("idle")
                    return
                if msg is None:
                    return
                if msg is _STOP:
                    continue  # the loop's head closes the socket
                text = msg.get("text")
                action = self.session.classify(text if text is not None else None)
                if isinstance(action, Ignore):
                    continue
                if isinstance(action, Reply):
                    log.info("websocket_frame_refused", connection_id=self.cid, code=action.frame["error"]["code"])
                    await self._frame(action.frame, _echo_lane(text))
                    continue
                if isinstance(action, Control):
                    await self._control(action.msg)
                    continue
                if time.monotonic() - self.opened > cfg.max_lifetime_seconds:
                    await self._frame(
                        error_frame(
                            400,
                            _LIMIT_MESSAGE.format(minutes=cfg.max_lifetime_seconds / 60),
                            "websocket_connection_limit_reached",
                        ),
                        action.lane,
                    )
                    await self._quiet()
                    await self._close("lifetime")
                    return
                if action.lane not in self.lanes and sum(1 for k in self.lanes if k is not None) >= cfg.max_lanes:
                    await self._frame(
                        error_frame(
                            400,
                            f"this connection uses at most {cfg.max_lanes} distinct stream_id values",
                            "websocket_stream_limit_reached",
                            param="stream_id",
                        ),
                        action.lane,
                    )
                    continue
                await self._enqueue(action)
        except _Gone:
            return
        finally:
            workers = [lane.worker for lane in self.lanes.values() if lane.worker is not None]
            if workers:
                self.gone.set()
                for lane in self.lanes.values():
                    if lane.run is not None:
                        lane.run.stopped.set()
                await asyncio.gather(*workers, return_exceptions=True)

    async def _enqueue(self, c: Create) -> None:
        """Put a create on its lane (FIFO), holding at most max_pipelined_frames waiting."""
        limit = self.svc.config.server.websocket.max_pipelined_frames
        while self.queued >= limit and not self.gone.is_set():
            self.room.clear()
            await self.room.wait()
        lane = self.lanes.get(c.lane)
        if lane is None:
            lane = self.lanes[c.lane] = _Lane(c.lane)
        lane.queue.append(c)
        self.queued += 1
        self.idle.clear()
        if lane.worker is None:
            lane.worker = asyncio.ensure_future(self._lane(lane))

    async def _lane(self, lane: _Lane) -> None:
        """One lane's worker: its creates one after the other."""
        try:
            while lane.queue and not self.gone.is_set():
                c = lane.queue.popleft()
                self.queued -= 1
                self.room.set()
                async with self.slots:
                    try:
                        await self._create(lane, c)
                    except _Gone:
                        return
                    except Exception as e:  # never a silent lane: the client gets an error event
                        log.warning("websocket_lane_error", connection_id=self.cid, error=type(e).__name__)
                        with contextlib.suppress(_Gone):
                            await self._frame(
                                error_frame(500, "internal error", "server_error", type="server_error"), lane.sid
                            )
        finally:
            lane.worker = None
            lane.run = None
            if all(x.worker is None for x in self.lanes.values()):
                self.idle.set()

    async def _create(self, lane: _Lane, c: Create) -> None:
        prev = c.msg.get("previous_response_id")
        queued = self.steering.take(prev if isinstance(prev, str) else None)
        action = self.session.create(c, [i for s in queued for i in s.items])
        if isinstance(action, Reply):
            log.info("websocket_frame_refused", connection_id=self.cid, code=action.frame["error"]["code"])
            await self._frame(action.frame, lane.sid)
            return
        self.turns += 1
        if isinstance(action, Warmup):
            await self._warmup(action, lane)
            return
        assert isinstance(action, Turn)
        turn: Turn | None = action
        while turn is not None:
            turn = await self._turn(turn, lane)

    # -- cancel, steer, inject ----------------------------------------------------------------

    def _running(self, response_id: str) -> _Run | None:
        for lane in self.lanes.values():
            r = lane.run
            if r is not None and r.track.response_id == response_id:
                return r
        return None

    def _seq(self, run: _Run | None) -> int:
        """A sequence number in ``run``'s response for an event the socket adds to it."""
        if run is None or run.p is None:
            return 0
        return int(run.p.p.bridge.encoder.take_sequence())

    async def _control(self, msg: dict[str, Any]) -> None:
        kind = msg["type"]
        counters = self.svc.counters
        if kind == "response.cancel":
            run = self._cancel_target(msg)
            if run is None:
                counters.inc("switchboard_websocket_events_total", event="cancel_not_active")
                valid, sid = lane_of(msg)
                await self._frame(
                    error_frame(
                        400, "no response to cancel is in progress", "response_cancel_not_active", param="response_id"
                    ),
                    sid if valid else None,
                )
                return
            counters.inc("switchboard_websocket_events_total", event="cancel")
            self._cut(run, "cancelled")
            return
        if kind == "response.inject":
            rid = msg.get("response_id")
            run = self._running(rid) if isinstance(rid, str) else None
            if run is not None:  # answered at its end: it does not wait for input
                run.injects.append(msg)
                return
            known = isinstance(rid, str) and rid in self.steering.finished
            counters.inc("switchboard_websocket_events_total", event="inject_failed")
            code = "response_already_completed" if known else "response_not_found"
            text = "the response has finished" if known else "the response is not available on this connection"
            lane = self.steering.lane(rid) if isinstance(rid, str) else None
            await self._frame(inject_failed(msg, code, text), lane)
            return
        # response.steer
        steer, refusal = self.steering.submit(msg)
        prev = msg.get("previous_response_id")
        run = self._running(prev) if isinstance(prev, str) else None
        lane = run.lane if run is not None else (self.steering.lane(prev) if isinstance(prev, str) else None)
        if steer is None:
            assert refusal is not None
            counters.inc("switchboard_websocket_events_total", event="steer_failed")
            refusal["sequence_number"] = self._seq(run)
            await self._frame(refusal, lane)
            return
        counters.inc("switchboard_websocket_events_total", event="steer_accepted")
        await self._frame(ws_lanes.accepted(steer, self._seq(run)), lane)
        if run is not None and run.cut is None:
            run.steer = True
            if run.track.safe:
                self._cut(run, "steered")

    def _cancel_target(self, msg: dict[str, Any]) -> _Run | None:
        rid = msg.get("response_id")
        if isinstance(rid, str) and rid:
            return self._running(rid)
        valid, sid = lane_of(msg)
        lane = self.lanes.get(sid) if valid else None
        return lane.run if lane is not None and lane.run is not None and lane.run.p is not None else None

    def _cut(self, run: _Run, how: str) -> None:
        """End ``run`` now: its later lines are dropped and its upstream call is stopped."""
        if run.cut is None:
            run.cut = how
            run.stopped.set()

    # -- one request --------------------------------------------------------------------------

    def _prepare(self, body: dict[str, Any], rid: str, answered: dict[str, Any] | None = None) -> Any:
        started = time.perf_counter()
        # the frame's bytes were checked (ws_session.classify); the rebuilt body is checked as
        # it is, not written to bytes and parsed back (open_bridge leaves it unchanged: the
        # transcript shares its items; tests/unit/test_bridge_leaves_body.py)
        body = check_parsed(body, "responses")
        return self.svc.prepare(
            b"", "responses", rid, self.headers, started, body=body, answered=answered, websocket=True, owner=self.owner
        )

    async def _refused(self, e: ProxyError | RequestError, rid: str, lane: str | None) -> None:
        log_rejected(self.svc.counters, "/v1/responses", e.status, e.code, rid)
        err = e.to_dict() if isinstance(e, RequestError) else orjson.loads(e.body())["error"]
        err["request_id"] = rid
        headers = {"x-request-id": rid, **(e.headers if isinstance(e, ProxyError) else {})}
        await self._frame({"type": "error", "status": e.status, "error": err, "headers": headers}, lane)

    async def _warmup(self, action: Warmup, lane: _Lane) -> None:
        rid = new_request_id()
        try:
            p = self._prepare(action.body, rid)
        except (ProxyError, RequestError) as e:
            await self._refused(e, rid, lane.sid)
            return
        for line in p.bridge.empty().splitlines():
            await self._text(tag(line.decode(), lane.sid))
        self.session.warmed(p.bridge.encoder.response["id"], action.body, lane.sid)
        self.chains[lane.sid] = None
        log.info("request", request_id=rid, route="/v1/responses", transport="websocket", terminal="warmup")

    async def _turn(self, action: Turn, lane: _Lane) -> Turn | None:
        """Run one response; returns its successor when steering started one."""
        rid = new_request_id()
        sid = lane.sid
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
            self.session.failed(action)
            self.chains[sid] = None
            log.info("websocket_frame_refused", connection_id=self.cid, code="previous_response_not_found")
            await self._frame(self.session.not_found(action.previous), sid)
            return None
        except (ProxyError, RequestError) as e:
            self.session.failed(action)
            self.chains[sid] = None
            await self._refused(e, rid, sid)
            return None
        run = _Run(sid, action)
        response = ProxyResponse(p)
        if turn is not None and self.svc.store is not None:  # stored before its response.completed frame
            response.hold = partial(stored.finish, self.svc.store, turn, completed_only=True)
        run.p = response  # (its .p: the target's, after a fallback before the first byte)
        run.steerable = "conversation" not in action.body and "context_management" not in action.body
        lane.run = run
        if self.gone.is_set():
            run.stopped.set()
        try:
            limits = ticket.event() if ticket is not None else None
            if limits is not None:  # the key's windows, as Codex reads them before a response
                await self._frame(limits, sid)
            await response({"type": "http"}, self._receiver(run), self._sender(run))
        except _Gone:
            self.session.failed(action)
            self.steering.ended(run.track.response_id or "", False, [])
            raise
        finally:
            lane.run = None
            self.svc.drain.released()
            await accounting.close(self.svc, self.owner, ticket, response.p, size)
        p = response.p
        response_id = p.bridge.encoder.response["id"]
        for line in run.leftover:  # written for the client before the cut stopped the pump
            await self._line(run, line)
        if run.cut is not None:
            ending = p.bridge.interrupt(run.cut)
            if ending:  # (none: the response had ended already, it goes on as ended)
                for raw in ending.splitlines():
                    await self._line(run, raw.decode())
                return await self._after_cut(run, p, response_id)
        completed = p.bridge.terminal == "completed"
        output = p.bridge.encoder.response.get("output") or [] if completed else []
        if completed:
            self.session.completed(response_id, output, action)
        else:
            self.session.failed(action)
        self.chains[sid] = None
        if turn is not None and turn.kept:
            self.chains[sid] = [*turn.ancestors, response_id]
        for msg in run.injects:
            await self._frame(
                inject_failed(msg, "response_already_completed", "the response ended without waiting for input"), sid
            )
        what, steers, stubs = self.steering.ended(response_id, completed, output)
        counters = self.svc.counters
        if what == "pending":
            for s in steers:
                counters.inc("switchboard_websocket_events_total", event="steer_pending")
                await self._frame(ws_lanes.pending(s, stubs), sid)
        elif what == "failed":
            for s in steers:
                counters.inc("switchboard_websocket_events_total", event="steer_failed")
                await self._frame(
                    ws_lanes.failed(
                        s.id, s.previous_response_id, s.input, "response_not_active", "the response did not complete"
                    ),
                    sid,
                )
        elif what == "successor":
            counters.inc("switchboard_websocket_events_total", event="successor")
            return self.session.successor(action, response_id, output, [i for s in steers for i in s.items])
        return None

    async def _after_cut(self, run: _Run, p: Any, response_id: str) -> Turn | None:
        """After the terminal of a response cut by cancel or steering: the successor that
        steering starts."""
        sid = run.lane
        for msg in run.injects:
            await self._frame(
                inject_failed(msg, "response_already_completed", "the response ended without taking the input"), sid
            )
        log.info("websocket_cut", connection_id=self.cid, response_id=response_id, how=run.cut)
        self.chains[sid] = None
        if run.cut == "cancelled":
            self.session.failed(run.turn)
            _, steers, _ = self.steering.ended(response_id, False, [])
            for s in steers:
                await self._frame(
                    ws_lanes.failed(
                        s.id, s.previous_response_id, s.input, "response_not_active", "the response was cancelled"
                    ),
                    sid,
                )
            return None
        self.svc.counters.inc("switchboard_websocket_events_total", event="steered")
        steers = self.steering.cut(response_id)
        output = p.bridge.encoder.response.get("output") or []
        return self.session.successor(run.turn, response_id, output, [i for s in steers for i in s.items])

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
        ancestors = self.chains.get(action.lane) if action.previous is not None else []
        if action.foreign:
            assert action.previous is not None
            chain = await stored.stored_chain(store, action.previous, self.owner)
            if not chain:
                raise _NotFound
            self.session.rebase(action, stored.history(chain, strip_ids=True))
            ancestors = [r.id for r in chain]
        elif ancestors is not None and ancestors and action.previous is not None and ancestors[-1] != action.previous:
            ancestors = None  # continues another lane's response: stored whole
        if body.get("store") is False:
            return None
        answered: dict[str, Any] = {"store": True}
        if action.previous is not None:
            answered["previous_response_id"] = action.previous
        if ancestors is None:  # the socket's history was not all stored: this record holds it whole
            return stored.Turn(owner=self.owner, items=list(body["input"]), answered=answered)
        items = action.new if action.previous is not None else body["input"]
        return stored.Turn(owner=self.owner, items=list(items), ancestors=list(ancestors), answered=answered)

    def _receiver(self, run: _Run) -> Any:
        async def receive() -> dict[str, Any]:
            await run.stopped.wait()  # the socket went away, or the response was cut
            return {"type": "http.disconnect"}

        return receive

    async def _line(self, run: _Run, line: str) -> None:
        """One event line of ``run``'s response to its client."""
        known = run.track.response_id
        run.track.see(line)
        if known is None and run.track.response_id:  # response.created: it may be steered now
            self.steering.started(run.track.response_id, run.lane, run.steerable)
        await self._text(tag(line, run.lane))

    def _sender(self, run: _Run) -> Any:
        async def send(msg: dict[str, Any]) -> None:
            kind = msg["type"]
            if kind == "http.response.start":
                run.status = msg["status"]
                run.start_headers = list(msg.get("headers") or ())
                return
            body: bytes = msg.get("body", b"")
            if run.status != 200:
                # an error answered before the first byte: one error frame
                run.error.append(body)
                if not msg.get("more_body", False):
                    await self._error_frame(run, b"".join(run.error))
                return
            lines = [raw.decode() for raw in body.splitlines() if raw]
            if run.leftover:  # (a cancel that was the drain's, not a cut: the pump goes on)
                lines = [*run.leftover, *lines]
                run.leftover = []
            for i, line in enumerate(lines):
                try:
                    await self._line(run, line)
                except asyncio.CancelledError:
                    # the cut stopped the pump before this line went out (uvicorn writes a
                    # frame whole, after its one wait): the rest goes out after it
                    run.leftover = lines[i:]
                    raise
                if run.steer and run.cut is None and run.track.safe:
                    self._cut(run, "steered")

        return send

    async def _error_frame(self, run: _Run, body: bytes) -> None:
        try:
            err = orjson.loads(body)["error"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            err = {"message": "upstream error", "type": "server_error", "param": None, "code": None}
        keep = (b"x-request-id", b"retry-after")
        headers = {k.decode(): v.decode() for k, v in run.start_headers if k.lower() in keep}
        await self._frame({"type": "error", "status": run.status, "error": err, "headers": headers}, run.lane)


def _echo_lane(text: Any) -> str | None:
    """The valid ``stream_id`` of a refused frame, to route its error to the lane."""
    if not isinstance(text, str) or '"stream_id"' not in text:
        return None
    try:
        msg = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(msg, dict):
        return None
    valid, sid = lane_of(msg)
    return sid if valid else None
