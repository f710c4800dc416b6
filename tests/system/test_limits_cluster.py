"""Per-key limits tested like a distributed system (issue #54): three real ``switchboard
serve`` processes sharing one real ``redis-server``, all on 127.0.0.1.

Theory of operation
-------------------
The module starts its own ``redis-server`` (a free port, ``--save '' --appendonly no``:
nothing persisted, so a restart on the same port starts empty; stopped by its PID — the
machine's own Redis on 6379 is never touched), one scripted upstream (tests/e2e) and three
proxies (``tests/e2e/proxy_harness.Proxy``: own process group, stopped by that PID) whose
configs differ only in their probe model.  Two models: ``demo`` (the built-in demo
provider, for bulk traffic) and ``scripted`` (the scripted upstream: known usage, slow
streams).  Each test has its own key, so the counters of one test never meet another's.

a. ``team``: 100 requests a minute; 300 concurrent requests spread over the three
   instances in one calendar minute → exactly 100 accepted (none refused below it), and
   the accepted ones saw ``x-ratelimit-remaining-requests`` 99…0 once each: the Lua
   script is atomic across instances.
b. ``budget``: tokens_per_day; N requests to a scripted upstream that reports known usage
   → the day counter in Redis equals the sum of the reported input + output.
c. ``failover``: Redis stopped mid-run → no 5xx and no 429 (fail open; no rate-limit
   headers on those answers), ``/readyz`` says ``limits: degraded``; Redis started again
   on the same port → the limit is enforced again, exactly, and never early.
d. ``hup``: SIGHUP to one instance while a slow stream is open: the stream completes
   intact; new requests on that instance see the new ``x-ratelimit-limit-requests``.
e. ``busy``: 600 requests a minute, room for grants: each instance checks it often enough
   to be granted shares, and most of its requests then cost Redis no take; a burst past
   the limit over the three → exactly 600 admitted, every grant back in Redis.

A burst that must fall in one calendar minute waits for the next minute when too little of
the current one is left (``fresh_minute``) and checks afterwards that it did.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from redis import Redis

E2E = Path(__file__).resolve().parent.parent / "e2e"
if str(E2E) not in sys.path:
    sys.path.insert(0, str(E2E))
from proxy_harness import Proxy, provider_entry  # noqa: E402
from scripted_upstream import ScriptedUpstream, chat_turn  # noqa: E402

from tests.system.debian import answers, debian_binary  # noqa: E402

PREFIX = "sbcluster:"
SECRET = "limits-cluster-test-secret-0123456789abcdef0123456789"
KEYS = {
    "team": {"requests_per_minute": 100},
    "budget": {"tokens_per_day": 10_000_000},
    "failover": {"requests_per_minute": 30},
    "hup": {"requests_per_minute": 50},
    "busy": {"requests_per_minute": 600, "concurrent": 600},
}
CHAT = {"model": "demo", "messages": [{"role": "user", "content": "hi"}]}


def redis_server() -> str:
    """The machine's ``redis-server``, else Debian's, fetched into ``.e2e/redis`` (never a skip)."""
    found = shutil.which("redis-server")
    if found:
        return found
    home = Path(__file__).resolve().parent.parent.parent / ".e2e" / "redis"
    exe = "usr/bin/redis-server"
    return str(debian_binary(home, ["redis-server", "redis-tools"], exe, lambda p: answers(p, ["--version"], "Redis")))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """Our own redis-server on ``port``: started, stopped and started again by PID."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = [redis_server(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        argv += ["--dir", str(self.workdir), "--protected-mode", "no"]
        with open(self.workdir / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if Redis(port=self.port, socket_timeout=0.5).ping():
                    return
            except Exception:
                if self.proc.poll() is not None:
                    break
            time.sleep(0.05)
        self.stop()
        pytest.fail("redis-server did not start:\n" + (self.workdir / "redis.log").read_text()[-2000:])

    def stop(self) -> None:
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)  # (this PID only)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)

    def client(self) -> Redis:
        return Redis(port=self.port, socket_timeout=2, decode_responses=True)


class Cluster:
    def __init__(self, redis: RedisServer, up: ScriptedUpstream, proxies: list[Proxy]) -> None:
        self.redis = redis
        self.up = up
        self.proxies = proxies


def config(redis_url: str, up: ScriptedUpstream, keys: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "server": {"secret_key": SECRET},
        # (the first, plain, key is the one the harness probes readiness with: no limits)
        "auth": {"keys": ["sk-probe", *({"name": n, "key": f"sk-{n}", "limits": lim} for n, lim in keys.items())]},
        "providers": [{"name": "demo", "profile": "demo"}, provider_entry(up)],
        "models": [{"name": "demo", "provider": "demo"}, {"name": "scripted", "provider": "scripted"}],
        # (the store's default timeout: a stopped Redis refuses at once whatever it is, and a
        # shorter one lets a loaded machine's slow reply fail a limit open)
        "store": {"backend": "redis", "url": redis_url, "key_prefix": PREFIX, "timeout_seconds": 2},
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("limits-cluster")
    redis = RedisServer(work)
    redis.start()
    up = ScriptedUpstream(name="limits").start()
    proxies: list[Proxy] = []
    try:
        for i in range(3):
            proxies.append(Proxy(config(redis.url, up, KEYS), work / f"proxy{i}", startup_timeout=15))
        for p in proxies:  # (start() waits for each; the three boot one after the other)
            p.start()
        yield Cluster(redis, up, proxies)
    finally:
        for p in proxies:
            p.stop()
        up.stop()
        redis.stop()


def auth(name: str) -> dict[str, str]:
    return {"authorization": f"Bearer sk-{name}"}


def fresh_minute(need: float) -> None:
    """Wait for the next calendar minute unless ``need`` seconds of this one are left."""
    left = 60 - time.time() % 60
    if left < need:
        time.sleep(left + 0.05)


async def burst(
    cluster: Cluster, name: str, n: int, concurrency: int = 60
) -> list[tuple[int, int, dict[str, str], float, float]]:
    """``n`` chat requests for key ``name``, round-robin over the instances, ``concurrency``
    at a time: (instance, status, headers, sent at, answered at) each."""
    sem = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=20, limits=limits) as client:

        async def one(i: int) -> tuple[int, int, dict[str, str], float, float]:
            p = cluster.proxies[i % len(cluster.proxies)]
            async with sem:
                t0 = time.time()
                r = await client.post(f"{p.base_url}/chat/completions", json=CHAT, headers=auth(name))
                return i % len(cluster.proxies), r.status_code, dict(r.headers), t0, time.time()

        return await asyncio.gather(*(one(i) for i in range(n)))


@contextlib.contextmanager
def first_on_cpu(cluster: Cluster) -> Iterator[None]:
    """The cluster's processes and this one's threads (the client, the scripted upstream)
    run at nice -10 meanwhile: a test of what a pace does gets its pace on a host whose
    cores the rest of the suite keeps busy (each worker gets a core's third there, and an
    answer took long enough that a grant went back before the next take)."""
    groups = [p.proc.pid for p in cluster.proxies if p.proc is not None]
    groups += [cluster.redis.proc.pid] if cluster.redis.proc is not None else []
    threads = [int(t) for t in os.listdir("/proc/self/task")]
    was = {t: os.getpriority(os.PRIO_PROCESS, t) for t in threads}
    groups_were = {g: os.getpriority(os.PRIO_PGRP, g) for g in groups}
    try:  # (a user without CAP_SYS_NICE runs them as they are: an idle host needs no more)
        for g in groups:  # (each its own session: the group is the process and its threads)
            os.setpriority(os.PRIO_PGRP, g, -10)
        for t in threads:
            os.setpriority(os.PRIO_PROCESS, t, -10)
    except PermissionError:
        pass
    try:
        yield
    finally:
        for g, nice in groups_were.items():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.setpriority(os.PRIO_PGRP, g, nice)
        for t, nice in was.items():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.setpriority(os.PRIO_PROCESS, t, nice)


def logs(cluster: Cluster) -> str:
    return "\n".join(f"--- proxy{i} ---\n{p.log(3000)}" for i, p in enumerate(cluster.proxies))


def same_minute(results: list[tuple[int, int, dict[str, str], float, float]]) -> bool:
    return int(min(r[3] for r in results) // 60) == int(max(r[4] for r in results) // 60)


# ---------------------------------------------------------------------------------- a


def test_three_instances_admit_exactly_the_limit_in_one_minute(cluster: Cluster) -> None:
    fresh_minute(20)
    results = asyncio.run(burst(cluster, "team", 300))
    assert same_minute(results), "the burst straddled a minute boundary"
    ok = [r for r in results if r[1] == 200]
    refused = [r for r in results if r[1] == 429]
    assert len(ok) + len(refused) == 300, sorted({r[1] for r in results})
    assert len(ok) == 100, (len(ok), logs(cluster))
    # every instance admitted some, and refused some: the limit is the three's together
    assert all(any(r[0] == i for r in ok) for i in range(3)), [r[0] for r in ok]
    assert all(any(r[0] == i for r in refused) for i in range(3))
    # one atomic counter: each accepted request saw its own remaining, 99 … 0 once each
    assert sorted(int(r[2]["x-ratelimit-remaining-requests"]) for r in ok) == list(range(100))
    assert {r[2]["x-ratelimit-limit-requests"] for r in ok} == {"100"}
    # none refused below the limit: every refusal came after the 100th admission began
    last_ok_sent = max(r[3] for r in ok if r[2]["x-ratelimit-remaining-requests"] == "0")
    assert all(r[4] >= last_ok_sent for r in refused)
    for r in refused:
        h = r[2]
        assert h["x-switchboard-limit"] == "requests", h
        assert 1 <= int(h["retry-after"]) <= 60, h
    # the counter in Redis says the same
    minute = int(results[0][3] // 60)
    assert cluster.redis.client().get(f"{PREFIX}lim:team:requests:m{minute}") == "100"


# ---------------------------------------------------------------------------------- b


def test_the_day_budget_is_settled_with_the_upstreams_usage(cluster: Cluster) -> None:
    n = 24
    usage = [(100 + 7 * i, 10 + 3 * i) for i in range(n)]
    turns = [
        chat_turn(text=f"answer {i}", usage={"prompt_tokens": a, "completion_tokens": b, "total_tokens": a + b})
        for i, (a, b) in enumerate(usage)
    ]
    cluster.up.set_script(turns)
    expected = sum(a + b for a, b in usage)
    body = {"model": "scripted", "messages": [{"role": "user", "content": "x" * 400}]}

    async def run() -> list[int]:
        async with httpx.AsyncClient(timeout=20) as client:

            async def one(i: int) -> int:
                p = cluster.proxies[i % 3]
                stream = i % 2 == 0  # half streamed (usage in the last chunk), half whole answers
                extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
                r = await client.post(f"{p.base_url}/chat/completions", json={**body, **extra}, headers=auth("budget"))
                return r.status_code

            return await asyncio.gather(*(one(i) for i in range(n)))

    day = time.strftime("%Y%m%d", time.gmtime())
    statuses = asyncio.run(run())
    assert statuses == [200] * n, (statuses, cluster.up.describe())
    assert cluster.up.turns_played == n
    r = cluster.redis.client()
    key = f"{PREFIX}lim:budget:tokens_day:d{day}"
    deadline = time.monotonic() + 5  # settled after the client's last byte: wait for the last ones
    got = None
    while time.monotonic() < deadline:
        got = r.get(key)
        if got == str(expected):
            break
        time.sleep(0.05)
    assert got == str(expected), (got, expected, sorted(r.keys(f"{PREFIX}lim:budget:*")))
    assert r.ttl(key) > 0


# ---------------------------------------------------------------------------------- c


def test_redis_down_fails_open_and_back_enforces_exactly(cluster: Cluster) -> None:
    fresh_minute(15)
    before = asyncio.run(burst(cluster, "failover", 10, concurrency=5))
    assert [r[1] for r in before] == [200] * 10
    assert sorted(int(r[2]["x-ratelimit-remaining-requests"]) for r in before) == list(range(20, 30))

    cluster.redis.stop()
    t_down = time.monotonic()
    down = asyncio.run(burst(cluster, "failover", 45, concurrency=15))  # more than the 20 left
    assert [r[1] for r in down] == [200] * 45, ([r[1] for r in down], logs(cluster))
    # fail open: nothing was checked, so nothing is shown
    assert all("x-ratelimit-limit-requests" not in r[2] for r in down)
    for p in cluster.proxies:
        ready = httpx.get(f"{p.url}/readyz", timeout=5)
        assert ready.status_code == 200 and ready.json().get("limits") == "degraded", ready.text
        metrics = httpx.get(f"{p.url}/metrics", timeout=5).text
        degraded = [
            line
            for line in metrics.splitlines()
            if line.startswith("switchboard_limits_degraded_total") and not line.endswith(" 0.0")
        ]
        assert degraded, [line for line in metrics.splitlines() if "limits" in line]
    assert time.monotonic() - t_down < 25  # (the failures were fast: no long timeouts)

    fresh_minute(15)
    cluster.redis.start()  # same port, empty (nothing was persisted)

    # the instances reconnect by themselves: the first requests may still find a dead
    # connection (fail open again); wait until every instance shows its counters again
    async def until_checked() -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            for p in cluster.proxies:
                deadline = time.monotonic() + 10
                while True:
                    r = await client.post(f"{p.base_url}/chat/completions", json=CHAT, headers=auth("failover"))
                    assert r.status_code == 200, r.text
                    if "x-ratelimit-limit-requests" in r.headers:
                        break
                    assert time.monotonic() < deadline, f"instance {p.url} never checked again\n{p.log()}"
                    await asyncio.sleep(0.1)

    asyncio.run(until_checked())
    minute = int(time.time() // 60)
    used = int(cluster.redis.client().get(f"{PREFIX}lim:failover:requests:m{minute}") or 0)
    assert 3 <= used <= 30, used  # the probes above, counted once each; the fail-open ones not at all
    after = asyncio.run(burst(cluster, "failover", 40, concurrency=10))
    assert same_minute(after), "the burst straddled a minute boundary"
    ok = [r for r in after if r[1] == 200]
    # a connection the pool kept from before the restart fails once when next used (the
    # store's pool has no retry): that request fails open too, unchecked and uncounted — a
    # few per instance at most, never a refusal (see the report on issue #54)
    checked = [r for r in ok if "x-ratelimit-limit-requests" in r[2]]
    assert len(ok) - len(checked) <= 10, (len(ok), len(checked), logs(cluster))
    assert len(checked) == 30 - used, (len(checked), used)  # enforced again, exactly: no false 429 below it
    assert sorted(int(r[2]["x-ratelimit-remaining-requests"]) for r in checked) == list(range(30 - used))
    assert all(r[1] == 429 and r[2]["x-switchboard-limit"] == "requests" for r in after if r[1] != 200)
    assert cluster.redis.client().get(f"{PREFIX}lim:failover:requests:m{minute}") == "30"


# ---------------------------------------------------------------------------------- d


def test_sighup_changes_a_limit_without_dropping_a_stream(cluster: Cluster) -> None:
    words = [f"w{i:02d} " for i in range(24)]
    text = "".join(words)
    cluster.up.set_script([chat_turn(text=text, chunk_size=4, frame_delay=0.12)])  # ~3.5 s
    p = cluster.proxies[0]
    assert p.proc is not None
    body = {"model": "scripted", "stream": True, "messages": [{"role": "user", "content": "slow"}]}

    async def run() -> tuple[str, list[str], dict[str, str], dict[str, str], dict[str, str]]:
        async with httpx.AsyncClient(timeout=30) as client:
            r0 = await client.post(f"{p.base_url}/chat/completions", json=CHAT, headers=auth("hup"))
            assert r0.headers["x-ratelimit-limit-requests"] == "50", r0.headers
            got: list[str] = []
            lines: list[str] = []
            async with client.stream("POST", f"{p.base_url}/chat/completions", json=body, headers=auth("hup")) as s:
                assert s.status_code == 200
                it = s.aiter_lines()
                async for line in it:
                    lines.append(line)
                    if line.startswith("data: {") and json.loads(line[6:])["choices"]:
                        got.append(json.loads(line[6:])["choices"][0]["delta"].get("content") or "")
                    if len("".join(got)) >= 8:
                        break
                # mid-stream: a lower limit in the file, SIGHUP to this instance only
                cfg = yaml.safe_load(p.cfg_path.read_text())
                for k in cfg["auth"]["keys"]:
                    if isinstance(k, dict) and k["name"] == "hup":
                        k["limits"]["requests_per_minute"] = 7
                p.cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
                os.kill(p.proc.pid, signal.SIGHUP)
                deadline = time.monotonic() + 5
                while True:  # the reload is logged once done
                    if '"reloaded"' in p.log(20000):
                        break
                    assert time.monotonic() < deadline, p.log()
                    await asyncio.sleep(0.05)
                r1 = await client.post(f"{p.base_url}/chat/completions", json=CHAT, headers=auth("hup"))
                other = await client.post(
                    f"{cluster.proxies[1].base_url}/chat/completions", json=CHAT, headers=auth("hup")
                )
                async for line in it:
                    lines.append(line)
                    if line.startswith("data: {") and json.loads(line[6:])["choices"]:
                        got.append(json.loads(line[6:])["choices"][0]["delta"].get("content") or "")
            return "".join(got), lines, dict(s.headers), dict(r1.headers), dict(other.headers)

    fresh_minute(10)
    got, lines, stream_headers, new, other = asyncio.run(run())
    assert got == text, (got, lines)  # the stream completed intact
    assert lines[-1] == "data: [DONE]" or "data: [DONE]" in lines, lines[-5:]
    assert stream_headers["x-ratelimit-limit-requests"] == "50"  # admitted before the reload
    assert new["x-ratelimit-limit-requests"] == "7", new  # the new limit
    assert int(new["x-ratelimit-remaining-requests"]) == 7 - 3  # the same window's count: 3 so far
    assert other["x-ratelimit-limit-requests"] == "50"  # (only the signalled instance reloaded)
    assert p.proc.poll() is None  # and it is still running


# ---------------------------------------------------------------------------------- e


def test_a_concurrency_slot_lives_with_its_stream_and_dies_with_its_instance(cluster: Cluster, tmp_path: Path) -> None:
    """Two more instances on the module's Redis, a key with one concurrent answer.  A stream
    open longer than the lease keeps its slot (its instance renews it); the slot comes back
    when it ends.  An instance killed (SIGKILL) with a stream open: its slot comes back
    within the lease (15 s), not after an hour."""
    from app.limits import _LEASE

    keys = {"lease": {"concurrent": 1}}
    a = Proxy(config(cluster.redis.url, cluster.up, keys), tmp_path / "a", startup_timeout=15)
    b = Proxy(config(cluster.redis.url, cluster.up, keys), tmp_path / "b", startup_timeout=15)
    a.start()
    b.start()
    words = "".join(f"w{i:02d} " for i in range(40))
    cluster.up.set_script([chat_turn(text=words, chunk_size=4, frame_delay=0.6)] * 2)  # ~24 s each
    body = {"model": "scripted", "stream": True, "messages": [{"role": "user", "content": "long"}]}

    def probe(p: Proxy) -> httpx.Response:
        return httpx.post(f"{p.base_url}/chat/completions", json=CHAT, headers=auth("lease"), timeout=10)

    try:
        with (
            httpx.Client(timeout=60) as c,
            c.stream("POST", f"{b.base_url}/chat/completions", json=body, headers=auth("lease")) as s,
        ):
            assert s.status_code == 200
            t0 = time.monotonic()
            it = s.iter_lines()
            next(it)
            first = probe(a)
            assert first.status_code == 429 and first.headers["x-switchboard-limit"] == "concurrent", first.text
            while time.monotonic() - t0 < _LEASE + 4:  # past the lease: still held (renewed)
                next(it)
            late = probe(a)
            assert late.status_code == 429 and late.headers["x-switchboard-limit"] == "concurrent", late.text
            rest = list(it)
        assert "data: [DONE]" in rest
        assert probe(a).status_code == 200  # ended: the slot is back

        with httpx.Client(timeout=60) as c:
            s = c.send(
                c.build_request("POST", f"{a.base_url}/chat/completions", json=body, headers=auth("lease")), stream=True
            )
            assert s.status_code == 200
            lines = s.iter_lines()  # (kept: a generator dropped closes the answer)
            next(lines)
            held = probe(b)
            assert held.status_code == 429, (held.text, a.log(3000))
            assert a.proc is not None
            os.killpg(a.proc.pid, signal.SIGKILL)  # (its own process group only)
            a.proc.wait(timeout=10)
            killed = time.monotonic()
            s.close()
            while True:
                r = probe(b)
                if r.status_code == 200:
                    break
                assert r.status_code == 429 and r.headers["x-switchboard-limit"] == "concurrent", r.text
                assert time.monotonic() - killed < _LEASE + 3, "the dead instance's slot never came back"
                time.sleep(0.25)
            back = time.monotonic() - killed
        print(f"\nlimits cluster: a killed instance's concurrency slot came back after {back:.1f}s")
        assert back <= _LEASE + 3
    finally:
        a.stop()
        b.stop()


# ---------------------------------------------------------------------------------- e


def test_a_busy_key_is_checked_on_grants_and_stays_exact(cluster: Cluster) -> None:
    fresh_minute(20)
    r = cluster.redis.client()

    def takes() -> int:  # the scripts Redis ran: takes, settlements, grants given back
        return int(r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))

    # each instance 30 requests in a row, fast enough to be granted; then 30 more each,
    # counted: 90 requests, each with a slot to take and release, cost Redis at least 180
    # scripts without grants; with them, the refills and what goes back.  (A grant goes
    # back once unused for 50 ms: on a host whose cores the rest of the suite keeps busy,
    # one answer took longer than that, and every take was a script: first_on_cpu.)
    with first_on_cpu(cluster):
        warmed = asyncio.run(burst(cluster, "busy", 90, concurrency=3))
        before = takes()
        warmed += asyncio.run(burst(cluster, "busy", 90, concurrency=3))
        scripts = takes() - before
        results = asyncio.run(burst(cluster, "busy", 600, concurrency=60))
    assert all(x[1] == 200 for x in warmed), sorted({x[1] for x in warmed})
    assert scripts < 90, scripts
    assert same_minute(warmed + results), "the requests straddled a minute boundary"
    ok = [x for x in results if x[1] == 200]
    refused = [x for x in results if x[1] == 429]
    assert len(ok) + len(refused) == 600, sorted({x[1] for x in results})
    assert len(warmed) + len(ok) == 600, (len(ok), logs(cluster))
    assert all(x[2]["x-switchboard-limit"] == "requests" for x in refused)
    time.sleep(0.5)  # (what the grants left goes back within 75 ms)
    minute = int(results[0][3] // 60)
    assert r.get(f"{PREFIX}lim:busy:requests:m{minute}") == "600"
    assert int(r.get(f"{PREFIX}lim:busy:requests:m{minute}:g") or 0) == 0
    assert r.zcard(f"{PREFIX}lim:busy:concurrent") == 0
