"""The ``--workers N`` supervisor (app/workers.py), in this process, with small Python
scripts as its workers: signals passed on, restarts, giving up, the reserved port.
``tests/system/test_workers.py`` runs it with real ``switchboard serve`` workers."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from app import workers
from app.workers import Supervisor

# a worker: notes its arguments and each signal in DIR/<pid>, exits 0 on SIGTERM/SIGINT
WORKER = """
import os, signal, sys, time
d = sys.argv[1]
path = os.path.join(d, str(os.getpid()))
with open(path, "a") as f:
    f.write(" ".join(sys.argv[2:]) + "\\n")
mode = sys.argv[2]
if mode == "crash":
    sys.exit(3)
if mode == "crash-once":
    try:  # the one worker that creates the mark crashes (workers start together: no check-then-create)
        os.close(os.open(os.path.join(d, "crashed"), os.O_CREAT | os.O_EXCL))
        sys.exit(3)
    except FileExistsError:
        pass
def on(sig, _):
    with open(path, "a") as f:
        f.write(f"signal {sig}\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, on)
signal.signal(signal.SIGINT, on)
while True:
    time.sleep(0.05)
"""


def notes(d: Path) -> dict[int, list[str]]:
    return {int(p.name): p.read_text().splitlines() for p in d.iterdir() if p.name.isdigit()}


def wait_for(cond: Any, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def signal_later(d: Path, n: int, *sigs: int) -> threading.Thread:
    """Once ``n`` workers have written their note, send this process ``sigs`` (0.3 s apart)."""

    def run() -> None:
        wait_for(lambda: len(notes(d)) >= n)
        for s in sigs:
            time.sleep(0.3)
            os.kill(os.getpid(), s)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def supervisor(tmp_path: Path, mode: str, n: int = 2) -> Supervisor:
    return Supervisor([sys.executable, "-c", WORKER, str(tmp_path), mode], n, "127.0.0.1", 0)


def test_every_worker_gets_the_signal_and_the_supervisor_exits_0(tmp_path: Path) -> None:
    sup = supervisor(tmp_path, "run", 3)
    t = signal_later(tmp_path, 3, signal.SIGTERM)
    assert sup.run() == 0
    t.join(5)
    got = notes(tmp_path)
    assert len(got) == 3
    for lines in got.values():
        # each worker got the shared port, concrete (a port 0 was resolved by the reserving socket)
        args = lines[0].split()
        assert args[:3] == ["run", "--host", "127.0.0.1"] and args[5] == "--reuse-port"
        assert int(args[4]) == sup.port > 0
        assert lines[1:] == [f"signal {int(signal.SIGTERM)}"]
    assert signal.getsignal(signal.SIGTERM) is not sup._on_signal  # handlers given back


def test_sigint_is_passed_on_as_sigint(tmp_path: Path) -> None:
    sup = supervisor(tmp_path, "run")
    signal_later(tmp_path, 2, signal.SIGINT)
    assert sup.run() == 0
    assert all(lines[1:] == [f"signal {int(signal.SIGINT)}"] for lines in notes(tmp_path).values())


def test_a_worker_that_exits_by_itself_is_started_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "_RESTART_DELAY", 0.05)
    sup = supervisor(tmp_path, "crash-once")
    # the first worker crashes, its replacement and the second one run: 3 notes, then SIGTERM
    signal_later(tmp_path, 3, signal.SIGTERM)
    assert sup.run() == 0
    got = notes(tmp_path)
    assert len(got) == 3
    assert sum(1 for lines in got.values() if lines[-1].startswith("signal")) == 2


def test_workers_that_keep_crashing_stop_the_supervisor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "_RESTART_DELAY", 0.01)
    sup = supervisor(tmp_path, "crash")
    t0 = time.monotonic()
    assert sup.run() == 1
    assert time.monotonic() - t0 < 10
    assert sup.crashes == workers._CRASH_LIMIT
    assert len(notes(tmp_path)) >= workers._CRASH_LIMIT


def test_a_worker_failing_at_the_end_makes_the_exit_status_1(tmp_path: Path) -> None:
    script = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(2))\ntime.sleep(30)\n"
    sup = Supervisor([sys.executable, "-c", script], 1, "127.0.0.1", 0)

    def later() -> None:
        wait_for(lambda: sup.procs[0] is not None)
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=later, daemon=True).start()
    assert sup.run() == 1


def test_a_taken_port_is_one_message_and_no_worker(tmp_path: Path, capsys: Any) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        port = busy.getsockname()[1]
        sup = Supervisor([sys.executable, "-c", WORKER, str(tmp_path), "run"], 2, "127.0.0.1", port)
        assert sup.run() == 1
        assert f"cannot bind 127.0.0.1:{port}" in capsys.readouterr().err
        assert notes(tmp_path) == {}
    finally:
        busy.close()


def test_reuseport_sockets_share_a_port_and_only_listening_ones_take_connections() -> None:
    reserve = workers.reuseport_socket("127.0.0.1", 0, listen=False)
    port = reserve.getsockname()[1]
    a = workers.reuseport_socket("127.0.0.1", port, listen=True)
    b = workers.reuseport_socket("127.0.0.1", port, listen=True)
    try:
        for s in (reserve, a, b):
            assert s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
        a.settimeout(0)
        b.settimeout(0)
        clients = [socket.create_connection(("127.0.0.1", port), timeout=2) for _ in range(8)]
        time.sleep(0.1)
        accepted = 0
        for s in (a, b):
            while True:
                try:
                    conn, _ = s.accept()
                except BlockingIOError:
                    break
                conn.close()
                accepted += 1
        assert accepted == 8  # none went to the reserving socket, which does not listen
        for c in clients:
            c.close()
    finally:
        for s in (reserve, a, b):
            s.close()


def test_die_with_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(workers.SUPERVISOR_ENV, raising=False)
    workers.die_with_parent()  # not a supervised worker: nothing happens
    monkeypatch.setenv(workers.SUPERVISOR_ENV, str(os.getppid()))
    workers.die_with_parent()  # its supervisor is alive: it goes on
    monkeypatch.setenv(workers.SUPERVISOR_ENV, "1")
    if os.getppid() != 1:
        with pytest.raises(SystemExit):
            workers.die_with_parent()  # the supervisor is gone already: the worker exits


# a worker that leaves a gauge and a counter file where its metrics go, notes that place; the
# first one to start crashes (and says which it was)
METRICS_WORKER = """
import os, signal, sys, time
d = sys.argv[1]
where = os.environ["PROMETHEUS_MULTIPROC_DIR"]
pid = os.getpid()
for kind in ("gauge_livemax", "counter"):
    open(os.path.join(where, f"{kind}_{pid}.db"), "wb").close()
with open(os.path.join(d, str(pid)), "w") as f:
    f.write(where + "\\n")
try:
    fd = os.open(os.path.join(d, "crashed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    os.write(fd, str(pid).encode())
    os.close(fd)
    sys.exit(3)
except FileExistsError:
    pass
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
while True:
    time.sleep(0.05)
"""


def test_workers_share_a_private_metrics_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every worker gets the instance's own PROMETHEUS_MULTIPROC_DIR (made private, whatever
    the environment said); a worker that exits is marked dead there (its live gauges go, its
    counts stay); the directory is gone once the supervisor is."""
    monkeypatch.setattr(workers, "_RESTART_DELAY", 0.05)
    monkeypatch.setenv(workers.MULTIPROC_ENV, str(tmp_path / "not-this-one"))
    sup = Supervisor([sys.executable, "-c", METRICS_WORKER, str(tmp_path)], 2, "127.0.0.1", 0)
    seen: dict[str, Any] = {}

    def later() -> None:
        wait_for(lambda: len(notes(tmp_path)) >= 3)  # the crashed one, its replacement, the other
        where = Path(sup.metrics_dir)
        crashed = int((tmp_path / "crashed").read_text())
        wait_for(lambda: not (where / f"gauge_livemax_{crashed}.db").exists())
        seen["crashed"] = crashed
        seen["files"] = sorted(p.name for p in where.iterdir())
        seen["mode"] = where.stat().st_mode & 0o777
        os.kill(os.getpid(), signal.SIGTERM)

    t = threading.Thread(target=later, daemon=True)
    t.start()
    assert sup.run() == 0
    t.join(5)
    got = notes(tmp_path)
    assert len(got) == 3
    dirs = {lines[0] for lines in got.values()}
    assert dirs == {sup.metrics_dir} and "switchboard-metrics-" in sup.metrics_dir
    assert seen["mode"] == 0o700
    crashed = seen["crashed"]
    live = sorted(pid for pid in got if pid != crashed)
    assert seen["files"] == sorted(
        [f"counter_{crashed}.db", *(f"{kind}_{pid}.db" for pid in live for kind in ("counter", "gauge_livemax"))]
    )
    assert not Path(sup.metrics_dir).exists()


def test_metrics_env_is_set_for_the_block_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(workers.MULTIPROC_ENV, raising=False)
    with workers.metrics_env() as where:
        assert os.environ[workers.MULTIPROC_ENV] == where and os.path.isdir(where)
    assert workers.MULTIPROC_ENV not in os.environ and not os.path.exists(where)
