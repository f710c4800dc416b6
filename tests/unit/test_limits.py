"""Per-key limits (app/limits.py): the windows, both counter backends (real Redis), fail open."""

from __future__ import annotations

import asyncio
import calendar
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from app.config import parse_config
from app.limits import Limiter, LimitExceeded, MemoryCounters, RedisCounters, cost_micros
from app.metrics import Metrics
from app.store import RedisStore
from providers.config import PriceCfg, StoreCfg

REDIS_URL = "redis://127.0.0.1:6379/0"
NOW = calendar.timegm((2026, 12, 6, 10, 15, 30))  # 30 s into a minute


def config(limits: dict[str, Any], default: dict[str, Any] | None = None, price: dict[str, Any] | None = None) -> Any:
    auth: dict[str, Any] = {"keys": [{"name": "alice", "key": "ka", "limits": limits}, {"name": "bob", "key": "kb"}]}
    if default is not None:
        auth["default_limits"] = default
    model: dict[str, Any] = {"name": "m", "provider": "p"}
    if price is not None:
        model["price"] = price
    return parse_config(
        {
            "auth": auth,
            "providers": [{"name": "p", "profile": "demo"}],
            "models": [model, {"name": "other", "provider": "p"}],
        }
    )


@pytest.fixture(params=["memory", "redis"])
async def counters(request: Any) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield MemoryCounters()
        return
    r = RedisStore(StoreCfg(backend="redis", url=REDIS_URL)).redis  # the store's own pool
    prefix = f"sbtest:{uuid.uuid4().hex}:"
    yield RedisCounters(r, prefix)
    keys = [k async for k in r.scan_iter(match=prefix + "*")]
    if keys:
        await r.delete(*keys)
    await r.aclose()


async def test_requests_per_minute_is_exact(counters: Any) -> None:
    lim = Limiter(config({"requests_per_minute": 3}), counters)
    for i in range(3):
        t = await lim.admit("alice", "m", 10, f"r{i}", now=NOW)
        assert t.headers()["x-ratelimit-remaining-requests"] == str(2 - i)
    with pytest.raises(LimitExceeded) as e:
        await lim.admit("alice", "m", 10, "r3", now=NOW)
    assert e.value.status == 429 and e.value.code == "rate_limit_exceeded"
    assert e.value.headers["retry-after"] == "30" and "try again in 30s" in e.value.message
    # the 429 carries the window it hit, full
    h = e.value.headers
    assert (h["x-ratelimit-limit-requests"], h["x-ratelimit-remaining-requests"]) == ("3", "0")
    assert h["x-ratelimit-reset-requests"] == "30s" and h["x-codex-primary-used-percent"] == "100.0"
    # the next minute is a new window; another key is not limited at all
    await lim.admit("alice", "m", 10, "r4", now=NOW + 31)
    assert (await lim.admit("bob", "m", 10, "r5", now=NOW)).headers() == {}


async def test_concurrent_requests_race_to_exactly_the_limit(counters: Any) -> None:
    lim = Limiter(config({"requests_per_minute": 50}), counters)

    async def one(i: int) -> bool:
        try:
            await lim.admit("alice", "m", 1, f"r{i}", now=NOW)
            return True
        except LimitExceeded:
            return False

    got = await asyncio.gather(*(one(i) for i in range(120)))
    assert sum(got) == 50


async def test_tokens_are_reserved_then_settled(counters: Any) -> None:
    lim = Limiter(config({"tokens_per_minute": 1000, "tokens_per_day": 5000}), counters)
    t = await lim.admit("alice", "m", 400, "r1", now=NOW)
    assert t.headers()["x-ratelimit-remaining-tokens"] == "600"
    await lim.settle(t, "m", (700, 250, 0, 0, 0))  # 950 used: +550 on the reservation
    t2 = await lim.admit("alice", "m", 10, "r2", now=NOW)
    assert t2.counts[1] == 950 and t2.headers()["x-ratelimit-remaining-tokens"] == "40"
    await lim.settle(t2, "m", (10, 100, 0, 0, 0))  # now 1060 ≥ 1000: the window is full
    with pytest.raises(LimitExceeded) as e:
        await lim.admit("alice", "m", 1, "r3", now=NOW)
    assert e.value.headers["x-switchboard-limit"] == "tokens_minute"
    t4 = await lim.admit("alice", "m", 300, "r4", now=NOW + 60)  # next minute; the day goes on
    assert t4.counts[1] == 1060
    await lim.settle(t4, "m", None)  # failed before its first byte: the estimate goes back
    t5 = await lim.admit("alice", "m", 0, "r5", now=NOW + 60)
    assert t5.counts == [0, 1060]


async def test_a_day_budget_refuses_with_insufficient_quota_and_codex_headers(counters: Any) -> None:
    lim = Limiter(config({"tokens_per_day": 100, "requests_per_minute": 10}), counters)
    t = await lim.admit("alice", "m", 40, "r1", now=NOW)
    h = t.headers()
    assert h["x-codex-primary-used-percent"] == "10.0" and h["x-codex-primary-window-minutes"] == "1"
    assert h["x-codex-secondary-used-percent"] == "40.0" and h["x-codex-secondary-window-minutes"] == "1440"
    midnight = calendar.timegm((2026, 12, 7, 0, 0, 0))
    assert h["x-codex-secondary-reset-at"] == str(midnight)
    ev = t.event()
    assert ev is not None and ev["type"] == "codex.rate_limits"
    assert ev["rate_limits"]["secondary"] == {"used_percent": 40.0, "window_minutes": 1440,
                                              "reset_after_seconds": midnight - NOW, "reset_at": midnight}  # fmt: skip
    await lim.settle(t, "m", (90, 30, 0, 0, 0))
    with pytest.raises(LimitExceeded) as e:
        await lim.admit("alice", "m", 1, "r2", now=NOW)
    assert e.value.code == "insufficient_quota" and int(e.value.headers["retry-after"]) == midnight - NOW
    assert e.value.headers["x-codex-secondary-used-percent"] == "100.0"
    assert e.value.headers["x-codex-secondary-reset-at"] == str(midnight)


async def test_cost_budget_by_the_price_table(counters: Any) -> None:
    price = {"input": 3.0, "output": 15.0, "cache_read": 0.3}
    lim = Limiter(config({"cost_per_day": 0.01}, price=price), counters)  # one cent
    t = await lim.admit("alice", "m", 0, "r1", now=NOW)
    cost = await lim.settle(t, "m", (2000, 200, 1000, 0, 0))  # 1000 plain, 1000 cached, 200 out
    assert cost == 3000 + 300 + 3000  # micro-dollars: $0.0063
    t = await lim.admit("alice", "m", 0, "r2", now=NOW)
    await lim.settle(t, "m", (1000, 0, 0, 0, 0))  # $0.0093
    await lim.admit("alice", "m", 0, "r3", now=NOW)  # room left: admitted
    t = await lim.admit("alice", "m", 0, "r4", now=NOW)
    await lim.settle(t, "m", (0, 100, 0, 0, 0))  # $0.0108: over
    with pytest.raises(LimitExceeded):
        await lim.admit("alice", "m", 0, "r5", now=NOW)


async def test_concurrency_slots(counters: Any) -> None:
    lim = Limiter(config({"concurrent": 2}), counters)
    a = await lim.admit("alice", "m", 0, "a", now=NOW)
    await lim.admit("alice", "m", 0, "b", now=NOW)
    with pytest.raises(LimitExceeded) as e:
        await lim.admit("alice", "m", 0, "c", now=NOW)
    assert e.value.headers["x-switchboard-limit"] == "concurrent"
    await lim.settle(a, "m", (1, 1, 0, 0, 0))
    await lim.admit("alice", "m", 0, "c", now=NOW)
    # a lease outlives no crash: an hour later the slots are free again
    await lim.admit("alice", "m", 0, "d", now=NOW + 3601)


async def test_models_and_defaults() -> None:
    lim = Limiter(config({"models": ["m"]}, default={"requests_per_minute": 1}), MemoryCounters())
    with pytest.raises(LimitExceeded) as e:
        await lim.admit("alice", "other", 0, "r1", now=NOW)
    assert (e.value.status, e.value.code, e.value.param) == (403, "model_not_allowed", "model")
    await lim.admit("alice", "m", 0, "r2", now=NOW)
    await lim.admit("bob", "other", 0, "r3", now=NOW)  # bob has the default policy
    with pytest.raises(LimitExceeded):
        await lim.admit("bob", "other", 0, "r4", now=NOW)


async def test_redis_down_fails_open_and_counts_nothing_twice() -> None:
    m = Metrics()
    dead = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    lim = Limiter(config({"requests_per_minute": 1}), RedisCounters(dead, "x:"), m)
    for i in range(3):  # over the limit, yet admitted: never a false 429
        t = await lim.admit("alice", "m", 5, f"r{i}", now=NOW)
        assert t.degraded
        await lim.settle(t, "m", (5, 5, 0, 0, 0))  # nothing to settle: never taken
    assert lim.degraded and m.get("switchboard_limits_degraded_total") == 3
    await dead.aclose()


def test_cost_micros() -> None:
    p = PriceCfg(input=1.0, output=2.0, cache_write=1.25)
    assert cost_micros(p, (1_000_000, 1_000_000, 0, 0, 0)) == 3_000_000  # $3
    assert cost_micros(p, (100, 0, 0, 100, 0)) == 125
    assert cost_micros(None, (5, 5, 0, 0, 0)) == 0


def test_reload_changes_the_policy() -> None:
    lim = Limiter(config({"requests_per_minute": 1}), MemoryCounters())
    lim.reload(config({"requests_per_minute": 7}))
    pol = lim.policy("alice")
    assert pol is not None and pol.requests_per_minute == 7


class _Stale(MemoryCounters):
    """Counters whose first calls fail as a pooled connection from before a Redis restart does."""

    reconnect_errors = (ConnectionError,)

    def __init__(self, fail: int) -> None:
        super().__init__()
        self.fail = fail

    async def settle(self, adds: Any, slot: Any, once: str = "") -> None:
        if self.fail:
            self.fail -= 1
            raise ConnectionError("stale connection")
        await super().settle(adds, slot, once)


async def test_a_settlement_is_tried_again_on_a_stale_connection() -> None:
    """As a take: a settlement that meets a dead pooled connection is tried again on another
    (its tokens counted once, its slot released), not lost."""
    m = Metrics()
    counters = _Stale(fail=2)
    lim = Limiter(config({"tokens_per_day": 1000, "concurrent": 1}), counters, m)
    t = await lim.admit("alice", "m", 10, "r1", now=NOW)
    await lim.settle(t, "m", (30, 20, 0, 0, 0))
    assert counters.fail == 0 and m.get("switchboard_limits_degraded_total") == 0
    assert list(counters.counts.values())[0][0] == 50  # the reservation of 10, settled to 50
    await lim.admit("alice", "m", 10, "r2", now=NOW)  # the slot came back
    gone = _Stale(fail=5)  # Redis really down: the settlement is given up, counted
    lim = Limiter(config({"tokens_per_day": 1000}), gone, m)
    t = await lim.admit("alice", "m", 10, "r3", now=NOW)
    await lim.settle(t, "m", (30, 20, 0, 0, 0))
    assert m.get("switchboard_limits_degraded_total") == 1


async def test_a_slot_is_a_lease_its_open_answer_renews(counters: Any) -> None:
    """A slot lasts _LEASE seconds unless the instance holding it renews it: an open answer's
    slot is kept as long as it lives; a dead instance's comes back within the lease."""
    from app.limits import _LEASE, _RENEW

    alive = Limiter(config({"concurrent": 1}), counters)
    t = await alive.admit("alice", "m", 0, "stream-1", now=NOW)
    for k in range(1, 7):  # 30 s of renewals: the slot stays taken
        await alive.renew(now=NOW + k * _RENEW)
        with pytest.raises(LimitExceeded):
            await alive.admit("alice", "m", 0, f"x{k}", now=NOW + k * _RENEW + 1)
    await alive.settle(t, "m", (1, 1, 0, 0, 0))
    assert alive.held == {}
    await alive.renew(now=NOW + 40)  # (a released slot is not taken again by a renewal)
    dead = await alive.admit("alice", "m", 0, "stream-2", now=NOW + 40)
    alive.held.clear()  # its instance died: nobody renews it, nobody releases it
    with pytest.raises(LimitExceeded):
        await alive.admit("alice", "m", 0, "y1", now=NOW + 40 + _LEASE - 1)
    await alive.admit("alice", "m", 0, "y2", now=NOW + 40 + _LEASE + 0.5)  # back within the lease
    assert dead.slot is not None


async def test_the_renewals_run_as_a_task() -> None:
    import app.limits as limits

    counters = MemoryCounters()
    lim = Limiter(config({"concurrent": 1}), counters)
    t = await lim.admit("alice", "m", 0, "s", now=time.time())
    assert t.slot is not None
    before = counters.slots["lim:alice:concurrent"][t.slot.member]
    old, limits._RENEW = limits._RENEW, 0.05
    try:
        await lim.start()
        await asyncio.sleep(0.2)
    finally:
        limits._RENEW = old
        await lim.aclose()
    assert counters.slots["lim:alice:concurrent"][t.slot.member] > before
    await lim.settle(t, "m", None)


async def test_settlements_ride_on_the_next_batch_of_takes() -> None:
    """A settlement is owed, not waited for: it goes out with the next takes, before them, in
    one round trip; a settlement sent twice (its batch's replies lost) counts once."""
    r = RedisStore(StoreCfg(backend="redis", url=REDIS_URL)).redis
    prefix = f"sbtest:{uuid.uuid4().hex}:"
    counters = RedisCounters(r, prefix)
    lim = Limiter(config({"tokens_per_day": 5000}), counters)
    try:
        t = await lim.admit("alice", "m", 100, "r1", now=NOW)
        await lim.settle(t, "m", (300, 200, 0, 0, 0))  # +400 on the reservation, owed
        assert len(counters._owed) == 1
        t2 = await lim.admit("alice", "m", 0, "r2", now=NOW)  # the same batch: settled first
        assert t2.counts == [500] and counters._owed == []
        day = t2.entries[0].key
        for _ in range(2):  # the same settlement twice: its marker counts it once
            await counters.settle([(day, 7, 60)], None, "lim:alice:settled:twice")
        await counters.flush()
        assert int(await r.get(prefix + day)) == 507
    finally:
        keys = [k async for k in r.scan_iter(match=prefix + "*")]
        if keys:
            await r.delete(*keys)
        await r.aclose()


async def test_a_settlement_outlives_a_redis_restart(tmp_path: Any) -> None:
    """Redis stops between a take and its settlement: the settlement is kept, sent again on
    a fresh connection once Redis is back, and counted once (our own redis-server, with its
    append-only file, on a free port; stopped by its PID)."""
    import shutil
    import socket
    import subprocess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = shutil.which("redis-server")
    assert exe, "redis-server is needed"
    argv = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(tmp_path)]
    argv += ["--appendonly", "yes", "--appendfsync", "always"]

    def start() -> subprocess.Popen[bytes]:
        from redis import Redis as SyncRedis

        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                with SyncRedis(port=port, socket_timeout=0.5) as ping:
                    ping.ping()
                return proc
            except Exception:
                time.sleep(0.05)
        proc.kill()
        raise AssertionError("redis-server did not start")

    def stop(proc: subprocess.Popen[bytes]) -> None:
        proc.terminate()  # (this PID only)
        proc.wait(timeout=10)

    proc = start()
    r = RedisStore(StoreCfg(backend="redis", url=f"redis://127.0.0.1:{port}/0", timeout_seconds=1)).redis
    counters = RedisCounters(r, "x:")
    m = Metrics()
    lim = Limiter(config({"tokens_per_day": 5000, "concurrent": 1}), counters, m)
    try:
        t = await lim.admit("alice", "m", 100, "r1", now=NOW)
        stop(proc)
        await lim.settle(t, "m", (300, 200, 0, 0, 0))
        await counters.flush()  # Redis is down: the batch fails, the settlement is owed again
        assert len(counters._owed) == 1
        proc = start()  # (the same port; the counters were kept in its file)
        await counters.flush()  # a pooled connection from before fails: again, on a fresh one
        for _ in range(100):
            if not counters._owed:
                break
            await asyncio.sleep(0.05)
            await counters.flush()
        assert counters._owed == []
        day = t.entries[0].key
        assert int(await r.get("x:" + day)) == 500  # the reservation and the settlement, once
        assert await r.zcard("x:" + t.slot.key) == 0 if t.slot else False  # the slot released
        await lim.admit("alice", "m", 0, "r2", now=NOW)
        assert m.get("switchboard_limits_degraded_total") == 0
    finally:
        await r.aclose()
        stop(proc)


async def test_a_concurrency_refusal_carries_the_keys_windows(counters: Any) -> None:
    """A 429 for the concurrency slot carries the key's windows as they stand, as every other
    answer to the key does (the refusal took nothing from them)."""
    lim = Limiter(config({"requests_per_minute": 5, "tokens_per_day": 1000, "concurrent": 1}), counters)
    a = await lim.admit("alice", "m", 100, "a", now=NOW)
    with pytest.raises(LimitExceeded) as e:
        await lim.admit("alice", "m", 100, "b", now=NOW)
    h = e.value.headers
    assert (h["x-switchboard-limit"], h["retry-after"]) == ("concurrent", "1")
    assert (h["x-ratelimit-limit-requests"], h["x-ratelimit-remaining-requests"]) == ("5", "4")
    assert h["x-ratelimit-reset-requests"] == "30s" and h["x-codex-primary-used-percent"] == "20.0"
    assert h["x-codex-secondary-used-percent"] == "10.0"
    # the refusal took nothing: once the slot is free, the next request is the second of the minute
    await lim.settle(a, "m", None)
    c = await lim.admit("alice", "m", 100, "c", now=NOW)
    assert c.headers()["x-ratelimit-remaining-requests"] == "3"


async def test_requests_that_send_one_id_hold_a_slot_each(counters: Any) -> None:
    """The slot's member is the request id, which a client may send (``X-Request-Id``):
    answers that share one id are still as many answers (one member would count once)."""
    lim = Limiter(config({"concurrent": 2}), counters)
    first = await lim.admit("alice", "m", 0, "same-id", now=NOW)
    await lim.admit("alice", "m", 0, "same-id", now=NOW)
    with pytest.raises(LimitExceeded) as e:
        await lim.admit("alice", "m", 0, "same-id", now=NOW)
    assert e.value.headers["x-switchboard-limit"] == "concurrent"
    await lim.settle(first, "m", None)
    await counters.flush()
    await lim.admit("alice", "m", 0, "same-id", now=NOW)  # one released: one slot free again
