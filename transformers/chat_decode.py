"""Chat Completions upstream → unified events (stream chunks and non-stream objects).

Theory of operation
-------------------
``ChatStreamDecoder.feed(chunk)`` takes the parsed JSON of one upstream ``data:`` line and
returns the unified events (``events.py``) it completes; the app calls ``end()`` on
``data: [DONE]`` or on EOF.  Only ``choices[0]`` is read (we never ask for ``n > 1``).

* The first chunk yields ``Start(id, model, created)``.
* Per delta, in this order: reasoning (``reasoning_content``, else ``reasoning``, else the
  text of ``reasoning_details``: the first key carrying a non-empty string wins, so an
  upstream that duplicates the text under two keys is not doubled) → ``Reasoning``;
  ``content`` → ``Text``; ``refusal`` → ``Refusal``; ``tool_calls`` / legacy
  ``function_call`` → ``ToolCall``.
* With the ``inline_think`` quirk, a ``<think>…</think>`` at the very start of the content
  is reasoning and the rest text.  The tags may be split across chunks at any byte: while
  the content seen so far is still a prefix of ``<think>`` it is held; inside the think
  block a tail that may be the start of ``</think>`` is held.  Anything held is released
  (unchanged) before any other kind of event, so the order of bytes is kept.
* Tool calls (SPEC §3, the cc-switch rule): the unified ``index`` is the call's ordinal in
  first-appearance order.  A chunk with an ``index`` maps through ``index → ordinal``;
  a known index that suddenly carries a different, previously unseen ``id`` is a new call
  (upstreams that collapse parallel calls onto ``index: 0``, PAINS 4).  A chunk without
  ``index`` continues the last call unless it carries a new ``id``.  Identity (``id``,
  ``function.name``) is passed on the first ``ToolCall`` where it appears and never
  repeated; argument text is passed as it comes, so arguments before identity are fine
  (encoders defer).  Legacy ``delta.function_call`` is its own call (ordinal 0 when it
  is the only one).
* ``finish_reason`` and ``usage`` (top-level, or Moonshot's ``choices[0].usage``) are only
  remembered: a usage chunk with ``choices: []`` routinely arrives *after* the
  ``finish_reason`` chunk (PAINS 19), so ``ToolCallEnd``s, ``Usage`` and ``Finish`` are
  emitted by ``end()``.
* An ``{"error": {...}}`` chunk ends the stream at once: ``Usage`` if seen, then
  ``Finish("failed")`` with the error normalised to ``{code, message, type, param}``;
  later chunks and ``end()`` yield nothing.
* ``end()`` with no ``finish_reason`` ever seen is a truncated stream (PAINS 1):
  ``Finish("failed", upstream_stream_truncated)``.

Failed streams do not close their tool calls: a ``ToolCallEnd`` would tell a Responses
client that a partial call is complete (``output_item.done``), so encoders must accept a
``Finish("failed")`` with calls still open.

``decode_chat_completion(obj, ctx)`` does the same for a non-stream ``chat.completion``.
"""

from __future__ import annotations

from typing import Any

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
from .usage import from_chat

__all__ = ["ChatStreamDecoder", "decode_chat_completion", "FINISH_REASONS", "normalize_error"]

# Chat finish_reason → (Finish.status, Finish.reason); anything else counts as completed.
FINISH_REASONS: dict[str, tuple[str, str | None]] = {
    "stop": ("completed", None),
    "tool_calls": ("completed", None),
    "function_call": ("completed", None),
    "length": ("incomplete", "max_output_tokens"),
    "content_filter": ("incomplete", "content_filter"),
}
_COMPLETED = ("completed", None)

_EMPTY: dict[str, Any] = {}
_OPEN = "<think>"
_CLOSE = "</think>"
# inline-think states
_PROBE, _THINK, _TEXT = 0, 1, 2


def normalize_error(err: Any) -> dict[str, Any]:
    """An upstream error (dict or bare string) as ``{code, message, type, param}``."""
    if not isinstance(err, dict):
        return {"code": "upstream_error", "message": str(err), "type": "server_error", "param": None}
    code = err.get("code")
    if code is None or code == "":
        code = err.get("type") or "upstream_error"
    elif not isinstance(code, str):
        code = str(code)
    message = err.get("message")
    if not isinstance(message, str) or not message:
        message = "upstream error" if message is None or message == "" else str(message)
    etype = err.get("type")
    return {
        "code": code,
        "message": message,
        "type": etype if isinstance(etype, str) and etype else "server_error",
        "param": err.get("param"),
    }


def _reasoning_text(d: dict[str, Any]) -> str | None:
    v = d.get("reasoning_content")
    if v and isinstance(v, str):
        return v
    v = d.get("reasoning")
    if v and isinstance(v, str):
        return v
    det = d.get("reasoning_details")
    if det and isinstance(det, list):
        parts = []
        for item in det:
            if isinstance(item, dict):
                t = item.get("text")
                if not isinstance(t, str):
                    t = item.get("summary")
                if t and isinstance(t, str):
                    parts.append(t)
        if parts:
            return "".join(parts)
    return None


def _finish(fr: str | None) -> Finish:
    status, reason = FINISH_REASONS.get(fr, _COMPLETED) if fr else _COMPLETED
    return Finish(status=status, reason=reason)


class _Call:
    __slots__ = ("call_id", "name", "args")

    def __init__(self) -> None:
        self.call_id: str | None = None
        self.name: str | None = None
        self.args: list[str] = []


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
            out.append(Start(chunk.get("id"), chunk.get("model"), chunk.get("created")))
        err = chunk.get("error")
        if err:
            self._flush_held(out)
            self._done = True
            if self._usage is not None:
                out.append(Usage(from_chat(self._usage)))
            out.append(Finish(status="failed", error=normalize_error(err)))
            return out
        u = chunk.get("usage")
        if u and isinstance(u, dict):
            self._usage = u
        choices = chunk.get("choices")
        if not choices:
            return out
        choice = choices[0]
        u = choice.get("usage")
        if u and isinstance(u, dict):
            self._usage = u
        fr = choice.get("finish_reason")
        if fr:
            self._finish_reason = fr
        d = choice.get("delta")
        if not d:
            return out
        if "reasoning_content" in d or "reasoning" in d or "reasoning_details" in d:
            r = _reasoning_text(d)
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
        r = d.get("refusal")
        if r and isinstance(r, str):
            if self._held:
                self._flush_held(out)
            out.append(Refusal(r))
        tcs = d.get("tool_calls")
        if tcs:
            if self._held:
                self._flush_held(out)
            for tc in tcs:
                self._tool_delta(tc, out)
        else:
            fc = d.get("function_call")
            if fc and isinstance(fc, dict):
                if self._held:
                    self._flush_held(out)
                self._legacy(fc, out)
        return out

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
                out.append(Usage(from_chat(self._usage)))
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
        for i, call in enumerate(self._calls):
            out.append(ToolCallEnd(i, "".join(call.args), call.call_id, call.name))
        if self._usage is not None:
            out.append(Usage(from_chat(self._usage)))
        out.append(_finish(fr))
        return out

    # -- tool calls -----------------------------------------------------------------------

    def _tool_delta(self, tc: dict[str, Any], out: list[Event]) -> None:
        idx = tc.get("index")
        cid = tc.get("id") or None
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
        fn = tc.get("function") or _EMPTY
        ev = ToolCall(n)
        if cid and call.call_id is None:
            call.call_id = ev.call_id = cid
            self._by_id[cid] = n
            new = True
        _name_and_args(call, ev, fn, new, out)

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
        _name_and_args(call, ev, fc, new, out)

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


def _split_think(content: str, out: list[Event], ctx: Ctx) -> None:
    if content.startswith(_OPEN):
        i = content.find(_CLOSE, len(_OPEN))
        ctx.repaired("inline_think")
        if i < 0:
            if len(content) > len(_OPEN):
                out.append(Reasoning(content[len(_OPEN) :]))
            return
        if i > len(_OPEN):
            out.append(Reasoning(content[len(_OPEN) : i]))
        rest = content[i + len(_CLOSE) :]
        if rest:
            out.append(Text(rest))
        return
    out.append(Text(content))


def decode_chat_completion(obj: dict[str, Any], ctx: Ctx) -> list[Event]:
    """Events of one non-stream ``chat.completion`` (or ``{"error": …}``) object."""
    out: list[Event] = [Start(obj.get("id"), obj.get("model"), obj.get("created"))]
    err = obj.get("error")
    if err:
        out.append(Finish(status="failed", error=normalize_error(err)))
        return out
    choices = obj.get("choices") or []
    choice = choices[0] if choices and isinstance(choices[0], dict) else {}
    msg = choice.get("message") or {}
    r = _reasoning_text(msg)
    if r:
        out.append(Reasoning(r))
    content = msg.get("content")
    refusals: list[str] = []
    if isinstance(content, str):
        if content:
            if ctx.on("inline_think"):
                _split_think(content, out, ctx)
            else:
                out.append(Text(content))
    elif isinstance(content, list):  # some providers answer with content parts
        for part in content:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "refusal" and part.get("refusal"):
                refusals.append(part["refusal"])
            elif isinstance(part.get("text"), str) and part["text"]:
                out.append(Text(part["text"]))
    ref = msg.get("refusal")
    if ref and isinstance(ref, str):
        refusals.append(ref)
    for ref in refusals:
        out.append(Refusal(ref))
    ends: list[ToolCallEnd] = []
    for tc in msg.get("tool_calls") or ():
        if not isinstance(tc, dict):
            continue
        fn = tc.get("function") or {}
        args = fn.get("arguments")
        if not isinstance(args, str):
            args = "" if args is None else str(args)
        n = len(ends)
        cid = tc.get("id") or None
        name = fn.get("name") or None
        out.append(ToolCall(n, args, cid, name))
        ends.append(ToolCallEnd(n, args, cid, name))
    fc = msg.get("function_call")
    if fc and isinstance(fc, dict) and not ends:
        ctx.repaired("chat_legacy_function_call")
        args = fc.get("arguments")
        if not isinstance(args, str):
            args = "" if args is None else str(args)
        name = fc.get("name") or None
        out.append(ToolCall(0, args, None, name))
        ends.append(ToolCallEnd(0, args, None, name))
    out.extend(ends)
    u = choice.get("usage")
    if not (u and isinstance(u, dict)):
        u = obj.get("usage")
    if u and isinstance(u, dict):
        out.append(Usage(from_chat(u)))
    out.append(_finish(choice.get("finish_reason")))
    return out


def _name_and_args(call: _Call, ev: ToolCall, fn: dict[str, Any], new: bool, out: list[Event]) -> None:
    """Merge a ``function`` delta's name (first one wins) and argument text into ``call``;
    emit ``ev`` when it carries anything new."""
    name = fn.get("name")
    if name and call.name is None:
        call.name = ev.name = name
        new = True
    a = fn.get("arguments")
    if a and isinstance(a, str):
        call.args.append(a)
        ev.arguments = a
        new = True
    if new:
        out.append(ev)
