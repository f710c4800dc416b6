"""The async pipeline: one client request → one upstream request → the client's answer.

Theory of operation
-------------------
``prepare()`` (pure, before any I/O) parses and checks the client body, picks the route,
translates the request for the upstream protocol and builds the sans-IO stream chain::

    upstream bytes → SSEParser → decoder → [ToolStage] → encoder → SSE bytes → client

``ProxyResponse`` is an ASGI response that does the I/O.  Phase 1 sends the upstream
request while watching the client: a disconnect before the first upstream byte cancels the
upstream request, a slow upstream hits the first-byte timeout, and any upstream failure is
still answered with a proper HTTP status and OpenAI error (nothing was sent yet).  Phase 2
streams; from here failures become the protocol's own error event (Responses ``error`` +
``response.failed``; Chat an error chunk), never a silently cut stream, and a client
disconnect cancels the task, which closes the upstream response.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import orjson
from starlette.responses import Response

from app import metrics
from app.logs import log
from providers.errors import error_in_ok_body, failed_answer_error, mask_error, upstream_error
from providers.upstream import Route, Router
from transformers import sse
from transformers.chat_decode import ChatStreamDecoder, decode_chat_completion
from transformers.chat_encode import ChatStreamEncoder, encode_chat_completion
from transformers.context import Ctx
from transformers.encrypted_retry import is_invalid_encrypted_content, strip_encrypted_reasoning
from transformers.errors import ProxyError, RequestError, stream_error
from transformers.masking import NO_SECRETS, SecretMask
from transformers.events import Finish
from transformers.request_c2r import chat_to_responses, toolinfo_from_chat
from transformers.request_check import check_integers, check_shapes, check_values
from transformers.request_quirks import prepare_chat, prepare_responses
from transformers.request_r2c import responses_to_chat
from transformers.responses_decode import ResponsesStreamDecoder, decode_response
from transformers.responses_encode import ResponsesStreamEncoder, encode_response
from transformers.tool_stage import ToolStage, needed

# fields of a Responses request echoed on the response object (the SDK's Response type)
_ECHO = ("instructions", "tools", "tool_choice", "parallel_tool_calls", "reasoning", "text", "metadata",
         "max_output_tokens", "temperature", "top_p", "presence_penalty", "frequency_penalty", "top_logprobs",
         "max_tool_calls", "safety_identifier", "prompt_cache_key")
# only true when the upstream itself speaks Responses (a Chat upstream stores nothing)
_ECHO_SAME_PROTOCOL = ("store", "truncation", "previous_response_id", "service_tier", "background")

_TYPES: dict[str, dict[str, tuple[type, ...]]] = {
    "chat": {"model": (str,), "messages": (list,), "stream": (bool,), "tools": (list,), "stream_options": (dict,),
             "max_tokens": (int,), "max_completion_tokens": (int,), "n": (int,)},
    "responses": {"model": (str,), "input": (str, list), "stream": (bool,), "tools": (list,),
                  "instructions": (str,), "max_output_tokens": (int,), "reasoning": (dict,), "text": (dict,)},
}
_REQUIRED = {"chat": ("model", "messages"), "responses": ("model",)}


def check_body(raw: bytes, protocol: str) -> dict[str, Any]:
    """Parse and type-check the fields the proxy relies on; everything else passes through."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        check_integers(raw)  # an integer too long even for a double: name it
        raise RequestError(f"the request body is not valid JSON: {e}", param=None, code="invalid_json") from None
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object", code="invalid_json")
    check_values(raw, body)  # nesting depth, integers beyond 64 bits
    for name in _REQUIRED[protocol]:
        if body.get(name) is None:
            raise RequestError(f"missing required parameter: '{name}'", param=name, code="missing_required_parameter")
    for name, types in _TYPES[protocol].items():
        v = body.get(name)
        if v is not None and (not isinstance(v, types) or (isinstance(v, bool) and bool not in types)):
            want = " or ".join({str: "string", list: "array", bool: "boolean", dict: "object", int: "integer"}[t] for t in types)
            raise RequestError(f"invalid type for '{name}': expected {want}", param=name, code="invalid_type")
    if protocol == "responses" and body.get("input") is None and not body.get("previous_response_id"):
        raise RequestError("missing required parameter: 'input'", param="input", code="missing_required_parameter")
    check_shapes(body, protocol)  # the fields the proxy reads, down to content parts and tools
    return body


@dataclass(slots=True)
class Prepared:
    request_id: str
    client: str  # chat | responses
    upstream: str  # chat | responses
    route: Route
    ctx: Ctx
    stream: bool
    upstream_body: bytes
    include_usage: bool
    echo: dict[str, Any]
    incomplete_as_completed: bool
    started: float
    route_name: str
    headers: dict[str, str] = field(default_factory=dict)
    forward_headers: dict[str, str] = field(default_factory=dict)
    keepalive: float = 15.0  # seconds of upstream silence before a heartbeat (0 = never)
    secrets: SecretMask = NO_SECRETS  # masks the configured secrets in upstream text


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
) -> Prepared:
    body = check_body(raw, client)
    model = body["model"]
    route = router.resolve(model)
    if route is None:
        raise ProxyError(404, f"The model '{model}' does not exist or you do not have access to it.",
                         code="model_not_found", param="model")
    upstream = route.provider.protocol_for(client)
    ctx = Ctx(
        quirks=route.quirks,
        upstream_model=route.upstream_model,
        public_model=route.public_model,
        max_output_tokens=route.info.max_output_tokens,
        envelope_key=envelope_key,
    )
    stream = bool(body.get("stream"))
    if client == "responses":
        echo = {k: body[k] for k in _ECHO if k in body}
        if upstream == "responses":
            echo.update((k, body[k]) for k in _ECHO_SAME_PROTOCOL if k in body)
        if upstream == "chat":
            if body.get("previous_response_id"):
                # a Chat upstream stores nothing and neither does the proxy: answering without
                # the earlier turns would be a silently wrong answer
                raise RequestError(
                    "previous_response_id is not supported for this model (its upstream speaks Chat "
                    "Completions and the proxy keeps no conversation state); send the whole conversation "
                    "in 'input' with store=false, as Codex does",
                    param="previous_response_id", code="unsupported_parameter")
            out = prepare_chat(responses_to_chat(body, ctx), ctx, translated=True)
        else:
            out = prepare_responses(body, ctx, translated=False)
    else:
        echo = {}
        if upstream == "responses":
            out = prepare_responses(chat_to_responses(body, ctx), ctx, translated=True)
        else:
            ctx.tools = toolinfo_from_chat(body.get("tools"))
            out = prepare_chat(body, ctx, translated=False)
    out["stream"] = stream
    include_usage = bool((body.get("stream_options") or {}).get("include_usage")) if client == "chat" else True
    headers: dict[str, str] = {}
    if ctx.tools.dropped:
        headers["x-switchboard-dropped-tools"] = header_list(ctx.tools.dropped)
    ua = safe_header_value(client_headers.get("user-agent"))
    fwd = {"user-agent": ua} if ua else {}
    return Prepared(
        request_id=request_id, client=client, upstream=upstream, route=route, ctx=ctx, stream=stream,
        upstream_body=orjson.dumps(out), include_usage=include_usage, echo=echo,
        incomplete_as_completed=incomplete_as_completed, started=started, keepalive=keepalive,
        route_name="/v1/chat/completions" if client == "chat" else "/v1/responses",
        headers=headers, forward_headers=fwd, secrets=secrets,
    )


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


class Chain:
    """decoder → [stage] → encoder, bytes out.  Sans-IO pieces, glued without awaits.

    Guard (an upstream is untrusted): an exception raised while an upstream event goes
    through the pieces (decoder, tool stage, encoder, serialization) never escapes.  It
    becomes the protocol's failure terminal with code ``upstream_bad_event`` (Responses
    ``error`` + ``response.failed``; Chat an error chunk), exactly once and only if no
    terminal went out yet, and the chain is ``broken``: later feeds, ``end()`` and
    heartbeats produce nothing, and ``finished`` tells the app to stop reading.  The
    terminal goes through the encoder's own Finish path while that still works; when it
    raises too, or yields nothing (the encoder believes it already ended), the encoder's
    ``abort`` builds it from nothing.  The stages themselves reject malformed input as data;
    the guard is for what no rule foresaw."""

    __slots__ = ("p", "decoder", "stage", "encoder", "parser", "terminal", "finished", "broken",
                 "_done_sent", "_closed", "_chat")

    def __init__(self, p: Prepared) -> None:
        self.p = p
        ctx = p.ctx
        self.decoder = ChatStreamDecoder(ctx) if p.upstream == "chat" else ResponsesStreamDecoder(ctx)
        self.stage = ToolStage(ctx, p.client) if p.upstream == "chat" and needed(ctx, p.client) else None
        self._chat = p.client == "chat"
        if self._chat:
            self.encoder: Any = ChatStreamEncoder(ctx, include_usage=p.include_usage)
        else:
            self.encoder = ResponsesStreamEncoder(ctx, incomplete_as_completed=p.incomplete_as_completed, request_echo=p.echo)
        self.parser = sse.SSEParser()
        self.terminal = ""
        self.finished = False  # the decoder has ended: nothing more to read upstream
        self.broken = False  # the guard fired: nothing more goes out
        self._done_sent = False
        self._closed = False  # the client's terminal went out

    def _encode(self, events: list[Any], out: list[bytes]) -> None:
        if self.stage is not None:
            staged: list[Any] = []
            for ev in events:
                staged.extend(self.stage.feed(ev))
            events = staged
        enc = self.encoder
        chat = self._chat
        for ev in events:
            fin = type(ev) is Finish
            if fin and not self._closed:
                self.terminal = ev.status
                if ev.error and self.p.secrets:
                    ev.error = mask_error(ev.error, self.p.secrets)
            for obj in enc.feed(ev):
                if chat:
                    out.append(b"data: " + orjson.dumps(obj) + b"\n\n")
                else:
                    out.append(b"event: " + obj["type"].encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n")
            if fin:
                self._closed = True
            elif not self._closed and (enc.failed if chat else enc.done):
                # the encoder ended the stream itself (an argument mismatch, an item it cannot write)
                self._closed = True
                self.terminal = "failed"

    def feed(self, chunk: bytes) -> bytes:
        if self.broken:
            return b""
        out: list[bytes] = []
        decoder = self.decoder
        try:
            for ev in self.parser.feed(chunk):
                self._event(ev.data, decoder, out)
                if self.broken:
                    break
        except sse.SSEOverflow as e:
            self._crash(out, e, "upstream_bad_event", str(e))
        except Exception as e:
            self._crash(out, e)
        return b"".join(out)

    def replay(self, obj: dict[str, Any]) -> bytes:
        """A whole answer object (an upstream that answered a stream request without
        streaming) as the client's complete stream: the events its stream would have given."""
        out: list[bytes] = []
        try:
            p = self.p
            events = decode_chat_completion(obj, p.ctx) if p.upstream == "chat" else decode_response(obj, p.ctx)
            self._encode(events, out)
            self.finished = True
            if self.stage is not None:
                self._encode_stage_end(out)
        except Exception as e:
            self._crash(out, e)
        return b"".join(out) + self.end()

    def _event(self, data: str, decoder: Any, out: list[bytes]) -> None:
        if data == "[DONE]":
            self._end_decoder(out)
            return
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            out.extend(self.fail("upstream_bad_event", "the upstream sent an event that is not JSON"))
            return
        if not isinstance(obj, dict):
            out.extend(self.fail("upstream_bad_event", "the upstream sent an event that is not a JSON object"))
            return
        self._encode(decoder.feed(obj), out)

    def end(self) -> bytes:
        out: list[bytes] = []
        if not self.broken:
            try:
                for ev in self.parser.end():
                    self._event(ev.data, self.decoder, out)
                    if self.broken:
                        break
                else:
                    self._end_decoder(out)
                    tail = self.encoder.end()
                    if tail:
                        out.extend(self._serialize(tail))
                        self._closed = True
            except Exception as e:
                self._crash(out, e)
        # a Chat stream ends with [DONE] unless it ended with an error chunk (also when the
        # guard fired after the finish chunk went out)
        if self._chat and not self.encoder.failed and not self._done_sent:
            self._done_sent = True
            out.append(sse.DONE)
        return b"".join(out)

    def _end_decoder(self, out: list[bytes]) -> None:
        if self.finished:
            return
        self.finished = True
        self._encode(self.decoder.end(), out)
        if self.stage is not None:
            self._encode_stage_end(out)

    def _encode_stage_end(self, out: list[bytes]) -> None:
        events = self.stage.end()  # type: ignore[union-attr]
        stage, self.stage = self.stage, None
        try:
            self._encode(events, out)
        finally:
            self.stage = stage

    def _serialize(self, objs: list[dict[str, Any]]) -> list[bytes]:
        if self._chat:
            return [b"data: " + orjson.dumps(o) + b"\n\n" for o in objs]
        return [b"event: " + o["type"].encode() + b"\ndata: " + orjson.dumps(o) + b"\n\n" for o in objs]

    def heartbeat(self) -> bytes:
        """What to send during a long upstream silence: a real Responses event (Codex's idle
        timer ignores SSE comments), an SSE comment for Chat clients."""
        if self.broken:
            return b""
        if self._chat:
            return b"" if self.terminal else sse.encode_comment()
        try:
            return b"".join(self._serialize(self.encoder.heartbeat()))
        except Exception:  # nothing worth failing the stream for: the next event will tell
            return b""

    def fail(self, code: str, message: str) -> list[bytes]:
        """Inject a terminal failure (mid-stream upstream fault) into the encoder."""
        if self.terminal or self.broken:
            return []
        out: list[bytes] = []
        try:
            self._encode([Finish("failed", error=stream_error(code, message))], out)
        except Exception as e:
            self._crash(out, e, code, message)
        return out

    def _crash(self, out: list[bytes], exc: BaseException, code: str = "upstream_bad_event",
               message: str = "the upstream sent an event the proxy could not process") -> None:
        """The guard (see the class docstring): the failure terminal, once, then nothing."""
        self.broken = True
        self.finished = True
        log.warning("stream_guard", request_id=self.p.request_id, error=type(exc).__name__, code=code, exc_info=exc)
        if self._closed:
            return
        self._closed = True
        self.terminal = "failed"
        err = stream_error(code, message)
        enc = self.encoder
        try:
            objs = enc.feed(Finish("failed", error=err))
            if objs:
                out.extend(self._serialize(objs))
                return
        except Exception:
            pass
        out.extend(self._serialize(enc.abort(err)))


def _is_json(ctype: str | None) -> bool:
    media = (ctype or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ProxyError(502, "the upstream answered with a body that is not JSON", type="upstream_error", code="upstream_bad_response") from None
    if not isinstance(obj, dict):
        raise ProxyError(502, "the upstream answered with a body that is not a JSON object", type="upstream_error", code="upstream_bad_response")
    return obj


def full_response(p: Prepared, body: bytes) -> tuple[int, bytes]:
    """Non-streaming: decode the upstream object, run the same stages, encode the client object.

    An upstream body is untrusted: one the decoders reject (``upstream_bad_response``,
    ``upstream_bad_event``), and any exception while decoding or encoding it, is a 502
    ``upstream_bad_response``, never a 500."""
    obj = _json_object(body)
    bad = ("upstream_bad_response", "upstream_bad_event")
    ctx = p.ctx
    try:
        events = decode_chat_completion(obj, ctx) if p.upstream == "chat" else decode_response(obj, ctx)
        if p.upstream == "chat" and needed(ctx, p.client):
            stage = ToolStage(ctx, p.client)
            staged: list[Any] = []
            for ev in events:
                staged.extend(stage.feed(ev))
            staged.extend(stage.end())
            events = staged
        if p.client == "chat":
            result = encode_chat_completion(events, ctx)
            err = result.get("error")
        else:
            result = encode_response(events, ctx, incomplete_as_completed=p.incomplete_as_completed, request_echo=p.echo)
            err = result.get("error") if result.get("status") == "failed" else None
            if not (isinstance(err, dict) and err.get("code") in bad):
                err = None  # an upstream's own failure is a failed response object, as it came
                if isinstance(result.get("error"), dict):
                    result["error"] = mask_error(result["error"], p.secrets)
        out = None if err else orjson.dumps(result)
    except Exception as e:
        log.warning("upstream_bad_response", request_id=p.request_id, error=type(e).__name__, exc_info=e)
        raise ProxyError(502, "the upstream answered with a body the proxy could not process",
                         type="upstream_error", code="upstream_bad_response") from None
    if err:
        message = p.secrets(str(err.get("message") or "upstream failure"))
        if err.get("code") in bad:
            raise ProxyError(502, message, type="upstream_error", code="upstream_bad_response")
        raise failed_answer_error(err, p.secrets)
    return 200, out  # type: ignore[return-value]


def new_request_id() -> str:
    # 128 random bits as 32 hex digits, as uuid4().hex was (without building a UUID object)
    return "req_" + os.urandom(16).hex()


class _Target:
    """One provider endpoint's request template, built once: the URL with its query and the
    headers exactly as ``client.build_request`` merges them (the client's defaults, then
    content-type, accept, the forwarded client headers and the provider's headers, in that
    order, a later one winning).  ``request()`` then costs one ``httpx.Request``, where
    ``build_request`` parsed the URL and merged the headers again for every request."""

    __slots__ = ("provider", "url", "headers", "forward", "timeout")

    def __init__(self, prov: Any, protocol: str, stream: bool, forward: tuple[str, ...]) -> None:
        self.provider = prov  # keeps the id() in the _TARGETS key alive
        client = prov.client
        self.url = client.build_request("POST", prov.url(protocol), params=prov.cfg.query or None).url
        headers = httpx.Headers(client.headers)
        # forwarded values are filled in per request, in place (Headers.__setitem__)
        headers.update({"content-type": "application/json", "accept": "text/event-stream" if stream else "application/json",
                        **dict.fromkeys(forward, ""), **prov.headers})
        if stream:  # streams are read raw (no decoder in the loop): ask for them uncompressed
            headers["accept-encoding"] = "identity"
        self.headers = headers
        self.forward = tuple(k for k in forward if k not in prov.headers)  # the provider's own win
        self.timeout = prov.timeout.as_dict()

    def request(self, payload: bytes, forward: dict[str, str]) -> httpx.Request:
        headers = self.headers
        if self.forward:
            headers = headers.copy()
            for k in self.forward:
                headers[k] = forward[k]
        return httpx.Request("POST", self.url, content=payload, headers=headers, extensions={"timeout": self.timeout})


_TARGETS: dict[tuple[int, str, bool, tuple[str, ...]], _Target] = {}


def _target(prov: Any, protocol: str, stream: bool, forward: dict[str, str]) -> _Target:
    key = (id(prov), protocol, stream, tuple(forward))
    t = _TARGETS.get(key)
    if t is None or t.provider is not prov:
        t = _TARGETS[key] = _Target(prov, protocol, stream, key[3])
    return t


class ProxyResponse(Response):
    """ASGI response that performs the upstream exchange (see module docstring)."""

    def __init__(self, p: Prepared) -> None:  # no super().__init__: nothing is rendered up front
        self.p = p
        self.background = None
        self.started = False  # http.response.start sent (the app's catch-all can no longer answer)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        p = self.p
        prov = p.route.provider
        target = _target(prov, p.upstream, p.stream, p.forward_headers)
        status = 200
        ttfb = None
        terminal = ""
        me = asyncio.current_task()
        watch = asyncio.ensure_future(_wait_disconnect(receive))
        cancelled_by_client = False

        def on_disconnect(t: asyncio.Future[Any]) -> None:
            nonlocal cancelled_by_client
            if not t.cancelled() and me is not None:
                cancelled_by_client = True
                me.cancel()

        watch.add_done_callback(on_disconnect)
        resp: httpx.Response | None = None
        drain: Any = None
        ticker: asyncio.Future[Any] | None = None
        try:
            payload = p.upstream_body
            for attempt in (0, 1):
                resp = await _open(prov, target.request(payload, p.forward_headers))
                if resp.status_code < 400:
                    break
                body = await _read_capped(resp, _ERROR_BODY_MAX)
                await resp.aclose()
                retry = None
                if attempt == 0 and p.upstream == "responses" and p.ctx.on("encrypted_content_retry") \
                        and is_invalid_encrypted_content(resp.status_code, body):
                    retry = strip_encrypted_reasoning(orjson.loads(payload))
                if retry is None:
                    raise upstream_error(resp.status_code, body, resp.headers, prov.name, p.secrets)
                p.ctx.repaired("encrypted_content_retry")
                payload = orjson.dumps(retry)
            ttfb = time.perf_counter() - p.started
            base_headers = [(b"x-request-id", p.request_id.encode())] + [(k.encode(), v.encode()) for k, v in p.headers.items()]
            whole: dict[str, Any] | None = None
            if not p.stream or _is_json(resp.headers.get("content-type")):
                # a whole JSON answer (also to a stream request: an error object, or an
                # upstream that ignored `stream`)
                try:
                    body = await _read_capped(resp, _BODY_MAX)
                except httpx.HTTPError as e:
                    raise ProxyError(502, f"upstream {prov.name} failed while sending its answer: {type(e).__name__}",
                                     type="upstream_error", code="upstream_stream_error") from None
                err = error_in_ok_body(body, resp.headers, prov.name, p.secrets)
                if err is not None:
                    raise err
                if p.stream:
                    whole = _json_object(body)
            if not p.stream:
                status, out = full_response(p, body)
                self.started = True
                await send({"type": "http.response.start", "status": status,
                            "headers": [(b"content-type", b"application/json"), *base_headers]})
                await send({"type": "http.response.body", "body": out})
                terminal = "completed"
                return
            chain = Chain(p)
            rest = None
            self.started = True
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
                (b"x-accel-buffering", b"no"), *base_headers]})
            if whole is not None:
                await send({"type": "http.response.body", "body": chain.replay(whole), "more_body": False})
                terminal = chain.terminal or "failed"
                return
            raw = resp.aiter_raw()  # one iterator: the rest of the body is drained after the break
            pending: list[bytes] = []  # client bytes held back (coalescing: see _FLUSH_BYTES)
            size = 0
            since = 0.0  # time of the last timed send
            clock = time.perf_counter
            waiting: list[Any] = [False, clock()]  # [blocked on the upstream, since when]
            if p.keepalive > 0:
                ticker = asyncio.ensure_future(_heartbeats(chain, send, p.keepalive, waiting))
            try:
                while True:
                    # Run the next read eagerly: it completes at once while upstream chunks are
                    # already buffered; only then is the client's output held back.
                    step = raw.__anext__()
                    try:
                        blocked = step.send(None)
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
                    out = chain.feed(chunk)
                    if chain.finished or (chain.terminal and p.client == "responses"):
                        if out:
                            pending.append(out)
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
                out = chain.end()
            except httpx.ReadTimeout:
                out = b"".join(chain.fail("upstream_idle_timeout", f"upstream {prov.name} was silent for {prov.timeout.read:g}s")) + chain.end()
            except httpx.HTTPError as e:
                out = b"".join(chain.fail("upstream_stream_error", f"upstream {prov.name} stream failed: {type(e).__name__}")) + chain.end()
            if ticker is not None:
                ticker.cancel()
                ticker = None
            terminal = chain.terminal or "failed"
            pending.append(out)
            await send({"type": "http.response.body", "body": b"".join(pending), "more_body": False})
            drain = rest
        except ProxyError as e:
            status = e.status
            terminal = "error"
            metrics.inc("switchboard_upstream_errors_total", provider=prov.name, code=str(e.code))
            self.started = True
            await _send_error(send, e, p.request_id)
        except asyncio.CancelledError:
            if not cancelled_by_client:
                raise
            terminal = "client_cancel"
            status = 499
        finally:
            if ticker is not None:
                ticker.cancel()
            watch.remove_done_callback(on_disconnect)
            watch.cancel()
            _finish_log(p, status, ttfb, terminal)
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


async def _heartbeats(chain: Chain, send: Any, interval: float, waiting: list[Any]) -> None:
    """While the upstream is silent for ``interval`` seconds, send the client a heartbeat
    (PAINS 21): long reasoning gaps must not trip the client's idle timeout.  Runs only while
    the stream loop is blocked on an upstream read, so it never interleaves with its sends."""
    clock = time.perf_counter
    while True:
        await asyncio.sleep(interval)
        if waiting[0] and clock() - waiting[1] >= interval:
            beat = chain.heartbeat()
            if beat:
                waiting[1] = clock()
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
        raise ProxyError(504, f"upstream {prov.name} sent no response within {prov.first_byte:g}s",
                         type="upstream_error", code="upstream_timeout") from None
    except httpx.TimeoutException:
        raise ProxyError(504, f"upstream {prov.name} timed out", type="upstream_error", code="upstream_timeout") from None
    except httpx.HTTPError as e:
        raise ProxyError(502, f"upstream {prov.name} is unreachable: {type(e).__name__}",
                         type="upstream_error", code="upstream_unreachable") from None


# Coalescing.  Each upstream chunk used to cost one ASGI send and one socket write; when
# several upstream chunks are already buffered (a fast upstream, or the proxy behind), their
# output now goes out together: held back while the next read completes at once, sent as
# soon as a read would wait, or when _FLUSH_BYTES are pending, or _FLUSH_SECONDS after the
# last send (so at most one send per _FLUSH_SECONDS during a burst: an event waits that long
# at most).  An output with nothing sent for _FLUSH_SECONDS goes out at once: the first
# event, and every event at a token rate (chunks arriving one by one), go out as before.
_FLUSH_BYTES = 16 * 1024
_FLUSH_SECONDS = 0.0001


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
    async for chunk in resp.aiter_bytes():
        size += len(chunk)
        if size > limit:
            if limit == _ERROR_BODY_MAX:
                parts.append(chunk[: limit - (size - len(chunk))])
                break
            raise ProxyError(502, f"the upstream's answer is larger than {limit} bytes", type="upstream_error",
                             code="upstream_bad_response")
        parts.append(chunk)
    return b"".join(parts)


async def _drain(raw: Any) -> None:
    """Read what is left of an upstream body after the terminal event (the client already has
    its whole answer): a body read to its end lets httpcore put the connection back in the pool
    instead of closing it.  Bounded in bytes and time; past either bound the connection is
    simply closed, as before."""
    size = 0
    try:
        async with asyncio.timeout(_DRAIN_SECONDS):
            async for chunk in raw:
                size += len(chunk)
                if size > _DRAIN_BYTES:
                    break
    except (TimeoutError, httpx.HTTPError):
        pass


async def _wait_disconnect(receive: Any) -> None:
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return


async def _send_error(send: Any, e: ProxyError, request_id: str) -> None:
    hdrs = [(b"content-type", b"application/json"), (b"x-request-id", request_id.encode())]
    hdrs += [(k.encode(), v.encode()) for k, v in e.headers.items()]
    await send({"type": "http.response.start", "status": e.status, "headers": hdrs})
    await send({"type": "http.response.body", "body": e.body(request_id)})


def _finish_log(p: Prepared, status: int, ttfb: float | None, terminal: str) -> None:
    dur = time.perf_counter() - p.started
    prov = p.route.provider.name
    metrics.inc("switchboard_requests_total", route=p.route_name, client=p.client, provider=prov, status=str(status))
    metrics.inc("switchboard_request_duration_seconds_sum", dur, route=p.route_name)
    if ttfb is not None:
        metrics.inc("switchboard_ttfb_seconds_sum", ttfb, route=p.route_name)
    if p.stream:
        metrics.inc("switchboard_stream_outcomes_total", outcome=terminal or "none", client=p.client)
    repairs = p.ctx.repairs
    if repairs:
        for rule in repairs:
            metrics.inc("switchboard_repairs_total", rule=rule, provider=prov)
        log.debug("repairs", request_id=p.request_id, provider=prov, rules=sorted(set(repairs)))
    if p.ctx.tools.dropped:
        log.warning("hosted_tools_dropped", request_id=p.request_id, provider=prov, tools=p.ctx.tools.dropped)
    log.info(
        "request",
        request_id=p.request_id, route=p.route_name, client_protocol=p.client, provider=prov,
        upstream_protocol=p.upstream, model=p.route.public_model, upstream_model=p.route.upstream_model,
        stream=p.stream, status=status, duration_ms=round(dur * 1000, 2),
        ttfb_ms=round(ttfb * 1000, 2) if ttfb is not None else None, terminal=terminal,
    )
