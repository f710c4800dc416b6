"""Grants on the Redis counters (app/limits.py, ``RedisCounters``): a busy key's windows and
slots reserved for one instance in shares, taken here without a round trip, given back when
unused; the counts stay exact between instances (real Redis)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from app import limits
from app.limits import Limiter, LimitExceeded, RedisCounters
from app.store import RedisStore
from providers.config import StoreCfg
from tests.unit.test_limits import config

REDIS_URL = "redis://127.0.0.1:6379/0"
BIG = {"requests_per_minute": 1_000_000, "tokens_per_minute": 1_000_000_000, "concurrent": 1000}


class Counted(RedisCounters):
    """The counters, with the takes that went to Redis counted."""

    def __init__(self, redis: Any, prefix: str) -> None:
        super().__init__(redis, prefix)
        self.remote = 0

    async def _take(self, *args: Any) -> Any:
        self.remote += 1
        return await super()._take(*args)


@pytest.fixture
async def redis() -> AsyncIterator[tuple[Redis, str]]:
    r = RedisStore(StoreCfg(backend="redis", url=REDIS_URL)).redis
    prefix = f"sbtest:{uuid.uuid4().hex}:"
    yield r, prefix
    keys = [k async for k in r.scan_iter(match=prefix + "*")]
    if keys:
        await r.delete(*keys)
    await r.aclose()


async def _all_back(r: Redis, prefix: str, requests: int) -> None:
    """Every grant back in Redis: alice's request counters hold ``requests``, no instance
    holds a grant of them (their ``:g`` counts are 0), no concurrency slot is held."""
    assert await _sum(r, prefix + "lim:alice:requests:*[0-9]") == requests
    assert await _sum(r, prefix + "lim:alice:*:g") == 0
    assert await r.zcard(prefix + "lim:alice:concurrent") == 0


def _minute_ahead() -> float:
    """A moment in the middle of a minute an hour from now: the requests of a test that
    must fall in one window all do (the grants' ends are in the future, as in service)."""
    return (time.time() // 60 + 60) * 60 + 30


async def _sum(r: Redis, pattern: str) -> int:
    """The counters ``pattern`` matches, added up (a give-back's marker, ``…:back:<nonce>``,
    is not one)."""
    total = 0
    async for k in r.scan_iter(match=pattern):
        if b":back:" not in k:
            total += int(await r.get(k) or 0)
    return total


async def test_a_busy_key_takes_from_its_grants_and_the_counts_stay_exact(redis: tuple[Redis, str]) -> None:
    r, prefix = redis
    counters = Counted(r, prefix)
    lim = Limiter(config(BIG), counters)
    try:
        remaining = []
        for i in range(200):
            t = await lim.admit("alice", "m", 10, f"r{i}")
            assert not t.degraded
            remaining.append(int(t.headers()["x-ratelimit-remaining-requests"]))
            await lim.settle(t, "m", (12, 5, 0, 0, 0))  # 17 used for 10 reserved
        # the first takes (under _GRANT_RATE a second) go to Redis; then one a grant's worth:
        # the tokens' grant (16 estimates of 10) runs out first, at 17 tokens a request
        per_grant = limits._GRANT_TAKES * 10 // 17
        assert limits._GRANT_RATE - 1 <= counters.remote <= limits._GRANT_RATE + 200 // per_grant + 4
        # what each was told is left never goes up, and counts at least the requests so far
        assert remaining == sorted(remaining, reverse=True)
        assert all(left <= 1_000_000 - i - 1 for i, left in enumerate(remaining))
        # held in Redis now: what was used, and what is left of this instance's grants
        assert await _sum(r, prefix + "lim:alice:requests:*[0-9]") >= 200
        await counters.flush()  # (the grants given back)
        await _all_back(r, prefix, 200)
        assert await _sum(r, prefix + "lim:alice:tokens_minute:*[0-9]") == 200 * 17
    finally:
        await lim.aclose()


async def test_an_unused_grant_goes_back_by_itself(redis: tuple[Redis, str]) -> None:
    r, prefix = redis
    counters = Counted(r, prefix)
    lim = Limiter(config(BIG), counters)
    try:
        await _warm(lim, 60, tokens=10)
        assert counters._grants and counters._slots  # (a grant was taken)
        assert await _sum(r, prefix + "lim:alice:requests:*[0-9]") > 60
        await asyncio.sleep(limits._GRANT_WAIT + 0.1)
        assert not counters._grants and not counters._slots
        await _all_back(r, prefix, 60)
    finally:
        await lim.aclose()


async def test_a_slot_lent_from_a_grant_is_renewed_with_it_and_released_here(redis: tuple[Redis, str]) -> None:
    r, prefix = redis
    counters = Counted(r, prefix)
    lim = Limiter(config(BIG), counters)
    try:
        for i in range(40):
            await lim.settle(await lim.admit("alice", "m", 1, f"r{i}"), "m", (1, 0, 0, 0, 0))
        before = counters.remote
        open_ = await lim.admit("alice", "m", 1, "open")  # an answer still streaming
        assert open_.slot is not None
        lent = counters._lent.get(open_.slot.member)
        assert counters.remote == before and lent is not None  # (from the grant)
        key = prefix + "lim:alice:concurrent"
        held = dict(await r.zrange(key, 0, -1, withscores=True))
        assert lent.encode() in held  # the granted member it uses
        await lim.renew(now=limits.time.time() + 10)  # every granted slot extended
        later = dict(await r.zrange(key, 0, -1, withscores=True))
        assert all(later[m] > held[m] + 9000 for m in held)
        await asyncio.sleep(limits._GRANT_WAIT + 0.1)  # the free slots go back, the lent one stays
        assert await r.zrange(key, 0, -1) == [lent.encode()]
        await lim.settle(open_, "m", (1, 0, 0, 0, 0))
        await asyncio.sleep(limits._GRANT_WAIT + 0.1)
        assert await r.zcard(key) == 0 and await _sum(r, key + ":g") == 0
    finally:
        await lim.aclose()


async def _warm(lim: Limiter, n: int, tag: str = "r", now: float | None = None, tokens: int = 1) -> int:
    """``n`` requests of ``tokens`` each, admitted and settled one after another (a busy key)."""
    for i in range(n):
        await lim.settle(await lim.admit("alice", "m", tokens, f"{tag}{i}", now=now), "m", (tokens, 0, 0, 0, 0))
    return n


@pytest.mark.parametrize("shape", ["steady", "burst"])
async def test_three_instances_with_grants_admit_exactly_the_limit(redis: tuple[Redis, str], shape: str) -> None:
    """A limit with room for grants, three instances each holding some when the window
    fills: a request refused while another holds a grant waits for what it gives back, so
    exactly the limit is admitted between them, steadily or in one burst."""
    r, prefix = redis
    limit = 2000
    lims = [Limiter(config({"requests_per_minute": limit}), Counted(r, prefix)) for _ in range(3)]
    now = _minute_ahead()
    try:
        warm = sum(await asyncio.gather(*(_warm(lim, 30, f"w{j}-", now) for j, lim in enumerate(lims))))
        # each instance busy: granted, and took some of its 30 from the grant
        assert all(isinstance(lim.counters, Counted) and lim.counters.remote < 30 for lim in lims)

        async def one(lim: Limiter, rid: str) -> bool:
            try:
                await lim.settle(await lim.admit("alice", "m", 1, rid, now=now), "m", (1, 0, 0, 0, 0))
            except LimitExceeded:
                return False
            return True

        if shape == "burst":
            got = await asyncio.gather(*(one(lims[i % 3], f"b{i}") for i in range(3000)))
            admitted = sum(got)
        else:

            async def steady(j: int) -> int:
                n = 0
                while await one(lims[j], f"s{j}-{n}"):
                    n += 1
                return n

            admitted = sum(await asyncio.gather(*(steady(j) for j in range(3))))
        assert warm + admitted == limit
        for lim in lims:
            await lim.counters.flush()
        assert await _sum(r, prefix + "lim:alice:requests:*[0-9]") == limit
    finally:
        for lim in lims:
            await lim.aclose()


async def test_a_cost_budget_is_never_granted(redis: tuple[Redis, str]) -> None:
    r, prefix = redis
    counters = Counted(r, prefix)
    lim = Limiter(config({"cost_per_day": 1000.0}, price={"input": 1.0, "output": 1.0}), counters)
    try:
        for i in range(40):
            await lim.settle(await lim.admit("alice", "m", 1, f"r{i}"), "m", (1, 0, 0, 0, 0))
        assert counters.remote == 40 and not counters._grants
    finally:
        await lim.aclose()


async def test_one_instance_at_its_limit_gives_its_own_grant_back_and_never_waits(
    redis: tuple[Redis, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Alone on a key, an instance refused on a window whose only grant is its own gives
    what is left of it back before taking again: the limit is met exactly, and no refusal
    waits for other instances (there are none)."""
    r, prefix = redis
    monkeypatch.setattr(limits, "_GRANT_WAIT", 3600.0)  # (a refusal that waited would hang)
    lim = Limiter(config({"requests_per_minute": 600, "tokens_per_minute": 1_000_000}), Counted(r, prefix))
    now = _minute_ahead()
    try:
        admitted = refused = 0
        async with asyncio.timeout(30):
            for i in range(700):
                try:
                    t = await lim.admit("alice", "m", 40, f"r{i}", now=now)
                except LimitExceeded as e:
                    assert e.headers["x-switchboard-limit"] == "requests"
                    refused += 1
                    continue
                admitted += 1
                await lim.settle(t, "m", (30, 10, 0, 0, 0))
        assert (admitted, refused) == (600, 100)
        await lim.counters.flush()
        assert await _sum(r, prefix + "lim:alice:requests:*[0-9]") == 600
    finally:
        await lim.aclose()


async def test_a_grant_asked_by_a_request_that_went_is_kept_and_given_back(redis: tuple[Redis, str]) -> None:
    """A request cancelled while its take, asking for a grant, is in flight: the reply's
    grant is kept all the same, and given back like any other (nothing left counted)."""
    r, prefix = redis
    counters = Counted(r, prefix)
    lim = Limiter(config(BIG), counters)
    try:
        await _warm(lim, 30, tokens=10)
        await counters.flush()  # (every grant back: the next take asks anew)
        assert not counters._grants and not counters._slots
        task = asyncio.get_running_loop().create_task(lim.admit("alice", "m", 10, "gone"))
        await asyncio.sleep(0)  # (its take queued, not answered)
        assert counters._asking
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(100):
            if counters._grants:
                break
            await asyncio.sleep(0.005)
        assert counters._grants and counters._slots and not counters._asking
        await counters.flush()
        # the cancelled request's own take stays counted (it never settles), its grant went back
        assert await _sum(r, prefix + "lim:alice:requests:*[0-9]") == 31
        assert await _sum(r, prefix + "lim:alice:*:g") == 0
        # its own slot stays leased (15 s) as before grants; the granted ones went back
        held = await r.zrange(prefix + "lim:alice:concurrent", 0, -1)
        assert len(held) == 1 and held[0].startswith(b"gone#")
    finally:
        await lim.aclose()
