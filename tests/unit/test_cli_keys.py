"""``switchboard keys`` and ``switchboard audit`` in process (app/cli.py, app/keys.py),
straight on the store's backend: SQLite in the test's folder, Redis on 127.0.0.1:6379 under
a uuid key prefix removed afterwards."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from app import cli
from app.keys import parse_expiry
from tests.unit.test_cli import _clean_redis


def _config(tmp_path: Path, store: str) -> Path:
    f = tmp_path / "keys.yaml"
    f.write_text(
        "auth: {keys: [{name: cfgkey, key: sk-cfg, limits: {requests_per_minute: 5}}]}\n"
        "providers: [{name: demo, profile: demo}]\n"
        "models: [{name: demo, provider: demo}]\n"
        f"store: {store}\n"
    )
    return f


def _json(capsys: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_keys_from_the_command_line(tmp_path: Path, capsys: Any, backend: str) -> None:
    prefix = f"switchboard-test:{uuid.uuid4().hex}:"
    store = f"{{path: {tmp_path / 'r.db'}}}" if backend == "sqlite" else f"{{backend: redis, key_prefix: '{prefix}'}}"
    cfg = str(_config(tmp_path, store))
    try:
        made_args = ["keys", "create", "--config", cfg, "erin", "--models", "demo, gpt-*"]
        assert cli.main([*made_args, "--limits", '{"requests_per_minute": 60}', "--expires", "30d"]) == 0
        captured = capsys.readouterr()
        made = json.loads(captured.out)
        assert made["secret"].startswith("sk-sb-") and "shown once" in captured.err
        assert made["models"] == ["demo", "gpt-*"] and made["limits"] == {"requests_per_minute": 60}

        assert cli.main(["keys", "list", "--config", cfg]) == 0
        table = capsys.readouterr().out.splitlines()
        assert table[0].split()[:4] == ["NAME", "SOURCE", "HINT", "EXPIRES"]
        assert table[1].split()[:2] == ["cfgkey", "config*"] and table[2].split()[:2] == ["erin", "api"]
        assert made["secret"] not in "\n".join(table)
        assert cli.main(["keys", "list", "--config", cfg, "--json"]) == 0
        assert [k["name"] for k in _json(capsys)] == ["cfgkey", "erin"]

        assert cli.main(["keys", "update", "--config", cfg, "erin", "--expires", "never", "--limits", "{}"]) == 0
        changed = _json(capsys)[0]
        assert changed["expires_at"] is None and changed["limits"] is None and changed["models"] == ["demo", "gpt-*"]
        assert cli.main(["keys", "rotate", "--config", cfg, "erin", "--grace", "0"]) == 0
        rotated = _json(capsys)[0]
        assert rotated["secret"] != made["secret"] and rotated["rotating_until"] is None
        assert cli.main(["keys", "show", "--config", cfg, "cfgkey"]) == 0
        assert _json(capsys)[0]["read_only"] is True
        assert cli.main(["keys", "revoke", "--config", cfg, "erin"]) == 0
        assert _json(capsys)[0]["revoked"] is True

        assert cli.main(["audit", "--config", cfg]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert [line.split()[2] for line in lines] == ["revoke", "rotate", "update", "create"]
        assert all(line.split()[1].startswith("cli:") and line.split()[3] == "erin" for line in lines)
        assert cli.main(["audit", "--config", cfg, "--json", "--key", "erin", "--limit", "1"]) == 0
        assert [e["action"] for e in _json(capsys)] == ["revoke"]

        # refusals: exit 2 with the reason
        for argv, said in (
            (["keys", "show", "--config", cfg, "erin"], "No key named"),
            (["keys", "revoke", "--config", cfg, "cfgkey"], "read-only"),
            (["keys", "create", "--config", cfg, "x", "--limits", "{nope"], "--limits is not JSON"),
            (["keys", "create", "--config", cfg, "x", "--limits", '{"concurrent": 0}'], "limits.concurrent"),
            (["keys", "create", "--config", cfg, "x", "--expires", "soon"], "expires_at"),
            (["audit", "--config", cfg, "--since", "last week"], "--since"),
            (["keys", "list", "--config", str(tmp_path / "missing.yaml")], "cannot read"),
        ):
            assert cli.main(argv) == 2, argv
            assert said in capsys.readouterr().err, argv
    finally:
        if backend == "redis":
            _clean_redis(prefix)


def test_keys_without_a_store_or_with_one_down(tmp_path: Path, capsys: Any) -> None:
    off = str(_config(tmp_path, "{enabled: false}"))
    assert cli.main(["keys", "create", "--config", off, "x"]) == 2
    assert "store.enabled: false" in capsys.readouterr().err
    assert cli.main(["keys", "list", "--config", off]) == 0  # (the config's keys only)
    assert "cfgkey" in capsys.readouterr().out
    down = str(_config(tmp_path, "{backend: redis, url: 'redis://127.0.0.1:1/0', timeout_seconds: 0.3}"))
    assert cli.main(["keys", "list", "--config", down]) == 1
    assert "did not answer" in capsys.readouterr().err


def test_expiry_forms() -> None:
    now = 1_800_000_000.0
    assert parse_expiry(None, now) is None and parse_expiry("never", now) is None
    assert parse_expiry("30d", now) == now + 30 * 86400 and parse_expiry("90m", now) == now + 5400
    assert parse_expiry(now + 5, now) == now + 5
    assert parse_expiry("2027-01-01", now) == 1798848000.0  # the end of that day, UTC
    assert parse_expiry("2027-01-01T12:00:00Z", now) == 1798804800.0
    assert parse_expiry("2027-01-01T12:00:00", now) == 1798804800.0
    for bad in (True, [1], "soon"):
        with pytest.raises(ValueError):
            parse_expiry(bad, now)
