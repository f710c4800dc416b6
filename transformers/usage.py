"""Token usage in both protocols' shapes (docs/rules.md §7.2 usage table).

Theory of operation
-------------------
Inside the proxy usage is always kept in Responses shape, with both details objects
present and every field an integer (Codex fails to parse a partial object, and the openai
SDK 3.x requires ``input_tokens_details.cache_write_tokens``).  ``from_chat`` reads a Chat
``usage`` (OpenAI, Moonshot's ``cached_tokens``, DeepSeek's ``prompt_cache_hit_tokens``,
Anthropic-style cache fields); ``to_chat`` goes back; ``normalize_responses`` fills
whatever a Responses upstream left out.  A figure the upstream does not report is 0.

==========================  ===================================  ==========================
field (Responses shape)      read from a Chat upstream            read from a Responses one
==========================  ===================================  ==========================
``cached_tokens``            ``prompt_tokens_details.cached_``    ``input_tokens_details.``
                             ``tokens``, ``cached_tokens``,       ``cached_tokens``
                             ``prompt_cache_hit_tokens``,
                             ``cache_read_input_tokens``
``cache_write_tokens``       ``prompt_tokens_details.cache_``     ``input_tokens_details.``
                             ``write_tokens``, ``cache_``         ``cache_write_tokens``
                             ``creation_input_tokens``
``cache_write_tokens_``      —                                    kept when it is an object
``details``                                                       of the two integer TTLs
``reasoning_tokens``         ``completion_tokens_details.``       ``output_tokens_details.``
                             ``reasoning_tokens``                 ``reasoning_tokens``
==========================  ===================================  ==========================

With ``gemini_request`` (Gemini's OpenAI-compatible endpoint), a ``total_tokens`` larger than
``prompt_tokens + completion_tokens`` holds thinking tokens the endpoint left out of
``completion_tokens``: the difference is added to the output and to ``reasoning_tokens``
(rule ``gemini_thought_tokens``), so the output counts what Gemini bills as output.

``to_chat`` writes ``prompt_tokens_details`` with ``cached_tokens`` and
``cache_write_tokens`` and ``completion_tokens_details`` with ``reasoning_tokens``, always.

Upstream usage is untrusted: a ``usage`` or ``*_tokens_details`` that is not an object
counts as absent, a count that is not an integer in [0, 2**63) counts as 0 (an integral
float such as ``12.0`` is taken as the integer it is).  Either records ``usage_malformed_field_dropped``
on the ``ctx`` given, once per object; ``null`` is simply absent.
"""

from __future__ import annotations

from typing import Any

_EMPTY: dict[str, Any] = {}
# a count outside [0, 2**63) is not a token count (and a JSON writer refuses integers past
# 64 bits): it counts as malformed
_MAX_COUNT = 2**63 - 1


class _Reader:
    """Reads counts and details objects, noting once whether anything had the wrong type."""

    __slots__ = ("bad",)

    def __init__(self) -> None:
        self.bad = False

    def obj(self, v: Any) -> dict[str, Any]:
        if v.__class__ is dict:
            return v
        if v is not None:
            self.bad = True
        return _EMPTY

    def count(self, v: Any) -> int | None:
        """The count ``v`` stands for; None when absent or unusable."""
        if v.__class__ is int and 0 <= v <= _MAX_COUNT:
            return v
        if v is None:
            return None
        if v.__class__ is float and v.is_integer() and 0 <= v <= _MAX_COUNT:
            return int(v)
        self.bad = True
        return None

    def first(self, *vals: Any) -> int:
        for v in vals:
            if v.__class__ is int and 0 <= v <= _MAX_COUNT:
                return v  # (what ``count`` answers for it, without the call: the usual case)
            if v is not None:
                n = self.count(v)
                if n is not None:
                    return n
        return 0

    def done(self, ctx: Any) -> None:
        if self.bad and ctx is not None:
            ctx.repaired("usage_malformed_field_dropped")


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def from_chat(u: Any, ctx: Any = None) -> dict[str, Any]:
    r = _Reader()
    u = r.obj(u)
    ptd = r.obj(u.get("prompt_tokens_details"))
    ctd = r.obj(u.get("completion_tokens_details"))
    inp = r.first(u.get("prompt_tokens"))
    out = r.first(u.get("completion_tokens"))
    cached = r.first(
        ptd.get("cached_tokens"),
        u.get("cached_tokens"),
        u.get("prompt_cache_hit_tokens"),
        u.get("cache_read_input_tokens"),
    )
    details: dict[str, Any] = {
        "cached_tokens": cached,
        "cache_write_tokens": r.first(ptd.get("cache_write_tokens"), u.get("cache_creation_input_tokens")),
    }
    total = r.count(u.get("total_tokens"))
    reasoning = r.first(ctd.get("reasoning_tokens"))
    r.done(ctx)
    if total is not None and total > inp + out and ctx is not None and ctx.on("gemini_request"):
        # Gemini counts its thinking in the total only: it is output (and billed so)
        gap = total - inp - out
        out += gap
        reasoning = max(reasoning, gap)
        ctx.repaired("gemini_thought_tokens")
    return {
        "input_tokens": inp,
        "input_tokens_details": details,
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": inp + out if total is None else total,
    }


_TTLS = ("ttl_12h_tokens", "ttl_30m_tokens")


def _ttl_details(r: _Reader, v: Any) -> dict[str, int] | None:
    """The per-retention split of cache writes, when it is whole (both counts integers)."""
    d = r.obj(v)
    if not d:
        return None
    counts = {k: r.count(d.get(k)) for k in _TTLS}
    if any(n is None for n in counts.values()):
        r.bad = True
        return None
    return {k: n for k, n in counts.items() if n is not None}


def normalize_responses(u: Any, ctx: Any = None) -> dict[str, Any]:
    r = _Reader()
    u = r.obj(u)
    itd = r.obj(u.get("input_tokens_details"))
    otd = r.obj(u.get("output_tokens_details"))
    inp = r.first(u.get("input_tokens"))
    out = r.first(u.get("output_tokens"))
    details: dict[str, Any] = {
        "cached_tokens": r.first(itd.get("cached_tokens")),
        "cache_write_tokens": r.first(itd.get("cache_write_tokens")),
    }
    ttl = _ttl_details(r, itd.get("cache_write_tokens_details"))
    if ttl is not None:
        details["cache_write_tokens_details"] = ttl
    total = r.count(u.get("total_tokens"))
    r.done(ctx)
    return {
        "input_tokens": inp,
        "input_tokens_details": details,
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": r.first(otd.get("reasoning_tokens"))},
        "total_tokens": inp + out if total is None else total,
    }


def to_chat(u: dict[str, Any]) -> dict[str, Any]:
    itd = u.get("input_tokens_details")
    otd = u.get("output_tokens_details")
    itd = itd if itd.__class__ is dict else _EMPTY
    otd = otd if otd.__class__ is dict else _EMPTY
    ptd = {"cached_tokens": _int(itd.get("cached_tokens")), "cache_write_tokens": _int(itd.get("cache_write_tokens"))}
    return {
        "prompt_tokens": _int(u.get("input_tokens")),
        "completion_tokens": _int(u.get("output_tokens")),
        "total_tokens": _int(u.get("total_tokens")),
        "prompt_tokens_details": ptd,
        "completion_tokens_details": {"reasoning_tokens": _int(otd.get("reasoning_tokens"))},
    }
