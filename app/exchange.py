"""The upstream exchange of one prepared request: send it, read the answer's head and, for a
whole answer, its body; map every failure before the first byte to the OpenAI error the
client gets; drain what is left of a body after the terminal event; the request's log line
and counters.  The pump (``app/pipeline.py``) calls these; ``app/failover.py`` runs the
attempts.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import orjson

from app.logs import log
from app.prepare import Prepared, error_body
from providers.errors import error_in_ok_body, failed_answer_error, upstream_error
from providers.upstream import Provider, target_for
from transformers.bridge import AnswerError
from transformers.encrypted_retry import is_invalid_encrypted_content, strip_encrypted_reasoning
from transformers.errors import ProxyError
from transformers.protocols import SPECS

__all__ = [
    "Resume",
    "attempt",
    "complete_answer",
    "drain_rest",
    "exchange",
    "finish_log",
    "is_json",
    "json_object",
    "open_upstream",
    "read_capped",
    "send_error",
    "whole_answer",
]


async def attempt(p: Prepared) -> tuple[httpx.Response, dict[str, Any] | None]:
    """One upstream attempt: the response with a success status, and its whole JSON answer
    when one is due before the first byte (a non-stream request, or JSON to a stream one)."""
    prov = p.route.provider
    resp = await exchange(p, prov)
    if p.stream and not is_json(resp.headers.get("content-type")):
        return resp, None
    try:
        return resp, await whole_answer(p, prov, resp)
    finally:
        await resp.aclose()


async def exchange(p: Prepared, prov: Provider) -> httpx.Response:
    """Send the upstream request; its response once the status is a success (an error
    status is raised as the client's ProxyError, after the one encrypted-content retry)."""
    up = SPECS[p.upstream]
    model = p.route.upstream_model if "{model}" in up.path else ""  # (a URL that names the model: Gemini's)
    target = target_for(prov, p.upstream, p.stream, p.forward_headers, model)
    payload = p.upstream_body
    for attempt in (0, 1):
        resp = await open_upstream(prov, target.request(payload, p.forward_headers))
        if resp.status_code < 400:
            return resp
        body = await read_capped(resp, _ERROR_BODY_MAX)
        await resp.aclose()
        retry = None
        if (
            attempt == 0
            and up.native_items  # (the retry strips Responses items' encrypted reasoning)
            and p.ctx.on("encrypted_content_retry")
            and is_invalid_encrypted_content(resp.status_code, body)
        ):
            retry = strip_encrypted_reasoning(orjson.loads(payload))
        if retry is None:
            if p.trace is not None:  # (app.tracing: the attempt span's status)
                p.trace.upstream_status = resp.status_code
            raise upstream_error(resp.status_code, body, resp.headers, prov.name, p.secrets)
        p.ctx.repaired("encrypted_content_retry")
        payload = orjson.dumps(retry)
    raise AssertionError("unreachable")  # pragma: no cover


async def whole_answer(p: Prepared, prov: Provider, resp: httpx.Response) -> dict[str, Any]:
    """A whole JSON answer (also to a stream request: an error object, or an upstream that
    ignored ``stream``) as an object; an error object or an unreadable body raised."""
    try:
        body = await read_capped(resp, _BODY_MAX)
    except httpx.HTTPError as e:
        raise ProxyError(
            502,
            f"upstream {prov.name} failed while sending its answer: {type(e).__name__}",
            type="upstream_error",
            code="upstream_stream_error",
        ) from None
    obj = json_object(body)  # parsed once: the error check below reads the same object
    err = error_in_ok_body(obj, body, resp.headers, prov.name, p.secrets)
    if err is not None:
        raise err
    return obj


def complete_answer(p: Prepared, obj: dict[str, Any]) -> bytes:
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


def is_json(ctype: str | None) -> bool:
    media = (ctype or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def json_object(body: bytes) -> dict[str, Any]:
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


async def open_upstream(prov: Any, req: httpx.Request) -> httpx.Response:
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


_DRAIN_BYTES = 64 * 1024
_DRAIN_SECONDS = 1.0


_ERROR_BODY_MAX = 64 * 1024  # of an upstream error answer: enough for any message
_BODY_MAX = 64 * 1024 * 1024  # of a non-streamed upstream answer


async def read_capped(resp: httpx.Response, limit: int) -> bytes:
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


async def drain_rest(raw: Any) -> None:
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
                chunk = await Resume(step, blocked)
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


async def send_error(
    send: Any, e: ProxyError, request_id: str, client: str = "chat", extra: dict[str, str] | None = None
) -> None:
    """An error answer in the client's protocol; ``extra``: the request's own headers (its
    key's rate limits, what was dropped), the error's winning."""
    body = error_body(client, e.status, orjson.loads(e.body())["error"], request_id)
    hdrs = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    headers = {**extra, **e.headers} if extra else e.headers
    hdrs += [(b"x-request-id", request_id.encode()), *[(k.encode(), v.encode()) for k, v in headers.items()]]
    await send({"type": "http.response.start", "status": e.status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body})


def finish_log(p: Prepared, status: int, ttfb: float | None, terminal: str, error: str = "") -> None:
    """The request's log line and metrics, saying what the client received: ``terminal``
    (its outcome), ``error`` (the code of an error answered before the first byte)."""
    dur = time.perf_counter() - p.started
    prov = p.route.provider.name
    p.status = status
    p.metrics.answered(p.route_name, p.client, prov, status, dur, ttfb, (terminal or "none") if p.stream else None)
    bridge = p.bridge
    # the GenAI metrics: what the request failed with ("" when it did not), and its tokens:
    # the upstream's usage, else (a client that left, an upstream that sent none) an
    # estimate of the output from the characters the client was sent (4 per token)
    if status >= 400 or terminal not in _SUCCEEDED:
        if not error:
            if terminal == "client_cancel":
                error = "client_cancel"
            elif terminal == "failed":
                error = bridge.error_code or "failed"
            else:
                error = str(status) if status >= 400 else terminal
    tokens: tuple[int | None, ...] | None = bridge.tokens()
    estimated = tokens is None and bridge.chars > 0
    if estimated:
        tokens = (None, -(-bridge.chars // 4), None, None, None)
    p.metrics.turn(p.client, prov, p.route.public_model, p.owner, error, dur, p.first_token, tokens, estimated)
    repairs = p.ctx.repairs
    if repairs:
        for rule in repairs:
            p.metrics.inc("switchboard_repairs_total", rule=rule, provider=prov)
        log.debug("repairs", request_id=p.request_id, provider=prov, rules=sorted(set(repairs)))
    if p.ctx.tools.dropped:
        log.warning("hosted_tools_dropped", request_id=p.request_id, provider=prov, tools=p.ctx.tools.dropped)
    if p.ctx.dropped_fields:
        for name in p.ctx.dropped_fields:
            p.metrics.inc("switchboard_fields_dropped_total", field=name, provider=prov)
        log.info("fields_dropped", request_id=p.request_id, provider=prov, fields=p.ctx.dropped_fields)
    if p.ctx.dropped_items:
        # docs/rules.md, "Nothing dropped quietly": a turn that lost an item is never logged ``completed``
        log.warning("input_items_dropped", request_id=p.request_id, provider=prov, items=p.ctx.dropped_items)
        if terminal == "completed":
            terminal = "completed_items_dropped"
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
    if p.capture is not None:  # (app/capture.py: the exchange's line, once its answer ended)
        p.capture.sink.finish(p, terminal)
    log.info(
        "request",
        request_id=p.request_id,
        route=p.route_name,
        client_protocol=p.client,
        provider=prov,
        upstream_protocol=p.upstream,
        model=p.route.public_model,
        upstream_model=p.route.upstream_model,
        key_name=p.owner,
        stream=p.stream,
        transport=p.transport,
        attempts=p.attempts,
        status=status,
        duration_ms=round(dur * 1000, 2),
        ttfb_ms=round(ttfb * 1000, 2) if ttfb is not None else None,
        ttft_ms=round(p.first_token * 1000, 2) if p.first_token is not None else None,
        input_tokens=tokens[0] if tokens is not None else None,
        output_tokens=tokens[1] if tokens is not None else None,
        cache_read=tokens[2] if tokens is not None else None,
        cache_write=tokens[3] if tokens is not None else None,
        tokens_estimated=estimated,
        terminal=terminal,
        code=error or None,
        trace_id=p.trace.trace_id if p.trace is not None else None,
    )


_SUCCEEDED = frozenset({"completed", "incomplete"})  # terminals of an answer that did not fail


class Resume:
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
