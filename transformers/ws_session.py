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
*transcript* per lane (``stream_id``; none is the default lane): the full input of the
lane's last response and that response's output items.  A continuation is rebuilt into a
complete, stateless request::

    full input = transcript input + transcript output + the frame's new items

and goes through the very same path as an HTTP request (``prepare``, the Bridge, every
repair).  A continuation may name the last response of any lane (a fork).  A lane's
transcript is replaced after every completed response on it, and dropped when a
continuation on it did not complete (the client will not continue from it); all of them
together stay under ``max_bytes`` (the oldest go first), and a continuation of a dropped
one is answered ``previous_response_not_found`` (Codex re-sends the whole history, which
is the documented recovery).

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
``response.steer`` / ``.cancel`` /         ``Control``: the app answers it at once
``.inject``                                (transformers/ws_lanes.py)
a create with a bad ``stream_id``          ``Reply`` error 400 ``invalid_stream_id``
anything else, binary, not JSON            ``Reply`` error 400 naming the type (the socket
                                           stays open)
a frame nested too deep or holding an      ``Reply`` error 400 naming its path, as an HTTP
integer beyond 64 bits                     body gets (``request_check.check_values`` on
                                           the frame's own bytes: parsed, the integer is
                                           already a float)
=========================================  ===================================================

The session is sans-IO: the app reads frames and asks ``classify()``; a create waits for
its turn on its lane, where ``create()`` makes it a Turn (``successor()`` makes the
automatic successor of a steered response); the app runs turns and reports each finished
one with ``completed()`` / ``failed()``.  ``frame()`` is ``classify()`` and ``create()``
at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from .errors import RequestError
from .request_check import check_integers, check_values

__all__ = ["Control", "Create", "Ignore", "Reply", "Turn", "Warmup", "WSSession", "error_frame"]


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
    lane: str | None = None  # the frame's stream_id (None: the default lane)


@dataclass(slots=True)
class Warmup:
    """Answer with a response that produces nothing (``generate: false``)."""

    body: dict[str, Any]
    lane: str | None = None


@dataclass(slots=True)
class Reply:
    """Send this frame (an error); nothing runs."""

    frame: dict[str, Any]


@dataclass(slots=True)
class Ignore:
    pass


@dataclass(slots=True)
class Create:
    """A ``response.create`` (or ``response.append``) for ``lane``: it waits for its turn
    there (``WSSession.create`` makes it a Turn, Warmup or Reply when it comes)."""

    msg: dict[str, Any]
    lane: str | None = None


@dataclass(slots=True)
class Control:
    """A frame about responses already running: ``response.steer``, ``response.cancel``,
    ``response.inject`` (transformers/ws_lanes.py); answered at once."""

    msg: dict[str, Any]


Action = Turn | Warmup | Reply | Ignore

# fields of a create frame that are about the socket, not the request
_FRAME_ONLY = ("type", "generate", "stream_id")
_CONTROL = ("response.steer", "response.cancel", "response.inject")
KNOWN_TYPES = ("response.create", "response.append", "response.processed", *_CONTROL)


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


@dataclass(slots=True)
class _Entry:
    """A response a continuation may name: its full input, its output, its request fields."""

    input: list[Any]
    output: list[Any]
    fields: dict[str, Any]
    lane: str | None
    size: int


class WSSession:
    """The transcripts of one socket (see the module docstring): each lane's last response,
    at most ``max_bytes`` in all (the oldest go first)."""

    __slots__ = ("max_bytes", "_cache", "_lanes", "_total", "_last_turn")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._cache: dict[str, _Entry] = {}  # response id → entry, oldest first
        self._lanes: dict[str | None, str] = {}  # lane → the id of its entry
        self._total = 0
        self._last_turn: Turn | None = None  # (completed()/failed() without a turn: the last one)

    @property
    def last_id(self) -> str | None:
        """The default lane's last response (the one ``response.append`` continues)."""
        return self._lanes.get(None)

    # -- client frames --------------------------------------------------------------------

    def classify(self, data: str | bytes | None) -> Create | Control | Reply | Ignore:
        """One client frame, checked: a create for its lane, a control frame, an error
        reply, or nothing to do (``None``: a binary frame)."""
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
        if kind in ("response.create", "response.append"):
            sid = msg.get("stream_id")
            if sid is not None and not (isinstance(sid, str) and _valid_lane(sid)):
                return Reply(
                    error_frame(
                        400,
                        "stream_id must be 1-256 ASCII letters, digits, underscores, hyphens or periods",
                        "invalid_stream_id",
                        param="stream_id",
                    )
                )
            return Create(msg, sid)
        if kind in _CONTROL:
            return Control(msg)
        if kind == "response.processed":
            return Ignore()
        shown = kind[:100] if isinstance(kind, str) else repr(kind)[:100]
        known = ", ".join(f"'{k}'" for k in KNOWN_TYPES)
        return Reply(
            error_frame(
                400,
                f"unsupported frame type {shown}; expected one of {known}",
                "unsupported_frame_type",
                param="type",
            )
        )

    def frame(self, data: str | bytes | None) -> Action:
        """``classify`` and, for a create, ``create`` at once (one lane, nothing running)."""
        a = self.classify(data)
        if isinstance(a, Create):
            return self.create(a)
        if isinstance(a, Control):
            return Reply(error_frame(400, "no response is running", "response_not_active"))
        return a

    def create(self, c: Create, queued: list[Any] | None = None) -> Action:
        """A create whose turn on its lane has come.  ``queued``: steering input accepted
        for the response it continues, put before its own items."""
        msg = c.msg
        if msg.get("type") == "response.append":
            return self._append(msg, c.lane)
        body = {k: v for k, v in msg.items() if k not in _FRAME_ONLY}
        body["stream"] = True  # a socket always streams
        prev = body.pop("previous_response_id", None)
        new = [*(queued or ()), *_items(body.get("input"))]
        foreign = False
        if prev is not None:
            if not isinstance(prev, str) or prev == "":
                return Reply(self.not_found(prev))
            entry = self._cache.get(prev)
            foreign = entry is None
            body["input"] = new if entry is None else [*entry.input, *entry.output, *new]
        else:
            body["input"] = new
        if msg.get("generate") is False and not foreign:
            return Warmup(body, c.lane)
        turn = Turn(body, new, prev, foreign, c.lane)
        self._last_turn = turn
        return turn

    def _append(self, msg: dict[str, Any], lane: str | None) -> Action:
        rid = self._lanes.get(lane)
        entry = self._cache.get(rid) if rid is not None else None
        if entry is None or rid is None:
            return Reply(
                error_frame(
                    400,
                    "response.append needs an earlier completed response on this connection",
                    "previous_response_not_found",
                    param="input",
                )
            )
        new = _items(msg.get("input"))
        body = {**entry.fields, "input": [*entry.input, *entry.output, *new]}
        turn = Turn(body, new, rid, False, lane)
        self._last_turn = turn
        return turn

    def successor(self, turn: Turn, response_id: str, output: list[Any], items: list[Any]) -> Turn:
        """The response that continues ``response_id`` (``turn``'s, ended by steering or
        completed with steering queued) with ``items``: the same settings, its whole input,
        the output its client received, then the queued input."""
        body = {**turn.body, "input": [*turn.body["input"], *output, *items]}
        nxt = Turn(body, list(items), response_id, False, turn.lane)
        self._last_turn = nxt
        return nxt

    def rebase(self, turn: Turn, history: list[Any]) -> None:
        """A ``foreign`` continuation found elsewhere (the app's store): ``history`` (every
        earlier item) goes before the frame's own items, in the body and the transcript."""
        turn.body["input"] = [*history, *turn.new]

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

    def warmed(self, response_id: str, body: dict[str, Any], lane: str | None = None) -> None:
        """A warm-up was answered with ``response_id``: its input is the transcript."""
        self._remember(response_id, list(body.get("input") or ()), [], body, lane)

    def completed(self, response_id: str, output: list[Any], turn: Turn | None = None) -> None:
        """``turn`` (default: the last one made) completed with these output items (as the
        client got them): it replaces its lane's transcript."""
        t = turn if turn is not None else self._last_turn
        if t is None:
            return
        self._remember(response_id, t.body["input"], output, t.body, t.lane)

    def failed(self, turn: Turn | None = None) -> None:
        """``turn`` (default: the last one made) did not complete: the client cannot continue
        from it, nor, on its own lane, from the response it continued."""
        t = turn if turn is not None else self._last_turn
        lane = t.lane if t is not None else None
        rid = self._lanes.get(lane)
        if rid is not None and (t is None or t.previous is None or t.previous == rid):
            self._drop(rid)

    def _remember(
        self, response_id: str, full_input: list[Any], output: list[Any], body: dict[str, Any], lane: str | None
    ) -> None:
        old = self._lanes.pop(lane, None)
        if old is not None:
            self._drop(old)
        size = len(orjson.dumps(full_input)) + len(orjson.dumps(output))
        if size > self.max_bytes:
            return
        while self._cache and self._total + size > self.max_bytes:
            self._drop(next(iter(self._cache)))
        fields = {k: v for k, v in body.items() if k != "input"}
        self._cache[response_id] = _Entry(full_input, list(output), fields, lane, size)
        self._lanes[lane] = response_id
        self._total += size

    def _drop(self, response_id: str) -> None:
        entry = self._cache.pop(response_id, None)
        if entry is None:
            return
        self._total -= entry.size
        if self._lanes.get(entry.lane) == response_id:
            del self._lanes[entry.lane]

    @property
    def transcript_items(self) -> int:
        return sum(len(e.input) + len(e.output) for e in self._cache.values())


def _valid_lane(sid: str) -> bool:
    return 1 <= len(sid) <= 256 and all(c.isascii() and (c.isalnum() or c in "_.-") for c in sid)
