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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


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
