"""The pump: one client request → one upstream exchange → the client's answer.

Theory of operation
-------------------
All protocol work happens in the sans-IO ``transformers.bridge.Bridge``; this module does
the I/O around it.  ``app.prepare.prepare()`` (pure, before any I/O) checks the client body,
picks the route and opens the Bridge, which translates the body for the upstream; the
upstream exchange itself (send, the answer's head, a whole answer's body, the errors before
the first byte, the drain, the log line) is ``app/exchange.py``.  ``ProxyResponse`` is the
ASGI response that pumps:

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
3. **Hold.**  ``ProxyResponse.hold``, when the app sets one (app/stored.py: the put of a
   stored turn), runs once the answer is whole and before the bytes that carry its
   terminal event go out: a non-streamed body waits before its head, a stream sends what
   comes before its terminal event, then waits.  The client is no longer watched then
   (the upstream is done: a cut has nothing left to stop).  A hold that changed the
   response object has its terminal written again (``Bridge.restate``).
4. **Account.**  One log line and the counters, saying what the client received.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from starlette.responses import Response

from app.drain import SHUTDOWN_MESSAGE
from app.exchange import Resume, attempt, complete_answer, drain_rest, finish_log, send_error
from app.failover import STREAM_FAULTS, Failover
from app.prepare import Prepared, retarget
from providers.upstream import Provider
from transformers.bridge import Bridge
from transformers.errors import ProxyError
from transformers.protocols import SPECS

__all__ = ["ProxyResponse"]


class ProxyResponse(Response):
    """ASGI response that pumps the upstream exchange through the Bridge (module docstring)."""

    def __init__(self, p: Prepared) -> None:  # no super().__init__: nothing is rendered up front
        self.p = p
        self.task: asyncio.Task[Any] | None = None
        self.background = None
        self.started = False  # http.response.start sent (the app's catch-all can no longer answer)
        # awaited between the whole answer and its terminal's bytes (module docstring, 3.);
        # True when it changed the response object
        self.hold: Callable[[Prepared], Awaitable[bool]] | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        p = self.p
        prov = p.route.provider
        status = 200
        ttfb = None
        terminal = ""
        error = ""  # the code of the error answered before the first byte
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

        def unwatch() -> None:
            watching.cancel()
            if watch is not None:
                watch.remove_done_callback(on_disconnect)
                watch.cancel()

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
                out = complete_answer(p, whole)  # type: ignore[arg-type]
                if self.hold is not None:
                    unwatch()
                    if await self.hold(p):
                        out = p.bridge.restate()
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
                        (b"content-type", p.bridge.framing.content_type),
                        (b"cache-control", b"no-cache"),
                        (b"x-accel-buffering", b"no"),
                        *head,
                    ],
                }
            )
            if whole is not None:  # an upstream that ignored `stream`
                out = p.bridge.replay(whole)
                if p.bridge.chars:
                    p.first_token = time.perf_counter() - p.started
            else:
                drain, out = await _stream(p, prov, resp, send)
            if self.hold is not None:
                unwatch()
                out = await _held(p, self.hold, out, send)
            await send({"type": "http.response.body", "body": out, "more_body": False})
        except ProxyError as e:
            p = self.p
            status = e.status
            terminal = "error"
            error = e.code or str(status)
            p.metrics.inc("switchboard_upstream_errors_total", provider=p.route.provider.name, code=str(e.code))
            self.started = True
            await send_error(send, e, p.request_id, p.client, p.headers)
        except asyncio.CancelledError:
            p = self.p
            if p.stop and not cancelled_by_client and not self.started and me is not None:
                me.uncancel()  # the drain's deadline: answered, not cut
                err = ProxyError(503, SHUTDOWN_MESSAGE, type="server_error", code=p.stop, headers={"retry-after": "1"})
                status, terminal, error = 503, "error", p.stop
                self.started = True
                await send_error(send, err, p.request_id, p.client, p.headers)
            elif not cancelled_by_client:
                raise
            else:
                terminal = "client_cancel"
                status = 499
        finally:
            p = self.p
            if p.drainer is not None:
                p.drainer.unregister(self)
            unwatch()
            finish_log(p, status, ttfb, terminal or p.bridge.terminal or "failed", error)
            if p.trace is not None:
                p.trace.end(p, status, terminal or p.bridge.terminal or "failed", error)
            if p.resilience is not None and ttfb is not None and p.bridge.error_code in STREAM_FAULTS:
                p.resilience.report(p.route, "failure")  # the upstream broke after its head
            try:
                if drain is not None:  # the client has its whole answer; not part of its duration
                    await drain_rest(drain)
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
        send = attempt if p.trace is None else p.trace.attempt  # (app.tracing: a span per attempt)
        if p.resilience is None:
            return await send(p)
        fo = Failover(p, p.resilience)
        try:
            return await fo.run(send, retarget)
        finally:
            self.p = fo.p


async def _stream(p: Prepared, prov: Provider, resp: httpx.Response, send: Any) -> tuple[Any, bytes]:
    """Pump the upstream stream through the Bridge to the client; returns the upstream body
    iterator to drain when the terminal event came before the upstream's end, and the
    answer's last bytes, not sent yet."""
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
    # a protocol whose stream is over at its terminal event (its row: Responses)
    at_terminal = SPECS[p.client].ends_at_terminal
    left = b""  # the rest of a large read, for the Bridge a slice at a time (_SLICE_BYTES)
    no_output = True  # no output written for the client yet (the time to first token)
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
                            chunk = await Resume(step, blocked)
                        except StopAsyncIteration:
                            break
                        finally:
                            waiting[0] = False
                            waiting[1] = clock()
                    if len(chunk) > _SLICE_BYTES:
                        chunk, left = _slice(chunk)
                out = bridge.receive_data(chunk)
                if no_output and bridge.chars:
                    no_output = False
                    p.first_token = clock() - p.started
                if bridge.finished or (bridge.terminal and at_terminal):
                    if out:
                        pending.append(out)
                    if left:  # the read's rest in one piece, as if it had not been sliced
                        pending.append(bridge.receive_data(left))
                    rest = raw
                    break  # terminal event: answer and close right away (docs/rules.md F2)
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
    if no_output and bridge.chars:  # the first output came with the end (a call held to the end)
        p.first_token = clock() - p.started
    pending.append(out)
    return rest, b"".join(pending)


async def _held(p: Prepared, hold: Callable[[Prepared], Awaitable[bool]], data: bytes, send: Any) -> bytes:
    """A stream's last bytes ``data`` once ``hold`` is done: what comes before the terminal
    event (``Bridge.last_frame``) goes out first; the terminal written again when the hold
    changed the response object.  Without a known terminal, all of ``data`` waits."""
    last = p.bridge.last_frame
    n = len(last) if last and data.endswith(last) else 0
    if n and len(data) > n:
        await send({"type": "http.response.body", "body": data[:-n], "more_body": True})
        data = last
    if await hold(p) and n:
        data = data[:-n] + p.bridge.restate()
    return data


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
    (docs/rules.md F21): long reasoning gaps must not trip the client's idle timeout.  It wakes when
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
