"""Fixtures for the end-to-end suite: scripted upstreams, the proxy process, Codex CLI.

Theory of operation
-------------------
* ``upstream(turns, name)`` starts a ``ScriptedUpstream`` on 127.0.0.1 (port 0) in a
  background thread; all are stopped at teardown.
* ``proxy(providers=..., models=...)`` writes a Switchboard YAML config into ``tmp_path``
  and starts ``<repo>/.venv/bin/python -m app.cli serve --config ... --host 127.0.0.1
  --port <free>`` in its own process group, waits for ``GET /readyz`` == 200 and stops it
  at teardown (SIGTERM to that PID's group, then SIGKILL).  The proxy log is kept in
  ``tmp_path`` and attached to assertion messages via ``Proxy.log()``.
  ``proxy_for(upstream, profile=..., protocol=..., model=...)`` is the one-provider,
  one-model shortcut used by most tests.
* ``openai_sdk(name)`` (session) installs ``requirements-<name>.lock`` (``openai2``: the
  newest 2.x SDK, ``openai3``: the newest 3.x) into ``<repo>/.e2e/<name>`` and gives its
  python; the SDK checks run there as a subprocess (``client_checks.run_sdk_checks``).
* ``codex`` (session) installs ``@openai/codex@0.169.0`` under ``<repo>/.e2e/codex-0.169.0``
  (a missing node/npm FAILS the test); ``codex_at(version)`` does the same for any version
  (``codex_harness.CODEX_VERSIONS``: 0.169.0 and the newest, 0.171.0);
  ``codex_run(prompt, base_url=..., model=..., version=None, provider="custom",
  supports_websockets=False)`` runs ``codex exec --json`` once in a fresh workspace +
  CODEX_HOME under ``tmp_path`` (``provider="openai"``: Codex's built-in provider with
  ``openai_base_url`` pointed at the proxy).
* every test is bounded by ``TEST_TIME_LIMIT`` (SIGALRM) besides the per-process timeouts.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import codex_harness  # noqa: E402
from procs import close_job_servers  # noqa: E402
from proxy_harness import PROXY_CLIENT_KEY, REPO, Proxy, provider_entry  # noqa: E402
from scripted_upstream import ScriptedUpstream  # noqa: E402

TEST_TIME_LIMIT = 150  # seconds per e2e test, on top of the per-process timeouts


@pytest.fixture(autouse=True)
def _time_limit(request):
    """Hard upper bound per test (SIGALRM in the main thread); processes are reaped by
    the fixtures' own teardown, which still runs after the alarm fires."""

    def on_alarm(signum, frame):
        raise TimeoutError(f"e2e test exceeded {TEST_TIME_LIMIT}s: {request.node.nodeid}")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(TEST_TIME_LIMIT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="session", autouse=True)
def _job_servers():
    """The client drivers kept running across tests (``procs.JobServer``) stop with the session."""
    yield
    close_job_servers()


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


# --------------------------------------------------------------------------- upstream


@pytest.fixture
def upstream():
    started: list[ScriptedUpstream] = []

    def make(turns, name: str = "") -> ScriptedUpstream:
        up = ScriptedUpstream(turns, name=name).start()
        started.append(up)
        return up

    yield make
    for up in started:
        up.stop()


# --------------------------------------------------------------------------- proxy


@pytest.fixture
def proxy(tmp_path):
    started: list[Proxy] = []

    def start(
        *, providers: list[dict], models: list[dict], auth_keys: list[str] | None = None, server: dict | None = None
    ) -> Proxy:
        cfg = {
            "server": {"host": "127.0.0.1", "port": 0, **(server or {})},
            "auth": {"keys": auth_keys if auth_keys is not None else [PROXY_CLIENT_KEY]},
            "providers": providers,
            "models": models,
        }
        p = Proxy(cfg, tmp_path / f"proxy{len(started)}")
        started.append(p)
        return p.start()

    yield start
    for p in started:
        p.stop()


@pytest.fixture
def proxy_for(proxy):
    """One scripted upstream behind the proxy under one client-facing model name."""

    def make(
        up: ScriptedUpstream,
        *,
        model: str,
        profile: str = "openai-compatible",
        protocol: str = "chat",
        upstream_model: str | None = None,
        provider_extra: dict | None = None,
        model_extra: dict | None = None,
        server: dict | None = None,
    ) -> Proxy:
        prov = provider_entry(up, profile=profile, protocol=protocol, **(provider_extra or {}))
        m = {"name": model, "provider": prov["name"], **(model_extra or {})}
        if upstream_model:
            m["upstream_model"] = upstream_model
        return proxy(providers=[prov], models=[m], server=server)

    return make


# --------------------------------------------------------------------------- openai SDKs in venvs


@pytest.fixture(scope="session")
def openai_sdk():
    """``get(name)``: the python of ``<repo>/.e2e/<name>``, where ``requirements-<name>.lock``
    (an openai SDK release, hash-locked) is installed on first use."""
    from client_checks import SdkUnavailable, ensure_sdk

    installed: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in installed:
            try:
                installed[name] = ensure_sdk(REPO, name)
            except SdkUnavailable as exc:
                pytest.fail(str(exc))
        return installed[name]

    return get


# --------------------------------------------------------------------------- Codex


@pytest.fixture(scope="session")
def codex_at():
    installed: dict[str, Path] = {}

    def get(version: str = codex_harness.CODEX_VERSION) -> Path:
        if version not in installed:
            try:
                installed[version] = codex_harness.ensure_codex(REPO, version)
            except codex_harness.CodexUnavailable as exc:
                pytest.fail(str(exc))
        return installed[version]

    return get


@pytest.fixture(scope="session")
def codex(codex_at) -> Path:
    return codex_at(codex_harness.CODEX_VERSION)


@pytest.fixture
def codex_run(codex, codex_at, tmp_path):
    counter = iter(range(1000))

    def run(
        prompt: str,
        *,
        base_url: str,
        model: str,
        timeout: float = 90,
        api_key: str = PROXY_CLIENT_KEY,
        catalog_overrides: dict | None = None,
        version: str | None = None,
        **kw,
    ) -> codex_harness.CodexRun:
        n = next(counter)
        launcher = codex if version is None else codex_at(version)
        catalog = {"models": [codex_harness.catalog_entry(launcher, model, **(catalog_overrides or {}))]}
        return codex_harness.run_codex(
            launcher,
            prompt,
            base_url=base_url,
            model=model,
            workspace=tmp_path / f"ws{n}",
            home=tmp_path / f"codex_home{n}",
            catalog=catalog,
            api_key=api_key,
            timeout=timeout,
            **kw,
        )

    return run
