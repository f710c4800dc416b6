"""Chat Completions upstream → unified events (stream chunks and non-stream objects).

Theory of operation
-------------------
``ChatStreamDecoder.feed(chunk)`` takes the parsed JSON of one upstream ``data:`` line and
returns the unified events (``events.py``) it completes; the app calls ``end()`` on
``data: [DONE]`` or on EOF.  Only ``choices[0]`` is read (we never ask for ``n > 1``).

* The first chunk yields ``Start(id, model, created)``.
* Per delta, in this order: reasoning (``reasoning_content``, else ``reasoning``, else the
  text of ``reasoning_details``: the first key carrying a non-empty string wins, so an
  upstream that duplicates the text under two keys is not doubled;
  ``reasoning_keys.reasoning_text``) → ``Reasoning``;
  ``content`` → ``Text``; ``refusal`` → ``Refusal``; ``tool_calls`` / legacy
  ``function_call`` → ``ToolCall``.
* With the ``inline_think`` quirk, a ``<think>…</think>`` at the very start of the content
  is reasoning and the rest text.  The tags may be split across chunks at any byte: while
  the content seen so far is still a prefix of ``<think>`` it is held; inside the think
  block a tail that may be the start of ``</think>`` is held.  Anything held is released
  (unchanged) before any other kind of event, so the order of bytes is kept.
* Tool calls (docs/rules.md §3): the unified ``index`` is the call's ordinal in
  first-appearance order.  A chunk with an ``index`` maps through ``index → ordinal``;
  a known index that suddenly carries a different, previously unseen ``id`` is a new call
  (upstreams that collapse parallel calls onto ``index: 0``, docs/rules.md F4).  A chunk without
  ``index`` continues the last call unless it carries a new ``id``.  Identity (``id``,
  ``function.name``) is passed on the first ``ToolCall`` where it appears and never
  repeated; argument text is passed as it comes, so arguments before identity are fine
  (encoders defer).  Legacy ``delta.function_call`` is its own call (ordinal 0 when it
  is the only one).  A tool call's ``extra_content.google.thought_signature`` (Gemini) is
  the call's ``signature``, passed once, on the ``ToolCall`` of the chunk that carried it.
* ``finish_reason`` and ``usage`` (top-level, or Moonshot's ``choices[0].usage``) are only
  remembered: a usage chunk with ``choices: []`` routinely arrives *after* the
  ``finish_reason`` chunk (docs/rules.md F19), so ``ToolCallEnd``s, ``Usage`` and ``Finish`` are
  emitted by ``end()``.
* An ``{"error": {...}}`` chunk ends the stream at once: ``Usage`` if seen, then
  ``Finish("failed")`` with the error normalised to ``{code, message, type, param}``;
  later chunks and ``end()`` yield nothing.
* ``end()`` with no ``finish_reason`` ever seen is a truncated stream (docs/rules.md F1):
  ``Finish("failed", upstream_stream_truncated)``.

Failed streams do not close their tool calls: a ``ToolCallEnd`` would tell a Responses
client that a partial call is complete (``output_item.done``), so encoders must accept a
``Finish("failed")`` with calls still open.

Untrusted input.  Every field is type-checked before use; a field of the wrong type is
ignored as if absent and ``chat_malformed_field_dropped`` is recorded (``choices`` not an
array, ``choices[0]`` or ``delta`` not an object: the chunk carries nothing; ``id``,
``model``, ``created``, ``finish_reason``, ``content``, ``refusal``, a ``tool_calls`` that
is not an array, a tool call or ``function`` that is not an object, a name that is not a
string, an ``index`` that is not an integer).  Non-string ``arguments`` (an object, as
some servers send) become their JSON text (``chat_arguments_stringified``), in a stream as
in an object; arguments nested too deep to write fail the stream (``upstream_bad_event``)
or the object (``upstream_bad_response``).  A numeric tool-call id becomes its decimal
text (``tool_call_id_stringified``).  Usage goes
through ``usage.py``, which treats its own fields the same way.

``decode_chat_completion(obj, ctx)`` does the same for a non-stream ``chat.completion``.
There ``choices`` that is not an array, or a ``choices[0]``/``message`` that is not an
object, leaves nothing to answer with: ``Finish("failed")`` with code
``upstream_bad_response`` (the app answers 502).
"""

from __future__ import annotations

from typing import Any

import orjson

from .context import Ctx
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
from .ids import upstream_call_id
from .reasoning_keys import reasoning_text
from .thought_signatures import signature_in
from .usage import from_chat
from .vocab import FinishStatus

__all__ = ["ChatStreamDecoder", "decode_chat_completion", "FINISH_REASONS", "normalize_error"]

# Chat finish_reason → (Finish.status, Finish.reason); anything else counts as completed.
FINISH_REASONS: dict[str, tuple[FinishStatus, str | None]] = {
    "stop": ("completed", None),
    "tool_calls": ("completed", None),
    "function_call": ("completed", None),
    "length": ("incomplete", "max_output_tokens"),
    "content_filter": ("incomplete", "content_filter"),
}
_COMPLETED: tuple[FinishStatus, str | None] = ("completed", None)

_EMPTY: dict[str, Any] = {}
_OPEN = "<think>"
_CLOSE = "</think>"
# inline-think states
_PROBE, _THINK, _TEXT = 0, 1, 2
# delta fields that make a chunk more than its text (``text`` leaves such a chunk to ``feed``)
_NOT_TEXT = ("reasoning_content", "reasoning", "reasoning_details", "refusal", "tool_calls", "function_call")
# delta fields that make a tool call's chunk more than its argument text (``args``)
_NOT_ARGS = ("content", "reasoning_content", "reasoning", "reasoning_details", "refusal")


def _scalar_text(v: Any) -> str | None:
    """A string as is, a number as its text; anything else (objects, arrays, booleans) None:
    an upstream's error fields are shown to the client, never a structure of its choosing."""
    if v.__class__ is str:
        return v or None
    if v.__class__ is int or v.__class__ is float:
        return str(v)
    return None


def normalize_error(err: Any) -> dict[str, Any]:
    """An upstream error (dict or bare string) as ``{code, message, type, param}``."""
    if err.__class__ is not dict:
        return {
            "code": "upstream_error",
            "message": _scalar_text(err) or "upstream error",
            "type": "server_error",
            "param": None,
        }
    etype = err.get("type")
    etype = etype if etype.__class__ is str and etype else None
    param = err.get("param")
    return {
        "code": _scalar_text(err.get("code")) or etype or "upstream_error",
        "message": _scalar_text(err.get("message")) or "upstream error",
        "type": etype or "server_error",
        "param": param if param.__class__ is str else None,
    }


def _start(obj: dict[str, Any], ctx: Ctx) -> Start:
    """``Start`` from a chunk's (or object's) ``id``, ``model`` and ``created``, type-checked."""
    rid, model, created = obj.get("id"), obj.get("model"), obj.get("created")
    bad = False
    if rid is not None and rid.__class__ is not str:
        rid, bad = None, True
    if model is not None and model.__class__ is not str:
        model, bad = None, True
    if created is not None and created.__class__ is not int:
        created, bad = None, True
    if bad:
        ctx.repaired("chat_malformed_field_dropped")
    return Start(rid, model, created)


def _bad_response(what: str) -> Finish:
    return Finish(
        status="failed",
        error=stream_error(
            "upstream_bad_response", f"the upstream answered with a malformed chat.completion: {what}", "upstream_error"
        ),
    )


def _finish(fr: str | None) -> Finish:
    status, reason = FINISH_REASONS.get(fr, _COMPLETED) if fr else _COMPLETED
    return Finish(status=status, reason=reason)


class _Unwritable(Exception):
    """Upstream data that cannot be passed on (caught inside this module, never escapes)."""


class _Call:
    __slots__ = ("call_id", "name", "args", "signature")

    def __init__(self) -> None:
        self.call_id: str | None = None
        self.name: str | None = None
        self.args: list[str] = []
        self.signature: str | None = None  # its thought signature, once one came (the first wins)


class ChatStreamDecoder:
    __slots__ = (
        "ctx",
        "_started",
        "_done",
        "_calls",
        "_by_index",
        "_by_id",
        "_last",
        "_finish_reason",
        "_usage",
        "_think",
        "_tstate",
        "_held",
    )

    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self._started = False
        self._done = False
        self._calls: list[_Call] = []
        self._by_index: dict[Any, int] = {}  # chat index (or "fc" for legacy) → ordinal
        self._by_id: dict[str, int] = {}
        self._last = -1  # ordinal of the last call touched
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        self._think = ctx.on("inline_think")
        self._tstate = _PROBE if self._think else _TEXT
        self._held = ""

    # -- stream ---------------------------------------------------------------------------

    def feed(self, chunk: dict[str, Any]) -> list[Event]:
        if self._done:
            return []
        out: list[Event] = []
        if not self._started:
            self._started = True
            out.append(_start(chunk, self.ctx))
        err = chunk.get("error")
        if err:
            self._flush_held(out)
            self._done = True
            if self._usage is not None:
                out.append(Usage(from_chat(self._usage, self.ctx)))
            out.append(Finish(status="failed", error=normalize_error(err)))
            return out
        u = chunk.get("usage")
        if u is not None:
            self._take_usage(u)
        choices = chunk.get("choices")
        if choices.__class__ is not list:
            if choices is not None:
                self.ctx.repaired("chat_malformed_field_dropped")
            return out
        if not choices:
            return out
        choice = choices[0]
        if choice.__class__ is not dict:
            self.ctx.repaired("chat_malformed_field_dropped")
            return out
        u = choice.get("usage")
        if u is not None:
            self._take_usage(u)
        fr = choice.get("finish_reason")
        if fr:
            if fr.__class__ is str:
                self._finish_reason = fr
            else:
                self.ctx.repaired("chat_malformed_field_dropped")
        d = choice.get("delta")
        if d.__class__ is not dict:
            if d is not None:
                self.ctx.repaired("chat_malformed_field_dropped")
            return out
        if not d:
            return out
        if "reasoning_content" in d or "reasoning" in d or "reasoning_details" in d:
            r = reasoning_text(d)
            if r:
                if self._held:
                    self._flush_held(out)
                out.append(Reasoning(r))
        c = d.get("content")
        if c and isinstance(c, str):
            if self._tstate == _TEXT:
                out.append(Text(c))
            else:
                self._inline(c, out)
        elif c is not None and c.__class__ is not str:
            self.ctx.repaired("chat_malformed_field_dropped")
        r = d.get("refusal")
        if r and isinstance(r, str):
            if self._held:
                self._flush_held(out)
            out.append(Refusal(r))
        elif r is not None and r.__class__ is not str:
            self.ctx.repaired("chat_malformed_field_dropped")
        tcs = d.get("tool_calls")
        try:
            if tcs and tcs.__class__ is list:
                if self._held:
                    self._flush_held(out)
                for tc in tcs:
                    if tc.__class__ is dict:
                        self._tool_delta(tc, out)
                    else:
                        self.ctx.repaired("chat_malformed_field_dropped")
            else:
                if tcs is not None and tcs.__class__ is not list:
                    self.ctx.repaired("chat_malformed_field_dropped")
                fc = d.get("function_call")
                if fc and isinstance(fc, dict):
                    if self._held:
                        self._flush_held(out)
                    self._legacy(fc, out)
        except _Unwritable as e:  # rejected as data: the stream fails here
            self._done = True
            if self._usage is not None:
                out.append(Usage(from_chat(self._usage, self.ctx)))
            out.append(Finish(status="failed", error=stream_error("upstream_bad_event", str(e))))
        return out

    def text(self, chunk: dict[str, Any]) -> str | None:
        """``feed(chunk)`` for a chunk that gives one ``Text`` and nothing else, without
        walking every field: the text (nothing here changes for it).  ``None`` for any other
        chunk or state: the caller takes ``feed``.  That is in the ``plain_text`` state, for
        a chunk with no ``error``, ``usage`` or ``finish_reason``, whose first choice's delta
        has a non-empty string ``content`` and no reasoning, refusal or tool call field that
        is not null."""
        if not (self._started and not self._done and self._tstate == _TEXT and not self._held):
            return None
        choices = chunk.get("choices")
        if choices.__class__ is not list or not choices:
            return None
        choice = choices[0]
        if choice.__class__ is not dict:
            return None
        d = choice.get("delta")
        if d.__class__ is not dict:
            return None
        c = d.get("content")  # first what tells a text chunk from a tool call's delta
        if c.__class__ is not str or not c:
            return None
        if chunk.get("error") or chunk.get("usage") is not None:
            return None
        if choice.get("finish_reason") or choice.get("usage") is not None:
            return None
        if len(d) > 1:
            for k in _NOT_TEXT:
                if d.get(k) is not None:
                    return None
        return c

    def reasoning(self, chunk: dict[str, Any]) -> Reasoning | None:
        """``feed(chunk)`` for a chunk that gives one ``Reasoning`` and nothing else, as
        ``text`` is for a ``Text``: that event (its text ``reasoning_keys.reasoning_text``'s;
        nothing here changes for it).  ``None`` for any other chunk or state: the caller
        takes ``feed``.  That is in the ``plain_reasoning`` state, for a chunk with no
        ``error``, ``usage`` or ``finish_reason``, whose first choice's delta has reasoning
        text, a ``content`` and a ``refusal`` that are null or empty strings, and no tool
        call field that is not null."""
        if not (self._started and not self._done and not self._held):
            return None
        choices = chunk.get("choices")
        if choices.__class__ is not list or not choices:
            return None
        choice = choices[0]
        if choice.__class__ is not dict:
            return None
        d = choice.get("delta")
        if d.__class__ is not dict:
            return None
        if "reasoning_content" in d or "reasoning" in d or "reasoning_details" in d:  # (as feed reads)
            r = reasoning_text(d)
            if r is None:
                return None
        else:
            return None
        c = d.get("content")
        if c is not None and c != "":
            return None
        c = d.get("refusal")
        if c is not None and c != "":
            return None
        if d.get("tool_calls") is not None or d.get("function_call") is not None:
            return None
        if chunk.get("error") or chunk.get("usage") is not None:
            return None
        if choice.get("finish_reason") or choice.get("usage") is not None:
            return None
        return Reasoning(r)

    def args(self, chunk: dict[str, Any]) -> ToolCall | None:
        """``feed(chunk)`` for a chunk that only adds argument text to a call the stream
        already has, as ``text`` is for a ``Text``: that ``ToolCall`` (the call's ordinal and
        the text, no identity) after the same state change.  ``None`` (nothing changed) for
        any other chunk or state: the caller takes ``feed``.  That is in the
        ``plain_reasoning`` state, for a chunk with no ``error``, ``usage`` or
        ``finish_reason``, whose first choice's delta has one tool call: an integer ``index``
        the stream has seen, no ``id`` but that call's own, a ``function`` whose non-empty
        string ``arguments`` are the news (a ``name`` only when the call has one already: the
        first one wins), and no text, refusal or reasoning that is not null or empty."""
        choices = chunk.get("choices")
        if choices.__class__ is not list or not choices:
            return None
        choice = choices[0]
        if choice.__class__ is not dict:
            return None
        d = choice.get("delta")
        if d.__class__ is not dict:
            return None
        tcs = d.get("tool_calls")
        if tcs.__class__ is not list or len(tcs) != 1:
            return None
        tc = tcs[0]
        if tc.__class__ is not dict:
            return None
        fn = tc.get("function")
        if fn.__class__ is not dict:
            return None
        a = fn.get("arguments")
        if a.__class__ is not str or not a:
            return None
        idx = tc.get("index")
        if idx.__class__ is not int or "extra_content" in tc:
            return None
        if len(d) > 1:
            for k in _NOT_ARGS:
                v = d.get(k)
                if v is not None and v != "":
                    return None
        if chunk.get("error") or chunk.get("usage") is not None:
            return None
        if choice.get("finish_reason") or choice.get("usage") is not None:
            return None
        return self.args_to((idx, tc.get("id"), bool(fn.get("name"))), a)

    def args_to(self, key: tuple[int, Any, bool], a: str) -> ToolCall | None:
        """``args`` for a chunk already shown to be argument text only (the chunk's own
        checks: ``args``, or the template it was read against, ``chat_text_lane.py``):
        ``key`` is its call's ``(index, id, named)``, ``a`` its non-empty text.  The checks
        that depend on the stream's state are made here: the call known by that index, the
        id absent or the call's own, a name only for a call that has one already."""
        if not (self._started and not self._done and not self._held):
            return None
        idx, cid, named = key
        n = self._by_index.get(idx)
        if n is None:
            return None
        call = self._calls[n]
        if cid is not None and (cid != call.call_id or cid.__class__ is not str):
            return None
        if named and call.name is None:
            return None
        self._last = n
        call.args.append(a)
        return ToolCall(n, a)

    @property
    def plain_reasoning(self) -> bool:
        """A chunk that is only reasoning would now become one ``Reasoning`` and change
        nothing here (``reasoning``)."""
        return self._started and not self._done and not self._held

    @property
    def plain_text(self) -> bool:
        """A chunk whose delta is only a non-empty ``content`` would now become one ``Text``
        and change nothing here (transformers/passthrough.py)."""
        return self._started and not self._done and self._tstate == _TEXT and not self._held

    def end(self) -> list[Event]:
        if self._done:
            return []
        self._done = True
        out: list[Event] = []
        if not self._started:
            self._started = True
            out.append(Start())
        self._flush_held(out)
        fr = self._finish_reason
        if fr is None:
            if self._usage is not None:
                out.append(Usage(from_chat(self._usage, self.ctx)))
            out.append(
                Finish(
                    status="failed",
                    error=stream_error(
                        "upstream_stream_truncated",
                        "upstream stream ended without a finish_reason",
                    ),
                )
            )
            return out
        seen = self.ctx.signatures_seen
        for i, call in enumerate(self._calls):
            out.append(ToolCallEnd(i, "".join(call.args), call.call_id, call.name))
            if call.signature is not None and call.call_id is not None:
                seen[call.call_id] = (call.name or "", call.signature)
        if self._usage is not None:
            out.append(Usage(from_chat(self._usage, self.ctx)))
        out.append(_finish(fr))
        return out

    def _take_usage(self, u: Any) -> None:
        """Remember a chunk's usage (the last one wins); one that is not an object is dropped."""
        if u.__class__ is dict:
            if u:
                self._usage = u
        else:
            self.ctx.repaired("chat_malformed_field_dropped")

    # -- tool calls -----------------------------------------------------------------------

    def _tool_delta(self, tc: dict[str, Any], out: list[Event]) -> None:
        rep = self.ctx.repaired
        idx = tc.get("index")
        if idx is not None and idx.__class__ is not int:
            rep("chat_malformed_field_dropped")
            idx = None
        raw = tc.get("id")
        cid = upstream_call_id(raw, rep)
        if cid is None and raw is not None and raw.__class__ is not str:
            rep("chat_malformed_field_dropped")
        calls = self._calls
        n: int | None
        if idx is not None:
            n = self._by_index.get(idx)
            if n is None:
                n = self._by_id.get(cid) if cid else None
                self._by_index[idx] = n = len(calls) if n is None else n
            elif cid and calls[n].call_id not in (None, cid) and cid not in self._by_id:
                # a known index with a different, unseen id: a new call reusing the index
                self.ctx.repaired("chat_tool_index_reused")
                self._by_index[idx] = n = len(calls)
        elif cid:
            n = self._by_id.get(cid)
            if n is None:
                n = len(calls)
        else:
            n = self._last if self._last >= 0 else 0
        self._last = n
        if n == len(calls):
            calls.append(_Call())
            new = True
        else:
            new = False
        call = calls[n]
        fn = tc.get("function")
        if fn.__class__ is not dict:
            if fn is not None:
                rep("chat_malformed_field_dropped")
            fn = _EMPTY
        ev = ToolCall(n)
        if cid and call.call_id is None:
            call.call_id = ev.call_id = cid
            self._by_id[cid] = n
            new = True
        extra = tc.get("extra_content")
        if extra is not None and call.signature is None:
            sig = signature_in(extra)
            if sig is not None:
                call.signature = ev.signature = sig
                new = True
            elif extra.__class__ is not dict:
                rep("chat_malformed_field_dropped")
        _name_and_args(call, ev, fn, new, out, self.ctx)

    def _legacy(self, fc: dict[str, Any], out: list[Event]) -> None:
        n = self._by_index.get("fc")
        new = n is None
        if n is None:
            self.ctx.repaired("chat_legacy_function_call")
            n = self._by_index["fc"] = len(self._calls)
            self._calls.append(_Call())
        self._last = n
        call = self._calls[n]
        ev = ToolCall(n)
        _name_and_args(call, ev, fc, new, out, self.ctx)

    # -- inline <think> -------------------------------------------------------------------

    def _inline(self, c: str, out: list[Event]) -> None:
        if self._tstate == _PROBE:
            buf = self._held + c
            if buf.startswith(_OPEN):
                self.ctx.repaired("inline_think")
                self._tstate = _THINK
                self._held = ""
                c = buf[len(_OPEN) :]
                if not c:
                    return
            elif _OPEN.startswith(buf):
                self._held = buf
                return
            else:
                self._tstate = _TEXT
                self._held = ""
                out.append(Text(buf))
                return
        else:  # _THINK
            c = self._held + c
            self._held = ""
        # inside the think block: look for the close tag
        i = c.find(_CLOSE)
        if i >= 0:
            if i:
                out.append(Reasoning(c[:i]))
            self._tstate = _TEXT
            rest = c[i + len(_CLOSE) :]
            if rest:
                out.append(Text(rest))
            return
        # hold back a tail that may be the start of the close tag
        k = min(len(c), len(_CLOSE) - 1)
        while k and not _CLOSE.startswith(c[-k:]):
            k -= 1
        if k:
            self._held = c[-k:]
            c = c[:-k]
        if c:
            out.append(Reasoning(c))

    def _flush_held(self, out: list[Event]) -> None:
        """Release held inline-think bytes unchanged before an event of another kind."""
        held = self._held
        if not held:
            return
        self._held = ""
        if self._tstate == _PROBE:
            self._tstate = _TEXT
            out.append(Text(held))
        else:
            out.append(Reasoning(held))


# -- non-stream ---------------------------------------------------------------------------


def _args_text(args: Any, ctx: Ctx) -> str | None:
    """A non-stream call's ``arguments`` as text: a string as is, absent as ``""``, any
    other JSON value as its JSON text (``chat_arguments_stringified``); None when even that
    cannot be written (nested deeper than the serializer allows)."""
    if args.__class__ is str:
        return args
    if args is None:
        return ""
    try:
        text = orjson.dumps(args).decode()
    except orjson.JSONEncodeError:
        return None
    ctx.repaired("chat_arguments_stringified")
    return text


def decode_chat_completion(obj: dict[str, Any], ctx: Ctx) -> list[Event]:
    """Events of one non-stream ``chat.completion`` (or ``{"error": …}``) object: the object
    replayed through the stream decoder as the chunks its stream would have been
    (``completion_chunks``), so both paths share every rule.  A top-level shape the proxy
    cannot read (``choices`` or its first entry or ``message`` of the wrong type) ends it
    with ``upstream_bad_response``."""
    chunks = completion_chunks(obj)
    if isinstance(chunks, str):
        return [_start(obj, ctx), _bad_response(chunks)]
    dec = ChatStreamDecoder(ctx)
    out: list[Event] = []
    for c in chunks:
        out += dec.feed(c)
    out += dec.end()
    return out


def completion_chunks(obj: dict[str, Any]) -> list[dict[str, Any]] | str:
    """A ``chat.completion`` object as the stream of chunks it stands for: one chunk with the
    whole message as its delta (tool calls numbered by position; content parts joined into
    ``content`` and ``refusal``; a missing finish reason is ``stop``: the object is whole),
    then one with the usage.  An error object is its own error chunk.  A string says why
    the object cannot be read."""
    head: dict[str, Any] = {k: obj[k] for k in ("id", "created", "model") if k in obj}
    if obj.get("error"):
        return [{**head, "error": obj["error"]}]
    choices = obj.get("choices")
    if choices is None:
        choices = []
    elif choices.__class__ is not list:
        return "'choices' is not an array"
    choice = choices[0] if choices else {}
    if choice.__class__ is not dict:
        return "'choices[0]' is not an object"
    msg = choice.get("message")
    if msg is None:
        msg = {}
    elif msg.__class__ is not dict:
        return "'choices[0].message' is not an object"
    delta = dict(msg)
    content = msg.get("content")
    if content.__class__ is list:  # some providers answer with content parts
        text = [
            p["text"]
            for p in content
            if p.__class__ is dict and p.get("type") != "refusal" and p.get("text").__class__ is str
        ]
        refusals = [
            p["refusal"]
            for p in content
            if p.__class__ is dict and p.get("type") == "refusal" and p.get("refusal").__class__ is str
        ]
        delta["content"] = "".join(text)
        if refusals:
            r = msg.get("refusal")
            delta["refusal"] = "".join(refusals) + (r if r.__class__ is str else "")
    tcs = msg.get("tool_calls")
    if tcs.__class__ is list:
        delta["tool_calls"] = [{**tc, "index": i} if tc.__class__ is dict else tc for i, tc in enumerate(tcs)]
        if delta["tool_calls"]:
            delta.pop("function_call", None)  # tool calls win over the legacy field
    fr = choice.get("finish_reason")
    first: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": fr if fr is not None else "stop"}
    out = [{**head, "choices": [first]}]
    if fr is not None and fr.__class__ is not str:  # dropped by the decoder (a repair); the object is whole
        out.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    u = choice.get("usage")
    if u.__class__ is dict and u:  # Moonshot's per-choice usage wins over the object's
        first["usage"] = u
    elif u is not None:
        first["usage"] = u  # of the wrong type: the decoder drops it (a repair)
        if obj.get("usage") is not None:
            out.append({**head, "choices": [], "usage": obj["usage"]})
    elif obj.get("usage") is not None:
        out.append({**head, "choices": [], "usage": obj["usage"]})
    return out


def _name_and_args(call: _Call, ev: ToolCall, fn: dict[str, Any], new: bool, out: list[Event], ctx: Ctx) -> None:
    """Merge a ``function`` delta's name (first one wins) and argument text into ``call``;
    emit ``ev`` when it carries anything new."""
    name = fn.get("name")
    if name and call.name is None:
        if name.__class__ is str:
            call.name = ev.name = name
            new = True
        else:
            ctx.repaired("chat_malformed_field_dropped")
    a = fn.get("arguments")
    if a is not None and a.__class__ is not str:
        a = _args_text(a, ctx)
        if a is None:
            raise _Unwritable("the upstream sent tool call arguments nested too deep to pass on")
    if a:
        call.args.append(a)
        ev.arguments = a
        new = True
    if new:
        out.append(ev)
