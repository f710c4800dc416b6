"""The limits' instructions per request, counted by callgrind: ``bench.instructions``'s
method (``switchboard serve`` under ``valgrind --tool=callgrind``, 100 warm-up requests,
the counters zeroed, N requests on one keep-alive connection, the dump's total over N)
for a non-streamed Chat request from ``bench.limits``'s free key and from its limited one.

    python -m bench.limits_instructions [--proxy-cmd CMD] [--requests N] [--counters redis|memory]

``--counters redis``: the Redis store (our own redis-server on a free port, stopped by its
PID), whose counters the limited key uses; ``memory``: no store, the process's own
counters.  Usage records are off in both, so that their batches (which vary with timing)
do not blur the figure.  Under valgrind a request takes about 30 ms: a busy key on Redis
(``docs/operations.md``, "A busy key's grants").  The kernel's work (a round trip's system
calls) is not counted.  About a minute per key; A/B two builds with ``--proxy-cmd`` (or
``PYTHONPATH=<checkout>``).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson
import yaml

from bench import instructions as ins
from bench.limits import BODY, LIMITS, SECRET, start_redis
from bench.store_put import wait_port


def _request(key: str) -> bytes:
    body = orjson.dumps(BODY)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {ins.HOST}\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {key}\r\n"
    )
    return head.encode() + b"content-length: %d\r\n\r\n" % len(body) + body


def measure(cmd: list[str], key: str, n: int, work: Path, redis_url: str | None) -> int:
    fake, base = ins.start_fake()
    proxy = None
    try:
        port = ins._free_port()
        cfg = ins.proxy_config(base, port)
        cfg["server"]["secret_key"] = SECRET
        cfg["usage"] = {"enabled": False}
        cfg["auth"] = {
            "keys": [{"name": "free", "key": "sk-free"}, {"name": "limited", "key": "sk-limited", "limits": LIMITS}]
        }
        if redis_url is not None:
            cfg["store"] = {"backend": "redis", "url": redis_url, "key_prefix": f"bench-{key}:"}
        (work / "config.yaml").write_text(yaml.safe_dump(cfg))
        out = work / f"callgrind-{key}.out"
        argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p", *cmd, "serve"]
        argv += ["--config", str(work / "config.yaml")]
        with open(work / f"proxy-{key}.log", "wb") as log:
            proxy = subprocess.Popen(argv, cwd=ins.ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        ins.wait_listening(proxy, port, 300, work / f"proxy-{key}.log")
        req = _request(f"sk-{key}")
        with socket.create_connection((ins.HOST, port), timeout=60) as s:
            for _ in range(100):
                ins.exchange(s, req)
            subprocess.run(["callgrind_control", "-z", str(proxy.pid)], check=True, capture_output=True)
            for _ in range(n):
                ins.exchange(s, req)
            subprocess.run(["callgrind_control", "-d", str(proxy.pid)], check=True, capture_output=True)
        return ins.total_instructions(Path(f"{out}.{proxy.pid}.1")) // n
    finally:
        if proxy is not None:
            ins._stop(proxy)
        ins._stop(fake)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--proxy-cmd", default=str(ins.ROOT / ".venv" / "bin" / "switchboard"))
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--counters", choices=["redis", "memory"], default="redis")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-limits-instr-"))
    redis = None
    try:
        url = None
        if args.counters == "redis":
            redis, rport = start_redis(work)
            wait_port(rport)
            url = f"redis://127.0.0.1:{rport}/0"
        got = {key: measure([args.proxy_cmd], key, args.requests, work, url) for key in ("free", "limited")}
    finally:
        if redis is not None:
            redis.stop()
    print(
        f"{args.counters} counters: free key {got['free']:,} instructions a request, limited key "
        f"{got['limited']:,} ({got['limited'] - got['free']:+,})",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
