"""The limits' CPU per request with the app called in this process: no server, no sockets
to the client.

``python -m bench.limits`` measures the same thing through ``switchboard serve`` with 8
clients; on a shared machine its "added" figure moves by 100 µs and more between runs of
one build.  Here the app (``create_app``) is called as ASGI, the bench's fake upstream
(``bench/fake_upstream.py``) answers on loopback, and the process's CPU (every thread) is
read around each round of ``--requests`` non-streamed Chat requests, ``--concurrency`` at
once.  Rounds alternate between ``bench.limits``'s free key and its limited key (requests,
tokens and concurrency limited) on one app: on the Redis store (``--backend redis``, our
own redis-server on a free port, stopped by its PID) the limited key's counters are
Redis's, on SQLite they are the process's own.  "added" is the median of the rounds'
differences, each limited round against the free round beside it.

Run: ``.venv/bin/python -m bench.limits_asgi [--backend redis|sqlite] [--requests 2000]
[--rounds 5] [--concurrency 8]`` from the checkout it measures (``-m`` puts the working
directory first on ``sys.path``), with ``>/dev/null``: the app logs each request on
standard output; the figures come on standard error.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson

from bench.limits import BODY, config
from bench.run import Child, paired_added
from bench.store_asgi import make_app, post, run_in_process

KEYS = {"free": b"Bearer sk-free", "limited": b"Bearer sk-limited"}
PATH = "/v1/chat/completions"


async def run(args: argparse.Namespace, work: Path, children: list[Child]) -> None:
    app = await make_app(args.backend, work, children, config)
    raw = orjson.dumps(BODY)
    got: dict[str, list[float]] = {n: [] for n in KEYS}
    async with app.router.lifespan_context(app):
        for r in range(args.rounds):
            for name in KEYS if r % 2 == 0 else reversed(KEYS):
                key = KEYS[name]
                for _ in range(200):  # (warm: the connections, and a busy key's grants)
                    await post(app, PATH, raw, ((b"authorization", key),))
                t0 = time.process_time()
                todo = iter(range(args.requests))  # (shared: the clients take turns from it)

                async def client(todo: Iterator[int] = todo, key: bytes = key) -> None:
                    for _ in todo:
                        if await post(app, PATH, raw, ((b"authorization", key),)) != 200:
                            raise RuntimeError("a request failed")

                await asyncio.gather(*(client() for _ in range(args.concurrency)))
                got[name].append((time.process_time() - t0) / args.requests * 1e6)
    free, limited = (statistics.median(got[n]) for n in KEYS)
    counters = "Redis" if args.backend == "redis" else "memory"
    print(
        f"limits on {counters} counters, concurrency {args.concurrency}: free key {free:.0f} µs, "
        f"limited key {limited:.0f} µs (rounds {min(got['limited']):.0f}–{max(got['limited']):.0f}), "
        f"added {paired_added(got['limited'], got['free']):+.0f} µs a request (paired)",
        file=sys.stderr,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--backend", choices=["redis", "sqlite"], default="redis")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=8)
    run_in_process(run, ap.parse_args(), "bench-limits-asgi-")


if __name__ == "__main__":
    main()
