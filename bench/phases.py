"""Where one request's time goes inside the proxy: time stamps taken in the proxy process.

    python -m bench.phases [--proxy-python PY] [--case CASE] [--requests N] [--gap S]

Starts the fake upstream (``bench/fake_upstream.py``) and ``switchboard serve`` as
``bench.phases --serve``: the proxy's own CLI in a process that first wraps four places
with a time stamp, then sends N requests of a ``bench.instructions`` case on one kept-alive
connection, one at a time, ``--gap`` seconds apart (0: back to back), after 300 of warm-up.
For each request, from the first bytes of the client's request:

===================  ===============================================================
phase                from → to
===================  ===============================================================
request path         the request's first bytes read → the upstream request written
upstream             → the upstream answer's first bytes read
answer head          → the answer's head handed to the server (``http.response.start``)
answer body          → the answer's last body handed to the server
===================  ===============================================================

The wrappers cost a few µs each, so figures are a little high, alike for every build.
Medians and 90th percentiles are printed.  The paced streams' first text waits for the
request path and the event's way back, not for the answer head: ``bench/README.md``, "What a
paced stream's first text waits for".  Loopback only; every child stopped by its pid.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("request path", "upstream", "answer head", "answer body")


def _install(out: str) -> None:
    """In the proxy process: time stamps at the four places, one line per request to ``out``
    when the process exits."""
    import atexit

    import uvicorn.protocols.http.httptools_impl as server

    import app.netio as netio

    clock = time.perf_counter
    t: dict[str, float] = {}
    rows: list[tuple[float, ...]] = []

    def wrap(cls: Any, name: str, before: Any) -> None:
        inner = getattr(cls, name)

        def wrapped(self: Any, *a: Any) -> Any:
            before(a)
            return inner(self, *a)

        setattr(cls, name, wrapped)

    def request_in(a: Any) -> None:
        if a[0][:4] == b"POST":
            t.clear()
            t["in"] = clock()

    wrap(server.HttpToolsProtocol, "data_received", request_in)
    wrap(netio.LoopStream, "_uncork", lambda a: t.setdefault("up", clock()))
    wrap(netio.LoopStream, "data_received", lambda a: t.setdefault("head", clock()))
    send = server.RequestResponseCycle.send

    async def timed_send(self: Any, msg: Any) -> None:
        if msg["type"] == "http.response.start":
            t["out"] = clock()
        await send(self, msg)
        if msg["type"] == "http.response.body" and not msg.get("more_body") and len(t) == 4:
            rows.append((t["up"] - t["in"], t["head"] - t["up"], t["out"] - t["head"], clock() - t["out"]))

    server.RequestResponseCycle.send = timed_send  # type: ignore[method-assign]

    def dump() -> None:
        Path(out).write_text("".join(" ".join(f"{x * 1e6:.1f}" for x in r) + "\n" for r in rows))

    atexit.register(dump)


def measure(proxy_python: str, case: str, n: int, gap: float, warm: int = 300) -> list[list[float]]:
    """The four phases of each of the ``n`` measured requests, in µs."""
    import yaml

    from bench.instructions import CASES, _free_port, proxy_config, send, start_fake, wait_listening
    from bench.run import pinned

    path, body = CASES[case]
    work = Path(tempfile.mkdtemp(prefix="switchboard-phases-"))
    # as bench/run pins them: the proxy alone on core 0, the fake upstream and the client on 1
    cores = sorted(os.sched_getaffinity(0))
    proxy_core, other = (cores[0], cores[1]) if len(cores) > 1 else (None, None)
    if other is not None:
        os.sched_setaffinity(0, {other})
    fake, base = start_fake(pinned([], other))
    proxy = None
    try:
        port = _free_port()
        (work / "config.yaml").write_text(yaml.safe_dump(proxy_config(base, port)))
        rows = work / "phases.txt"
        argv = [
            proxy_python,
            "-m",
            "bench.phases",
            "--serve",
            str(rows),
            "serve",
            "--config",
            str(work / "config.yaml"),
        ]
        with open(work / "proxy.log", "wb") as log:
            proxy = subprocess.Popen(
                pinned(argv, proxy_core), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        wait_listening(proxy, port, 60, work / "proxy.log")
        send(port, warm, path, body)
        for _ in range(n):
            send(port, 1, path, body)
            if gap:
                time.sleep(gap)
        proxy.send_signal(signal.SIGINT)
        proxy.wait(30)
        got = [[float(x) for x in line.split()] for line in rows.read_text().splitlines()]
        return got[warm:]
    finally:
        os.sched_setaffinity(0, cores)
        for p in (proxy, fake):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()


def report(rows: list[list[float]]) -> str:
    out = ["| phase | median µs | p90 µs |", "|---|---|---|"]
    for i, name in enumerate(PHASES):
        xs = sorted(r[i] for r in rows)
        out.append(f"| {name} | {statistics.median(xs):.1f} | {xs[int(len(xs) * 0.9)]:.1f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:  # the proxy process
        _install(argv[1])
        from app.cli import main as cli

        return cli(argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--proxy-python", default=str(ROOT / ".venv" / "bin" / "python"))
    ap.add_argument("--case", default="st-chat-n20")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--gap", type=float, default=0.0, help="seconds between two requests (0: back to back)")
    args = ap.parse_args(argv)
    rows = measure(args.proxy_python, args.case, args.requests, args.gap)
    print(f"{args.case}, {len(rows)} requests, {args.gap:g} s apart\n")
    print(report(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
