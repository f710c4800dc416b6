"""Where one request's time goes inside the proxy: time stamps taken in the proxy process.

    python -m bench.phases [--proxy-python PY] [--case CASE] [--requests N] [--gap S] [--steps]

Starts the fake upstream (``bench/fake_upstream.py``) and ``switchboard serve`` as
``bench.phases --serve`` (``--serve-steps`` for ``--steps``): the proxy's own CLI in a
process that first wraps four places with a time stamp, then sends N requests of a
``bench.instructions`` case on one kept-alive connection, one at a time, ``--gap`` seconds
apart (0: back to back), after 300 of warm-up.
For each request, from the first bytes of the client's request:

===================  ===============================================================
phase                from → to
===================  ===============================================================
request path         the request's first bytes read → the upstream request written
upstream             → the upstream answer's first bytes read
answer head          → the answer's head handed to the server (``http.response.start``)
answer body          → the answer's last body handed to the server
===================  ===============================================================

``--steps`` also cuts the request path at the start of each function of ``STEPS`` (the
interpreter's ``sys.monitoring`` events on those functions alone), the answer head at the
returns of ``HEAD_CUTS``, and times what the proxy
does after the answer's last bytes (``TAIL_CUTS``: its log line and counters, the rest of the
upstream body, the upstream answer closed, its request task done) and until it reads the
next request: work that a client sending its next request at once waits behind.

The wrappers cost a few µs each, so figures are a little high, alike for every build.
Medians and 90th percentiles are printed.  The paced streams' first text waits for the
request path and the event's way back, not for the answer head: ``bench/README.md``, "What a
paced stream's first text waits for".  Loopback only; every child stopped by its pid.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("request path", "upstream", "answer head", "answer body")
# The request path cut at the start of these functions, in the order a request reaches them
# (one a request does not reach is "nan" in its row): each step is the time from the
# previous cut, or from the request's first bytes.
STEPS: tuple[tuple[str, str, str], ...] = (
    ("uvicorn parses the request", "uvicorn.protocols.http.httptools_impl", "HttpToolsProtocol.on_message_complete"),
    ("the request task's first step", "uvicorn.protocols.http.httptools_impl", "RequestResponseCycle.run_asgi"),
    ("dispatch, request id, headers, key", "app.main", "Service.read_body"),
    ("the body read (Responses: and checked)", "app.main", "Service.prepare"),
    ("(Chat: the body checked), routed, translated, the Bridge", "app.pipeline", "ProxyResponse.__call__"),
    ("the answer's timers, drain entry, failover", "app.exchange", "exchange"),
    ("the upstream request built", "app.exchange", "open_upstream"),
    ("first-byte timeout", "providers.transport", "FastTransport.handle_async_request"),
)
LAST_STEP = "the request framed, a kept-alive connection taken, written"  # → the request path's end
# The answer head phase cut at the returns of these functions, in the order the upstream
# answer's head goes back up through them: each from the previous cut, or from the
# upstream answer's first bytes read; then HEAD_LAST, to ``http.response.start``
HEAD_CUTS: tuple[tuple[str, str, str], ...] = (
    ("the read woken, the head parsed", "providers.transport", "_Conn.head"),
    ("httpx's answer, its headers", "providers.transport", "FastTransport.handle_async_request"),
    ("the first-byte timeout left", "app.exchange", "open_upstream"),
    ("the status checked (a whole answer: read, parsed)", "app.exchange", "attempt"),
)
HEAD_LAST = "the answer's head built, handed to the server"
# What follows the answer's last bytes, each time from them: the returns of these functions
# (a function a request does not call, as ``drain_rest`` for a whole answer, is "nan"), then the
# next request's first bytes read
TAIL_CUTS: tuple[tuple[str, str, str], ...] = (
    ("after the last bytes: → the log line and counters written", "app.exchange", "finish_log"),
    ("→ the rest of the upstream body read", "app.exchange", "drain_rest"),
    ("→ the upstream answer closed, the handler done", "app.pipeline", "ProxyResponse.__call__"),
    ("→ the request task done", "uvicorn.protocols.http.httptools_impl", "RequestResponseCycle.run_asgi"),
)
TAIL = (*(name for name, _, _ in TAIL_CUTS), "→ the next request read")


def _monitor(points: dict[Any, str], on_start: Any, returns: dict[Any, str], on_return: Any) -> None:
    """``on_start(name)`` when a function of ``points`` (code → name) starts, ``on_return(name)``
    when one of ``returns`` returns: ``sys.monitoring`` events on those code objects alone."""
    mon = sys.monitoring
    tool = next(i for i in range(6) if mon.get_tool(i) is None)
    mon.use_tool_id(tool, "bench.phases")
    mon.register_callback(tool, mon.events.PY_START, lambda code, _: on_start(points[code]))
    mon.register_callback(tool, mon.events.PY_RETURN, lambda code, _, __: on_return(returns[code]))
    for code in points.keys() | returns.keys():
        events = (mon.events.PY_START if code in points else 0) | (mon.events.PY_RETURN if code in returns else 0)
        mon.set_local_events(tool, code, events)


def _code(module: str, qualname: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj.__code__


def _install(out: str, steps: bool = False) -> None:
    """In the proxy process: time stamps at the four places (and with ``steps``, at each
    function of ``STEPS`` and after the answer), one line per request to ``out`` when the
    process exits."""
    import atexit

    import uvicorn.protocols.http.httptools_impl as server

    import providers.transport as transport

    clock = time.perf_counter
    t: dict[str, float] = {}
    rows: list[tuple[float, ...]] = []
    # before any wrapping below: the functions' own code
    points = {_code(module, fn): name for name, module, fn in STEPS} if steps else {}
    tail_cuts = {_code(module, fn): name for name, module, fn in TAIL_CUTS} if steps else {}
    head_cuts = {_code(module, fn): name for name, module, fn in HEAD_CUTS} if steps else {}
    # the last request's row, the time its last bytes were handed to the server, and the
    # times of its tail's cuts
    last: list[Any] = [None, 0.0, {}]

    def wrap(cls: Any, name: str, before: Any) -> None:
        inner = getattr(cls, name)

        def wrapped(self: Any, *a: Any) -> Any:
            before(a)
            return inner(self, *a)

        setattr(cls, name, wrapped)

    def request_in(a: Any) -> None:
        if a[0][:4] == b"POST":
            now = clock()
            row, end, cuts = last
            if row is not None and steps:  # the previous request's tail, now that it is known
                rows[row] += (*(cuts[n] - end if n in cuts else math.nan for n, _, _ in TAIL_CUTS), now - end)
            last[0] = None
            t.clear()
            t["in"] = now

    wrap(server.HttpToolsProtocol, "data_received", request_in)
    wrap(transport._Conn, "send", lambda a: t.setdefault("up", clock()))
    wrap(transport._Conn, "data_received", lambda a: t.setdefault("head", clock()))
    send = server.RequestResponseCycle.send

    def between(cuts: tuple[tuple[str, str, str], ...], start: float, stop: float) -> tuple[float, ...]:
        """Each cut's time from the previous one taken (or ``start``), nan for one not
        taken, then ``stop``'s from the last one taken."""
        out: tuple[float, ...] = ()
        prev = start
        for name, _, _ in cuts:
            x = t.get(name)
            out += (math.nan,) if x is None else (x - prev,)
            prev = prev if x is None else x
        return (*out, stop - prev)

    async def timed_send(self: Any, msg: Any) -> None:
        if msg["type"] == "http.response.start":
            t["out"] = clock()
        await send(self, msg)
        if msg["type"] == "http.response.body" and not msg.get("more_body") and t.keys() >= {"in", "up", "head", "out"}:
            end = clock()
            row = (t["up"] - t["in"], t["head"] - t["up"], t["out"] - t["head"], end - t["out"])
            if steps:
                row += between(STEPS, t["in"], t["up"]) + between(HEAD_CUTS, t["head"], t["out"])
            rows.append(row)
            last[:] = [len(rows) - 1, end, {}]

    server.RequestResponseCycle.send = timed_send  # type: ignore[method-assign]
    if steps:

        def cut(name: str) -> None:
            if "in" in t and "up" not in t:
                t.setdefault(name, clock())

        def returned(name: str) -> None:
            if name in head_names:
                if "head" in t and "out" not in t:
                    t.setdefault(name, clock())
            elif last[0] is not None:
                last[2].setdefault(name, clock())

        head_names = set(head_cuts.values())
        _monitor(points, cut, tail_cuts | head_cuts, returned)

    def dump() -> None:
        # a step a request did not take is written "nan"
        Path(out).write_text("".join(" ".join(f"{x * 1e6:.1f}" for x in r) + "\n" for r in rows))

    atexit.register(dump)


def measure(
    proxy_python: str, case: str, n: int, gap: float, warm: int = 300, steps: bool = False
) -> list[list[float]]:
    """The four phases of each of the ``n`` measured requests, in µs; with ``steps``, then
    each step of ``STEPS`` (nan where the case does not take it), ``LAST_STEP``, each cut of
    ``HEAD_CUTS`` and ``HEAD_LAST``, and, for
    every request that another followed, the times of ``TAIL`` (nan where it does not take
    a cut)."""
    from bench.instructions import CASES, HOST, _request, exchange

    path, body = CASES[case]
    with scratch("switchboard-phases-") as work:
        rows = work / "phases.txt"
        argv = [proxy_python, "-m", "bench.phases", "--serve-steps" if steps else "--serve", str(rows)]
        with serving(argv, work) as (proxy, port):
            req = _request(path, body)
            with socket.create_connection((HOST, port), timeout=60) as s:  # one kept-alive connection
                for _ in range(warm):
                    exchange(s, req)
                for _ in range(n):
                    exchange(s, req)
                    if gap:
                        time.sleep(gap)
            proxy.send_signal(signal.SIGINT)  # its rows are written at exit
            proxy.wait(30)
            got = [[float(x) for x in line.split()] for line in rows.read_text().splitlines()]
            return got[warm:]


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A new directory under the system's temporary one for a measurement's config, logs
    and records: removed when the measurement succeeds, kept (and named on stderr) when it
    fails, for its proxy's log."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield work
    except BaseException:
        print(f"kept for its logs: {work}", file=sys.stderr)
        raise
    shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def serving(
    argv: list[str], work: Path, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """The fake upstream and a proxy started as ``argv`` + ``serve --config`` (its config and
    log in ``work``), pinned as bench/run pins them (the proxy alone on core 0, the fake
    upstream and this process on core 1), once the proxy listens: the proxy and its port.
    Both stopped by their pids on leaving."""
    import yaml

    from bench.instructions import _free_port, proxy_config, start_fake, wait_listening
    from bench.run import pinned

    cores = sorted(os.sched_getaffinity(0))
    proxy_core, other = (cores[0], cores[1]) if len(cores) > 1 else (None, None)
    if other is not None:
        os.sched_setaffinity(0, {other})
    fake, base = start_fake(pinned([], other))
    proxy = None
    try:
        port = _free_port()
        (work / "config.yaml").write_text(yaml.safe_dump(proxy_config(base, port)))
        cmd = [*argv, "serve", "--config", str(work / "config.yaml")]
        with open(work / "proxy.log", "wb") as log:
            proxy = subprocess.Popen(
                pinned(cmd, proxy_core),
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        wait_listening(proxy, port, 60, work / "proxy.log")
        yield proxy, port
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


def report_steps(rows: list[list[float]], gap: float = 0.0) -> str:
    """The request path and the answer head step by step (rows of ``measure(...,
    steps=True)``), and the tail (with a ``gap`` between requests, the next one's arrival
    says nothing: left out)."""
    names = [name for name, _, _ in STEPS] + [LAST_STEP]
    heads = [name for name, _, _ in HEAD_CUTS] + [HEAD_LAST]
    tails = list(TAIL[:-1] if gap else TAIL)
    base = len(PHASES)
    width = base + len(names) + len(heads)
    after = [r[width:] for r in rows if len(r) == width + len(TAIL)]
    out: list[str] = []
    for title, table, cols in (
        ("request path, step: → at its end", names, [r[base : base + len(names)] for r in rows]),
        ("answer head, step: → at its end", heads, [r[base + len(names) : width] for r in rows]),
        ("after the answer's last bytes", tails, after),
    ):
        lines = []
        for i, name in enumerate(table):
            xs = sorted(c[i] for c in cols if not math.isnan(c[i]))
            if xs:
                lines.append(f"| {name} | {statistics.median(xs):.1f} | {xs[int(len(xs) * 0.9)]:.1f} |")
        if lines:
            out += [*([""] if out else []), f"| {title} | median µs | p90 µs |", "|---|---|---|", *lines]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--serve"], ["--serve-steps"]):  # the proxy process
        _install(argv[1], steps=argv[0] == "--serve-steps")
        from app.cli import main as cli

        return cli(argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--proxy-python", default=str(ROOT / ".venv" / "bin" / "python"))
    ap.add_argument("--case", default="st-chat-n20")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--gap", type=float, default=0.0, help="seconds between two requests (0: back to back)")
    ap.add_argument(
        "--steps",
        action="store_true",
        help="also the request path step by step, and what follows the answer's last bytes",
    )
    args = ap.parse_args(argv)
    rows = measure(args.proxy_python, args.case, args.requests, args.gap, steps=args.steps)
    print(f"{args.case}, {len(rows)} requests, {args.gap:g} s apart\n")
    print(report(rows))
    if args.steps:
        print()
        print(report_steps(rows, args.gap))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
