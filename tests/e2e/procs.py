"""Running a real client in the e2e tests: its own process group, bounded in time, and
nothing of it left behind (the tools it ran included), stopped by that group's PID only;
installing one under ``.e2e/`` while no other test process installs into the same folder."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# Node's module compile cache (Node >= 22.1; older ones ignore it) for the Node clients the
# suite runs many times (Kimi Code, the AI SDK driver): V8's code for each module, on disk,
# checked against the module's source, so a later run skips compiling the same bundle again
# (~0.5 s of CPU a Kimi Code run). Node reads or writes it quietly and compiles as usual
# where it cannot.
NODE_COMPILE_CACHE = {"NODE_COMPILE_CACHE": str(Path(__file__).resolve().parents[2] / ".e2e" / "node-compile-cache")}


def answers_version(stamp: Path, files: list[Path], version: str, ask: Callable[[], str | None]) -> bool:
    """Whether the client made of ``files`` answers ``version`` to its ``--version``, which
    ``ask`` runs (a second or more of CPU for a JavaScript bundle, once per test process):
    ``stamp`` keeps the answer for those files as they are (path, size, mtime), so it is
    asked again only after one of them changed (a reinstall)."""
    try:
        key = json.dumps([version, [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files]])
    except OSError:
        return False
    try:
        if stamp.read_text(encoding="utf-8") == key:
            return True
    except OSError:
        pass
    if ask() != version:
        return False
    tmp = stamp.with_name(f"{stamp.name}.{os.getpid()}")
    tmp.write_text(key, encoding="utf-8")
    os.replace(tmp, stamp)  # whole or not at all: another test process may read it
    return True


@contextmanager
def installing(prefix: Path) -> Iterator[None]:
    """Held while a client is looked for and, if missing, installed under ``prefix``: the
    suite runs on several pytest-xdist workers, and the first tests of two of them must not
    install into one folder at once. The second waits on the first's lock file, then finds
    the install made."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with open(prefix.parent / f".{prefix.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool


def run_group(
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float, stdin_text: str | None = None
) -> Finished:
    """Run ``argv`` with stdin closed (or fed ``stdin_text``, then closed) in a new process
    group; on timeout the group is killed; afterwards whatever is left in the group (a
    tool's children) is reaped."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=str(cwd),
        env=env,
        stdin=subprocess.DEVNULL if stdin_text is None else subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # own process group: killable by its PID alone
    )
    timed_out = False
    try:
        out, err = proc.communicate(input=stdin_text, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
    finally:
        if proc.poll() is None:  # pragma: no cover
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        try:  # reap whatever is left in the group (exec'd tool processes)
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return Finished(proc.returncode, out, err, time.monotonic() - t0, timed_out)


def toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid TOML basic string


def describe_run(head: str, events: list[dict], non_json: list[str], stderr: str, stderr_tail: int) -> str:
    """A client run for a failing assertion: its JSON events, other stdout, stderr's tail."""
    return (
        head
        + "\n".join(json.dumps(e, ensure_ascii=False)[:600] for e in events)
        + ("\n--- non-json stdout ---\n" + "\n".join(non_json[-20:]) if non_json else "")
        + f"\n--- stderr (tail) ---\n{stderr[-stderr_tail:]}"
    )


def json_lines(stdout: str) -> tuple[list[dict], list[str]]:
    """A client's ``--json``/``stream-json`` output: its JSON objects, and the other lines."""
    events: list[dict] = []
    other: list[str] = []
    for line in stdout.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            ev = None
        if isinstance(ev, dict):
            events.append(ev)
        else:
            other.append(line)
    return events, other


# --------------------------------------------------------------------------- a driver kept running


class JobServer:
    """A client driver started once and given one job after another: ``argv`` (a driver
    run with ``--serve``: ``answer_jobs``) reads one JSON job per line on stdin and writes
    one JSON answer per line on stdout, so the interpreter and the client library it
    imports (a second or more of CPU for the Agents SDK) start once per test process, not
    once per job. Each job builds its own client, as a one-shot run does.

    ``run(job, timeout)`` sends the job and waits for its answer; a driver that takes
    longer is killed (its process group, by its PID) and the next job starts a new one, as
    does a driver that died. The driver exits when its stdin closes (``close()``, or this
    process ending). Its stderr goes to a file, shown when it fails."""

    def __init__(self, argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.cwd = cwd
        self.env = env
        self.proc: subprocess.Popen | None = None
        self._err = None
        self._buf = b""

    def _start(self) -> subprocess.Popen:
        import tempfile

        self._err = tempfile.TemporaryFile()
        self._buf = b""
        self.proc = subprocess.Popen(
            self.argv,
            cwd=None if self.cwd is None else str(self.cwd),
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            start_new_session=True,  # own process group: killable by its PID alone
        )
        _JOB_SERVERS.append(self)
        return self.proc

    def stderr(self, tail: int = 3000) -> str:
        if self._err is None:
            return ""
        self._err.seek(0)
        return self._err.read().decode("utf-8", "replace")[-tail:]

    def run(self, job: dict, timeout: float) -> dict:
        """The driver's answer to ``job``; ``RuntimeError`` if it died or timed out."""
        import select

        proc = self.proc if self.proc is not None and self.proc.poll() is None else self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(job).encode() + b"\n")
            proc.stdin.flush()
        except OSError:
            pass  # it died: reported below, with its stderr
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                err = self.stderr()
                self.close(kill=True)
                raise RuntimeError(f"{self.argv[:2]} gave no answer within {timeout}s:\n{err}")
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    proc.wait()
                    err = self.stderr()
                    self.close(kill=True)
                    raise RuntimeError(f"{self.argv[:2]} exited {proc.returncode}:\n{err}")
                self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    def close(self, kill: bool = False) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if not kill:
            try:
                proc.stdin.close()  # type: ignore[union-attr]
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        try:  # the group, by the driver's PID: whatever a tool left too
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()  # type: ignore[union-attr]
            except OSError:
                pass
        if self in _JOB_SERVERS:
            _JOB_SERVERS.remove(self)


_JOB_SERVERS: list[JobServer] = []


def close_job_servers() -> None:
    """Stop every driver this process started (the e2e conftest, at the session's end)."""
    for server in list(_JOB_SERVERS):
        server.close()


def answer_jobs(handle: Callable[[dict], dict]) -> int:
    """A driver's ``--serve`` loop: one JSON job per stdin line, ``handle(job)``'s answer as
    one JSON line on stdout, until stdin closes. Anything else written to stdout (a
    library's print) goes to stderr, so it cannot break the framing."""
    import sys

    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if line.strip():
            out.write(json.dumps(handle(json.loads(line)), ensure_ascii=False) + "\n")
            out.flush()
    return 0
