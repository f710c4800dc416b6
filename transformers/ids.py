"""Tool-call id policies (SPEC §1, seed 000).

Theory of operation
-------------------
Kimi K2 recognises its own earlier tool calls only when the history carries them in the
canonical shape ``functions.<name>:<idx>``; sanitising that to ``functions_Read_0`` makes it
stop calling tools.  The shape is the only signal (self-hosted Kimi does not identify
itself), so every policy below keys on the id's shape, never on the provider:

===================  =====================================================================
``chat_policy``      canonical id verbatim at any length (Chat ``tool_call.id`` has no
                     limit); every other id sanitised and cut to 64
``responses_policy`` keep the part before the first ``|`` (pi-ai ``call_id|item_id``);
                     canonical and ≤ 64 → verbatim; else sanitised and cut to 64 (the
                     Responses ``call_id`` has ``maxLength: 64``)
``strict_policy``    always sanitised and cut to 64 (Anthropic-like ``[A-Za-z0-9_-]``)
===================  =====================================================================

``upstream_call_id`` reads a tool-call id as an upstream sent it: a string as is, a number
(``"id": 123``) as its decimal text so that clients always receive string
ids (repair ``tool_call_id_stringified``), anything else as no id at all.

``sanitize`` replaces every character outside ``[A-Za-z0-9_-]`` with ``_`` and optionally
cuts.  Bare ``<name>:<idx>`` (``Write:6``) is deliberately NOT canonical.

``unique_map`` is the shared, deterministic uniqueness pass (kimi-code #327): over the
distinct raw ids of a whole request, in history order, pass 1 keeps (and reserves) every id
the policy leaves unchanged; pass 2 gives every other id its normalised form (``tool_call``
when that is empty) and, on a collision, appends ``_2``, ``_3``… after cutting the base so
the result still fits ``max_len``.  The same raw id always maps to the same output, so a call
and its output stay paired, and the mapping is a pure function of the request (stateless
across instances).  Known, accepted limitation: two ids that differ only in their
``|<item_id>`` suffix collapse and the second gets ``_2``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "MAX_CALL_ID",
    "EMPTY_ID",
    "is_canonical_kimi",
    "sanitize",
    "chat_policy",
    "responses_policy",
    "strict_policy",
    "unique_map",
    "upstream_call_id",
]

MAX_CALL_ID = 64
EMPTY_ID = "tool_call"

# ASCII digits only (``\d`` would accept other Unicode digits); fullmatch, so no trailing "\n".
_CANONICAL = re.compile(r"functions\.[A-Za-z0-9_-]+:[0-9]+")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def upstream_call_id(v: Any, rep: Callable[[str], None]) -> str | None:
    """An upstream's tool-call id as a string, or None (absent, empty, or not an id at all).

    A finite number becomes its decimal text and ``tool_call_id_stringified`` is recorded
    through ``rep``; the caller decides what a value of any other type means.
    """
    if v.__class__ is str:
        return v or None
    if v.__class__ is int or (v.__class__ is float and math.isfinite(v)):
        rep("tool_call_id_stringified")
        return str(v)
    return None


def is_canonical_kimi(id: str) -> bool:
    return isinstance(id, str) and _CANONICAL.fullmatch(id) is not None


def sanitize(id: str, max_len: int | None = None) -> str:
    out = _UNSAFE.sub("_", id)
    return out if max_len is None else out[:max_len]


def chat_policy(id: str) -> str:
    return id if is_canonical_kimi(id) else sanitize(id, MAX_CALL_ID)


def responses_policy(id: str) -> str:
    left = id.split("|", 1)[0]
    if len(left) <= MAX_CALL_ID and is_canonical_kimi(left):
        return left
    return sanitize(left, MAX_CALL_ID)


def strict_policy(id: str) -> str:
    return sanitize(id, MAX_CALL_ID)


def _fit(base: str, suffix: str, max_len: int | None) -> str:
    if max_len is None:
        return base + suffix
    room = max_len - len(suffix)
    if room <= 0:
        raise ValueError(f"tool call id max_len {max_len} is too small for suffix {suffix!r}")
    return base[:room] + suffix


def unique_map(raw_ids: Iterable[str], policy: Callable[[str], str], max_len: int | None) -> dict[str, str]:
    """raw id → wire id for every distinct raw id (see the module docstring)."""
    order: list[str] = list(dict.fromkeys(raw_ids))
    mapping: dict[str, str] = {}
    used: set[str] = set()
    normalized: dict[str, str] = {}
    for raw in order:  # pass 1: ids the policy leaves alone keep and reserve themselves
        norm = policy(raw)
        normalized[raw] = norm
        if norm == raw and raw:
            mapping[raw] = raw
            used.add(raw)
    for raw in order:  # pass 2: everyone else, with _2, _3… on collision
        if raw in mapping:
            continue
        base = normalized[raw] or EMPTY_ID
        candidate = _fit(base, "", max_len)
        n = 2
        while candidate in used:
            candidate = _fit(base, f"_{n}", max_len)
            n += 1
        mapping[raw] = candidate
        used.add(candidate)
    return mapping
