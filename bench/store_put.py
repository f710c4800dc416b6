"""A put alone (app/store.py): its CPU in one process, without a server around it.

``Store.put`` of a record shaped as a bench Responses answer (a twenty-word message, its
usage, the echoed request fields), first one at a time, then four at a time (one batch),
on the SQLite store (a temp file) and on the Redis store (our own redis-server on a free
port, stopped by its PID).  CPU is the process's (every thread: SQLite's writer counts), and
the loop thread's alone; per put.  Also the record's own encoding (orjson, then zstd, with
zlib, what earlier versions used, beside it), on this record and on a Codex turn's.

Run: ``.venv/bin/python -m bench.store_put [--puts 4000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import shutil
import socket
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import orjson
import uvloop

from app.metrics import Metrics
from app.store import _COMPRESS_FROM as store_compress_from
from app.store import Record, open_store
from app.store import _codec as store_codec
from bench.codex_body import codex_request
from bench.limits import start_redis
from bench.run import Child
from providers.config import StoreCfg

_RESPONSE: dict[str, Any] = {
    "object": "response",
    "created_at": 1765000000,
    "status": "completed",
    "model": "bench-chat-n20",
    "output": [
        {
            "type": "message",
            "id": "msg_0123456789abcdef0123456789abcdef",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": " ".join(["word"] * 20), "annotations": []}],
        }
    ],
    "usage": {"input_tokens": 10, "output_tokens": 20, "total_tokens": 30},
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
    "store": True,
    "text": {"format": {"type": "text"}},
    "truncation": "disabled",
}
_INPUT = [
    {"id": "msg_in", "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say something."}]}
]


def record(i: int) -> Record:
    rid = f"resp_{i:032x}"
    return Record(
        id=rid, owner="bench", response={**_RESPONSE, "id": rid}, input=_INPUT, provider="fake", upstream="chat"
    )


def wait_port(port: int, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def per_call(f: Any, n: int = 20000) -> float:
    t0 = time.thread_time()
    for _ in range(n):
        f()
    return (time.thread_time() - t0) / n * 1e6


async def puts(cfg: StoreCfg, n: int) -> list[str]:
    store = open_store(cfg, Metrics())
    assert store is not None
    out = []
    try:
        await store.put(record(-1))  # (opens the file, the connection)
        for at_once in (1, 4):
            t0, p0 = time.thread_time(), time.process_time()
            for i in range(0, n, at_once):
                await asyncio.gather(*(store.put(record(i + j)) for j in range(at_once)))
            loop, proc = (time.thread_time() - t0) / n * 1e6, (time.process_time() - p0) / n * 1e6
            out.append(f"| {cfg.backend} | {at_once} | {proc:.0f} µs | {loop:.0f} µs |")
    finally:
        await store.aclose()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--puts", type=int, default=4000)
    args = ap.parse_args()
    raw = orjson.dumps(record(0))
    print(f"record: {len(raw)} bytes of JSON, {len(record(0).encode())} as stored")
    print(f"orjson {per_call(lambda: orjson.dumps(record(0))):.1f} µs")
    # the compression, now (zstd, app/store.py) and before (zlib at level 6), on this record
    # and on one holding a Codex turn's request (its instructions, tools and history)
    big = orjson.dumps({**orjson.loads(raw), "input": [orjson.loads(codex_request("bench-resp-n20-d0"))]})
    for name, data in (("this record", raw), ("a Codex turn's", big)):
        n = 20000 if data is raw else 200
        zs = per_call(functools.partial(store_codec().compress, data), n)
        zl = per_call(functools.partial(zlib.compress, data, 6), n)
        kept = " (the store keeps it as its JSON)" if len(data) < store_compress_from else ""
        print(
            f"{name} ({len(data)} bytes){kept}: zstd {zs:.1f} µs, {len(store_codec().compress(data))} bytes; "
            f"zlib {zl:.1f} µs, {len(zlib.compress(data, 6))} bytes"
        )
    print()
    work = Path(tempfile.mkdtemp(prefix="bench-store-put-"))
    redis: Child | None = None
    try:
        redis, port = start_redis(work)
        wait_port(port)
        rows = ["| backend | puts at once | CPU per put (process) | the loop's thread |", "|---|---|---|---|"]
        for cfg in (
            StoreCfg(backend="sqlite", path=str(work / "s.db")),
            StoreCfg(backend="redis", url=f"redis://127.0.0.1:{port}/0", key_prefix="bench:"),
        ):
            rows += uvloop.run(puts(cfg, args.puts))
        print("\n".join(rows))
    finally:
        if redis is not None:
            redis.stop()
        shutil.rmtree(work, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
