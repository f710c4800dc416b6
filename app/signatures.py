"""Gemini's thought signatures kept for the Chat clients that drop them, in the store's backend.

Theory of operation
-------------------
A signature travels with the client (``transformers/thought_signatures.py``): in a Chat
call's ``extra_content``, a reasoning item, a thinking block.  Some Chat clients keep no
field they do not know: Kimi Code sends its calls back with ``id``, ``type`` and
``function`` only.  For them the proxy also keeps each signature it passed on, under the
client key and the call id, for as long as the store keeps responses
(``store.ttl_seconds``):

* ``remember`` (after the answer went out, never on its path): the signatures the upstream
  put on its calls (``ctx.signatures_seen``), when the client speaks Chat and the route is
  Gemini's (``gemini_thought_signatures``);
* ``recall`` (before the request is prepared): for a Chat request to such a route with
  steps whose first call came back without a signature, the kept signatures of those
  calls; the request row puts them back as it puts back what a client's envelope carried.

What the client sent wins: a kept signature fills only a call that came back bare.  The
entry's key is a SHA-256 of the client key's name, the call id and the function's name, so
one key never reads another's; only the first call of a step is looked up (the later calls
of a parallel step carry none).  The store off, or an error reaching it: nothing kept, nothing recalled (the
escape value stands in, as it does without this), counted in
``switchboard_store_errors_total{op="signatures"}`` and logged.

Where they live: SQLite, a table ``thought_signatures`` in the store's file (the store's own
connection); Redis, one key per signature, ``store.key_prefix + "sig:" + <hash>``, expiring
with the store's TTL.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from app.logs import log
from app.store import RedisStore, SQLiteStore, Store

__all__ = ["Signatures", "bare_calls"]

# the steps looked up at most (the newest): a longer conversation's oldest go as they came
_MAX_IDS = 4096


def _key(owner: str, call_id: str, name: str) -> str:
    return hashlib.sha256(b"\x00".join((owner.encode(), call_id.encode(), name.encode()))).hexdigest()


def bare_calls(body: dict[str, Any]) -> list[tuple[str, str]]:
    """``(id, function name)`` of each first call of an assistant step that came back
    without a thought signature, newest first: the calls Gemini checks (the later calls of a
    parallel step carry none).  Earlier turns too: what went upstream for a turn must not
    change once the turn is over (the upstream's prefix cache)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return []
    out: list[tuple[str, str]] = []
    for m in reversed(messages):
        if not isinstance(m, dict):
            continue
        calls = m.get("tool_calls") if m.get("role") == "assistant" else None
        if not isinstance(calls, list) or not calls or not isinstance(calls[0], dict):
            continue
        tc = calls[0]
        fn = tc.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(tc.get("id"), str) or not isinstance(name, str):
            continue
        extra = tc.get("extra_content")
        google = extra.get("google") if isinstance(extra, dict) else None
        if not (isinstance(google, dict) and google.get("thought_signature")):
            out.append((tc["id"], name))
    return out[:_MAX_IDS]


class Signatures:
    """The signatures kept per (client key, call id) in the store's backend; a no-op without
    a store."""

    def __init__(self, store: Store | None) -> None:
        self.store = store
        self._ready = False

    async def _db(self) -> Any:
        assert isinstance(self.store, SQLiteStore)
        db = await self.store.connection()
        if not self._ready:
            await db.execute(
                "CREATE TABLE IF NOT EXISTS thought_signatures "
                "(k TEXT PRIMARY KEY, sig TEXT NOT NULL, expires_at REAL NOT NULL)"
            )
            await db.commit()
            self._ready = True
        return db

    async def remember(self, owner: str, signatures: dict[str, tuple[str, str]], request_id: str) -> None:
        """Keep ``signatures`` (call id → (function name, signature)) for ``owner``."""
        store = self.store
        if store is None or not signatures:
            return
        ttl = store.ttl
        try:
            if isinstance(store, RedisStore):
                async with store.redis.pipeline(transaction=False) as pipe:
                    for call_id, (name, sig) in signatures.items():
                        pipe.set(store.prefix + "sig:" + _key(owner, call_id, name), sig, ex=max(1, int(ttl)))
                    await pipe.execute()
            elif isinstance(store, SQLiteStore):
                db = await self._db()
                now = time.time()
                await db.executemany(
                    "INSERT OR REPLACE INTO thought_signatures (k, sig, expires_at) VALUES (?, ?, ?)",
                    [(_key(owner, c, name), sig, now + ttl) for c, (name, sig) in signatures.items()],
                )
                await db.execute("DELETE FROM thought_signatures WHERE expires_at <= ?", (now,))
                await db.commit()
        except Exception as e:  # the answer went out already: counted, never raised
            self._failed(e, request_id)

    async def recall(self, owner: str, calls: list[tuple[str, str]], request_id: str) -> dict[str, str]:
        """The kept signatures of ``calls`` (``(id, function name)``), by call id."""
        store = self.store
        if store is None or not calls:
            return {}
        keys = [_key(owner, c, name) for c, name in calls]
        try:
            if isinstance(store, RedisStore):
                got = await store.mget([store.prefix + "sig:" + k for k in keys])
                values = [v.decode() if isinstance(v, bytes) else v for v in got]
            elif isinstance(store, SQLiteStore):
                db = await self._db()
                found: dict[str, str] = {}
                now = time.time()
                for start in range(0, len(keys), 500):
                    part = keys[start : start + 500]
                    sql = f"SELECT k, sig FROM thought_signatures WHERE k IN ({','.join('?' * len(part))}) AND expires_at > ?"
                    async with db.execute(sql, (*part, now)) as cur:
                        async for k, sig in cur:
                            found[k] = sig
                values = [found.get(k) for k in keys]
            else:
                return {}
        except Exception as e:  # the escape value stands in: the request goes on
            self._failed(e, request_id)
            return {}
        return {c: v for (c, _), v in zip(calls, values, strict=True) if isinstance(v, str)}

    def _failed(self, e: Exception, request_id: str) -> None:
        if self.store is not None and self.store.counters is not None:
            self.store.counters.inc("switchboard_store_errors_total", op="signatures")
        log.warning("signatures_store_failed", request_id=request_id, error=type(e).__name__)
