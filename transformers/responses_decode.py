"""Upstream Responses API (stream or object) → unified events (docs/rules.md §2, §3, §5.3).

Theory of operation
-------------------
``ResponsesStreamDecoder.feed(event)`` takes the parsed JSON of one upstream SSE ``data:``
and returns unified events (``events.py``); ``end()`` is called at upstream EOF.  Every
event first goes through ``ResponsesNormalizer`` (docs/rules.md §2), so every item has an ``id``
and every placeable per-item event has an ``item_id``; nothing below looks for a missing
id again.  ``decode_response(obj, ctx)`` turns a non-streaming Responses object into the
same events a stream would have given, so the encoders serve both.  ``text(event)`` is
``feed`` for the commonest event, a plain ``output_text.delta``, without the dispatch (the
Bridge asks it first; ``None`` sends the event through ``feed``); ``reasoning(event)`` and
``args(event)`` are the same for a reasoning delta and a tool call's argument delta.

Dispatch table (``_HANDLERS``; an unknown type carries nothing we model and is ignored):

========================================  =================================================
upstream event                            unified events
========================================  =================================================
(first event, whatever it is)             ``Start`` from its ``response`` (id, model,
                                          created_at), exactly once
``output_text.delta``                     ``Text``
``refusal.delta``                         ``Refusal``
``reasoning_summary_text.delta``          ``Reasoning(kind="summary", summary_index)``
``reasoning_text.delta``                  ``Reasoning(kind="raw", summary_index=content_index)``
``output_item.added`` function/custom     ``ToolCall`` announcing the call: the identity
                                          known so far, arguments ``""`` or the item's own
``function_call_arguments.delta``         ``ToolCall(arguments=delta)``
``custom_tool_call_input.delta``          the same with ``custom=True``
``function_call_arguments.done``          done reconciliation (below), no end
``custom_tool_call_input.done``           the same, custom
``output_item.done`` function/custom      done reconciliation, then ``ToolCallEnd``
``output_item.done`` message              missing text/refusal suffix (prefix rule)
``output_item.done`` reasoning            missing summary/raw suffix, ``ReasoningEnd``
``output_item.done`` anything else        ``Passthrough(item)`` once
``completed`` / ``incomplete`` /          fold never-finished ``response.output`` items as
``failed``                                if ``output_item.done`` came; close what is
                                          open; ``Usage``; ``Finish``
``error``                                 close what is open; ``Finish("failed")``
(EOF, no terminal event)                  close what is open; ``Finish("failed",
                                          upstream_stream_truncated)``
========================================  =================================================

Tool calls get ``index`` 0, 1, 2… in order of first appearance (added, delta or done).
A call is found by ``call_id``, falling back to ``item_id`` (T2-7).  Every ``ToolCall``
carries the identity known at that moment (``call_id``, ``name``, ``namespace``,
``custom``, ``item_id``); arguments are the next piece of text.

Done reconciliation (docs/rules.md §3; ``done`` events are authoritative).  A = argument text
emitted so far, F = the terminal text (ignored when empty or already reconciled):

=============================  ====================================  ======================
condition                      emitted                               repair recorded
=============================  ====================================  ======================
F == A                         nothing                               —
F starts with A                ``ToolCall(arguments=F[len(A):])``    ``done_args_suffix``
                                                                     (if the call was
                                                                     already announced)
JSON-equal (not custom)        nothing; A stays the call's text      ``done_args_equivalent``
otherwise                      ``ToolCallEnd(mismatch=True, F)``     ``done_args_mismatch``
=============================  ====================================  ======================

Identity (``call_id``, ``name``, ``namespace``) learnt from a done event fills only what
is still ``None``.  If it arrives after the call was announced and no suffix ``ToolCall``
carries it, an identity-only ``ToolCall`` (arguments ``""``) is emitted
(``late_tool_identity``).  ``ToolCallEnd`` comes exactly once per call: at its
``output_item.done``, or at the terminal event / EOF for a call that never got one; its
``arguments`` is A (or F on a mismatch).

Message and reasoning text use the prefix rule only: a final text that extends what was
streamed adds the missing suffix; anything else adds nothing (never duplicate).

Untrusted input: every field is type-checked where it is read.  An event whose ``type`` is
not a string is skipped, like an unknown type; an ``item``, content part, summary part,
``usage`` or text field of the wrong type is ignored as if absent.  Both record
``responses_malformed_field_dropped`` (a non-string ``item_id`` is removed by the
normalizer under the same name).  A numeric ``call_id`` becomes its decimal text
(``tool_call_id_stringified``).  Passthrough items are handed on as they came; the
Responses encoder refuses one nested too deep to be written (``responses_encode.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
from .ids import upstream_call_id
from .jsoneq import json_equal
from .normalize import ResponsesNormalizer
from .usage import normalize_responses

__all__ = ["ResponsesStreamDecoder", "decode_response"]

_TOOL_TYPES = {"function_call": False, "custom_tool_call": True}  # item type → custom
_STATUS_EVENT = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
    "cancelled": "response.failed",
}


def _str(v: Any) -> str | None:
    return v if v.__class__ is str and v else None


def _error(src: Any, default_code: str, default_message: str, *, take_type: bool = True) -> dict[str, Any]:
    """An upstream error object as ``{code, message, type, param}``."""
    if src.__class__ is not dict:
        return stream_error(default_code, default_message)
    return {
        "code": _str(src.get("code")) or default_code,
        "message": _str(src.get("message")) or default_message,
        "type": (_str(src.get("type")) if take_type else None) or "server_error",
        "param": _str(src.get("param")),
    }


def _missing(streamed: list[str] | None, final: str) -> str:
    """Prefix rule: the part of ``final`` not yet streamed, or '' if it does not extend it."""
    if not streamed:
        return final
    s = streamed[0] if len(streamed) == 1 else "".join(streamed)
    return final[len(s) :] if final.startswith(s) else ""


class _Call:
    __slots__ = (
        "index",
        "item_id",
        "call_id",
        "name",
        "namespace",
        "custom",
        "acc",
        "announced",
        "ended",
        "last_final",
    )

    def __init__(self, index: int, item_id: str | None, custom: bool) -> None:
        self.index = index
        self.item_id = item_id
        self.call_id: str | None = None
        self.name: str | None = None
        self.namespace: str | None = None
        self.custom = custom
        self.acc: list[str] = []  # argument text emitted so far, in pieces
        self.announced = False  # a ToolCall for this index has been emitted
        self.ended = False  # its ToolCallEnd has been emitted
        self.last_final: str | None = None  # last terminal text reconciled

    def text(self) -> str:
        acc = self.acc
        if len(acc) == 1:
            return acc[0]
        s = "".join(acc)
        self.acc = [s] if s else []
        return s


class _Reasoning:
    __slots__ = ("item_id", "summary", "raw", "ended")

    def __init__(self, item_id: str | None) -> None:
        self.item_id = item_id
        self.summary: dict[int, list[str]] = {}  # summary_index → streamed pieces
        self.raw: dict[int, list[str]] = {}  # content_index → streamed pieces
        self.ended = False


class ResponsesStreamDecoder:
    __slots__ = (
        "_ctx",
        "_norm",
        "_started",
        "_finished",
        "_calls",
        "_by_item",
        "_by_call",
        "_msgs",
        "_reasoning",
        "_done",
        "_order",
    )

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._norm = ResponsesNormalizer(ctx)
        self._started = False
        self._finished = False
        self._calls: list[_Call] = []
        self._by_item: dict[str | None, _Call] = {}
        self._by_call: dict[str, _Call] = {}
        self._msgs: dict[str | None, tuple[list[str], list[str]]] = {}  # item id → (text, refusal)
        self._reasoning: dict[str | None, _Reasoning] = {}
        self._done: set[str | None] = set()  # message/reasoning/other item ids already finalised
        self._order: list[_Call | _Reasoning] = []  # what may need closing, in order of appearance

    # -- public -------------------------------------------------------------------------

    def feed(self, event: dict[str, Any]) -> list[Event]:
        if self._finished:
            return []
        t = event.get("type")
        if t.__class__ is str:
            self._norm.feed(event)
            h = _HANDLERS.get(t)
        else:  # no way to tell what it is: skipped, like an unknown type
            if t is not None:
                self._ctx.repaired("responses_malformed_field_dropped")
            h = None
        if self._started:
            return h(self, event) if h is not None else []
        self._started = True
        resp = event.get("response")
        if resp.__class__ is dict:
            created = resp.get("created_at")
            start = Start(
                _str(resp.get("id")),
                _str(resp.get("model")),
                created if created.__class__ is int else None,
            )
        else:
            start = Start()
        if h is None:
            return [start]
        out: list[Event] = [start]
        out += h(self, event)
        return out

    def text(self, event: dict[str, Any]) -> str | None:
        """``feed(event)`` for an ``output_text.delta`` that gives one ``Text`` and nothing
        else, without the dispatch: the same state change, and the text.  ``None`` (nothing
        changed) for any other event or state: the caller takes ``feed``.  That is when the
        stream has started and not finished, the normalizer leaves the event as it is (no
        ``item``; an ``item_id`` that is a non-empty string) and the delta is a non-empty
        string (an empty one gives nothing)."""
        if event.get("type") != "response.output_text.delta":
            return None
        if not self._started or self._finished or "item" in event:
            return None
        iid = event.get("item_id")
        d = event.get("delta")
        if iid.__class__ is not str or not iid or d.__class__ is not str or not d:
            return None
        m = self._msgs.get(iid)
        if m is None:
            m = self._msgs[iid] = ([], [])
        m[0].append(d)
        return d

    def reasoning(self, event: dict[str, Any]) -> Reasoning | None:
        """``feed(event)`` for a reasoning delta (a summary's or the raw text's) that gives
        one ``Reasoning`` and nothing else, as ``text`` is for a text delta: the same state
        change, and the event.  ``None`` (nothing changed) for any other event or state:
        the caller takes ``feed``."""
        t = event.get("type")
        if t == "response.reasoning_summary_text.delta":
            kind, index_key = "summary", "summary_index"
        elif t == "response.reasoning_text.delta":
            kind, index_key = "raw", "content_index"
        else:
            return None
        if not self._started or self._finished or "item" in event:
            return None
        iid = event.get("item_id")
        if iid.__class__ is not str or not iid:
            return None
        got = self._on_reasoning_delta(event, kind, index_key)
        return got[0] if got else None  # type: ignore[return-value]

    def args(self, event: dict[str, Any]) -> ToolCall | None:
        """``feed(event)`` for an argument (or custom input) delta that gives one
        ``ToolCall`` and nothing else, as ``text`` is for a text delta: the same state change,
        and the event.  ``None`` (nothing changed) for any other event or state: the caller
        takes ``feed``.  That is when the stream has started and not finished, the normalizer
        leaves the event as it is (no ``item``; an ``item_id`` that is a non-empty string),
        the ``call_id`` is absent or a string and the delta a non-empty string, and the call
        has not ended."""
        t = event.get("type")
        if t == "response.function_call_arguments.delta":
            custom = False
        elif t == "response.custom_tool_call_input.delta":
            custom = True
        else:
            return None
        if not self._started or self._finished or "item" in event:
            return None
        iid = event.get("item_id")
        d = event.get("delta")
        if iid.__class__ is not str or not iid or d.__class__ is not str or not d:
            return None
        cid = event.get("call_id")
        if cid is None:  # the commonest: a delta of a call the stream has, by its item id (_find)
            c = self._by_item.get(iid)
            if c is not None and not c.ended:  # (announced: every call the stream has is)
                c.acc.append(d)
                return ToolCall(c.index, d, c.call_id, c.name, c.namespace, c.custom, c.item_id)
        elif cid.__class__ is not str:
            return None
        got = self._args_delta(event, custom)
        return got[0] if got else None  # type: ignore[return-value]

    @property
    def text_open(self) -> bool:
        """``text`` may take a delta: the stream has started and not finished."""
        return self._started and not self._finished

    def texts(self, iid: str, texts: list[str]) -> None:
        """``text`` for a run of ``output_text.delta`` events of item ``iid`` and non-empty
        texts ``texts`` (``text_runs.py``), at once, ``text_open``: the same state
        change."""
        m = self._msgs.get(iid)
        if m is None:
            m = self._msgs[iid] = ([], [])
        m[0].extend(texts)

    def end(self) -> list[Event]:
        if self._finished:
            return []
        out: list[Event] = []
        if not self._started:
            self._started = True
            out.append(Start())
        self._close(out)
        self._finished = True
        out.append(
            Finish(
                "failed",
                error=stream_error("upstream_stream_truncated", "upstream closed the stream before a terminal event"),
            )
        )
        return out

    # -- text, refusal, reasoning ---------------------------------------------------------

    def _on_text(self, ev: dict[str, Any]) -> list[Event]:
        d = ev.get("delta")
        if not d or d.__class__ is not str:
            return []
        iid = ev.get("item_id")
        m = self._msgs.get(iid)
        if m is None:
            m = self._msgs[iid] = ([], [])
        m[0].append(d)
        return [Text(d)]

    def _on_refusal(self, ev: dict[str, Any]) -> list[Event]:
        d = ev.get("delta")
        if not d or d.__class__ is not str:
            return []
        iid = ev.get("item_id")
        m = self._msgs.get(iid)
        if m is None:
            m = self._msgs[iid] = ([], [])
        m[1].append(d)
        return [Refusal(d)]

    def _reasoning_state(self, iid: str | None) -> _Reasoning:
        r = self._reasoning.get(iid)
        if r is None:
            r = self._reasoning[iid] = _Reasoning(iid)
            self._order.append(r)
        return r

    def _on_summary(self, ev: dict[str, Any]) -> list[Event]:
        return self._on_reasoning_delta(ev, "summary", "summary_index")

    def _on_raw(self, ev: dict[str, Any]) -> list[Event]:
        return self._on_reasoning_delta(ev, "raw", "content_index")

    def _on_reasoning_delta(self, ev: dict[str, Any], kind: str, index_key: str) -> list[Event]:
        d = ev.get("delta")
        if not d or d.__class__ is not str:
            return []
        idx = ev.get(index_key, 0)
        if idx.__class__ is not int:
            idx = 0
        r = self._reasoning_state(ev.get("item_id"))
        parts = r.summary if kind == "summary" else r.raw
        buf = parts.get(idx)
        if buf is None:
            parts[idx] = [d]
        else:
            buf.append(d)
        return [Reasoning(d, kind, idx)]

    # -- tool calls -----------------------------------------------------------------------

    def _call_id(self, v: Any) -> str | None:
        """An upstream ``call_id`` as a string (a number as its text), else None."""
        if v.__class__ is str:
            return v or None
        if v is None:
            return None
        cid = upstream_call_id(v, self._ctx.repaired)
        if cid is None:
            self._ctx.repaired("responses_malformed_field_dropped")
        return cid

    def _find(self, call_id: Any, item_id: Any) -> _Call | None:
        call_id = self._call_id(call_id)
        if call_id is not None:
            c = self._by_call.get(call_id)
            if c is not None:
                return c
        if item_id is None or item_id.__class__ is str:
            return self._by_item.get(item_id)
        return None

    def _new_call(self, item_id: Any, custom: bool) -> _Call:
        if item_id.__class__ is not str:
            item_id = None
        c = _Call(len(self._calls), item_id, custom)
        self._calls.append(c)
        self._by_item.setdefault(item_id, c)
        self._order.append(c)
        return c

    def _learn(self, c: _Call, src: dict[str, Any]) -> bool:
        """Fill identity still unknown from ``src``; True if anything was learnt."""
        changed = False
        if c.call_id is None and (v := self._call_id(src.get("call_id"))) is not None:
            c.call_id = v
            self._by_call.setdefault(v, c)
            changed = True
        if c.name is None and (v := _str(src.get("name"))) is not None:
            c.name = v
            changed = True
        if c.namespace is None and (v := _str(src.get("namespace"))) is not None:
            c.namespace = v
            changed = True
        return changed

    def _on_added(self, ev: dict[str, Any]) -> list[Event]:
        item = ev.get("item")
        if item.__class__ is not dict:
            self._ctx.repaired("responses_malformed_field_dropped")
            return []
        t = item.get("type")
        iid = item.get("id")
        custom = _TOOL_TYPES.get(t) if t.__class__ is str else None
        if custom is None:
            if t == "reasoning" and iid not in self._done:
                self._reasoning_state(iid)
            return []
        c = self._find(item.get("call_id"), iid)
        if c is not None:  # a repeated added, or deltas came first: only identity is news
            out: list[Event] = []
            if not c.ended:
                self._reconcile(c, item, None, out)
            return out
        c = self._new_call(iid, custom)
        self._learn(c, item)
        args = item.get("input" if custom else "arguments")
        if args and args.__class__ is str:
            c.acc.append(args)
        else:
            args = ""
        c.announced = True
        return [ToolCall(c.index, args, c.call_id, c.name, c.namespace, custom, c.item_id)]

    def _args_delta(self, ev: dict[str, Any], custom: bool) -> list[Event]:
        cid = self._call_id(ev.get("call_id"))
        c = self._find(cid, ev.get("item_id"))
        if c is None:
            c = self._new_call(ev.get("item_id"), custom)
        if c.ended:
            return []
        if c.call_id is None and cid is not None:
            c.call_id = cid
            self._by_call.setdefault(cid, c)
        d = ev.get("delta")
        if not d or d.__class__ is not str:
            if c.announced:
                return []  # an empty delta is accepted and carries nothing
            d = ""
        else:
            c.acc.append(d)
        c.announced = True
        return [ToolCall(c.index, d, c.call_id, c.name, c.namespace, c.custom, c.item_id)]

    def _on_fc_delta(self, ev: dict[str, Any]) -> list[Event]:
        return self._args_delta(ev, False)

    def _on_ctc_delta(self, ev: dict[str, Any]) -> list[Event]:
        return self._args_delta(ev, True)

    def _args_done(self, ev: dict[str, Any], custom: bool) -> list[Event]:
        c = self._find(ev.get("call_id"), ev.get("item_id"))
        if c is None:
            c = self._new_call(ev.get("item_id"), custom)
        if c.ended:
            return []
        out: list[Event] = []
        self._reconcile(c, ev, ev.get("input" if custom else "arguments"), out)
        return out

    def _on_fc_done(self, ev: dict[str, Any]) -> list[Event]:
        return self._args_done(ev, False)

    def _on_ctc_done(self, ev: dict[str, Any]) -> list[Event]:
        return self._args_done(ev, True)

    def _reconcile(self, c: _Call, src: dict[str, Any], final: Any, out: list[Event]) -> None:
        """Seed-002 done rules: learn late identity, then compare F with A (table above)."""
        rep = self._ctx.repaired
        was = c.announced
        changed = self._learn(c, src)
        if changed and was:
            rep("late_tool_identity")
        emitted = False
        mismatch: str | None = None
        if final.__class__ is str and final and final != c.last_final:
            c.last_final = final
            a = c.text()
            if final != a:
                if final.startswith(a):
                    c.acc = [final]
                    if was:
                        rep("done_args_suffix")
                    out.append(ToolCall(c.index, final[len(a) :], c.call_id, c.name, c.namespace, c.custom, c.item_id))
                    emitted = True
                elif not c.custom and json_equal(a, final):
                    rep("done_args_equivalent")
                else:
                    rep("done_args_mismatch")
                    mismatch = final
        if not emitted and (changed or not was):
            out.append(ToolCall(c.index, "", c.call_id, c.name, c.namespace, c.custom, c.item_id))
        c.announced = True
        if mismatch is not None:
            c.ended = True
            out.append(ToolCallEnd(c.index, mismatch, c.call_id, c.name, c.namespace, mismatch=True))

    def _end_call(self, c: _Call) -> ToolCallEnd:
        c.ended = True
        return ToolCallEnd(c.index, c.text(), c.call_id, c.name, c.namespace)

    # -- final items ----------------------------------------------------------------------

    def _on_item_done(self, ev: dict[str, Any]) -> list[Event]:
        item = ev.get("item")
        if item.__class__ is not dict:
            self._ctx.repaired("responses_malformed_field_dropped")
            return []
        out: list[Event] = []
        self._item_final(item, out)
        return out

    def _item_final(self, item: dict[str, Any], out: list[Event]) -> None:
        t = item.get("type")
        if t.__class__ is not str:  # no kind to tell the client: not an item at all
            self._ctx.repaired("responses_malformed_field_dropped")
            return
        iid = item.get("id")
        custom = _TOOL_TYPES.get(t)
        if custom is not None:
            c = self._find(item.get("call_id"), iid)
            if c is None:
                c = self._new_call(iid, custom)
            if c.ended:
                return
            if c.item_id is None and iid.__class__ is str:
                c.item_id = iid
                self._by_item.setdefault(iid, c)
            self._reconcile(c, item, item.get("input" if custom else "arguments"), out)
            if not c.ended:
                out.append(self._end_call(c))
            return
        if iid in self._done:
            return
        self._done.add(iid)
        if t == "message":
            self._message_final(iid, item, out)
        elif t == "reasoning":
            self._reasoning_final(iid, item, out)
        else:
            out.append(Passthrough(item))

    def _message_final(self, iid: Any, item: dict[str, Any], out: list[Event]) -> None:
        st = self._msgs.pop(iid, None)
        if st is None:
            st = self._msgs.pop(None, None)  # deltas that had no way to name their item
        content = item.get("content")
        if content.__class__ is not list:
            if content is not None:
                self._ctx.repaired("responses_malformed_field_dropped")
            return
        text: list[str] = []
        refusal: list[str] = []
        for p in content:
            if p.__class__ is not dict:
                self._ctx.repaired("responses_malformed_field_dropped")
                continue
            if p.get("type") == "refusal":
                if (r := _str(p.get("refusal"))) is not None:
                    refusal.append(r)
            elif (x := _str(p.get("text"))) is not None:
                text.append(x)
        if text and (s := _missing(st[0] if st else None, "".join(text))):
            out.append(Text(s))
        if refusal and (s := _missing(st[1] if st else None, "".join(refusal))):
            out.append(Refusal(s))

    def _reasoning_final(self, iid: Any, item: dict[str, Any], out: list[Event]) -> None:
        r = self._reasoning.get(iid)
        if r is None:
            r = self._reasoning.pop(None, None)  # deltas that had no way to name their item
            if r is None or r.ended:
                r = self._reasoning_state(iid)
            else:
                r.item_id = iid
        if r.ended:
            return
        for parts, kind, store in ((item.get("summary"), "summary", r.summary), (item.get("content"), "raw", r.raw)):
            if parts.__class__ is not list:
                if parts is not None:
                    self._ctx.repaired("responses_malformed_field_dropped")
                continue
            for i, p in enumerate(parts):
                if p.__class__ is not dict:
                    self._ctx.repaired("responses_malformed_field_dropped")
                elif (x := _str(p.get("text"))) is not None:
                    if s := _missing(store.get(i), x):
                        out.append(Reasoning(s, kind, i))
        r.ended = True
        r.summary = r.raw = {}
        out.append(ReasoningEnd(iid if iid.__class__ is str else None, _str(item.get("encrypted_content"))))

    # -- terminal -------------------------------------------------------------------------

    def _close(self, out: list[Event]) -> None:
        for x in self._order:
            if x.ended:
                continue
            if x.__class__ is _Call:
                out.append(self._end_call(x))
            else:
                x.ended = True
                out.append(ReasoningEnd(x.item_id, None))

    def _terminal(self, ev: dict[str, Any], finish: Finish, resp: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        output = resp.get("output")
        if output.__class__ is list:
            for item in output:
                if item.__class__ is dict:
                    self._item_final(item, out)
                else:
                    self._ctx.repaired("responses_malformed_field_dropped")
        elif output is not None:
            self._ctx.repaired("responses_malformed_field_dropped")
        self._close(out)
        usage = resp.get("usage")
        if usage.__class__ is dict:
            out.append(Usage(normalize_responses(usage, self._ctx)))
        elif usage is not None:
            self._ctx.repaired("responses_malformed_field_dropped")
        out.append(finish)
        self._finished = True
        return out

    def _on_completed(self, ev: dict[str, Any]) -> list[Event]:
        resp = ev.get("response")
        resp = resp if resp.__class__ is dict else {}
        return self._terminal(ev, Finish("completed"), resp)

    def _on_incomplete(self, ev: dict[str, Any]) -> list[Event]:
        resp = ev.get("response")
        resp = resp if resp.__class__ is dict else {}
        details = resp.get("incomplete_details")
        reason = _str(details.get("reason")) if details.__class__ is dict else None
        return self._terminal(ev, Finish("incomplete", reason=reason), resp)

    def _on_failed(self, ev: dict[str, Any]) -> list[Event]:
        resp = ev.get("response")
        resp = resp if resp.__class__ is dict else {}
        err = _error(resp.get("error"), "upstream_failed", "upstream reported response.failed")
        return self._terminal(ev, Finish("failed", error=err), resp)

    def _on_error(self, ev: dict[str, Any]) -> list[Event]:
        nested = ev.get("error")
        if nested.__class__ is dict:
            err = _error(nested, "upstream_error", "upstream reported an error")
        else:  # top-level fields; there ``type`` is the event type, not the error type
            err = _error(ev, "upstream_error", "upstream reported an error", take_type=False)
        return self._terminal(ev, Finish("failed", error=err), {})


# each event type → its handler: plain functions, so a decoder holds no bound method of its
# own (a reference cycle per stream, left to the cyclic collector)
_HANDLERS: dict[str, Callable[[ResponsesStreamDecoder, dict[str, Any]], list[Event]]] = {
    "response.output_text.delta": ResponsesStreamDecoder._on_text,
    "response.refusal.delta": ResponsesStreamDecoder._on_refusal,
    "response.reasoning_summary_text.delta": ResponsesStreamDecoder._on_summary,
    "response.reasoning_text.delta": ResponsesStreamDecoder._on_raw,
    "response.output_item.added": ResponsesStreamDecoder._on_added,
    "response.output_item.done": ResponsesStreamDecoder._on_item_done,
    "response.function_call_arguments.delta": ResponsesStreamDecoder._on_fc_delta,
    "response.custom_tool_call_input.delta": ResponsesStreamDecoder._on_ctc_delta,
    "response.function_call_arguments.done": ResponsesStreamDecoder._on_fc_done,
    "response.custom_tool_call_input.done": ResponsesStreamDecoder._on_ctc_done,
    "response.completed": ResponsesStreamDecoder._on_completed,
    "response.incomplete": ResponsesStreamDecoder._on_incomplete,
    "response.failed": ResponsesStreamDecoder._on_failed,
    "error": ResponsesStreamDecoder._on_error,
}


def decode_response(obj: dict[str, Any], ctx: Any) -> list[Event]:
    """A non-streaming Responses object → the events its stream would have given.

    Runs the object through the stream decoder as ``response.created`` followed by the
    terminal event its ``status`` names (``completed`` when absent or unknown;
    ``cancelled`` → failed).  Items of ``obj["output"]`` get ids in place (normalizer).
    """
    dec = ResponsesStreamDecoder(ctx)
    out = dec.feed({"type": "response.created", "response": obj})
    status = obj.get("status")
    etype = _STATUS_EVENT.get(status, "response.completed") if status.__class__ is str else "response.completed"
    out += dec.feed({"type": etype, "response": obj})
    return out
