"""Scripted upstream: a loopback model server that plays a conversation turn by turn.

Theory of operation
-------------------
A *script* is a list of ``Turn`` objects.  Every POST to ``/v1/chat/completions`` or
``/v1/responses`` (any prefix ending in those paths is accepted) consumes the next turn:

* if the request has ``"stream": true`` the turn's ``frames`` are written as SSE, one
  frame at a time (a frame is a ``dict`` -> JSON event, a ``str``/``bytes`` -> raw bytes
  written verbatim, or ``Delay(s)`` -> sleep), with an optional ``frame_delay`` between
  frames;
* otherwise the turn's ``body`` is answered as one JSON document (``status`` applies to
  both).  ``rechunk=n`` re-splits the serialised stream into n-byte writes (splits inside
  lines and inside UTF-8 characters), to exercise the proxy's SSE reassembly.

A turn may carry a predicate ``when(request_json) -> bool``; if it is false the turn's
``otherwise`` turn is played instead (and the miss is recorded in ``errors``).  A turn
with ``respond(request_json) -> Turn`` is built from the request (e.g. to call a tool under
whatever name the proxy advertised).  This is
how the Kimi seed behaviour is modelled: "answer turn 2 only if the history carries the
tool id verbatim, else answer with a reasoning-only empty turn".

Every request (method, path, query, headers, raw body, parsed JSON) is recorded in
``requests``; ``GET`` requests (Codex probes ``/models``) are recorded but answered with
an empty model list and never consume a turn.  A request after the end of the script is
answered ``400 script_exhausted`` and noted in ``errors``.

Builders at the bottom make the usual streams: ``chat_turn`` (Chat Completions chunks +
the equivalent non-stream body) and ``responses_turn`` (Responses events + body), both
with knobs for the quirks seen in the wild: Kimi ids ``functions.<name>:<idx>``, MiMo raw
apply_patch text in ``function.arguments``, Bedrock-Mantle id-less done items (``item_id``
plus a stray ``output_index`` inside the item, ids missing in ``completed.output``) and
late identity (function_call added without name; name/namespace arrive only in
``function_call_arguments.done`` / ``output_item.done``).

Runs in-process (``ScriptedUpstream(turns).start()`` serves from a daemon thread on
127.0.0.1, port 0 -> real port in ``.port``) or standalone:
``python tests/e2e/scripted_upstream.py --scenario NAME|FILE.json --port N``.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gzip
import json
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = [
    "Delay",
    "Turn",
    "Recorded",
    "ScriptedUpstream",
    "ToolCall",
    "chat_turn",
    "chat_chunks",
    "chat_body",
    "responses_turn",
    "responses_events",
    "responses_body",
    "sse",
    "history_tool_ids",
    "chat_history_carries_id",
    "responses_history_carries_id",
    "reasoning_only_chat_turn",
    "with_keepalives",
]


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


# --------------------------------------------------------------------------- script


@dataclass
class Delay:
    seconds: float


Frame = dict | str | bytes | Delay


@dataclass
class Turn:
    frames: list[Frame] | None = None  # stream answer
    body: Any = None  # non-stream answer (JSON-able)
    status: int = 200
    frame_delay: float = 0.0
    kind: str | None = None  # "chat" | "responses": how dict frames are framed
    when: Callable[[dict], bool] | None = None
    otherwise: Turn | None = None
    headers: dict[str, str] = field(default_factory=dict)
    label: str = ""
    rechunk: int = 0  # >0: re-split the whole byte stream into writes of this many bytes
    respond: Callable[[dict], Turn] | None = None  # build the turn from the request instead

    def to_json(self) -> dict:
        return {
            "label": self.label,
            "kind": self.kind,
            "status": self.status,
            "frame_delay": self.frame_delay,
            "frames": [
                {"delay": f.seconds} if isinstance(f, Delay) else (f.decode() if isinstance(f, bytes) else f)
                for f in (self.frames or [])
            ],
            "body": self.body,
            "rechunk": self.rechunk,
        }

    @classmethod
    def from_json(cls, d: dict) -> Turn:
        frames = []
        for f in d.get("frames") or []:
            if isinstance(f, dict) and set(f) == {"delay"}:
                frames.append(Delay(float(f["delay"])))
            else:
                frames.append(f)
        return cls(
            frames=frames,
            body=d.get("body"),
            status=int(d.get("status", 200)),
            frame_delay=float(d.get("frame_delay", 0.0)),
            kind=d.get("kind"),
            label=d.get("label", ""),
            rechunk=int(d.get("rechunk", 0)),
        )


def sse(frame: dict, kind: str) -> bytes:
    """One SSE frame. Responses events get an ``event:`` line, Chat chunks do not."""
    data = dumps(frame)
    if kind == "responses" and isinstance(frame.get("type"), str):
        return f"event: {frame['type']}\ndata: {data}\n\n".encode()
    return f"data: {data}\n\n".encode()


@dataclass
class Recorded:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    raw: bytes
    json: Any
    turn: int | None  # index of the turn played (None: GET / exhausted)
    matched: bool | None  # predicate outcome (None: no predicate)
    t: float

    @property
    def endpoint(self) -> str:
        if self.path.endswith("/chat/completions"):
            return "chat"
        if self.path.endswith("/responses"):
            return "responses"
        return self.path


def _decode_body(raw: bytes, encoding: str) -> bytes:
    enc = (encoding or "").lower().strip()
    if enc == "gzip":
        return gzip.decompress(raw)
    if enc == "deflate":
        return zlib.decompress(raw)
    if enc == "zstd":  # pragma: no cover - only if a client compresses
        import zstandard  # type: ignore

        return zstandard.ZstdDecompressor().decompress(raw, max_output_size=64 << 20)
    return raw


class ScriptedUpstream:
    """Loopback HTTP server playing ``turns``; use as a context manager or start()/stop()."""

    def __init__(self, turns: Iterable[Turn] = (), *, host: str = "127.0.0.1", port: int = 0, name: str = ""):
        self.turns: list[Turn] = list(turns)
        self.host = host
        self.port = port
        self.name = name
        self.requests: list[Recorded] = []
        self.errors: list[str] = []
        self._next = 0
        self._lock = threading.Lock()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.app = Starlette(
            routes=[
                Route("/{path:path}", self._handle, methods=["GET", "POST"]),
            ]
        )

    # ---------------------------------------------------------------- public API
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def model_requests(self) -> list[Recorded]:
        """POSTs to the model endpoints, in arrival order."""
        return [r for r in self.requests if r.method == "POST" and r.endpoint in ("chat", "responses")]

    @property
    def turns_played(self) -> int:
        return self._next

    def set_script(self, turns: Iterable[Turn]) -> None:
        with self._lock:
            self.turns = list(turns)
            self._next = 0
            self.requests.clear()
            self.errors.clear()

    def start(self, timeout: float = 10.0) -> ScriptedUpstream:
        config = uvicorn.Config(
            self.app,
            host=self.host,
            port=self.port,
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_keep_alive=30,
            loop="asyncio",
            http="h11",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=f"scripted-upstream-{self.name}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("scripted upstream failed to start")
            time.sleep(0.01)
        sock = self._server.servers[0].sockets[0]
        self.port = sock.getsockname()[1]
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> ScriptedUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def describe(self) -> str:
        """Human-readable log of what happened (for assertion messages)."""
        lines = [f"scripted upstream {self.name or ''} at {self.url}: {self._next}/{len(self.turns)} turns played"]
        for r in self.requests:
            lines.append(f"  {r.method} {r.path} turn={r.turn} matched={r.matched}")
        for e in self.errors:
            lines.append(f"  ERROR {e}")
        return "\n".join(lines)

    # ---------------------------------------------------------------- serving
    async def _handle(self, request: Request) -> Response:
        raw = await request.body()
        body_bytes = _decode_body(raw, request.headers.get("content-encoding", ""))
        try:
            parsed = json.loads(body_bytes) if body_bytes else None
        except ValueError:
            parsed = None
        path = request.url.path
        rec = Recorded(
            method=request.method,
            path=path,
            query=request.url.query,
            headers={k.lower(): v for k, v in request.headers.items()},
            raw=body_bytes,
            json=parsed,
            turn=None,
            matched=None,
            t=time.time(),
        )
        with self._lock:
            self.requests.append(rec)
        if request.method == "GET":
            if path.endswith("/models"):
                return JSONResponse({"object": "list", "data": [], "models": []})
            return JSONResponse({"ok": True})
        if rec.endpoint not in ("chat", "responses"):
            return JSONResponse({"error": {"message": f"unknown path {path}", "type": "invalid_request_error"}}, 404)
        if not isinstance(parsed, dict):
            self.errors.append(f"non-JSON body on {path}")
            return JSONResponse({"error": {"message": "body is not JSON", "type": "invalid_request_error"}}, 400)

        with self._lock:
            idx = self._next
            if idx >= len(self.turns):
                self.errors.append(f"script exhausted: request #{len(self.model_requests)} on {path}")
                return JSONResponse(
                    {
                        "error": {
                            "message": "scripted upstream: script exhausted",
                            "type": "invalid_request_error",
                            "code": "script_exhausted",
                            "param": None,
                        }
                    },
                    400,
                )
            self._next += 1
            turn = self.turns[idx]
            rec.turn = idx
        if turn.when is not None:
            try:
                ok = bool(turn.when(parsed))
            except Exception as exc:  # a broken predicate is a miss, with the reason
                ok = False
                self.errors.append(f"turn {idx} predicate raised {exc!r}")
            rec.matched = ok
            if not ok:
                self.errors.append(f"turn {idx} ({turn.label}): predicate not met, playing fallback")
                turn = turn.otherwise or Turn(
                    body={"error": {"message": "predicate not met", "type": "invalid_request_error"}}, status=400
                )
        if turn.respond is not None:
            try:
                turn = turn.respond(parsed)
            except Exception as exc:
                self.errors.append(f"turn {idx} respond() raised {exc!r}")
                return JSONResponse(
                    {"error": {"message": f"scripted respond() failed: {exc!r}", "type": "invalid_request_error"}}, 400
                )
        kind = turn.kind or rec.endpoint
        if parsed.get("stream"):
            if turn.frames is None:
                return JSONResponse(turn.body, turn.status, headers=turn.headers)
            return StreamingResponse(
                self._stream(turn, kind),
                status_code=turn.status,
                media_type="text/event-stream",
                headers={"cache-control": "no-cache", **turn.headers},
            )
        if turn.body is None:
            self.errors.append(f"turn {idx} has no non-stream body")
            return JSONResponse({"error": {"message": "no non-stream body scripted", "type": "server_error"}}, 500)
        return JSONResponse(turn.body, turn.status, headers=turn.headers)

    async def _stream(self, turn: Turn, kind: str):
        if turn.rechunk > 0:  # transport splits anywhere: inside lines, inside UTF-8 characters
            blob = b"".join(
                sse(f, kind) if isinstance(f, dict) else (f.encode() if isinstance(f, str) else bytes(f))
                for f in turn.frames or []
                if not isinstance(f, Delay)
            )
            for i in range(0, len(blob), turn.rechunk):
                if i and turn.frame_delay:
                    await asyncio.sleep(turn.frame_delay)
                yield blob[i : i + turn.rechunk]
            return
        for i, frame in enumerate(turn.frames or []):
            if isinstance(frame, Delay):
                await asyncio.sleep(frame.seconds)
                continue
            if i and turn.frame_delay:
                await asyncio.sleep(turn.frame_delay)
            if isinstance(frame, dict):
                yield sse(frame, kind)
            elif isinstance(frame, str):
                yield frame.encode()
            else:
                yield bytes(frame)


# --------------------------------------------------------------------------- predicates


def history_tool_ids(req: dict) -> dict[str, list[str]]:
    """Tool-call ids found in a request's history, by where they appear."""
    out: dict[str, list[str]] = {"call": [], "output": []}
    for m in req.get("messages") or []:  # Chat
        for tc in m.get("tool_calls") or []:
            out["call"].append(tc.get("id"))
        if m.get("role") == "tool":
            out["output"].append(m.get("tool_call_id"))
    for it in req.get("input") or [] if isinstance(req.get("input"), list) else []:  # Responses
        t = it.get("type")
        if t in ("function_call", "custom_tool_call"):
            out["call"].append(it.get("call_id"))
        elif t in ("function_call_output", "custom_tool_call_output"):
            out["output"].append(it.get("call_id"))
    return out


def chat_history_carries_id(tool_id: str) -> Callable[[dict], bool]:
    """Kimi predicate: assistant tool_calls[].id AND tool.tool_call_id carry ``tool_id`` verbatim."""

    def pred(req: dict) -> bool:
        ids = history_tool_ids(req)
        return tool_id in ids["call"] and tool_id in ids["output"]

    return pred


responses_history_carries_id = chat_history_carries_id  # same check, Responses item fields


# --------------------------------------------------------------------------- Chat builders


@dataclass
class ToolCall:
    """A tool call to script. ``arguments`` is sent byte for byte (raw text allowed)."""

    name: str
    arguments: str
    id: str | None = None
    namespace: str | None = None  # Responses only
    custom: bool = False  # Responses only: custom_tool_call with input=arguments

    def call_id(self, i: int) -> str:
        return self.id or f"call_{i}_{self.name}"


def _split(s: str, n: int) -> list[str]:
    if n <= 0 or len(s) <= n:
        return [s]
    return [s[i : i + n] for i in range(0, len(s), n)]


def chat_chunks(
    *,
    text: str = "",
    reasoning: str = "",
    tool_calls: list[ToolCall] = (),
    finish_reason: str | None = None,
    model: str = "scripted-model",
    chunk_size: int = 7,
    usage: dict | None = None,
    reasoning_key: str = "reasoning_content",
    completion_id: str | None = None,
    done: bool = True,
) -> list[Frame]:
    """Chat Completions stream: role chunk, reasoning, text, tool calls (each call one
    contiguous run: first delta carries index/id/type/name, then argument pieces),
    finish chunk, usage chunk (``choices: []``), ``[DONE]``."""
    cid = completion_id or f"chatcmpl-{uuid.uuid4().hex[:12]}"
    created = int(time.time())

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    frames: list[Frame] = [chunk({"role": "assistant", "content": ""})]
    for piece in _split(reasoning, chunk_size) if reasoning else []:
        frames.append(chunk({reasoning_key: piece}))
    for piece in _split(text, chunk_size) if text else []:
        frames.append(chunk({"content": piece}))
    for i, tc in enumerate(tool_calls):
        pieces = _split(tc.arguments, chunk_size) if tc.arguments else [""]
        frames.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": tc.call_id(i),
                            "type": "function",
                            "function": {"name": tc.name, "arguments": pieces[0]},
                        }
                    ]
                }
            )
        )
        for p in pieces[1:]:
            frames.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]}))
    fr = finish_reason or ("tool_calls" if tool_calls else "stop")
    frames.append(chunk({}, fr))
    u = usage if usage is not None else {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    if u:
        frames.append(
            {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": u,
            }
        )
    if done:
        frames.append("data: [DONE]\n\n")
    return frames


def chat_body(
    *,
    text: str = "",
    reasoning: str = "",
    tool_calls: list[ToolCall] = (),
    finish_reason: str | None = None,
    model: str = "scripted-model",
    usage: dict | None = None,
    reasoning_key: str = "reasoning_content",
) -> dict:
    msg: dict[str, Any] = {"role": "assistant", "content": text or None}
    if reasoning:
        msg[reasoning_key] = reasoning
    if tool_calls:
        msg["tool_calls"] = [
            {"id": tc.call_id(i), "type": "function", "function": {"name": tc.name, "arguments": tc.arguments}}
            for i, tc in enumerate(tool_calls)
        ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": msg, "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop")}
        ],
        "usage": usage if usage is not None else {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def chat_turn(
    *, label: str = "", when=None, otherwise=None, frame_delay: float = 0.0, chunk_size: int = 7, rechunk: int = 0, **kw
) -> Turn:
    """A Chat turn answering both stream (chunks) and non-stream (body) requests."""
    body_kw = {
        k: v
        for k, v in kw.items()
        if k in ("text", "reasoning", "tool_calls", "finish_reason", "model", "usage", "reasoning_key")
    }
    return Turn(
        frames=chat_chunks(chunk_size=chunk_size, **kw),
        body=chat_body(**body_kw),
        kind="chat",
        when=when,
        otherwise=otherwise,
        frame_delay=frame_delay,
        label=label,
        rechunk=rechunk,
    )


def with_keepalives(turn: Turn, every: int = 2, comment: str = ": keepalive\n\n") -> Turn:
    """Insert SSE comment frames (``: keepalive``) after every ``every`` frames."""
    out: list[Frame] = []
    for i, f in enumerate(turn.frames or []):
        out.append(f)
        if (i + 1) % every == 0:
            out.append(comment)
    turn.frames = out
    return turn


def reasoning_only_chat_turn(reasoning: str = "I am not sure what happened before.", **kw) -> Turn:
    """What self-hosted Kimi answers when it does not recognise its own tool ids (#520)."""
    return chat_turn(reasoning=reasoning, text="", finish_reason="stop", label="reasoning-only (Kimi id miss)", **kw)


# --------------------------------------------------------------------------- Responses builders


def _usage_responses(u: dict | None) -> dict:
    return (
        u
        if u is not None
        else {
            "input_tokens": 11,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 7,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 18,
        }
    )


def responses_events(
    *,
    text: str = "",
    reasoning: str = "",
    tool_calls: list[ToolCall] = (),
    model: str = "scripted-model",
    chunk_size: int = 7,
    usage: dict | None = None,
    response_id: str | None = None,
    mantle: bool = False,
    late_identity: bool = False,
    status: str = "completed",
) -> list[Frame]:
    """A full Responses event lifecycle: created, in_progress, reasoning item (summary
    events), message item (content part + text deltas), function_call / custom_tool_call
    items, completed (with the output array and usage).

    ``mantle``: done items carry ``item_id`` instead of ``id`` plus a stray
    ``output_index``; ``completed.output`` items carry no id at all.
    ``late_identity``: function_call ``added`` items have no ``name``/``namespace``; they
    arrive only in ``function_call_arguments.done`` and ``output_item.done``.
    """
    rid = response_id or f"resp_{uuid.uuid4().hex[:16]}"
    created_at = int(time.time())
    seq = 0

    def ev(d: dict) -> dict:
        nonlocal seq
        d["sequence_number"] = seq
        seq += 1
        return d

    def resp(status_: str, output: list) -> dict:
        r = {
            "id": rid,
            "object": "response",
            "created_at": created_at,
            "status": status_,
            "model": model,
            "output": output,
            "error": None,
            "incomplete_details": None,
            "tool_choice": "auto",
            "tools": [],
            "parallel_tool_calls": True,
        }
        if status_ == "completed":
            r["usage"] = _usage_responses(usage)
        return r

    def done_item(item: dict, idx: int) -> dict:
        item = copy.deepcopy(item)
        if mantle:
            item["item_id"] = item.pop("id")
            item["output_index"] = idx
        return item

    frames: list[Frame] = [
        ev({"type": "response.created", "response": resp("in_progress", [])}),
        ev({"type": "response.in_progress", "response": resp("in_progress", [])}),
    ]
    output: list[dict] = []
    idx = 0
    if reasoning:
        rs_id = f"rs_{uuid.uuid4().hex[:12]}"
        frames.append(
            ev(
                {
                    "type": "response.output_item.added",
                    "output_index": idx,
                    "item": {"id": rs_id, "type": "reasoning", "summary": []},
                }
            )
        )
        frames.append(
            ev(
                {
                    "type": "response.reasoning_summary_part.added",
                    "item_id": rs_id,
                    "output_index": idx,
                    "summary_index": 0,
                    "part": {"type": "summary_text", "text": ""},
                }
            )
        )
        for p in _split(reasoning, chunk_size):
            frames.append(
                ev(
                    {
                        "type": "response.reasoning_summary_text.delta",
                        "item_id": rs_id,
                        "output_index": idx,
                        "summary_index": 0,
                        "delta": p,
                    }
                )
            )
        frames.append(
            ev(
                {
                    "type": "response.reasoning_summary_text.done",
                    "item_id": rs_id,
                    "output_index": idx,
                    "summary_index": 0,
                    "text": reasoning,
                }
            )
        )
        frames.append(
            ev(
                {
                    "type": "response.reasoning_summary_part.done",
                    "item_id": rs_id,
                    "output_index": idx,
                    "summary_index": 0,
                    "part": {"type": "summary_text", "text": reasoning},
                }
            )
        )
        item = {"id": rs_id, "type": "reasoning", "summary": [{"type": "summary_text", "text": reasoning}]}
        frames.append(ev({"type": "response.output_item.done", "output_index": idx, "item": done_item(item, idx)}))
        output.append(item)
        idx += 1
    if text:
        msg_id = f"msg_{uuid.uuid4().hex[:12]}"
        frames.append(
            ev(
                {
                    "type": "response.output_item.added",
                    "output_index": idx,
                    "item": {
                        "id": msg_id,
                        "type": "message",
                        "role": "assistant",
                        "status": "in_progress",
                        "content": [],
                    },
                }
            )
        )
        frames.append(
            ev(
                {
                    "type": "response.content_part.added",
                    "item_id": msg_id,
                    "output_index": idx,
                    "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": []},
                }
            )
        )
        for p in _split(text, chunk_size):
            frames.append(
                ev(
                    {
                        "type": "response.output_text.delta",
                        "item_id": msg_id,
                        "output_index": idx,
                        "content_index": 0,
                        "delta": p,
                        "logprobs": [],
                    }
                )
            )
        frames.append(
            ev(
                {
                    "type": "response.output_text.done",
                    "item_id": msg_id,
                    "output_index": idx,
                    "content_index": 0,
                    "text": text,
                    "logprobs": [],
                }
            )
        )
        part = {"type": "output_text", "text": text, "annotations": []}
        frames.append(
            ev(
                {
                    "type": "response.content_part.done",
                    "item_id": msg_id,
                    "output_index": idx,
                    "content_index": 0,
                    "part": part,
                }
            )
        )
        item = {"id": msg_id, "type": "message", "role": "assistant", "status": "completed", "content": [part]}
        frames.append(ev({"type": "response.output_item.done", "output_index": idx, "item": done_item(item, idx)}))
        output.append(item)
        idx += 1
    for i, tc in enumerate(tool_calls):
        call_id = tc.call_id(i)
        if tc.custom:
            item_id = f"ctc_{uuid.uuid4().hex[:12]}"
            added = {
                "id": item_id,
                "type": "custom_tool_call",
                "status": "in_progress",
                "call_id": call_id,
                "name": tc.name,
                "input": "",
            }
            frames.append(ev({"type": "response.output_item.added", "output_index": idx, "item": added}))
            for p in _split(tc.arguments, chunk_size):
                frames.append(
                    ev(
                        {
                            "type": "response.custom_tool_call_input.delta",
                            "item_id": item_id,
                            "output_index": idx,
                            "delta": p,
                        }
                    )
                )
            frames.append(
                ev(
                    {
                        "type": "response.custom_tool_call_input.done",
                        "item_id": item_id,
                        "output_index": idx,
                        "input": tc.arguments,
                    }
                )
            )
            item = {**added, "status": "completed", "input": tc.arguments}
        else:
            item_id = f"fc_{uuid.uuid4().hex[:12]}"
            full = {
                "id": item_id,
                "type": "function_call",
                "status": "in_progress",
                "call_id": call_id,
                "name": tc.name,
                "arguments": "",
            }
            if tc.namespace:
                full["namespace"] = tc.namespace
            added = dict(full)
            if late_identity:
                added.pop("name")
                added.pop("namespace", None)
            frames.append(ev({"type": "response.output_item.added", "output_index": idx, "item": added}))
            for p in _split(tc.arguments, chunk_size) if tc.arguments else []:
                frames.append(
                    ev(
                        {
                            "type": "response.function_call_arguments.delta",
                            "item_id": item_id,
                            "output_index": idx,
                            "delta": p,
                        }
                    )
                )
            done = {
                "type": "response.function_call_arguments.done",
                "item_id": item_id,
                "output_index": idx,
                "arguments": tc.arguments,
                "name": tc.name,  # OpenAI sends it; the openai SDK's type requires it
            }
            if late_identity and tc.namespace:
                done["namespace"] = tc.namespace
            frames.append(ev(done))
            item = {**full, "status": "completed", "arguments": tc.arguments}
        frames.append(ev({"type": "response.output_item.done", "output_index": idx, "item": done_item(item, idx)}))
        output.append(item)
        idx += 1
    final_output = copy.deepcopy(output)
    if mantle:
        for it in final_output:
            it.pop("id", None)
    frames.append(ev({"type": f"response.{status}", "response": resp(status, final_output)}))
    return frames


def responses_body(
    *,
    text: str = "",
    reasoning: str = "",
    tool_calls: list[ToolCall] = (),
    model: str = "scripted-model",
    usage: dict | None = None,
    **_: Any,
) -> dict:
    """Non-stream Responses body: the ``response`` object of the completed event."""
    evs = responses_events(text=text, reasoning=reasoning, tool_calls=tool_calls, model=model, usage=usage)
    return evs[-1]["response"]


def responses_turn(
    *, label: str = "", when=None, otherwise=None, frame_delay: float = 0.0, rechunk: int = 0, **kw
) -> Turn:
    body = responses_body(**kw)
    return Turn(
        frames=responses_events(**kw),
        body=body,
        kind="responses",
        when=when,
        otherwise=otherwise,
        frame_delay=frame_delay,
        label=label,
        rechunk=rechunk,
    )


# --------------------------------------------------------------------------- CLI


def _load_script(name: str) -> list[Turn]:
    if name.endswith(".json"):
        with open(name, encoding="utf-8") as f:
            data = json.load(f)
        return [Turn.from_json(t) for t in (data["turns"] if isinstance(data, dict) else data)]
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
    import scenarios

    return scenarios.SCENARIOS[name]()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", required=True, help="scenario name (see scenarios.py) or a JSON file of turns")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--dump", action="store_true", help="print the script as JSON and exit")
    ap.add_argument("--record", help="write recorded requests as JSON lines to this file on exit")
    a = ap.parse_args(argv)
    turns = _load_script(a.scenario)
    if a.dump:
        print(json.dumps([t.to_json() for t in turns], ensure_ascii=False, indent=1))
        return 0
    import signal

    def _stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    up = ScriptedUpstream(turns, host=a.host, port=a.port, name=a.scenario).start()
    print(f"scripted upstream '{a.scenario}' listening on {up.base_url} ({len(turns)} turns)", flush=True)
    try:
        while True:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        up.stop()
        print(up.describe())
        if a.record:
            with open(a.record, "w", encoding="utf-8") as f:
                for r in up.requests:
                    f.write(dumps({"method": r.method, "path": r.path, "headers": r.headers, "json": r.json}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
