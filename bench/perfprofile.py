"""Where the proxy's CPU goes, by Python function: perf samples named by their Python frames.

    python -m bench.perfprofile [--case CASE] [--requests N] [--freq HZ] [--top N]
                                [--proxy-python PY]

Starts the fake upstream (``bench/fake_upstream.py``) and ``switchboard serve``, pinned as
``bench/run`` pins them, the proxy with ``PYTHONPERFSUPPORT=1``: CPython's perf trampoline
gives each Python function a frame that perf can name (``py::<qualname>:<file>``, from the
``/tmp/perf-<pid>.map`` the interpreter writes; removed afterwards).  After 300 requests of
warm-up it records the proxy (``perf record -F HZ --call-graph dwarf``) while N requests of
a ``bench.instructions`` case go through it, back to back on one kept-alive connection, and
credits each sample to the innermost Python function on its stack: that function's own
bytecode and the C code it called (orjson, the socket's write and the kernel's part of it),
until the next Python frame.  The event loop's own C code (between callbacks) is counted
apart.

py-spy (``bench/run --profile``) reads the process from outside at ~100 Hz: a few hundred
samples for a scenario's round.  Here one short run gives thousands, each with the kernel's
and the C libraries' share, which is what found the Chat ``[DONE]`` handed to orjson to be
refused (``docs/performance.md``).  The trampoline costs a few percent: compare shares, not
times.  Needs ``perf`` (Debian's ``linux-perf``) and the right to record the proxy
(``kernel.perf_event_paranoid`` ≤ 2 for one's own processes).  Loopback only; every child
stopped by its pid.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the event loop's own C code runs under asyncio's Runner.run alone, the outermost frame,
# which a sample's copy of the stack (8 KiB) often does not reach: both counted here
LOOP = "(the event loop's own C code: under Runner.run, or no Python frame)"


def fold(script: str) -> tuple[int, collections.Counter[str]]:
    """``perf script -F ip,sym`` output (one block per sample, innermost frame first): the
    number of samples, and per innermost Python function (``qualname (file)``) its count."""
    counts: collections.Counter[str] = collections.Counter()
    n = 0
    for block in script.split("\n\n"):
        frames = block.strip().splitlines()
        if not frames:
            continue
        n += 1
        for frame in frames:
            _, _, sym = frame.strip().partition(" ")
            if sym.startswith("py::"):
                name, _, where = sym[4:].partition(":")
                counts[LOOP if name == "Runner.run" else f"{name} ({where.rsplit('/', 1)[-1]})"] += 1
                break
        else:
            counts[LOOP] += 1
    return n, counts


def report(n: int, counts: collections.Counter[str], top: int) -> str:
    out = [f"{n} samples", "", "| share | innermost Python function (file) |", "|---|---|"]
    for name, c in counts.most_common(top):
        out.append(f"| {100 * c / n:.2f}% | {name} |")
    return "\n".join(out)


def record(proxy_python: str, case: str, n: int, freq: int, warm: int = 300) -> tuple[int, collections.Counter[str]]:
    """The proxy's samples while ``n`` requests of ``case`` go through it, folded."""
    from bench.instructions import CASES, HOST, _request, exchange
    from bench.phases import serving

    perf = shutil.which("perf")
    if perf is None:
        raise RuntimeError("perf is not installed (Debian: apt-get install linux-perf)")
    path, body = CASES[case]
    argv = [proxy_python, "-m", "app.cli"]
    env = {**os.environ, "PYTHONPERFSUPPORT": "1"}
    work = Path(tempfile.mkdtemp(prefix="switchboard-perfprofile-"))
    pid = None
    try:
        with serving(argv, work, env=env) as (proxy, port):
            pid = proxy.pid
            req = _request(path, body)
            data = work / "perf.data"
            with socket.create_connection((HOST, port), timeout=60) as s:
                for _ in range(warm):
                    exchange(s, req)
                rec = subprocess.Popen(
                    [perf, "record", "-q", "--no-buildid-cache", "-F", str(freq), "--call-graph", "dwarf,8192"]
                    + ["-p", str(pid), "-o", str(data)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
                # perf catches SIGINT from before it creates its file: until then the signal
                # would end it with nothing written (a loaded machine can take seconds)
                deadline = time.monotonic() + 60
                while not data.exists() and rec.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.05)
                time.sleep(0.5)  # perf attached
                for _ in range(n):
                    exchange(s, req)
                rec.send_signal(signal.SIGINT)
                _, err = rec.communicate(timeout=120)
            # perf writes its file at SIGINT, then ends by that signal, as a shell would see it
            if rec.returncode not in (0, -signal.SIGINT) or not data.exists():
                raise RuntimeError(
                    f"perf record failed ({rec.returncode}): {err.decode(errors='replace').strip()[:500]}"
                )
            script = subprocess.run(
                [perf, "script", "-i", str(data), "-F", "ip,sym"], capture_output=True, check=True, timeout=600
            ).stdout.decode(errors="replace")
        return fold(script)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if pid is not None:
            Path(f"/tmp/perf-{pid}.map").unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--proxy-python", default=str(ROOT / ".venv" / "bin" / "python"))
    ap.add_argument("--case", default="st-chat-n20")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--freq", type=int, default=4000, help="samples per second")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    n, counts = record(args.proxy_python, args.case, args.requests, args.freq)
    print(f"{args.case}, {args.requests} requests back to back\n")
    print(report(n, counts, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
