"""Instructions per request through the proxy, counted by callgrind: a figure that does not
move with what else the machine is doing (CPU time on a shared 2-core machine moved by 2×
between runs of the same build on one day).

    python -m bench.instructions [--proxy-cmd CMD] [--requests N] [--only REGEX]

For each case: the fake upstream (``bench/fake_upstream.py``, natively), then
``switchboard serve`` under ``valgrind --tool=callgrind``, 100 warm-up requests on one
keep-alive connection, the counters zeroed (``callgrind_control -z``), N requests, a dump
(``callgrind_control -d``); the dump's total divided by N.  Everything the proxy process
does for those requests is counted (the event loop, uvicorn, the app, httpx, the kernel
calls' user-side work), nothing else.  Per event = the difference between the 200- and
20-chunk streams over 180; per stream = the 20-chunk stream less 20 events (the request's
own cost: checks, translation, upstream exchange, the answer's head and tail); the
Codex-sized body's own cost = its 20-chunk case less the short request's; per chunk read
alone = a ``-paced`` stream (the same 20 chunks 5 ms apart: each its own read, as at token
rate; under valgrind each read still takes less than the pacing) less the unpaced one, over
20; per reasoning event = a ``-think180`` stream (180 reasoning chunks before the same 20
text chunks) less the 20-chunk one, over 180; per argument event = an ``-args180`` stream
(its tool call's 182 argument deltas instead of 3) less the 20-chunk one, over 179.  The
``ref-*`` cases count the reference forwarder (``bench/reference.py``) on the Chat cases, the floor
under any proxy on uvicorn and httpx, and the report divides Switchboard's count by it.
A/B two builds with ``--proxy-cmd``; valgrind makes each case take about a minute.
Listens and connects on 127.0.0.1 only; every child is stopped by its pid, also on error.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.codex_body import codex_request
from bench.fake_upstream import proxy_providers

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"

_GEMINI_BODY = b'{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}'

# name → (path, body)
CASES: dict[str, tuple[str, bytes]] = {
    "ns-chat": (
        "/v1/chat/completions",
        b'{"model":"bench-chat-n20-d0","stream":false,"messages":[{"role":"user","content":"hi"}]}',
    ),
    # the same with a hosted API's head (bench/fake_upstream.py: ``hosted``, 20 more lines)
    "ns-chat-hosted": (
        "/v1/chat/completions",
        b'{"model":"bench-chat-n20-d0-hosted","stream":false,"messages":[{"role":"user","content":"hi"}]}',
    ),
    "st-chat-n20": (
        "/v1/chat/completions",
        b'{"model":"bench-chat-n20-d0","stream":true,"messages":[{"role":"user","content":"hi"}]}',
    ),
    "st-chat-n200": (
        "/v1/chat/completions",
        b'{"model":"bench-chat-n200-d0","stream":true,"messages":[{"role":"user","content":"hi"}]}',
    ),
    # the same with vLLM's chunk layout (bench/fake_upstream.py: ``vllm``): no passthrough
    "st-chatv-n20": (
        "/v1/chat/completions",
        b'{"model":"bench-chat-n20-d0-vllm","stream":true,"messages":[{"role":"user","content":"hi"}]}',
    ),
    "st-chatv-n200": (
        "/v1/chat/completions",
        b'{"model":"bench-chat-n200-d0-vllm","stream":true,"messages":[{"role":"user","content":"hi"}]}',
    ),
    "st-resp-n20": ("/v1/responses", b'{"model":"bench-resp-n20-d0","stream":true,"store":false,"input":"hi"}'),
    "st-resp-n200": ("/v1/responses", b'{"model":"bench-resp-n200-d0","stream":true,"store":false,"input":"hi"}'),
    # a Responses client on a Chat upstream (Codex on Kimi): request and answer translated
    "st-resp2chat-n20": ("/v1/responses", b'{"model":"bench-chat-n20-d0","stream":true,"store":false,"input":"hi"}'),
    "st-resp2chat-n200": ("/v1/responses", b'{"model":"bench-chat-n200-d0","stream":true,"store":false,"input":"hi"}'),
    # the same 20 chunks paced 5 ms apart (the tail in one write): one read per chunk, as an
    # upstream streaming at token rate sends them; what each read costs, over a coalesced one
    "st-chat-paced-n20": (
        "/v1/chat/completions",
        b'{"model":"bench-chat-n20-d5","stream":true,"messages":[{"role":"user","content":"hi"}]}',
    ),
    "st-resp2chat-paced-n20": (
        "/v1/responses",
        b'{"model":"bench-chat-n20-d5","stream":true,"store":false,"input":"hi"}',
    ),
    "st-resp-paced-n20": (
        "/v1/responses",
        b'{"model":"bench-resp-n20-d5","stream":true,"store":false,"input":"hi"}',
    ),
    # the 20 text chunks after 180 reasoning chunks (``think180``: a reasoning model's), to a
    # Chat client (Kimi Code on Kimi K2) and a Responses one (Codex on it)
    "st-chat-think180": (
        "/v1/chat/completions",
        b'{"model":"bench-chat-n20-d0-think180","stream":true,"messages":[{"role":"user","content":"hi"}]}',
    ),
    "st-resp2chat-think180": (
        "/v1/responses",
        b'{"model":"bench-chat-n20-d0-think180","stream":true,"store":false,"input":"hi"}',
    ),
    # and on a Responses upstream: a reasoning item's 180 summary deltas (Codex on OpenAI)
    "st-resp-think180": (
        "/v1/responses",
        b'{"model":"bench-resp-n20-d0-think180","stream":true,"store":false,"input":"hi"}',
    ),
    # the 20 text chunks, then a tool call whose command streams as 182 argument deltas
    # (``args180``: a long shell command or patch) instead of 3, to a Chat client and a
    # Responses one, from a Chat upstream and a Responses one
    "st-chat-args180": (
        "/v1/chat/completions",
        b'{"model":"bench-chat-n20-d0-args180","stream":true,"messages":[{"role":"user","content":"hi"}]}',
    ),
    "st-resp2chat-args180": (
        "/v1/responses",
        b'{"model":"bench-chat-n20-d0-args180","stream":true,"store":false,"input":"hi"}',
    ),
    "st-resp-args180": (
        "/v1/responses",
        b'{"model":"bench-resp-n20-d0-args180","stream":true,"store":false,"input":"hi"}',
    ),
    # Gemini's own API (Gemini CLI's requests: the model and the stream in the path), on a
    # Gemini upstream and on a Chat one, and a Chat client on a Gemini upstream
    "ns-gem": ("/v1beta/models/bench-gem-n20-d0:generateContent", _GEMINI_BODY),
    "ns-gem2chat": ("/v1beta/models/bench-chat-n20-d0:generateContent", _GEMINI_BODY),
    "ns-chat2gem": (
        "/v1/chat/completions",
        b'{"model":"bench-gem-n20-d0","stream":false,"messages":[{"role":"user","content":"hi"}]}',
    ),
    "st-gem-n200": ("/v1beta/models/bench-gem-n200-d0:streamGenerateContent?alt=sse", _GEMINI_BODY),
    "st-gem2chat-n200": ("/v1beta/models/bench-chat-n200-d0:streamGenerateContent?alt=sse", _GEMINI_BODY),
    "st-chat2gem-n200": (
        "/v1/chat/completions",
        b'{"model":"bench-gem-n200-d0","stream":true,"messages":[{"role":"user","content":"hi"}]}',
    ),
    # the request Codex sends late in a session (bench/codex_body.py: 30 turns, ~370 KB)
    "big-resp-n20": ("/v1/responses", codex_request("bench-resp-n20-d0")),
    "big-resp2chat-n20": ("/v1/responses", codex_request("bench-chat-n20-d0")),
}
# the floor: the same requests through the reference forwarder (bench/reference.py: uvicorn and
# one httpx client, nothing else), counted alike; "ref-" + a Chat case above
REFERENCE = ("ref-ns-chat", "ref-ns-chat-hosted", "ref-st-chat-n20", "ref-st-chat-n200")
CASES.update({r: CASES[r.removeprefix("ref-")] for r in REFERENCE})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _request(path: str, body: bytes) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nhost: {HOST}\r\ncontent-type: application/json\r\n"
    return head.encode() + b"content-length: %d\r\n\r\n" % len(body) + body


def send(port: int, n: int, path: str, body: bytes) -> None:
    """``n`` requests on one keep-alive connection, each read to its end (200 required)."""
    req = _request(path, body)
    with socket.create_connection((HOST, port), timeout=60) as s:
        for _ in range(n):
            exchange(s, req)


def exchange(s: socket.socket, req: bytes) -> None:
    """One request (``_request``'s bytes) on the connection ``s``, its answer read to its end
    (200 required)."""
    s.sendall(req)
    buf = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            raise RuntimeError("the proxy closed the connection")
        buf += chunk
        head, sep, rest = buf.partition(b"\r\n\r\n")
        if not sep:
            continue
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"the proxy answered {head[:200]!r}")
        m = re.search(rb"content-length: (\d+)", head, re.I)
        if (m and len(rest) >= int(m.group(1))) or (not m and rest.endswith(b"0\r\n\r\n")):
            return


def total_instructions(dump: Path) -> int:
    """The ``summary:`` (or ``totals:``) line of a callgrind dump: instructions counted."""
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {dump}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def start_fake(pin: list[str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """The fake upstream (``bench/fake_upstream.py``) on a free port, under ``pin`` (a
    ``taskset`` prefix) when given: its process and its base URL."""
    fake = subprocess.Popen(
        [*(pin or []), sys.executable, "-m", "bench.fake_upstream", "--port", "0"], cwd=ROOT, stdout=subprocess.PIPE
    )
    assert fake.stdout is not None
    m = re.match(rb"READY (\d+)", fake.stdout.readline())
    if not m:
        _stop(fake)
        raise RuntimeError("the fake upstream did not start")
    return fake, f"http://{HOST}:{int(m.group(1))}/v1"


def proxy_config(base: str, port: int) -> dict[str, Any]:
    """The proxy's config in front of the fake upstream: ``bench-chat-*`` on its Chat side,
    ``bench-resp-*`` on its Responses side, ``bench-gem-*`` on its Gemini side, no store, no
    drain announcement."""
    return {
        "server": {"host": HOST, "port": port, "drain": {"announce_seconds": 0}},
        "store": {"enabled": False},
        "providers": proxy_providers(base),
        "models": [
            {"name": "bench-chat-*", "provider": "fake-chat"},
            {"name": "bench-resp-*", "provider": "fake-resp"},
            {"name": "bench-gem-*", "provider": "fake-gem"},
        ],
    }


def wait_listening(proc: subprocess.Popen[bytes], port: int, seconds: float, log: Path) -> None:
    """Until ``proc`` itself listens on ``port``; an error naming ``log`` if it exits first.
    (Another process may take the port between ``_free_port`` and the proxy's bind: a
    connection that succeeds proves nothing, the listening socket in ``proc``'s own file
    descriptors does.)"""
    deadline = time.monotonic() + seconds
    while not listens(proc.pid, port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the proxy did not start: see {log}")
        time.sleep(0.2)


def listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a socket listening on ``port`` (IPv4)."""
    mine = socket_inodes(pid)
    return any(lp == port and state == 0x0A and inode in mine for lp, _, state, inode in tcp_table())


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets among process ``pid``'s file descriptors (none once it is gone)."""
    out = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out


def tcp_table() -> list[tuple[int, int, int, int]]:
    """/proc/net/tcp rows: (local port, remote port, state, inode)."""
    rows = []
    with open("/proc/net/tcp", encoding="ascii") as f:
        next(f)
        for line in f:
            cols = line.split()
            rows.append(
                (int(cols[1].split(":")[1], 16), int(cols[2].split(":")[1], 16), int(cols[3], 16), int(cols[9]))
            )
    return rows


def measure(cmd: list[str], case: str, n: int, work: Path) -> int:
    path, body = CASES[case]
    fake, base = start_fake()
    proxy = None
    try:
        port = _free_port()
        (work / "config.yaml").write_text(yaml.safe_dump(proxy_config(base, port)))
        out = work / f"callgrind-{case}.out"
        argv = ["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={out}.%p"]
        if case in REFERENCE:
            argv += [sys.executable, "-m", "bench.reference", "--upstream", base, "--host", HOST, "--port", str(port)]
        else:  # the default log level: a line per request
            argv += [*cmd, "serve", "--config", str(work / "config.yaml")]
        with open(work / f"proxy-{case}.log", "wb") as log:
            proxy = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_listening(proxy, port, 300, work / f"proxy-{case}.log")
        send(port, 100, path, body)
        subprocess.run(["callgrind_control", "-z", str(proxy.pid)], check=True, capture_output=True)
        send(port, n, path, body)
        subprocess.run(["callgrind_control", "-d", str(proxy.pid)], check=True, capture_output=True)
        return total_instructions(Path(f"{out}.{proxy.pid}.1")) // n
    finally:
        if proxy is not None:
            _stop(proxy)
        _stop(fake)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--proxy-cmd", default=str(ROOT / ".venv" / "bin" / "switchboard"))
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--only", help="cases whose name matches this regex")
    args = ap.parse_args(argv)
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed (Debian: valgrind)", file=sys.stderr)
            return 2
    cases = [c for c in CASES if not args.only or re.search(args.only, c)]
    work = Path(tempfile.mkdtemp(prefix="switchboard-instr-"))
    got: dict[str, int] = {}
    print(f"proxy: {args.proxy_cmd}; {args.requests} requests per case; work dir {work}")
    print("| case | instructions per request |\n|---|---|")
    for case in cases:
        got[case] = measure(args.proxy_cmd.split(), case, args.requests, work)
        print(f"| {case} | {got[case]:,} |", flush=True)
    for proto in ("chat", "chatv", "resp", "resp2chat", "ref-chat"):
        st = f"ref-st-{proto[4:]}" if proto.startswith("ref-") else f"st-{proto}"
        a, b = got.get(f"{st}-n20"), got.get(f"{st}-n200")
        if a and b:
            per = (b - a) // 180
            print(f"| {st}: per text event | {per:,} |")
            print(f"| {st}: per stream, less its 20 text events | {a - 20 * per:,} |")
    for proto in ("chat", "resp2chat", "resp"):
        a, b = got.get(f"st-{proto}-n20"), got.get(f"st-{proto}-think180")
        if a and b:
            print(f"| st-{proto}: per reasoning event (think180 less n20, over 180) | {(b - a) // 180:,} |")
    for proto in ("chat", "resp2chat", "resp"):
        a, b = got.get(f"st-{proto}-n20"), got.get(f"st-{proto}-args180")
        if a and b:
            print(f"| st-{proto}: per argument event (args180 less n20, over 179) | {(b - a) // 179:,} |")
    for proto in ("chat", "resp", "resp2chat"):
        a, b = got.get(f"st-{proto}-n20"), got.get(f"st-{proto}-paced-n20")
        if a and b:
            print(f"| st-{proto}-paced: per chunk read alone (paced less unpaced, over 20) | {(b - a) // 20:,} |")
    for side in ("", "ref-"):
        a, b = got.get(f"{side}ns-chat"), got.get(f"{side}ns-chat-hosted")
        if a and b:
            print(f"| {side}ns-chat: a hosted API's 20 head lines (hosted less plain) | {b - a:,} |")
    for case in ("ns-chat", "ns-chat-hosted", "st-chat-n20", "st-chat-n200"):
        sw, ref = got.get(case), got.get(f"ref-{case}")
        if sw and ref:
            print(f"| {case}: Switchboard ÷ reference forwarder | {sw / ref:.2f}× |")
    for proto in ("resp", "resp2chat"):
        a, b = got.get(f"st-{proto}-n20"), got.get(f"big-{proto}-n20")
        if a and b:
            print(f"| big-{proto}: the Codex-sized body's own cost (big less st) | {b - a:,} |")
    if os.environ.get("KEEP_WORKDIR") is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
