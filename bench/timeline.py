"""What a paced stream's first text waits for, stream by stream: time stamps on both sides.

    python -m bench.timeline [--proxy-python PY] [--case CASE] [--rounds N] [--streams K]
                             [--idle S] [--keep] [--machine]

Starts the fake upstream and ``switchboard serve`` as ``bench.timeline --serve`` (the
proxy's own CLI in a process that first wraps six places with a time stamp), the fake
upstream with its own two (``BENCH_UPSTREAM_STAMPS``), pinned as ``bench/run`` pins them,
then runs N rounds of the paced scenarios' shape: K streams on new connections opened after
S seconds of idleness (as the load generator runs a measurement; ``--keep``: the same
kept-alive connections every round), their requests written one after the other, each read
to its end.  ``perf_counter`` and ``monotonic`` are both the system's monotonic clock, so
the client's stamps, the proxy's and the upstream's are on one time line.  Per
stream, in its order of arrival at the proxy:

=================  ===========================================================================
stamp              where
=================  ===========================================================================
sent               the client, before its request's write
read               the proxy: the request's first bytes read (uvicorn's ``data_received``)
up                 the proxy: the upstream request written (``providers.transport._Conn.send``)
upstream read      the fake upstream: the request read (its paced steps' clock starts)
head in            the proxy: the upstream answer's first bytes read
head out           the proxy: the answer's head handed to the server
upstream text      the fake upstream: its step 1, the first text, written
text in            the proxy: the first upstream read that carries answer text
text out           the proxy: the first answer text handed to the server
got                the client: the first answer text read
=================  ===========================================================================

The report gives, per rank of arrival, the median over rounds of each step between two
stamps (sent → read is the proxy's wake-up and any request ahead of it; read → up its
request path behind the ones before it; up → upstream read and upstream text → text in
the two crossings between the proxy's core and the upstream's, each with a process woken;
text in → text out the first text's way back behind the other streams'), and
``--machine`` what idleness costs on this machine at all, without the proxy: a fixed piece
of work (a loop of 300 steps; 64 pages of memory written) timed first after S seconds of
sleep (at most 0.5) and then again at once, on the proxy's core.
``bench/README.md``, "What a paced stream's first text waits for", reads the figures.
Loopback only; every child stopped by its pid.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STAMPS = (
    "sent",
    "read",
    "up",
    "upstream read",
    "head in",
    "head out",
    "upstream text",
    "text in",
    "text out",
    "got",
)
# the steps of the report: (title, from stamp, to stamp)
STEPS = (
    ("sent → read: the proxy woken, the requests ahead read", "sent", "read"),
    ("read → up: the request paths ahead and its own", "read", "up"),
    ("up → upstream read: to the upstream, read there", "up", "upstream read"),
    ("up → head in: the upstream's answer head", "up", "head in"),
    ("head in → head out: the head's way back", "head in", "head out"),
    ("upstream read → upstream text: its first step", "upstream read", "upstream text"),
    ("upstream text → text in: to the proxy, woken", "upstream text", "text in"),
    ("text in → text out: the first text's way back", "text in", "text out"),
    ("text out → got: to the client", "text out", "got"),
    ("sent → got: the first text (TTFT)", "sent", "got"),
)
# a paced scenario's request: (path, model)
CASES = {
    "pace-resp2chat": ("/v1/responses", "bench-chat-n200-d5-pt"),
    "pace-chat": ("/v1/chat/completions", "bench-chat-n200-d5-pt"),
}
# answer text on the wire: a Chat chunk's non-empty content, a Responses text delta
TEXT = re.compile(rb'"content":"[^"]|response\.output_text\.delta')


def _install(out: str) -> None:
    """In the proxy process: the proxy's six stamps of every request, keyed by the client's
    port, one JSON line per request to ``out`` when the process exits."""
    import atexit

    import uvicorn.protocols.http.httptools_impl as server

    import providers.transport as transport

    clock = time.perf_counter
    rows: dict[int, dict[str, float]] = {}  # client port → the stamps of its current request
    done: list[dict[str, float]] = []
    port: contextvars.ContextVar[int] = contextvars.ContextVar("port")
    streams: dict[int, int] = {}  # id(upstream stream) → the client port it last answered
    current: dict[int, int] = {}  # client port → id(the upstream stream of its current request)

    data_received = server.HttpToolsProtocol.data_received

    def request_in(self: Any, data: bytes) -> None:
        if data[:4] == b"POST":
            key = self.client[1]
            if key in rows:
                done.append(rows.pop(key))
            rows[key] = {"port": key, "read": clock()}
        data_received(self, data)

    run_asgi = server.RequestResponseCycle.run_asgi

    async def keyed(self: Any, app: Any) -> None:
        port.set(self.scope["client"][1])
        await run_asgi(self, app)

    conn_send = transport._Conn.send

    def up(self: Any, *a: Any) -> Any:
        key = port.get(None)
        if key is not None and key in rows:
            if "up" not in rows[key]:
                rows[key]["up"] = clock()
                rows[key]["up port"] = self.transport.get_extra_info("sockname")[1]
            streams[id(self)] = key
            current[key] = id(self)
        return conn_send(self, *a)

    upstream_in = transport._Conn.data_received

    def answer_in(self: Any, data: bytes) -> None:
        key = streams.get(id(self), -1)
        row = rows.get(key)
        # (a connection that answered this client before, now idle or another's, is not its)
        if row is not None and "up" in row and current.get(key) == id(self):
            now = clock()
            row.setdefault("head in", now)
            if "text in" not in row and TEXT.search(data):
                row["text in"] = now
        upstream_in(self, data)

    send = server.RequestResponseCycle.send

    async def timed_send(self: Any, msg: Any) -> None:
        row = rows.get(self.scope["client"][1])
        if row is not None:
            if msg["type"] == "http.response.start":
                row.setdefault("head out", clock())
            elif "text out" not in row and TEXT.search(msg.get("body", b"")):
                row["text out"] = clock()
        await send(self, msg)

    server.HttpToolsProtocol.data_received = request_in  # type: ignore[method-assign]
    server.RequestResponseCycle.run_asgi = keyed  # type: ignore[method-assign]
    server.RequestResponseCycle.send = timed_send  # type: ignore[method-assign, assignment]
    transport._Conn.send = up  # type: ignore[method-assign]
    transport._Conn.data_received = answer_in  # type: ignore[method-assign]

    def dump() -> None:
        Path(out).write_text("".join(json.dumps(r) + "\n" for r in [*done, *rows.values()]))

    atexit.register(dump)


async def _rounds(
    port: int, path: str, model: str, rounds: int, streams: int, idle: float, keep: bool
) -> list[dict[str, float]]:
    """The client's stamps of every stream of every round (``sent``, ``got``, its port and
    round); ``keep``: the same connections for every round."""
    from bench.instructions import _request

    body = json.dumps({"model": model, "stream": True, "store": False, "input": "hi"}).encode()
    if path.endswith("/chat/completions"):
        body = json.dumps({"model": model, "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = _request(path, body)
    out: list[dict[str, float]] = []

    async def read(r: asyncio.StreamReader, row: dict[str, float]) -> None:
        buf = b""
        while not buf.endswith(b"\r\n0\r\n\r\n"):
            data = await r.read(65536)
            if not data:
                raise RuntimeError("the proxy closed a connection")
            if "got" not in row and TEXT.search(buf[-200:] + data):
                row["got"] = time.perf_counter()
            buf += data
            if b"\r\n\r\n" in buf and not buf.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"the proxy answered {buf[:200]!r}")

    kept = [await asyncio.open_connection("127.0.0.1", port) for _ in range(streams)] if keep else []
    for n in range(rounds):
        await asyncio.sleep(idle)
        # as the load generator runs a measurement: its connections opened, then every
        # request written at once (or, kept, as an agent's client holds its connection)
        conns = kept or [await asyncio.open_connection("127.0.0.1", port) for _ in range(streams)]
        try:
            rows = []
            for _, w in conns:
                row = {"round": n, "port": w.get_extra_info("sockname")[1], "sent": time.perf_counter()}
                w.write(req)
                rows.append(row)
            await asyncio.gather(*(read(r, rows[k]) for k, (r, _) in enumerate(conns)))
            out += rows
        finally:
            if not keep or n == rounds - 1:
                for _, w in conns:
                    w.close()
    return out


def measure(
    proxy_python: str, case: str, rounds: int, streams: int, idle: float, keep: bool = False
) -> list[list[dict[str, float]]]:
    """Each round's streams, in their order of arrival at the proxy, each with every stamp
    of ``STAMPS``."""
    from bench.fake_upstream import STAMPS_ENV
    from bench.phases import scratch, serving

    path, model = CASES[case]
    with scratch("switchboard-timeline-") as work:
        out, far = work / "timeline.jsonl", work / "upstream.jsonl"
        os.environ[STAMPS_ENV] = str(far)  # the fake upstream's own stamps (bench/fake_upstream.py)
        try:
            with serving([proxy_python, "-m", "bench.timeline", "--serve", str(out)], work) as (proxy, port):
                client = asyncio.run(_rounds(port, path, model, rounds, streams, idle, keep))
                proxy.send_signal(signal.SIGINT)  # its stamps are written at exit
                proxy.wait(30)
        finally:  # the upstream's are written at its exit, when serving stops it
            del os.environ[STAMPS_ENV]
        inside = [json.loads(line) for line in out.read_text().splitlines()]
        upstream = [json.loads(line) for line in far.read_text().splitlines()]
    result: list[list[dict[str, float]]] = []
    for n in range(rounds):
        mine = [c for c in client if c["round"] == n]
        rows = []
        for c in mine:  # the proxy's requests on this port, the one read after this round's send
            theirs = [r for r in inside if r["port"] == c["port"] and r["read"] > c["sent"]]
            row = {**c, **min(theirs, key=lambda r: r["read"])}
            # the upstream's request on the proxy's connection, the one read after it was written
            there = [u for u in upstream if u["peer"] == row["up port"] and u["upstream read"] > row["up"]]
            row.update(min(there, key=lambda u: u["upstream read"]))
            rows.append(row)
        result.append(sorted(rows, key=lambda r: r["read"]))
    return result


def report(result: list[list[dict[str, float]]]) -> str:
    """One column per rank of arrival: the median over rounds of each step, µs."""
    ranks = len(result[0])
    out = [
        "| step (µs, median over rounds) | " + " | ".join(f"stream {k + 1}" for k in range(ranks)) + " |",
        "|---|" + "---|" * ranks,
    ]

    def row(title: str, cells: list[float]) -> None:
        out.append(f"| {title} | " + " | ".join(f"{x:,.0f}" for x in cells) + " |")

    firsts = [min(r["sent"] for r in rnd) for rnd in result]
    row(
        "sent: after the round's first request",
        [statistics.median((rnd[k]["sent"] - firsts[n]) * 1e6 for n, rnd in enumerate(result)) for k in range(ranks)],
    )
    for title, a, b in STEPS:
        row(title, [statistics.median((rnd[k][b] - rnd[k][a]) * 1e6 for rnd in result) for k in range(ranks)])
    return "\n".join(out)


# --machine: a fixed piece of work after idleness, in a child pinned to the proxy's core
_MACHINE = """
import statistics, sys, time
idle, rounds = float(sys.argv[1]), int(sys.argv[2])
pages = bytearray(64 * 4096)
def loop():
    for _ in range(300):
        pass
def touch():
    for i in range(0, len(pages), 4096):
        pages[i] ^= 1
for name, f in (("a loop of 300 steps", loop), ("64 pages of memory written", touch)):
    first, again = [], []
    for _ in range(rounds):
        time.sleep(idle)
        for xs in (first, again):
            t = time.perf_counter_ns(); f(); xs.append((time.perf_counter_ns() - t) / 1000)
    print(f"| {name} | {statistics.median(first):.1f} | {statistics.median(again):.1f} |")
"""


def machine(idle: float, rounds: int) -> str:
    """The fixed work's time first after ``idle`` seconds of sleep and then at once."""
    from bench.run import pinned

    cores = sorted(os.sched_getaffinity(0))
    got = subprocess.run(
        pinned([sys.executable, "-c", _MACHINE, str(idle), str(rounds)], cores[0] if len(cores) > 1 else None),
        capture_output=True,
        text=True,
        check=True,
        timeout=60 + rounds * idle * 4,
    ).stdout
    return f"| work (µs, median) | first, after {idle:g} s idle | at once again |\n|---|---|---|\n{got.strip()}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:  # the proxy process
        _install(argv[1])
        from app.cli import main as cli

        return cli(argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--proxy-python", default=str(ROOT / ".venv" / "bin" / "python"))
    ap.add_argument("--case", default="pace-resp2chat", choices=sorted(CASES))
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--idle", type=float, default=1.0, help="seconds of idleness before each round")
    ap.add_argument("--keep", action="store_true", help="the same connections for every round (not new ones)")
    ap.add_argument("--machine", action="store_true", help="also time a fixed piece of work after idleness")
    args = ap.parse_args(argv)
    result = measure(args.proxy_python, args.case, args.rounds, args.streams, args.idle, args.keep)
    conns = "kept-alive connections" if args.keep else "new connections each round"
    print(f"{args.case}, {args.streams} streams ({conns}), {args.rounds} rounds, {args.idle:g} s idle before each\n")
    print(report(result))
    if args.machine:
        print()
        print(machine(min(args.idle, 0.5), max(args.rounds, 10)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
