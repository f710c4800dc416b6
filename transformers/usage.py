"""Token usage in both protocols' shapes (SPEC §7.2 usage table).

Theory of operation
-------------------
Inside the proxy usage is always kept in Responses shape, with both details objects
present and every field an integer (Codex fails to parse a partial object).  ``from_chat``
reads a Chat ``usage`` (OpenAI, Moonshot's ``cached_tokens``, DeepSeek's
``prompt_cache_hit_tokens``, Anthropic-style cache fields); ``to_chat`` goes back;
``normalize_responses`` fills whatever a Responses upstream left out.
"""

from __future__ import annotations

from typing import Any


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _first(*vals: Any) -> int:
    for v in vals:
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return 0


def from_chat(u: dict[str, Any] | None) -> dict[str, Any]:
    u = u or {}
    ptd = u.get("prompt_tokens_details") or {}
    ctd = u.get("completion_tokens_details") or {}
    inp = _int(u.get("prompt_tokens"))
    out = _int(u.get("completion_tokens"))
    cached = _first(
        ptd.get("cached_tokens"),
        u.get("cached_tokens"),
        u.get("prompt_cache_hit_tokens"),
        u.get("cache_read_input_tokens"),
    )
    details: dict[str, int] = {"cached_tokens": cached}
    write = _first(ptd.get("cache_write_tokens"), u.get("cache_creation_input_tokens"))
    if write:
        details["cache_write_tokens"] = write
    total = u.get("total_tokens")
    return {
        "input_tokens": inp,
        "input_tokens_details": details,
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": _int(ctd.get("reasoning_tokens"))},
        "total_tokens": total if isinstance(total, int) and not isinstance(total, bool) else inp + out,
    }


def normalize_responses(u: dict[str, Any] | None) -> dict[str, Any]:
    u = u or {}
    itd = u.get("input_tokens_details") or {}
    otd = u.get("output_tokens_details") or {}
    inp = _int(u.get("input_tokens"))
    out = _int(u.get("output_tokens"))
    details: dict[str, int] = {"cached_tokens": _int(itd.get("cached_tokens"))}
    if isinstance(itd.get("cache_write_tokens"), int):
        details["cache_write_tokens"] = itd["cache_write_tokens"]
    total = u.get("total_tokens")
    return {
        "input_tokens": inp,
        "input_tokens_details": details,
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": _int(otd.get("reasoning_tokens"))},
        "total_tokens": total if isinstance(total, int) and not isinstance(total, bool) else inp + out,
    }


def to_chat(u: dict[str, Any]) -> dict[str, Any]:
    itd = u.get("input_tokens_details") or {}
    otd = u.get("output_tokens_details") or {}
    ptd: dict[str, int] = {"cached_tokens": _int(itd.get("cached_tokens"))}
    if "cache_write_tokens" in itd:
        ptd["cache_write_tokens"] = _int(itd["cache_write_tokens"])
    return {
        "prompt_tokens": _int(u.get("input_tokens")),
        "completion_tokens": _int(u.get("output_tokens")),
        "total_tokens": _int(u.get("total_tokens")),
        "prompt_tokens_details": ptd,
        "completion_tokens_details": {"reasoning_tokens": _int(otd.get("reasoning_tokens"))},
    }
