"""Scripted Anthropic Messages upstream: a loopback server that plays a conversation turn by
turn over ``POST /v1/messages`` and records every request.

Theory of operation
-------------------
A *script* is a list of ``MessageTurn``\\ s, each a list of content blocks (``text``,
``thinking`` with its ``signature``, ``tool_use`` with its ``input``), a ``stop_reason``
(``tool_use`` when a tool_use block is there, else ``end_turn``, unless given) and usage.
Every ``POST .../v1/messages`` (with or without ``?beta=true``) consumes the next turn:

* with ``"stream": true`` the turn is written as Anthropic's SSE (``event: <type>`` +
  ``data: <json>``): ``message_start`` (the message with empty ``content``, usage with
  ``input_tokens``), ``ping``, then per block ``content_block_start`` /
  ``content_block_delta`` (``text_delta``; ``thinking_delta`` then one ``signature_delta``;
  ``input_json_delta`` with the input's JSON split into ``partial_json`` pieces, the first
  one empty, as the API sends them) / ``content_block_stop``, then ``message_delta``
  (``stop_reason``, ``stop_sequence``, cumulative ``usage.output_tokens``) and
  ``message_stop``.  ``MessageTurn.frames`` replaces that with raw frames (a ``dict`` ->
  one event named by its ``type``, ``str``/``bytes`` verbatim, ``Delay``) for quirk tests;
* otherwise the same turn is answered as one ``message`` object (``status`` applies to
  both; ``error=("overloaded_error", "...")`` answers Anthropic's error object instead).

``POST .../v1/messages/count_tokens`` never consumes a turn: it answers
``{"input_tokens": N}`` (N: a rough size of the body), or 404 with ``count_tokens=False``.  A turn may carry ``when(request) ->
bool`` (a miss plays ``otherwise``, else a 400, and is noted in ``errors``) or
``respond(request) -> MessageTurn``.  Any other path is recorded and answered with
Anthropic's ``not_found_error`` (404); a ``/v1/messages`` after the script's end with
``invalid_request_error`` (400).  Each ``Recorded`` (from ``scripted_upstream``) has the
method, path, query, lower-cased headers and parsed JSON body; ``message_requests`` and
``count_tokens_requests`` filter them.

It reuses ``ScriptedUpstream``'s server (uvicorn in a daemon thread on 127.0.0.1, port 0
-> ``.port``; ``start()``/``stop()`` or a ``with`` block); ``base_url`` is the bare origin,
what ``ANTHROPIC_BASE_URL`` wants (clients append ``/v1/messages``).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from scripted_upstream import Delay, Recorded, ScriptedUpstream, _decode_body, dumps
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

__all__ = [
    "Delay",
    "MessageTurn",
    "MessagesUpstream",
    "text",
    "thinking",
    "tool_use",
    "message_events",
    "message_body",
    "sse_event",
    "tool_results",
]


# --------------------------------------------------------------------------- blocks


def text(s: str) -> dict:
    return {"type": "text", "text": s}


def thinking(s: str, signature: str = "c2lnbmF0dXJlLWZyb20tc2NyaXB0ZWQtdXBzdHJlYW0=") -> dict:
    return {"type": "thinking", "thinking": s, "signature": signature}


def tool_use(name: str, input: dict, id: str | None = None) -> dict:
    return {"type": "tool_use", "id": id or f"toolu_{uuid.uuid4().hex[:24]}", "name": name, "input": input}


def _pieces(s: str, n: int) -> list[str]:
    return [s[i : i + n] for i in range(0, len(s), n)] or [""]


@dataclass
class MessageTurn:
    blocks: list[dict] = field(default_factory=list)
    stop_reason: str | None = None  # default: "tool_use" if a tool_use block, else "end_turn"
    usage: dict = field(default_factory=lambda: {"input_tokens": 120, "output_tokens": 30})
    model: str | None = None  # default: the request's model
    status: int = 200
    error: tuple[str, str] | None = None  # (type, message): answer Anthropic's error object
    frames: list[dict | str | bytes | Delay] | None = None  # raw stream instead of the blocks
    chunk: int = 12  # characters per text/thinking/partial_json delta
    frame_delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    when: Callable[[dict], bool] | None = None
    otherwise: MessageTurn | None = None
    respond: Callable[[dict], MessageTurn] | None = None
    label: str = ""

    @property
    def final_stop_reason(self) -> str:
        if self.stop_reason:
            return self.stop_reason
        return "tool_use" if any(b.get("type") == "tool_use" for b in self.blocks) else "end_turn"


def _usage_start(u: dict) -> dict:
    return {
        "input_tokens": int(u.get("input_tokens", 0)),
        "cache_creation_input_tokens": int(u.get("cache_creation_input_tokens", 0)),
        "cache_read_input_tokens": int(u.get("cache_read_input_tokens", 0)),
        "output_tokens": 1,
    }


def message_body(turn: MessageTurn, *, model: str, msg_id: str) -> dict:
    """The non-streamed ``message`` object for ``turn``."""
    usage = _usage_start(turn.usage) | {"output_tokens": int(turn.usage.get("output_tokens", 0))}
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [dict(b) for b in turn.blocks],
        "stop_reason": turn.final_stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def message_events(turn: MessageTurn, *, model: str, msg_id: str) -> list[dict]:
    """The stream's event payloads (each has ``type``; ``sse_event`` frames it)."""
    start = message_body(turn, model=model, msg_id=msg_id) | {"content": [], "stop_reason": None}
    start["usage"] = _usage_start(turn.usage)
    evs: list[dict] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    n = max(1, turn.chunk)
    for i, b in enumerate(turn.blocks):
        kind = b.get("type")
        if kind == "text":
            evs.append({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(b["text"], n)]
        elif kind == "thinking":
            head = {"type": "thinking", "thinking": "", "signature": ""}
            evs.append({"type": "content_block_start", "index": i, "content_block": head})
            deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(b["thinking"], n)]
            deltas.append({"type": "signature_delta", "signature": b.get("signature", "")})
        elif kind == "tool_use":
            head = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
            evs.append({"type": "content_block_start", "index": i, "content_block": head})
            raw = dumps(b.get("input") or {})
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in ["", *_pieces(raw, n)]]
        else:
            raise ValueError(f"unsupported block type {kind!r}")
        evs += [{"type": "content_block_delta", "index": i, "delta": d} for d in deltas]
        evs.append({"type": "content_block_stop", "index": i})
    evs.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": turn.final_stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": int(turn.usage.get("output_tokens", 0))},
        }
    )
    evs.append({"type": "message_stop"})
    return evs


def sse_event(payload: dict) -> bytes:
    return f"event: {payload.get('type', 'message')}\ndata: {dumps(payload)}\n\n".encode()


def anthropic_error(kind: str, message: str, status: int) -> JSONResponse:
    return JSONResponse({"type": "error", "error": {"type": kind, "message": message}}, status)


# --------------------------------------------------------------------------- request helpers


def tool_results(req: dict) -> list[dict]:
    """Every ``tool_result`` block in a request's ``messages`` (user turns)."""
    out = []
    for m in req.get("messages") or []:
        if isinstance(m.get("content"), list):
            out += [b for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
    return out


def block_text(block: dict) -> str:
    """A tool_result's content as text (a string, or its text blocks joined)."""
    c = block.get("content")
    if isinstance(c, str):
        return c
    return "".join(p.get("text", "") for p in c or [] if isinstance(p, dict))


# --------------------------------------------------------------------------- server


class MessagesUpstream(ScriptedUpstream):
    """Loopback Anthropic Messages server playing ``turns`` (``MessageTurn``)."""

    def __init__(
        self,
        turns: Iterable[MessageTurn] = (),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        name: str = "",
        count_tokens: bool = True,
    ):
        super().__init__(turns, host=host, port=port, name=name or "messages")  # type: ignore[arg-type]
        self.count_tokens = count_tokens  # False: count_tokens answers 404, as an upstream without it

    @property
    def base_url(self) -> str:
        return self.url

    @property
    def message_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.method == "POST" and r.path.endswith("/v1/messages")]

    @property
    def count_tokens_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.method == "POST" and r.path.endswith("/v1/messages/count_tokens")]

    @property
    def model_requests(self) -> list[Recorded]:
        return self.message_requests

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
        if request.method == "POST" and path.endswith("/v1/messages/count_tokens") and self.count_tokens:
            return JSONResponse({"input_tokens": max(1, len(raw) // 4)})
        if request.method != "POST" or not path.endswith("/v1/messages"):
            return anthropic_error("not_found_error", f"scripted messages upstream: no {request.method} {path}", 404)
        if not isinstance(parsed, dict):
            self.errors.append(f"non-JSON body on {path}")
            return anthropic_error("invalid_request_error", "body is not JSON", 400)
        with self._lock:
            idx = self._next
            if idx >= len(self.turns):
                self.errors.append(f"script exhausted: request #{len(self.message_requests)} on {path}")
                return anthropic_error("invalid_request_error", "scripted messages upstream: script exhausted", 400)
            self._next += 1
            turn: MessageTurn = self.turns[idx]  # type: ignore[assignment]
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
                if turn.otherwise is None:
                    return anthropic_error("invalid_request_error", f"predicate of turn {idx} not met", 400)
                turn = turn.otherwise
        if turn.respond is not None:
            try:
                turn = turn.respond(parsed)
            except Exception as exc:
                self.errors.append(f"turn {idx} respond() raised {exc!r}")
                return anthropic_error("invalid_request_error", f"respond() failed: {exc!r}", 400)
        if turn.error is not None:
            return anthropic_error(turn.error[0], turn.error[1], turn.status if turn.status >= 400 else 500)
        model = turn.model or str(parsed.get("model") or "scripted-model")
        msg_id = f"msg_scripted_{idx:02d}_{uuid.uuid4().hex[:12]}"
        headers = {"request-id": f"req_scripted_{idx:02d}", **turn.headers}
        if parsed.get("stream"):
            frames = turn.frames if turn.frames is not None else message_events(turn, model=model, msg_id=msg_id)
            return StreamingResponse(
                self._frames(frames, turn.frame_delay),
                status_code=turn.status,
                media_type="text/event-stream",
                headers={"cache-control": "no-cache", **headers},
            )
        return JSONResponse(message_body(turn, model=model, msg_id=msg_id), turn.status, headers=headers)

    @staticmethod
    async def _frames(frames: list[Any], frame_delay: float):
        for i, f in enumerate(frames):
            if isinstance(f, Delay):
                await asyncio.sleep(f.seconds)
                continue
            if i and frame_delay:
                await asyncio.sleep(frame_delay)
            if isinstance(f, dict):
                yield sse_event(f)
            elif isinstance(f, str):
                yield f.encode()
            else:
                yield bytes(f)
