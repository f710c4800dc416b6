"""bench/limits.py and bench/limits_asgi.py run end to end, briefly: their own redis-server
and fake upstream on loopback, the proxy as a process (bench.limits) or in this process's
child (bench.limits_asgi).  Correctness only (no timing assertion): every request answered,
and Redis's counts per request read back."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=180, check=False
    )


def test_bench_limits_reports_every_case_and_redis_counts() -> None:
    got = _run("bench.limits", "--requests", "60", "--rounds", "2", "--concurrency", "4")
    assert got.returncode == 0, got.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line for line in got.stdout.splitlines() if line.startswith("| ")}
    assert {"no limits", "limits, memory counters", "no limits, Redis store", "limits, Redis counters"} <= set(rows)
    # (round trips, scripts) a request, read from Redis: a limited request on Redis runs
    # scripts (a free one's round can count the grants given back after the limited one's)
    for name in ("no limits, Redis store", "limits, Redis counters"):
        assert re.search(r"\| \d+\.\d\d, \d+\.\d\d \|$", rows[name]), rows[name]
    trips, scripts = (float(x) for x in re.findall(r"(\d+\.\d+), (\d+\.\d+) \|$", rows["limits, Redis counters"])[0])
    assert trips > 0 and scripts > 0


def test_bench_limits_asgi_compares_the_two_keys() -> None:
    got = _run("bench.limits_asgi", "--requests", "40", "--rounds", "2", "--concurrency", "2")
    assert got.returncode == 0, got.stderr[-3000:]
    assert re.search(r"limits on Redis counters, concurrency 2: free key \d+ µs, limited key \d+ µs", got.stderr)
