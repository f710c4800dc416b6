"""A real Redis Cluster on 127.0.0.1 for the system tests: three primaries, one replica each.

Six ``redis-server`` processes (the machine's, else Debian's: ``redis_server()``), each on a
free port with its cluster bus on another free port (``--cluster-port``), nothing persisted
(``--save '' --appendonly no``) and a node timeout of ``NODE_TIMEOUT_MS``, so that a killed
primary's replica takes over within about two seconds.  The cluster is made from Python
(``CLUSTER MEET``, ``ADDSLOTSRANGE``, ``REPLICATE``): no ``redis-cli`` is needed.  Every
process is stopped by its own PID; ``kill(node)`` sends SIGKILL to one of them.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from redis import Redis

from tests.system.test_limits_cluster import free_port, redis_server

NODE_TIMEOUT_MS = 1000
_RANGES = ((0, 5460), (5461, 10922), (10923, 16383))


def _ports(n: int) -> list[int]:
    """``n`` distinct free ports (free_port alone may hand one out twice in a row)."""
    got: list[int] = []
    while len(got) < n:
        p = free_port()
        if p not in got:
            got.append(p)
    return got


class Node:
    def __init__(self, workdir: Path, port: int, bus: int) -> None:
        self.port = port
        self.bus = bus
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self.id = ""

    def start(self) -> None:
        argv = [redis_server(), "--port", str(self.port), "--bind", "127.0.0.1", "--protected-mode", "no"]
        argv += ["--save", "", "--appendonly", "no", "--dir", str(self.workdir)]
        argv += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port", str(self.bus)]
        argv += ["--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--repl-diskless-sync-delay", "0"]
        argv += ["--repl-ping-replica-period", "1"]  # (a replica is listed once its offset moved)
        with open(self.workdir / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def client(self) -> Redis:
        return Redis(port=self.port, socket_timeout=2, decode_responses=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        p = self.proc
        if p is None or p.poll() is not None:
            return
        p.send_signal(sig)  # (this PID only)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)

    def log(self) -> str:
        path = self.workdir / "redis.log"
        return path.read_text(errors="replace")[-1500:] if path.exists() else ""


class LoopbackCluster:
    """Three primaries (``nodes[0:3]``) and their replicas (``nodes[3:6]``, in order)."""

    def __init__(self, workdir: Path) -> None:
        ports = _ports(12)
        self.nodes = [Node(workdir / f"node{i}", ports[2 * i], ports[2 * i + 1]) for i in range(6)]

    @property
    def url(self) -> str:
        """Every node, as ``store.url`` names several (any one that answers finds the rest)."""
        return "redis://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes) + "/0"

    @property
    def seed(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> None:
        for n in self.nodes:
            n.start()
        try:
            self._wait(lambda: all(n.client().ping() for n in self.nodes), "the nodes to answer")
            for n in self.nodes:
                n.id = n.client().execute_command("CLUSTER", "MYID")
            first = self.nodes[0].client()
            for n in self.nodes[1:]:
                first.execute_command("CLUSTER", "MEET", "127.0.0.1", n.port, n.bus)
            for n, (lo, hi) in zip(self.nodes[:3], _RANGES):
                n.client().execute_command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
            self._wait(lambda: all(self._knows_all(n) for n in self.nodes), "the nodes to meet")
            for replica, primary in zip(self.nodes[3:], self.nodes[:3]):
                replica.client().execute_command("CLUSTER", "REPLICATE", primary.id)
            self._wait(self.healthy, "the cluster to be ok with its replicas in sync")
        except BaseException:
            self.stop()
            raise

    def _knows_all(self, n: Node) -> bool:
        lines = n.client().execute_command("CLUSTER", "NODES")
        text = lines if isinstance(lines, str) else str(lines)
        return text.count("connected") >= 6 and "handshake" not in text

    def healthy(self) -> bool:
        """Every node says the cluster is ok and lists a replica for each range of slots
        (what a client reads), and every replica is in sync."""
        for n in self.nodes:
            c = n.client()
            if c.execute_command("CLUSTER", "INFO").find("cluster_state:ok") < 0:
                return False
            if any(len(r) < 4 for r in c.execute_command("CLUSTER", "SLOTS")):
                return False
            info = c.info("replication")
            if info["role"] == "slave" and info.get("master_link_status") != "up":
                return False
        return True

    def primary_of(self, key: str) -> Node:
        """The node serving ``key``'s slot now."""
        live = [n for n in self.nodes if n.alive()]
        slot = live[0].client().execute_command("CLUSTER", "KEYSLOT", key)
        for n in live:
            for lo, hi, primary, *_ in n.client().execute_command("CLUSTER", "SLOTS"):
                if lo <= slot <= hi:
                    return next(m for m in self.nodes if m.port == int(primary[1]))
        raise AssertionError(f"no node serves slot {slot}")

    def roles(self) -> dict[int, str]:
        return {n.port: n.client().info("replication")["role"] for n in self.nodes if n.alive()}

    def _wait(self, ok: object, what: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if ok():  # type: ignore[operator]
                    return
            except Exception as e:  # (a node still starting)
                last = e
            time.sleep(0.05)
        logs = "\n".join(f"--- node {n.port} ---\n{n.log()}" for n in self.nodes)
        pytest.fail(f"waited {timeout}s for {what} (last error: {last!r})\n{logs}")

    def stop(self) -> None:
        for n in self.nodes:  # (SIGTERM to all first: they shut down together)
            if n.alive():
                n.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        for n in self.nodes:
            n.stop()
