"""Unified events → a Responses API client stream (Codex CLI, ``client.responses.stream``).

Theory of operation
-------------------
``ResponsesStreamEncoder`` is the inbound emitter for Responses clients.  It takes the
unified events of ``events.py`` and returns Responses stream event dicts with the full item
lifecycle (docs/rules.md §5.3, §5.4), each stamped with a ``sequence_number`` that starts at 0 and
grows by one per event over the whole stream.  One response id is used on every event.

Items and their output slots:

* ``output_index`` is allocated when an item's ``output_item.added`` is emitted, so slots
  are handed out in emission order, 0, 1, 2… with no gaps (the openai SDK appends to its
  snapshot on every ``added`` and indexes it by ``output_index``).
* At most one message item and one reasoning item are open at a time.  Text/Refusal go
  into the open message (opening one, after closing an open reasoning item); Reasoning
  goes into the open reasoning item (opening one, after closing an open message).
  Releasing a tool call or a passthrough item closes both.  ``ReasoningEnd`` closes the
  reasoning item; with no reasoning open it stands for a whole upstream item (typically
  ``encrypted_content`` without a summary) and is emitted as ``added`` + ``done``.
* A change of part kind inside an item (output_text ↔ refusal; summary ↔ raw, or a new
  upstream ``summary_index``) closes the current part and opens the next one, with the
  next ``content_index`` / ``summary_index``.  Text is never merged across parts, so
  every byte appears exactly once in the deltas and once in the ``done`` events.
* Tool calls (docs/rules.md §3 inbound rules): a call's ``added`` waits until it has a non-empty
  name **and** every lower-index call has been released; argument text arriving before
  that is buffered and replayed as one delta right after ``added``.  Identity arriving
  after release (``namespace``, the upstream ``call_id`` replacing a minted one) goes
  into the ``done`` events, which Codex reads as the final item.  ``ToolCallEnd`` closes
  the call; its ``arguments`` win only when ``mismatch`` is set (docs/rules.md §3: Codex reads only
  ``output_item.done``); otherwise the streamed bytes are the final text.
* ``Finish`` closes everything still open (items cut short by a non-``completed`` finish
  get ``status: "incomplete"``), drops calls that never got a name (docs/rules.md §7.2; repair
  ``tool_call_unnamed_dropped``) and emits exactly one terminal event (table
  ``_TERMINAL``).  A ``completed`` turn left with nothing but reasoning after such a drop
  becomes ``response.failed`` (``upstream_tool_call_dropped``) instead of a silent empty
  turn.  ``end()`` without ``Finish`` fails the response (``upstream_stream_truncated``).
* The terminal response's ``output`` is every item as its ``output_item.done`` carried
  it, in ``output_index`` order; ``response`` exposes it for the non-streaming path.
* A ``Passthrough`` item is the upstream's own structure, written back as it came.  One
  nested deeper than ``MAX_ITEM_DEPTH`` levels could not be written inside the terminal
  event (orjson writes at most 254), so it fails the response instead
  (``upstream_bad_event``), before anything of it goes out.
* ``abort(error)`` is the last resort of the app's stream guard: when a ``feed`` raised
  half way, it returns ``error`` + ``response.failed`` built from the response id, model
  and sequence number alone (``response.created`` first if nothing was sent yet), whatever
  state the encoder was left in; it cannot raise.
* ``text_delta(text)`` is ``feed(Text(text))`` already serialized, for the commonest event:
  when the open part is output_text, the delta's JSON is a template fixed per part (item
  id, ``output_index``, ``content_index``) with the text and ``sequence_number`` put in,
  the very bytes ``orjson.dumps`` writes for the dict; in any other state it returns
  ``None`` and the caller takes ``feed``.  ``reasoning_delta(ev)`` is the same for
  ``feed(ev)`` of a ``Reasoning`` into the open reasoning part of its kind and index, and
  ``args_delta(ev)`` for a ``ToolCall``'s argument text to a call that streams live (a
  format per call).
  ``frame_deltas(framer)`` has them write the transport's framing of the event around the
  JSON in the same join (the Bridge's SSE or WebSocket framing: one copy of the event's
  bytes less).

Reasoning replay: the reasoning item's ``encrypted_content`` is the upstream's blob when
one came with ``ReasoningEnd``, else — when ``ctx.envelope_key`` is set — the full
reasoning text sealed by ``envelope.seal`` so the next turn can replay it statelessly.
A call's thought signature (``ToolCall.signature``, Gemini) is sealed with its call id into
the reasoning item open when the call is released, else into a reasoning item of its own
emitted just before the call (after it, when the signature came after the call went out):
Codex replays reasoning items, and ``transformers/thought_signatures.py`` reads them back.

The response object (on ``response.created``/``in_progress`` and the terminal event, and
the non-streaming answer) carries every field the Open Responses ``ResponseResource``
schema requires, so strict clients and the OpenAI SDK both accept it.  ``request_echo``
(the request fields the app chooses to echo) wins over the defaults of table
``_DEFAULTS``; a ``null`` in it means "not set" and gives the default.  Function tools in
the echo get ``description``/``parameters``/``strict`` (``null`` when the request left
them out), ``reasoning`` gets ``effort``/``summary``, ``text`` gets ``format``.  The echo
never overrides what this response is (id, status, output, usage, error…).
``max_output_tokens`` defaults to the catalogue's ``ctx.max_output_tokens`` (what request
translation sends upstream when the client sets none).  ``completed_at`` is set on the
terminal response only, and only when its status is ``completed``.  The ``error`` event
carries the error both flat (``code``/``message``/``param``: OpenAI, Codex) and nested as
``error: {type, code, message, param}`` (Open Responses ``ErrorStreamingEvent``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, cast

import orjson

from . import envelope
from .context import Ctx
from .errors import stream_error
from .events import (
    Event,
    Finish,
    Passthrough,
    Reasoning,
    ReasoningEnd,
    Refusal,
    Start,
    Text,
    ToolCall,
    ToolCallEnd,
    Usage,
)
from .ids import ordered_hex as _hex  # (a module name: tests put a counter in its place)
from .usage import normalize_responses
from .vocab import FinishStatus

__all__ = ["ResponsesStreamEncoder", "encode_response", "MAX_ITEM_DEPTH"]

# nesting levels a passthrough item may have: it is written at most 3 levels down (the
# terminal event's response.output), and orjson refuses to write more than 254 levels
MAX_ITEM_DEPTH = 200

# Finish.status → (terminal event type, response status); see also incomplete_as_completed
_TERMINAL: dict[FinishStatus, tuple[str, str]] = {
    "completed": ("response.completed", "completed"),
    "incomplete": ("response.incomplete", "incomplete"),
    "failed": ("response.failed", "failed"),
}

# ToolCall.custom → (item type, text key, delta event, done event, item id prefix)
_TOOL_KIND: dict[bool, tuple[str, str, str, str, str]] = {
    False: (
        "function_call",
        "arguments",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "fc_",
    ),
    True: (
        "custom_tool_call",
        "input",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "ctc_",
    ),
}

# message content part kind → (part type, text key, delta event, done event)
_MSG_PART: dict[str, tuple[str, str, str, str]] = {
    "text": ("output_text", "text", "response.output_text.delta", "response.output_text.done"),
    "refusal": ("refusal", "refusal", "response.refusal.delta", "response.refusal.done"),
}

# reasoning part kind → (part type, index key, delta event, done event, part added, part done)
_RS_PART: dict[str, tuple[str, str, str, str, str, str]] = {
    "summary": (
        "summary_text",
        "summary_index",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
    ),
    "raw": (
        "reasoning_text",
        "content_index",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.added",
        "response.content_part.done",
    ),
}


def _unframed(_type: str) -> tuple[bytes, bytes]:
    """No framing around a delta event's JSON (until ``frame_deltas``)."""
    return b"", b""


# Response object field → value when the request did not set it (request_echo overrides).
# Every field is required by the Open Responses ResponseResource schema.  The mutable
# defaults (metadata, tools, text, reasoning) are built fresh per response in ``_resp``,
# and ``max_output_tokens`` defaults to ``ctx.max_output_tokens``.
_DEFAULTS: dict[str, Any] = {
    "background": False,  # the proxy answers in the foreground only
    "frequency_penalty": 0.0,  # OpenAI default
    "instructions": None,
    "max_tool_calls": None,
    "parallel_tool_calls": True,  # OpenAI default
    "presence_penalty": 0.0,  # OpenAI default
    "previous_response_id": None,
    "prompt_cache_key": None,
    "safety_identifier": None,
    "service_tier": "default",
    "store": False,  # nothing is stored unless the app echoes a store it honoured
    "temperature": 1.0,  # OpenAI default
    "tool_choice": "auto",  # OpenAI default
    "top_logprobs": 0,
    "top_p": 1.0,  # OpenAI default
    "truncation": "disabled",  # OpenAI default
}

# what the response itself is: never taken from request_echo
_NOT_ECHOED = frozenset(
    {"id", "object", "created_at", "completed_at", "status", "model", "output", "usage", "error", "incomplete_details"}
)

# keys a function tool in the echo always has (null when the request left them out)
_FUNCTION_TOOL_KEYS = ("description", "parameters", "strict")


def _echo_tool(tool: Any) -> Any:
    if isinstance(tool, dict) and tool.get("type") == "function" and any(k not in tool for k in _FUNCTION_TOOL_KEYS):
        tool = dict(tool)
        for k in _FUNCTION_TOOL_KEYS:
            tool.setdefault(k, None)
    return tool


def _normalize_echo(echo: dict | None) -> dict[str, Any]:
    """The echoed request fields, completed to the shapes the response schema requires."""
    out: dict[str, Any] = {}
    for k, v in (echo or {}).items():
        if v is None or k in _NOT_ECHOED:
            continue  # null = not set: the default applies
        if k == "tools" and isinstance(v, list):
            v = [_echo_tool(t) for t in v]
        elif k == "reasoning" and isinstance(v, dict) and ("effort" not in v or "summary" not in v):
            v = {"effort": None, "summary": None, **v}
        elif k == "text" and isinstance(v, dict) and "format" not in v:
            v = {"format": {"type": "text"}, **v}
        out[k] = v
    return out


def _now() -> int:
    return int(time.time())


def _too_deep(v: Any, limit: int) -> bool:
    """True when ``v`` nests objects/arrays more than ``limit`` levels (iterative: an upstream's
    structure never costs recursion)."""
    stack: list[tuple[Any, int]] = [(v, 1)]
    while stack:
        x, d = stack.pop()
        if d > limit:
            return True
        for y in x.values() if x.__class__ is dict else x:
            if y.__class__ is dict or y.__class__ is list:
                stack.append((y, d + 1))
    return False


class _Msg:
    __slots__ = ("id", "oi", "parts", "kind", "text")

    def __init__(self, id: str, oi: int) -> None:
        self.id = id
        self.oi = oi
        self.parts: list[dict[str, Any]] = []  # closed parts
        self.kind: str | None = None  # kind of the open part
        self.text: list[str] = []  # text of the open part


class _Rs:
    __slots__ = ("id", "oi", "summary", "content", "kind", "key", "text", "all")

    def __init__(self, id: str, oi: int) -> None:
        self.id = id
        self.oi = oi
        self.summary: list[dict[str, Any]] = []
        self.content: list[dict[str, Any]] = []
        self.kind: str | None = None  # kind of the open part
        self.key: tuple[str, int] | None = None  # upstream (kind, summary_index) of it
        self.text: list[str] = []
        self.all: list[str] = []  # every reasoning byte of the item, for the envelope


class _Call:
    __slots__ = (
        "index",
        "call_id",
        "name",
        "namespace",
        "custom",
        "item_id",
        "buf",
        "parts",
        "released",
        "oi",
        "ended",
        "final",
        "minted",
        "kind",
        "fmt",
        "fmt_id",
        "sig",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.call_id: str | None = None
        self.name: str | None = None
        self.namespace: str | None = None
        self.custom: bool | None = None
        self.item_id: str | None = None
        self.buf: list[str] = []  # argument text received before release
        self.parts: list[str] = []  # all argument text
        self.released = False
        self.oi = -1
        self.ended = False
        self.final: str | None = None  # ToolCallEnd.arguments when mismatch
        self.minted = False  # call_id minted at release (an upstream one may still come)
        self.kind = _TOOL_KIND[False]
        self.fmt = b""  # args_delta's format once released, for the call id fmt_id
        self.fmt_id: str | None = None
        self.sig: str | None = None  # the upstream's thought signature, not yet sealed out

    def merge(self, call_id: str | None, name: str | None, namespace: str | None, item_id: str | None) -> None:
        if call_id and (self.call_id is None or self.minted):
            self.call_id = call_id
            self.minted = False
        if name and not self.name:
            self.name = name
        if namespace and not self.namespace:
            self.namespace = namespace
        if item_id and not self.item_id:
            self.item_id = item_id


class ResponsesStreamEncoder:
    __slots__ = (
        "ctx",
        "_id",
        "_created_at",
        "_model",
        "_echo",
        "_inc_as_completed",
        "_seq",
        "_started",
        "done",
        "_slots",
        "_msg",
        "_rs",
        "_calls",
        "_pending",
        "_usage",
        "_final",
        "_delta_key",
        "_delta_head",
        "_framer",
        "_rdelta_key",
        "_rdelta_head",
    )

    def __init__(
        self,
        ctx: Ctx,
        *,
        response_id: str | None = None,
        created_at: int | None = None,
        incomplete_as_completed: bool = False,
        request_echo: dict | None = None,
    ) -> None:
        self.ctx = ctx
        self._id = response_id
        self._created_at = created_at
        self._model = ctx.public_model or None
        self._echo = _normalize_echo(request_echo)
        self._inc_as_completed = incomplete_as_completed
        self._seq = 0
        self._started = False
        self.done = False
        self._slots: list[dict[str, Any] | None] = []  # output_index → item as done
        self._msg: _Msg | None = None
        self._rs: _Rs | None = None
        self._calls: dict[int, _Call] = {}
        self._pending: list[_Call] = []  # unreleased calls, ascending index
        self._usage: dict[str, Any] | None = None
        self._final: dict[str, Any] | None = None
        self._delta_key: list[str] | None = None  # the open part's text list, when _delta_head is its
        self._delta_head = b""  # the delta event's format (``%b`` the text's JSON), for _delta_key
        self._framer: Callable[[str], tuple[bytes, bytes]] = _unframed  # around a delta's JSON (frame_deltas)
        self._rdelta_key: list[str] | None = None  # the open reasoning part's text list, when _rdelta_head is its
        self._rdelta_head = b""  # its delta event's format (``%b`` the text's JSON, ``%d`` the number)

    # ------------------------------------------------------------------ public API

    def feed(self, ev: Event) -> list[dict]:
        if self.done:
            return []
        out: list[dict] = []
        if type(ev) is Start:
            if not self._started:
                self._start(out, ev)
            return out
        if not self._started:
            self._start(out, None)
        _DISPATCH[type(ev)](self, out, ev)
        return out

    def frame_deltas(self, framer: Callable[[str], tuple[bytes, bytes]]) -> None:
        """Make ``text_delta`` and ``reasoning_delta`` write their event framed: ``framer(type)``
        is what goes before and after the JSON of an event of that type (the transport's
        framing of that one event, written in the same join as the JSON)."""
        self._framer = framer
        self._delta_key = None  # the heads are made again with their frame
        self._rdelta_key = None
        for c in self._calls.values():
            c.fmt_id = None

    def text_delta(self, text: str) -> bytes | None:
        """``feed(Text(text))`` already serialized, when it is one ``output_text.delta`` into
        the open output_text part: the same state change (text kept, sequence number taken)
        and the very bytes ``orjson.dumps`` writes for that event's dict, framed as
        ``frame_deltas`` said (not at all unless it was called).  ``None`` (nothing
        changed) in every other state: the caller takes ``feed``."""
        m = self._msg
        if m is None or m.kind != "text" or not text or self.done:
            return None
        # the open part's text list stands for the part (a new list per part, kept referenced
        # here, so no later list can take its identity): the head is made once per part
        if m.text is not self._delta_key:
            self._new_delta_head(m)
        m.text.append(text)
        seq = self._seq
        self._seq = seq + 1
        return self._delta_head % (orjson.dumps(text), seq)

    @property
    def text_open(self) -> bool:
        """A text part is open: ``text_delta`` takes a non-empty text (``text_deltas`` a run)."""
        m = self._msg
        return m is not None and m.kind == "text" and not self.done

    def text_deltas(self, quoted: list[bytes], texts: list[str]) -> bytes:
        """``text_delta`` for each of ``texts`` (non-empty), at once, ``text_open``, given each
        one's JSON as ``orjson.dumps`` writes it (``quoted``, read off the upstream's bytes by
        ``text_runs.py``): the same state change and the same bytes."""
        m: _Msg = self._msg  # type: ignore[assignment]
        if m.text is not self._delta_key:
            self._new_delta_head(m)
        m.text.extend(texts)
        seq = self._seq
        self._seq = seq + len(texts)
        return b"".join(map(self._delta_head.__mod__, zip(quoted, range(seq, self._seq))))

    def _new_delta_head(self, m: _Msg) -> None:
        """The open part's delta event format (``text_delta``), made once per part."""
        self._delta_key = m.text
        # the dict _on_text builds, up to its text: same keys, same order
        head = {
            "type": "response.output_text.delta",
            "item_id": m.id,
            "output_index": m.oi,
            "content_index": len(m.parts),
        }
        self._delta_head = self._format(head, b',"logprobs":[]')

    def _format(self, head: dict[str, Any], rest: bytes) -> bytes:
        """A delta event's format: ``head``'s JSON, its ``delta`` (``%b``), ``rest`` and its
        ``sequence_number`` (``%d``), framed; the head's and the frame's own '%' doubled, so
        the text's JSON and the number are put in by the one '%' operation."""
        before, after = self._framer(head["type"])
        fixed = before + orjson.dumps(head)[:-1] + b',"delta":'
        tail = rest + b',"sequence_number":'
        return fixed.replace(b"%", b"%%") + b"%b" + tail + b"%d}" + after.replace(b"%", b"%%")

    def reasoning_delta(self, ev: Reasoning) -> bytes | None:
        """``feed(ev)`` already serialized, as ``text_delta`` is ``feed(Text)``'s, when it is
        one delta into the open reasoning part of its kind and index: the same state change
        (text kept, sequence number taken) and the very bytes ``orjson.dumps`` writes for
        that event's dict, framed as ``frame_deltas`` said.  ``None`` (nothing changed) in
        every other state (no reasoning item open, another part, an empty text): the caller
        takes ``feed``."""
        r = self._rs
        text = ev.text
        if r is None or not text or self.done:
            return None
        kind = "raw" if ev.kind == "raw" else "summary"
        if r.key != (kind, ev.summary_index):
            return None
        if r.text is not self._rdelta_key:  # (a new list per part, as text_delta's key)
            self._rdelta_key = r.text
            # the dict _on_reasoning builds, up to its text: same keys, same order
            _, ikey, delta, _, _, _ = _RS_PART[kind]
            head = {"type": delta, "item_id": r.id, "output_index": r.oi, ikey: self._rs_part_index(r)}
            self._rdelta_head = self._format(head, b"")
        r.text.append(text)
        r.all.append(text)
        seq = self._seq
        self._seq = seq + 1
        return self._rdelta_head % (orjson.dumps(text), seq)

    def args_delta(self, ev: ToolCall) -> bytes | None:
        """``feed(ev)`` already serialized, as ``text_delta`` is ``feed(Text)``'s, for a
        ``ToolCall`` with argument text for a call that streams live (released, not ended)
        and no identity it would take (an upstream ``call_id`` in place of a minted one, a
        first ``namespace``): the same state change (text kept, sequence number taken) and
        the very bytes ``orjson.dumps`` writes for its delta event (``_delta``), from a
        format made once per call and call id, framed as ``frame_deltas`` said.  ``None``
        (nothing changed) otherwise: the caller takes ``feed``."""
        a = ev.arguments
        if self.done or not a:
            return None
        c = self._calls.get(ev.index)
        if c is None or not c.released or c.ended:
            return None
        if (ev.call_id and c.minted) or (ev.namespace and not c.namespace):
            return None
        if c.fmt_id is not c.call_id:  # (a custom call's delta carries its call id)
            c.fmt_id = c.call_id
            head = self._delta(c, "")
            del head["delta"]
            c.fmt = self._format(head, b"")
        c.parts.append(a)
        seq = self._seq
        self._seq = seq + 1
        return c.fmt % (orjson.dumps(a), seq)

    def end(self) -> list[dict]:
        if self.done:
            return []
        return self.feed(
            Finish(
                status="failed",
                error=stream_error("upstream_stream_truncated", "upstream stream ended before the response finished"),
            )
        )

    def heartbeat(self) -> list[dict]:
        """A real event for a long upstream silence (docs/rules.md §5.3: Codex's idle timer counts
        parsed events, so SSE comments do not keep it alive): ``response.in_progress`` with
        the response as it stands.  Nothing before the stream started or after it ended."""
        if self.done or not self._started:
            return []
        out: list[dict] = []
        self._emit(out, {"type": "response.in_progress", "response": self.response})
        return out

    def abort(self, error: dict[str, Any]) -> list[dict]:
        """``error`` + ``response.failed`` from the id, model and sequence number alone (see
        the module docstring); the encoder is done afterwards."""
        self.done = True
        rid = self._id if self._id.__class__ is str else "resp_" + _hex()
        self._id = rid
        created = self._created_at if self._created_at.__class__ is int else _now()
        model = self._model if self._model.__class__ is str else ""
        seq = self._seq if self._seq.__class__ is int else 0
        code, message = error.get("code"), error.get("message")
        code = code if code.__class__ is str and code else "server_error"
        message = message if message.__class__ is str and message else "upstream error"

        def resp(status: str, err: Any) -> dict:
            return {
                **_DEFAULTS,
                "id": rid,
                "object": "response",
                "created_at": created,
                "status": status,
                "completed_at": None,
                "model": model,
                "output": [],
                "error": err,
                "incomplete_details": None,
                "max_output_tokens": None,
                "metadata": {},
                "tools": [],
                "text": {"format": {"type": "text"}},
                "reasoning": {"effort": None, "summary": None},
                "usage": normalize_responses(None),
            }

        out: list[dict] = []
        if not self._started:
            self._started = True
            out.append({"type": "response.created", "response": resp("in_progress", None), "sequence_number": seq})
            seq += 1
        payload = {"type": "server_error", "code": code, "message": message, "param": None}
        out.append(
            {"type": "error", "code": code, "message": message, "param": None, "error": payload, "sequence_number": seq}
        )
        final = resp("failed", {"code": code, "message": message})
        out.append({"type": "response.failed", "response": final, "sequence_number": seq + 1})
        self._seq = seq + 2
        self._final = final
        return out

    def interrupt(self, how: str) -> list[dict]:
        """End the response now for the transport (the Responses WebSocket's cancel and
        steering), whatever it was doing: an open message or reasoning item closes as
        ``incomplete`` with what it holds, calls not yet released are dropped, and the
        terminal is ``response.failed`` with status ``cancelled`` (``how == "cancelled"``)
        or ``response.incomplete`` with reason ``steered``.  Nothing once the response ended."""
        if self.done:
            return []
        out: list[dict] = []
        if not self._started:
            self._start(out, None)
        self._close_msg(out, "incomplete")
        self._close_rs(out)
        self._pending = []
        output = [s for s in self._slots if s is not None]
        usage = self._usage if self._usage is not None else normalize_responses(None)
        if how == "cancelled":
            resp = self._resp("cancelled", output, usage)
            etype = "response.failed"
        else:
            resp = self._resp("incomplete", output, usage)
            resp["incomplete_details"] = {"reason": how}
            etype = "response.incomplete"
        self._final = resp
        self.done = True
        self._emit(out, {"type": etype, "response": resp})
        return out

    def take_sequence(self) -> int:
        """A sequence number for an event the transport adds to this response's stream (the
        Responses WebSocket's steering and cut events); the encoder's next events follow it."""
        seq = self._seq
        self._seq = seq + 1
        return seq

    @property
    def response(self) -> dict:
        if self._final is not None:
            return self._final
        if self._id is None:
            self._id = "resp_" + _hex()
        return self._resp("in_progress", [s for s in self._slots if s is not None])

    # ------------------------------------------------------------------ helpers

    def _emit(self, out: list[dict], ev: dict) -> None:
        ev["sequence_number"] = self._seq
        self._seq += 1
        out.append(ev)

    def _resp(self, status: str, output: list, usage: dict | None = None) -> dict:
        return {
            "id": self._id,
            "object": "response",
            "created_at": self._created_at,
            "status": status,
            "completed_at": None,
            "model": self._model or "",
            "output": output,
            "error": None,
            "incomplete_details": None,
            **_DEFAULTS,
            "max_output_tokens": self.ctx.max_output_tokens,
            "metadata": {},
            "tools": [],
            "text": {"format": {"type": "text"}},
            "reasoning": {"effort": None, "summary": None},
            **self._echo,
            "usage": usage,
        }

    def _slot(self) -> int:
        self._slots.append(None)
        return len(self._slots) - 1

    def _start(self, out: list[dict], ev: Start | None) -> None:
        self._started = True
        if self._id is None:
            rid = ev.response_id if ev is not None else None
            self._id = rid if isinstance(rid, str) and rid.startswith("resp_") else "resp_" + _hex()
        if self._created_at is None:
            c = ev.created if ev is not None else None
            self._created_at = c if c.__class__ is int else int(time.time())
        if not self._model and ev is not None and ev.model and ev.model.__class__ is str:
            self._model = ev.model
        self._emit(out, {"type": "response.created", "response": self._resp("in_progress", [])})
        self._emit(out, {"type": "response.in_progress", "response": self._resp("in_progress", [])})

    # ------------------------------------------------------------------ message

    def _msg_part(self, out: list[dict], kind: str) -> _Msg:
        m = self._msg
        if m is None:
            self._close_rs(out)
            m = self._msg = _Msg("msg_" + _hex(), self._slot())
            self._emit(
                out,
                {
                    "type": "response.output_item.added",
                    "output_index": m.oi,
                    "item": {
                        "id": m.id,
                        "type": "message",
                        "role": "assistant",
                        "status": "in_progress",
                        "content": [],
                    },
                },
            )
        if m.kind != kind:
            if m.kind is not None:
                self._close_msg_part(out, m)
            m.kind = kind
            ptype, key = _MSG_PART[kind][:2]
            part: dict[str, Any] = {"type": ptype, key: ""}
            if ptype == "output_text":
                part["annotations"] = []
            self._emit(
                out,
                {
                    "type": "response.content_part.added",
                    "item_id": m.id,
                    "output_index": m.oi,
                    "content_index": len(m.parts),
                    "part": part,
                },
            )
        return m

    def _close_msg_part(self, out: list[dict], m: _Msg) -> None:
        ptype, key, _, done = _MSG_PART[m.kind]  # type: ignore[index]
        text = "".join(m.text)
        ci = len(m.parts)
        ev: dict[str, Any] = {"type": done, "item_id": m.id, "output_index": m.oi, "content_index": ci, key: text}
        if ptype == "output_text":
            ev["logprobs"] = []
        self._emit(out, ev)
        part: dict[str, Any] = {"type": ptype, key: text}
        if ptype == "output_text":
            part["annotations"] = []
        self._emit(
            out,
            {
                "type": "response.content_part.done",
                "item_id": m.id,
                "output_index": m.oi,
                "content_index": ci,
                "part": part,
            },
        )
        m.parts.append(dict(part))
        m.kind = None
        m.text = []

    def _close_msg(self, out: list[dict], status: str = "completed") -> None:
        m = self._msg
        if m is None:
            return
        self._msg = None
        if m.kind is not None:
            self._close_msg_part(out, m)
        item = {"id": m.id, "type": "message", "role": "assistant", "status": status, "content": m.parts}
        self._slots[m.oi] = item
        self._emit(out, {"type": "response.output_item.done", "output_index": m.oi, "item": item})

    def _on_text(self, out: list[dict], ev: Text) -> None:
        if not ev.text:
            return
        m = self._msg_part(out, "text")
        m.text.append(ev.text)
        self._emit(
            out,
            {
                "type": "response.output_text.delta",
                "item_id": m.id,
                "output_index": m.oi,
                "content_index": len(m.parts),
                "delta": ev.text,
                "logprobs": [],
            },
        )

    def _on_refusal(self, out: list[dict], ev: Refusal) -> None:
        if not ev.text:
            return
        m = self._msg_part(out, "refusal")
        m.text.append(ev.text)
        self._emit(
            out,
            {
                "type": "response.refusal.delta",
                "item_id": m.id,
                "output_index": m.oi,
                "content_index": len(m.parts),
                "delta": ev.text,
            },
        )

    # ------------------------------------------------------------------ reasoning

    def _open_rs(self, out: list[dict], item_id: str | None = None) -> _Rs:
        self._close_msg(out)
        r = self._rs = _Rs(item_id or "rs_" + _hex(), self._slot())
        self._emit(
            out,
            {
                "type": "response.output_item.added",
                "output_index": r.oi,
                "item": {"id": r.id, "type": "reasoning", "summary": []},
            },
        )
        return r

    def _rs_part_index(self, r: _Rs) -> int:
        return len(r.summary) if r.kind == "summary" else len(r.content)

    def _close_rs_part(self, out: list[dict], r: _Rs) -> None:
        ptype, ikey, _, done, _, part_done = _RS_PART[r.kind]  # type: ignore[index]
        text = "".join(r.text)
        idx = self._rs_part_index(r)
        self._emit(out, {"type": done, "item_id": r.id, "output_index": r.oi, ikey: idx, "text": text})
        self._emit(
            out,
            {
                "type": part_done,
                "item_id": r.id,
                "output_index": r.oi,
                ikey: idx,
                "part": {"type": ptype, "text": text},
            },
        )
        (r.summary if r.kind == "summary" else r.content).append({"type": ptype, "text": text})
        r.kind = None
        r.key = None
        r.text = []

    def _close_rs(self, out: list[dict], end: ReasoningEnd | None = None) -> None:
        r = self._rs
        if r is None:
            return
        self._rs = None
        if r.kind is not None:
            self._close_rs_part(out, r)
        self._finish_rs(out, r, end.encrypted_content if end is not None else None)

    def _finish_rs(self, out: list[dict], r: _Rs, blob: str | None) -> None:
        item: dict[str, Any] = {"id": r.id, "type": "reasoning", "summary": r.summary}
        if r.content:
            item["content"] = r.content
        if blob:
            item["encrypted_content"] = blob
        elif self.ctx.envelope_key and r.all:
            item["encrypted_content"] = envelope.seal("".join(r.all), self.ctx.envelope_key)
        self._slots[r.oi] = item
        self._emit(out, {"type": "response.output_item.done", "output_index": r.oi, "item": item})

    def _on_reasoning(self, out: list[dict], ev: Reasoning) -> None:
        if not ev.text:
            return
        r = self._rs or self._open_rs(out)
        kind = "raw" if ev.kind == "raw" else "summary"
        key = (kind, ev.summary_index)
        if r.key != key:
            if r.kind is not None:
                self._close_rs_part(out, r)
            r.kind = kind
            r.key = key
            ptype, ikey, _, _, part_added, _ = _RS_PART[kind]
            self._emit(
                out,
                {
                    "type": part_added,
                    "item_id": r.id,
                    "output_index": r.oi,
                    ikey: self._rs_part_index(r),
                    "part": {"type": ptype, "text": ""},
                },
            )
        r.text.append(ev.text)
        r.all.append(ev.text)
        _, ikey, delta, _, _, _ = _RS_PART[kind]
        self._emit(
            out,
            {
                "type": delta,
                "item_id": r.id,
                "output_index": r.oi,
                ikey: self._rs_part_index(r),
                "delta": ev.text,
            },
        )

    def _on_reasoning_end(self, out: list[dict], ev: ReasoningEnd) -> None:
        if self._rs is not None:
            # events already went out under our id: keep it (ids never change mid-stream)
            self._close_rs(out, ev)
        elif ev.item_id or ev.encrypted_content:
            # a whole upstream reasoning item with no streamed text (encrypted only)
            r = self._open_rs(out, ev.item_id)
            self._rs = None
            self._finish_rs(out, r, ev.encrypted_content)

    # ------------------------------------------------------------------ tool calls

    def _on_tool_call(self, out: list[dict], ev: ToolCall) -> None:
        c = self._calls.get(ev.index)
        if c is None:
            c = self._calls[ev.index] = _Call(ev.index)
            self._add_pending(c)
        c.merge(ev.call_id, ev.name, ev.namespace, ev.item_id)
        if ev.signature is not None and c.sig is None:
            c.sig = ev.signature
        if ev.custom is not None and c.custom is None and not c.released:
            c.custom = ev.custom
        a = ev.arguments
        if a:
            c.parts.append(a)
            if c.released:
                self._emit(out, self._delta(c, a))
            else:
                c.buf.append(a)
        if not c.released and ev.name:
            self._release_ready(out)

    def _on_tool_call_end(self, out: list[dict], ev: ToolCallEnd) -> None:
        c = self._calls.get(ev.index)
        if c is None:
            c = self._calls[ev.index] = _Call(ev.index)
            self._add_pending(c)
        if c.ended:
            return
        c.merge(ev.call_id, ev.name, ev.namespace, None)
        f = ev.arguments
        if f is not None:
            if ev.mismatch:
                c.final = f
            elif f:
                # decoders send a missing suffix as a ToolCall delta first; if one did not,
                # stream it here rather than lose it (anything else: the deltas stand)
                a = "".join(c.parts)
                if len(f) > len(a) and f.startswith(a):
                    sfx = f[len(a) :]
                    c.parts.append(sfx)
                    if c.released:
                        self._emit(out, self._delta(c, sfx))
                    else:
                        c.buf.append(sfx)
        c.ended = True
        if c.released:
            self._close_call(out, c, "completed")
        else:
            self._release_ready(out)

    def _add_pending(self, c: _Call) -> None:
        p = self._pending
        if not p or p[-1].index < c.index:
            p.append(c)
        else:  # out-of-order index (decoders number calls in order; be safe anyway)
            p.append(c)
            p.sort(key=lambda x: x.index)

    def _release_ready(self, out: list[dict]) -> None:
        p = self._pending
        n = 0
        while n < len(p) and p[n].name:
            self._release(out, p[n])
            n += 1
        if n:
            del p[:n]

    def _delta(self, c: _Call, a: str) -> dict:
        if c.custom:
            return {"type": c.kind[2], "item_id": c.item_id, "call_id": c.call_id, "output_index": c.oi, "delta": a}
        return {"type": c.kind[2], "item_id": c.item_id, "output_index": c.oi, "delta": a}

    def _release(self, out: list[dict], c: _Call) -> None:
        self._close_msg(out)
        if not c.call_id:
            c.call_id = "call_" + _hex()
            c.minted = True
        if c.sig is not None:
            self._signature(out, c)
        else:
            self._close_rs(out)
        c.released = True
        c.kind = kind = _TOOL_KIND[bool(c.custom)]
        if not c.item_id:
            c.item_id = kind[4] + c.call_id
        c.oi = self._slot()
        item = self._call_item(c, "in_progress", "")
        self._emit(out, {"type": "response.output_item.added", "output_index": c.oi, "item": item})
        if c.buf:
            self._emit(out, self._delta(c, "".join(c.buf)))
            c.buf = []
        if c.ended:
            self._close_call(out, c, "completed")

    def _call_item(self, c: _Call, status: str, text: str) -> dict:
        item: dict[str, Any] = {
            "id": c.item_id,
            "type": c.kind[0],
            "status": status,
            "call_id": c.call_id,
            "name": c.name,
            c.kind[1]: text,
        }
        if c.namespace:  # a custom call too: Codex's code mode (``exec`` in ``functions``)
            item["namespace"] = c.namespace
        return item

    def _close_call(self, out: list[dict], c: _Call, status: str) -> None:
        text = c.final if c.final is not None else "".join(c.parts)
        kind = c.kind
        done: dict[str, Any] = {"type": kind[3], "item_id": c.item_id}
        if c.custom:
            done["call_id"] = c.call_id
            done["output_index"] = c.oi
            done["input"] = text
        else:
            done["output_index"] = c.oi
            done["arguments"] = text
            done["name"] = c.name
            done["call_id"] = c.call_id
            if c.namespace:
                done["namespace"] = c.namespace
        self._emit(out, done)
        item = self._call_item(c, status, text)
        self._slots[c.oi] = item
        self._emit(out, {"type": "response.output_item.done", "output_index": c.oi, "item": item})
        c.ended = True
        if c.sig is not None:  # it came after the call went out: its own item, after the call
            self._signature(out, c)

    def _signature(self, out: list[dict], c: _Call) -> None:
        """Call ``c``'s thought signature (Gemini) sealed into a reasoning item's
        ``encrypted_content``, which Codex replays: the open reasoning item's, else a
        reasoning item of its own, before the call (transformers/thought_signatures.py)."""
        sigs = {cast(str, c.call_id): cast(str, c.sig)}
        c.sig = None
        key = self.ctx.envelope_key
        r = self._rs
        if r is not None:
            self._rs = None
            if r.kind is not None:
                self._close_rs_part(out, r)
            self._finish_rs(out, r, envelope.seal("".join(r.all), key, sigs) if key else None)
        elif key:
            r = self._open_rs(out)
            self._rs = None
            self._finish_rs(out, r, envelope.seal("", key, sigs))

    # ------------------------------------------------------------------ the rest

    def _on_passthrough(self, out: list[dict], ev: Passthrough) -> None:
        if ev.item.__class__ is not dict or _too_deep(ev.item, MAX_ITEM_DEPTH):
            msg = f"the upstream sent an output item nested deeper than {MAX_ITEM_DEPTH} levels"
            self._on_finish(out, Finish("failed", error=stream_error("upstream_bad_event", msg)))
            return
        self._close_msg(out)
        self._close_rs(out)
        oi = self._slot()
        self._slots[oi] = ev.item
        self._emit(out, {"type": "response.output_item.added", "output_index": oi, "item": ev.item})
        self._emit(out, {"type": "response.output_item.done", "output_index": oi, "item": ev.item})

    def _on_usage(self, out: list[dict], ev: Usage) -> None:
        self._usage = ev.usage

    def _on_finish(self, out: list[dict], ev: Finish) -> None:
        status = ev.status if ev.status in _TERMINAL else "failed"
        cut = "completed" if status == "completed" else "incomplete"
        self._close_msg(out, cut)
        self._close_rs(out)
        # calls never named are dropped (docs/rules.md §7.2); the named ones behind them go out in order
        # A call the upstream never finished is not closed when the turn did not complete:
        # Codex builds calls from output_item.done alone (whatever its status) and would run
        # a half-streamed call, then run it again on its retry.
        dropped = 0
        for c in self._pending:
            if c.name and (c.ended or status == "completed"):
                self._release(out, c)
            elif not c.name:
                dropped += 1
                self.ctx.repaired("tool_call_unnamed_dropped")
        self._pending = []
        if status == "completed":
            for c in sorted(self._calls.values(), key=lambda x: x.oi):
                if c.released and self._slots[c.oi] is None:
                    self._close_call(out, c, cut)
        output = [s for s in self._slots if s is not None]
        error = ev.error
        if (
            status == "completed"
            and dropped
            and not any(isinstance(s, dict) and s.get("type") != "reasoning" for s in output)
        ):
            status = "failed"
            error = stream_error(
                "upstream_tool_call_dropped", "the upstream sent a tool call without a name; it was dropped"
            )
        usage = self._usage if self._usage is not None else normalize_responses(None)
        etype, rstatus = _TERMINAL[status]
        if status == "incomplete" and self._inc_as_completed:
            etype = "response.completed"
        resp = self._resp(rstatus, output, usage)
        if status == "completed":
            resp["completed_at"] = _now()
        elif status == "incomplete":
            resp["incomplete_details"] = {"reason": ev.reason}
        else:
            error = error if error.__class__ is dict else {}
            code = error.get("code")
            code = code if code.__class__ is str and code else "server_error"
            message = error.get("message")
            message = message if message.__class__ is str and message else "upstream error"
            param = error.get("param")
            param = param if param.__class__ is str else None
            resp["error"] = {"code": code, "message": message}
            payload = {"type": error.get("type") or "server_error", "code": code, "message": message, "param": param}
            self._emit(out, {"type": "error", "code": code, "message": message, "param": param, "error": payload})
        self._final = resp
        self.done = True
        self._emit(out, {"type": etype, "response": resp})


# each event class → its handler, which takes that class (hence Any for the event): plain
# functions, so an encoder holds no bound method of its own (a reference cycle per stream,
# left to the cyclic collector)
_DISPATCH: dict[type[Event], Callable[[ResponsesStreamEncoder, list[dict], Any], None]] = {
    Text: ResponsesStreamEncoder._on_text,
    Reasoning: ResponsesStreamEncoder._on_reasoning,
    ReasoningEnd: ResponsesStreamEncoder._on_reasoning_end,
    Refusal: ResponsesStreamEncoder._on_refusal,
    ToolCall: ResponsesStreamEncoder._on_tool_call,
    ToolCallEnd: ResponsesStreamEncoder._on_tool_call_end,
    Passthrough: ResponsesStreamEncoder._on_passthrough,
    Usage: ResponsesStreamEncoder._on_usage,
    Finish: ResponsesStreamEncoder._on_finish,
}


def encode_response(events: Iterable[Event], ctx: Ctx, **kw: Any) -> dict:
    """Non-streaming path: run the encoder over ``events`` and return the final response."""
    enc = ResponsesStreamEncoder(ctx, **kw)
    for ev in events:
        enc.feed(ev)
        if enc.done:
            break
    enc.end()
    return enc.response
