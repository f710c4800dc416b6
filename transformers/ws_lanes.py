"""Lanes, cancel, steering and inject on one Responses WebSocket: the state, no I/O.

Theory of operation
-------------------
The openai SDK's Responses WebSocket (``openai/types/beta/beta_responses_client_event.py``
and the ``responses_websocket`` session helper) adds, on top of one ``response.create`` per
request:

* **lanes**: ``response.create`` may carry ``stream_id`` (1–256 of ``[A-Za-z0-9_.-]``).
  Creates on one lane run one after the other (FIFO, no overlap); lanes run at the same
  time.  Every event of a response on a named lane echoes its ``stream_id`` (``tag``);
  default-lane events carry none.
* **steering**: ``{"type":"response.steer","previous_response_id","input"}`` queues user
  input for the running response.  The server answers ``response.steer.accepted`` (it owns
  the input), ends the running response at a safe output boundary as
  ``response.incomplete`` with ``incomplete_details.reason: "steered"`` and starts a
  successor (its ``response.created`` is the commit point) that inherits the settings and
  continues with the queued input; a response that stops for client-owned tool output
  keeps the input queued and says ``response.steer.pending`` (``required_input`` stubs)
  after ``response.completed``, and the client's next ``response.create`` continuing it
  gets the queued input put first.  A refusal is ``response.steer.failed`` with one of the
  documented codes and the input handed back.
* **inject**: ``{"type":"response.inject","response_id","input"}`` commits tool outputs
  into a response that waits for them.  A response here never waits (a turn that calls a
  tool completes, and its outputs come in the next ``response.create``), so an inject is
  answered ``response.inject.failed`` with its input handed back: ``response_not_found``
  for a response this socket does not know, ``response_already_completed`` otherwise (at
  once for a finished response, at its end for one still running).
* **cancel**: the SDK's Responses WebSocket has no cancel event; the realtime one's shape
  ``{"type":"response.cancel","response_id"?}`` is taken.  The response stops at once and ends with ``response.failed`` whose
  ``response.status`` is ``cancelled`` (the SDK's terminal events are completed, failed
  and incomplete; ``cancelled`` is one of its response statuses), ``error`` null.  No
  ``response_id``: the running response of the frame's lane (``stream_id``), else of the
  default lane.  Nothing running there: an ``error`` event ``response_cancel_not_active``.

A cut (cancel, or steering at a safe boundary: no client-owned tool call started) stops the
upstream call; every event already written for the client is still sent, then the encoder
closes what is open (a message or reasoning item as ``incomplete``, with its text so far)
and writes the terminal (``ResponsesStreamEncoder.interrupt``), so the terminal's output is
exactly what the client saw.  ``Track`` follows what one response's client has received;
``Steering`` keeps the accepted steering input per response and says what a response's end
means for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = [
    "Steer",
    "Steering",
    "Track",
    "inject_failed",
    "lane_of",
    "required_input",
    "steer_input_error",
    "tag",
]

_LANE = re.compile(r"[A-Za-z0-9_.-]{1,256}")

# output item types the client runs itself (their outputs come back as input items), with
# the type of the output item that answers each (the stubs of response.steer.pending)
_CLIENT_OWNED = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "computer_call": "computer_call_output",
    "shell_call": "shell_call_output",
    "local_shell_call": "local_shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
    "tool_search_call": "tool_search_output",
    "mcp_approval_request": "mcp_approval_response",
}
_SAFE_ITEMS = frozenset({"message", "reasoning"})

_ADDED = '{"type":"response.output_item.added"'
_CREATED = '{"type":"response.created"'
_CREATED_ID = '{"type":"response.created","response":{"id":"'


def lane_of(msg: dict[str, Any]) -> tuple[bool, str | None]:
    """``(valid, stream_id)`` of a client frame: absent or null is the default lane (None)."""
    sid = msg.get("stream_id")
    if sid is None:
        return True, None
    if isinstance(sid, str) and _LANE.fullmatch(sid):
        return True, sid
    return False, None


def tag(line: str, stream_id: str | None) -> str:
    """One event's JSON text with ``stream_id`` added (unchanged on the default lane)."""
    if stream_id is None or not line.endswith("}") or line == "{}":
        return line
    return line[:-1] + ',"stream_id":' + orjson.dumps(stream_id).decode() + "}"


def steer_input_error(value: Any) -> str | None:
    """Why ``value`` is not a steering input (None: it is one): a non-empty string, or a
    non-empty list of user messages holding only ``type``/``role``/``content``, the content
    a string or ``input_text``/``input_image``/``input_file`` parts."""
    if isinstance(value, str):
        return None if value else "input must not be empty"
    if not isinstance(value, list) or not value:
        return "input must be a string or a non-empty array of user messages"
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            return f"input[{i}] must be an object"
        if set(item) - {"type", "role", "content"}:
            return f"input[{i}] may hold only type, role and content"
        if item.get("type", "message") != "message" or item.get("role") != "user":
            return f"input[{i}] must be a user message"
        content = item.get("content")
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            return f"input[{i}].content must be a string or an array of parts"
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in ("input_text", "input_image", "input_file"):
                return f"input[{i}].content[{j}] must be input_text, input_image or input_file"
    return None


def steer_items(value: Any) -> list[dict[str, Any]]:
    """A valid steering input as input items."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return [{"type": "message", **item} if "type" not in item else dict(item) for item in value]


def required_input(output: list[Any]) -> list[dict[str, Any]]:
    """The stubs of ``response.steer.pending``: one per client-owned item of ``output``."""
    stubs: list[dict[str, Any]] = []
    for item in output:
        kind = item.get("type") if isinstance(item, dict) else None
        answer = _CLIENT_OWNED.get(kind) if isinstance(kind, str) else None
        if answer is None:
            continue
        if answer == "mcp_approval_response":
            stubs.append({"type": answer, "approval_request_id": item.get("id")})
            continue
        stub: dict[str, Any] = {"type": answer, "call_id": item.get("call_id")}
        if answer == "function_call_output":
            stub["name"] = item.get("name")
        elif answer == "tool_search_output":
            stub["execution"] = "client"
        stubs.append(stub)
    return stubs


class Track:
    """What the client of one response has received: whether anything went out, the
    response id (from ``response.created``) and whether a client-owned call (or any item
    but a message or reasoning) started.  ``see`` costs a prefix test per line; only
    ``response.created`` and ``output_item.added`` lines are parsed."""

    __slots__ = ("started", "response_id", "tools")

    def __init__(self) -> None:
        self.started = False
        self.response_id: str | None = None
        self.tools = False

    def see(self, line: str) -> None:
        self.started = True
        if self.response_id is None and line.startswith(_CREATED):
            if line.startswith(_CREATED_ID):  # the encoder writes the id first: no parse of the echo
                end = line.find('"', len(_CREATED_ID))
                head = line[len(_CREATED_ID) : end]
                if end > 0 and "\\" not in head:
                    self.response_id = head
                    return
            resp = orjson.loads(line).get("response")
            rid = resp.get("id") if isinstance(resp, dict) else None
            self.response_id = rid if isinstance(rid, str) else ""
        elif not self.tools and line.startswith(_ADDED):
            item = orjson.loads(line).get("item")
            kind = item.get("type") if isinstance(item, dict) else None
            if kind not in _SAFE_ITEMS:
                self.tools = True

    @property
    def safe(self) -> bool:
        """A steering cut may come now: no client-owned call (or other tool item) started.
        An open message or reasoning item is closed where it stands (its text so far)."""
        return not self.tools


def inject_failed(msg: dict[str, Any], code: str, message: str, seq: int = 0) -> dict[str, Any]:
    rid = msg.get("response_id")
    return {
        "type": "response.inject.failed",
        "response_id": rid if isinstance(rid, str) else "",
        "input": msg.get("input") if isinstance(msg.get("input"), list) else [],
        "error": {"code": code, "message": message},
        "sequence_number": seq,
    }


@dataclass(slots=True)
class Steer:
    """One accepted steering submission."""

    id: str
    previous_response_id: str
    input: Any  # as the client sent it (handed back by response.steer.failed)

    @property
    def items(self) -> list[dict[str, Any]]:
        return steer_items(self.input)


@dataclass(slots=True)
class _Target:
    lane: str | None
    steerable: bool
    steers: list[Steer] = field(default_factory=list)


class Steering:
    """The steering state of one socket: the responses running (steerable or not), the
    input accepted for each, and the input still queued after a response that stopped for
    tool output (``pending``), until the create that continues it takes it (``take``)."""

    __slots__ = ("max_steers", "running", "pending", "finished", "_n")

    def __init__(self, max_steers: int = 8) -> None:
        self.max_steers = max_steers
        self.running: dict[str, _Target] = {}
        self.pending: dict[str, list[Steer]] = {}
        self.finished: dict[str, str | None] = {}  # recent finished response ids → lane (bounded)
        self._n = 0

    def started(self, response_id: str, lane: str | None, steerable: bool) -> None:
        self.running[response_id] = _Target(lane, steerable)

    def lane(self, response_id: str) -> str | None:
        t = self.running.get(response_id)
        if t is not None:
            return t.lane
        return self.finished.get(response_id)

    def submit(self, msg: dict[str, Any]) -> tuple[Steer | None, dict[str, Any] | None]:
        """A ``response.steer`` frame: ``(steer, None)`` when accepted (the caller sends
        ``accepted`` and cuts the response), else ``(None, the response.steer.failed event)``."""
        prev = msg.get("previous_response_id")
        value = msg.get("input")
        extra = set(msg) - {"type", "previous_response_id", "input"}
        if not isinstance(prev, str) or not prev:
            return None, failed(None, "", value, "invalid_input", "previous_response_id must be a response id")
        if extra:
            names = ", ".join(sorted(extra))[:200]
            return None, failed(
                None,
                prev,
                value,
                "invalid_input",
                f"response.steer takes only type, previous_response_id and input (got {names})",
            )
        why = steer_input_error(value)
        if why is not None:
            return None, failed(None, prev, value, "invalid_input", why)
        target = self.running.get(prev)
        if target is None:
            if prev in self.finished:
                return None, failed(None, prev, value, "response_already_completed", "the response has finished")
            return None, failed(
                None, prev, value, "response_not_found", "the response is not available on this connection"
            )
        if not target.steerable:
            return None, failed(
                None,
                prev,
                value,
                "steering_not_supported",
                "a response bound to a conversation or using automatic compaction cannot be steered",
            )
        if len(target.steers) >= self.max_steers:
            return None, failed(
                None, prev, value, "too_many_pending_steers", "too much steering input is pending for the response"
            )
        self._n += 1
        steer = Steer(f"steer_{self._n:04d}", prev, value)
        target.steers.append(steer)
        return steer, None

    def ended(
        self, response_id: str, completed: bool, output: list[Any]
    ) -> tuple[str, list[Steer], list[dict[str, Any]]]:
        """A running response ended.  Returns what its accepted input becomes:
        ``("successor", steers, [])``, ``("pending", steers, stubs)`` (kept for ``take``),
        ``("failed", steers, [])`` or ``("none", [], [])``."""
        target = self.running.pop(response_id, None)
        self.finished[response_id] = target.lane if target is not None else None
        while len(self.finished) > 256:
            del self.finished[next(iter(self.finished))]
        if target is None or not target.steers:
            return "none", [], []
        if not completed:
            return "failed", target.steers, []
        stubs = required_input(output)
        if stubs:
            self.pending[response_id] = target.steers
            return "pending", target.steers, stubs
        return "successor", target.steers, []

    def cut(self, response_id: str) -> list[Steer]:
        """A running response was ended by steering: its accepted input, for the successor."""
        target = self.running.pop(response_id, None)
        self.finished[response_id] = target.lane if target is not None else None
        return target.steers if target is not None else []

    def take(self, previous_response_id: str | None) -> list[Steer]:
        """The input queued after ``previous_response_id`` stopped for tool output (for the
        create that continues it, in submission order), now committed."""
        if previous_response_id is None:
            return []
        return self.pending.pop(previous_response_id, [])


def failed(steer_id: str | None, prev: str, value: Any, code: str, message: str, seq: int = 0) -> dict[str, Any]:
    """A ``response.steer.failed`` event (``steer.id`` only once one was allocated)."""
    steer: dict[str, Any] = {"previous_response_id": prev, "input": value if value is not None else ""}
    if steer_id is not None:
        steer["id"] = steer_id
    return {
        "type": "response.steer.failed",
        "error": {"type": "invalid_request_error", "code": code, "message": message},
        "steer": steer,
        "sequence_number": seq,
    }


def accepted(steer: Steer, seq: int = 0) -> dict[str, Any]:
    return {
        "type": "response.steer.accepted",
        "steer": {"id": steer.id, "previous_response_id": steer.previous_response_id},
        "sequence_number": seq,
    }


def pending(steer: Steer, stubs: list[dict[str, Any]], seq: int = 0) -> dict[str, Any]:
    return {
        "type": "response.steer.pending",
        "reason": "waiting_for_required_input",
        "required_input": stubs,
        "steer": {"id": steer.id, "previous_response_id": steer.previous_response_id},
        "sequence_number": seq,
    }
