"""A real Prometheus for the system tests, obtained from Debian without root.

Theory of operation
-------------------
``ensure_prometheus()`` returns the path of a ``prometheus`` binary under
``<repo>/.e2e/prometheus/`` (git-ignored, like the other clients of ``.e2e``).  The first
call gets Debian's ``prometheus`` package as a plain user, touching nothing outside that
folder::

    cd .e2e/prometheus/deb && apt-get download prometheus
    dpkg-deb -x prometheus_<version>_<arch>.deb .e2e/prometheus/root

and runs ``root/usr/bin/prometheus`` from there (a static Go binary: it needs nothing else
of the package).  Later calls find it and only check that ``--version`` runs.  A missing
``apt-get``/``dpkg-deb``, a failed download or a binary that does not run fails the test
with the commands' output: the dashboard test is never skipped.  Two pytest-xdist workers
never download into the folder at once (``procs.installing``'s lock file).

``Prometheus(targets, workdir).start()`` writes its own configuration (one job,
``switchboard``, scraping the targets every second), keeps its TSDB in ``workdir``, listens
on a free loopback port, waits for ``/-/ready`` and for a first scrape of every target, and
``stop()`` ends it by its PID (SIGTERM, then SIGKILL after 5 s).  ``query(expr)`` is one
instant query of the HTTP API (``/api/v1/query``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

E2E = Path(__file__).resolve().parent.parent / "e2e"
if str(E2E) not in sys.path:
    sys.path.insert(0, str(E2E))
from proxy_harness import REPO, free_port  # noqa: E402

from tests.system.debian import answers, debian_binary  # noqa: E402

HOME = REPO / ".e2e" / "prometheus"
JOB = "switchboard"  # the scrape job's name, as in docker/prometheus.yml


def _works(exe: Path) -> bool:
    return answers(exe, ["--version"], "prometheus")


def ensure_prometheus(home: Path = HOME) -> Path:
    """``<home>/root/usr/bin/prometheus``, downloaded and unpacked if missing (see above: a
    static Go binary, it needs nothing else of the package)."""
    return debian_binary(home, ["prometheus"], "usr/bin/prometheus", _works)


class Prometheus:
    def __init__(self, targets: list[str], workdir: Path, exe: Path | None = None) -> None:
        self.targets = targets
        self.workdir = workdir
        self.exe = exe
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "prometheus.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self, tail: int = 4000) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-tail:]
        except OSError:
            return "<no prometheus log>"

    def start(self, timeout: float = 30.0) -> Prometheus:
        exe = self.exe or ensure_prometheus()
        self.workdir.mkdir(parents=True, exist_ok=True)
        cfg = self.workdir / "prometheus.yml"
        cfg.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                    "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": self.targets}]}],
                }
            ),
            encoding="utf-8",
        )
        argv = [
            str(exe),
            f"--config.file={cfg}",
            f"--storage.tsdb.path={self.workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
        with open(self.log_path, "wb") as logf:
            self.proc = subprocess.Popen(
                argv,
                cwd=str(self.workdir),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"prometheus exited rc={self.proc.returncode} at start\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        pytest.fail(f"prometheus not ready after {timeout}s\n{self.log()}")

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The result of an instant query (``data.result``); a PromQL error fails the test."""
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = r.json()
        if r.status_code != 200 or body.get("status") != "success":
            raise AssertionError(f"query failed ({r.status_code}): {expr}\n{body}")
        data = body["data"]
        return data["result"] if data["resultType"] in ("vector", "matrix") else [{"value": data["result"]}]

    def targets_up(self) -> dict[str, str]:
        """Every scrape target's health (``up``, ``down``, ``unknown``), by its address."""
        r = httpx.get(f"{self.url}/api/v1/targets", timeout=10).json()
        return {t["labels"]["instance"]: t["health"] for t in r["data"]["activeTargets"]}

    def wait_scrapes(self, n: int, timeout: float = 20.0) -> None:
        """Wait until every target was scraped successfully ``n`` more times."""

        def counts() -> dict[str, float]:
            res = self.query(f'count_over_time(up{{job="{JOB}"}}[1h]) and on (instance) up{{job="{JOB}"}} == 1')
            return {s["metric"]["instance"]: float(s["value"][1]) for s in res}

        start = counts()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = counts()
            if len(now) == len(self.targets) and all(now[t] >= start.get(t, 0) + n for t in self.targets):
                return
            time.sleep(0.2)
        raise AssertionError(f"targets not scraped {n} more times: {self.targets_up()}\n{self.log()}")

    def stop(self) -> None:
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=5)
