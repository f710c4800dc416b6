"""Scripted Gemini upstream: a loopback server that speaks Gemini's OpenAI-compatible Chat
endpoint, refuses what Gemini refuses, signs its tool calls, and records every request.

Theory of operation
-------------------
``GeminiUpstream(turns)`` serves ``POST {base}/chat/completions`` with ``base`` =
``http://127.0.0.1:<port>/v1beta/openai`` (``base_url``: what a ``profile: gemini`` provider
takes, the proxy appends ``/chat/completions``).  It reuses ``ScriptedUpstream``'s server
(uvicorn in a daemon thread, ``start()``/``stop()``, ``set_script``, ``requests``).

Every request is first checked as Gemini checks it; a refusal is Gemini's own shape, HTTP
400 with a JSON *array* ``[{"error": {"code": 400, "message": ..., "status":
"INVALID_ARGUMENT"}}]``, consumes no turn and is noted in ``rejections``:

==========================================  ================================================
what the request has                        Gemini's message
==========================================  ================================================
a top-level field Gemini's schema lacks     ``Invalid JSON payload received. Unknown name
(``REFUSED_FIELDS``: ``store``,             "store": Cannot find field.``
``metadata``, ``prompt_cache_key``,
``reasoning``…)
a reasoning key on a message                ``... Unknown name "reasoning_content" at
(``reasoning_content``, ``reasoning``)      'messages[3]': Cannot find field.``
``additionalProperties`` / ``$schema``      ``... Unknown name "additionalProperties" at
anywhere in a tool's parameter schema       'tools[0].function.parameters': ...``
``reasoning_effort`` not low/medium/high/   ``Invalid reasoning_effort: minimal. ...``
none; ``medium`` or ``none`` to a           ``Thinking level MEDIUM is not supported for
``gemini-3*pro*`` model                     this model.``
a thought signature this upstream never     ``Thought signature is not valid.``: on any
issued (not the escape value)               call, of any turn
the FIRST call of an assistant message of   ``Function call is missing a thought_signature
the current turn (after the last ``user``   in functionCall parts. ... function call
message) without a signature                `default_api:<name>` , position <n>. ...``
==========================================  ================================================

The escape value ``skip_thought_signature_validator`` (``ESCAPE``) is accepted in place of a
signature, as Gemini documents.

A script is a list of ``GeminiTurn``\\ s (text and/or ``Call``\\ s).  An accepted request
consumes the next turn (``when(request) -> bool``: a miss answers ``PREDICATE-MISS: <label>``
as text and is noted in ``errors``).  The answer is built then: each call gets an id
``function-call-<19 digits>`` and the FIRST call of the answer a fresh signature (300 to
600 random bytes, standard base64), kept in ``issued`` (turn index, call id, name,
signature); every call is kept in ``calls`` (turn index, call id, name).  Streamed as Gemini streams: ``role`` on every delta, the text in pieces, each
tool call whole in one delta (id, name, the whole arguments, ``index``; the first call's
``extra_content.google.thought_signature``), then the finish chunk carrying ``usage``, then
``[DONE]``.  Unstreamed: one ``chat.completion`` with the same calls.  A request past the
script's end is a 400 ``script exhausted`` (in ``errors``).

Readers: ``assistant_steps(req)`` (each assistant message with calls: index, in the current
turn or not, ``[(call id, name, signature or None)]``), ``signature_in``.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from scripted_upstream import Recorded, ScriptedUpstream, _decode_body, dumps
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

__all__ = [
    "ESCAPE",
    "Call",
    "GeminiTurn",
    "GeminiUpstream",
    "Issued",
    "assistant_steps",
    "signature_in",
]

ESCAPE = "skip_thought_signature_validator"  # Gemini's documented escape value
# top-level fields Gemini's OpenAI-compatible endpoint refuses ("Cannot find field")
REFUSED_FIELDS = (
    "store",
    "metadata",
    "prompt_cache_key",
    "prompt_cache_retention",
    "reasoning",
    "service_tier",
    "safety_identifier",
    "user",
    "verbosity",
    "thinking",
    "top_k",
)
MESSAGE_REFUSED = ("reasoning_content", "reasoning")  # on a message
SCHEMA_REFUSED = ("additionalProperties", "$schema")  # in a tool's parameters
EFFORTS = ("low", "medium", "high", "none")
DOCS = "Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details."


@dataclass
class Call:
    name: str
    arguments: dict | str  # a dict is sent as its JSON, a str as is


@dataclass
class GeminiTurn:
    text: str = ""
    calls: list[Call] = field(default_factory=list)
    when: Callable[[dict], bool] | None = None
    label: str = ""
    usage: dict = field(default_factory=lambda: {"prompt_tokens": 120, "completion_tokens": 24, "total_tokens": 144})


@dataclass(frozen=True)
class Issued:
    turn: int
    call_id: str
    name: str
    signature: str


def new_signature() -> str:
    """What Gemini's signatures look like: hundreds of bytes of opaque standard base64."""
    return base64.b64encode(secrets.token_bytes(300 + secrets.randbelow(301))).decode()


def new_call_id() -> str:
    return "function-call-" + "".join(str(secrets.randbelow(10)) for _ in range(19))


def signature_in(tc: Any) -> str | None:
    """A tool call's ``extra_content.google.thought_signature``, or None."""
    extra = tc.get("extra_content") if isinstance(tc, dict) else None
    google = extra.get("google") if isinstance(extra, dict) else None
    sig = google.get("thought_signature") if isinstance(google, dict) else None
    return sig if isinstance(sig, str) and sig else None


def current_turn_start(messages: list) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], dict) and messages[i].get("role") == "user":
            return i + 1
    return 0


def assistant_steps(req: dict) -> list[tuple[int, bool, list[tuple[str, str, str | None]]]]:
    """Each assistant message with tool calls: (index, in the current turn, [(call id, name,
    signature or None)])."""
    messages = req.get("messages") or []
    start = current_turn_start(messages)
    out = []
    for i, m in enumerate(messages):
        if isinstance(m, dict) and m.get("role") == "assistant" and m.get("tool_calls"):
            calls = [(tc.get("id"), (tc.get("function") or {}).get("name"), signature_in(tc)) for tc in m["tool_calls"]]
            out.append((i, i >= start, calls))
    return out


def _schema_refused(node: Any, path: str) -> tuple[str, str] | None:
    """The first refused keyword in a JSON schema (walking its sub-schemas), with where."""
    if not isinstance(node, dict):
        return None
    for k in SCHEMA_REFUSED:
        if k in node:
            return k, path
    for k in ("properties", "$defs", "definitions"):
        sub = node.get(k)
        if isinstance(sub, dict):
            for name, s in sub.items():
                found = _schema_refused(s, f"{path}.{k}[{name!r}]")
                if found:
                    return found
    for k in ("items", "not"):
        found = _schema_refused(node.get(k), f"{path}.{k}")
        if found:
            return found
    for k in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for j, s in enumerate(node.get(k) or [] if isinstance(node.get(k), list) else []):
            found = _schema_refused(s, f"{path}.{k}[{j}]")
            if found:
                return found
    return None


def _unknown(name: str, at: str | None = None) -> str:
    where = f" at '{at}'" if at else ""
    return f'Invalid JSON payload received. Unknown name "{name}"{where}: Cannot find field.'


class GeminiUpstream(ScriptedUpstream):
    """Loopback Gemini OpenAI-compatible endpoint playing ``turns`` (``GeminiTurn``)."""

    def __init__(self, turns: Iterable[GeminiTurn] = (), *, host: str = "127.0.0.1", port: int = 0, name: str = ""):
        super().__init__(turns, host=host, port=port, name=name or "gemini")  # type: ignore[arg-type]
        self.issued: list[Issued] = []  # the signed calls (the first of each answer)
        self.calls: list[tuple[int, str, str]] = []  # every call answered: (turn, call id, name)
        self.rejections: list[tuple[int, str]] = []  # (index in requests, Gemini's message)

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1beta/openai"

    def set_script(self, turns: Iterable[GeminiTurn]) -> None:  # type: ignore[override]
        with self._lock:
            self.issued = []
            self.calls = []
            self.rejections = []
        super().set_script(turns)  # type: ignore[arg-type]

    @property
    def signatures(self) -> set[str]:
        return {i.signature for i in self.issued}

    def issued_for(self, call_id: str) -> str | None:
        found = [i.signature for i in self.issued if i.call_id == call_id]
        return found[0] if found else None

    def describe(self) -> str:
        lines = [super().describe()]
        for i in self.issued:
            lines.append(f"  issued turn={i.turn} {i.call_id} {i.name} sig={i.signature[:16]}…({len(i.signature)})")
        for n, msg in self.rejections:
            lines.append(f"  REJECTED request #{n}: {msg}")
        return "\n".join(lines)

    # ---------------------------------------------------------------- Gemini's checks
    def check(self, body: dict) -> str | None:
        """Gemini's 400 message for ``body``, or None when Gemini would take it."""
        for k in REFUSED_FIELDS:
            if k in body:
                return _unknown(k)
        effort = body.get("reasoning_effort")
        if effort is not None and effort not in EFFORTS:
            return f"Invalid reasoning_effort: {effort}. Valid values are: high, low, medium, none"
        model = str(body.get("model") or "")
        if effort in ("medium", "none") and fnmatchcase(model, "gemini-3*pro*"):  # it thinks at low or high only
            return f"Thinking level {str(effort).upper()} is not supported for this model."
        for i, t in enumerate(body.get("tools") or []):
            params = ((t or {}).get("function") or {}).get("parameters")
            found = _schema_refused(params, f"tools[{i}].function.parameters")
            if found:
                return _unknown(found[0], found[1])
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return "* GenerateContentRequest.contents: contents is not specified"
        for i, m in enumerate(messages):
            for k in MESSAGE_REFUSED:
                if isinstance(m, dict) and k in m:
                    return _unknown(k, f"messages[{i}]")
        issued = self.signatures
        start = current_turn_start(messages)
        position = 0  # Gemini's contents: the messages but the system ones
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") in ("system", "developer"):
                continue
            position += 1
            calls = m.get("tool_calls") if m.get("role") == "assistant" else None
            if not calls:
                continue
            for tc in calls:
                sig = signature_in(tc)
                if sig is not None and sig != ESCAPE and sig not in issued:
                    return "Thought signature is not valid."
            if i >= start and signature_in(calls[0]) is None:
                name = ((calls[0] or {}).get("function") or {}).get("name")
                return (
                    "Function call is missing a thought_signature in functionCall parts. This is required for tools "
                    "to work correctly, and missing thought_signature may lead to degraded model performance. "
                    f"Additional data, function call `default_api:{name}` , position {position}. {DOCS}"
                )
        return None

    # ---------------------------------------------------------------- serving
    async def _handle(self, request: Request) -> Response:
        raw = _decode_body(await request.body(), request.headers.get("content-encoding", ""))
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        path = request.url.path
        rec = Recorded(
            request.method,
            path,
            request.url.query,
            {k.lower(): v for k, v in request.headers.items()},
            raw,
            parsed,
            None,
            None,
            time.time(),
        )
        with self._lock:
            self.requests.append(rec)
            n = len(self.requests) - 1
        if request.method == "GET" and path.endswith("/models"):
            return JSONResponse({"object": "list", "data": []})
        if request.method != "POST" or not path.endswith("/chat/completions"):
            return self._error(404, f"Method not found: {request.method} {path}", "NOT_FOUND")
        if not isinstance(parsed, dict):
            return self._reject(n, "Invalid JSON payload received.")
        why = self.check(parsed)
        if why is not None:
            return self._reject(n, why)
        with self._lock:
            idx = self._next
            if idx >= len(self.turns):
                self.errors.append(f"script exhausted: request #{n}")
                return self._error(400, "scripted gemini upstream: script exhausted", "INVALID_ARGUMENT")
            self._next += 1
            turn: GeminiTurn = self.turns[idx]  # type: ignore[assignment]
            rec.turn = idx
        if turn.when is not None:
            try:
                ok = bool(turn.when(parsed))
            except Exception as exc:  # a broken predicate is a miss, with the reason
                ok = False
                self.errors.append(f"turn {idx} predicate raised {exc!r}")
            rec.matched = ok
            if not ok:
                self.errors.append(f"turn {idx} ({turn.label}): predicate not met")
                turn = GeminiTurn(text=f"PREDICATE-MISS: {turn.label}")
        calls = []
        for j, c in enumerate(turn.calls):
            args = c.arguments if isinstance(c.arguments, str) else dumps(c.arguments)
            tc: dict[str, Any] = {
                "id": new_call_id(),
                "type": "function",
                "function": {"name": c.name, "arguments": args},
            }
            with self._lock:
                self.calls.append((idx, tc["id"], c.name))
            if j == 0:  # Gemini signs the first call of a step only
                sig = new_signature()
                tc["extra_content"] = {"google": {"thought_signature": sig}}
                with self._lock:
                    self.issued.append(Issued(idx, tc["id"], c.name, sig))
            calls.append(tc)
        model = str(parsed.get("model") or "gemini-3-pro-preview")
        if parsed.get("stream"):
            return StreamingResponse(
                self._chunks(turn, calls, model),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache"},
            )
        msg: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
        if calls:
            msg["tool_calls"] = calls
        body = {
            "id": f"{uuid.uuid4().hex[:22]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": turn.usage,
        }
        return JSONResponse(body)

    @staticmethod
    async def _chunks(turn: GeminiTurn, calls: list[dict], model: str):
        cid = uuid.uuid4().hex[:22]
        created = int(time.time())

        def chunk(delta: dict, finish: str | None = None, usage: dict | None = None) -> bytes:
            c: dict[str, Any] = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": {"role": "assistant", **delta}, "finish_reason": finish}],
            }
            if usage is not None:
                c["usage"] = usage
            return f"data: {dumps(c)}\n\n".encode()

        text = turn.text
        for i in range(0, len(text), 16):
            yield chunk({"content": text[i : i + 16]})
        for j, tc in enumerate(calls):  # each call whole in one delta
            yield chunk({"tool_calls": [{**tc, "index": j}]})
        yield chunk({}, "tool_calls" if calls else "stop", turn.usage)
        yield b"data: [DONE]\n\n"

    def _reject(self, n: int, message: str) -> JSONResponse:
        with self._lock:
            self.rejections.append((n, message))
        return self._error(400, message, "INVALID_ARGUMENT")

    @staticmethod
    def _error(code: int, message: str, status: str) -> JSONResponse:
        return JSONResponse([{"error": {"code": code, "message": message, "status": status}}], code)
