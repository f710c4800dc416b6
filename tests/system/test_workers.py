"""``switchboard serve --workers 2`` on real processes (app.workers).

Each worker listens on its own ``SO_REUSEPORT`` socket: connections opened together are
spread over both workers by the kernel (uvicorn's shared socket left most of them to one);
a worker that dies is started again and the port keeps answering meanwhile; a busy port
fails the start with one message; one scrape of ``/metrics`` counts what every worker
served.  The drain with workers is covered by
``tests/system/test_drain.py`` (parametrized over one process and two workers).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app import metrics
from bench.instructions import listens, socket_inodes, tcp_table

E2E = Path(__file__).resolve().parent.parent / "e2e"
if str(E2E) not in sys.path:
    sys.path.insert(0, str(E2E))
from proxy_harness import Proxy, proxy_python  # noqa: E402

KEY = "sk-workers-client"
CONFIG = {
    "auth": {"keys": [KEY]},
    "providers": [{"name": "demo", "profile": "demo"}],
    "models": [{"name": "demo", "provider": "demo"}],
    "store": {"enabled": False},
}
CONNECTIONS = 24


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[Proxy]:
    p = Proxy(dict(CONFIG), tmp_path, args=("--workers", "2")).start()
    yield p
    p.stop()


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry))
    return sorted(out)


def workers_of(p: Proxy, n: int = 2, wait: float = 15.0) -> list[int]:
    """The supervisor's ``n`` live workers, once each has its own socket listening."""
    assert p.proc is not None
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        kids = children(p.proc.pid)
        if len(kids) == n and all(listens(k, p.port) for k in kids):
            return kids
        time.sleep(0.1)
    pytest.fail(f"expected {n} listening workers, found {children(p.proc.pid)}\n{p.log()}")


def wait_dead(pid: int, limit: float = 5.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return
        except OSError:
            return
        time.sleep(0.01)
    pytest.fail(f"process {pid} still alive")


def healthz(sock: socket.socket) -> None:
    sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
    got = b""
    while b"\r\n\r\n" not in got or not got.endswith(b"}"):
        chunk = sock.recv(4096)
        assert chunk, got
        got += chunk
    assert got.startswith(b"HTTP/1.1 200"), got


def test_connections_spread_over_both_workers(proxy: Proxy) -> None:
    """24 keep-alive connections opened together: each worker holds some of them (all on one
    worker by chance: 2 × 2^-24), and every one of them answers."""
    pids = workers_of(proxy)
    conns = [socket.create_connection(("127.0.0.1", proxy.port), timeout=5) for _ in range(CONNECTIONS)]
    try:
        for c in conns:
            healthz(c)
        ports = {c.getsockname()[1] for c in conns}
        table = tcp_table()
        held: dict[int, dict[int, int]] = {}  # worker → its established sockets' inodes → client port
        for pid in pids:
            mine = socket_inodes(pid)
            held[pid] = {
                inode: rp
                for lp, rp, state, inode in table
                if lp == proxy.port and rp in ports and state == 0x01 and inode in mine
            }
        # a connection is one worker's: no socket in both
        assert not set(held[pids[0]]) & set(held[pids[1]]), held
        # every connection is held, by each worker some (a connection of an earlier test from a
        # client port used again here may not have seen its close yet: a port, not a count)
        assert set().union(*(set(h.values()) for h in held.values())) == ports, held
        assert all(held.values()), held
        for c in conns:  # still alive, on whichever worker took it
            healthz(c)
    finally:
        for c in conns:
            c.close()


def test_a_dead_worker_is_replaced_and_the_port_keeps_answering(proxy: Proxy) -> None:
    first, second = workers_of(proxy)
    os.kill(first, signal.SIGKILL)
    # gone (or a zombie: its sockets are closed).  A connection that reaches a worker's queue
    # while it dies is reset, as with any listener that closes: what a crash costs
    wait_dead(first)
    body = {"model": "demo", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(timeout=5) as c:
        for _ in range(20):  # new connections: the dead worker's socket is gone, the other answers
            hdrs = {"connection": "close", "authorization": f"Bearer {KEY}"}
            r = c.post(f"{proxy.url}/v1/chat/completions", json=body, headers=hdrs)
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
    now = workers_of(proxy)
    assert second in now and first not in now
    assert "worker_exited" in proxy.log(200_000) and "worker_restarted" in proxy.log(200_000)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_taken_port_fails_the_start_with_one_message(tmp_path: Path, workers: str) -> None:
    """One line, exit 1, and no "ready" before it: with one process as with workers."""
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        cfg = tmp_path / "c.yaml"
        cfg.write_text("providers: [{name: demo, profile: demo}]\nmodels: [{name: demo, provider: demo}]\n")
        port = str(busy.getsockname()[1])
        argv = [str(proxy_python()), "-m", "app.cli", "serve", "--config", str(cfg), "--port", port]
        argv += ["--workers", workers]
        env = {**os.environ, "XDG_STATE_HOME": str(tmp_path)}
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL, env=env)
        assert r.returncode == 1, r
        assert r.stderr.splitlines() == [f"switchboard: cannot bind 127.0.0.1:{port}: Address already in use"], r
        assert r.stdout == "", r.stdout
    finally:
        busy.close()


def metrics_dir_of(pid: int) -> str:
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    return env[b"PROMETHEUS_MULTIPROC_DIR"].decode()


def total(text: str, name: str, **labels: str) -> float:
    out = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            out += float(line.rsplit(" ", 1)[1])
    return out


def test_one_scrape_counts_every_worker(proxy: Proxy) -> None:
    """Requests on new connections land on both workers; one GET /metrics, answered by either
    worker, counts all of them (each worker's own share read from its files)."""
    pids = workers_of(proxy)
    where = {metrics_dir_of(pid) for pid in pids}
    assert len(where) == 1 and not where & {""}  # the supervisor's one private directory
    d = where.pop()
    n = 40
    with httpx.Client(timeout=10) as c:
        for i in range(n):  # a new connection each: the kernel spreads them over the workers
            hdrs = {"connection": "close", "authorization": f"Bearer {KEY}"}
            body = {"model": "demo", "stream": i % 2 == 0, "messages": [{"role": "user", "content": "hi"}]}
            r = c.post(f"{proxy.url}/v1/chat/completions", json=body, headers=hdrs)
            assert r.status_code == 200, r.text
        # (a worker counts an answer once its last byte is sent, the GenAI series last: the
        # client can have the last answer a moment before its worker counted it)
        labels = {"gen_ai_operation_name": "chat", "gen_ai_provider_name": "demo", "gen_ai_request_model": "demo"}
        deadline = time.monotonic() + 5
        while True:
            scrape = c.get(f"{proxy.url}/metrics", headers={"connection": "close"}).text
            last = total(scrape, "gen_ai_client_token_usage_count", **labels, gen_ai_token_type="output")
            if last >= n or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    served = {}
    for pid in pids:
        series = metrics.read_dir(d, pid)["switchboard_requests_total"]
        served[pid] = sum(v[0] for key, v in series.items() if ("route", "/v1/chat/completions") in key)
    assert sum(served.values()) == n and all(v > 0 for v in served.values()), served  # all on one: 2 x 2^-40
    assert total(scrape, "switchboard_requests_total", route="/v1/chat/completions", status="200") == n
    assert total(scrape, "switchboard_stream_outcomes_total", outcome="completed") == n / 2
    assert total(scrape, "switchboard_request_duration_seconds_count", route="/v1/chat/completions") == n
    assert total(scrape, "gen_ai_server_request_duration_seconds_count", **labels, error_type="") == n
    assert total(scrape, "gen_ai_server_request_duration_seconds_bucket", **labels, le="+Inf") == n
    assert total(scrape, "gen_ai_server_time_to_first_token_seconds_count", **labels) == n / 2
    outputs = total(scrape, "gen_ai_client_token_usage_count", **labels, gen_ai_token_type="output")
    assert outputs == n  # the demo provider reports its usage, streamed or not
    assert total(scrape, "gen_ai_client_token_usage_count", gen_ai_token_estimated="true") == 0
    # a worker killed: its counts move into the file of exited workers, its own files go,
    # and the next scrape (by either worker) counts the same
    os.kill(pids[0], signal.SIGKILL)
    wait_dead(pids[0])
    deadline = time.monotonic() + 10
    while any(p.name.startswith(f"{metrics.FILE_PREFIX}{pids[0]}_") for p in Path(d).iterdir()):
        assert time.monotonic() < deadline, sorted(p.name for p in Path(d).iterdir())
        time.sleep(0.05)
    assert (Path(d) / metrics.EXITED).exists()
    with httpx.Client(timeout=10) as c:
        again = c.get(f"{proxy.url}/metrics", headers={"connection": "close"}).text
    assert total(again, "switchboard_requests_total", route="/v1/chat/completions", status="200") == n
    assert total(again, "gen_ai_server_request_duration_seconds_bucket", **labels, le="+Inf") == n
    proxy.stop()
    assert not os.path.exists(d)  # the supervisor removed its directory on the way out
