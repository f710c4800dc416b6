"""The cost of storing a response (app/stored.py, app/store.py) on the proxy's CPU, per request.

Non-streaming requests to the bench's fake upstream (bench/fake_upstream.py, a Chat
upstream) through ``switchboard serve`` pinned to one core, in the same run, rounds
alternating between the cases:

* ``chat``                      — a Chat Completions request (no store on its path);
* ``responses, store: false``   — a Responses request that stores nothing (what Codex sends);
* ``responses, stored``         — the same request with ``store`` left out (the default: the
  answer is stored), on the SQLite store and on the Redis store (our own redis-server on a
  free port, stopped by its PID).

Two proxies (one per store backend), only one loaded at a time.  CPU is utime+stime of the
serving process from /proc/<pid>/stat over a round.  "added" is the stored case against
``store: false`` on the same proxy.  The load generator and the fake upstream share the
other core.  Prints a markdown table of medians and the spread over rounds.

Run: ``.venv/bin/python -m bench.store_cost [--requests 2000 --rounds 5 --concurrency 8]``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.limits import start_redis
from bench.run import Child, cpu_seconds, paired_added, proc_children, start_fake, start_proxy

SECRET = "bench-store-secret-0123456789abcdef0123456789abcdef01"
MODEL = "bench-chat-n20"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Say something, twenty words."}]}
RESPONSES = {"model": MODEL, "input": "Say something, twenty words."}
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", CHAT),
    "responses, store: false": ("/v1/responses", {**RESPONSES, "store": False}),
    "responses, stored": ("/v1/responses", RESPONSES),
}


def config(fake_port: int, store: dict[str, Any]) -> dict[str, Any]:
    return {
        "server": {"secret_key": SECRET, "drain": {"announce_seconds": 0}},
        "providers": [
            {
                "name": "fake",
                "profile": "openai-compatible",
                "protocol": "chat",
                "base_url": f"http://127.0.0.1:{fake_port}/v1",
                "api_key": "sk-fake",
            }
        ],
        "models": [{"name": MODEL, "provider": "fake"}],
        "store": store,
        "usage": {"enabled": False},  # (the usage records' cost is not the store's)
    }


async def load(port: int, path: str, body: dict[str, Any], n: int, concurrency: int) -> int:
    """``n`` requests, ``concurrency`` at a time; the number answered 200."""
    ok = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=30) as c:
        todo = iter(range(n))

        async def worker() -> None:
            nonlocal ok
            for _ in todo:
                r = await c.post(path, json=body)
                ok += r.status_code == 200

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return ok


async def main_async(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-store-"))
    children: list[Child] = []
    try:
        redis, rport = start_redis(work)
        children.append(redis)
        fake, fport = await start_fake(work, args.load_core)
        children.append(fake)
        cmd = [str(Path(sys.executable).parent / "switchboard")]
        cases: dict[str, tuple[int, int, str, dict[str, Any]]] = {}
        for backend, store in (
            ("SQLite", {"backend": "sqlite", "path": str(work / "s.db")}),
            ("Redis", {"backend": "redis", "url": f"redis://127.0.0.1:{rport}/0", "key_prefix": "bench:"}),
        ):
            cfg = work / f"{backend}.yaml"
            cfg.write_text(yaml.safe_dump(config(fport, store)))
            (work / backend).mkdir()
            child, port, _ = await start_proxy(cmd, cfg, work / backend, args.proxy_core)
            children.append(child)
            for name, (path, body) in CASES.items():
                cases[f"{name} ({backend})"] = (child.pid, port, path, body)
        for _, port, path, body in cases.values():  # warm-up: connections, caches, the files
            await load(port, path, body, args.requests // 4, args.concurrency)
        got: dict[str, list[float]] = {k: [] for k in cases}
        for r in range(args.rounds):
            order = list(cases) if r % 2 == 0 else list(reversed(cases))
            for name in order:
                pid, port, path, body = cases[name]
                pids = proc_children(pid)
                c0, t0 = cpu_seconds(pids), time.perf_counter()
                ok = await load(port, path, body, args.requests, args.concurrency)
                c1, t1 = cpu_seconds(pids), time.perf_counter()
                if ok != args.requests:
                    raise RuntimeError(f"{name}: {args.requests - ok} requests failed")
                got[name].append((c1 - c0) / args.requests * 1e6)
                print(
                    f"round {r + 1} {name}: {got[name][-1]:.0f} µs CPU/request, {args.requests / (t1 - t0):.0f} req/s",
                    file=sys.stderr,
                )
        print(
            f"\n{args.requests} non-streaming requests per round, {args.rounds} rounds, "
            f"concurrency {args.concurrency}, proxy on core {args.proxy_core}\n"
        )
        print("| case | CPU per request (median) | rounds min–max | added by the store | paired |")
        print("|---|---|---|---|---|")
        for name, xs in got.items():
            med = statistics.median(xs)
            added = paired = "—"
            if name.startswith("responses, stored"):
                backend = name[name.index("(") :]
                refs = got[f"responses, store: false {backend}"]
                ref = statistics.median(refs)
                added = f"{med - ref:+.0f} µs ({(med - ref) / ref:+.1%})"
                paired = f"{paired_added(xs, refs):+.0f} µs"
            print(f"| {name} | {med:.0f} µs | {min(xs):.0f}–{max(xs):.0f} µs | {added} | {paired} |")
    finally:
        for child in reversed(children):
            child.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--proxy-core", type=int, default=0)
    ap.add_argument("--load-core", type=int, default=1)
    args = ap.parse_args()
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
