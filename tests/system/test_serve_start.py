"""The first minute of ``switchboard serve``, as README.md tells a newcomer to run it:
``scripts/dev serve --port P`` serves the example config on P, the ready line says where
it listens, and ``/`` says where to go next."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson

E2E = Path(__file__).resolve().parent.parent / "e2e"
if str(E2E) not in sys.path:
    sys.path.insert(0, str(E2E))
from proxy_harness import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_scripts_dev_serve_takes_a_port_alone(tmp_path: Path) -> None:
    port = free_port()
    venv = Path(sys.executable).parent.parent  # the suite's own environment: installed already
    env = {**os.environ, "SWITCHBOARD_VENV": str(venv), "XDG_STATE_HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    env.pop("SWITCHBOARD_API_KEY", None)
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(ROOT / "scripts" / "dev"), "serve", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            process_group=0,
        )
    try:
        deadline = time.monotonic() + 240  # the install step checks every pinned package first
        ready: dict | None = None
        while ready is None and time.monotonic() < deadline and proc.poll() is None:
            for line in log.read_bytes().splitlines():
                if b'"ready"' in line:
                    ready = orjson.loads(line)
            time.sleep(0.2)
        assert ready is not None, log.read_text()
        assert ready["listen"] == f"http://127.0.0.1:{port}"
        r = httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
        assert r.status_code == 200 and r.json()["health"] == "/healthz", r.text
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).json() == {"status": "ok"}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
