"""The store's CPU per request with the app called in this process: no server, no sockets
to the client, one request at a time (or ``--concurrency`` at once).

``python -m bench.store_cost`` measures the same thing through ``switchboard serve`` with 8
clients, but its "added" figure moves by about 40 µs from run to run on a shared machine.
Here the noise of the server and the load generator is gone: the app (``create_app``) is
called as ASGI, the bench's fake upstream (``bench/fake_upstream.py``) answers on loopback,
and the process's CPU (every thread: SQLite's writer counts) is read around each round of
``--requests`` requests.  Rounds alternate between ``store: false`` and the stored case;
"added" is the difference of their medians.  With no other request in flight, each put's
round trip wakes an idle event loop, so the figures are higher than the server's.  With
``--concurrency 8`` the puts of the requests in flight meet in one loop turn and share a
batch, and the loop is never idle: lower than the server's.

Run: ``.venv/bin/python -m bench.store_asgi [--backend sqlite|redis] [--requests 2000]
[--rounds 5] [--concurrency 1]`` from the checkout it measures (``-m`` puts the working
directory first on ``sys.path``).  Redis is our own redis-server on a free port, stopped
by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import orjson
import uvloop
import yaml

from app.config import load_config
from app.main import create_app
from bench.limits import start_redis
from bench.run import Child, start_fake
from bench.store_cost import CASES, config
from bench.store_put import wait_port
from tests.upstream_io import asgi_post


async def post(app: Any, path: str, body: bytes, headers: tuple[tuple[bytes, bytes], ...] = ()) -> int:
    """One JSON POST to ``app`` (``tests/upstream_io.asgi_post``); the answer's status."""
    status = 0

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await asgi_post(app, path, body, send, headers)
    return status


async def make_app(
    backend: str, work: Path, children: list[Child], config: Callable[[int, dict[str, Any]], dict[str, Any]]
) -> Any:
    """The app (``create_app``) of ``config(fake upstream's port, store)``, in front of the
    bench's fake upstream, on the ``backend`` store (Redis: our own redis-server); the
    processes it started go to ``children``."""
    fake, fport = await start_fake(work, None)
    children.append(fake)
    if backend == "redis":
        redis, rport = start_redis(work)
        children.append(redis)
        wait_port(rport)
        store: dict[str, Any] = {"backend": "redis", "url": f"redis://127.0.0.1:{rport}/0", "key_prefix": "bench:"}
    else:
        store = {"backend": "sqlite", "path": str(work / "s.db")}
    (work / "c.yaml").write_text(yaml.safe_dump(config(fport, store)))
    return create_app(load_config(str(work / "c.yaml")))


def run_in_process(
    run: Callable[[argparse.Namespace, Path, list[Child]], Coroutine[Any, Any, None]],
    args: argparse.Namespace,
    prefix: str,
) -> None:
    """``run`` on uvloop in a work folder of its own, which goes afterwards with every
    process it started."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    children: list[Child] = []
    try:
        uvloop.run(run(args, work, children))
    finally:
        for child in reversed(children):
            child.stop()
        shutil.rmtree(work, ignore_errors=True)


async def run(args: argparse.Namespace, work: Path, children: list[Child]) -> None:
    app = await make_app(args.backend, work, children, config)
    names = ["responses, store: false", "responses, stored"]
    got: dict[str, list[float]] = {n: [] for n in names}
    async with app.router.lifespan_context(app):
        for _ in range(args.rounds):
            for name in names:
                path, body = CASES[name]
                raw = orjson.dumps(body)
                for _ in range(100):  # (warm: the connections, the file)
                    await post(app, path, raw)
                t0 = time.process_time()
                todo = iter(range(args.requests))  # (shared: the clients take turns from it)

                async def client(todo: Iterator[int] = todo, path: str = path, raw: bytes = raw) -> None:
                    for _ in todo:
                        if await post(app, path, raw) != 200:
                            raise RuntimeError(f"{path}: a request failed")

                await asyncio.gather(*(client() for _ in range(args.concurrency)))
                got[name].append((time.process_time() - t0) / args.requests * 1e6)
    plain, stored = (statistics.median(got[n]) for n in names)
    print(
        f"{args.backend}: store: false {plain:.0f} µs, stored {stored:.0f} µs "
        f"(rounds {min(got[names[1]]):.0f}–{max(got[names[1]]):.0f}), added {stored - plain:+.0f} µs a request"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--backend", choices=["sqlite", "redis"], default="sqlite")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=1)
    run_in_process(run, ap.parse_args(), "bench-store-asgi-")


if __name__ == "__main__":
    main()
