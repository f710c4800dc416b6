"""Tool stage: upstream Chat function calls → the calls the client must receive (docs/rules.md §4).

Theory of operation
-------------------
``ToolStage(ctx, tool_kinds)`` sits between a Chat-upstream decoder and either encoder and maps
the unified event sequence (``events.py``) to a sequence of the same grammar.  Everything
that is not a tool call passes through as the same object, in the same order; argument
bytes are never changed except by the documented wraps (``tool_kinds``: the client's
row says it offers custom tools and namespaces, Responses).  ``needed(ctx)`` tells
the app when the stage would do nothing for a request, so it can be left off the hot path.
The non-stream path goes through the same stage: decoders emit the same events for a
``chat.completion`` (one ``ToolCall`` with the whole text, then ``ToolCallEnd``).

Each call (by ``index``) gets a *kind* once its upstream name is known:

=========  ===========================================  ====================================
kind       when                                         what the stage does
=========  ===========================================  ====================================
unknown    no name yet, and the call could still turn   argument text held; a bare
           out to be ``custom`` / ``wrap``              ``ToolCall(index, "")`` keeps its
                                                        place for the encoder's index order
plain      any other call                               streamed through untouched (namespace
                                                        names split); R3-b check at its end
custom     name in ``tools.custom`` (only a Responses   identity sent at once (``custom=
           client can offer a custom tool)              True``), argument text buffered; at
                                                        the end one ``ToolCall`` with the
                                                        whole ``input`` + ``ToolCallEnd``
wrap       ``mimo_raw_patch`` on, name ``apply_patch``  identity sent at once, text
           in ``single_string_param`` (a function with  buffered; at the end: JSON as is,
           one required string parameter, offered over  complete raw patch wrapped (R3-a′),
           either protocol)                             anything else → R3-b
=========  ===========================================  ====================================

The ``apply_patch`` rule is this one table for both client protocols: what the client
*offered* decides, not the protocol it speaks.  Offered as a custom/freeform tool (Codex),
it gets a ``custom_tool_call`` whose ``input`` is the raw patch (R3-a); offered as a
function with one string parameter (kosong, Kimi Code and the openai SDK, over Chat or
over Responses), it gets that function called with ``{"<param>": raw}`` (R3-a′, repair
``mimo_raw_patch_function``); anything else is a plain call.

``custom`` input (``resolve_custom_input``, shared by stream and non-stream):

==============================================================  ============================
full argument text                                              ``input``
==============================================================  ============================
JSON object whose ``"input"`` is a string (other keys ignored)  that decoded string
R3-a: ``mimo_raw_patch`` on, tool ``apply_patch`` registered    the text verbatim, untrimmed
as custom, complete markers (``is_raw_patch``)                  (repair ``mimo_raw_patch``)
anything else (truncated patch, broken JSON, another tool)      ``None`` → error path
==============================================================  ============================

R3-b (invalid JSON in a plain or wrap call).  A call's ``ToolCallEnd`` arrives before
``Usage``/``Finish``, but the rule depends on the finish reason; so from the first call
whose full text is not JSON on, everything is held (order kept) until ``Finish``:

====================================================================  =====================
at ``Finish``                                                         held invalid calls
====================================================================  =====================
upstream ``Finish`` is ``failed``                                     emitted unchanged,
                                                                      upstream error stands
``invalid_json_passthrough`` on, reason ≠ ``max_output_tokens``,      emitted byte for byte
every invalid call's name in ``tools.functions``                      (repair per call)
otherwise                                                             left out; ``Finish``
                                                                      failed ``invalid_tool_
                                                                      arguments``
====================================================================  =====================

Error path: the stage emits exactly one ``Finish``.  A custom call that cannot be resolved
is recorded at its end and turns the upstream's ``Finish`` into ``Finish("failed",
invalid_tool_arguments)``; the events in between (other calls, ``Usage``) still go out,
and the failed call is never closed (no ``ToolCallEnd``), as on any failed stream.  The
empty string counts as valid JSON here (bytes left alone).  A call that never gets a
name is passed through without the R3-b check: the encoder drops it (docs/rules.md §7.2).
"""

from __future__ import annotations

import json

import orjson

from .context import Ctx
from .errors import stream_error
from .events import Event, Finish, ToolCall, ToolCallEnd

__all__ = [
    "ToolStage",
    "needed",
    "resolve_custom_input",
    "wrap_function_patch",
    "is_raw_patch",
    "is_json",
    "BEGIN_PATCH",
    "END_PATCH",
]

BEGIN_PATCH = "*** Begin Patch"
END_PATCH = "*** End Patch"
_NL = ("\n", "\r")

MIMO_RAW_PATCH = "mimo_raw_patch"
INVALID_JSON_PASSTHROUGH = "invalid_json_passthrough"
ERROR_CODE = "invalid_tool_arguments"

# call kinds (see the table above)
_UNKNOWN, _PLAIN, _CUSTOM, _WRAP = 0, 1, 2, 3


def is_raw_patch(text: str) -> bool:
    """Both markers complete, after trimming surrounding whitespace (R3-a condition 3).

    ``*** Begin Patch`` must be the whole first line and ``*** End Patch`` the whole last
    line, so the ``*** Begin Patch ***`` variant (opencodex#372) is not a marker.
    """
    s = text.strip()
    if not (s.startswith(BEGIN_PATCH) and s.endswith(END_PATCH)):
        return False
    return s[len(BEGIN_PATCH) : len(BEGIN_PATCH) + 1] in _NL and s[: -len(END_PATCH)].endswith(_NL)


def _no_constant(name: str) -> None:
    raise ValueError(name)


def is_json(text: str) -> bool:
    """True when ``text`` is one JSON value (or empty: an empty argument text is left alone)."""
    if not text:
        return True
    try:
        orjson.loads(text)
        return True
    except orjson.JSONDecodeError:
        pass
    # orjson refuses some valid texts (integers over 64 bits are fine, but huge exponents and
    # lone-surrogate escapes are not); the standard parser settles it, without NaN/Infinity
    try:
        json.loads(text, parse_constant=_no_constant)
        return True
    except (ValueError, RecursionError):
        return False


def resolve_custom_input(raw: str, *, tool_name: str, ctx: Ctx) -> str | None:
    """The ``input`` of a custom tool call whose upstream argument text is ``raw``, or None.

    Pure apart from recording the ``mimo_raw_patch`` repair on ``ctx`` when R3-a fires.
    """
    if raw[:1] == "{" or raw.lstrip()[:1] == "{":
        try:
            v = orjson.loads(raw)
        except orjson.JSONDecodeError:
            v = None
        if type(v) is dict:
            inp = v.get("input")
            if type(inp) is str:
                return inp
    if tool_name == "apply_patch" and ctx.on(MIMO_RAW_PATCH) and tool_name in ctx.tools.custom and is_raw_patch(raw):
        ctx.repaired(MIMO_RAW_PATCH)
        return raw
    return None


def wrap_function_patch(raw: str, *, tool_name: str, ctx: Ctx) -> str | None:
    """R3-a′: ``{"<param>": raw}`` for a client's one-string function ``apply_patch`` (Chat or
    Responses client), else None.

    Only for text that is not JSON already.  Records the ``mimo_raw_patch_function`` repair.
    """
    param = ctx.tools.single_string_param.get(tool_name) if tool_name == "apply_patch" else None
    if param is None or not ctx.on(MIMO_RAW_PATCH) or not is_raw_patch(raw):
        return None
    ctx.repaired("mimo_raw_patch_function")
    return orjson.dumps({param: raw}).decode()


def _wrap_param(ctx: Ctx) -> str | None:
    """The R3-a′ parameter of this request's function ``apply_patch`` (None: no wrap), for
    either client protocol; a custom ``apply_patch`` takes R3-a instead."""
    if not ctx.on(MIMO_RAW_PATCH) or "apply_patch" in ctx.tools.custom:
        return None
    return ctx.tools.single_string_param.get("apply_patch")


def needed(ctx: Ctx) -> bool:
    """False when the stage would be a no-op for this request (the app then skips it)."""
    t = ctx.tools
    return bool(t.custom or t.namespaces or ctx.on(INVALID_JSON_PASSTHROUGH) or _wrap_param(ctx) is not None)


class _Call:
    __slots__ = ("kind", "name", "call_id", "item_id", "buf", "split")

    def __init__(self, kind: int) -> None:
        self.kind = kind
        self.name: str | None = None  # upstream (flat) name
        self.call_id: str | None = None
        self.item_id: str | None = None
        self.buf: list[str] = []  # held / buffered argument text
        self.split = False  # namespace_split counted


class _Invalid:
    """A call whose full text is not JSON, waiting for the finish reason (R3-b)."""

    __slots__ = ("name", "events")

    def __init__(self, name: str, events: list[Event]) -> None:
        self.name = name
        self.events = events


class ToolStage:
    __slots__ = (
        "ctx",
        "_custom",
        "_ns",
        "_wrap",
        "_start_kind",
        "_calls",
        "_held",
        "_invalid",
        "_bad_custom",
        "_done",
        "_sigs",
    )

    def __init__(self, ctx: Ctx, tool_kinds: bool) -> None:
        self.ctx = ctx
        tools = ctx.tools
        self._custom = tools.custom if tool_kinds else {}
        self._ns = tools.namespaces if tool_kinds else {}
        # the R3-a′ parameter name, when this request can take the wrap (either protocol)
        self._wrap: str | None = _wrap_param(ctx)
        self._start_kind = _UNKNOWN if (self._custom or self._wrap is not None) else _PLAIN
        self._calls: dict[int, _Call] = {}
        self._held: list[Event | _Invalid] | None = None  # set once an invalid call waits
        self._invalid: list[_Invalid] = []
        self._bad_custom: list[str] = []  # custom calls that could not be resolved
        self._done = False
        # thought signatures not yet handed on: they ride the call's next ToolCall out
        self._sigs: dict[int, str] = {}

    # ------------------------------------------------------------------ public API

    def feed(self, ev: Event) -> list[Event]:
        if self._done:
            return []
        t = type(ev)
        if t is ToolCall:
            out: list[Event] = []
            self._on_call(out, ev)  # type: ignore[arg-type]
            return out
        if t is ToolCallEnd:
            out = []
            self._on_end(out, ev)  # type: ignore[arg-type]
            return out
        if t is Finish:
            return self._on_finish(ev)  # type: ignore[arg-type]
        if self._held is None:
            return [ev]
        self._held.append(ev)
        return []

    @property
    def plain_text(self) -> bool:
        """A ``Text`` now is handed on as it is, changing nothing here (transformers/passthrough.py)."""
        return self._held is None and not self._done

    def plain_call(self, index: int) -> bool:
        """A ``ToolCall`` now that carries only argument text for call ``index`` is handed on
        as it is, changing nothing here: the call is known and ``plain``, nothing is held."""
        if self._held is not None or self._done:
            return False
        c = self._calls.get(index)
        return c is not None and c.kind == _PLAIN

    def end(self) -> list[Event]:
        """Stream over without a ``Finish`` (decoders always send one): release what is held."""
        if self._done:
            return []
        self._done = True
        out = self._flush(True)
        if self._bad_custom:
            out.append(Finish("failed", error=self._error(None)))
        return out

    # ------------------------------------------------------------------ calls

    def _emit(self, out: list[Event], ev: Event) -> None:
        if self._sigs and ev.__class__ is ToolCall:
            sig = self._sigs.pop(ev.index, None)
            if sig is not None:
                ev.signature = sig
        if self._held is None:
            out.append(ev)
        else:
            self._held.append(ev)

    def _classify(self, name: str) -> int:
        if name in self._custom:
            return _CUSTOM
        if self._wrap is not None and name == "apply_patch":
            return _WRAP
        return _PLAIN

    def _split(self, ev: ToolCall, c: _Call) -> ToolCall:
        namespace, name = self._ns[ev.name]  # type: ignore[index]
        if not c.split:
            c.split = True
            self.ctx.repaired("namespace_split")
        return ToolCall(ev.index, ev.arguments, ev.call_id, name, namespace, ev.custom, ev.item_id)

    def _identity(self, name: str | None, c: _Call) -> tuple[str | None, str | None]:
        """(namespace, name) of a custom/wrap call as the client knows it: a flattened
        namespaced name (Codex code mode's ``functions__exec``) split back."""
        if name and name in self._ns:
            if not c.split:
                c.split = True
                self.ctx.repaired("namespace_split")
            return self._ns[name]
        return None, name

    def _on_call(self, out: list[Event], ev: ToolCall) -> None:
        if ev.signature is not None:
            # whichever ToolCall of this index goes out next carries it (a rebuilt one too)
            self._sigs[ev.index] = ev.signature
            ev.signature = None
        c = self._calls.get(ev.index)
        new = c is None
        if c is None:
            c = self._calls[ev.index] = _Call(self._start_kind)
        name = ev.name
        if name and not c.name:
            c.name = name
        if ev.call_id and not c.call_id:
            c.call_id = ev.call_id
        if ev.item_id and not c.item_id:
            c.item_id = ev.item_id
        kind = c.kind
        if kind == _PLAIN:
            if name and name in self._ns:
                ev = self._split(ev, c)
            self._emit(out, ev)
            return
        if kind == _UNKNOWN:
            if not c.name:
                if ev.arguments:
                    c.buf.append(ev.arguments)
                if new or ev.call_id or ev.item_id:
                    self._emit(out, ToolCall(ev.index, "", ev.call_id, None, None, None, ev.item_id))
                return
            kind = c.kind = self._classify(c.name)
            if kind == _PLAIN:
                if c.buf:  # text held while nameless goes out with the identity, as one delta
                    c.buf.append(ev.arguments)
                    ev = ToolCall(ev.index, "".join(c.buf), ev.call_id, name, ev.namespace, ev.custom, ev.item_id)
                    c.buf = []
                if name in self._ns:
                    ev = self._split(ev, c)
                self._emit(out, ev)
                return
            if ev.arguments:
                c.buf.append(ev.arguments)
        else:
            if ev.arguments:
                c.buf.append(ev.arguments)
            if not (name or ev.call_id or ev.item_id):
                return  # custom / wrap: argument text only, buffered
        # custom / wrap: identity goes out at once, never argument text
        namespace, name = self._identity(name, c)
        self._emit(
            out,
            ToolCall(ev.index, "", ev.call_id, name, namespace, True if kind == _CUSTOM else ev.custom, ev.item_id),
        )

    def _on_end(self, out: list[Event], ev: ToolCallEnd) -> None:
        i = ev.index
        c = self._calls.get(i)
        if c is None:
            c = self._calls[i] = _Call(self._start_kind)
        if ev.name and not c.name:
            c.name = ev.name
        if ev.call_id and not c.call_id:
            c.call_id = ev.call_id
        kind = c.kind
        if kind == _UNKNOWN:
            kind = c.kind = self._classify(c.name) if c.name else _PLAIN
            if kind == _PLAIN:
                if c.buf or c.name:
                    tc = ToolCall(i, "".join(c.buf), c.call_id, c.name, None, None, c.item_id)
                    c.buf = []
                    self._emit(out, self._split(tc, c) if c.name in self._ns else tc)
            else:
                namespace, name = self._identity(c.name, c)
                self._emit(
                    out, ToolCall(i, "", c.call_id, name, namespace, True if kind == _CUSTOM else None, c.item_id)
                )
        if kind == _PLAIN:
            if ev.name and ev.name in self._ns:
                namespace, name = self._ns[ev.name]
                ev = ToolCallEnd(i, ev.arguments, ev.call_id, name, namespace, ev.mismatch)
            text = ev.arguments
            if text is None or not c.name or is_json(text):
                self._emit(out, ev)
            else:
                self._hold_invalid(c.name, [ev])
            return
        text = ev.arguments if ev.arguments is not None else "".join(c.buf)
        c.buf = []
        name = c.name or ""
        if kind == _CUSTOM:
            inp = resolve_custom_input(text, tool_name=name, ctx=self.ctx)
            if inp is None:
                self._bad_custom.append(name)
                return
            namespace, name = self._identity(name, c)
            self._emit(out, ToolCall(i, inp, c.call_id, name, namespace, True, c.item_id))
            self._emit(out, ToolCallEnd(i, inp, c.call_id, name, namespace, False))
            return
        # wrap (R3-a′)
        if not is_json(text):
            wrapped = wrap_function_patch(text, tool_name=name, ctx=self.ctx)
            if wrapped is None:
                self._hold_invalid(
                    name, [ToolCall(i, text, c.call_id, name), ToolCallEnd(i, text, c.call_id, name, None, False)]
                )
                return
            text = wrapped
        self._emit(out, ToolCall(i, text, c.call_id, name))
        self._emit(out, ToolCallEnd(i, text, c.call_id, name, None, False))

    def _hold_invalid(self, name: str, events: list[Event]) -> None:
        inv = _Invalid(name, events)
        self._invalid.append(inv)
        if self._held is None:
            self._held = []
        self._held.append(inv)

    # ------------------------------------------------------------------ finish

    def _flush(self, keep_invalid: bool) -> list[Event]:
        out: list[Event] = []
        held = self._held
        self._held = None
        if held:
            for x in held:
                if type(x) is _Invalid:
                    if keep_invalid:
                        out.extend(x.events)
                else:
                    out.append(x)  # type: ignore[arg-type]
        return out

    def _error(self, reason: str | None) -> dict:
        cut = " (the upstream output was cut at max_output_tokens)" if reason == "max_output_tokens" else ""
        if self._bad_custom:
            name = self._bad_custom[0]
            return stream_error(
                ERROR_CODE,
                f'custom tool {name} arguments are not {{"input": string}}'
                f" and not a complete raw patch the proxy may pass on{cut}",
            )
        functions = self.ctx.tools.functions
        for inv in self._invalid:  # the first call that cannot pass, and why
            if inv.name not in functions:
                why = "the tool is not registered in this request"
            elif cut:
                why = "the upstream output was cut at max_output_tokens"
            elif not self._passthrough_on():
                why = "invalid_json_passthrough is off for this model"
            else:
                continue
            return stream_error(ERROR_CODE, f"tool call {inv.name} arguments are not valid JSON ({why})")
        return stream_error(ERROR_CODE, "tool call arguments are not valid JSON")  # not reached

    def _passthrough_on(self) -> bool:
        return self.ctx.on(INVALID_JSON_PASSTHROUGH)

    def _on_finish(self, ev: Finish) -> list[Event]:
        self._done = True
        if ev.status == "failed":
            # the upstream's own failure is the real cause: release everything, keep its error
            out = self._flush(True)
            out.append(ev)
            return out
        ok = not self._bad_custom
        if ok and self._invalid:
            functions = self.ctx.tools.functions
            ok = (
                self._passthrough_on()
                and ev.reason != "max_output_tokens"
                and all(x.name in functions for x in self._invalid)
            )
        if ok:
            for _ in self._invalid:
                self.ctx.repaired(INVALID_JSON_PASSTHROUGH)
            out = self._flush(True)
            out.append(ev)
            return out
        error = self._error(ev.reason)
        out = self._flush(False)
        out.append(Finish("failed", error=error, extra=ev.extra))
        return out
