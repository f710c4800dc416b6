"""Remote compaction, synthesised for upstreams that do not compact natively.

Theory of operation
-------------------
Codex (its built-in ``openai`` provider, or any provider named "OpenAI") compacts a long
conversation *remotely*: it sends an ordinary Responses request whose last input item is
``{"type": "compaction_trigger"}`` and requires exactly one ``compaction`` output item back
(``{"type": "compaction", "id", "encrypted_content"}``, counted from the
``response.output_item.done`` events before ``response.completed``); later requests carry
that item in place of the history it replaced.  OpenAI and Azure compact natively (quirk
``native_compaction``, on in their profiles); every other upstream gets the proxy's
synthesis: the routed model itself is asked for the summary, and the summary goes back
sealed in a ``pxc1.`` envelope (``transformers/envelope.py``) that any instance holding the
server's secret opens on the next turn.

Request side (``prepare``, Responses clients only, before the body is translated):

=====================================  ====================================  ==========================
input item                             upstream compacts natively            any other upstream
=====================================  ====================================  ==========================
``compaction`` sealed by us (opens)    expanded into the summary message     expanded
                                       (``compaction_expanded``: they        (``compaction_expanded``)
                                       cannot open ours)
``compaction`` of our family that      400 ``invalid_encrypted_content``     400, same
fails (tampered, other key, cut,       (param ``input[i].encrypted_content``)
unknown version)
``compaction`` foreign (theirs)        untouched                             400 (nobody here can
                                                                             read it)
``compaction_trigger``, last item      untouched                             summarise
                                                                             (``compaction_synthesized``)
``compaction_trigger`` elsewhere       untouched                             400 (param ``input[i]``)
=====================================  ====================================  ==========================

*Summarise*: the trigger is removed, the tools go (``tools``, ``tool_choice``,
``parallel_tool_calls``: the answer must be text, and a model offered tools may call one
instead) and so does ``text`` (a structured-output format would shape the summary), and
``COMPACTION_PROMPT`` is appended as the last user message; ``ctx.compaction`` is set.
Every rejected envelope of ours (and every foreign blob refused) is noted in
``ctx.envelope_rejected`` as ``(kind, status)`` before the ``EnvelopeError`` is raised; the
app counts and logs them.

Answer side (``CompactionStage``, between the decoder/tool stage and the encoder when
``ctx.compaction``): the model's text is collected and everything else it produced is
swallowed (reasoning, tool calls, hosted items: the client must see exactly one item);
at ``Finish``:

==========================================  ===============================================
upstream finish                             the client gets
==========================================  ===============================================
completed, summary text                     one ``compaction`` item + completed
incomplete (cut by a limit), summary text   the same (``compaction_summary_truncated``)
completed/incomplete, no text               failed ``compaction_failed``
failed                                      failed, as it came
==========================================  ===============================================

``Start`` and ``Usage`` pass through (the usage is the summarisation's, which is what Codex
records as the compaction's cost).  Streamed and non-streamed answers both go through it.
"""

from __future__ import annotations

from typing import Any

from . import envelope
from .context import Ctx
from .errors import RequestError, stream_error
from .events import Event, Finish, Passthrough, Start, Text, Usage
from .ids import random_hex

__all__ = [
    "COMPACTION_PROMPT",
    "SUMMARY_PREFACE",
    "CompactionStage",
    "EnvelopeError",
    "compaction_item",
    "prepare",
]

TRIGGER = "compaction_trigger"
ITEM = "compaction"

# The instruction appended to the conversation when the proxy compacts it.  Written for
# this proxy, in the spirit of Codex's own local compaction prompt: a hand-off note for the
# model that continues, not a recap for a human.
COMPACTION_PROMPT = """\
Stop here: the conversation above is about to be replaced by a summary, because it no \
longer fits in the context window. Write that summary now. It is the only record of this \
conversation the next assistant will have, so it must let that assistant carry on the work \
without asking the user to repeat anything.

Write plain text (Markdown headings are fine) with these parts:
1. Task: what the user asked for, in their terms, with every requirement, constraint and \
preference they stated.
2. Done so far: what has been achieved, the decisions taken and why, and what was tried and \
did not work.
3. State: the files, commands, identifiers, paths, versions, error messages and values that \
matter, quoted exactly.
4. Next: the concrete next steps, starting with the one in progress.

Do not call any tool. Do not address the user. Answer with the summary alone."""

# What the upstream sees in place of a sealed compaction item on a later turn.
SUMMARY_PREFACE = (
    "The earlier part of this conversation was compacted to save context. "
    "Summary of it, written by the assistant at the time:\n\n"
)


class EnvelopeError(RequestError):
    """A ``compaction`` item the proxy must refuse (400): ``kind``/``reason`` say why."""

    def __init__(self, message: str, *, param: str, kind: str, reason: str) -> None:
        super().__init__(message, param=param, code="invalid_encrypted_content")
        self.kind = kind
        self.reason = reason


_REASONS = {
    "bad_mac": "it was sealed with another key, or altered (check that every instance has the same server.secret_key)",
    "malformed": "it is cut or garbled",
    "unknown_version": "its envelope version is unknown to this server",
    "no_key": "this server has no key to open it",
    "foreign": "it was issued by another service, and the upstream of this model cannot read it",
}


def _user_message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _native(ctx: Ctx, native_items: bool) -> bool:
    return native_items and ctx.on("native_compaction")


def prepare(body: dict[str, Any], ctx: Ctx, native_items: bool) -> dict[str, Any]:
    """The Responses body with compaction handled for this upstream (module docstring);
    ``body`` itself is not changed.  Raises ``EnvelopeError`` for a blob it must refuse."""
    items = body.get("input")
    if not isinstance(items, list) or not any(
        isinstance(it, dict) and it.get("type") in (ITEM, TRIGGER) for it in items
    ):
        return body
    native = _native(ctx, native_items)
    out: list[Any] = []
    summarise = False
    last = len(items) - 1
    for i, it in enumerate(items):
        kind = it.get("type") if isinstance(it, dict) else None
        if kind == TRIGGER:
            if native:
                out.append(it)
            elif i == last:
                summarise = True
            else:
                raise RequestError(
                    "a compaction_trigger item must be the last input item",
                    param=f"input[{i}]",
                    code="invalid_value",
                )
            continue
        if kind != ITEM:
            out.append(it)
            continue
        blob = it.get("encrypted_content")
        status, payload = envelope.open_compaction(blob, ctx.compaction_key)
        if status == "ok":
            assert payload is not None
            out.append(_user_message(SUMMARY_PREFACE + payload["s"]))
            ctx.repaired("compaction_expanded")
            continue
        if status == "foreign" and native and isinstance(blob, str):
            out.append(it)  # theirs: they open it
            continue
        ctx.envelope_rejected.append(("compaction", status))
        raise EnvelopeError(
            f"input[{i}] is a compaction item the proxy cannot open: {_REASONS[status]}. "
            "Start a new conversation, or send the conversation without it.",
            param=f"input[{i}].encrypted_content",
            kind="compaction",
            reason=status,
        )
    new = {**body, "input": out}
    if summarise:
        for k in ("tools", "tool_choice", "parallel_tool_calls", "text"):
            new.pop(k, None)
        out.append(_user_message(COMPACTION_PROMPT))
        ctx.compaction = True
        ctx.repaired("compaction_synthesized")
    return new


def compaction_item(summary: str, ctx: Ctx) -> dict[str, Any]:
    """The one output item of a synthesised compaction."""
    return {
        "type": ITEM,
        "id": "cmp_" + random_hex(),
        "encrypted_content": envelope.seal_compaction(summary, ctx.compaction_key, model=ctx.public_model),
    }


class CompactionStage:
    """The model's summary → exactly one ``compaction`` item (module docstring)."""

    __slots__ = ("ctx", "text", "done")

    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.text: list[str] = []
        self.done = False

    def feed(self, ev: Event) -> list[Event]:
        if self.done:
            return []
        cls = type(ev)
        if cls is Text:
            self.text.append(ev.text)  # type: ignore[union-attr]
            return []
        if cls is Start or cls is Usage:
            return [ev]
        if cls is not Finish:
            return []  # reasoning, refusals, tool calls, hosted items: not part of a compaction
        self.done = True
        fin: Finish = ev  # type: ignore[assignment]
        if fin.status == "failed":
            return [fin]
        summary = "".join(self.text).strip()
        if not summary:
            return [
                Finish(
                    "failed",
                    error=stream_error(
                        "compaction_failed", "the model answered the compaction request without a summary"
                    ),
                )
            ]
        if fin.status == "incomplete":
            self.ctx.repaired("compaction_summary_truncated")
        return [Passthrough(compaction_item(summary, self.ctx)), Finish("completed", extra=fin.extra)]

    def end(self) -> list[Event]:
        return []
