"""app/usage.py: usage records written in batches to the store's backend and read back, on
both backends (SQLite in a temp dir, the Redis on 127.0.0.1:6379 under a key prefix of its
own), retention, the buffer's bound, write failures, the store off, the aggregates."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from app import usage
from app.config import parse_config
from app.metrics import Metrics
from app.store import RedisStore, SQLiteStore, open_store
from app.usage import UsageLog, UsageOff, UsageRecord, UsageUnavailable, aggregate, parse_when, read_usage, table

REDIS_URL = "redis://127.0.0.1:6379/0"
DAY = 86400


def config(backend: str = "sqlite", path: str = ":memory:", prefix: str = "x:", **extra: Any) -> Any:
    data: dict[str, Any] = {
        "providers": [{"name": "demo", "profile": "demo"}],
        "models": [{"name": "demo", "provider": "demo"}],
        "store": {"backend": backend, "path": path, "url": REDIS_URL, "key_prefix": prefix, **extra.pop("store", {})},
        **extra,
    }
    return parse_config(data, "<test>")


async def _clean(store: Any, prefix: str) -> None:
    if isinstance(store, RedisStore):
        keys = [k async for k in store.redis.scan_iter(match=prefix + "*")]
        if keys:
            await store.redis.delete(*keys)
    if store is not None:
        await store.aclose()


@pytest.fixture(params=["sqlite", "redis"])
async def made(request, tmp_path):
    """(the config, its store, the UsageLog, its metrics) on each backend."""
    prefix = f"switchboard-test:{uuid.uuid4().hex}:"
    cfg = config(request.param, str(tmp_path / "r.db"), prefix)
    m = Metrics()
    store = open_store(cfg.store, m)
    log = UsageLog(cfg, store, m)
    yield cfg, store, log, m
    await log.aclose()
    await _clean(store, prefix)


def rec(ts: float, key: str = "alice", model: str = "demo", **kw: Any) -> UsageRecord:
    base: dict[str, Any] = dict(
        provider="demo",
        input=100,
        output=20,
        cache_read=40,
        cache_write=0,
        reasoning=5,
        cost_micros=1234,
        outcome="completed",
        status=200,
        duration_ms=812.4,
        request_id=f"req_{uuid.uuid4().hex}",
    )
    base.update(kw)
    return UsageRecord(ts=ts, key=key, model=model, **base)


async def test_record_flush_query_aggregate(made):
    _, _, log, m = made
    now = time.time()
    yesterday = now - DAY
    recs = [
        rec(yesterday, "alice", "demo"),
        rec(now - 30, "alice", "gpt", input=10, output=1, cache_read=0, reasoning=0, cost_micros=500_000),
        rec(now - 20, "bob", "demo", outcome="failed", status=502, estimated=True),
        rec(now - 10, "bob", "demo", outcome="client_cancel", status=200),
        rec(now - 5, "carol", "gpt", outcome="error", status=429, input=0, output=0, cost_micros=0),
    ]
    for r in reversed(recs):  # written in any order: read back oldest first
        log.write(r)
    assert len(log.pending) == 5
    assert await log.query(now - 3 * DAY) == []  # nothing before the write
    assert await log.flush() is True
    assert not log.pending
    assert m.get("switchboard_usage_records_total") == 5
    got = await log.query(now - 3 * DAY)
    assert got == recs  # every field as recorded (the estimated flag, the float duration)
    assert await log.query(now - 25) == recs[2:]
    assert await log.query(now - 3 * DAY, now - 15) == recs[:3]
    assert await log.query(now + 1) == []

    by_key = aggregate(got, "key")
    assert [r["key"] for r in by_key] == ["alice", "bob", "carol"]
    assert by_key[0] == {
        "key": "alice",
        "requests": 2,
        "input": 110,
        "output": 21,
        "cache_read": 40,
        "cache_write": 0,
        "reasoning": 5,
        "cost_usd": 0.501234,
        "errors": 0,
        "cache_hit": round(40 / 110, 4),
        "saved_usd": 0.0,
    }
    assert by_key[1]["errors"] == 1 and by_key[2]["errors"] == 1  # failed, error (not client_cancel)
    by_model = aggregate(got, "model")
    assert [(r["model"], r["requests"]) for r in by_model] == [("demo", 3), ("gpt", 2)]
    by_day = aggregate(got, "day")
    days = [time.strftime("%Y-%m-%d", time.gmtime(t)) for t in (yesterday, now)]
    assert [r["day"] for r in by_day] == sorted(set(days))
    assert sum(r["requests"] for r in by_day) == 5


async def test_flusher_writes_every_second_and_at_a_full_batch(made, monkeypatch):
    _, _, log, m = made
    await log.start()
    now = time.time()
    log.write(rec(now))
    await asyncio.sleep(usage.FLUSH_SECONDS * 1.6)
    assert m.get("switchboard_usage_records_total") == 1  # within the flush interval
    # the timer set far off (the wait under way lapses first): only the full batch can wake
    # the flusher before it, however slow the machine is to write the batch
    interval = usage.FLUSH_SECONDS
    monkeypatch.setattr(usage, "FLUSH_SECONDS", 60.0)
    await asyncio.sleep(interval * 1.2)
    started = time.monotonic()
    for i in range(usage.BATCH):
        log.write(rec(now + i * 0.001))
    while m.get("switchboard_usage_records_total") < 1 + usage.BATCH:
        await asyncio.sleep(0.02)
        assert time.monotonic() - started < 30  # woken by the batch, not the timer
    for i in range(3):
        log.write(rec(now + 1 + i))
    await log.aclose()  # writes what is left
    assert len(await log.query(now - 1)) == 1 + usage.BATCH + 3
    assert m.get("switchboard_usage_dropped_total") == 0


async def test_sqlite_retention_deletes_old_rows_at_most_hourly(tmp_path):
    cfg = config("sqlite", str(tmp_path / "r.db"), usage={"retention_days": 7})
    store = open_store(cfg.store)
    assert isinstance(store, SQLiteStore)
    log = UsageLog(cfg, store)
    now = time.time()

    async def rows() -> int:
        db = await store.connection()
        async with db.execute("SELECT COUNT(*) FROM usage") as cur:
            return (await cur.fetchone())[0]

    try:
        log.write(rec(now - 30 * DAY))
        log.write(rec(now))
        await log.flush()  # the first write deletes what is past the retention
        assert await rows() == 1
        log.write(rec(now - 8 * DAY))
        await log.flush()  # within the hour: not deleted yet, but no query sees it
        assert await rows() == 2
        assert [r.ts for r in await log.query(now - 30 * DAY)] == [now]
        assert isinstance(log.backend, usage._SQLiteBackend)
        log.backend._purged -= usage._PURGE_SECONDS  # the hour passes
        log.write(rec(now + 1))
        await log.flush()
        assert await rows() == 2
        async with (await store.connection()).execute("SELECT MIN(ts) FROM usage") as cur:
            assert (await cur.fetchone())[0] == now
    finally:
        await store.aclose()


async def test_redis_days_expire_after_the_retention():
    prefix = f"switchboard-test:{uuid.uuid4().hex}:"
    cfg = config("redis", prefix=prefix, usage={"retention_days": 7})
    store = open_store(cfg.store)
    assert isinstance(store, RedisStore)
    log = UsageLog(cfg, store)
    now = time.time()
    try:
        log.write(rec(now - 30 * DAY))  # its day ended long ago: gone at once
        log.write(rec(now))
        await log.flush()
        today = prefix + "usage:" + time.strftime("%Y%m%d", time.gmtime(now))
        old = prefix + "usage:" + time.strftime("%Y%m%d", time.gmtime(now - 30 * DAY))
        assert await store.redis.exists(old) == 0
        assert await store.redis.xlen(today) == 1
        ttl = await store.redis.ttl(today)
        # the end of today + 7 days: between 7 and 8 days from now
        assert 7 * DAY - 5 <= ttl <= 8 * DAY
        assert [r.ts for r in await log.query(now - 30 * DAY)] == [now]
        fields = await store.redis.xrange(today)
        assert set(fields[0][1]) == {f.encode() for f in usage._NAMES}  # one flat entry per record
    finally:
        await log.aclose()
        await _clean(store, prefix)


async def test_the_buffer_is_bounded_and_drops_the_oldest(tmp_path):
    cfg = config("sqlite", str(tmp_path / "r.db"))
    m = Metrics()
    store = open_store(cfg.store, m)
    log = UsageLog(cfg, store, m)
    now = time.time()
    try:
        for i in range(usage.MAX_PENDING + 5):
            log.write(rec(now + i * 0.0001, request_id=f"req_{i}"))
        assert len(log.pending) == usage.MAX_PENDING
        assert m.get("switchboard_usage_dropped_total") == 5
        await log.flush()
        got = await log.query(now - 1)
        assert len(got) == usage.MAX_PENDING
        assert got[0].request_id == "req_5"  # the five oldest were dropped
    finally:
        await log.aclose()
        assert store is not None
        await store.aclose()


async def test_a_failed_write_keeps_the_batch_and_never_raises(tmp_path, monkeypatch):
    cfg = config("sqlite", str(tmp_path / "r.db"))
    m = Metrics()
    store = open_store(cfg.store, m)
    log = UsageLog(cfg, store, m)
    assert log.backend is not None
    real = log.backend.write
    calls = 0

    async def failing_once(batch: list[UsageRecord], now: float) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OSError("disk on fire")
        await real(batch, now)

    monkeypatch.setattr(log.backend, "write", failing_once)
    now = time.time()
    try:
        recs = [rec(now + i) for i in range(3)]
        for r in recs:
            log.write(r)
        assert await log.flush() is False
        assert list(log.pending) == recs  # back at the front, in order
        assert m.get("switchboard_usage_write_errors_total") == 1
        log.write(rec(now + 10))
        assert await log.flush() is True
        assert [r.ts for r in await log.query(now - 1)] == [now, now + 1, now + 2, now + 10]
    finally:
        await log.aclose()
        assert store is not None
        await store.aclose()


async def test_an_unreachable_redis_loses_records_only_at_shutdown():
    cfg = config("redis", store={"url": "redis://127.0.0.1:1/0", "timeout_seconds": 0.3})
    m = Metrics()
    store = open_store(cfg.store, m)
    log = UsageLog(cfg, store, m)
    try:
        for i in range(3):
            log.write(rec(time.time() + i))  # never raises, never waits
        assert await log.flush() is False
        assert len(log.pending) == 3
        assert m.get("switchboard_usage_write_errors_total") == 1
        with pytest.raises(UsageUnavailable, match="redis"):
            await log.query(0)
        await log.aclose()  # one more try, then what is left is counted as lost
        assert not log.pending
        assert m.get("switchboard_usage_dropped_total") == 3
    finally:
        assert store is not None
        await store.aclose()


async def test_with_the_store_off_nothing_is_kept_and_query_says_so():
    cfg = config(store={"enabled": False})
    store = open_store(cfg.store)
    assert store is None
    log = UsageLog(cfg, store)
    await log.start()
    log.write(rec(time.time()))
    assert not log.enabled and not log.pending
    with pytest.raises(UsageOff, match=r"store\.enabled: false") as e:
        await log.query(0)
    assert e.value.status == 404
    await log.aclose()
    with pytest.raises(UsageOff):
        await read_usage(cfg, 0)


async def test_usage_disabled_records_nothing_but_reads(tmp_path):
    path = str(tmp_path / "r.db")
    on = config("sqlite", path)
    store = open_store(on.store)
    first = UsageLog(on, store)
    first.write(rec(time.time()))
    await first.flush()
    off = UsageLog(config("sqlite", path, usage={"enabled": False}), store)
    off.write(rec(time.time()))
    assert not off.pending
    assert len(await off.query(0)) == 1
    assert store is not None
    await store.aclose()


async def test_read_usage_from_the_config_without_creating_a_file(tmp_path):
    path = tmp_path / "none" / "r.db"
    assert await read_usage(config("sqlite", str(path)), 0) == []
    assert not path.parent.exists()


def test_parse_when():
    now = 1_750_000_000.0
    assert parse_when("7d", now) == now - 7 * DAY
    assert parse_when("24h", now) == now - DAY
    assert parse_when("2025-06-01", now) == 1748736000.0
    assert parse_when("2025-06-01", now, end=True) == 1748736000.0 + DAY  # an until date includes its day
    assert parse_when("2025-06-01T12:00:00Z", now) == 1748736000.0 + 12 * 3600
    assert parse_when("2025-06-01T12:00:00", now) == 1748736000.0 + 12 * 3600  # UTC unless it says
    for bad in ("yesterday", "7 days", "-3d", "2025-13-01", ""):
        with pytest.raises(ValueError, match="is not a date"):
            parse_when(bad, now)


def test_aggregate_refuses_an_unknown_group_and_table_aligns():
    with pytest.raises(ValueError):
        aggregate([], "provider")
    rows = aggregate([rec(0, "alice"), rec(0, "a-much-longer-name", cost_micros=2_500_000)], "key")
    text = table(rows, "key")
    lines = text.splitlines()
    assert lines[0].split() == [
        "KEY",
        "REQUESTS",
        "INPUT",
        "OUTPUT",
        "CACHE_READ",
        "CACHE_WRITE",
        "REASONING",
        "COST_USD",
        "ERRORS",
        "CACHE_HIT",
        "SAVED_USD",
    ]
    assert lines[1].split()[0] == "a-much-longer-name" and lines[1].split()[7] == "2.5000"
    assert lines[-1].split() == ["total", "2", "200", "40", "80", "0", "10", "2.5012", "0", "40.0%", "0.0000"]
    assert len({len(line) for line in lines if not line.startswith("-")}) == 1  # aligned
    assert table([], "day").splitlines()[-1].split()[0] == "total"


def test_saved_micros_is_the_input_price_less_what_the_cache_cost() -> None:
    from app.limits import saved_micros
    from providers.config import PriceCfg

    anthropic = PriceCfg(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    # 1000 read at 0.3 instead of 3, 200 written at 3.75 instead of 3
    assert saved_micros(anthropic, (1500, 10, 1000, 200, 0)) == round(1000 * 2.7 - 200 * 0.75)
    assert saved_micros(PriceCfg(input=1.0), (1500, 10, 1000, 200, 0)) == 0  # no cache price: nothing saved
    assert saved_micros(None, (1500, 10, 1000, 200, 0)) == 0


async def test_a_record_written_before_saved_micros_reads_as_zero(tmp_path: Any) -> None:
    """A SQLite file of an earlier version (no saved_micros column) gets the column; its rows read 0."""
    import aiosqlite

    db_path = tmp_path / "old.db"
    names = [n for n, _ in usage._FIELDS if n != "saved_micros"]
    types = {"float": "REAL", "int": "INTEGER", "str": "TEXT", "bool": "INTEGER"}
    cols = ", ".join(f'"{n}" {types[k]} NOT NULL' for n, k in usage._FIELDS if n != "saved_micros")
    old = rec(time.time() - 10)
    async with aiosqlite.connect(db_path) as db:
        await db.execute(f"CREATE TABLE usage ({cols})")
        values = [getattr(old, n) for n in names]
        await db.execute(f"INSERT INTO usage VALUES ({', '.join('?' * len(names))})", values)
        await db.commit()
    cfg = config("sqlite", str(db_path))
    got = await usage.read_usage(cfg, 0)
    assert len(got) == 1 and got[0].saved_micros == 0 and got[0].request_id == old.request_id
    assert usage._decode({"saved_micros": 5}) is None  # a record missing an original field is still refused
