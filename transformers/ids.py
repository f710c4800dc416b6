"""Tool-call id policies (docs/rules.md §1).

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

``to_anthropic_id`` / ``from_anthropic_id``: Anthropic requires tool ids to match
``^[a-zA-Z0-9_-]+$``; Kimi's ``functions.Bash:0`` does not.  An id that matches (and does
not start with the mapping's prefix ``sbx_``) is sent as it is; any other becomes ``sbx_``
and the hex of its UTF-8 bytes, which ``from_anthropic_id`` turns back.  The mapping is
exact both ways (a client's own ``sbx_…`` id is encoded too), so a Kimi id survives a Claude
Code round trip unchanged for Kimi and valid for Anthropic, statelessly (the rule of docs/rules.md §1 on
this wire).  Applied where a Messages wire meets another: the Messages encoder (ids a
Messages client reads), the Messages → Chat translator (ids it sends back), the Chat →
Messages translator and the Messages decoder (toward and from a Messages upstream).

``kimi_restore_map`` undoes a client's sanitiser for the ``kimi_tool_ids`` quirk (issue 11,
repair ``kimi_tool_ids_restored``).  Kimi Code 2.x rewrites every history id with
``sanitizeToolCallId`` (``id.replace(/[^a-zA-Z0-9_-]/g, "_").slice(0, 64)``, Chat and
Anthropic policies; its Responses policy first keeps the part before ``|``) and, when two
different raw ids land on one result, appends ``_2``, ``_3``… after cutting the base to fit
64 (``makeUniqueToolCallId``).  So Kimi's own ``functions.Read:0`` comes back as
``functions_Read_0`` (or ``functions_Read_0_2``), and K2 stops calling tools (docs/rules.md §1: 25/25
tool calls with the native id, 0/25 with the sanitised one).  Over the Chat messages of one
request, an assistant tool call with function name ``N`` and id ``s`` is a candidate when
``s`` is exactly ``functions_N_<idx>`` or ``functions_N_<idx>_<k>`` (``idx`` ASCII digits,
``k`` ≥ 2 the collision suffix); its canonical id is ``functions.N:<idx>``.  Then:

=====================================================  =====================================
case                                                   result
=====================================================  =====================================
a candidate, nothing below applies                     ``s`` → ``functions.N:<idx>``
``N`` outside ``[A-Za-z0-9_-]``, or the id names       unchanged (name mismatch: the
another function than its call                         mapping is not provable)
``s`` has 64 characters or more                        unchanged (may have been cut)
``s`` already canonical, foreign (``call_…``,          unchanged
``toolu_…``, bare ``Read_0``), or idx not digits
the candidates of one assistant message do not have    unchanged, the whole message (wrong
strictly increasing ``idx`` in call order              index: not one Kimi answer)
the same ``s`` on calls that give different            unchanged (ambiguous)
canonical ids, or also on a call of another name
two different ``s`` give one canonical id (collision,  unchanged, all of them (colliding)
e.g. ``functions_Read_0`` and ``functions_Read_0_2``)
the canonical id is already an id in the request       unchanged (colliding)
=====================================================  =====================================

A ``tool`` message is restored with its call: its ``tool_call_id`` takes the canonical id
exactly when that id string was restored on an assistant call (an output whose id matches
no call stays as sent).  The map is a pure function of the request (stateless).

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
import os
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "MAX_CALL_ID",
    "EMPTY_ID",
    "is_canonical_kimi",
    "kimi_restore_map",
    "sanitize",
    "chat_policy",
    "responses_policy",
    "strict_policy",
    "unique_map",
    "upstream_call_id",
    "is_anthropic_id",
    "to_anthropic_id",
    "from_anthropic_id",
]

MAX_CALL_ID = 64
EMPTY_ID = "tool_call"

# ASCII digits only (``\d`` would accept other Unicode digits); fullmatch, so no trailing "\n".
_CANONICAL = re.compile(r"functions\.[A-Za-z0-9_-]+:[0-9]+")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_SAFE_NAME = re.compile(r"[A-Za-z0-9_-]+")
# what follows "functions_<name>_" in a sanitised native id: the index, then maybe a collision suffix
_SANITISED_TAIL = re.compile(r"([0-9]+)(?:_([2-9]|[1-9][0-9]+))?")


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


def _as_is(id: str) -> bool:
    """Every policy leaves an id of safe characters that fits MAX_CALL_ID as it is (the
    common case: one regex match instead of the policy's two)."""
    return len(id) <= MAX_CALL_ID and _SAFE_NAME.fullmatch(id) is not None


def chat_policy(id: str) -> str:
    if _as_is(id):
        return id
    return id if is_canonical_kimi(id) else sanitize(id, MAX_CALL_ID)


def responses_policy(id: str) -> str:
    if _as_is(id):
        return id
    left = id.split("|", 1)[0]
    if len(left) <= MAX_CALL_ID and is_canonical_kimi(left):
        return left
    return sanitize(left, MAX_CALL_ID)


def strict_policy(id: str) -> str:
    return id if _as_is(id) else sanitize(id, MAX_CALL_ID)


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


_SANITISED_PREFIX = "functions_"  # Kimi Code's sanitising of "functions.<name>:<idx>"


def _sanitised_native(call: Any) -> tuple[str, str, int] | None:
    """(sanitised id, canonical id, idx) for an assistant tool call whose id looks like Kimi
    Code's sanitising of a native id of this very call, else None."""
    if not isinstance(call, dict):
        return None
    sid, fn = call.get("id"), call.get("function")
    name = fn.get("name") if isinstance(fn, dict) else None
    if not (isinstance(sid, str) and isinstance(name, str)) or len(sid) >= MAX_CALL_ID:
        return None
    if _SAFE_NAME.fullmatch(name) is None:
        return None
    prefix = f"functions_{name}_"
    if not sid.startswith(prefix):
        return None
    m = _SANITISED_TAIL.fullmatch(sid, len(prefix))
    if m is None:
        return None
    return sid, f"functions.{name}:{m.group(1)}", int(m.group(1))


def kimi_restore_map(messages: Iterable[Any]) -> dict[str, str]:
    """Sanitised id → canonical ``functions.<name>:<idx>`` for every call id of a Chat
    message list that can be restored unambiguously (see the module docstring's table)."""
    present: set[str] = set()
    found: dict[str, set[str]] = {}  # sanitised id → canonical ids it was read as
    for msg in messages:
        if not isinstance(msg, dict):
            continue
        role = msg.get("role")
        if role == "tool":
            if isinstance(msg.get("tool_call_id"), str):
                present.add(msg["tool_call_id"])
            continue
        calls = msg.get("tool_calls")
        if role != "assistant" or not isinstance(calls, list):
            continue
        seen: list[tuple[str, str, int]] = []
        for call in calls:
            sid = call.get("id") if isinstance(call, dict) else None
            if isinstance(sid, str):
                present.add(sid)
                if not sid.startswith(_SANITISED_PREFIX):
                    continue  # never a sanitised native id: nothing to restore or to rule out
                cand = _sanitised_native(call)
                if cand is not None:
                    seen.append(cand)
                else:  # this id on a call it does not name: it reads as no native id here
                    found.setdefault(sid, set()).add("")
        if not seen:
            continue
        if all(a[2] < b[2] for a, b in zip(seen, seen[1:])):
            for sid, canonical, _ in seen:
                found.setdefault(sid, set()).add(canonical)
        else:  # not one Kimi answer: every candidate of this message stays as sent
            for sid, _, _ in seen:
                found.setdefault(sid, set()).add("")
    by_canonical: dict[str, list[str]] = {}
    for sid, canonicals in found.items():
        if len(canonicals) == 1 and "" not in canonicals:
            by_canonical.setdefault(next(iter(canonicals)), []).append(sid)
    return {sids[0]: c for c, sids in by_canonical.items() if len(sids) == 1 and c not in present}


_random = os.urandom  # read at each call (tests put a counter in its place)
_now_ns = time.time_ns  # (the same, for a clock)


_MAPPED = "sbx_"
_HEX = re.compile(r"(?:[0-9a-f]{2})+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def is_anthropic_id(id: str) -> bool:
    """Does Anthropic take ``id`` as a tool id (``^[a-zA-Z0-9_-]+$``)?"""
    return _SAFE_NAME.fullmatch(id) is not None


def to_anthropic_id(id: str) -> str:
    """A tool id valid for Anthropic (``^[a-zA-Z0-9_-]+$``), reversibly (module docstring)."""
    if is_anthropic_id(id) and not id.startswith(_MAPPED):
        return id
    return _MAPPED + id.encode("utf-8", "surrogatepass").hex()  # (never raises)


def from_anthropic_id(id: str) -> str:
    """The id ``to_anthropic_id`` was given; any other id as it is."""
    if id.startswith(_MAPPED) and _HEX.fullmatch(id, len(_MAPPED)):
        try:
            raw = bytes.fromhex(id[len(_MAPPED) :]).decode()
        except UnicodeDecodeError:
            return id
        # (an id of control characters is no id: what such hex spells stays as it came)
        return raw if raw and _CONTROL.search(raw) is None else id
    return id


def random_hex() -> str:
    """128 random bits as 32 lowercase hex digits, the body of every id the proxy mints
    (``chatcmpl-``, ``call_``, ``toolu_``…): what ``uuid.uuid4().hex`` gave, less the UUID
    object it built first (3.0 against 0.55 µs) and its 6 fixed version bits."""
    return _random(16).hex()


def ordered_hex() -> str:
    """32 lowercase hex digits as ``random_hex`` gives, the first 12 the time in
    milliseconds and the other 20 random (80 bits): the body of the ids a Responses answer
    mints (``resp_``, ``msg_``, ``rs_``…), which the response store indexes.  Ids made
    later sort later, so the SQLite store's indexes take a new record's entries on their
    last page, already in memory, instead of on a page at random: fewer pages written
    and read a put (docs/performance.md).  Unique as the random part is (80 bits a
    millisecond); the time it tells is the answer's ``created_at``."""
    return f"{_now_ns() // 1_000_000:012x}{_random(10).hex()}"
