"""Proxy process management for the e2e suite (used by conftest fixtures).

Theory of operation
-------------------
``Proxy(config, workdir).start()`` writes the Switchboard YAML config, starts
``<repo>/.venv/bin/python -m app.cli serve --config ... --host 127.0.0.1 --port <free>``
in its own process group (stdout+stderr to ``workdir/proxy.log``), polls ``GET /readyz``
until 200 and ``/v1/models`` lists this instance's unique probe model (so a foreign
server that grabbed the port is never mistaken for ours), and ``stop()`` sends SIGTERM to that PID's group, then SIGKILL after 5 s.
A proxy that exits or never gets ready fails the test with its log attached.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from scripted_upstream import ScriptedUpstream

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PROXY_CLIENT_KEY = "sk-e2e-client"  # what clients send to the proxy
UPSTREAM_KEY = "sk-e2e-upstream"  # what the proxy must send upstream (never the client's)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# One client for the readiness polls of every proxy this process starts: ``httpx.get`` builds
# a client, and with it an SSL context, at every call (~25 ms of CPU each, some ten per start)
_POLL: httpx.Client | None = None


def _poll_client() -> httpx.Client:
    global _POLL
    if _POLL is None:
        _POLL = httpx.Client(trust_env=False)  # (loopback only: no proxy from the environment)
    return _POLL


def proxy_python() -> Path:
    return REPO / ".venv" / "bin" / "python"


def proxy_available() -> str | None:
    """None when the proxy can be started, else why not."""
    if not (REPO / "app" / "cli.py").exists():
        return f"proxy not present: {REPO / 'app' / 'cli.py'} does not exist yet"
    if not proxy_python().exists():
        return f"no venv python at {proxy_python()}"
    return None


class Proxy:
    def __init__(self, config: dict, workdir: Path, startup_timeout: float = 30.0, args: tuple[str, ...] = ()):
        # a test's proxy has no load balancer to warn: stop() need not wait for the drain's
        # announce window (3 s by default); a test of the drain sets its own
        server = config.setdefault("server", {})
        server.setdefault("drain", {"announce_seconds": 0})
        # a test's stored responses stay in its own folder, never in the user's state dir
        store = config.setdefault("store", {})
        if store.get("backend", "sqlite") == "sqlite":
            store.setdefault("path", str(workdir / "responses.db"))
        self.config = config
        self.workdir = workdir
        self.port = free_port()
        self.cfg_path = workdir / "switchboard.yaml"
        self.log_path = workdir / "proxy.log"
        self.proc: subprocess.Popen | None = None
        self.startup_timeout = startup_timeout
        self.probe = f"e2e-probe-{uuid.uuid4().hex[:12]}"
        self.args = list(args)  # more `switchboard serve` options (--workers N)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def log(self, tail: int = 6000) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-tail:]
        except OSError:
            return "<no proxy log>"

    def start(self, attempts: int = 3) -> Proxy:
        """Start and wait for readiness.  Other suites run proxies on this machine too, so
        a free port can be taken between our probe and the bind, and a foreign proxy could
        answer our /readyz: the config carries a probe model with a unique name, and we
        only accept a server that lists it (and whose process is still ours and alive)."""
        why = proxy_available()
        if why:
            pytest.fail(why)
        self.workdir.mkdir(parents=True, exist_ok=True)
        models = self.config.get("models") or []
        if models and not any(m["name"].startswith("e2e-probe-") for m in models):
            self.config["models"] = models + [{"name": self.probe, "provider": models[0]["provider"]}]
        self.cfg_path.write_text(yaml.safe_dump(self.config, sort_keys=False, allow_unicode=True), encoding="utf-8")
        failures = []
        for _ in range(attempts):
            ok, why = self._start_once()
            if ok:
                return self
            failures.append(why)
            self.stop()
            self.port = free_port()
        pytest.fail("proxy did not start:\n" + "\n---\n".join(failures))

    def _start_once(self) -> tuple[bool, str]:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_PROXY") and not k.endswith("_proxy")}
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
        env["PYTHONUNBUFFERED"] = "1"
        argv = [
            str(proxy_python()),
            "-m",
            "app.cli",
            "serve",
            "--config",
            str(self.cfg_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *self.args,
        ]
        logf = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            argv,
            cwd=str(REPO),
            env=env,
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        logf.close()
        key = ((self.config.get("auth") or {}).get("keys") or [""])[0]
        deadline = time.monotonic() + self.startup_timeout
        last = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False, (
                    f"proxy exited rc={self.proc.returncode} during startup (port {self.port})\n"
                    f"config:\n{self.cfg_path.read_text()}\nlog:\n{self.log()}"
                )
            try:
                r = _poll_client().get(f"{self.url}/readyz", timeout=1.0)
                if r.status_code == 200:
                    m = _poll_client().get(
                        f"{self.base_url}/models", timeout=2.0, headers={"authorization": f"Bearer {key}"}
                    )
                    ids = [d.get("id") for d in (m.json().get("data") or [])] if m.status_code == 200 else []
                    if self.probe in ids and self.proc.poll() is None:
                        return True, ""
                    last = f"/v1/models on port {self.port} -> {m.status_code}, probe model missing (foreign server?)"
                else:
                    last = f"/readyz -> {r.status_code} {r.text[:300]}"
            except (httpx.HTTPError, ValueError) as exc:
                last = repr(exc)
            time.sleep(0.1)
        return False, f"proxy not ready after {self.startup_timeout}s ({last})\nlog:\n{self.log()}"

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


def provider_entry(
    up: ScriptedUpstream,
    *,
    name: str = "scripted",
    profile: str = "openai-compatible",
    protocol: str = "chat",
    **extra: Any,
) -> dict:
    return {
        "name": name,
        "profile": profile,
        "protocol": protocol,
        "base_url": up.base_url,
        "api_key": UPSTREAM_KEY,
        "timeouts": {"connect": 5, "first_byte": 30, "idle": 30},
        **extra,
    }
