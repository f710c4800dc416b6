"""The response store's contract, run against both backends: SQLite in a temp dir and the
Redis on 127.0.0.1:6379 under a key prefix of its own (a missing Redis fails these tests)."""

from __future__ import annotations

import asyncio
import os
import uuid
import zlib
from typing import Any

import orjson
import pytest
import zstandard

from app import store as store_module
from app.metrics import Metrics
from app.store import Record, RecordTooLarge, RedisStore, SQLiteStore, Store, StoreUnavailable, _scope, open_store
from providers.config import StoreCfg

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture(params=["sqlite", "redis"])
async def store(request, tmp_path):
    prefix = f"switchboard-test:{uuid.uuid4().hex}:"
    cfg = StoreCfg(backend=request.param, path=str(tmp_path / "r.db"), url=REDIS_URL, key_prefix=prefix, ttl_seconds=60)
    s = open_store(cfg, Metrics())
    assert s is not None
    yield s
    if isinstance(s, RedisStore):
        keys = [k async for k in s.redis.scan_iter(match=prefix + "*")]
        if keys:
            await s.redis.delete(*keys)
    await s.aclose()


def rec(rid: str, owner: str = "alice", ancestors: list[str] | None = None, text: str = "hi") -> Record:
    return Record(
        id=rid,
        owner=owner,
        response={"id": rid, "object": "response", "status": "completed", "output": [{"type": "message", "t": text}]},
        input=[{"id": f"msg_{rid}", "type": "message", "role": "user", "content": text}],
        provider="p",
        upstream="chat",
        ancestors=ancestors or [],
    )


async def test_put_get_roundtrip(store: Store):
    r = rec("resp_1", text="héllo ☃")
    await store.put(r)
    got = await store.get("resp_1", "alice")
    assert got is not None
    assert got.response == r.response and got.input == r.input and got.owner == "alice"
    assert got.created_at > 0


async def test_unknown_and_other_owner(store: Store):
    await store.put(rec("resp_a"))
    assert await store.get("resp_missing", "alice") is None
    assert await store.get("resp_a", "bob") is None
    assert await store.chain("resp_a", "bob") is None
    assert await store.delete("resp_a", "bob") is False
    assert await store.get("resp_a", "alice") is not None  # bob's delete did nothing


async def test_chain_oldest_first_and_broken(store: Store):
    await store.put(rec("resp_c1", text="one"))
    await store.put(rec("resp_c2", ancestors=["resp_c1"], text="two"))
    await store.put(rec("resp_c3", ancestors=["resp_c1", "resp_c2"], text="three"))
    chain = await store.chain("resp_c3", "alice")
    assert [r.id for r in chain or []] == ["resp_c1", "resp_c2", "resp_c3"]
    assert await store.delete("resp_c2", "alice") is True
    assert await store.get("resp_c2", "alice") is None
    assert await store.chain("resp_c3", "alice") is None  # a gap: the whole chain is refused
    assert [r.id for r in await store.chain("resp_c1", "alice") or []] == ["resp_c1"]


async def test_ttl_expiry_and_renewal(store: Store):
    store.ttl = 1
    await store.put(rec("resp_t1"))
    await asyncio.sleep(0.6)
    await store.put(rec("resp_t2", ancestors=["resp_t1"]))  # renews resp_t1
    await asyncio.sleep(0.6)
    assert await store.get("resp_t1", "alice") is not None
    assert [r.id for r in await store.chain("resp_t2", "alice") or []] == ["resp_t1", "resp_t2"]
    await asyncio.sleep(1.2)
    assert await store.get("resp_t1", "alice") is None
    assert await store.get("resp_t2", "alice") is None


def rec_items(rid: str, owner: str = "alice", ancestors: list[str] | None = None) -> Record:
    r = rec(rid, owner, ancestors)
    r.response["output"] = [
        {"id": f"rs_{rid}", "type": "reasoning", "summary": []},
        {"id": f"fc_{rid}", "type": "function_call", "call_id": f"call_{rid}", "name": "f", "arguments": "{}"},
        {"type": "message", "role": "assistant", "content": []},  # no id: not indexed
    ]
    return r


async def test_items_by_id_across_records_and_owners(store: Store):
    await store.put(rec_items("resp_i1"))
    await store.put(rec_items("resp_i2", ancestors=["resp_i1"]))
    await store.put(rec_items("resp_b1", owner="bob"))
    got = await store.items(
        ["fc_resp_i1", "msg_resp_i2", "rs_resp_i2", "fc_resp_b1", "fc_unknown", "fc_resp_i1"], "alice"
    )
    assert {k: v.provider for k, v in got.items()} == dict.fromkeys(got, "p")
    assert {k: v.item for k, v in got.items()} == {
        "fc_resp_i1": {
            "id": "fc_resp_i1",
            "type": "function_call",
            "call_id": "call_resp_i1",
            "name": "f",
            "arguments": "{}",
        },
        "msg_resp_i2": {"id": "msg_resp_i2", "type": "message", "role": "user", "content": "hi"},
        "rs_resp_i2": {"id": "rs_resp_i2", "type": "reasoning", "summary": []},
    }  # bob's item is not alice's; an unknown id is absent
    assert await store.items([], "alice") == {}
    assert set(await store.items(["fc_resp_b1"], "bob")) == {"fc_resp_b1"}
    # a deleted record takes its items with it
    assert await store.delete("resp_i1", "alice") is True
    left = await store.items(["fc_resp_i1", "rs_resp_i2"], "alice")
    assert {k: v.item for k, v in left.items()} == {
        "rs_resp_i2": {"id": "rs_resp_i2", "type": "reasoning", "summary": []}
    }


async def test_items_expire_and_renew_with_their_record(store: Store):
    store.ttl = 1
    await store.put(rec_items("resp_e1"))
    await asyncio.sleep(0.6)
    await store.put(rec_items("resp_e2", ancestors=["resp_e1"]))  # renews resp_e1 and its items
    await asyncio.sleep(0.6)
    assert set(await store.items(["fc_resp_e1", "fc_resp_e2"], "alice")) == {"fc_resp_e1", "fc_resp_e2"}
    await asyncio.sleep(1.2)
    assert await store.items(["fc_resp_e1", "fc_resp_e2"], "alice") == {}


async def test_size_cap_and_compression(store: Store):
    store.max_bytes = 2048
    big = rec("resp_big", text="x" * 100_000)  # compresses well below the cap
    await store.put(big)
    assert len(big.encode()) < 2048
    assert len(orjson.loads(zstandard.ZstdDecompressor().decompress(big.encode()))["input"][0]["content"]) == 100_000
    noisy = rec("resp_noisy", text=os.urandom(4000).hex())  # random: does not compress
    with pytest.raises(RecordTooLarge):
        await store.put(noisy)
    assert await store.get("resp_noisy", "alice") is None
    assert store.counters.get("switchboard_store_errors_total", op="too_large") == 1


async def test_ping(store: Store):
    assert await store.ping() is True


async def test_sqlite_is_wal_and_lazy(tmp_path):
    path = tmp_path / "sub" / "r.db"
    s = SQLiteStore(StoreCfg(path=str(path)))
    assert await s.ping() and not path.exists()  # nothing stored, nothing created
    await s.put(rec("resp_w"))
    async with s._db.execute("PRAGMA journal_mode") as cur:
        assert (await cur.fetchone())[0] == "wal"
    await s.aclose()
    s2 = SQLiteStore(StoreCfg(path=str(path)))  # another process/worker sees it
    assert (await s2.get("resp_w", "alice")) is not None
    await s2.aclose()


async def test_unreachable_redis_is_unavailable_then_counted():
    m = Metrics()
    s = RedisStore(StoreCfg(backend="redis", url="redis://127.0.0.1:1/0", timeout_seconds=0.5), m)
    with pytest.raises(StoreUnavailable) as e:
        await s.get("resp_x", "alice")
    assert "resp_x" not in str(e.value)
    with pytest.raises(StoreUnavailable):
        await s.put(rec("resp_x"))
    assert await s.ping() is False
    assert s.healthy is False
    assert m.get("switchboard_store_errors_total", op="get") == 1
    assert m.get("switchboard_store_errors_total", op="put") == 1
    assert m.get("switchboard_store_errors_total", op="ping") == 1
    await s.aclose()


def test_disabled_store_is_none():
    assert open_store(StoreCfg(enabled=False)) is None
    assert isinstance(open_store(StoreCfg()), SQLiteStore)


# -- the total size cap (store.max_bytes) -------------------------------------------------


def _noisy(rid: str, ancestors: list[str] | None) -> Record:
    """A record of about 2.5 KB as stored (its JSON: under ``_COMPRESS_FROM``)."""
    r = rec_items(rid, ancestors=ancestors)
    r.input[0]["content"] = os.urandom(1000).hex()
    return r


async def settled(store: Store) -> None:
    """SQLite keeps a put in its journal and writes it to the file a few milliseconds later
    (the cap, the gauge and the file's rows follow then): once this returns, every put so
    far is in the file.  Redis writes it before the put returns."""
    if isinstance(store, SQLiteStore):
        await store.flush()


async def _sizes(store: Store, ids: list[str]) -> int:
    total = 0
    for i in ids:
        got = await store.get(i, "alice")
        assert got is not None, i
        total += len(got.encode())
    return total


async def test_total_cap_evicts_the_oldest_first(store: Store):
    one = len(_noisy("resp_probe", None).encode())
    store.max_total_bytes = int(one * 3.5)  # room for three
    ids = [f"resp_cap{i}" for i in range(10)]
    for i in ids:
        await store.put(_noisy(i, None))
    await settled(store)
    for i in ids[:7]:
        assert await store.get(i, "alice") is None, i  # evicted: as unknown
    kept = await _sizes(store, ids[7:])
    gauge = store.counters.get("switchboard_store_bytes")
    assert gauge == kept <= store.max_total_bytes
    assert store.counters.get("switchboard_store_evicted_total") == 7
    # an evicted record's items went with it; the kept ones' are there
    assert set(await store.items([f"fc_{ids[0]}", f"fc_{ids[9]}"], "alice")) == {f"fc_{ids[9]}"}
    # a delete lowers the total
    assert await store.delete(ids[9], "alice") is True
    assert store.counters.get("switchboard_store_bytes") == await _sizes(store, ids[7:9])


async def test_total_cap_keeps_a_continued_conversation(store: Store):
    """Oldest = least recently written or continued: a turn renews its ancestors, so the
    start of a live conversation outlives a newer record nobody continued."""
    one = len(_noisy("resp_probe", None).encode())
    store.max_total_bytes = int(one * 3.5)
    await store.put(_noisy("resp_a", None))
    await store.put(_noisy("resp_b", None))
    await store.put(_noisy("resp_c", ["resp_a"]))  # continues resp_a: renewed
    await store.put(_noisy("resp_d", None))  # over the cap: resp_b goes, not resp_a
    await settled(store)
    assert await store.get("resp_b", "alice") is None
    assert [r.id for r in await store.chain("resp_c", "alice") or []] == ["resp_a", "resp_c"]
    assert await store.get("resp_d", "alice") is not None


async def test_total_counts_a_record_put_again_once(store: Store):
    r = _noisy("resp_same", None)
    await store.put(r)
    await settled(store)
    first = store.counters.get("switchboard_store_bytes")
    await store.put(r)
    await settled(store)
    assert store.counters.get("switchboard_store_bytes") == first == len(r.encode())


async def test_a_record_larger_than_the_cap_is_kept_alone(store: Store):
    store.max_total_bytes = 1024
    await store.put(_noisy("resp_x1", None))
    await store.put(_noisy("resp_x2", None))
    await settled(store)
    assert await store.get("resp_x1", "alice") is None
    assert await store.get("resp_x2", "alice") is not None  # never the record just put


async def test_redis_forgets_records_their_ttl_removed():
    prefix = f"switchboard-test:{uuid.uuid4().hex}:"
    s = RedisStore(StoreCfg(backend="redis", url=REDIS_URL, key_prefix=prefix), Metrics())
    try:
        a, b = _noisy("resp_ta", None), _noisy("resp_tb", None)
        await s.put(a)
        # as if resp_ta's TTL had passed: its key gone, its last write long ago
        await s.redis.delete(prefix + _scope("alice") + "resp_ta")
        await s.redis.zadd(prefix + "meta:bytime", {_scope("alice") + "resp_ta": 1000.0})
        await s.put(b)
        assert s.counters.get("switchboard_store_bytes") == len(b.encode())
        assert await s.redis.zrange(prefix + "meta:bytime", 0, -1) == [(_scope("alice") + "resp_tb").encode()]
        # the bookkeeping's keys under the prefix answer as unknown ids, not as a failure
        assert await s.get("meta:sizes", "alice") is None
    finally:
        keys = [k async for k in s.redis.scan_iter(match=prefix + "*")]
        if keys:
            await s.redis.delete(*keys)
        await s.aclose()


async def test_sqlite_file_of_an_earlier_version_is_migrated(tmp_path):
    import sqlite3
    import time

    path = tmp_path / "old.db"
    old = rec("resp_old")
    old.created_at = time.time()
    blob = old.encode()
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE responses (id TEXT PRIMARY KEY, expires_at REAL NOT NULL, data BLOB NOT NULL)")
    con.execute("CREATE TABLE items (id TEXT PRIMARY KEY, rid TEXT NOT NULL, expires_at REAL NOT NULL)")
    con.execute("INSERT INTO responses VALUES (?, ?, ?)", ("resp_old", time.time() + 60, blob))
    con.commit()
    con.close()
    m = Metrics()
    s = SQLiteStore(StoreCfg(path=str(path)), m)
    try:
        assert await s.get("resp_old", "alice") is not None
        new = rec("resp_new")
        await s.put(new)
        await s.flush()
        assert m.get("switchboard_store_bytes") == len(blob) + len(new.encode())
        s.max_total_bytes = len(new.encode()) + 10
        await s.put(rec("resp_newer"))
        await s.flush()
        assert await s.get("resp_old", "alice") is None  # the oldest went first
    finally:
        await s.aclose()


async def test_sqlite_item_index_of_an_earlier_version_is_migrated(tmp_path):
    """A file whose item index was the ``items`` table (a row per item with its own expiry):
    opened, the table is kept as ``items_legacy`` with no rewrite of the records, its
    expired rows deleted; references to its items are found there; a record deleted takes
    its rows along; an opening that finds it empty drops it."""
    import sqlite3
    import time

    path = tmp_path / "old.db"
    now = time.time()
    kept, other = rec_items("resp_kept"), rec_items("resp_other")
    scope = _scope("alice")
    con = sqlite3.connect(path)
    con.execute(
        "CREATE TABLE responses (id TEXT PRIMARY KEY, expires_at REAL NOT NULL, data BLOB NOT NULL, "
        "size INTEGER NOT NULL DEFAULT 0)"
    )
    con.execute("CREATE TABLE items (id TEXT PRIMARY KEY, rid TEXT NOT NULL, expires_at REAL NOT NULL)")
    con.execute("CREATE INDEX items_rid ON items (rid)")
    for r in (kept, other):
        r.created_at = now
        blob = r.encode()
        con.execute("INSERT INTO responses VALUES (?, ?, ?, ?)", (scope + r.id, now + 60, blob, len(blob)))
        con.executemany(
            "INSERT INTO items VALUES (?, ?, ?)", [(scope + i, scope + r.id, now + 60) for i in r.item_ids()]
        )
    con.execute("INSERT INTO items VALUES (?, ?, ?)", (scope + "fc_gone", scope + "resp_gone", now - 1))  # expired
    con.commit()
    con.close()

    async def legacy(s: SQLiteStore) -> list[str]:
        db = await s.connection()
        return sorted(r[0][len(scope) :] for r in await db.execute_fetchall("SELECT id FROM items_legacy"))

    s = SQLiteStore(StoreCfg(path=str(path)))
    try:
        assert await legacy(s) == sorted([*kept.item_ids(), *other.item_ids()])  # fc_gone: expired, deleted
        db = await s.connection()
        assert await db.execute_fetchall("SELECT name FROM sqlite_master WHERE name = 'items'") == []
        assert set(await s.items(["fc_resp_kept", "rs_resp_other", "fc_gone"], "alice")) == {
            "fc_resp_kept",
            "rs_resp_other",
        }
        await s.put(rec_items("resp_new", ancestors=["resp_kept"]))  # new and old entries side by side
        assert set(await s.items(["fc_resp_new", "fc_resp_kept"], "alice")) == {"fc_resp_new", "fc_resp_kept"}
        assert await s.delete("resp_kept", "alice") is True
        assert await legacy(s) == sorted(other.item_ids())
        assert await s.items(["fc_resp_kept"], "alice") == {}
        assert await s.delete("resp_other", "alice") is True
        assert await legacy(s) == []
    finally:
        await s.aclose()
    s = SQLiteStore(StoreCfg(path=str(path)))  # opened again: the empty table goes
    try:
        db = await s.connection()
        assert await db.execute_fetchall("SELECT name FROM sqlite_master WHERE name LIKE '%legacy%'") == []
        assert set(await s.items(["fc_resp_new"], "alice")) == {"fc_resp_new"}
        assert await s.delete("resp_new", "alice") is True
    finally:
        await s.aclose()


async def test_sqlite_item_index_entries_leave_with_their_record(tmp_path):
    """``response_items`` holds no entry whose record is gone: the triggers delete a record's
    entries with it (delete, eviction, purge), and those a new version of the record no
    longer lists; an entry a later record took over stays when the earlier one goes."""
    s = SQLiteStore(StoreCfg(path=str(tmp_path / "r.db")))
    scope = _scope("alice")

    async def index() -> dict[str, str]:
        db = await s.connection()
        return {
            i[len(scope) :]: r[len(scope) :] for i, r in await db.execute_fetchall("SELECT id, rid FROM response_items")
        }

    try:
        await s.put(rec_items("resp_1"))
        await s.flush()  # (the index is the file's)
        assert await index() == {"msg_resp_1": "resp_1", "rs_resp_1": "resp_1", "fc_resp_1": "resp_1"}
        again = rec_items("resp_1")
        again.response["output"] = again.response["output"][:1]  # the function call is gone
        await s.put(again)
        await s.flush()  # (the index is the file's)
        assert await index() == {"msg_resp_1": "resp_1", "rs_resp_1": "resp_1"}
        later = rec_items("resp_2")
        later.input.append({"id": "msg_resp_1", "type": "message", "role": "user", "content": "hi"})
        await s.put(later)  # msg_resp_1 is resp_2's now
        await s.flush()  # (the index is the file's)
        assert await s.delete("resp_1", "alice") is True
        assert await index() == {
            "msg_resp_1": "resp_2",
            "msg_resp_2": "resp_2",
            "rs_resp_2": "resp_2",
            "fc_resp_2": "resp_2",
        }
        # eviction
        s.max_total_bytes = 1
        await s.put(rec_items("resp_3"))
        await s.flush()  # (the index is the file's)
        assert set((await index()).values()) == {"resp_3"}
        # purge (every _PURGE_EVERY puts: here, the next one)
        s.max_total_bytes = 10**9
        s.ttl = 0
        await s.put(rec_items("resp_4"))
        await s.flush()  # (the index is the file's)
        assert s._writer is not None
        s.ttl = 60
        s._writer._puts = store_module._PURGE_EVERY - 1
        await s.put(rec("resp_5"))
        await s.flush()  # (the index is the file's)
        assert set((await index()).values()) == {"resp_3", "resp_5"}  # resp_4 expired, purged
    finally:
        await s.aclose()


async def test_sqlite_file_is_the_owners_only(tmp_path):
    """Stored prompts and answers: 0600, as secret.key and the capture file (the umask of
    the test process would give 0644)."""
    path = tmp_path / "r.db"
    s = SQLiteStore(StoreCfg(path=str(path)))
    try:
        await s.put(rec("resp_p"))
        assert path.stat().st_mode & 0o777 == 0o600
        wal = tmp_path / "r.db-wal"
        assert not wal.exists() or wal.stat().st_mode & 0o777 == 0o600
    finally:
        await s.aclose()


async def test_an_upstream_that_repeats_an_id_keeps_each_keys_record(store: Store):
    """The id is the upstream's: two keys' turns that got one id are two records; neither
    key reads, continues, references or deletes the other's."""
    await store.put(rec_items("resp_same", owner="alice"))
    bob = rec_items("resp_same", owner="bob")
    bob.response["output"][1]["arguments"] = '{"bob":1}'
    await store.put(bob)
    mine, theirs = await store.get("resp_same", "alice"), await store.get("resp_same", "bob")
    assert mine is not None and theirs is not None
    assert mine.response["output"][1]["arguments"] == "{}"
    assert theirs.response["output"][1]["arguments"] == '{"bob":1}'
    assert (await store.items(["fc_resp_same"], "alice"))["fc_resp_same"].item["arguments"] == "{}"
    await store.put(rec("resp_next", owner="alice", ancestors=["resp_same"]))
    assert [r.owner for r in await store.chain("resp_next", "alice") or []] == ["alice", "alice"]
    assert await store.chain("resp_next", "bob") is None
    assert await store.delete("resp_same", "bob") is True
    assert await store.get("resp_same", "bob") is None
    assert await store.get("resp_same", "alice") is not None


async def test_a_record_an_earlier_version_compressed_with_zlib_is_read(store: Store):
    """Records were zlib streams before zstd: one of them is read, owner-checked and continued."""
    old = rec_items("resp_zlib")
    scoped = _scope("alice") + "resp_zlib"
    blob = zlib.compress(orjson.dumps(old), 6)
    await store._put(scoped, blob, [], [_scope("alice") + i for i in old.item_ids()])
    got = await store.get("resp_zlib", "alice")
    assert got is not None and got.response == old.response and got.input == old.input
    assert await store.get("resp_zlib", "bob") is None
    assert set(await store.items(["fc_resp_zlib"], "alice")) == {"fc_resp_zlib"}
    await store.put(rec("resp_zlib_next", ancestors=["resp_zlib"]))
    chain = await store.chain("resp_zlib_next", "alice")
    assert [r.id for r in chain or []] == ["resp_zlib", "resp_zlib_next"]
    assert chain is not None and chain[1].response == rec("resp_zlib_next").response


async def test_a_small_record_is_kept_as_its_json_a_larger_one_compressed(store: Store):
    """Under ``_COMPRESS_FROM`` bytes of JSON a record is stored as it is; from there on as a
    zstd frame; both read back whole, and ``max_record_bytes`` counts what is stored."""
    from app import store as store_mod

    small, large = rec("resp_small", text="hi"), rec("resp_large", text="word " * 1000)
    assert len(orjson.dumps(small)) < store_mod._COMPRESS_FROM <= len(orjson.dumps(large))
    assert small.encode() == orjson.dumps(small)
    assert large.encode()[:4] == b"\x28\xb5\x2f\xfd" and len(large.encode()) < len(orjson.dumps(large)) // 4
    for r in (small, large):
        await store.put(r)
        got = await store.get(r.id, "alice")
        assert got is not None and got.response == r.response and got.input == r.input
    store.max_bytes = len(small.encode()) - 1
    with pytest.raises(RecordTooLarge):
        await store.put(rec("resp_small2", text="hi"))


async def test_a_record_stored_under_its_bare_id_is_still_found(store: Store):
    """Records written before keys were scoped: found, owner-checked, continued, deleted."""
    old = rec_items("resp_legacy")
    await store._put("resp_legacy", old.encode(), [], old.item_ids())
    assert await store.get("resp_legacy", "alice") is not None
    assert await store.get("resp_legacy", "bob") is None
    assert set(await store.items(["fc_resp_legacy"], "alice")) == {"fc_resp_legacy"}
    assert await store.items(["fc_resp_legacy"], "bob") == {}
    await store.put(rec("resp_after", ancestors=["resp_legacy"]))
    assert [r.id for r in await store.chain("resp_after", "alice") or []] == ["resp_legacy", "resp_after"]
    assert await store.delete("resp_legacy", "alice") is True
    assert await store.get("resp_legacy", "alice") is None


async def test_puts_of_one_loop_turn_are_written_together(store: Store):
    """Concurrent puts go out in one batch; each is readable once its put returned, with its
    own answer, and a chain put in the same batch as its start is whole."""
    calls: list[int] = []
    if isinstance(store, RedisStore):  # (a batch is one command of the script, sent from a callback)
        command = store._puts_data

        def packed(puts: Any) -> Any:
            calls.append(len(puts))
            return command(puts)

        store._puts_data = packed  # type: ignore[method-assign]
    first = rec("resp_b0")
    await store.put(first)
    later = [rec(f"resp_b{i}", ancestors=["resp_b0"]) for i in range(1, 9)]
    await asyncio.gather(*(store.put(r) for r in later))
    if isinstance(store, RedisStore):
        assert calls == [1, 8]
    else:  # (kept in the journal at once; the writer's thread applies what came together)
        assert isinstance(store, SQLiteStore) and store._writer is not None
        await store.flush()
        assert 1 <= store._writer.batches <= 2
    for r in [first, *later]:
        got = await store.get(r.id, "alice")
        assert got is not None and got.response == r.response
    chain = await store.chain("resp_b5", "alice")
    assert chain is not None and [c.id for c in chain] == ["resp_b0", "resp_b5"]


async def test_sqlite_batch_is_one_transaction_tried_again_until_the_file_takes_it(tmp_path):
    """The writer's thread writes a batch in one transaction: a statement that fails rolls
    the whole batch back, counts ``op="write"``, and the batch is tried again until the file
    takes it.  The puts returned at once (the client was told they are stored): meanwhile
    they are read from the journal's memory, and none is lost."""
    import sqlite3

    path = tmp_path / "r.db"
    m = Metrics()
    s = SQLiteStore(StoreCfg(path=str(path)), m)
    try:
        await s.put(rec("resp_first"))
        await s.flush()
        con = sqlite3.connect(path)
        con.execute(
            "CREATE TRIGGER boom BEFORE INSERT ON responses WHEN NEW.id LIKE '%boom%' BEGIN SELECT RAISE(ABORT, 'no'); END"
        )
        con.commit()
        batch = [rec("resp_ok1"), rec("resp_boom"), rec("resp_ok2")]
        await asyncio.gather(*(s.put(r) for r in batch))
        for _ in range(200):
            if m.get("switchboard_store_errors_total", op="write") >= 2:
                break
            await asyncio.sleep(0.01)
        assert m.get("switchboard_store_errors_total", op="write") >= 2  # (tried, and again)
        assert m.get("switchboard_store_errors_total", op="put") == 0
        assert not s.healthy
        in_file = {r[0][len(_scope("alice")) :] for r in con.execute("SELECT id FROM responses")}
        assert in_file == {"resp_first"}  # rolled back together
        for r in batch:
            got = await s.get(r.id, "alice")  # (from memory)
            assert got is not None and got.response == r.response
        con.execute("DROP TRIGGER boom")
        con.commit()
        await asyncio.wait_for(s.flush(), 5)
        in_file = {r[0][len(_scope("alice")) :] for r in con.execute("SELECT id FROM responses")}
        assert in_file == {"resp_first", "resp_ok1", "resp_boom", "resp_ok2"}
        con.close()
        assert s.healthy
        assert m.get("switchboard_store_bytes") == await _sizes(s, ["resp_first", *[r.id for r in batch]])
    finally:
        await s.aclose()


async def test_sqlite_put_returns_while_another_connection_holds_the_file(tmp_path):
    """A put meets the file's write lock held by another connection (another worker's
    transaction): the put returns at once and is readable at once; the writer's thread
    waits for the lock and writes it then.  The loop never waits for the file."""
    import sqlite3

    path = tmp_path / "r.db"
    s = SQLiteStore(StoreCfg(path=str(path)))
    try:
        await s.put(rec("resp_first"))
        await s.flush()
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # the write lock, held
        await asyncio.wait_for(asyncio.gather(*(s.put(rec(f"resp_busy{i}")) for i in range(3))), 1)
        flushed = asyncio.create_task(s.flush())
        await asyncio.sleep(0.3)  # (the loop ran meanwhile: nothing blocked it)
        assert not flushed.done()
        for i in range(3):
            assert await s.get(f"resp_busy{i}", "alice") is not None
        other.execute("COMMIT")
        await asyncio.wait_for(flushed, 5)
        rows = other.execute("SELECT count(*) FROM responses").fetchone()[0]
        other.close()
        assert rows == 4
    finally:
        await s.aclose()


async def test_sqlite_writer_closed_twice_returns(tmp_path):
    """The writer's thread stops at the first close, after writing what was kept; a second
    close (the store's aclose after a drain's) waits for the first; the journal's files go
    with a writer that wrote everything."""
    s = SQLiteStore(StoreCfg(path=str(tmp_path / "r.db")))
    try:
        await s.put(rec("resp_0"))
        writer = s._writer
        assert writer is not None
        thread = writer._thread
        await asyncio.wait_for(asyncio.gather(writer.close(), writer.close()), 5)
        thread.join(5)
        assert not thread.is_alive() and not writer.alive()
        assert os.listdir(tmp_path / "r.db-puts") == []
        await asyncio.wait_for(writer.close(), 5)
        await s.put(rec("resp_1"))  # (a new writer)
        assert await s.get("resp_0", "alice") is not None
        assert await s.get("resp_1", "alice") is not None
    finally:
        await asyncio.wait_for(s.aclose(), 5)
    assert os.listdir(tmp_path / "r.db-puts") == []


async def test_sqlite_puts_of_another_worker_are_read_before_they_are_in_the_file(tmp_path, monkeypatch):
    """Two workers on one file: a put of one is read by the other at once (from the first's
    journal: here its writer gathers for 30 s), items and chains included; a delete by the
    other waits until the put is in the file, then deletes it."""
    monkeypatch.setattr(store_module, "_APPLY_DELAY", 30.0)
    path = str(tmp_path / "r.db")
    a, b = SQLiteStore(StoreCfg(path=path)), SQLiteStore(StoreCfg(path=path))
    try:
        await a.put(rec_items("resp_w1"))
        await a.put(rec_items("resp_w2", ancestors=["resp_w1"]))
        await b.put(rec("resp_b"))  # (b has a journal of its own)
        got = await b.get("resp_w2", "alice")
        assert got is not None and got.ancestors == ["resp_w1"]
        assert [r.id for r in await b.chain("resp_w2", "alice") or []] == ["resp_w1", "resp_w2"]
        assert set(await b.items(["fc_resp_w1", "msg_resp_w2"], "alice")) == {"fc_resp_w1", "msg_resp_w2"}
        assert await b.get("resp_w2", "bob") is None  # (another key's: as unknown)
        deleting = asyncio.create_task(b.delete("resp_w1", "alice"))
        await asyncio.sleep(0.2)
        assert not deleting.done()  # (a's put is not in the file yet)
        await a.flush()
        assert await asyncio.wait_for(deleting, 5) is True
        assert await a.get("resp_w1", "alice") is None
        assert await b.get("resp_w1", "alice") is None
        assert await a.get("resp_w2", "alice") is not None
    finally:
        await a.aclose()
        await b.aclose()


async def test_sqlite_delete_of_a_put_not_yet_in_the_file(tmp_path, monkeypatch):
    """A record deleted right after its put: the put is written first, then deleted, so it
    never comes back."""
    monkeypatch.setattr(store_module, "_APPLY_DELAY", 30.0)
    s = SQLiteStore(StoreCfg(path=str(tmp_path / "r.db")))
    try:
        await s.put(rec_items("resp_d1"))
        assert await asyncio.wait_for(s.delete("resp_d1", "alice"), 5) is True
        assert await s.get("resp_d1", "alice") is None
        assert await s.items(["fc_resp_d1"], "alice") == {}
        await s.flush()
        assert await s.get("resp_d1", "alice") is None
    finally:
        await s.aclose()


_CRASH = """
import asyncio, os, sys
from app.store import SQLiteStore
from providers.config import StoreCfg
sys.path.insert(0, os.path.dirname(sys.argv[2]))
from test_store import rec_items

async def main():
    s = SQLiteStore(StoreCfg(path=sys.argv[1]))
    for i in range(5):
        await s.put(rec_items(f"resp_c{i}", ancestors=[f"resp_c{j}" for j in range(i)]))
    print("kept", flush=True)
    os._exit(0)  # (no close: as a process killed before its writer wrote them)

asyncio.run(main())
"""


async def test_sqlite_puts_of_a_process_that_died_are_not_lost(tmp_path, monkeypatch):
    """A process kept puts in its journal and died before its writer wrote them: another
    process reads them from that journal at once, and its writer applies them to the file
    (the dead process's files then go)."""
    import subprocess
    import sys

    path = str(tmp_path / "r.db")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    monkeypatch.setattr(store_module, "_APPLY_DELAY", 30.0)
    script = tmp_path / "crash.py"
    script.write_text("import app.store as m\nm._APPLY_DELAY = 30.0\n" + _CRASH)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(script), path, __file__, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert stdout.strip() == b"kept", stderr.decode()[-2000:]
    assert sorted(os.listdir(tmp_path / "r.db-puts"))  # (its files stayed)
    s = SQLiteStore(StoreCfg(path=path))
    try:
        chain = await s.chain("resp_c4", "alice")
        assert chain is not None and [r.id for r in chain] == [f"resp_c{i}" for i in range(5)]
        assert set(await s.items(["fc_resp_c2"], "alice")) == {"fc_resp_c2"}
        await s.put(rec("resp_after"))  # (its writer starts: it applies the dead one's puts)
        for _ in range(500):
            if len(os.listdir(tmp_path / "r.db-puts")) == 2:  # (its own two files only)
                break
            await asyncio.sleep(0.01)
        db = await s.connection()
        rows = {r[0][len(_scope("alice")) :] for r in await db.execute_fetchall("SELECT id FROM responses")}
        assert {f"resp_c{i}" for i in range(5)} <= rows
    finally:
        await s.aclose()


async def test_sqlite_in_memory_store_keeps_its_records(tmp_path):
    """``path: ":memory:"``: one connection's database, so its puts go through that connection."""
    s = SQLiteStore(StoreCfg(path=":memory:"))
    try:
        s.max_total_bytes = int(len(_noisy("resp_probe", None).encode()) * 1.5)
        await s.put(_noisy("resp_m1", None))
        await s.put(_noisy("resp_m2", ["resp_m1"]))
        await asyncio.gather(*(s.put(rec(f"resp_m{i}")) for i in range(3, 6)))
        assert await s.get("resp_m1", "alice") is None  # evicted under the cap
        assert await s.get("resp_m5", "alice") is not None
        assert await s.chain("resp_m2", "alice") is None  # its start is gone
    finally:
        await s.aclose()


async def test_redis_put_after_its_connection_was_closed_is_stored():
    """Puts keep one connection (app/redis_wire.py); one the server closed meanwhile (a
    restart, a timeout of idle clients) costs no put: the next put goes on a new connection."""
    prefix = f"switchboard-test:{uuid.uuid4().hex}:"
    s = RedisStore(StoreCfg(backend="redis", url=REDIS_URL, key_prefix=prefix, ttl_seconds=60), Metrics())
    try:
        await s.put(rec("resp_k1"))
        assert s._wire is not None and s._wire.connected
        (cid,) = await s._wire.call([("CLIENT", "ID")])
        assert await s.redis.client_kill_filter(_id=cid) == 1
        await s.put(rec("resp_k2", ancestors=["resp_k1"]))
        assert [r.id for r in await s.chain("resp_k2", "alice") or []] == ["resp_k1", "resp_k2"]
        assert s.counters.get("switchboard_store_errors_total", op="put") == 0
    finally:
        keys = [k async for k in s.redis.scan_iter(match=prefix + "*")]
        if keys:
            await s.redis.delete(*keys)
        await s.aclose()


async def test_sqlite_writer_that_dies_leaves_its_journal_to_the_next(tmp_path, monkeypatch):
    """The writer's thread meets an error nobody expects (here: emptying a journal file
    fails after the commit): it stops and leaves its journal's files, since it did not
    close as asked.  The next put starts a new writer, which applies them again (a put
    written twice is the same record) and removes them; nothing is lost."""
    from app import journal

    cleared = journal.Journal.clear

    def broken(self: journal.Journal, i: int) -> None:
        monkeypatch.setattr(journal.Journal, "clear", cleared)
        raise OSError("no")

    s = SQLiteStore(StoreCfg(path=str(tmp_path / "r.db")))
    try:
        await s.put(rec("resp_k0"))
        first = s._writer
        assert first is not None
        monkeypatch.setattr(journal.Journal, "clear", broken)
        await s.put(rec("resp_k1"))
        first._thread.join(5)
        assert not first._thread.is_alive()
        assert len(os.listdir(tmp_path / "r.db-puts")) == 2  # (left by the dead writer)
        await s.put(rec("resp_k2"))  # (a new writer: it takes the dead one's files)
        await s.flush()
        for _ in range(500):
            if len(os.listdir(tmp_path / "r.db-puts")) == 2:
                break
            await asyncio.sleep(0.01)
        assert s._writer is not first
        names = os.listdir(tmp_path / "r.db-puts")
        assert len(names) == 2 and all(n.startswith(s._writer.journal.token) for n in names)
        for i in range(3):
            assert await s.get(f"resp_k{i}", "alice") is not None
    finally:
        await s.aclose()
