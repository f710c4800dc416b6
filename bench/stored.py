"""The cost of a stored turn: ``previous_response_id`` + ``store`` through the proxy (SQLite
and Redis) against the same turn sent stateless, in the same run.

Theory of operation
-------------------
The fake upstream (``bench/fake_upstream.py``, a Chat upstream) answers every request with
20 text chunks and a tool call.  For each store backend a proxy is started (SQLite in a
temporary file; Redis on a ``redis-server`` this script starts on a free port, stopped by
its PID) and a conversation of ``--depth`` stored turns is built.  Then, over one keep-alive
connection, non-streaming Responses requests alternate in rounds between

* **stateless**: ``store: false`` with the whole conversation in ``input`` (what Codex
  sends): no store I/O at all;
* **stored**: ``previous_response_id`` = the last stored turn + the new user message,
  ``store`` absent (true): the proxy reads the chain (one ``get`` + one multi-get), rebuilds
  the same input for the upstream, answers, then writes the new record (renewing the
  chain's TTL).

Both send the upstream the same conversation, so the difference is the store's work.
Reported: p50/p99 latency per kind, the added p50 in ms and the ratio stored/stateless.

Run: ``python -m bench.stored [--depth 10] [--requests 300] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.run import HOST, ROOT, free_port, start_fake, start_proxy
from bench.ws_turns import fake_chat_config

MODEL = "bench-chat-n20"
SECRET = "bench-stored-secret-0123456789abcdef0123456789abcdef"


def start_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", HOST, "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((HOST, port), timeout=0.2):
                return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("redis-server did not start")


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def outputs_for(output: list[Any]) -> list[Any]:
    """The tool outputs a client sends back for the calls of an answer."""
    return [
        {"type": "function_call_output", "call_id": o["call_id"], "output": "ok"}
        for o in output
        if o.get("type") == "function_call"
    ]


async def build_chain(c: httpx.AsyncClient, depth: int) -> tuple[str, list[Any], list[Any]]:
    """``depth`` stored turns: the last id, the whole conversation as items, and the items a
    next turn sends (the last answer's tool outputs and a user message)."""
    prev = None
    history: list[Any] = []
    new = [user("turn 0")]
    for i in range(depth):
        body: dict[str, Any] = {"model": MODEL, "input": new}
        if prev:
            body["previous_response_id"] = prev
        r = await c.post("/v1/responses", json=body)
        if r.status_code != 200:
            raise SystemExit(f"turn {i}: HTTP {r.status_code}: {r.text[:400]}")
        obj = r.json()
        prev = obj["id"]
        history += [*new, *obj["output"]]
        new = [*outputs_for(obj["output"]), user(f"turn {i + 1}")]
    assert prev is not None
    return prev, history, new


async def timed(c: httpx.AsyncClient, body: dict[str, Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = await c.post("/v1/responses", json=body)
        out.append(time.perf_counter() - t)
        if r.status_code != 200:
            raise SystemExit(f"HTTP {r.status_code}: {r.text[:300]}")
    return out


def p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


async def measure(port: int, args: argparse.Namespace) -> dict[str, list[float]]:
    async with httpx.AsyncClient(base_url=f"http://{HOST}:{port}", timeout=30) as c:
        last, history, new = await build_chain(c, args.depth)
        stateless = {"model": MODEL, "input": [*history, *new], "store": False}
        stored = {"model": MODEL, "input": new, "previous_response_id": last}
        await timed(c, stateless, 20)  # warm-up
        await timed(c, stored, 20)
        got: dict[str, list[float]] = {"stateless": [], "stored": []}
        per = max(1, args.requests // args.rounds)
        for rnd in range(args.rounds):
            order = ("stateless", "stored") if rnd % 2 == 0 else ("stored", "stateless")
            for kind in order:
                got[kind] += await timed(c, stateless if kind == "stateless" else stored, per)
        return got


async def main_async(args: argparse.Namespace) -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="sb-bench-store-") as tmp:
        work = Path(tmp)
        fake, fport = await start_fake(work, None)
        redis, rport = start_redis(work)
        try:
            for backend in ("sqlite", "redis"):
                cfg = work / f"{backend}.yaml"
                store: dict[str, Any] = {"backend": backend, "path": str(work / "store.db")}
                if backend == "redis":
                    store["url"] = f"redis://{HOST}:{rport}/0"
                conf = fake_chat_config(fport, MODEL, store=store)
                conf.setdefault("server", {})["secret_key"] = SECRET  # (required with the Redis store)
                cfg.write_text(json.dumps(conf))
                proxy, port, _ = await start_proxy([str(ROOT / ".venv/bin/switchboard")], cfg, work, None)
                try:
                    got = await measure(port, args)
                finally:
                    proxy.stop()
                s50, d50 = p(got["stateless"], 0.5), p(got["stored"], 0.5)
                rows.append(
                    (backend, s50, p(got["stateless"], 0.99), d50, p(got["stored"], 0.99), d50 - s50, d50 / s50)
                )
        finally:
            os.kill(redis.pid, signal.SIGTERM)
            redis.wait(timeout=5)
            fake.stop()
    print(
        f"# stored turn vs stateless turn: depth {args.depth}, {args.requests} requests per kind, "
        f"non-streaming Responses → Chat upstream (20 chunks), sequential, one connection\n"
    )
    print("| store | stateless p50 (ms) | p99 | stored p50 (ms) | p99 | added p50 (ms) | ratio p50 |")
    print("|---|---|---|---|---|---|---|")
    for b, s50, s99, d50, d99, add, ratio in rows:
        print(f"| {b} | {s50:.2f} | {s99:.2f} | {d50:.2f} | {d99:.2f} | {add:+.2f} | {ratio:.2f}× |")
    print(f"\n(all requests of {args.rounds} alternating rounds; client, proxy, upstream and Redis on one machine)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depth", type=int, default=10, help="stored turns before the measured one")
    ap.add_argument("--requests", type=int, default=300, help="measured requests per kind")
    ap.add_argument("--rounds", type=int, default=3)
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
