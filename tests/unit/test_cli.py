"""The command line and config loading, in process: what `switchboard check-config` and
`switchboard serve` print and hand to uvicorn, and the errors a broken file gets."""

from __future__ import annotations

import gc
import importlib
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import structlog

from app import cli
from app.config import ConfigError, load_config
from app.workers import SUPERVISOR_ENV

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config.example.yaml"


@pytest.fixture(autouse=True)
def _restore_logging() -> Any:
    # `serve` exports these for its workers: unset during a test and put back as they were
    # after it, or later tests' proxies would inherit a test's log level
    names = ("SWITCHBOARD_CONFIG", "SWITCHBOARD_LOG_LEVEL")
    before = {n: os.environ.pop(n, None) for n in names}
    yield
    structlog.reset_defaults()
    for n, v in before.items():
        if v is None:
            os.environ.pop(n, None)
        else:
            os.environ[n] = v


def test_check_config_ok_says_open(capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.delenv("SWITCHBOARD_API_KEY", raising=False)
    assert cli.main(["check-config", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "OK" in out and "OPEN" in out


def test_check_config_error_exits_2_without_environment_values(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("SB_CLI_SECRET", "sk-cli-secret-value")
    bad = tmp_path / "bad.yaml"
    bad.write_text("providers:\n  - name: a\n    profile: nope\n    api_key: ${SB_CLI_SECRET}\nmodels: []\n")
    assert cli.main(["check-config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "providers[0].profile" in err and "sk-cli-secret-value" not in err


@pytest.mark.parametrize(
    "content,message",
    [
        (None, "cannot read"),
        ("providers: [\n", "not valid YAML"),
        ("- just\n- a list\n", "the top level must be a mapping"),
        ("providers:\n  - name: a\n    api_key: ${SB_CLI_UNSET_VAR}\nmodels: []\n", "SB_CLI_UNSET_VAR is not set"),
    ],
)
def test_load_config_errors_name_the_file(tmp_path: Path, content: str | None, message: str, monkeypatch: Any) -> None:
    monkeypatch.delenv("SB_CLI_UNSET_VAR", raising=False)
    f = tmp_path / "c.yaml"
    if content is not None:
        f.write_text(content)
    with pytest.raises(ConfigError, match=message) as e:
        load_config(f)
    assert str(f) in str(e.value)


def test_serve_with_workers_starts_the_reuseport_supervisor(monkeypatch: Any) -> None:
    """--workers N (N > 1): app.workers.Supervisor runs N copies of this command with
    --reuse-port on the address; uvicorn's own supervisor is not used."""
    import uvicorn

    from app import workers

    got: dict[str, Any] = {}

    def run(self: workers.Supervisor) -> int:
        got.update(argv=self.argv, n=self.n, host=self.host, port=self.port)
        return 7

    monkeypatch.setattr(workers.Supervisor, "run", run)
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: pytest.fail("uvicorn's supervisor was used"))
    args = ["serve", "--config", str(EXAMPLE), "--port", "8123", "--workers", "3", "--log-level", "warning"]
    assert cli.main(args) == 7
    assert got["n"] == 3 and got["host"] == "127.0.0.1" and got["port"] == 8123
    assert got["argv"][:4] == [sys.executable, "-P", "-m", "app.cli"]
    assert got["argv"][4:] == ["serve", "--config", str(EXAMPLE), "--workers", "1", "--log-level", "warning"]


def test_serve_with_workers_without_reuseport_shares_a_metrics_directory(monkeypatch: Any) -> None:
    """Where the platform has no SO_REUSEPORT, uvicorn's supervisor runs the workers: they get
    a metrics directory of their own too, removed when it returns."""
    import uvicorn

    from app import workers

    got: dict[str, Any] = {}

    def run(app: str, **kw: Any) -> None:
        where = os.environ[workers.MULTIPROC_ENV]
        got.update(workers=kw["workers"], where=where, existed=os.path.isdir(where))

    monkeypatch.setenv(workers.MULTIPROC_ENV, "/before")
    monkeypatch.setattr(workers, "available", lambda: False)
    monkeypatch.setattr(uvicorn, "run", run)
    assert cli.main(["serve", "--config", str(EXAMPLE), "--port", "0", "--workers", "2", "--log-level", "warning"]) == 0
    assert got["workers"] == 2 and got["existed"] and "switchboard-metrics-" in got["where"]
    assert not os.path.exists(got["where"])
    assert os.environ[workers.MULTIPROC_ENV] == "/before"  # as it was


def test_serve_hands_the_config_to_uvicorn(monkeypatch: Any) -> None:
    import uvicorn

    got: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: got.update(app=app, **kw))
    assert cli.main(["serve", "--config", str(EXAMPLE), "--port", "0", "--workers", "1", "--log-level", "warning"]) == 0
    assert got["app"] == "app.asgi:app" and got["port"] == 0 and got["workers"] == 1 and got["host"] == "127.0.0.1"
    assert got["loop"] == "uvloop" and got["http"] == "httptools" and got["access_log"] is False
    assert got["proxy_headers"] is False
    # the Responses WebSocket: sans-io websockets, frames up to a body's size, pings, deflate
    assert got["ws"] == "websockets-sansio" and got["ws_max_size"] == 32 * 1024 * 1024
    assert got["ws_ping_interval"] == got["ws_ping_timeout"] == 20.0 and got["ws_per_message_deflate"] is True
    assert os.environ["SWITCHBOARD_CONFIG"] == str(EXAMPLE)
    # the worker's entry point builds the app from that file
    sys.modules.pop("app.asgi", None)
    threshold = gc.get_threshold()
    try:
        asgi = importlib.import_module("app.asgi")
        assert gc.get_threshold() == asgi.GC_THRESHOLD  # the collector's start, tuned
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()
    assert asgi.app.state.config.models[0].name == "demo"


def test_the_built_app_leaves_pydantic_v1_unimported() -> None:
    # A route parameter declared in a handler's signature makes FastAPI import pydantic.v1 to
    # check its type (1.4 MB of every idle worker): the handlers read their ids off the path.
    # A fresh interpreter, since this one may have imported it for a test.
    code = "import sys, app.asgi; print(sorted(m for m in sys.modules if m.startswith('pydantic.v1')))"
    env = {**os.environ, "SWITCHBOARD_CONFIG": str(EXAMPLE), "SWITCHBOARD_LOG_LEVEL": "error"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_serve_with_a_broken_config_exits_2(tmp_path: Path, capsys: Any) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("providers: []\n")
    assert cli.main(["serve", "--config", str(bad)]) == 2
    assert "invalid configuration" in capsys.readouterr().err


def test_serve_reuse_port_hands_uvicorn_its_own_reuseport_socket_not_yet_listening(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import uvicorn

    got: dict[str, Any] = {}

    def run(self: uvicorn.Server, sockets: list[socket.socket]) -> None:
        s = sockets[0]
        got.update(
            app=self.config.app, reuse=s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT), port=s.getsockname()
        )
        got["listening"] = s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        s.close()

    monkeypatch.setattr(uvicorn.Server, "run", run)
    monkeypatch.delenv(SUPERVISOR_ENV, raising=False)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("providers: [{name: demo, profile: demo}]\nmodels: [{name: demo, provider: demo}]\n")
    assert cli.main(["serve", "--config", str(cfg), "--port", "0", "--reuse-port", "--log-level", "warning"]) == 0
    # not listening yet: uvicorn listens after the app's start-up, so no connection waits on
    # a worker that cannot serve
    assert got["app"] == "app.asgi:app" and got["reuse"] == 1 and got["listening"] == 0
    assert got["port"][0] == "127.0.0.1"
