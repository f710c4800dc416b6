"""The metric updates of one request, alone: what ``app.exchange.finish_log`` asks of
``app.metrics.Metrics`` (``answered`` and ``turn``), in CPU time per request.

Three requests: a stream with the upstream's usage (duration, time to first token, time per
output token, input, output, cache read and reasoning tokens: the most a request records),
a whole answer (no first-token times), and a stream the client left (an estimated output).
Each is measured in memory (one process) and in multiprocess mode (what ``--workers N``
runs: every update a store into the worker's memory-mapped values file), each in a child
process, the latter started with ``PROMETHEUS_MULTIPROC_DIR`` set to a fresh directory.

Run: ``.venv/bin/python -m bench.metrics [--requests N]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

CASES = {
    "stream, usage": ("", 0.4, (1800, 240, 1500, 0, 60), False, "completed"),
    "whole answer": ("", None, (1800, 240, 1500, 0, 60), False, None),
    "client left": ("client_cancel", 0.4, (None, 60, None, None, None), True, "client_cancel"),
}


def run(requests: int) -> dict[str, float]:
    """ns of CPU per request for each case, in this process's mode."""
    from app.metrics import Metrics

    m = Metrics(
        ["kimi", "openai", "mimo"],
        ["upstream_timeout", "server_error"],
        models=["kimi-k2.6"],
        public_models=["kimi-k2.6", "gpt-5"],
        keys=["alice", "bob"],
    )
    out = {}
    for name, (error, ttft, tokens, estimated, outcome) in CASES.items():
        status = 499 if error else 200
        # the series exist (a first request made them): what every later request costs
        m.answered("/v1/responses", "responses", "kimi", status, 2.0, 0.1, outcome)
        m.turn("responses", "kimi", "kimi-k2.6", "alice", error, 2.0, ttft, tokens, estimated)
        start = time.process_time()
        for i in range(requests):
            dur = 1.0 + (i & 7) * 0.25
            m.answered("/v1/responses", "responses", "kimi", status, dur, 0.1, outcome)
            m.turn("responses", "kimi", "kimi-k2.6", "alice", error, dur, ttft, tokens, estimated)
        out[name] = (time.process_time() - start) / requests * 1e9
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        for name, ns in run(args.requests).items():
            print(f"{name}\t{ns:.0f}")
        return
    rows: dict[str, dict[str, float]] = {}
    for mode in ("one process", "multiprocess"):
        env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        with tempfile.TemporaryDirectory() as d:
            if mode == "multiprocess":
                env["PROMETHEUS_MULTIPROC_DIR"] = d
            cmd = [sys.executable, "-m", "bench.metrics", "--child", "--requests", str(args.requests)]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        for line in done.stdout.splitlines():
            name, ns = line.split("\t")
            rows.setdefault(name, {})[mode] = float(ns)
    print("| request | one process | multiprocess (--workers N) |")
    print("|---|---|---|")
    for name, by in rows.items():
        print(f"| {name} | {by['one process'] / 1000:.1f} µs | {by['multiprocess'] / 1000:.1f} µs |")


if __name__ == "__main__":
    main()
