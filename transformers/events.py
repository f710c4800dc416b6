"""Unified stream events: the vocabulary every decoder emits and every encoder consumes.

Theory of operation
-------------------
A *decoder* turns one upstream protocol (Chat Completions chunks or Responses events) into
a flat sequence of the small events below; an *encoder* turns that sequence into what the
client's protocol wants (Chat chunks or Responses events with a full item lifecycle).
Between them, optional *stages* (tool finalisation, raw-patch wrap, namespace split) map a
sequence to a sequence. Every piece is a synchronous state machine: ``feed(event) -> list``
and ``end() -> list``; nothing here does I/O.

Grammar of a decoded stream (decoders guarantee it, encoders may rely on it)::

    Start  (Text | Reasoning | Refusal | ToolCall | ToolCallEnd | ReasoningEnd | Passthrough)*
    Usage?  Finish

* ``Start`` comes exactly once, first.  ``Finish`` comes exactly once, last.
* ``ToolCall`` events carry a decoder-assigned ``index`` (0, 1, 2… in the order calls first
  appeared upstream).  Identity fields (``call_id``, ``name``, ``namespace``, ``custom``)
  are ``None`` until known and may arrive on any later ``ToolCall`` of the same index (late
  identity, docs/rules.md §3); once set they do not change.  ``arguments`` is the next piece of
  argument text ('' allowed).  The concatenation of all ``arguments`` of one index is the
  call's argument text, byte for byte.  A call's ``signature`` (Gemini's thought signature)
  comes at most once, on any ``ToolCall`` of its index.
* ``ToolCallEnd(index, arguments)`` closes a call; ``arguments`` is the authoritative full
  text after done-reconciliation.  Decoders already emitted any missing suffix as a
  ``ToolCall`` delta, so normally ``arguments == concat(deltas)``; when the upstream's
  final text contradicts the deltas, ``mismatch`` is set and ``arguments`` holds the final
  text (Responses clients get it in ``output_item.done``; Chat clients get an error).
* ``Reasoning`` text is reasoning (Chat ``reasoning_content``; Responses summary or raw
  reasoning text).  ``ReasoningEnd`` closes a reasoning item and may carry the upstream's
  ``encrypted_content`` and item id so a same-protocol Responses client gets them back.
* ``Passthrough`` carries a raw Responses item that we do not model (hosted tool calls,
  unknown item types): Responses encoders re-emit it verbatim, Chat encoders skip it.
* ``Usage`` is always in Responses shape with both details objects present and integer
  (see ``usage.py``).
* ``Finish.status`` is ``completed`` | ``incomplete`` | ``failed``; ``reason`` is the
  incomplete reason (``max_output_tokens``, ``content_filter``); ``error`` is an OpenAI
  error dict ``{"code","message","type"?}`` for ``failed``.

These are plain slotted classes: cheap to build on the hot path, no validation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .vocab import FinishStatus

__all__ = [
    "Start",
    "Text",
    "Reasoning",
    "ReasoningEnd",
    "Refusal",
    "ToolCall",
    "ToolCallEnd",
    "Passthrough",
    "Usage",
    "Finish",
    "Event",
]


@dataclass(slots=True)
class Start:
    response_id: str | None = None
    model: str | None = None
    created: int | None = None
    usage: dict[str, Any] | None = None  # what the upstream said at its start (Messages: the input)


@dataclass(slots=True)
class Text:
    text: str


@dataclass(slots=True)
class Reasoning:
    text: str
    # "summary" (Responses summary_text / Chat reasoning_content) or "raw" (reasoning_text)
    kind: str = "summary"
    summary_index: int = 0


@dataclass(slots=True)
class ReasoningEnd:
    item_id: str | None = None
    encrypted_content: str | None = None
    redacted: bool = False  # an Anthropic redacted_thinking block: ``encrypted_content`` is its data


@dataclass(slots=True)
class Refusal:
    text: str


@dataclass(slots=True)
class ToolCall:
    index: int
    arguments: str = ""
    call_id: str | None = None
    name: str | None = None
    namespace: str | None = None
    # True for a Responses custom tool call (free-form ``input`` instead of JSON arguments)
    custom: bool | None = None
    item_id: str | None = None
    # the upstream's opaque thought signature for this call (Gemini: ``extra_content.google.
    # thought_signature``), on the one event that carried it; encoders seal it for the client
    signature: str | None = None


@dataclass(slots=True)
class ToolCallEnd:
    index: int
    arguments: str | None = None
    call_id: str | None = None
    name: str | None = None
    namespace: str | None = None
    mismatch: bool = False


@dataclass(slots=True)
class Passthrough:
    item: dict[str, Any]


@dataclass(slots=True)
class Usage:
    usage: dict[str, Any]


@dataclass(slots=True)
class Finish:
    status: FinishStatus = "completed"
    reason: str | None = None  # incomplete reason
    error: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


Event = Start | Text | Reasoning | ReasoningEnd | Refusal | ToolCall | ToolCallEnd | Passthrough | Usage | Finish
