"""Prompt caches as the providers keep them, for scripted upstreams: what a request reads
from cache, given the requests before it.

Theory of operation
-------------------
A token here is 4 bytes of the canonical JSON (``json.dumps`` with sorted keys, compact,
UTF-8) of what the model reads; only the ratios matter, and every kind of upstream is
measured with the same unit.

* ``PrefixCache`` (OpenAI, Azure, Kimi, DeepSeek, vLLM; an Anthropic-compatible endpoint
  that ignores ``cache_control``): a request reads the longest byte prefix it shares with
  any earlier request, rounded down to whole blocks of ``block`` tokens (OpenAI: 128).  The
  prefix is the request's ``units`` in order: for Chat the tools then each message; for
  Responses the instructions, the tools, then each input item; for Messages the tools, the
  system blocks and each content block, without ``cache_control``.
* ``BreakpointCache`` (Anthropic, MiniMax): the same units for a Messages request, each a
  *block*; only a prefix that ends at a block carrying ``cache_control`` is written, and a
  breakpoint reads the longest written prefix ending at it or at one of the ``LOOKBACK``
  (20) blocks before it.  What a request reads is the best of its breakpoints; what it
  writes is its longest breakpoint prefix less what it read.  No breakpoint: nothing read,
  nothing written.

``usage(body)`` records the request and returns ``(total, read, written)`` in tokens;
``chat_usage`` / ``responses_usage`` / ``messages_usage`` write them the way each protocol
reports usage.  The minimum cacheable length of the real APIs (1024 tokens) is left out:
the scripted conversations are short, and it would only hide the first turns of each.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

__all__ = ["BreakpointCache", "PrefixCache", "units"]

LOOKBACK = 20


def _canon(x: Any) -> bytes:
    return json.dumps(x, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _tokens(n_bytes: int) -> int:
    return -(-n_bytes // 4)


def _strip(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k != "cache_control"}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content) if isinstance(content, list) else []


def units(body: dict, protocol: str) -> list[tuple[bytes, bool]]:
    """The request as the model reads it, in order: (canonical bytes, carries a breakpoint)."""
    out: list[tuple[bytes, bool]] = []
    if protocol == "chat":
        out.append((_canon(body.get("tools")), False))
        out += [(_canon(m), False) for m in body.get("messages") or []]
    elif protocol == "responses":
        out.append((_canon([body.get("instructions"), body.get("tools")]), False))
        items = body.get("input")
        items = [{"role": "user", "content": items}] if isinstance(items, str) else items or []
        out += [(_canon(it), False) for it in items]
    else:
        for t in body.get("tools") or []:
            out.append((_canon(_strip(t)), "cache_control" in t))
        for b in _blocks(body.get("system")):
            out.append((_canon(_strip(b)), isinstance(b, dict) and "cache_control" in b))
        for m in body.get("messages") or []:
            for b in _blocks(m.get("content")):
                out.append((_canon([m.get("role"), _strip(b)]), isinstance(b, dict) and "cache_control" in b))
    return out


class PrefixCache:
    def __init__(self, block: int = 32) -> None:
        self.block = block
        self.seen: list[bytes] = []

    def usage(self, body: dict, protocol: str) -> tuple[int, int, int]:
        data = b"".join(u for u, _ in units(body, protocol))
        best = max((len(os.path.commonprefix([prev, data])) for prev in self.seen), default=0)
        self.seen.append(data)
        total = _tokens(len(data))
        read = (_tokens(best) // self.block) * self.block if best < len(data) else total
        return total, min(read, total), 0


class BreakpointCache:
    def __init__(self) -> None:
        self.written: set[str] = set()

    def usage(self, body: dict, protocol: str = "messages") -> tuple[int, int, int]:
        us = units(body, "messages")
        hashes, sizes = [], []
        h = hashlib.sha256()
        size = 0
        for data, _ in us:
            h.update(len(data).to_bytes(8, "big") + data)
            hashes.append(h.hexdigest())
            size += len(data)
            sizes.append(_tokens(size))
        total = sizes[-1] if sizes else 0
        marks = [i for i, (_, mark) in enumerate(us) if mark]
        read = 0
        for b in marks:
            for j in range(b, max(-1, b - LOOKBACK - 1), -1):
                if hashes[j] in self.written:
                    read = max(read, sizes[j])
                    break
        written = max((sizes[b] for b in marks), default=0) - read
        self.written.update(hashes[b] for b in marks)
        return total, read, max(written, 0)


def chat_usage(total: int, read: int, written: int, output: int = 20) -> dict:
    return {
        "prompt_tokens": total,
        "completion_tokens": output,
        "total_tokens": total + output,
        "prompt_tokens_details": {"cached_tokens": read},
    }


def responses_usage(total: int, read: int, written: int, output: int = 20) -> dict:
    return {
        "input_tokens": total,
        "input_tokens_details": {"cached_tokens": read},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": total + output,
    }


def messages_usage(total: int, read: int, written: int, output: int = 20) -> dict:
    # Anthropic's input_tokens is the uncached part only
    return {
        "input_tokens": total - read - written,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": written,
        "output_tokens": output,
    }
