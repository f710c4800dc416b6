"""app/secret.py: the server's secret when the config gives none, made once per machine and
kept beside the store; refused with a shared Redis store."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.config import ConfigError, parse_config
from app.main import OPEN_OWNER, Service, owner_envelope_key
from app.secret import machine_secret, secret_path, with_machine_secret

ROOT = Path(__file__).resolve().parents[2]


def cfg(tmp_path: Path, **over: Any) -> Any:
    data = {
        "store": {"path": str(tmp_path / "state" / "responses.db")},
        "providers": [{"name": "d", "profile": "demo"}],
        "models": [{"name": "demo", "provider": "d"}],
        **over,
    }
    return parse_config(data)


def test_made_once_beside_the_store_and_read_by_every_later_process(tmp_path: Path) -> None:
    c = cfg(tmp_path)
    first = machine_secret(c)
    path = tmp_path / "state" / "secret.key"
    assert secret_path(c) == path and path.read_text().strip() == first and len(first) >= 64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert machine_secret(c) == first  # a restart, or another worker
    # two processes racing to make it agree on one secret
    path.unlink()
    code = (
        "import sys; from app.config import load_config; from app.secret import machine_secret;"
        "print(machine_secret(load_config(sys.argv[1])))"
    )
    conf = tmp_path / "c.yaml"
    conf.write_text(
        f"store: {{path: '{tmp_path / 'state' / 'responses.db'}'}}\n"
        "providers: [{name: d, profile: demo}]\nmodels: [{name: demo, provider: d}]\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(conf)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    got = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert len(got) == 1 and got == {path.read_text().strip()}
    assert not [f for f in os.listdir(path.parent) if f.endswith(".tmp")]


def test_the_configs_own_secret_wins_and_a_shared_redis_store_needs_one(tmp_path: Path) -> None:
    c = cfg(tmp_path, server={"secret_key": "k" * 40})
    assert machine_secret(c) == "k" * 40 and not secret_path(c).exists()
    redis = cfg(tmp_path, store={"backend": "redis"})
    with pytest.raises(ConfigError, match="required with store.backend: redis"):
        machine_secret(redis)
    conf = tmp_path / "r.yaml"
    conf.write_text(
        "store: {backend: redis}\nproviders: [{name: d, profile: demo}]\nmodels: [{name: demo, provider: d}]\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "check-config", str(conf)], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 2 and "server.secret_key is required" in out.stderr


def test_with_the_machine_secret_every_worker_seals_and_opens_alike(tmp_path: Path) -> None:
    a = Service(with_machine_secret(cfg(tmp_path)))
    b = Service(with_machine_secret(cfg(tmp_path)))  # another worker, or the same after a restart
    assert a.envelope_key and a.envelope_key == b.envelope_key
    assert a.envelope_key_for(OPEN_OWNER) == b.envelope_key_for(OPEN_OWNER)
    assert a.envelope_key_for("alice") != a.envelope_key_for("bob")  # bound to the key's name
    assert owner_envelope_key(a.envelope_key, "alice") == a.envelope_key_for("alice")
    assert a.envelope_key.decode() not in a.secrets(f"x {a.envelope_key.decode()} y")  # masked like a configured one


def test_a_short_secret_file_is_refused(tmp_path: Path) -> None:
    c = cfg(tmp_path)
    secret_path(c).parent.mkdir(parents=True)
    secret_path(c).write_text("short\n")
    with pytest.raises(ConfigError, match="shorter than 32"):
        machine_secret(c)
