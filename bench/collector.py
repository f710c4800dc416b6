"""What the cyclic garbage collector does in the proxy while it serves: collections per
generation, their pauses, and what they find.

    python -m bench.collector [--proxy-python PY] [--only REGEX] [--requests N] [--garbage]

For each ``bench.instructions`` case: the fake upstream (``bench/fake_upstream.py``), then the
proxy's own CLI in a process started as ``bench.collector --serve`` that first registers a
``gc.callbacks`` hook; 100 warm-up requests on one kept-alive connection, the counts zeroed
(SIGUSR1), N requests, the counts written out (SIGUSR2).  Per case: collections per 1,000
requests for each generation, the objects they found unreachable (garbage held only by
reference cycles), the pauses' total per request and the longest pause.

CPython starts a young collection once the container objects allocated and not yet freed
pass its first threshold (``app/asgi.py`` sets it): a request that frees everything it made
by reference counting brings it no closer, one that leaves cycles does, and so does one
that holds thousands of objects alive at once (a Codex-sized body).  A collection pauses
whichever request is running.

``--garbage`` keeps what the collections find (``gc.DEBUG_SAVEALL``) and prints its types
per request instead: what a request leaves in reference cycles (``tests/unit/
test_no_cycles.py`` holds the transformers to none).  Loopback only; every child is
stopped by its pid.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GENERATIONS = 3


def _install(out: str, garbage: bool) -> None:
    """In the proxy process: the collector's callbacks counted from SIGUSR1, written to
    ``out`` as JSON at SIGUSR2."""
    import gc

    clock = time.perf_counter
    state: dict[str, Any] = {"on": False, "t0": 0.0}
    counts = [0] * GENERATIONS
    found = [0] * GENERATIONS
    pauses: list[float] = []

    def hook(phase: str, info: dict[str, int]) -> None:
        if not state["on"]:
            return
        if phase == "start":
            state["t0"] = clock()
            return
        g = info["generation"]
        counts[g] += 1
        found[g] += info["collected"]
        pauses.append(clock() - state["t0"])

    def start(*_: Any) -> None:
        gc.collect()
        gc.garbage.clear()
        counts[:] = found[:] = [0] * GENERATIONS
        pauses.clear()
        if garbage:
            gc.set_debug(gc.DEBUG_SAVEALL)
        state["on"] = True

    def stop(*_: Any) -> None:
        types: list[tuple[str, int]] = []
        if garbage:
            gc.collect()  # what is still waiting for a collection counts too
            kinds = collections.Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
            types = kinds.most_common(40)
            gc.set_debug(0)
            gc.garbage.clear()
        state["on"] = False
        Path(out).write_text(json.dumps({"counts": counts, "found": found, "pauses": pauses, "types": types}))

    gc.callbacks.append(hook)
    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)


def measure(proxy_python: str, case: str, n: int, garbage: bool = False, warm: int = 100) -> dict[str, Any]:
    """The collector's record over ``n`` requests of ``case``, after ``warm`` of warm-up."""
    import yaml

    from bench.instructions import CASES, _free_port, _stop, proxy_config, send, start_fake, wait_listening
    from bench.phases import scratch

    path, body = CASES[case]
    with scratch("switchboard-collector-") as work:
        fake, base = start_fake()
        proxy = None
        try:
            port = _free_port()
            (work / "config.yaml").write_text(yaml.safe_dump(proxy_config(base, port)))
            out = work / "collector.json"
            argv = [proxy_python, "-m", "bench.collector", "--serve", str(out), "1" if garbage else "0"]
            argv += ["serve", "--config", str(work / "config.yaml")]
            with open(work / "proxy.log", "wb") as log:
                proxy = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            wait_listening(proxy, port, 60, work / "proxy.log")
            send(port, warm, path, body)
            proxy.send_signal(signal.SIGUSR1)
            time.sleep(0.2)  # the handler runs once the idle loop wakes (within its poll)
            send(port, n, path, body)
            time.sleep(0.2)  # the last request's task ends after its answer's last byte
            proxy.send_signal(signal.SIGUSR2)
            deadline = time.monotonic() + 30
            while not out.exists():
                if time.monotonic() > deadline or proxy.poll() is not None:
                    raise RuntimeError(f"the proxy wrote no record: see {work / 'proxy.log'}")
                time.sleep(0.05)
            rec: dict[str, Any] = json.loads(out.read_text())
            rec["requests"] = n
            return rec
        finally:
            if proxy is not None:
                _stop(proxy)
            _stop(fake)


def row(case: str, rec: dict[str, Any]) -> str:
    n = rec["requests"]
    per_k = " / ".join(f"{c * 1000 / n:g}" for c in rec["counts"])
    found = " / ".join(f"{f / n:.1f}" for f in rec["found"])
    pauses = rec["pauses"]
    total = sum(pauses) * 1e6 / n
    longest = max(pauses) * 1e6 if pauses else 0.0
    return f"| {case} | {per_k} | {found} | {total:.1f} | {longest:.0f} |"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:  # the proxy process
        _install(argv[1], argv[2] == "1")
        from app.cli import main as cli

        return cli(argv[3:])
    from bench.instructions import CASES

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--proxy-python", default=str(ROOT / ".venv" / "bin" / "python"))
    ap.add_argument("--only", help="cases whose name matches this regex")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--garbage", action="store_true", help="list what the requests left in reference cycles")
    args = ap.parse_args(argv)
    cases = [c for c in CASES if not c.startswith("ref-") and (not args.only or re.search(args.only, c))]
    if args.garbage:
        for case in cases:
            rec = measure(args.proxy_python, case, args.requests, garbage=True)
            kinds = ", ".join(f"{k} {v / args.requests:.2f}" for k, v in rec["types"]) or "nothing"
            print(f"{case}: per request, left in cycles: {kinds}", flush=True)
        return 0
    print(f"{args.requests} requests per case, after 100 of warm-up\n")
    print(
        "| case | collections per 1,000 requests (gen 0 / 1 / 2) | found per request | pauses, µs per request | longest pause, µs |"
    )
    print("|---|---|---|---|---|")
    for case in cases:
        print(row(case, measure(args.proxy_python, case, args.requests)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
