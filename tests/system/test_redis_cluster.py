"""Switchboard on a real Redis Cluster (``store.cluster: true``): three primaries with one
replica each (tests/system/redis_cluster.py), all on 127.0.0.1, and three ``switchboard
serve`` processes on it (each in its own process group, stopped by its PID).

a. In this process: the store, the limits, the usage records and Gemini's thought
   signatures on the cluster; what one script touches shares a slot, and different keys'
   counters do not all land in one.
b. ``team``: 60 requests a minute; 150 requests over the three instances in one minute →
   exactly 60 accepted, which saw ``x-ratelimit-remaining-requests`` 59…0 once each.
c. A runtime key created through one instance works on the two others within a second.
d. Usage records written by the three are read whole through ``/v1/admin/usage``.
e. Stored conversations continued turn by turn on another instance each while the primary
   of the ``writer`` key's counters is killed (SIGKILL): its replica takes over, no answer
   is a 429, the only failures fall in the failover window, and every response a client was
   answered (each says ``store: true``) is still there afterwards, its whole chain too.

The failover's duration and the failures seen in it are printed (``-s``).
"""

from __future__ import annotations

import asyncio
import hashlib
import signal
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from redis.cluster import RedisCluster

from tests.system.redis_cluster import LoopbackCluster
from tests.system.test_limits_cluster import E2E, burst, fresh_minute, same_minute

if str(E2E) not in sys.path:
    sys.path.insert(0, str(E2E))
from proxy_harness import Proxy

PREFIX = "sbrc:"
SECRET = "redis-cluster-test-secret-0123456789abcdef0123456789"
ADMIN = "sk-rc-admin"
KEYS = {
    "team": {"requests_per_minute": 60},
    "counted": {"requests_per_minute": 1000},
    "writer": {"requests_per_minute": 100_000},
}
CHAT = {"model": "demo", "messages": [{"role": "user", "content": "hi"}]}


class Env:
    def __init__(self, cluster: LoopbackCluster, proxies: list[Proxy]) -> None:
        self.cluster = cluster
        self.proxies = proxies

    def redis(self) -> RedisCluster:
        return RedisCluster.from_url(self.cluster.seed, decode_responses=True, socket_timeout=2)


def config(url: str) -> dict[str, Any]:
    keys = [{"name": n, "key": f"sk-{n}", "limits": lim} for n, lim in KEYS.items()]
    return {
        "server": {"secret_key": SECRET},
        "auth": {"keys": ["sk-probe", *keys], "admin_keys": [ADMIN]},
        "providers": [{"name": "demo", "profile": "demo"}],
        "models": [{"name": "demo", "provider": "demo"}],
        "store": {
            "backend": "redis",
            "url": url,
            "cluster": True,
            "key_prefix": PREFIX,
            "timeout_seconds": 0.5,
            "failover_seconds": 10,
        },
    }


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    work = tmp_path_factory.mktemp("redis-cluster")
    cluster = LoopbackCluster(work)
    cluster.start()
    proxies: list[Proxy] = []
    try:
        for i in range(3):
            proxies.append(Proxy(config(cluster.url), work / f"proxy{i}", startup_timeout=15))
        with ThreadPoolExecutor(3) as pool:  # (the three boot at once)
            list(pool.map(Proxy.start, proxies))
        yield Env(cluster, proxies)
    finally:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(Proxy.stop, proxies))
        cluster.stop()


def auth(name: str) -> dict[str, str]:
    return {"authorization": f"Bearer sk-{name}"}


def limit_key(name: str, rest: str) -> str:
    return f"{PREFIX}lim:{{{hashlib.sha256(name.encode()).hexdigest()[:16]}}}:{name}:{rest}"


def logs(env: Env) -> str:
    return "\n".join(f"--- proxy{i} ---\n{p.log(3000)}" for i, p in enumerate(env.proxies))


# ---------------------------------------------------------------------------------- a


def test_store_limits_usage_and_signatures_in_process(env: Env) -> None:
    from app.limits import Limiter, RedisCounters
    from app.signatures import Signatures
    from app.store import Record, RedisStore
    from app.usage import UsageLog, UsageRecord
    from providers.config import Config, StoreCfg

    cfg = Config.model_validate(config(env.cluster.url))
    prefix = "sbrc-a:"

    def store(**extra: Any) -> RedisStore:
        # (the store's default timeout: nothing here fails over, and a new client's first read
        # also reads the cluster's slots, which a loaded machine took over 0.5 s to answer)
        fields = {**cfg.store.model_dump(), "key_prefix": prefix, "timeout_seconds": 2, **extra}
        return RedisStore(StoreCfg.model_validate(fields))

    def record(i: int, owner: str = "alice") -> Record:
        out = [{"id": f"msg_{i}", "type": "message", "role": "assistant", "content": [], "pad": "x" * 300}]
        return Record(
            id=f"resp_{i}",
            owner=owner,
            response={"id": f"resp_{i}", "output": out},
            input=[{"id": f"in_{i}", "type": "message", "role": "user", "content": "hi"}],
            provider="demo",
            upstream="chat",
            ancestors=[f"resp_{j}" for j in range(i)],
        )

    async def run() -> None:
        a, b = store(), store()
        try:
            for i in range(4):
                await a.put(record(i))
            chain = await b.chain("resp_3", "alice")  # (another client: the records spread over the nodes)
            assert chain is not None and [r.id for r in chain] == ["resp_0", "resp_1", "resp_2", "resp_3"]
            assert await b.get("resp_3", "bob") is None
            found = await b.items(["in_0", "msg_3", "nope"], "alice")
            assert sorted(found) == ["in_0", "msg_3"]
            assert await b.delete("resp_3", "alice") and await a.get("resp_3", "alice") is None
            assert await a.items(["msg_3"], "alice") == {}
            assert await a.ping()
            # the size bookkeeping is one slot; an eviction deletes records in theirs
            slots = {a.redis.keyslot(k) for k in a._sizes}
            assert len(slots) == 1
            small = store(key_prefix="sbrc-evict:", max_bytes=2048)
            for i in range(12):
                await small.put(record(i, "carol"))
            assert await small.get("resp_11", "carol") is not None
            assert await small.get("resp_0", "carol") is None  # evicted, with its items
            assert await small.items(["in_0", "msg_0"], "carol") == {}
            assert await small.items(["in_11"], "carol") != {}
            await small.aclose()

            # limits: a key's counters share a slot (one script); different keys spread
            lim = Limiter(cfg, RedisCounters(a.redis, prefix, cluster=True))
            ticket = await lim.admit("team", "demo", 10, "req-1")
            assert not ticket.degraded and ticket.counts == [0]
            await lim.settle(ticket, "demo", (3, 4, 0, 0, 0))
            spread = {a.redis.keyslot(limit_key(f"k{i}", "requests:m1")) for i in range(30)}
            assert len(spread) > 20
            assert a.redis.keyslot(limit_key("x", "requests:m1")) == a.redis.keyslot(limit_key("x", "concurrent"))

            # usage records: one slot for the day streams (a batch is one transaction)
            usage = UsageLog(cfg, a)
            now = time.time()
            for i in range(5):
                usage.write(
                    UsageRecord(
                        ts=now - 86400 * (i % 2), key="alice", model="demo", provider="demo", request_id=f"u{i}"
                    )
                )
            assert await usage.flush()
            got = await usage.query(now - 3 * 86400)
            assert sorted(r.request_id for r in got if r.request_id.startswith("u")) == [f"u{i}" for i in range(5)]

            # Gemini's thought signatures: one owner's calls spread over the slots
            sigs = Signatures(a)
            calls = {f"call_{i}": (f"fn{i}", f"sig{i}") for i in range(8)}
            await sigs.remember("alice", calls, "req-2")
            back = await sigs.recall("alice", [(c, n) for c, (n, _) in calls.items()], "req-3")
            assert back == {c: s for c, (_, s) in calls.items()}
        finally:
            await a.aclose()
            await b.aclose()

    asyncio.run(run())


# ---------------------------------------------------------------------------------- b


def test_three_instances_keep_a_request_limit_exact(env: Env) -> None:
    fresh_minute(5)
    results = asyncio.run(burst(env, "team", 150))  # type: ignore[arg-type]
    assert same_minute(results), "the burst straddled a minute boundary"
    ok = [r for r in results if r[1] == 200]
    refused = [r for r in results if r[1] == 429]
    assert len(ok) + len(refused) == 150, sorted({r[1] for r in results})
    assert len(ok) == 60, (len(ok), logs(env))
    assert all(any(r[0] == i for r in ok) for i in range(3))
    assert sorted(int(r[2]["x-ratelimit-remaining-requests"]) for r in ok) == list(range(60))
    minute = int(results[0][3] // 60)
    assert env.redis().get(limit_key("team", f"requests:m{minute}")) == "60"


# ---------------------------------------------------------------------------------- c


def test_a_runtime_key_works_everywhere_within_a_second(env: Env) -> None:
    p0, p1, p2 = env.proxies
    with httpx.Client(timeout=10) as c:
        r = c.post(f"{p0.url}/v1/admin/keys", json={"name": "fresh"}, headers={"authorization": f"Bearer {ADMIN}"})
        assert r.status_code == 201, r.text
        t0 = time.monotonic()
        secret = r.json()["secret"]
        took = []
        for p in (p1, p2):
            while True:
                got = c.post(f"{p.base_url}/chat/completions", json=CHAT, headers={"authorization": f"Bearer {secret}"})
                if got.status_code == 200:
                    took.append(time.monotonic() - t0)
                    break
                assert got.status_code == 401, got.text
                assert time.monotonic() - t0 < 1.0, f"{p.url} does not know the key after a second"
                time.sleep(0.02)
    print(f"\nredis cluster: a runtime key worked on the other instances after {took} s")


# ---------------------------------------------------------------------------------- d


def test_usage_records_of_the_three_are_read_whole(env: Env) -> None:
    with httpx.Client(timeout=10) as c:
        for i in range(9):
            r = c.post(f"{env.proxies[i % 3].base_url}/chat/completions", json=CHAT, headers=auth("counted"))
            assert r.status_code == 200, r.text
        deadline = time.monotonic() + 5
        while True:  # (each instance writes its records within a second)
            rows = []
            for p in env.proxies:
                r = c.get(f"{p.url}/v1/admin/usage?by=key", headers={"authorization": f"Bearer {ADMIN}"})
                assert r.status_code == 200, r.text
                rows.append({row["key"]: row["requests"] for row in r.json()["data"]})
            if all(row.get("counted") == 9 for row in rows):
                break
            assert time.monotonic() < deadline, rows
            time.sleep(0.1)


# ---------------------------------------------------------------------------------- e


def test_a_primary_killed_mid_run_loses_no_stored_response_and_refuses_nothing(env: Env) -> None:
    from app.store import Record, RedisStore, StoreUnavailable
    from providers.config import StoreCfg

    cluster = env.cluster
    victim = cluster.primary_of(limit_key("writer", "concurrent"))  # (the key's counters: every minute's)
    replica = cluster.nodes[3 + cluster.nodes.index(victim)]
    told: list[tuple[int, str]] = []  # (conversation, response id) answered 200: stored
    failures: list[tuple[float, int, str]] = []  # (when, status, code)
    events: dict[str, float] = {}

    async def conversation(w: int, stop: asyncio.Event, client: httpx.AsyncClient) -> str | None:
        prev: str | None = None
        turn = 0
        while not stop.is_set():
            p = env.proxies[(w + turn) % 3]
            body: dict[str, Any] = {"model": "demo", "input": f"conversation {w} turn {turn}", "store": True}
            if prev is not None:
                body["previous_response_id"] = prev
            r = await client.post(f"{p.base_url}/responses", json=body, headers=auth("writer"))
            if r.status_code == 200:
                assert r.json()["store"] is True
                prev = r.json()["id"]
                told.append((w, prev))
                turn += 1
            else:
                code = (r.json().get("error") or {}).get("code") or ""
                failures.append((time.monotonic(), r.status_code, code))
                await asyncio.sleep(0.1)  # the same turn again
        return prev

    async def in_process_puts() -> None:
        """Puts from this process while the primary is dead: one with too short a failover
        budget fails (StoreUnavailable); one with enough lands once the replica took over."""
        fields = {**config(cluster.url)["store"], "key_prefix": PREFIX}
        store = RedisStore(StoreCfg.model_validate(fields))
        hurried = RedisStore(StoreCfg.model_validate({**fields, "failover_seconds": 0.2}))
        try:
            # ids whose record keys live on the dead primary's slots
            ids = [f"resp_k{i}" for i in range(200)]
            scope = hashlib.sha256(b"inproc").hexdigest()[:16] + "/"  # (app.store._scope)
            mine = [i for i in ids if store.redis.keyslot(PREFIX + scope + i) in victim_slots][:2]
            rec = [
                Record(id=i, owner="inproc", response={"id": i}, input=[], provider="demo", upstream="chat")
                for i in mine
            ]
            await store.ping()
            await hurried.ping()
            await asyncio.sleep(0.2)  # (the primary is dead by now)
            with pytest.raises(StoreUnavailable):
                await hurried.put(rec[0])
            await store.put(rec[1])
            assert (await store.get(mine[1], "inproc")) is not None
        finally:
            await store.aclose()
            await hurried.aclose()

    victim_slots = set()
    for lo, hi, primary, *_ in victim.client().execute_command("CLUSTER", "SLOTS"):
        if int(primary[1]) == victim.port:
            victim_slots.update(range(lo, hi + 1))

    async def run() -> list[str | None]:
        stop = asyncio.Event()
        async with httpx.AsyncClient(timeout=20) as client:
            tasks = [asyncio.create_task(conversation(w, stop, client)) for w in range(6)]
            await asyncio.sleep(1.0)
            before = len(told)
            events["kill"] = time.monotonic()
            victim.stop(signal.SIGKILL)  # (its PID only)
            inproc = asyncio.create_task(in_process_puts())
            while replica.client().info("replication")["role"] != "master":
                assert time.monotonic() - events["kill"] < 15, "the replica was never promoted"
                await asyncio.sleep(0.05)
            events["promoted"] = time.monotonic()
            await inproc
            await asyncio.sleep(1.0)  # and on, on the promoted replica
            stop.set()
            lasts = await asyncio.gather(*tasks)
            assert before > 0 and len(told) > before + 3, (before, len(told))
        return lasts

    lasts = asyncio.run(run())
    unavailable = [t for t, s, _ in failures if s == 503]
    promoted = events["promoted"] - events["kill"]
    print(
        f"\nredis cluster: replica promoted {promoted:.1f}s after the kill; {len(told)} stored turns answered; "
        f"failed answers: {len(unavailable)} 503 in the window, {len(failures) - len(unavailable)} 404 "
        f"({sum(1 for t, s, _ in failures if s == 404 and not events['kill'] <= t <= events['promoted'] + 2)} outside it)"
    )

    assert not [f for f in failures if f[1] == 429], failures  # no false 429
    # the store unavailable only in the failover window (and the moments after it, until every
    # instance read the new slots); a turn sent before the previous one's put landed on
    # another instance is 404 and lands when sent again (below: nothing is lost)
    assert all(events["kill"] <= t <= events["promoted"] + 2.0 for t in unavailable), (failures, events)
    assert {(s, c) for _, s, c in failures} <= {(503, "store_unavailable"), (404, "previous_response_not_found")}

    async def check() -> None:
        async with httpx.AsyncClient(timeout=10) as client:

            async def there(i: int, rid: str) -> None:
                r = await client.get(f"{env.proxies[i % 3].base_url}/responses/{rid}", headers=auth("writer"))
                assert r.status_code == 200, (rid, r.status_code, r.text)

            # every answer told stored is there
            await asyncio.gather(*(there(i, rid) for i, (_, rid) in enumerate(told)))
            for w, last in enumerate(lasts):  # and each conversation goes on whole
                body = {"model": "demo", "input": "one more", "store": True, "previous_response_id": last}
                r = await client.post(f"{env.proxies[w % 3].base_url}/responses", json=body, headers=auth("writer"))
                assert r.status_code == 200, r.text
                items = await client.get(
                    f"{env.proxies[(w + 1) % 3].base_url}/responses/{last}/input_items?limit=100",
                    headers=auth("writer"),
                )
                assert items.status_code == 200, items.text

    asyncio.run(check())
    # the dead primary's slots are served by its former replica
    assert cluster.primary_of(limit_key("writer", "concurrent")) is replica
