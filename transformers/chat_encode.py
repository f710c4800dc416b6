"""Unified events → Chat Completions client chunks (and the non-stream object).

Theory of operation
-------------------
``ChatStreamEncoder.feed(event)`` returns the ``chat.completion.chunk`` dicts the event
completes; ``end()`` closes a stream that never got a ``Finish``.  The app serializes each
dict as one ``data:`` line and, unless ``failed`` is set, sends ``data: [DONE]`` after the
last one (docs/rules.md F2).

Every chunk carries the same ``id`` (the ``chunk_id`` argument, else an upstream
``chatcmpl…`` id from ``Start`` so same-protocol ids survive, else a minted
``chatcmpl-<hex>``), ``object``, ``created`` and ``model`` (``ctx.public_model``, else the
upstream's).  ``Start`` yields ``delta: {role: "assistant"}``; ``Text`` → ``content``,
``Reasoning`` → ``reasoning_content`` (what kosong reads, the first key Kimi Code looks
for), and the same text also under ``reasoning`` when the profile's upstream speaks that key
(``reasoning_key_reasoning``: a client configured for that endpoint reads it there;
``reasoning_keys.py``), ``Refusal`` → ``refusal``.

Tool calls are shaped for the strictest client, Python kosong (docs/rules.md §6): every delta with a
non-empty ``function.name`` starts a NEW call, argument-only deltas go to the pending call,
``index`` is ignored, and any text or reasoning in between ends the pending call.  So:

* a call is announced only once its name and id are known (or it has ended: an id the
  upstream never gives is minted as ``call_<hex>``, so a late id is never replaced by a
  minted one); the first delta carries the client ``index`` (0, 1, 2… in emission
  order), ``id``, ``type`` and ``function{name, arguments: <everything buffered>}``;
  later deltas carry ``index`` and ``arguments`` only; name and id are never repeated;
* one call streams live at a time, in ``ToolCall.index`` order; a later call is buffered
  until every earlier one has ended, then sent as one run;
* text, reasoning and refusal that arrive once a call is pending wait, in arrival order,
  until the calls before them have ended.

All of this is one FIFO: once anything is waiting, everything after it queues behind it.
The queue holds content pieces ``(key, text)`` and call records; the head is flushed while
it can be (content always; a call once named and identified, and popped once ended).
A Chat upstream's calls end only at its ``end()``, so there the first call streams live and
later ones go out whole at ``Finish``: the price of never interleaving them.  Namespaced calls get
their flat client name from ``flatten_name``.  A call that ends without ever getting a name
cannot be sent to a Chat client: it is dropped (repair ``tool_call_unnamed_dropped``), and
if that leaves a completed turn with no call at all the stream fails with
``upstream_tool_call_dropped`` (docs/rules.md §7.2).

``Finish`` flushes the queue, then sends the ``finish_reason`` chunk (table below) and,
with ``include_usage``, the ``choices: []`` usage chunk.  A failed ``Finish``, a
``ToolCallEnd`` with ``mismatch`` (Chat clients only see deltas, so a contradicting final
text must be an error) and ``end()`` without ``Finish`` send one ``{"error": {...}}``
chunk and set ``failed``; queued content is flushed first, unfinished calls are not.

``abort(error)`` is the last resort of the app's stream guard: when a ``feed`` raised half
way (a bug, or input no rule foresaw), it returns the one error chunk built from ``error``
alone, whatever state the encoder was left in, sets ``failed`` and ends the encoder; it
cannot raise.

``text_delta(text)`` is ``feed(Text(text))`` already serialized, for the commonest event:
once begun, with nothing queued, a text chunk is the one template (``text_template``) with
the text's JSON string put in, framed as ``frame_deltas`` said (the Bridge's ``data:`` line);
in any other state it returns ``None`` and the caller takes ``feed``.  ``reasoning_delta``
is the same for ``feed(Reasoning(…))`` (its text in one or, with the upstream's own key,
two places of its template), ``args_delta`` for a ``ToolCall``'s argument text to the call
that streams live (a format per call: its client ``index``).

``encode_chat_completion(events, ctx)`` builds the non-stream ``chat.completion`` (its
message always has ``content``, ``refusal`` and ``annotations: []``, as OpenAI's does); for
a failed stream it returns ``{"error": {...}}`` (no ``choices``) and the app maps it to an
HTTP error status.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import orjson

from .context import Ctx, flatten_name
from .errors import stream_error
from .events import (
    Event,
    Finish,
    Reasoning,
    Refusal,
    Start,
    Text,
    ToolCall,
    ToolCallEnd,
    Usage,
)
from .ids import random_hex
from .reasoning_keys import upstream_key
from .thought_signatures import for_client
from .usage import normalize_responses, to_chat

__all__ = ["ChatStreamEncoder", "encode_chat_completion", "finish_reason"]

# Finish.reason of an incomplete response → Chat finish_reason
INCOMPLETE_FINISH: dict[str | None, str] = {
    "max_output_tokens": "length",
    "content_filter": "content_filter",
}


def finish_reason(status: str, reason: str | None, had_calls: bool) -> str:
    """Chat ``finish_reason`` for a non-failed Finish (docs/rules.md §7.2, reverse column)."""
    if status == "incomplete":
        return INCOMPLETE_FINISH.get(reason, "length")
    return "tool_calls" if had_calls else "stop"


def _completion_id(given: str | None, upstream: str | None) -> str:
    if given:
        return given
    if isinstance(upstream, str) and upstream.startswith("chatcmpl"):
        return upstream
    return "chatcmpl-" + random_hex()


def _extra(signature: str) -> dict[str, Any]:
    """A tool call's ``extra_content`` carrying a thought signature (Gemini's own shape)."""
    return {"google": {"thought_signature": signature}}


def _mint_call_id() -> str:
    return "call_" + random_hex()


def _client_name(name: str, namespace: str | None) -> str:
    return flatten_name(namespace, name) if namespace else name


def _error_body(err: dict[str, Any] | None) -> dict[str, Any]:
    err = err or {}
    return {
        "message": err.get("message") or "upstream error",
        "type": err.get("type") or "server_error",
        "code": err.get("code") or "upstream_error",
        "param": err.get("param"),
    }


def _mismatch_error(call_id: str | None) -> dict[str, Any]:
    return stream_error(
        "tool_arguments_mismatch",
        f'function call arguments mismatch for call_id "{call_id}"',
    )


_DROPPED_ERROR = (
    "upstream_tool_call_dropped",
    "the upstream returned tool calls without a name; none could be delivered",
)
_ZERO_USAGE = normalize_responses(None)


class _Call:
    __slots__ = ("call_id", "name", "namespace", "buf", "released", "ended", "cindex", "fmt", "sig")

    def __init__(self) -> None:
        self.call_id: str | None = None
        self.name: str | None = None
        self.namespace: str | None = None
        self.buf: list[str] = []
        self.released = False
        self.ended = False
        self.cindex = -1  # client index once released
        self.fmt: bytes | None = None  # args_delta's format once released, ``%b`` the text's JSON
        self.sig: str | None = None  # the upstream's thought signature, until released


class ChatStreamEncoder:
    __slots__ = (
        "ctx",
        "include_usage",
        "failed",
        "_id",
        "_created",
        "_model",
        "_begun",
        "_finished",
        "_calls",
        "_queue",
        "_emitted",
        "_dropped",
        "_usage",
        "_also",
        "_frame",
        "_delta",
        "_rdelta",
    )

    def __init__(
        self,
        ctx: Ctx,
        *,
        include_usage: bool = False,
        chunk_id: str | None = None,
        created: int | None = None,
    ) -> None:
        self.ctx = ctx
        self.include_usage = include_usage
        self.failed = False
        self._id = chunk_id
        self._created = created
        self._model = ctx.public_model
        self._begun = False
        self._finished = False
        self._calls: dict[int, _Call] = {}
        self._queue: deque[Any] = deque()  # (key, text) tuples and _Call records
        self._emitted = 0  # tool calls sent to the client
        self._dropped = 0
        self._usage: dict[str, Any] | None = None
        # reasoning also under the upstream's own key when it is not reasoning_content
        key = upstream_key(ctx)
        self._also = key if key != "reasoning_content" else None
        self._frame = (b"", b"")  # what text_delta writes around a chunk's JSON (frame_deltas)
        self._delta: bytes | None = None  # text_delta's format: its chunk, ``%b`` the text's JSON
        self._rdelta: bytes | None = None  # reasoning_delta's, ``%b`` the text's JSON (twice with _also)

    # -- chunk builders -------------------------------------------------------------------

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    def _piece(self, key: str, text: str) -> dict[str, Any]:
        if key == "reasoning_content" and self._also is not None:
            return {key: text, self._also: text}
        return {key: text}

    def _begin(self, ev: Start | None, out: list[dict[str, Any]]) -> None:
        self._begun = True
        self._id = _completion_id(self._id, ev.response_id if ev else None)
        if self._created is None:
            c = ev.created if ev else None
            self._created = c if isinstance(c, int) and not isinstance(c, bool) else int(time.time())
        if not self._model:
            m = ev.model if ev else None
            self._model = m if m.__class__ is str else ""
        out.append(self._chunk({"role": "assistant"}))

    def _fail(self, err: dict[str, Any] | None, out: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # queued content is delivered before the error; unfinished calls are not
        q = self._queue
        while q:
            h = q.popleft()
            if h.__class__ is tuple:
                out.append(self._chunk(self._piece(h[0], h[1])))
        self._finished = True
        self.failed = True
        out.append({"error": _error_body(err)})
        return out

    # -- feed -----------------------------------------------------------------------------

    def feed(self, ev: Event) -> list[dict[str, Any]]:
        if self._finished:
            return []
        # exact-class dispatch, tested as `ev.__class__ is X` (not via a saved class) so mypy narrows ev
        if ev.__class__ is Text:
            if self._queue:
                self._queue.append(("content", ev.text))
                return []
            if not self._begun:
                out: list[dict[str, Any]] = []
                self._begin(None, out)
                out.append(self._chunk({"content": ev.text}))
                return out
            return [self._chunk({"content": ev.text})]
        if ev.__class__ is ToolCall:
            return self._tool_call(ev)
        if ev.__class__ is Reasoning or ev.__class__ is Refusal:
            key = "reasoning_content" if ev.__class__ is Reasoning else "refusal"
            if self._queue:
                self._queue.append((key, ev.text))
                return []
            out = []
            if not self._begun:
                self._begin(None, out)
            out.append(self._chunk(self._piece(key, ev.text)))
            return out
        out = []
        if ev.__class__ is Start:
            if not self._begun:
                self._begin(ev, out)
            return out
        if not self._begun:
            self._begin(None, out)
        if ev.__class__ is ToolCallEnd:
            return self._tool_end(ev, out)
        if ev.__class__ is Usage:
            self._usage = ev.usage
            return out
        if ev.__class__ is Finish:
            return self._finish(ev, out)
        # Passthrough, ReasoningEnd: nothing a Chat client can receive
        return out

    def abort(self, error: dict[str, Any]) -> list[dict[str, Any]]:
        """One error chunk from ``error`` alone, whatever state a failed ``feed`` left (see
        the module docstring); the encoder is finished afterwards."""
        self._finished = True
        self.failed = True
        message, code = error.get("message"), error.get("code")
        return [
            {
                "error": {
                    "message": message if message.__class__ is str and message else "upstream error",
                    "type": "server_error",
                    "code": code if code.__class__ is str and code else "upstream_error",
                    "param": None,
                }
            }
        ]

    @property
    def plain_text(self) -> bool:
        """A ``Text`` now would go out at once as one chunk, changing nothing here
        (transformers/passthrough.py)."""
        return self._begun and not self._finished and not self._queue

    def frame_deltas(self, framer: Callable[[str], tuple[bytes, bytes]]) -> None:
        """Make ``text_delta`` and ``reasoning_delta`` write their chunk framed: what
        ``framer("chat.completion.chunk")`` gives before and after the JSON."""
        self._frame = framer("chat.completion.chunk")
        self._delta = None
        self._rdelta = None
        for c in self._calls.values():
            c.fmt = None

    def text_delta(self, text: str) -> bytes | None:
        """``feed(Text(text))`` already serialized, when it is the one chunk that feed would
        give and nothing changes here (``plain_text``): the very bytes ``orjson.dumps`` writes
        for that chunk, framed as ``frame_deltas`` said.  ``None`` otherwise: the caller
        takes ``feed``."""
        if not self._begun or self._finished or self._queue:
            return None
        d = self._delta
        if d is None:
            d = self._new_delta()
        return d % orjson.dumps(text)  # one format: cheaper than a join of three parts

    @property
    def text_open(self) -> bool:
        """``text_delta`` takes a text (``text_deltas`` a run)."""
        return self._begun and not self._finished and not self._queue

    def text_deltas(self, quoted: list[bytes], texts: list[str]) -> bytes:
        """``text_delta`` for each of ``texts``, at once, ``text_open``, given each one's JSON
        as ``orjson.dumps`` writes it (``quoted``, read off the upstream's bytes by
        ``text_runs.py``): the same bytes."""
        d = self._delta
        if d is None:
            d = self._new_delta()
        return b"".join(map(d.__mod__, quoted))

    def _new_delta(self) -> bytes:
        """The text chunk's format (``text_delta``): its id, created and model are fixed once
        begun."""
        d = self._delta = self._format(self.text_template())
        return d

    def _format(self, parts: Sequence[str]) -> bytes:
        """A chunk's format from its JSON cut where its text goes (``%b`` there), framed; the
        chunk's and the frame's own '%' doubled."""
        before, after = self._frame
        pieces = [p.encode() for p in parts]
        pieces[0] = before + pieces[0]
        pieces[-1] += after
        return b"%b".join(p.replace(b"%", b"%%") for p in pieces)

    def reasoning_delta(self, ev: Reasoning) -> bytes | None:
        """``feed(ev)`` already serialized, as ``text_delta`` is ``feed(Text)``'s:
        once begun, with nothing queued, the one reasoning chunk (``reasoning_content``, and
        the same text under the upstream's own key when that is another: ``_piece``), framed
        as ``frame_deltas`` said.  ``None`` otherwise: the caller takes ``feed``."""
        if not self._begun or self._finished or self._queue:
            return None
        d = self._rdelta
        if d is None:
            # the text is the chunk's last string (twice: its last two), whatever the model's name
            holes = 1 if self._also is None else 2
            whole = orjson.dumps(self._chunk(self._piece("reasoning_content", "\x00"))).decode()
            d = self._rdelta = self._format(whole.rsplit('"\\u0000"', holes))
        q = orjson.dumps(ev.text)
        return d % ((q,) if self._also is None else (q, q))

    def args_delta(self, ev: ToolCall) -> bytes | None:
        """``feed(ev)`` already serialized, as ``text_delta`` is ``feed(Text)``'s, for a
        ``ToolCall`` with argument text for a call that streams live (released, not ended):
        the one chunk of its ``index`` and ``arguments`` (identity is never repeated), from a
        format made once per call, framed as ``frame_deltas`` said.  ``None`` otherwise: the
        caller takes ``feed``."""
        if self._finished or not ev.arguments:
            return None
        c = self._calls.get(ev.index)
        if c is None or not c.released or c.ended:
            return None
        f = c.fmt
        if f is None:
            # the text is the chunk's last string, whatever the model's name
            delta = {"tool_calls": [{"index": c.cindex, "function": {"arguments": "\x00"}}]}
            f = c.fmt = self._format(orjson.dumps(self._chunk(delta)).decode().rsplit('"\\u0000"', 1))
        return f % orjson.dumps(ev.arguments)

    def text_template(self) -> tuple[str, str]:
        """(prefix, suffix): ``prefix + json_string(text) + suffix`` is the chunk ``feed(Text(text))``
        writes once begun (transformers/passthrough.py).  The sentinel is found from the end:
        the content is the chunk's last string, and the model's name (a client's, through a
        glob route) may be that very string."""
        whole = orjson.dumps(self._chunk({"content": "\x00"})).decode()
        prefix, _, suffix = whole.rpartition('"\\u0000"')
        return prefix, suffix

    def end(self) -> list[dict[str, Any]]:
        if self._finished:
            return []
        out: list[dict[str, Any]] = []
        if not self._begun:
            self._begin(None, out)
        return self._fail(
            stream_error("upstream_stream_truncated", "upstream stream ended before completion"),
            out,
        )

    # -- tool calls -----------------------------------------------------------------------

    def _tool_call(self, ev: ToolCall) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if not self._begun:
            self._begin(None, out)
        c = self._calls.get(ev.index)
        if c is None:
            c = self._calls[ev.index] = _Call()
            self._queue.append(c)
        a = ev.arguments
        if c.released:
            if a and not c.ended:
                out.append(self._chunk({"tool_calls": [{"index": c.cindex, "function": {"arguments": a}}]}))
            if ev.signature is not None:  # it came after the call went out: a delta of its own
                extra = _extra(for_client(ev.signature, cast(str, c.call_id), self.ctx))
                out.append(self._chunk({"tool_calls": [{"index": c.cindex, "extra_content": extra}]}))
            return out
        if ev.signature is not None and c.sig is None:
            c.sig = ev.signature
        if ev.call_id is not None and c.call_id is None:
            c.call_id = ev.call_id
        if ev.name is not None and c.name is None:
            c.name = ev.name or None
        if ev.namespace is not None and c.namespace is None:
            c.namespace = ev.namespace
        if a:
            c.buf.append(a)
        # (a call the queue dropped, unnamed at its end, is in it no more)
        if c.name is not None and c.call_id is not None and self._queue and self._queue[0] is c:
            self._pump(out, False)
        return out

    def _tool_end(self, ev: ToolCallEnd, out: list[dict[str, Any]]) -> list[dict[str, Any]]:
        c = self._calls.get(ev.index)
        if c is None:  # an end without deltas: its text is all we get
            c = self._calls[ev.index] = _Call()
            if ev.arguments:
                c.buf.append(ev.arguments)
            self._queue.append(c)
        if not c.released:
            if ev.call_id is not None and c.call_id is None:
                c.call_id = ev.call_id
            if ev.name and c.name is None:
                c.name = ev.name
            if ev.namespace is not None and c.namespace is None:
                c.namespace = ev.namespace
        if ev.mismatch:
            return self._fail(_mismatch_error(c.call_id or ev.call_id), out)
        c.ended = True
        if self._queue and self._queue[0] is c:
            self._pump(out, False)
        return out

    def _release(self, c: _Call, out: list[dict[str, Any]]) -> None:
        c.released = True
        c.cindex = self._emitted
        self._emitted += 1
        if c.call_id is None:
            c.call_id = _mint_call_id()
        # _pump releases named calls only
        name = c.name if c.namespace is None else _client_name(cast(str, c.name), c.namespace)
        tc: dict[str, Any] = {
            "index": c.cindex,
            "id": c.call_id,
            "type": "function",
            "function": {"name": name, "arguments": "".join(c.buf)},
        }
        if c.sig is not None:
            tc["extra_content"] = _extra(for_client(c.sig, c.call_id, self.ctx))
            c.sig = None
        out.append(self._chunk({"tool_calls": [tc]}))
        c.buf = []

    def _pump(self, out: list[dict[str, Any]], force: bool) -> None:
        """Flush the queue head while it can go out; ``force`` ends every call (Finish)."""
        q = self._queue
        while q:
            h = q[0]
            if h.__class__ is tuple:
                q.popleft()
                key, text = h
                # adjacent pieces of the same kind go out as one chunk
                if q and q[0].__class__ is tuple and q[0][0] == key:
                    parts = [text]
                    while q and q[0].__class__ is tuple and q[0][0] == key:
                        parts.append(q.popleft()[1])
                    text = "".join(parts)
                out.append(self._chunk(self._piece(key, text)))
                continue
            if not h.released:
                if h.name is None:
                    if not (h.ended or force):
                        return
                    # never named: a Chat client cannot receive it
                    self.ctx.repaired("tool_call_unnamed_dropped")
                    self._dropped += 1
                    q.popleft()
                    continue
                if h.call_id is None and not (h.ended or force):
                    return  # a late id may still come (minted only if it never does)
                self._release(h, out)
            if not (h.ended or force):
                return
            q.popleft()

    # -- finish ---------------------------------------------------------------------------

    def _finish(self, ev: Finish, out: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if ev.status == "failed":
            return self._fail(ev.error, out)
        self._pump(out, True)
        if self._dropped and not self._emitted and ev.status == "completed":
            return self._fail(stream_error(*_DROPPED_ERROR), out)
        self._finished = True
        out.append(self._chunk({}, finish_reason(ev.status, ev.reason, self._emitted > 0)))
        if self.include_usage:
            out.append(
                {
                    "id": self._id,
                    "object": "chat.completion.chunk",
                    "created": self._created,
                    "model": self._model,
                    "choices": [],
                    "usage": to_chat(self._usage or _ZERO_USAGE),
                }
            )
        return out


# -- non-stream ---------------------------------------------------------------------------


def encode_chat_completion(
    events: Iterable[Event],
    ctx: Ctx,
    *,
    completion_id: str | None = None,
    created: int | None = None,
) -> dict[str, Any]:
    """The non-stream ``chat.completion`` for a whole decoded stream: what the stream encoder's
    chunks add up to (``completion_from_chunks``), so both paths share every rule.

    Returns ``{"error": {message, type, code, param}}`` instead (never raises) when the
    stream failed, had a tool-argument mismatch, lost all its tool calls to missing names,
    or never finished; the caller checks for the ``error`` key and picks the HTTP status.
    """
    enc = ChatStreamEncoder(ctx, include_usage=True, chunk_id=completion_id, created=created)
    chunks: list[dict[str, Any]] = []
    for ev in events:
        chunks += enc.feed(ev)
        if enc._finished:
            break
    chunks += enc.end()
    return completion_from_chunks(chunks)


def completion_from_chunks(chunks: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Fold the chunks of one Chat stream into the ``chat.completion`` object it stands for
    (or its ``{"error": …}``): text, reasoning and refusal joined, tool calls by index with
    their argument pieces joined, the finish reason and the usage."""
    head: dict[str, Any] | None = None
    text: list[str] = []
    reasoning: list[str] = []
    also: list[str] = []  # the same text under `reasoning` (reasoning_key_reasoning)
    refusal: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    usage = None
    for c in chunks:
        if "error" in c:
            return {"error": c["error"]}
        if head is None:
            head = c
        if c.get("usage") is not None:
            usage = c["usage"]
        for ch in c["choices"]:
            d = ch["delta"]
            if "content" in d:
                text.append(d["content"])
            if "reasoning_content" in d:
                reasoning.append(d["reasoning_content"])
                if "reasoning" in d:
                    also.append(d["reasoning"])
            if "refusal" in d:
                refusal.append(d["refusal"])
            for tc in d.get("tool_calls", ()):
                slot = calls.get(tc["index"])
                if slot is None:
                    slot = calls[tc["index"]] = {
                        "id": tc.get("id"),
                        "type": "function",
                        "function": {"name": tc["function"].get("name"), "arguments": []},
                    }
                if "function" in tc:
                    slot["function"]["arguments"].append(tc["function"].get("arguments", ""))
                if "extra_content" in tc:
                    slot["extra_content"] = tc["extra_content"]
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
    if head is None:  # pragma: no cover - the encoder always begins
        return {
            "error": _error_body(stream_error("upstream_stream_truncated", "upstream response ended before completion"))
        }
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(text) if text else None,
        "refusal": "".join(refusal) if refusal else None,
        "annotations": [],  # OpenAI always sends the list (url citations; none come through here)
    }
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if also:
        message["reasoning"] = "".join(also)
    if calls:
        for slot in calls.values():
            slot["function"]["arguments"] = "".join(slot["function"]["arguments"])
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {
        "id": head["id"],
        "object": "chat.completion",
        "created": head["created"],
        "model": head["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": usage if usage is not None else to_chat(_ZERO_USAGE),
    }
