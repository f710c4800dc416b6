"""Runtime keys (app/keys.py) on a cluster: three real ``switchboard serve`` processes on one
real ``redis-server``, all on 127.0.0.1 (the setup of tests/system/test_limits_cluster.py:
our own Redis on a free port, stopped by its PID; each proxy in its own process group).

a. A key created through instance 0's admin API works on instances 1 and 2 within a
   second, with its limits (the counters are shared: its requests-per-minute limit is the
   three's together); rotated through instance 2, the new secret works everywhere within a
   second and the old one still works (grace); revoked through instance 0, it is refused
   everywhere within a second.
b. No request in flight is cut: a slow stream admitted on instance 1 before the key is
   revoked ends intact, and under a load of requests on the three instances while the key
   is revoked, every answer is a whole 200 or a 401, never an error or a cut answer.
c. ``switchboard keys create`` on the same backend (no server): the key works on the three
   instances within a second; revoked through instance 1, ``switchboard audit`` lists both
   changes with who made them (``cli:…``, ``admin:…``).

The times measured (create → usable, revoke → refused, per instance) are printed (``-s``).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.system.test_limits_cluster import E2E, SECRET, RedisServer, config

if str(E2E) not in sys.path:
    sys.path.insert(0, str(E2E))
from proxy_harness import Proxy, proxy_python
from scripted_upstream import ScriptedUpstream, chat_turn

ADMIN = "sk-cluster-admin"
CHAT = {"model": "demo", "messages": [{"role": "user", "content": "hi"}]}
REPO = Path(__file__).resolve().parent.parent.parent


class Cluster:
    def __init__(self, redis: RedisServer, up: ScriptedUpstream, proxies: list[Proxy]) -> None:
        self.redis = redis
        self.up = up
        self.proxies = proxies


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("keys-cluster")
    redis = RedisServer(work)
    redis.start()
    up = ScriptedUpstream(name="keys").start()
    proxies: list[Proxy] = []
    try:
        for i in range(3):
            cfg = config(redis.url, up, {})
            cfg["auth"]["admin_keys"] = [ADMIN]
            cfg["store"]["key_prefix"] = "sbkeys:"
            proxies.append(Proxy(cfg, work / f"proxy{i}", startup_timeout=15))
        for p in proxies:
            p.start()
        yield Cluster(redis, up, proxies)
    finally:
        for p in proxies:
            p.stop()
        up.stop()
        redis.stop()


def admin() -> dict[str, str]:
    return {"authorization": f"Bearer {ADMIN}"}


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def until(client: httpx.AsyncClient, p: Proxy, key: str, status: int, t0: float, limit: float = 1.0) -> float:
    """Seconds from ``t0`` until ``p`` answers ``key`` with ``status``; fails past ``limit``."""
    while True:
        r = await client.post(f"{p.base_url}/chat/completions", json=CHAT, headers=bearer(key))
        if r.status_code == status:
            return time.monotonic() - t0
        assert time.monotonic() - t0 < limit, f"{p.url}: still {r.status_code} after {limit}s: {r.text}\n{p.log()}"
        await asyncio.sleep(0.01)


def test_created_rotated_and_revoked_through_one_instance_everywhere_within_a_second(cluster: Cluster) -> None:
    p0, p1, p2 = cluster.proxies

    async def run() -> dict[str, list[float]]:
        took: dict[str, list[float]] = {"create": [], "rotate": [], "revoke": []}
        async with httpx.AsyncClient(timeout=10) as c:
            r = await c.post(
                f"{p0.url}/v1/admin/keys",
                json={"name": "newcomer", "limits": {"requests_per_minute": 1000}},
                headers=admin(),
            )
            assert r.status_code == 201, r.text
            t0 = time.monotonic()
            secret = r.json()["secret"]
            took["create"] = [await until(c, p, secret, 200, t0) for p in (p1, p2)]
            # its limits hold on every instance, on the shared counters
            answers = [
                await c.post(f"{p.base_url}/chat/completions", json=CHAT, headers=bearer(secret)) for p in (p0, p1, p2)
            ]
            assert [a.headers["x-ratelimit-limit-requests"] for a in answers] == ["1000"] * 3
            left = [int(a.headers["x-ratelimit-remaining-requests"]) for a in answers]
            assert left[0] > left[1] > left[2], left

            r = await c.post(f"{p2.url}/v1/admin/keys/newcomer/rotate", json={"grace_seconds": 60}, headers=admin())
            assert r.status_code == 200, r.text
            t0 = time.monotonic()
            fresh = r.json()["secret"]
            took["rotate"] = [await until(c, p, fresh, 200, t0) for p in (p0, p1)]
            for p in (p0, p1, p2):  # the old secret still works during the grace
                old = await c.post(f"{p.base_url}/chat/completions", json=CHAT, headers=bearer(secret))
                assert old.status_code == 200, old.text

            r = await c.delete(f"{p0.url}/v1/admin/keys/newcomer", headers=admin())
            assert r.status_code == 200, r.text
            t0 = time.monotonic()
            took["revoke"] = [await until(c, p, fresh, 401, t0) for p in (p1, p2)]
            for p in (p0, p1, p2):
                for key in (secret, fresh):
                    gone = await c.post(f"{p.base_url}/chat/completions", json=CHAT, headers=bearer(key))
                    assert gone.status_code == 401, gone.text
        return took

    took = asyncio.run(run())
    print(f"\nkeys cluster: seconds until seen on the other instances: {json.dumps(took)}")
    assert all(t < 1.0 for ts in took.values() for t in ts), took


def test_a_revocation_cuts_no_request_in_flight(cluster: Cluster) -> None:
    p0, p1, p2 = cluster.proxies
    text = "".join(f"w{i:02d} " for i in range(20))
    cluster.up.set_script([chat_turn(text=text, chunk_size=4, frame_delay=0.1)])  # ~2 s
    body = {"model": "scripted", "stream": True, "messages": [{"role": "user", "content": "slow"}]}

    async def run() -> tuple[str, list[int], float]:
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(f"{p0.url}/v1/admin/keys", json={"name": "leaver"}, headers=admin())
            secret = r.json()["secret"]
            await until(c, p1, secret, 200, time.monotonic())
            await until(c, p2, secret, 200, time.monotonic())
            got: list[str] = []
            statuses: list[int] = []
            stop = asyncio.Event()

            async def load(p: Proxy) -> None:  # requests on every instance while the key goes
                while not stop.is_set():
                    a = await c.post(f"{p.base_url}/chat/completions", json=CHAT, headers=bearer(secret))
                    statuses.append(a.status_code)
                    if a.status_code == 200:
                        assert a.json()["choices"][0]["message"]["content"], a.text
                    await asyncio.sleep(0.005)

            loads = [asyncio.create_task(load(p)) for p in (p0, p1, p2)]
            async with c.stream("POST", f"{p1.base_url}/chat/completions", json=body, headers=bearer(secret)) as s:
                assert s.status_code == 200
                it = s.aiter_lines()
                async for line in it:
                    if line.startswith("data: {") and json.loads(line[6:])["choices"]:
                        got.append(json.loads(line[6:])["choices"][0]["delta"].get("content") or "")
                    if len("".join(got)) >= 8:
                        break
                r = await c.delete(f"{p0.url}/v1/admin/keys/leaver", headers=admin())
                assert r.status_code == 200
                t0 = time.monotonic()
                refused = max([await until(c, p, secret, 401, t0) for p in (p0, p1, p2)])
                await asyncio.sleep(0.3)
                stop.set()
                await asyncio.gather(*loads)
                async for line in it:
                    if line.startswith("data: {") and json.loads(line[6:])["choices"]:
                        got.append(json.loads(line[6:])["choices"][0]["delta"].get("content") or "")
            return "".join(got), statuses, refused

    got, statuses, refused = asyncio.run(run())
    assert got == text  # the stream admitted before the revocation ended intact
    assert set(statuses) <= {200, 401}, statuses
    assert statuses.count(200) > 0 and statuses[-1] == 401
    print(
        f"\nkeys cluster: under load, refused everywhere {refused:.3f}s after the revocation; {len(statuses)} requests"
    )
    assert refused < 1.0


def test_the_cli_on_the_backend_and_the_audit(cluster: Cluster) -> None:
    p0 = cluster.proxies[0]
    argv = [str(proxy_python()), "-m", "app.cli", "keys", "create", "--config", str(p0.cfg_path), "from-cli"]
    out = subprocess.run(argv + ["--models", "demo"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    made = json.loads(out.stdout.strip().splitlines()[-1])
    t0 = time.monotonic()
    assert "shown once" in out.stderr

    async def run() -> list[float]:
        async with httpx.AsyncClient(timeout=10) as c:
            return [await until(c, p, made["secret"], 200, t0, limit=1.5) for p in cluster.proxies]

    took = asyncio.run(run())  # (the 1.5 s include the CLI's own exit)
    r = httpx.delete(f"{cluster.proxies[1].url}/v1/admin/keys/from-cli", headers=admin(), timeout=10)
    assert r.status_code == 200, r.text
    argv = [str(proxy_python()), "-m", "app.cli", "audit", "--config", str(p0.cfg_path), "--json"]
    out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    entries: list[dict[str, Any]] = [json.loads(line) for line in out.stdout.splitlines()]
    seen = [(e["action"], e["key"], e["actor"].split(":")[0]) for e in reversed(entries) if e["key"] == "from-cli"]
    assert seen == [("create", "from-cli", "cli"), ("revoke", "from-cli", "admin")], seen
    mine = [e for e in entries if e["key"] == "from-cli"]  # (newest first)
    assert mine[0]["detail"] == {} and mine[1]["detail"] == {"models": ["demo"]}
    print(f"\nkeys cluster: created with the CLI, usable on the three after {took}")
    assert SECRET not in out.stdout and made["secret"] not in out.stdout


def test_the_console_sums_the_three_instances(cluster: Cluster) -> None:
    """The console's "now" panel on any instance counts the three (their windows shared
    through Redis every second): requests since start equal the sum of the three /metrics."""
    for p, n in zip(cluster.proxies, (3, 5, 7), strict=True):
        for _ in range(n):
            assert (
                httpx.post(
                    f"{p.base_url}/chat/completions", json=CHAT, headers=bearer("sk-probe"), timeout=10
                ).status_code
                == 200
            )

    def scraped() -> float:
        total = 0.0
        for p in cluster.proxies:
            for line in httpx.get(f"{p.url}/metrics", timeout=10).text.splitlines():
                if line.startswith("switchboard_requests_total{"):
                    total += float(line.rsplit(" ", 1)[1])
        return total

    want = scraped()
    for p in cluster.proxies:
        deadline = time.monotonic() + 5
        while True:
            now = httpx.get(f"{p.url}/console/api/overview", headers=admin(), timeout=10).json()["now"]
            if now["instances"] == 3 and now["requests_total"] == want:
                break
            assert time.monotonic() < deadline, (now["instances"], now["requests_total"], want)
            time.sleep(0.2)


def test_the_console_of_one_instance_shows_the_three_in_chromium(cluster: Cluster, tmp_path: Path) -> None:
    """Debian's Chromium (tests/system/browser.py) signs in to instance 1's console: it says
    three instances, its requests since start are the three /metrics' sum, and its keys
    table says what /v1/admin/usage says; no console error."""
    from tests.system.browser import chromium, driver

    exe, env = chromium(REPO / ".e2e" / "chromium")
    script = driver(REPO / ".e2e" / "console-browser")
    for p, n in zip(cluster.proxies, (4, 2, 6), strict=True):
        for _ in range(n):
            assert (
                httpx.post(
                    f"{p.base_url}/chat/completions", json=CHAT, headers=bearer("sk-probe"), timeout=10
                ).status_code
                == 200
            )
    total = 0.0
    for p in cluster.proxies:
        for line in httpx.get(f"{p.url}/metrics", timeout=10).text.splitlines():
            if line.startswith("switchboard_requests_total{"):
                total += float(line.rsplit(" ", 1)[1])
    job = {
        "mode": "cluster",
        "exe": str(exe),
        "env": env,
        "userDataDir": str(tmp_path / "profile"),
        "base": cluster.proxies[1].url,
        "adminKey": ADMIN,
        "expectScope": "(3 instances)",
        "expectTotal": f"{int(total):,}",
        "screenshot": str(tmp_path / "console.png"),
    }
    (tmp_path / "job.json").write_text(json.dumps(job))
    time.sleep(1.5)  # (the usage records written: each instance writes them every second)
    node = subprocess.run(
        ["node", str(script), str(tmp_path / "job.json")],
        cwd=script.parent,
        capture_output=True,
        text=True,
        timeout=180,
    )
    got = json.loads(node.stdout.strip().splitlines()[-1])
    assert "error" not in got, (got["error"], json.dumps(got["steps"])[:3000])
    assert got["consoleErrors"] == [] and got["pageErrors"] == [], got
    seen = got["steps"][0]["snapshot"]
    usage = httpx.get(
        f"{cluster.proxies[2].base_url}/admin/usage",
        params={"by": "key", "since": time.strftime("%Y-%m-%d", time.gmtime())},
        headers=admin(),
        timeout=10,
    ).json()["data"]
    rows = {r["data"]["key"]: r["cells"] for r in seen["keys"]}
    for u in usage:  # (every request of the module so far, on the three, as the usage records say)
        assert int(rows[u["key"]][2].replace(",", "")) == u["requests"], (u, rows.get(u["key"]))
    print(f"\nkeys cluster: the console of one instance counted {job['expectTotal']} requests on three")
