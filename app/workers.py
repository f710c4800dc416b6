"""``switchboard serve --workers N``: N worker processes, each with its own listening socket.

Theory of operation
-------------------
uvicorn's own supervisor binds one socket and every worker accepts from it: whichever
worker wakes first takes the connection, so a handful of long-lived keep-alive connections
(what agents and load balancers open) tend to pile onto one worker while the other idles.
Here every worker binds the same address with ``SO_REUSEPORT`` and the kernel spreads new
connections over the workers' sockets by a hash of the connection's addresses.

The supervisor (``run``):

1. binds a socket with ``SO_REUSEPORT`` to the address *without listening on it*: the port
   is taken (an address in use fails at once, with one message) and a port 0 becomes a
   concrete port the workers then share; a socket that does not listen receives no
   connection;
2. starts the workers: ``switchboard serve --reuse-port`` on that port, one process each,
   each binding its own socket and listening only once its app is up (a worker starting,
   or started again, gets no connection before it can serve), in a process group of their
   own, so a terminal's Ctrl-C reaches them once, through the supervisor, not twice (a
   second signal would force their drain);
3. passes every SIGTERM/SIGINT it gets to every worker: the first starts each worker's
   drain (``app.drain``), a second ends it at once, as with one process; and every SIGHUP
   (each worker reloads its keys' limits, ``Service.reload``; nothing stops);
4. restarts a worker that exits while no signal came (after ``_RESTART_DELAY``), and gives
   up, stopping the others, when workers keep failing within ``_CRASH_WINDOW`` seconds of
   their start (``_CRASH_LIMIT`` times in a row): a config that cannot serve exits instead of
   looping;
5. exits once every worker has: 0 when all ended cleanly.

Metrics: the supervisor creates a private directory (``tempfile.mkdtemp``: mode 0700) for
the instance and passes it to every worker as ``PROMETHEUS_MULTIPROC_DIR``: each worker's
metrics live in memory-mapped files there, and any worker's ``GET /metrics`` merges them
(``app/metrics.py``), so one scrape answers for the whole instance.  A worker that exits
is marked dead (``prometheus_client.multiprocess.mark_process_dead``: its gauges leave
the scrape; its counts stay in the sums, which never go back) and its files are folded into
one file of exited workers (``app.metrics.fold_exited``), so restarts do not pile files up;
the directory is removed when the supervisor exits.

A worker whose supervisor dies is sent SIGTERM by the kernel (``PR_SET_PDEATHSIG``, Linux)
and drains like any other: orphans do not keep serving a port nobody manages.

Where the platform has no ``SO_REUSEPORT`` the CLI falls back to uvicorn's supervisor.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.multiprocess import mark_process_dead

from app.logs import log
from app.metrics import fold_exited

_RESTART_DELAY = 1.0  # seconds before a worker that exited by itself is started again
_CRASH_WINDOW = 10.0  # a worker that exits this soon after its start counts as a crash
_CRASH_LIMIT = 5  # crashes in a row after which the supervisor gives up
_POLL = 0.1  # seconds between looks at the workers
SUPERVISOR_ENV = "SWITCHBOARD_SUPERVISOR_PID"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's multiprocess mode (app/metrics.py)


def available() -> bool:
    return hasattr(socket, "SO_REUSEPORT")


def _address(host: str, port: int) -> tuple[int, Any]:
    family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    return family, addr


def reuseport_socket(host: str, port: int, *, listen: bool, backlog: int = 2048) -> socket.socket:
    """A TCP socket bound to ``host:port`` with SO_REUSEADDR and SO_REUSEPORT, listening or
    not (a socket that does not listen is not offered connections)."""
    family, addr = _address(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(addr)
        if listen:
            sock.listen(backlog)
            sock.set_inheritable(True)
    except BaseException:
        sock.close()
        raise
    return sock


@contextlib.contextmanager
def metrics_dir() -> Iterator[str]:
    """A private directory for the workers' metrics files (``PROMETHEUS_MULTIPROC_DIR``),
    removed on the way out."""
    path = tempfile.mkdtemp(prefix="switchboard-metrics-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def metrics_env() -> Iterator[str]:
    """``metrics_dir()`` as this process's ``PROMETHEUS_MULTIPROC_DIR`` (for the workers it
    starts: uvicorn's supervisor), the variable as it was afterwards."""
    before = os.environ.get(MULTIPROC_ENV)
    with metrics_dir() as path:
        os.environ[MULTIPROC_ENV] = path
        try:
            yield path
        finally:
            if before is None:
                os.environ.pop(MULTIPROC_ENV, None)
            else:
                os.environ[MULTIPROC_ENV] = before


def die_with_parent() -> None:
    """In a worker: SIGTERM from the kernel when the supervisor dies (Linux), and exit now
    if it is already gone."""
    expected = os.environ.get(SUPERVISOR_ENV)
    if expected is None:
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the supervisor's own signals still reach it
        pass
    if str(os.getppid()) != expected:
        sys.exit(0)


class Supervisor:
    def __init__(self, argv: list[str], n: int, host: str, port: int) -> None:
        """``argv``: the worker command without its address (``--host``/``--port`` are added)."""
        self.argv = argv
        self.n = n
        self.host = host
        self.port = port
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * n
        self.started_at = [0.0] * n
        self.crashes = 0
        self.signals: list[int] = []  # received, not yet passed on
        self.stopping = False
        self.failed = False
        self.metrics_dir = ""  # the workers' PROMETHEUS_MULTIPROC_DIR (made by run())

    def _spawn(self, i: int) -> None:
        env = {**os.environ, SUPERVISOR_ENV: str(os.getpid())}
        if self.metrics_dir:
            env[MULTIPROC_ENV] = self.metrics_dir
        cmd = [*self.argv, "--host", self.host, "--port", str(self.port), "--reuse-port"]
        self.procs[i] = subprocess.Popen(cmd, env=env, process_group=0)
        self.started_at[i] = time.monotonic()

    def _on_signal(self, sig: int, _: Any) -> None:
        self.signals.append(sig)

    def _pass_on(self) -> None:
        while self.signals:
            sig = self.signals.pop(0)
            if sig == signal.SIGHUP:  # reload (app/main.py Service.reload): each worker, none stops
                log.info("workers_reloading", workers=self.n)
                for p in self.procs:
                    if p is not None and p.poll() is None:
                        with contextlib.suppress(ProcessLookupError):
                            p.send_signal(sig)
                continue
            if not self.stopping:
                log.info("workers_stopping", signal=signal.Signals(sig).name, workers=self.n)
            self._signal_all(sig)

    def _signal_all(self, sig: int) -> None:
        self.stopping = True
        for p in self.procs:
            if p is not None and p.poll() is None:
                with contextlib.suppress(ProcessLookupError):  # exited since poll()
                    p.send_signal(sig)

    def run(self) -> int:
        try:
            reserve = reuseport_socket(self.host, self.port, listen=False)
        except OSError as e:
            print(f"switchboard: cannot bind {self.host}:{self.port}: {e.strerror or e}", file=sys.stderr)
            return 1
        self.port = reserve.getsockname()[1]
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        try:
            with metrics_dir() as self.metrics_dir:
                for i in range(self.n):
                    self._spawn(i)
                log.info("workers_started", workers=self.n, host=self.host, port=self.port, pids=self._pids())
                return self._watch()
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
            reserve.close()

    def _dead(self, pid: int) -> None:
        """Worker ``pid`` exited: its live gauges leave the instance's scrape, and its
        counts move into the directory's file of exited workers (``fold_exited``)."""
        if self.metrics_dir:
            mark_process_dead(pid, self.metrics_dir)
            try:
                fold_exited(self.metrics_dir, pid)
            except (OSError, ValueError) as e:  # (its files stay, and are counted as before)
                log.warning("metrics_fold_failed", pid=pid, error=str(e)[:200])

    def _pids(self) -> list[int]:
        return [p.pid for p in self.procs if p is not None]

    def _watch(self) -> int:
        codes: dict[int, int] = {}
        restart_at: dict[int, float] = {}
        while True:
            self._pass_on()
            now = time.monotonic()
            for i, p in enumerate(self.procs):
                if p is None:
                    if not self.stopping and now >= restart_at.get(i, 0.0):
                        restart_at.pop(i, None)
                        self._spawn(i)
                        log.info("worker_restarted", worker=i, pid=self.procs[i].pid)  # type: ignore[union-attr]
                    continue
                code = p.poll()
                if code is None:
                    continue
                if i not in codes:
                    self._dead(p.pid)
                if self.stopping:
                    codes[i] = code
                    continue
                self.procs[i] = None
                quick = now - self.started_at[i] < _CRASH_WINDOW
                self.crashes = self.crashes + 1 if quick else 1
                log.warning("worker_exited", worker=i, pid=p.pid, code=code, crashes=self.crashes)
                if self.crashes >= _CRASH_LIMIT:
                    log.error("workers_failing", crashes=self.crashes, message="workers keep exiting; stopping")
                    self.failed = True
                    self._signal_all(signal.SIGTERM)
                    continue
                restart_at[i] = now + _RESTART_DELAY
            if self.stopping and all(p is None or p.poll() is not None for p in self.procs):
                for i, p in enumerate(self.procs):
                    if p is not None:
                        codes[i] = p.returncode
                if self.failed:
                    return 1
                return 0 if all(c == 0 for c in codes.values()) else 1
            time.sleep(_POLL)
