"""One Responses WebSocket connection's state: client frames in, what to do out.

Theory of operation
-------------------
Codex (and the openai SDK's WebSocket mode) keeps one socket open for a conversation and
sends one text frame per request.  The server answers each ``response.create`` with the
same events as the SSE stream, one per text frame.  After the first turn a frame carries
``previous_response_id`` (the last response on this socket) and only the *new* input items:
the client counts on the server to remember the earlier input and the output it sent.
No upstream behind the proxy can be trusted to remember (a Chat upstream stores nothing;
a Responses upstream may run with ``store: false``), so the connection keeps a
*transcript*: the full input of its last response and that response's output items.  A
continuation is rebuilt into a complete, stateless request::

    full input = transcript input + transcript output + the frame's new items

and goes through the very same path as an HTTP request (``prepare``, the Bridge, every
repair).  The transcript is replaced after every completed response, and dropped when a
response did not complete (the client will not continue from it) or when it would exceed
``max_bytes`` (the client's next continuation is then answered
``previous_response_not_found``, and Codex re-sends the whole history, which is the
documented recovery).

=========================================  ===================================================
client frame                               action
=========================================  ===================================================
``response.create``, no previous id        ``Turn`` with the frame's body
``response.create``, previous id = last    ``Turn`` with the rebuilt full input
``response.create``, previous id unknown   ``Turn`` marked ``foreign``: the app rebuilds the
                                           input from its response store, or answers
                                           ``previous_response_not_found`` (``not_found``)
``response.create`` + ``generate: false``  ``Warmup``: answer with an empty completed
                                           response; its input becomes the transcript
``response.append`` (older Codex)          ``Turn``: the last request's fields, the input
                                           appended to the transcript
``response.processed``                     ``Ignore`` (an acknowledgement)
anything else, binary, not JSON            ``Reply`` error 400 (the socket stays open)
a frame nested too deep or holding an      ``Reply`` error 400 naming its path, as an HTTP
integer beyond 64 bits                     body gets (``request_check.check_values`` on
                                           the frame's own bytes: parsed, the integer is
                                           already a float)
=========================================  ===================================================

The session is sans-IO: the app reads frames, asks ``frame()``, runs turns and reports
each finished response with ``completed()`` / ``failed()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from .errors import RequestError
from .request_check import check_integers, check_values

__all__ = ["Ignore", "Reply", "Turn", "Warmup", "WSSession", "error_frame"]


@dataclass(slots=True)
class Turn:
    """Run this request body (a complete, stateless Responses request) as one response.
    ``new``: the items the frame itself carried; ``previous``: the response it continues;
    ``foreign``: that response is not this socket's (``body`` then holds only ``new``: the
    app completes it from its store with ``rebase``, or answers ``not_found``)."""

    body: dict[str, Any]
    new: list[Any]
    previous: str | None = None
    foreign: bool = False


@dataclass(slots=True)
class Warmup:
    """Answer with a response that produces nothing (``generate: false``)."""

    body: dict[str, Any]


@dataclass(slots=True)
class Reply:
    """Send this frame (an error); nothing runs."""

    frame: dict[str, Any]


@dataclass(slots=True)
class Ignore:
    pass


Action = Turn | Warmup | Reply | Ignore

# fields of a create frame that are about the socket, not the request
_FRAME_ONLY = ("type", "generate")


def error_frame(
    status: int,
    message: str,
    code: str | None,
    *,
    param: str | None = None,
    type: str = "invalid_request_error",
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An error as a Responses WebSocket frame: the HTTP status and the OpenAI error object
    (Codex maps it exactly as the HTTP answer with that status)."""
    frame: dict[str, Any] = {
        "type": "error",
        "status": status,
        "error": {"type": type, "code": code, "message": message, "param": param},
    }
    if headers:
        frame["headers"] = headers
    return frame


def _refused(e: RequestError) -> dict[str, Any]:
    return error_frame(e.status, e.message, e.code, param=e.param, type=e.type)


def _items(value: Any) -> list[Any]:
    """A request's ``input`` as a list of items (a string is one user message)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value) if isinstance(value, list) else [value]


class WSSession:
    """The transcript of one socket (see the module docstring)."""

    __slots__ = ("max_bytes", "last_id", "_input", "_output", "_last_body", "_pending")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.last_id: str | None = None  # the response a continuation may name
        self._input: list[Any] = []
        self._output: list[Any] = []
        self._last_body: dict[str, Any] | None = None  # the fields of the last request (response.append)
        self._pending: list[Any] | None = None  # the full input of the turn in flight

    # -- client frames --------------------------------------------------------------------

    def frame(self, data: str | bytes | None) -> Action:
        """What to do with one client frame (``None``: a binary frame)."""
        if data is None:
            return Reply(error_frame(400, "binary frames are not supported; send JSON text frames", "invalid_frame"))
        raw = data.encode() if isinstance(data, str) else data
        try:
            msg = orjson.loads(raw)
        except orjson.JSONDecodeError:
            try:
                check_integers(raw)  # an integer too long even for a double: name it
            except RequestError as e:
                return Reply(_refused(e))
            return Reply(error_frame(400, "the frame is not valid JSON", "invalid_json"))
        if not isinstance(msg, dict):
            return Reply(error_frame(400, "the frame must be a JSON object", "invalid_json"))
        try:
            # orjson made an integer beyond 64 bits a float, and the request is written again
            # from ``msg``: only the frame's own text still shows one (as check_body's raw)
            check_values(raw, msg)
        except RequestError as e:
            return Reply(_refused(e))
        kind = msg.get("type")
        if kind == "response.create":
            return self._create(msg)
        if kind == "response.append":
            return self._append(msg)
        if kind == "response.processed":
            return Ignore()
        shown = kind[:100] if isinstance(kind, str) else repr(kind)[:100]
        return Reply(
            error_frame(
                400,
                f"unsupported frame type {shown}; expected 'response.create'",
                "unsupported_frame_type",
                param="type",
            )
        )

    def _create(self, msg: dict[str, Any]) -> Action:
        body = {k: v for k, v in msg.items() if k not in _FRAME_ONLY}
        body["stream"] = True  # a socket always streams
        prev = body.pop("previous_response_id", None)
        new = _items(body.get("input"))
        foreign = False
        if prev is not None:
            if not isinstance(prev, str) or prev == "":
                return Reply(self.not_found(prev))
            foreign = prev != self.last_id
            body["input"] = new if foreign else [*self._input, *self._output, *new]
        else:
            body["input"] = new
        self._last_body = {k: v for k, v in body.items() if k != "input"}
        if msg.get("generate") is False and not foreign:
            return Warmup(body)
        self._pending = body["input"]
        return Turn(body, new, prev, foreign)

    def _append(self, msg: dict[str, Any]) -> Action:
        if self._last_body is None or self.last_id is None:
            return Reply(
                error_frame(
                    400,
                    "response.append needs an earlier completed response on this connection",
                    "previous_response_not_found",
                    param="input",
                )
            )
        new = _items(msg.get("input"))
        body = {**self._last_body, "input": [*self._input, *self._output, *new]}
        self._pending = body["input"]
        return Turn(body, new, self.last_id)

    def rebase(self, turn: Turn, history: list[Any]) -> None:
        """A ``foreign`` continuation found elsewhere (the app's store): ``history`` (every
        earlier item) goes before the frame's own items, in the body and the transcript."""
        turn.body["input"] = self._pending = [*history, *turn.new]

    def not_found(self, prev: Any) -> dict[str, Any]:
        """The answer to a continuation of a response nobody here knows."""
        shown = prev[:100] if isinstance(prev, str) else repr(prev)[:100]
        return error_frame(
            400,
            f"Previous response with id '{shown}' not found on this connection; send the whole conversation",
            "previous_response_not_found",
            param="previous_response_id",
        )

    # -- what happened to a turn ----------------------------------------------------------

    def warmed(self, response_id: str, body: dict[str, Any]) -> None:
        """A warm-up was answered with ``response_id``: its input is the transcript."""
        self._remember(response_id, list(body.get("input") or ()), [])

    def completed(self, response_id: str, output: list[Any]) -> None:
        """The turn in flight completed with these output items (as the client got them)."""
        full = self._pending if self._pending is not None else []
        self._pending = None
        self._remember(response_id, full, output)

    def failed(self) -> None:
        """The turn in flight did not complete: the client cannot continue from it."""
        self._pending = None
        self._forget()

    def _remember(self, response_id: str, full_input: list[Any], output: list[Any]) -> None:
        size = len(orjson.dumps(full_input)) + len(orjson.dumps(output))
        if size > self.max_bytes:
            self._forget()
            return
        self.last_id = response_id
        self._input = full_input
        self._output = list(output)

    def _forget(self) -> None:
        self.last_id = None
        self._input = []
        self._output = []

    @property
    def transcript_items(self) -> int:
        return len(self._input) + len(self._output)
