"""The command line and config loading, in process: what `switchboard check-config` and
`switchboard serve` print and hand to uvicorn, and the errors a broken file gets."""

from __future__ import annotations

import gc
import importlib
import json
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

    def run(server: Any, sockets: Any = None) -> None:
        (sock,) = sockets  # bound by the CLI before the app starts (an address in use fails there)
        got.update(vars(server.config), bound=sock.getsockname())
        server.started = True

    monkeypatch.setattr(uvicorn.Server, "run", run)
    monkeypatch.delenv("SWITCHBOARD_LISTEN", raising=False)  # restored to absent afterwards
    assert cli.main(["serve", "--config", str(EXAMPLE), "--port", "0", "--workers", "1", "--log-level", "warning"]) == 0
    assert got["app"] == "app.asgi:app" and got["bound"][0] == "127.0.0.1" and got["bound"][1] > 0
    assert got["loop"] == "uvloop" and got["http"] == "httptools" and got["access_log"] is False
    assert got["proxy_headers"] is False
    # the Responses WebSocket: sans-io websockets, frames up to a body's size, pings, deflate
    assert got["ws"] == "websockets-sansio" and got["ws_max_size"] == 32 * 1024 * 1024
    assert got["ws_ping_interval"] == got["ws_ping_timeout"] == 20.0 and got["ws_per_message_deflate"] is True
    assert os.environ["SWITCHBOARD_CONFIG"] == str(EXAMPLE)
    assert os.environ["SWITCHBOARD_LISTEN"] == f"http://127.0.0.1:{got['bound'][1]}"  # for the ready line
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


def test_the_built_app_leaves_what_it_does_not_use_unloaded() -> None:
    # A route parameter declared in a handler's signature makes FastAPI import pydantic.v1 to
    # check its type (1.4 MB of every idle worker): the handlers read their ids off the path.
    # difflib and getpass serve a config's typo and the CLI. The example's upstreams are not
    # https: no CA bundle is loaded (1.7 MB). A fresh interpreter, since this one may have
    # imported them for a test.
    code = (
        "import sys, app.asgi; from providers.transport import default_tls; "
        "print(sorted(m for m in sys.modules if m.startswith('pydantic.v1') or m in ('difflib', 'getpass')), "
        "default_tls.cache_info().currsize)"
    )
    env = {**os.environ, "SWITCHBOARD_CONFIG": str(EXAMPLE), "SWITCHBOARD_LOG_LEVEL": "error"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[] 0", out.stdout


def test_the_heap_is_trimmed_once_ready() -> None:
    from app.main import _release_startup_memory

    assert _release_startup_memory()  # (glibc, as in the image)


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
    monkeypatch.delenv("SWITCHBOARD_LISTEN", raising=False)  # restored to absent afterwards
    monkeypatch.delenv(SUPERVISOR_ENV, raising=False)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("providers: [{name: demo, profile: demo}]\nmodels: [{name: demo, provider: demo}]\n")
    assert cli.main(["serve", "--config", str(cfg), "--port", "0", "--reuse-port", "--log-level", "warning"]) == 0
    # not listening yet: uvicorn listens after the app's start-up, so no connection waits on
    # a worker that cannot serve
    assert got["app"] == "app.asgi:app" and got["reuse"] == 1 and got["listening"] == 0
    assert got["port"][0] == "127.0.0.1"


# -- switchboard usage --------------------------------------------------------------------


def _usage_config(tmp_path: Path, store: str) -> Path:
    f = tmp_path / "usage.yaml"
    f.write_text(
        "providers: [{name: demo, profile: demo}]\n"
        "models: [{name: demo, provider: demo}, {name: other, provider: demo}]\n"
        f"store: {store}\n"
    )
    return f


def _write_usage(path: Path) -> None:
    """Three records (two keys, two models, one failed) through the app's UsageLog."""
    import asyncio
    import time

    from app.store import open_store
    from app.usage import UsageLog, UsageRecord

    async def write() -> None:
        cfg = load_config(path)
        store = open_store(cfg.store)
        log = UsageLog(cfg, store)
        now = time.time()
        log.write(UsageRecord(now - 60, "alice", "demo", "demo", input=100, output=10, cache_read=60, cost_micros=1500,
                              saved_micros=405))  # fmt: skip
        log.write(UsageRecord(now - 50, "alice", "other", "demo", input=50, output=5, reasoning=2))
        log.write(UsageRecord(now - 40, "bob", "demo", "demo", input=7, output=0, outcome="failed", status=502))
        assert await log.flush()
        assert store is not None
        await store.aclose()

    asyncio.run(write())


def _clean_redis(prefix: str) -> None:
    import asyncio

    from redis.asyncio import Redis

    async def clean() -> None:
        r = Redis.from_url("redis://127.0.0.1:6379/0")
        keys = [k async for k in r.scan_iter(match=prefix + "*")]
        if keys:
            await r.delete(*keys)
        await r.aclose()

    asyncio.run(clean())


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_usage_prints_a_table_read_from_the_store(tmp_path: Path, capsys: Any, backend: str) -> None:
    import uuid

    prefix = f"switchboard-test:{uuid.uuid4().hex}:"
    store = f"{{path: {tmp_path / 'r.db'}}}" if backend == "sqlite" else f"{{backend: redis, key_prefix: '{prefix}'}}"
    cfg = _usage_config(tmp_path, store)
    try:
        _write_usage(cfg)
        assert cli.main(["usage", "--config", str(cfg), "--by", "key", "--since", "24h"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0].startswith("usage by key, ") and f"({backend} store)" in out[0]
        assert out[1].split() == [
            "KEY",
            "REQUESTS",
            "INPUT",
            "OUTPUT",
            "CACHE_READ",
            "CACHE_WRITE",
            "REASONING",
            "COST_USD",
            "ERRORS",
            "CACHE_HIT",
            "SAVED_USD",
        ]
        assert out[2].split() == ["alice", "2", "150", "15", "60", "0", "2", "0.0015", "0", "40.0%", "0.0004"]
        assert out[3].split() == ["bob", "1", "7", "0", "0", "0", "0", "0.0000", "1", "0.0%", "0.0000"]
        assert out[-1].split() == ["total", "3", "157", "15", "60", "0", "2", "0.0015", "1", "38.2%", "0.0004"]
        assert len(out[1]) == len(out[2]) == len(out[-1])  # aligned
        assert cli.main(["usage", "--config", str(cfg), "--by", "model", "--json"]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [(r["model"], r["requests"], r["input"]) for r in rows] == [("demo", 2, 107), ("other", 1, 50)]
        assert rows[0]["cost_usd"] == 0.0015 and rows[0]["errors"] == 1
        # a span before the records: none
        assert cli.main(["usage", "--config", str(cfg), "--by", "day", "--until", "2001-01-01", "--json"]) == 0
        assert capsys.readouterr().out == ""
    finally:
        if backend == "redis":
            _clean_redis(prefix)


def test_usage_needs_only_the_stores_environment(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    """usage reads the store: a provider's or a client's ${VAR} left unset is no error; a
    ${VAR} of the store itself still is."""
    monkeypatch.delenv("SB_TEST_UNSET_KEY", raising=False)
    f = tmp_path / "usage.yaml"
    f.write_text(
        "auth: {keys: ['${SB_TEST_UNSET_KEY}']}\n"
        "providers: [{name: up, profile: openai, base_url: 'https://x.test/v1', api_key: '${SB_TEST_UNSET_KEY}'}]\n"
        "models: [{name: m, provider: up}]\n"
        f"store: {{path: {tmp_path / 'r.db'}}}\n"
    )
    assert cli.main(["usage", "--config", str(f)]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.startswith("usage by key, ")
    f.write_text("providers: []\nmodels: []\nstore: {path: '${SB_TEST_UNSET_KEY}'}\n")
    assert cli.main(["usage", "--config", str(f)]) == 2
    assert "SB_TEST_UNSET_KEY is not set" in capsys.readouterr().err


def test_usage_without_a_database_file_prints_an_empty_table(tmp_path: Path, capsys: Any) -> None:
    db = tmp_path / "absent" / "r.db"
    cfg = _usage_config(tmp_path, f"{{path: {db}}}")
    assert cli.main(["usage", "--config", str(cfg), "--by", "day"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[0] == "DAY" and out[-1].split()[:2] == ["total", "0"]
    assert not db.parent.exists()  # reading never creates the store


def test_usage_errors_exit_with_a_message(tmp_path: Path, capsys: Any) -> None:
    off = _usage_config(tmp_path, "{enabled: false}")
    assert cli.main(["usage", "--config", str(off), "--by", "key"]) == 2
    assert "store.enabled: false" in capsys.readouterr().err
    ok = _usage_config(tmp_path, f"{{path: {tmp_path / 'r.db'}}}")
    assert cli.main(["usage", "--config", str(ok), "--by", "key", "--since", "last week"]) == 2
    assert "--since/--until" in capsys.readouterr().err
    assert cli.main(["usage", "--config", str(tmp_path / "missing.yaml"), "--by", "key"]) == 2
    assert "cannot read" in capsys.readouterr().err
    down = _usage_config(tmp_path, "{backend: redis, url: 'redis://127.0.0.1:1/0', timeout_seconds: 0.3}")
    assert cli.main(["usage", "--config", str(down), "--by", "key"]) == 1
    assert "could not be read" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["usage", "--config", str(ok), "--by", "provider"])


def test_version(capsys: Any) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"switchboard {version('switchboard')}"


def _check_config(tmp_path: Path, text: str, capsys: Any) -> str:
    f = tmp_path / "team.yaml"
    f.write_text(text)
    assert cli.main(["check-config", "--config", str(f)]) == 2
    return capsys.readouterr().err


def test_a_typo_in_a_keys_field_says_what_and_where(tmp_path: Path, capsys: Any) -> None:
    """The key is a mapping: no "should be a valid string" about its other form, no class
    name of the schema, a suggestion, and the line."""
    err = _check_config(
        tmp_path,
        "providers: [{name: demo, profile: demo}]\n"
        "models: [{name: demo, provider: demo}]\n"
        "auth:\n"
        "  keys:\n"
        "    - name: alice\n"
        "      key: sk-1\n"
        "      limits:\n"
        "        request_per_minute: 10\n",
        capsys,
    )
    assert err.splitlines()[1:] == [
        "  auth.keys[0].limits.request_per_minute (line 8): unknown key 'request_per_minute'; "
        "did you mean 'requests_per_minute'?"
    ], err
    assert "KeyCfg" not in err and "valid string" not in err


def test_schema_errors_carry_their_line_and_name_no_class(tmp_path: Path, capsys: Any) -> None:
    err = _check_config(
        tmp_path,
        "server:\n  prot: 8080\nproviders: [{name: demo, profile: demo}]\nmodels:\n  - {name: demo, provider: demo}\n"
        "auth:\n  keys: [5]\n",
        capsys,
    )
    assert "  server.prot (line 2): unknown key 'prot'; did you mean 'port'?" in err.splitlines()
    assert "  auth.keys[0] (line 7): Input should be a valid dictionary" in err.splitlines()
    assert "Cfg" not in err


def test_yaml_errors_name_the_file(tmp_path: Path, capsys: Any) -> None:
    err = _check_config(tmp_path, "providers:\n  - name: demo\n   profile: demo\n", capsys)
    assert "<unicode string>" not in err and f'in "{tmp_path / "team.yaml"}", line 3' in err


def test_a_malformed_sha256_admin_key_is_an_error_as_a_client_keys_is(tmp_path: Path, capsys: Any) -> None:
    base = "providers: [{name: demo, profile: demo}]\nmodels: [{name: demo, provider: demo}]\n"
    for field in ("keys", "admin_keys"):
        err = _check_config(tmp_path, base + f"auth: {{{field}: ['sha256:abc']}}\n", capsys)
        assert "a 'sha256:' key must be followed by 64 hex digits" in err, err


def test_check_config_takes_config_as_every_command_does(capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.delenv("SWITCHBOARD_API_KEY", raising=False)
    assert cli.main(["check-config", "--config", str(EXAMPLE)]) == 0
    assert cli.main(["check-config", str(EXAMPLE)]) == 0  # the positional form still works
    assert capsys.readouterr().out.count("OK") == 2
    with pytest.raises(SystemExit):
        cli.main(["check-config"])


def test_serve_exits_3_when_the_app_never_started(monkeypatch: Any) -> None:
    """As uvicorn.run does: a lifespan that failed leaves the server not started."""
    import uvicorn

    monkeypatch.setattr(uvicorn.Server, "run", lambda server, sockets=None: None)
    monkeypatch.delenv("SWITCHBOARD_LISTEN", raising=False)
    assert cli.main(["serve", "--config", str(EXAMPLE), "--port", "0", "--workers", "1", "--log-level", "warning"]) == 3
