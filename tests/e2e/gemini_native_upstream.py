"""Scripted Gemini upstream in Gemini's own API (``protocol: gemini``): a loopback server
for ``POST .../models/{model}:streamGenerateContent?alt=sse`` and ``:generateContent``.

Theory of operation
-------------------
It reuses ``ScriptedUpstream``'s server (uvicorn in a daemon thread, ``start()``/``stop()``)
with its own handler.  Each request is recorded (``requests``; ``model_requests`` the
model calls) and answered by ``respond(request_json) -> NativeTurn``: a turn's thought
text, text and calls (``(name, args)``).  The first call of each answer carries a
``thoughtSignature`` of random bytes in base64 (``issued``).  As Gemini does, a request is
refused with 400 and Google's error object (noted in ``rejections``) when its body names
``model`` or ``stream``, when a signature it never issued comes back (the escape value
``skip_thought_signature_validator`` passes), or when the first call of a model content of
the current turn comes back without one.  The key must come in ``x-goog-api-key``.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from scripted_upstream import Recorded, ScriptedUpstream, _decode_body
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

ESCAPE = "skip_thought_signature_validator"


@dataclass
class NativeTurn:
    thought: str = ""
    text: str = ""
    calls: list[tuple[str, dict]] = field(default_factory=list)


def _error(status: int, message: str, name: str) -> JSONResponse:
    return JSONResponse({"error": {"code": status, "message": message, "status": name}}, status)


class NativeGeminiUpstream(ScriptedUpstream):
    def __init__(self, respond: Callable[[dict], NativeTurn], *, key: str, name: str = "gemini-native") -> None:
        super().__init__([], name=name)
        self.respond = respond
        self.key = key
        self.issued: list[str] = []
        self.rejections: list[str] = []

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1beta"

    @property
    def model_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.method == "POST" and ":" in r.path.rsplit("/", 1)[-1]]

    def _check(self, body: dict) -> str | None:
        for k in ("model", "stream"):
            if k in body:
                return f'Invalid JSON payload received. Unknown name "{k}": Cannot find field.'
        contents = body.get("contents") or []
        users = [
            i
            for i, c in enumerate(contents)
            if c.get("role") == "user" and not any("functionResponse" in p for p in c.get("parts") or [])
        ]
        turn = users[-1] if users else 0
        for i, c in enumerate(contents):
            calls = [p for p in c.get("parts") or [] if "functionCall" in p]
            for j, p in enumerate(calls):
                sig = p.get("thoughtSignature")
                if sig is not None and sig != ESCAPE and sig not in self.issued:
                    return "Corrupted thought signature."
                if i > turn and j == 0 and sig is None:
                    return "Function call is missing a thought_signature in functionCall parts."
        return None

    async def _handle(self, request: Request) -> Response:
        raw = _decode_body(await request.body(), request.headers.get("content-encoding", ""))
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        headers = {k.lower(): v for k, v in request.headers.items()}
        rec = Recorded(
            request.method, request.url.path, request.url.query, headers, raw, parsed, None, None, time.time()
        )
        with self._lock:
            self.requests.append(rec)
        method = request.url.path.rsplit(":", 1)[-1]
        if request.method != "POST" or method not in ("generateContent", "streamGenerateContent"):
            return _error(404, f"no {request.method} {request.url.path}", "NOT_FOUND")
        if headers.get("x-goog-api-key") != self.key:
            return _error(401, "API key not valid.", "UNAUTHENTICATED")
        if not isinstance(parsed, dict):
            return _error(400, "the body is not JSON", "INVALID_ARGUMENT")
        err = self._check(parsed)
        if err:
            self.rejections.append(err)
            return _error(400, err, "INVALID_ARGUMENT")
        turn = self.respond(parsed)
        parts: list[dict] = []
        if turn.thought:
            parts.append({"text": turn.thought, "thought": True})
        if turn.text:
            parts.append({"text": turn.text})
        for k, (name, args) in enumerate(turn.calls):
            part: dict = {"functionCall": {"name": name, "args": args}}
            if k == 0:
                sig = base64.b64encode(os.urandom(240)).decode()
                self.issued.append(sig)
                part["thoughtSignature"] = sig
            parts.append(part)
        usage = {"promptTokenCount": 120, "candidatesTokenCount": 24, "thoughtsTokenCount": 8, "totalTokenCount": 152}
        last = {"candidates": [{"content": {"role": "model", "parts": []}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": usage, "modelVersion": "gemini-native", "responseId": f"resp{len(self.issued)}"}  # fmt: skip
        if method == "generateContent":
            last["candidates"][0]["content"]["parts"] = parts
            return JSONResponse(last)
        chunks = [{"candidates": [{"content": {"role": "model", "parts": [p]}, "index": 0}]} for p in parts]
        body = b"".join(b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in [*chunks, last])
        return Response(body, media_type="text/event-stream")
