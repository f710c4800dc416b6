"""The cost of per-key limits (app/limits.py) on the proxy's CPU, per request.

Non-streaming Chat Completions requests to the bench's fake upstream (bench/fake_upstream.py)
through ``switchboard serve`` pinned to one core, three cases in the same run, rounds
alternating between them:

* ``no limits``       — a key without a policy (SQLite store: usage records on);
* ``limits, memory``  — a key with requests_per_minute + tokens_per_minute + concurrent, on
  the in-process counters (SQLite store);
* ``no limits, Redis store`` — the first key on the Redis store (its usage records go to
  Redis streams: the baseline of the next case);
* ``limits, Redis counters`` — the same key on the Redis counters (Redis store, our own
  redis-server on a free port, stopped by its PID); "added" is against the line above.
  For the two Redis cases, per request, figures this machine's load does not move: the
  writes Redis read from the proxy (``total_reads_processed``: round trips, a batch of
  commands in one write is one) and the scripts it ran (``EVALSHA`` calls: takes,
  settlements, grants asked and given back).

Two proxies (the SQLite one serves the first two cases, the Redis one the others), only one
loaded at a time; CPU is utime+stime of the serving process from /proc/<pid>/stat over a
round.  The load generator and the fake upstream share the other core.  Prints a markdown
table of medians (and the spread over rounds).

Run: ``.venv/bin/python -m bench.limits [--requests 2000 --rounds 5 --concurrency 8]``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml
from redis import Redis

from bench.run import Child, cpu_seconds, free_port, paired_added, proc_children, start_fake, start_proxy

LIMITS = {"requests_per_minute": 10_000_000, "tokens_per_minute": 1_000_000_000, "concurrent": 1000}
SECRET = "bench-limits-secret-0123456789abcdef0123456789abcdef"
BODY = {"model": "bench-chat-n20", "messages": [{"role": "user", "content": "Say something, twenty words."}]}


def config(fake_port: int, store: dict) -> dict:
    return {
        "server": {"secret_key": SECRET, "drain": {"announce_seconds": 0}},
        "auth": {
            "keys": [{"name": "free", "key": "sk-free"}, {"name": "limited", "key": "sk-limited", "limits": LIMITS}]
        },
        "providers": [
            {
                "name": "fake",
                "profile": "openai-compatible",
                "protocol": "chat",
                "base_url": f"http://127.0.0.1:{fake_port}/v1",
                "api_key": "sk-fake",
            }
        ],
        "models": [{"name": BODY["model"], "provider": "fake"}],
        "store": store,
    }


async def load(port: int, key: str, n: int, concurrency: int) -> int:
    """``n`` requests, ``concurrency`` at a time; the number answered 200."""
    ok = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=30) as c:
        todo = iter(range(n))

        async def worker() -> None:
            nonlocal ok
            for _ in todo:
                r = await c.post("/v1/chat/completions", json=BODY, headers={"authorization": f"Bearer {key}"})
                ok += r.status_code == 200

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return ok


def start_redis(work: Path) -> tuple[Child, int]:
    """Our own redis-server on a free loopback port (no persistence), stopped by its PID."""
    redis_bin = shutil.which("redis-server") or "/usr/bin/redis-server"
    port = free_port()
    argv = [redis_bin, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    return Child("redis", argv, work / "redis.log", stdout=subprocess.DEVNULL), port


async def main_async(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-limits-"))
    children: list[Child] = []
    try:
        redis, rport = start_redis(work)
        children.append(redis)
        fake, fport = await start_fake(work, args.load_core)
        children.append(fake)
        cmd = [str(Path(sys.executable).parent / "switchboard")]
        procs = {}
        for name, store in (
            ("sqlite", {"backend": "sqlite", "path": str(work / "s.db")}),
            ("redis", {"backend": "redis", "url": f"redis://127.0.0.1:{rport}/0", "key_prefix": "bench:"}),
        ):
            cfg = work / f"{name}.yaml"
            cfg.write_text(yaml.safe_dump(config(fport, store)))
            (work / name).mkdir()
            child, port, _ = await start_proxy(cmd, cfg, work / name, args.proxy_core)
            children.append(child)
            procs[name] = (child, port)
        cases = {
            "no limits": (procs["sqlite"], "sk-free"),
            "limits, memory counters": (procs["sqlite"], "sk-limited"),
            "no limits, Redis store": (procs["redis"], "sk-free"),
            "limits, Redis counters": (procs["redis"], "sk-limited"),
        }
        for (_, port), key in cases.values():  # warm-up: connections, caches, JIT-less paths
            await load(port, key, args.requests // 4, args.concurrency)
        got: dict[str, list[float]] = {k: [] for k in cases}
        calls: dict[str, list[tuple[float, float]]] = {k: [] for k in cases if "Redis" in k}
        rclient = Redis(port=rport, socket_timeout=5)

        def redis_counts() -> tuple[int, int]:  # (reads, scripts) so far
            reads = int(rclient.info("stats")["total_reads_processed"])
            return reads, int(rclient.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))

        for r in range(args.rounds):
            order = list(cases) if r % 2 == 0 else list(reversed(cases))
            for name in order:
                (child, port), key = cases[name]
                pids = proc_children(child.pid)
                n0 = redis_counts() if name in calls else (0, 0)
                c0, t0 = cpu_seconds(pids), time.perf_counter()
                ok = await load(port, key, args.requests, args.concurrency)
                c1, t1 = cpu_seconds(pids), time.perf_counter()
                if name in calls:  # (less the two INFO of redis_counts)
                    n1 = redis_counts()
                    calls[name].append(((n1[0] - n0[0] - 2) / args.requests, (n1[1] - n0[1]) / args.requests))
                if ok != args.requests:
                    raise RuntimeError(f"{name}: {args.requests - ok} requests failed\n{child.log_tail()}")
                got[name].append((c1 - c0) / args.requests * 1e6)
                print(
                    f"round {r + 1} {name}: {got[name][-1]:.0f} µs CPU/request, {args.requests / (t1 - t0):.0f} req/s",
                    file=sys.stderr,
                )
        print(
            f"\n{args.requests} non-streaming Chat requests per round, {args.rounds} rounds, "
            f"concurrency {args.concurrency}, proxy on core {args.proxy_core}\n"
        )
        print(
            "| case | CPU per request (median) | rounds min–max | added | paired | Redis round trips, scripts a request |"
        )
        print("|---|---|---|---|---|---|")
        for name, xs in got.items():
            med = statistics.median(xs)
            refs = got["no limits, Redis store"] if "Redis counters" in name else got["no limits"]
            ref = statistics.median(refs)
            added = paired = "—"
            if not name.startswith("no limits"):
                added = f"{med - ref:+.0f} µs ({(med - ref) / ref:+.1%})"
                paired = f"{paired_added(xs, refs):+.0f} µs"
            cmds = "—"
            if name in calls:
                trips = statistics.median(x for x, _ in calls[name])
                cmds = f"{trips:.2f}, {statistics.median(y for _, y in calls[name]):.2f}"
            print(f"| {name} | {med:.0f} µs | {min(xs):.0f}–{max(xs):.0f} µs | {added} | {paired} | {cmds} |")
    finally:
        for child in reversed(children):
            child.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--proxy-core", type=int, default=0)
    ap.add_argument("--load-core", type=int, default=1)
    args = ap.parse_args()
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
