"""A stable ``prompt_cache_key`` per conversation, for an upstream that routes by it.

Theory of operation
-------------------
OpenAI (and Azure) send requests that share a ``prompt_cache_key`` to the same cache
machines; without one, only the first 256 tokens or so pick the machine, and a busy prefix
spills to machines that have never seen it.  Codex sends its conversation id; a Chat client
or Claude Code sends none.  Turns are stateless here (any instance serves any turn), so the
key is computed from the request alone, from what every turn of one conversation repeats:
its head.

===============================  ==========================================================
request                          the key
===============================  ==========================================================
``prompt_cache_key`` given       the client's, untouched (never replaced, never invented)
Chat                             ``sbx-`` + 32 hex digits of SHA-256 over the canonical JSON
                                 of the messages up to and including the first ``user``
                                 message (system and developer text, the first question)
Responses                        the same over ``instructions`` and the input items up to
                                 and including the first ``user`` message
no ``user`` message yet          no key (nothing marks the conversation)
===============================  ==========================================================

The head never changes from one turn to the next, so every turn of a conversation gets the
same key, and two conversations get the same one only when they start with the same system
prompt and the same first question, which is the prefix a cache would share anyway.  The
model and the tools are left out: a conversation keeps its key when it switches either.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

__all__ = ["PREFIX", "derive_chat", "derive_responses"]

PREFIX = "sbx-"


def _head(items: Any) -> list[Any] | None:
    if not isinstance(items, list):
        return None
    for i, it in enumerate(items):
        if isinstance(it, dict) and it.get("role") == "user":
            return items[: i + 1]
    return None


def derive_chat(body: dict[str, Any]) -> str | None:
    """The key for a Chat request, or None when it has no head."""
    return _key(_head(body.get("messages")))


def derive_responses(body: dict[str, Any]) -> str | None:
    """The key for a Responses request, or None when it has no head."""
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    first = _head(items)
    return _key(None if first is None else [body.get("instructions"), first])


def _key(head: Any) -> str | None:
    if head is None:
        return None
    try:
        raw = orjson.dumps(head, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # a value JSON cannot hold: no key rather than a failed request
        return None
    return PREFIX + hashlib.sha256(raw).hexdigest()[:32]
