"""The response store: what ``store`` keeps and ``previous_response_id`` continues.

Theory of operation
-------------------
One small async interface, ``Store``, with two backends: ``SQLiteStore`` (one file in WAL
mode: one instance, or several workers on one host, no extra service; reads on aiosqlite,
puts kept in a journal and written by a thread of its own) and ``RedisStore`` (redis-py
asyncio: several instances behind a load balancer; any instance continues any
conversation).  A stored response is a ``Record``:

==============  ============================================================================
field           what
==============  ============================================================================
id              the response id the client got (``resp_…``)
owner           the name of the client key that created it (``auth.keys``); another key
                sees nothing (``get``/``chain``/``delete`` answer as for an unknown id)
response        the response object as the client got it (model, output, usage, status,
                created_at, the echoed request fields)
input           this turn's own input items (each with an id), in order
provider        the provider that answered; ``upstream``: the protocol it spoke
remote          the upstream keeps the response too: a next turn on the same provider
                passes ``previous_response_id`` through instead of re-sending the history
ancestors       the ids of the earlier turns, oldest first: ``chain`` is one read
created_at      when it was stored (unix seconds)
==============  ============================================================================

========================  =================================================================
call                      does
========================  =================================================================
``put(rec)``              store (orjson, zstd); renews the TTL of its ancestors, so a live
                          conversation never loses its start; a record over
                          ``max_record_bytes`` as stored raises ``RecordTooLarge``
``get(id, owner)``        the record, or None (unknown, expired, another owner's)
``chain(id, owner)``      the records of the conversation ending at ``id``, oldest first,
                          or None when ``id`` or any earlier turn is gone (answering without
                          part of a conversation would be silently wrong)
``delete(id, owner)``     True when a record of this owner was deleted
``items(ids, owner)``     item id → the stored item, for the ids of items this owner's
                          records hold (``item_reference``); an id not found is absent
``ping()``                True when the backend answers (``/readyz``)
========================  =================================================================

The store's total size is bounded: ``store.max_bytes`` caps the sum of the records'
compressed sizes (``switchboard_store_bytes``, set on every put).  A put that takes the
total past it deletes the records least recently written or continued first (the ones
that would expire first: a live conversation renews its whole chain), with their item
index entries, never the record just put; each deletion counts in
``switchboard_store_evicted_total``, and a ``get`` of an evicted id answers None as for
an expired one.  SQLite keeps each row's ``size`` and the total in ``store_meta`` (kept by
triggers, so every deletion path — purge, delete, eviction, another worker's — keeps it
right); Redis keeps a sorted set of record ids by the time of their last write or renewal
(``key_prefix + "meta:bytime"``), a hash of their sizes (``"meta:sizes"``) and the total
(``"meta:bytes"``), updated and trimmed by the put's script (records a TTL removed leave
the set at the next put).  Records written by a version
without the cap are counted in SQLite (the column is filled when the file is opened) and
not in Redis (they expire by their TTL).

Every item id of a record (its input items and its output items) is indexed to the
record's id by ``put``: an ``item_reference`` names an item, not a response, and one read
of the index plus one read of the records answers any number of them.  The index holds
ids only; the item itself is read from its record, under the record's owner check, and
lives as long as it (Redis: the entries carry the record's TTL and are renewed with it;
SQLite: an entry has no expiry of its own, and the record's deletion takes it along).

A put returns once it is kept: readable then by any instance or worker, or it raises
``StoreUnavailable``.  A batch's CPU is mostly a fixed cost, so puts are written together
and under load a put pays a share:

* SQLite: a put is kept once it is appended to this process's journal (``app/journal.py``,
  one ``write``; ``_kept``) and held in memory.  A thread of the store's own, with its own
  connection (the stdlib's ``sqlite3``; ``_Writer``), writes what was appended every
  ``_APPLY_DELAY`` seconds in one transaction, then empties the journal file it came
  from.  A read looks at this process's puts not yet written, then the file, then the
  other processes' journals, then the file again (``_kept_first``): a worker reads
  another's put at once.  A delete of a put not yet written waits until it is.  A batch the
  file refuses is tried again; its puts stay readable (the client was told they are
  stored).  A process that dies leaves its journal; the next writer to open the directory
  applies it.  The cap and the gauge follow when the batch is written.  Reads, deletes and
  the other tables (usage, keys, thought signatures) stay on the shared aiosqlite
  connection.  An in-memory database (``path: ":memory:"``) is one connection's: its puts
  go through it (``_put_many``), one transaction each.
* Redis: puts are written in batches (``_put_many``), one batch at a time: the puts of
  one event-loop turn, and those that came while the batch before was being written.  A
  put returns once its batch is written, or raises ``StoreUnavailable`` with every put of
  its batch; the gauge and the evictions are counted once per batch.  On Redis (not a
  Cluster: there each put goes alone, below) the whole batch is one script,
  ``_PUTS_LUA`` (the records, their item index, the renewed ancestors with their items,
  the size bookkeeping), one ``EVALSHA`` on the puts' own connection (a
  ``redis_wire.Wire``, as the limits' counters have theirs: pipelined, its reply read by
  hiredis), written as RESP in one pass (``_puts_data``).  One write, one reply:
  redis-py's packing of the same six commands per put, their six replies and a pool
  checkout cost more than the round trip itself.  The batch has no task of its own (``_ScriptCall``): the loop's callback that
  gathered it sends it, and the wire's callbacks complete it.  A script the server lost
  (NOSCRIPT: the batch did not run) is loaded and the batch sent again, in one write.  A
  connection the server closed meanwhile (a restart) costs no put: the batch goes once
  more on a new one (each write of the script can be repeated).  No other client sees a
  batch half written (a script runs alone); one that fails midway keeps what it wrote,
  and each of its puts answers ``store: false``.  TLS or a credential provider keeps
  redis-py's pool for the puts (a restart costs no put there either).

A record is its JSON (orjson), compressed with zstd from 4 KiB on (``_COMPRESS_FROM``);
records an earlier version compressed with zlib are read too.

Every backend failure (unreachable, timeout after ``timeout_seconds``, a broken file) is
raised as ``StoreUnavailable`` and counted in ``switchboard_store_errors_total{op}``; the
caller answers 503 ``store_unavailable``.  Nothing here keeps a connection state the next
call depends on: redis-py, and the puts' own connection, reconnect on the next command, so
the store recovers by itself.
Records are never logged (they hold the conversation).

A record is stored under its owner's key, ``scope + id``, where ``scope`` is 16 hex digits
of the SHA-256 of the owner's name and a slash; item ids are indexed the same way.  The id
is the upstream's own, and an upstream may repeat one: two keys' turns with one id are two
records, and neither key can read the other's.  A record written before keys were scoped
(under its bare id) is still found, with the same owner check.

On a Redis Cluster (``store.cluster``; redis-py's ``RedisCluster``, which follows MOVED/ASK
and finds a promoted replica) records and item index entries keep their names and spread
over the slots (MGET is split by slot); the size bookkeeping is ``key_prefix + "{meta}:…"``
(one slot), and its script returns the records to evict, which ``_evict`` deletes in their
own slots.  A put rides out a failover: it is tried again for ``store.failover_seconds``,
then each node it wrote to waits (WAIT 1, ``_WAIT_MS``) until a replica has the writes.

The SQLite file is opened at the first operation that needs it (a proxy that never stores
never creates it; it is created readable by its owner only); expired rows are invisible at
once and deleted every ``_PURGE_EVERY`` puts.  Redis keys are ``key_prefix + scope + id``
with the TTL on the key itself, and ``key_prefix + "item:" + scope + item_id`` for the item
index.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import itertools
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from app import journal
from app.logs import log
from app.metrics import Metrics
from providers.config import StoreCfg, cluster_seeds

__all__ = [
    "Record",
    "RecordTooLarge",
    "Store",
    "StoredItem",
    "StoreUnavailable",
    "open_store",
    "default_sqlite_path",
]


class StoreUnavailable(Exception):
    """The backend did not answer (the message names the operation, never a record)."""


class RecordTooLarge(Exception):
    pass


@dataclass(slots=True)
class Record:
    id: str
    owner: str
    response: dict[str, Any]
    input: list[Any]
    provider: str
    upstream: str
    remote: bool = False
    ancestors: list[str] = field(default_factory=list)
    created_at: float = 0.0

    def item_ids(self) -> list[str]:
        """The ids of this record's items: its input items, then its output items."""
        out: list[str] = []
        for item in (*self.input, *(self.response.get("output") or ())):
            if isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"]:
                out.append(item["id"])
        return out

    def item(self, item_id: str) -> dict[str, Any] | None:
        for item in (*self.input, *(self.response.get("output") or ())):
            if isinstance(item, dict) and item.get("id") == item_id:
                return item
        return None

    def encode(self) -> bytes:
        # (orjson writes a dataclass's fields itself: no deep copy of the response first)
        raw = orjson.dumps(self)
        return raw if len(raw) < _COMPRESS_FROM else _codec().compress(raw)

    @classmethod
    def decode(cls, blob: bytes) -> Record:
        if blob[:1] == b"{":  # (a small record: its JSON)
            raw = blob
        elif blob[:4] == _ZSTD_MAGIC:
            raw = _codec(decompress=True).decompress(blob)
        else:  # (a record written by a version that compressed with zlib)
            raw = zlib.decompress(blob)
        return cls(**orjson.loads(raw))


# A record is its JSON compressed with zstd at level 1, by a compressor context kept per
# thread (a context is not for two threads at once).  zlib, which earlier versions used,
# set up and freed 256 KB of state per record: most of a small record's encoding, and on a
# Codex turn's 374 KB of JSON 1.29 ms against zstd's 61 µs, for 7.4 KB against 5.5 KB.
# A record under ``_COMPRESS_FROM`` bytes of JSON (a short answer with the response
# object's echoed fields, about 1.6 KB; a continued turn's few new items) is kept as its
# JSON: compressing it would save one or two KB for about 15 µs of CPU in the server
# (zstd's code and tables cold), more than the rest of its put.  The three tell apart by
# their first bytes: a JSON object's ``{``, zstd's magic number, zlib's header (0x78, as
# earlier versions wrote).
_COMPRESS_FROM = 4096
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_LEVEL = 1
_codecs = threading.local()


def _codec(decompress: bool = False) -> Any:
    """This thread's zstd compressor (or decompressor), made at its first use."""
    name = "d" if decompress else "c"
    got = getattr(_codecs, name, None)
    if got is None:
        import zstandard

        got = zstandard.ZstdDecompressor() if decompress else zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
        setattr(_codecs, name, got)
    return got


class StoredItem(NamedTuple):
    """An item of a stored record, with what a reference to it needs to know of the record."""

    item: dict[str, Any]
    provider: str  # the provider that answered the record's turn
    remote: bool  # that upstream keeps the response (and so its items) too


def default_sqlite_path() -> str:
    """Where the SQLite store lives when ``store.path`` is empty: the user's state directory."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "switchboard", "responses.db")


_PURGE_EVERY = 256


# a put waiting for its batch: ``_put``'s arguments, the future its batch completes
_Queued = tuple[tuple[str, bytes, list[str], list[str]], "asyncio.Future[None]"]


class Store:
    """The interface and what both backends share (see the module docstring); a backend
    implements ``_put``, ``_get_many``, ``_delete``, ``_ping`` and ``aclose``."""

    backend = ""

    def __init__(self, cfg: StoreCfg, counters: Metrics | None = None) -> None:
        self.cfg = cfg
        self.ttl = cfg.ttl_seconds
        self.max_bytes = cfg.max_record_bytes
        self.max_total_bytes = cfg.max_bytes  # every record together (store.max_bytes)
        self.timeout = cfg.timeout_seconds
        self.put_timeout = cfg.timeout_seconds  # (a Redis Cluster's put outlives a failover)
        self.counters = counters if counters is not None else Metrics()
        self.healthy = True  # the last operation reached the backend
        # puts written together (``_put_many``): those of one event-loop turn, and those that
        # came while the batch before was being written (one batch at a time): under load a
        # put costs a share of one write
        self._queued: list[_Queued] = []
        self._put_kicked = False
        self._writing: asyncio.Task[None] | None = None
        self.batch_puts = True

    async def _call(self, op: str, coro: Any, seconds: float | None = None) -> Any:
        try:
            async with asyncio.timeout(seconds or self.timeout):
                out = await coro
        except Exception as e:
            self.healthy = False
            self.counters.inc("switchboard_store_errors_total", op=op)
            raise StoreUnavailable(f"response store ({self.backend}) failed on {op}: {type(e).__name__}") from None
        self.healthy = True
        return out

    async def put(self, rec: Record) -> None:
        if not rec.created_at:
            rec.created_at = time.time()
        blob = rec.encode()
        if len(blob) > self.max_bytes:
            self.counters.inc("switchboard_store_errors_total", op="too_large")
            raise RecordTooLarge(f"record of {len(blob)} bytes compressed exceeds store.max_record_bytes")
        scope = _scope(rec.owner)
        # the ancestors under both keys: a conversation begun before keys were scoped
        touch = [scope + a for a in rec.ancestors] + rec.ancestors
        put = (scope + rec.id, blob, touch, [scope + i for i in rec.item_ids()])
        if await self._kept(put):
            return
        if self.batch_puts:
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[None] = loop.create_future()
            self._queued.append((put, fut))
            if self._writing is None and not self._put_kicked:
                self._put_kicked = True
                loop.call_soon(self._send_puts)
            await fut  # (the batch's writer counted it: _write_puts)
            return
        # each put alone (a Redis Cluster's: each rides out a failover by itself)
        total, evicted = await self._call("put", self._put(*put), self.put_timeout)
        self.counters.set_gauge("switchboard_store_bytes", total)
        if evicted:
            self.counters.inc("switchboard_store_evicted_total", evicted)

    def _send_puts(self) -> None:
        self._put_kicked = False
        if self._queued and self._writing is None and not self._send_now():
            self._writing = asyncio.get_running_loop().create_task(self._write_queued())

    def _send_now(self) -> bool:
        """The queued puts sent as one batch answered by callbacks, with no task of its own
        (a backend that can: Redis on its own connection); False: ``_write_queued`` writes."""
        return False

    def _written(self, batch: list[_Queued], got: list[tuple[int, int]]) -> None:
        """A batch written: the total after its last put, its evictions together; its puts
        return."""
        self.healthy = True
        self.counters.set_gauge("switchboard_store_bytes", got[-1][0])
        evicted = sum(n for _, n in got)
        if evicted:
            self.counters.inc("switchboard_store_evicted_total", evicted)
        for _, fut in batch:
            if not fut.done():
                fut.set_result(None)

    def _not_written(self, batch: list[_Queued], e: BaseException) -> None:
        """A batch the backend did not take: each of its puts counted and answered as
        ``_call`` answers one (``StoreUnavailable``, the error's type only)."""
        self.healthy = False
        err = StoreUnavailable(f"response store ({self.backend}) failed on put: {type(e).__name__}")
        for _, fut in batch:
            self.counters.inc("switchboard_store_errors_total", op="put")
            if not fut.done():
                fut.set_exception(err)

    async def _write_queued(self) -> None:
        """The queued puts, a batch at a time, until none is left (those queued while a batch
        is written are the next batch)."""
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                await self._write_puts(batch)
        except BaseException:  # (cancelled: no put waits for ever)
            for _, fut in self._queued:
                if not fut.done():
                    fut.set_exception(StoreUnavailable("response store: put cancelled"))
            self._queued = []
            raise
        finally:
            self._writing = None

    async def _write_puts(self, batch: list[_Queued]) -> None:
        try:
            got = await self._call("put", self._put_many([args for args, _ in batch]), self.put_timeout)
        except BaseException as e:
            unavailable = isinstance(e, StoreUnavailable)
            if unavailable:
                for _ in batch[1:]:  # (each put counted, as if written alone)
                    self.counters.inc("switchboard_store_errors_total", op="put")
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(StoreUnavailable(str(e) if unavailable else "response store: put cancelled"))
            if not unavailable:
                raise
            return
        self._written(batch, got)

    async def _kept(self, put: tuple[str, bytes, list[str], list[str]]) -> bool:
        """A backend that keeps a put at once and writes it later (SQLite's journal): True
        once kept; False: the put goes through ``_put_many``."""
        return False

    async def _find(self, op: str, ids: list[str], owner: str) -> list[tuple[str, Record] | None]:
        """Each id's record of this owner, with the key it is stored under: the owner's own
        key first, then the bare id (a record written before keys were scoped)."""
        scope = _scope(owner)
        keys = [scope + i for i in ids]
        blobs = await self._call(op, self._get_many(keys))
        out: list[tuple[str, Record] | None] = []
        for key, blob in zip(keys, blobs):
            rec = _owned(blob, owner)
            out.append((key, rec) if rec is not None else None)
        missing = [j for j, found in enumerate(out) if found is None]
        if missing:
            legacy = await self._call(op, self._get_many([ids[j] for j in missing]))
            for j, blob in zip(missing, legacy):
                rec = _owned(blob, owner)
                if rec is not None and rec.id == ids[j]:
                    out[j] = (ids[j], rec)
        return out

    async def get(self, rid: str, owner: str) -> Record | None:
        found = (await self._find("get", [rid], owner))[0]
        return found[1] if found is not None else None

    async def chain(self, rid: str, owner: str) -> list[Record] | None:
        last = await self.get(rid, owner)
        if last is None:
            return None
        if not last.ancestors:
            return [last]
        out = []
        for found in await self._find("chain", last.ancestors, owner):
            if found is None:
                return None
            out.append(found[1])
        out.append(last)
        return out

    async def items(self, ids: list[str], owner: str) -> dict[str, StoredItem]:
        """The stored items named by ``ids`` that this owner's records hold (item_reference)."""
        if not ids:
            return {}
        wanted = list(dict.fromkeys(ids))
        scope = _scope(owner)
        rids = await self._call("items", self._item_rids([scope + i for i in wanted]))
        missing = [j for j, r in enumerate(rids) if r is None]
        if missing:  # items of a record written before keys were scoped
            legacy = await self._call("items", self._item_rids([wanted[j] for j in missing]))
            for j, r in zip(missing, legacy):
                rids[j] = r
        found = sorted({r for r in rids if r is not None})
        if not found:
            return {}
        blobs = await self._call("items", self._get_many(found))
        records = {r: _owned(b, owner) for r, b in zip(found, blobs)}
        out: dict[str, StoredItem] = {}
        for item_id, rid in zip(wanted, rids):
            rec = records.get(rid) if rid is not None else None
            item = rec.item(item_id) if rec is not None else None
            if rec is not None and item is not None:
                out[item_id] = StoredItem(item, rec.provider, rec.remote)
        return out

    async def delete(self, rid: str, owner: str) -> bool:
        found = (await self._find("get", [rid], owner))[0]
        if found is None:
            return False
        total = await self._call("delete", self._delete(found[0]))
        if total is not None:
            self.counters.set_gauge("switchboard_store_bytes", total)
        return True

    async def ping(self) -> bool:
        try:
            await self._call("ping", self._ping())
        except StoreUnavailable:
            return False
        return True

    # -- the backend ----------------------------------------------------------------------

    async def _put(self, rid: str, blob: bytes, touch: list[str], item_ids: list[str]) -> tuple[int, int]:
        """Store; (the store's total bytes after it, the records evicted to stay under the cap)."""
        raise NotImplementedError

    async def _put_many(self, puts: list[tuple[str, bytes, list[str], list[str]]]) -> list[tuple[int, int]]:
        """Each of ``puts`` (``_put``'s arguments) stored, in order; each one's ``_put`` answer."""
        return [await self._put(*args) for args in puts]

    async def _get_many(self, ids: list[str]) -> list[bytes | None]:
        raise NotImplementedError

    async def _item_rids(self, item_ids: list[str]) -> list[str | None]:
        raise NotImplementedError

    async def _delete(self, rid: str) -> int | None:
        """Delete; the store's total bytes after it (None: not known)."""
        raise NotImplementedError

    async def _ping(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError


@functools.lru_cache(maxsize=1024)
def _scope(owner: str) -> str:
    """The prefix of an owner's keys: records and item ids are stored under ``scope + id``.
    The ids come from the upstream, which may repeat them: one key's turn must not replace
    another key's record under the same id.  Hex digits and a slash: never one of the
    bookkeeping keys (``item:``, ``items:``, ``meta:``, ``usage:``)."""
    return hashlib.sha256(owner.encode()).hexdigest()[:16] + "/"


def _owned(blob: bytes | None, owner: str) -> Record | None:
    if blob is None:
        return None
    try:
        rec = Record.decode(blob)
    except Exception:  # not a record of ours (a foreign key under the prefix): as unknown
        return None
    return rec if rec.owner == owner else None


def _create_private(path: str) -> None:
    """Create the database file readable by its owner only, as ``secret.key`` and the capture
    file are: it holds stored prompts and answers.  SQLite gives its ``-wal`` and ``-shm``
    files the same mode.  A file that exists already is left as it is."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.close(fd)


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS responses (id TEXT PRIMARY KEY, expires_at REAL NOT NULL, data BLOB NOT NULL, "
    "size INTEGER NOT NULL DEFAULT 0, items TEXT NOT NULL DEFAULT '[]')",
    "CREATE INDEX IF NOT EXISTS responses_expiry ON responses (expires_at)",
)
# The item index: item id → the record that holds it, one B-tree.  An entry has no expiry
# of its own: the record read after it has one (``_get_many``), so renewing a conversation
# touches its records only.  The record lists its item ids (``responses.items``, a JSON
# array) and the triggers delete its entries with it (purge, eviction, delete, another
# worker's), or those a new version of the record no longer lists; an entry another
# record took over since (``rid``) stays.
_ITEMS_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS response_items (id TEXT PRIMARY KEY, rid TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TRIGGER IF NOT EXISTS responses_items_delete AFTER DELETE ON responses BEGIN "
    "DELETE FROM response_items WHERE id IN (SELECT value FROM json_each(OLD.items)) AND rid = OLD.id; END",
    "CREATE TRIGGER IF NOT EXISTS responses_items_update AFTER UPDATE OF items ON responses "
    "WHEN OLD.items != NEW.items BEGIN "
    "DELETE FROM response_items WHERE id IN (SELECT value FROM json_each(OLD.items)) "
    "AND id NOT IN (SELECT value FROM json_each(NEW.items)) AND rid = OLD.id; END",
)
# A file of an earlier version: its ``items`` table (three B-trees: the rows, their id
# index, a ``rid`` index; an expiry per row, renewed then) stays as ``items_legacy``, read
# after ``response_items`` (``_item_rids``) and emptied as its records go (the trigger:
# its ``rid`` index finds them), with no rewrite of the file: renamed when the file is
# opened, the entries of records already gone deleted; dropped at an opening that finds
# it empty.  (Rewriting every record with its list of items took 12 s for 200,000.)
_ITEMS_MIGRATION = (
    "ALTER TABLE items RENAME TO items_legacy",
    "DELETE FROM items_legacy WHERE expires_at <= (julianday('now') - 2440587.5) * 86400.0",
)
_LEGACY_TRIGGER = (
    "CREATE TRIGGER IF NOT EXISTS responses_items_legacy_delete AFTER DELETE ON responses BEGIN "
    "DELETE FROM items_legacy WHERE rid = OLD.id; END"
)
_LEGACY_DROP = ("DROP TRIGGER IF EXISTS responses_items_legacy_delete", "DROP TABLE items_legacy")
# the total of the records' sizes, kept by triggers (whichever statement or process adds,
# replaces or deletes a row); started from the rows already there
_SIZE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS store_meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL)",
    "CREATE TRIGGER IF NOT EXISTS responses_size_insert AFTER INSERT ON responses BEGIN "
    "UPDATE store_meta SET v = v + NEW.size WHERE k = 'bytes'; END",
    "CREATE TRIGGER IF NOT EXISTS responses_size_update AFTER UPDATE OF size ON responses BEGIN "
    "UPDATE store_meta SET v = v + NEW.size - OLD.size WHERE k = 'bytes'; END",
    "CREATE TRIGGER IF NOT EXISTS responses_size_delete AFTER DELETE ON responses BEGIN "
    "UPDATE store_meta SET v = v - OLD.size WHERE k = 'bytes'; END",
    "INSERT OR IGNORE INTO store_meta (k, v) SELECT 'bytes', COALESCE(SUM(size), 0) FROM responses",
)


class SQLiteStore(Store):
    backend = "sqlite"

    def __init__(self, cfg: StoreCfg, counters: Metrics | None = None) -> None:
        super().__init__(cfg, counters)
        self.path = cfg.path or default_sqlite_path()
        self._db: Any = None
        self._opening = asyncio.Lock()
        self._puts = 0  # (the in-memory database's; the writer counts its own)
        self._writer: _Writer | None = None
        self._legacy_items = False  # (the file holds an earlier version's item index: _ITEMS_MIGRATION)

    async def _conn(self) -> Any:
        if self._db is not None:
            return self._db
        async with self._opening:
            if self._db is None:
                import aiosqlite

                if self.path != ":memory:":
                    Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                    _create_private(self.path)
                db = await aiosqlite.connect(self.path)
                try:
                    await db.execute("PRAGMA busy_timeout=5000")
                    await db.execute("PRAGMA journal_mode=WAL")
                    await db.execute("PRAGMA synchronous=NORMAL")
                    # one writer at a time: workers opening the file together migrate it once
                    await db.execute("BEGIN IMMEDIATE")
                    for statement in _SCHEMA:
                        await db.execute(statement)
                    cols = [row[1] for row in await db.execute_fetchall("PRAGMA table_info(responses)")]
                    if "size" not in cols:  # a file of a version without the size cap
                        await db.execute("ALTER TABLE responses ADD COLUMN size INTEGER NOT NULL DEFAULT 0")
                        await db.execute("UPDATE responses SET size = length(data)")
                    if "items" not in cols:  # a file of a version with the three-tree item index
                        await db.execute("ALTER TABLE responses ADD COLUMN items TEXT NOT NULL DEFAULT '[]'")
                    for statement in _ITEMS_SCHEMA:
                        await db.execute(statement)
                    tables = {
                        row[0]
                        for row in await db.execute_fetchall(
                            "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('items', 'items_legacy')"
                        )
                    }
                    if "items" in tables:
                        for statement in _ITEMS_MIGRATION:
                            await db.execute(statement)
                        await db.execute(_LEGACY_TRIGGER)
                        tables.add("items_legacy")
                    if "items_legacy" in tables and not await db.execute_fetchall("SELECT 1 FROM items_legacy LIMIT 1"):
                        for statement in _LEGACY_DROP:
                            await db.execute(statement)
                        tables.discard("items_legacy")
                    self._legacy_items = "items_legacy" in tables
                    for statement in _SIZE_SCHEMA:
                        await db.execute(statement)
                    await db.commit()
                except BaseException:
                    await db.close()
                    raise
                self._db = db
        return self._db

    async def connection(self) -> Any:
        """The open database connection (app/usage.py keeps its table in the same file)."""
        return await self._conn()

    async def _kept(self, put: tuple[str, bytes, list[str], list[str]]) -> bool:
        if self.path == ":memory:":  # (a database of this connection only: no other can write it)
            return False
        w = self._writer
        if w is None or not w.alive():
            w = await self._call("put", self._open_writer())
        w.ttl, w.cap = self.ttl, self.max_total_bytes  # (read at each put)
        try:
            w.append(*put)
        except OSError as e:
            self.healthy = False
            self.counters.inc("switchboard_store_errors_total", op="put")
            raise StoreUnavailable(f"response store ({self.backend}) failed on put: {type(e).__name__}") from None
        return True

    async def _open_writer(self) -> _Writer:
        await self._conn()  # (the file and its schema exist once this answers)
        if self._writer is None or not self._writer.alive():
            self._writer = _Writer(self.path, self.ttl, self.max_total_bytes, self._applied)
        return self._writer

    def _applied(self, got: list[tuple[int, int]] | BaseException) -> None:
        """The writer's report (in the loop): a batch in the file, or what a try met."""
        if isinstance(got, BaseException):
            self.healthy = False
            self.counters.inc("switchboard_store_errors_total", op="write")
            log.warning("store_write_failed", error=type(got).__name__)
            return
        self.healthy = True
        if got:
            self.counters.set_gauge("switchboard_store_bytes", got[-1][0])
        evicted = sum(n for _, n in got)
        if evicted:
            self.counters.inc("switchboard_store_evicted_total", evicted)

    async def flush(self) -> None:
        """Every put kept so far is in the file (the tests', and a delete's, wait)."""
        if self._writer is not None:
            await self._call("put", self._writer.flush())

    async def _put(self, rid: str, blob: bytes, touch: list[str], item_ids: list[str]) -> tuple[int, int]:
        return (await self._put_many([(rid, blob, touch, item_ids)]))[0]

    async def _put_many(self, puts: list[tuple[str, bytes, list[str], list[str]]]) -> list[tuple[int, int]]:
        db = await self._conn()  # (an in-memory database: _kept takes a file's puts)
        return [await self._put_shared(db, *put) for put in puts]

    async def _put_shared(
        self, db: Any, rid: str, blob: bytes, touch: list[str], item_ids: list[str]
    ) -> tuple[int, int]:
        """A put on the shared aiosqlite connection, a trip of its thread per statement (an
        in-memory database: the writer's own connection would open another database)."""
        now = time.time()
        expires = now + self.ttl
        await db.execute(_UPSERT, (rid, expires, blob, len(blob), _listed(item_ids)))
        if item_ids:
            await db.executemany(_ITEM_UPSERT, [(i, rid) for i in item_ids])
        for part in _chunks(touch, 500):
            await db.execute(_renewal(len(part)), (expires, *part, now))
        self._puts += 1
        if self._puts % _PURGE_EVERY == 0:
            await db.execute(_PURGE, (now,))
        total = await self._total(db)
        evicted = 0
        while total > self.max_total_bytes:
            rows = await db.execute_fetchall(_OLDEST, (rid,))
            victims = _victims(rows, total, self.max_total_bytes)
            if not victims:
                break
            await db.execute(_eviction(len(victims)), victims)
            evicted += len(victims)
            total = await self._total(db)
        await db.commit()
        return total, evicted

    async def _total(self, db: Any) -> int:
        rows = await db.execute_fetchall(_TOTAL)  # (one step of its thread)
        return int(rows[0][0]) if rows else 0

    async def _item_rids(self, item_ids: list[str]) -> list[str | None]:
        # (the entries have no expiry: the records read next have)
        return await self._kept_first(item_ids, self._item_rids_in_file, _Writer.pending_item, _items_of)

    async def _item_rids_in_file(self, item_ids: list[str]) -> list[str | None]:
        rids = await self._select("SELECT id, rid FROM response_items", item_ids, expiring=False)
        missing = [j for j, r in enumerate(rids) if r is None]
        if missing and self._legacy_items:  # (an earlier version's entries: _ITEMS_MIGRATION)
            older = await self._select(
                "SELECT id, rid FROM items_legacy", [item_ids[j] for j in missing], expiring=False
            )
            for j, r in zip(missing, older):
                rids[j] = r
        return rids

    async def _get_many(self, ids: list[str]) -> list[bytes | None]:
        return await self._kept_first(ids, self._records_in_file, self._pending_record, self._records_of)

    async def _records_in_file(self, ids: list[str]) -> list[Any]:
        return await self._select("SELECT id, data FROM responses", ids)

    def _pending_record(self, w: _Writer, key: str) -> bytes | None:
        e = w.pending(key)
        return e.blob if e is not None and e.now + self.ttl > time.time() else None

    def _records_of(self, entries: list[journal.Entry]) -> dict[str, bytes]:
        """Records from puts not yet in the file (not expired)."""
        now = time.time()
        return {e.rid: e.blob for e in entries if e.now + self.ttl > now}

    async def _kept_first(
        self,
        keys: list[str],
        in_file: Callable[[list[str]], Any],
        mine: Callable[[_Writer, str], Any],
        of: Callable[[list[journal.Entry]], dict[str, Any]],
    ) -> list[Any]:
        """Each key's value: from this process's puts not yet in the file, else from the
        file; for those still missing, from other processes' journals (workers on this
        file), then from the file once more (a put leaves a journal only once it is in the
        file: read in this order, none is missed)."""
        w = self._writer
        out: list[Any] = [None] * len(keys) if w is None else [mine(w, k) for k in keys]
        rest = [j for j, v in enumerate(out) if v is None]
        if not rest:
            return out
        got = await in_file([keys[j] for j in rest])
        for j, v in zip(rest, got):
            out[j] = v
        missing = [j for j in rest if out[j] is None]
        directory = journal.directory_of(self.path)
        own_token = w.journal.token if w is not None else "-"
        # (no other process's journal: no second read of the file)
        if not missing or self.path == ":memory:" or not journal.has_siblings(directory, own_token):
            return out
        theirs = of(journal.read_siblings(directory, own_token))
        for j in missing:
            out[j] = theirs.get(keys[j])
        still = [j for j in missing if out[j] is None]
        if still:
            for j, v in zip(still, await in_file([keys[j] for j in still])):
                out[j] = v
        return out

    async def _select(self, select: str, ids: list[str], expiring: bool = True) -> list[Any]:
        """``select`` (two columns: an id, a value) for ``ids`` (not expired, when its rows
        expire): each id's value, None when it is not there."""
        db = await self._conn()
        now = time.time()
        found: dict[str, Any] = {}
        for part in _chunks(ids, 500):
            marks = ",".join("?" * len(part))
            sql = f"{select} WHERE id IN ({marks})"
            args: list[Any] = list(part)
            if expiring:
                sql += " AND expires_at > ?"
                args.append(now)
            async with db.execute(sql, args) as cur:
                async for row in cur:
                    found[row[0]] = row[1]
        return [found.get(i) for i in ids]

    async def _delete(self, rid: str) -> int | None:
        w = self._writer if self.path == ":memory:" else await self._open_writer()  # (it takes orphans)
        if w is not None and w.pending(rid) is not None:
            await w.flush()  # (else its put would be written after the delete)
        if self.path != ":memory:":
            directory = journal.directory_of(self.path)
            own_token = w.journal.token if w is not None else "-"
            # another worker's put of it, not yet in the file: deleted once it is (polled:
            # that is another process's file)
            for _ in itertools.count():
                if all(e.rid != rid for e in journal.read_siblings(directory, own_token)):
                    break
                await asyncio.sleep(0.005)
        db = await self._conn()
        await db.execute("DELETE FROM responses WHERE id = ?", (rid,))  # (its items: the trigger)
        await db.commit()
        return await self._total(db)

    async def _ping(self) -> None:
        if self._db is None:
            return  # not opened yet: nothing can be wrong with it
        async with self._db.execute("SELECT 1") as cur:
            await cur.fetchone()

    async def aclose(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            await writer.close()  # (after the puts already handed to it)
        db, self._db = self._db, None
        if db is not None:
            await db.close()


# a put's statements (SQLiteStore: the writer's, and the in-memory database's); a record
# deleted takes its item index entries with it (the trigger ``responses_items_delete``)
_UPSERT = (
    "INSERT INTO responses (id, expires_at, data, size, items) VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE "
    "SET expires_at = excluded.expires_at, data = excluded.data, size = excluded.size, items = excluded.items"
)
_ITEM_UPSERT = "INSERT OR REPLACE INTO response_items (id, rid) VALUES (?, ?)"
_TOTAL = "SELECT v FROM store_meta WHERE k = 'bytes'"
_OLDEST = "SELECT id, size FROM responses WHERE id != ? ORDER BY expires_at LIMIT 256"
_PURGE = "DELETE FROM responses WHERE expires_at <= ?"


def _items_of(entries: list[journal.Entry]) -> dict[str, str]:
    """Item key → record key, from puts not yet in the file."""
    return {i: e.rid for e in entries for i in e.item_ids}


def _listed(item_ids: list[str]) -> str:
    """A record's item ids as ``responses.items`` keeps them (a JSON array, as text:
    SQLite's ``json_each`` reads it)."""
    return orjson.dumps(item_ids).decode()


@functools.lru_cache(maxsize=512)
def _upserts(n: int) -> str:
    """``_UPSERT`` of ``n`` rows (the writer's batch)."""
    return _UPSERT.replace("(?, ?, ?, ?, ?)", ",".join(["(?, ?, ?, ?, ?)"] * n))


@functools.lru_cache(maxsize=1024)
def _item_upserts(n: int) -> str:
    return _ITEM_UPSERT.replace("(?, ?)", ",".join(["(?, ?)"] * n))


def _renewal(n: int) -> str:
    """The renewal of ``n`` ancestors (arguments: the new expiry, the ids, now); their item
    index entries follow them."""
    return f"UPDATE responses SET expires_at = ? WHERE id IN ({','.join('?' * n)}) AND expires_at > ?"


def _eviction(n: int) -> str:
    """The deletion of ``n`` records, their item index entries with them (arguments: the ids)."""
    return f"DELETE FROM responses WHERE id IN ({','.join('?' * n)})"


def _victims(rows: Iterable[tuple[str, int]], total: int, cap: int) -> list[str]:
    """The oldest records (``_OLDEST``'s rows) whose deletion takes ``total`` under ``cap``."""
    victims: list[str] = []
    freed = 0
    for victim, size in rows:
        victims.append(victim)
        freed += size
        if total - freed <= cap:
            break
    return victims


_Puts = list[tuple[str, bytes, list[str], list[str]]]
_APPLY_DELAY = 0.05  # how long the writer gathers puts before it applies them (seconds)
_PENDING_MAX_BYTES = 256 << 20  # records appended and not yet in the file: beyond, puts fail
_ADOPT_EVERY = 5.0  # how often the writer looks for a gone process's journal (seconds)
_RETRY = (0.05, 0.2, 1.0)  # the waits between tries of a batch that failed, the last repeated


class _Writer:
    """The SQLite store's puts (``app/journal.py``): ``append`` (the loop's thread) writes a
    put to this process's journal and keeps it in memory (``pending``: readable at once);
    a thread of the store's own, with its own connection to the file (the stdlib's
    ``sqlite3``), applies what was appended in one transaction every ``_APPLY_DELAY``
    seconds (at once for a ``flush``), empties the journal file it came from, and tells the
    loop the total and the evictions (one call per batch).  A batch that fails (a busy file
    past its timeout, a full disk) is rolled back and tried again (``_RETRY``), its puts
    still readable from memory and from the journal: the client was told they are stored.
    The thread also applies the journals of processes that are gone (``journal.orphans``)."""

    def __init__(self, path: str, ttl: int, cap: int, done: Callable[[Any], None]) -> None:
        self.path = path
        self.ttl = ttl
        self.cap = cap  # (store.max_bytes)
        self.journal = journal.Journal(journal.directory_of(path))
        self._done = done  # (the loop's: a batch's [(total, evicted)], or the exception it met)
        self._loop = asyncio.get_running_loop()
        self._lock = threading.Lock()
        self._entries: list[journal.Entry] = []  # appended, not yet taken by the thread
        self._pending: dict[str, journal.Entry] = {}  # key → its newest put not yet committed
        self._pending_items: dict[str, journal.Entry] = {}  # item key → the put that indexed it
        self._pending_bytes = 0
        self._seq = 0
        self._wake = threading.Event()
        self._hurry = threading.Event()  # (a flush or the close waits: no gathering)
        self._flushes: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._closing = False
        self._closed: asyncio.Future[None] | None = None
        self._con: sqlite3.Connection | None = None
        self._puts = 0
        self.batches = 0  # transactions committed (the tests read it)
        self._thread = threading.Thread(target=self._run, name="switchboard-store-writer", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return not self._closing and self._thread.is_alive()

    # -- the loop's side ----------------------------------------------------------------

    def append(self, rid: str, blob: bytes, touch: list[str], item_ids: list[str]) -> None:
        """Kept: in the journal and in memory, or OSError (nothing kept)."""
        with self._lock:
            if self._pending_bytes + len(blob) > _PENDING_MAX_BYTES:
                raise OSError("store: too many puts not yet written to the file")
            self._seq += 1
            e = journal.Entry(self._seq, time.time(), rid, blob, touch, item_ids)
            self.journal.append(journal.encode(e))
            self._entries.append(e)
            self._pending[rid] = e
            for i in item_ids:
                self._pending_items[i] = e
            self._pending_bytes += len(blob)
        if not self._wake.is_set():
            self._wake.set()

    def pending(self, key: str) -> journal.Entry | None:
        with self._lock:
            return self._pending.get(key)

    def pending_item(self, key: str) -> str | None:
        with self._lock:
            e = self._pending_items.get(key)
        return e.rid if e is not None else None

    async def flush(self) -> None:
        """Return once every put appended before the call is in the file."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if not self._pending:
                return
            self._flushes.append((loop, fut))
        self._hurry.set()
        self._wake.set()
        await fut

    async def close(self) -> None:
        """Apply what is appended, stop the thread, close its connection; the journal's
        files go when everything in them is in the file (else the next opening applies
        them).  A second call waits for the first's."""
        if self._closed is None:
            if not self._thread.is_alive():  # (it died: its journal stays for the next opening)
                self._closing = True
                with self._lock:
                    self.journal.close(unlink=False)
                return
            self._closed = asyncio.get_running_loop().create_future()
            with self._lock:
                self._closing = True
            self._hurry.set()
            self._wake.set()
        await asyncio.shield(self._closed)

    # -- the thread ---------------------------------------------------------------------

    def _run(self) -> None:
        adopted_at = -_ADOPT_EVERY
        clean = False  # (closed as asked, every put taken applied: the journal's files may go)
        try:
            while True:
                if time.monotonic() - adopted_at >= _ADOPT_EVERY:
                    adopted_at = time.monotonic()
                    self._adopt()
                if not self._wake.wait(_ADOPT_EVERY):
                    continue
                self._hurry.wait(_APPLY_DELAY)  # (gather: the puts of the next 50 ms join)
                with self._lock:
                    self._wake.clear()
                    self._hurry.clear()
                    batch, self._entries = self._entries, []
                    flushes, self._flushes = self._flushes, []
                    closing = self._closing
                    old = self.journal.swap()
                applied = not batch or self._apply(batch, old, closing)
                self._answer(flushes)
                if closing:
                    clean = applied  # (else the file would not take them: they stay)
                    break
        except Exception as e:  # (unforeseen: its journal stays for the next writer)
            log.error("store_writer_failed", error=type(e).__name__)
        finally:
            if self._con is not None:
                self._con.close()
                self._con = None
            with self._lock:
                self.journal.close(unlink=clean and not self._entries)
            if self._closed is not None:
                self._answer([(self._loop, self._closed)])

    def _apply(self, batch: list[journal.Entry], old: int, closing: bool) -> bool:
        """The batch in the file (tried until it is; closing: a few times), then its journal
        file emptied and its puts dropped from memory."""
        tries = 0
        while True:
            try:
                got = self._write(batch)
                break
            except Exception as err:
                self._tell(err)
                if closing and tries >= len(_RETRY):
                    return False
                time.sleep(_RETRY[min(tries, len(_RETRY) - 1)])
                tries += 1
        self.batches += 1
        with self._lock:
            self.journal.clear(old)
            for e in batch:
                if self._pending.get(e.rid) is e:
                    del self._pending[e.rid]
                for i in e.item_ids:
                    if self._pending_items.get(i) is e:
                        del self._pending_items[i]
                self._pending_bytes -= len(e.blob)
        self._tell([got])
        return True

    def _adopt(self) -> None:
        """Apply the journal of a process that is gone (killed, crashed), one at a time."""
        try:
            for o in journal.orphans(self.journal.directory, self.journal.token):
                try:
                    if o.entries:
                        self._tell([self._write(o.entries)])
                except Exception as e:
                    journal.release(o, applied=False)
                    self._tell(e)
                    return
                journal.release(o, applied=True)
                log.info("store_journal_applied", puts=len(o.entries))
        except OSError as e:
            self._tell(e)

    def _tell(self, got: Any) -> None:
        with contextlib.suppress(RuntimeError):  # (the loop is closed: nobody listens)
            self._loop.call_soon_threadsafe(self._done, got)

    def _answer(self, waiting: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]) -> None:
        for loop, fut in waiting:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, [(fut, None)])

    def _connect(self) -> sqlite3.Connection:
        if self._con is None:
            con = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            try:
                con.execute("PRAGMA busy_timeout=5000")
                con.execute("PRAGMA synchronous=NORMAL")  # (per connection; WAL is the file's)
            except BaseException:
                con.close()
                raise
            self._con = con
        return self._con

    def _write(self, entries: list[journal.Entry]) -> tuple[int, int]:
        """The puts in one transaction; (the total after them, the records evicted)."""
        con = self._connect()
        try:
            con.execute("BEGIN IMMEDIATE")
            got = self._put_all(con, entries)
            con.execute("COMMIT")
        except BaseException:
            self._con = None
            try:
                con.rollback()
            finally:
                con.close()
            raise
        return got

    def _put_all(self, con: sqlite3.Connection, entries: list[journal.Entry]) -> tuple[int, int]:
        """Each statement once for the whole batch, its rows together (a multi-row VALUES):
        the calls into SQLite do not grow with the batch.  A record put twice keeps its last
        version (the rows go in order); the ancestors are renewed from the batch's last put;
        the cap is kept after the batch, never evicting its last record."""
        ttl = self.ttl
        for part in _chunks(entries, 400):  # (5 variables a row: under SQLite's 32,766)
            rows: list[Any] = []
            for e in part:
                rows += (e.rid, e.now + ttl, e.blob, len(e.blob), _listed(e.item_ids))
            con.execute(_upserts(len(part)), rows)
        pairs = [(i, e.rid) for e in entries for i in e.item_ids]
        for chunk in _chunks(pairs, 1000):
            con.execute(_item_upserts(len(chunk)), [x for pair in chunk for x in pair])
        last = entries[-1]
        touch = list(dict.fromkeys(t for e in entries for t in e.touch))
        for ids in _chunks(touch, 500):
            con.execute(_renewal(len(ids)), (last.now + ttl, *ids, last.now))
        before, self._puts = self._puts, self._puts + len(entries)
        if before // _PURGE_EVERY != self._puts // _PURGE_EVERY:
            con.execute(_PURGE, (time.time(),))
        total = _total(con)
        evicted = 0
        while total > self.cap:
            victims = _victims(con.execute(_OLDEST, (last.rid,)), total, self.cap)
            if not victims:
                break
            con.execute(_eviction(len(victims)), victims)
            evicted += len(victims)
            total = _total(con)
        return total, evicted


def _total(con: sqlite3.Connection) -> int:
    row = con.execute(_TOTAL).fetchone()
    return int(row[0]) if row else 0


def _settle(settled: list[tuple[asyncio.Future[Any], Any]]) -> None:
    for fut, result in settled:
        if fut.done():
            continue  # (its put timed out: the caller answered already)
        if isinstance(result, BaseException):
            fut.set_exception(result)
        else:
            fut.set_result(result)


_REDIS_CONNECTIONS = 256  # per process

# What both put scripts begin with (KEYS: the sorted set by time, the hash of sizes, the
# total; ARGV[2..4]: now, ttl, cap): ``book(rid, size, renewed)``, the size bookkeeping of one
# put (the record counted, the ancestors' times renewed, records past their TTL forgotten),
# and ``forget(id)``, which the eviction loops that follow use too.
_TRIM_BOOK = """
local zs, hs, tot = KEYS[1], KEYS[2], KEYS[3]
local now, ttl, cap = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local function forget(id)
  local s = redis.call('HGET', hs, id)
  redis.call('ZREM', zs, id)
  if s then
    redis.call('HDEL', hs, id)
    redis.call('DECRBY', tot, tonumber(s))
  end
end
local function book(rid, size, renewed)
  forget(rid)
  redis.call('HSET', hs, rid, size)
  redis.call('INCRBY', tot, size)
  redis.call('ZADD', zs, now, rid)
  for _, id in ipairs(renewed) do
    redis.call('ZADD', zs, 'XX', now, id)
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', zs, '-inf', now - ttl - 60, 'LIMIT', 0, 256)) do
    forget(id)
  end
end
"""

# The puts of a batch, whole, in one script (RedisStore._put_many: one command, one reply).
# KEYS: the size bookkeeping's sorted set (id → time of its last write or renewal), hash
# (id → size) and total.  ARGV: the key prefix, now, the TTL, the cap, then for each put its
# id, its record, how many item ids follow and those, how many ancestors follow and those.
# Each put in order: the record, the item index (the record's list of its item ids and one
# key per item id, so that renewing an ancestor renews its items without decoding it), the
# ancestors renewed with their item index, the bookkeeping; then records past their TTL are
# forgotten (a minute of slack for clocks) and the oldest records (with their item index
# entries) deleted until the total is under the cap, never the one put.  {total, evicted} of
# each put, flat.
_PUTS_LUA = (
    _TRIM_BOOK
    + """local prefix = ARGV[1]
local function evict(rid)
  local total = tonumber(redis.call('GET', tot) or '0')
  local evicted = 0
  while total > cap do
    local oldest = redis.call('ZRANGE', zs, 0, 1)
    local id = oldest[1]
    if id == rid then id = oldest[2] end
    if not id then break end
    local listed = redis.call('GET', prefix .. 'items:' .. id)
    if listed then
      for item in string.gmatch(listed, '[^\\n]+') do
        local key = prefix .. 'item:' .. item
        if redis.call('GET', key) == id then redis.call('DEL', key) end
      end
    end
    redis.call('DEL', prefix .. id, prefix .. 'items:' .. id)
    forget(id)
    evicted = evicted + 1
    total = tonumber(redis.call('GET', tot) or '0')
  end
  return total, evicted
end
local out = {}
local at = 5
while at <= #ARGV do
  local rid, blob = ARGV[at], ARGV[at + 1]
  local items = {}
  for j = 1, tonumber(ARGV[at + 2]) do items[j] = ARGV[at + 2 + j] end
  at = at + 3 + #items
  local renewed = {}
  for j = 1, tonumber(ARGV[at]) do renewed[j] = ARGV[at + j] end
  at = at + 1 + #renewed
  redis.call('SET', prefix .. rid, blob, 'EX', ttl)
  if #items > 0 then
    redis.call('SET', prefix .. 'items:' .. rid, table.concat(items, '\\n'), 'EX', ttl)
    for _, i in ipairs(items) do
      redis.call('SET', prefix .. 'item:' .. i, rid, 'EX', ttl)
    end
  end
  for _, a in ipairs(renewed) do
    redis.call('EXPIRE', prefix .. a, ttl)
    -- (MGET: nil, not an error, for a key of another type)
    local listed = redis.call('MGET', prefix .. 'items:' .. a)[1]
    if listed and listed ~= '' then
      redis.call('EXPIRE', prefix .. 'items:' .. a, ttl)
      for i in string.gmatch(listed, '[^\\n]+') do
        redis.call('EXPIRE', prefix .. 'item:' .. i, ttl)
      end
    end
  end
  book(rid, #blob, renewed)
  local total, evicted = evict(rid)
  out[#out + 1] = total
  out[#out + 1] = evicted
end
return out
"""
)

# a deleted record leaves the bookkeeping (KEYS as above; ARGV: the id); the total
_FORGET_LUA = """
local s = redis.call('HGET', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
if s then
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('DECRBY', KEYS[3], tonumber(s))
end
return tonumber(redis.call('GET', KEYS[3]) or '0')
"""


# On a Redis Cluster (store.cluster): a put's size bookkeeping in the slot of its three keys
# only (KEYS as _PUTS_LUA's; ARGV: the key prefix, now, the TTL, the cap, the id put, its
# size, then the ids it renewed).  The records to evict are returned after {total, evicted};
# RedisStore._evict deletes them and their item index entries, in their own slots.
_TRIM_CLUSTER_LUA = (
    _TRIM_BOOK
    + """local rid = ARGV[5]
local renewed = {}
for i = 7, #ARGV do renewed[#renewed + 1] = ARGV[i] end
book(rid, tonumber(ARGV[6]), renewed)
local out = {0, 0}
local total = tonumber(redis.call('GET', tot) or '0')
while total > cap do
  local oldest = redis.call('ZRANGE', zs, 0, 1)
  local id = oldest[1]
  if id == rid then id = oldest[2] end
  if not id then break end
  forget(id)
  out[#out + 1] = id
  total = tonumber(redis.call('GET', tot) or '0')
end
out[1] = total
out[2] = #out - 2
return out
"""
)

# an item index entry is deleted only while it still names the evicted record
_DEL_IF_LUA = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"

_WAIT_MS = 250  # the longest a put on a cluster waits for a replica to have it
_ALONE_SECONDS = 10.0  # a node whose replica did not answer a WAIT is not waited on for this long


class RedisStore(Store):
    backend = "redis"

    def __init__(self, cfg: StoreCfg, counters: Metrics | None = None) -> None:
        super().__init__(cfg, counters)
        from redis.asyncio import BlockingConnectionPool, Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        self.prefix = cfg.key_prefix
        self.cluster = cfg.cluster
        if cfg.cluster:
            from redis.asyncio.cluster import ClusterNode, RedisCluster

            # redis-py follows MOVED/ASK and finds a promoted replica itself (one retry, after
            # reading the cluster's slots again); a put rides out a failover (_put)
            url, seeds = cluster_seeds(cfg.url)
            self.redis: Any = RedisCluster.from_url(
                url,
                startup_nodes=[ClusterNode(host, port) for host, port in seeds],
                max_connections=_REDIS_CONNECTIONS,  # per node
                socket_timeout=cfg.timeout_seconds,
                socket_connect_timeout=cfg.timeout_seconds,
                retry=Retry(NoBackoff(), 1),
                health_check_interval=30,
            )
            self.put_timeout = cfg.timeout_seconds + cfg.failover_seconds
            self.batch_puts = False
            self._alone: dict[str, float] = {}  # node → until when its WAITs are skipped
            self._failover_errors: tuple[type[BaseException], ...] = RedisCluster.ERRORS_ALLOW_RETRY
            self._sizes = [self.shared("meta") + n for n in ("bytime", "sizes", "bytes")]
            return
        # no retries inside one call (a dead server must fail fast: the caller answers 503);
        # the pool opens a new connection on the next call, which is the reconnect.  A burst
        # of more calls than connections waits for one (up to the timeout) instead of failing:
        # redis-py's default pool refuses the 101st at once (MaxConnectionsError), which
        # would turn a burst into 503s and into limits failing open (app/limits.py)
        pool = BlockingConnectionPool.from_url(
            cfg.url,
            max_connections=_REDIS_CONNECTIONS,
            timeout=cfg.timeout_seconds,
            socket_timeout=cfg.timeout_seconds,
            socket_connect_timeout=cfg.timeout_seconds,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=30,
        )
        self.redis = Redis(connection_pool=pool)
        # the size bookkeeping (see the module docstring)
        self._sizes = [self.prefix + "meta:bytime", self.prefix + "meta:sizes", self.prefix + "meta:bytes"]
        # the puts' own connection (app/redis_wire.py; None: redis-py's, for TLS or a
        # credential provider), and the first arguments of every batch's command: EVALSHA,
        # the script's SHA1, its keys; then the key prefix
        from app import redis_wire

        where = redis_wire.params(self.redis)
        self._wire = redis_wire.Wire(where) if where is not None else None
        self._puts_sha = hashlib.sha1(_PUTS_LUA.encode()).hexdigest().encode()
        self._puts_head: list[bytes] = [b"EVALSHA", self._puts_sha, b"3", *(k.encode() for k in self._sizes)]
        self._prefix_arg = self.prefix.encode()
        # (the same head in RESP, for _puts_data: every argument up to the prefix's)
        self._puts_head_resp = "".join(_bulks([a.decode() for a in (*self._puts_head, self._prefix_arg)]))

    def shared(self, group: str) -> str:
        """The prefix of a group of keys that one script or transaction touches together
        (``meta``, ``keys``, ``usage``): ``key_prefix + group + ":"``, on a cluster with the
        group as hash tag (``{group}:``), so that they share a slot."""
        return self.prefix + ("{" + group + "}:" if self.cluster else group + ":")

    async def mget(self, keys: list[str]) -> list[Any]:
        """MGET; on a cluster split by slot (the keys' nodes are asked at once)."""
        if self.cluster:
            return list(await self.redis.mget_nonatomic(keys))
        return list(await self.redis.mget(keys))

    async def _put(self, rid: str, blob: bytes, touch: list[str], item_ids: list[str]) -> tuple[int, int]:
        if not self.cluster:
            return (await self._put_many([(rid, blob, touch, item_ids)]))[0]
        # a primary that died: its replica takes over within the cluster's node timeout (and
        # redis-py finds it when the slots are read again); until then the put is tried again
        # (every step of it can be repeated).  The answer went out already: nobody waits.
        deadline = time.monotonic() + self.cfg.failover_seconds
        while True:
            try:
                total, evicted, victims = await self._put_cluster(rid, blob, touch, item_ids)
                break
            except self._failover_errors:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.1)
        if victims:
            try:
                await self._evict(victims)
            except Exception as e:  # (the put itself is done; see _evict)
                self.counters.inc("switchboard_store_errors_total", op="delete")
                log.warning("store_evict_failed", error=type(e).__name__, records=len(victims))
        return total, evicted

    async def _put_many(self, puts: list[tuple[str, bytes, list[str], list[str]]]) -> list[tuple[int, int]]:
        if self.cluster:  # (not batched: Store.put sends each alone)
            return [await self._put(*put) for put in puts]
        if self._wire is None:  # redis-py's connections (TLS, a credential provider)
            return _totals(await self._script_pooled(self._puts_command(puts)))
        return _totals(await self._script(self._puts_data(puts)))

    def _puts_command(self, puts: _Puts) -> list[bytes]:
        """The whole batch as one script (``_PUTS_LUA``), one command packed here: one write
        and one reply, whatever the batch holds (redis-py's packing of the same commands,
        one by one, cost more than the round trip)."""
        args: list[bytes] = [
            *self._puts_head,
            self._prefix_arg,
            repr(time.time()).encode(),
            b"%d" % self.ttl,
            b"%d" % self.max_total_bytes,
        ]
        for rid, blob, touch, item_ids in puts:
            args += (rid.encode(), blob, b"%d" % len(item_ids), *map(str.encode, item_ids))
            args += (b"%d" % len(touch), *map(str.encode, touch))
        return args

    def _puts_data(self, puts: _Puts) -> bytes:
        """``pack(self._puts_command(puts))``, written in one pass for the puts' own
        connection: the text of the arguments around each record's bytes, each length a
        character count.  In the server, building the list of arguments and then packing
        it took 23 µs a batch; this takes 14–15.  An id outside ASCII (a client's item id)
        goes through ``pack``, whose lengths count bytes."""
        n = len(self._puts_head) + 4 + sum(4 + len(touch) + len(items) for _, _, touch, items in puts)
        out: list[bytes] = []
        text = [
            f"*{n}\r\n",
            self._puts_head_resp,
            *_bulks((repr(time.time()), str(self.ttl), str(self.max_total_bytes))),
        ]
        for rid, blob, touch, item_ids in puts:
            text.append(f"${len(rid)}\r\n{rid}\r\n${len(blob)}\r\n")
            head = "".join(text)
            if not head.isascii():
                return _pack(self._puts_command(puts))
            out += (head.encode(), blob)
            text = ["\r\n", *_bulks((str(len(item_ids)), *item_ids, str(len(touch)), *touch))]
        tail = "".join(text)
        if not tail.isascii():
            return _pack(self._puts_command(puts))
        out.append(tail.encode())
        return b"".join(out)

    def _send_now(self) -> bool:
        if self._wire is None or self.cluster:
            return False
        batch, self._queued = self._queued, []
        data = self._puts_data([args for args, _ in batch])
        _ScriptCall(self._wire, data, functools.partial(self._replied, batch)).send()
        return True

    def _replied(self, batch: list[_Queued], got: Any) -> None:
        """A batch's script answered (``_ScriptCall``): its puts return, or each answers
        ``store: false``."""
        if isinstance(got, Exception):
            self._not_written(batch, got)
            return
        try:
            totals = _totals(got)
        except Exception as e:  # (not the script's reply)
            self._not_written(batch, e)
            return
        self._written(batch, totals)

    async def _script(self, data: bytes) -> Any:
        """The EVALSHA of ``_PUTS_LUA`` packed in ``data`` (``_puts_data``); its reply (an
        error reply raised).  On the puts' own connection (``redis_wire.Wire``: a connection
        the server closed meanwhile costs nothing, the batch goes again once on a new one;
        its script may so run twice, and each of its writes can be repeated).  A script the
        server lost (NOSCRIPT: it did not run) is loaded and sent again, in one write."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def done(got: Any) -> None:
            if not fut.done():  # (the caller's timeout may have cancelled it)
                fut.set_result(got)

        _ScriptCall(self._wire, data, done).send()
        got = await fut
        if isinstance(got, Exception):
            raise got
        return got

    async def _script_pooled(self, cmd: list[bytes]) -> Any:
        """``_script`` on redis-py's pool: a pooled connection the server closed costs one
        more try, and so does a NOSCRIPT (the script loaded first), each once.  A restart
        does both: the kept connection is gone, and the new one meets a server without the
        script."""
        from redis.exceptions import ConnectionError as Disconnected
        from redis.exceptions import NoScriptError

        reconnected = loaded = False
        while True:
            try:
                return await self.redis.execute_command(*cmd)
            except NoScriptError:
                if loaded:
                    raise
                loaded = True
                await self.redis.script_load(_PUTS_LUA)
            except Disconnected:
                if reconnected:
                    raise
                reconnected = True

    async def _put_cluster(
        self, rid: str, blob: bytes, touch: list[str], item_ids: list[str]
    ) -> tuple[int, int, list[bytes]]:
        """A put on a cluster: the writes spread over the nodes of their keys (one
        pipeline per node, at once), the bookkeeping in its own slot; then each node that
        took the record or its item index waits until a replica has them (WAIT), so that
        a primary killed right after loses none of it.  {total, evicted, the ids to evict}."""
        lists = await self.mget([self.prefix + "items:" + t for t in touch]) if touch else []
        written = [self.prefix + rid]
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(self.prefix + rid, blob, ex=self.ttl)
            if item_ids:
                written.append(self.prefix + "items:" + rid)
                pipe.set(self.prefix + "items:" + rid, "\n".join(item_ids), ex=self.ttl)
            for i in item_ids:
                written.append(self.prefix + "item:" + i)
                pipe.set(self.prefix + "item:" + i, rid, ex=self.ttl)
            for t, listed in zip(touch, lists):
                pipe.expire(self.prefix + t, self.ttl)
                if isinstance(listed, bytes) and listed:
                    pipe.expire(self.prefix + "items:" + t, self.ttl)
                    for i in listed.decode().split("\n"):
                        pipe.expire(self.prefix + "item:" + i, self.ttl)
            args: list[str | int] = [self.prefix, repr(time.time()), self.ttl, self.max_total_bytes, rid, len(blob)]
            args += touch
            pipe.eval(_TRIM_CLUSTER_LUA, len(self._sizes), *self._sizes, *args)
            trim = len(pipe)  # (the position of the script's answer: WAITs come after it)
            # WAIT on the connection that wrote (the same node's part of the pipeline); not on
            # a node whose replica did not answer the last time (none left: each WAIT would
            # only sit out its timeout), for _ALONE_SECONDS
            now = time.monotonic()
            nodes = {n.name: n for n in map(self.redis.get_node_from_key, written)}
            waits = [n for n in nodes.values() if self._alone.get(n.name, 0.0) <= now]
            ms = min(_WAIT_MS, int(self.timeout * 500))
            for node in waits:
                pipe.execute_command("WAIT", 1, ms, target_nodes=node)
            got = await pipe.execute()
        for node, acked in zip(waits, got[trim:]):
            if int(acked) < 1:
                self._alone[node.name] = now + _ALONE_SECONDS
        total, evicted, *victims = got[trim - 1]
        return int(total), int(evicted), victims

    async def _evict(self, victims: list[bytes]) -> None:
        """Delete evicted records (the bookkeeping forgot them already) and the item index
        entries that still name them, in their own slots.  One that fails here is no longer
        counted and goes at the end of its TTL."""
        ids = [v.decode() for v in victims]
        lists = await self.mget([self.prefix + "items:" + i for i in ids])
        async with self.redis.pipeline(transaction=False) as pipe:
            for rid, listed in zip(ids, lists):
                pipe.delete(self.prefix + rid)
                pipe.delete(self.prefix + "items:" + rid)
                if isinstance(listed, bytes) and listed:
                    for item in listed.decode().split("\n"):
                        pipe.eval(_DEL_IF_LUA, 1, self.prefix + "item:" + item, rid)
            await pipe.execute()

    async def _item_rids(self, item_ids: list[str]) -> list[str | None]:
        got = await self.mget([self.prefix + "item:" + i for i in item_ids])
        return [b.decode() if isinstance(b, bytes) else None for b in got]

    async def _get_many(self, ids: list[str]) -> list[bytes | None]:
        # MGET, even for one id: it answers nil for a key of another type under the prefix
        # (the size bookkeeping, usage streams) where GET would fail with WRONGTYPE
        got = await self.mget([self.prefix + i for i in ids])
        return [b if isinstance(b, bytes) else None for b in got]

    async def _delete(self, rid: str) -> int | None:
        listed = await self.redis.get(self.prefix + "items:" + rid)
        keys = [self.prefix + rid, self.prefix + "items:" + rid]
        if isinstance(listed, bytes) and listed:
            keys += [self.prefix + "item:" + i for i in listed.decode().split("\n")]
        async with self.redis.pipeline(transaction=False) as pipe:
            for k in keys:  # (one DEL per key: on a cluster each in its own slot)
                pipe.delete(k)
            pipe.eval(_FORGET_LUA, len(self._sizes), *self._sizes, rid)
            got = await pipe.execute()
        return int(got[-1])

    async def _ping(self) -> None:
        await self.redis.ping()

    async def aclose(self) -> None:
        if not self.cluster and self._wire is not None:
            self._wire.close()
        await self.redis.aclose()


def _pack(cmd: Sequence[Any]) -> bytes:
    """``redis_wire.pack`` (imported at first use: a store without Redis loads no Redis
    client)."""
    from app.redis_wire import pack as packed

    return packed(cmd)


def _bulks(args: Iterable[str]) -> list[str]:
    """Each of ``args`` as a RESP bulk string, its length in characters (``_puts_data``
    checks that the text is ASCII, where characters are bytes)."""
    return [f"${len(a)}\r\n{a}\r\n" for a in args]


def _totals(got: Any) -> list[tuple[int, int]]:
    """``_PUTS_LUA``'s reply: each put's total after it and how many it evicted."""
    return [(int(got[i]), int(got[i + 1])) for i in range(0, len(got), 2)]


class _ScriptCall:
    """The EVALSHA of ``_PUTS_LUA`` packed in ``command`` on the puts' own connection
    (``redis_wire.Wire``), with no task of its own: ``done`` gets the reply, or the error
    (an error reply, or the connection's), from the wire's callbacks.  A NOSCRIPT reply
    (the script did not run) sends the script and the command again, in one write, once.
    A command lost with a connection opened before it (a restart, an idle timeout) goes
    once more on a new one; its script may so run twice, and each of its writes can be
    repeated.  No reply within the store's timeout: the wire drops the connection and the
    call fails."""

    __slots__ = ("wire", "command", "done", "data", "n", "replies", "sent", "fresh", "again", "loaded")

    def __init__(self, wire: Any, command: bytes, done: Callable[[Any], None]) -> None:
        self.wire = wire
        self.command = command
        self.done = done
        self.data = command  # (what goes: with the script's load before it after a NOSCRIPT)
        self.n = 1
        self.replies: list[Any] = []
        self.sent = 0.0
        self.fresh = True
        self.again = True  # (one more try on a new connection left)
        self.loaded = False  # (the script sent with it, after a NOSCRIPT)

    def send(self) -> None:
        self.replies = []
        self.fresh = True
        self.wire.send(self)

    def landed(self) -> None:
        got = self.replies[-1]
        if isinstance(got, Exception) and str(got).startswith("NOSCRIPT") and not self.loaded:
            self.loaded = True
            self.data = _pack((b"SCRIPT", b"LOAD", _PUTS_LUA.encode())) + self.command
            self.n = 2
            self.send()
            return
        self.done(got)

    def failed(self, e: Exception) -> None:
        from redis.exceptions import ConnectionError as Disconnected

        if isinstance(e, Disconnected) and not self.fresh and self.again:
            self.again = False
            self.send()
            return
        self.done(e)


def _chunks(items: list[Any], n: int) -> Iterable[list[Any]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def open_store(cfg: StoreCfg, counters: Metrics | None = None) -> Store | None:
    """The configured backend (no I/O yet), or None when storing is off."""
    if not cfg.enabled:
        return None
    return RedisStore(cfg, counters) if cfg.backend == "redis" else SQLiteStore(cfg, counters)
