"""The server's secret when the config gives none: made once per machine, kept beside the store.

Theory of operation
-------------------
The secret keys the proxy's sealed envelopes (reasoning replay, synthesised compaction;
``transformers/envelope.py``).  Every process that may open an envelope must hold the same
one: every worker of the instance, and the instance after a restart.  A secret made per
process broke both (a compacted Codex session got 400 after a restart or on another
worker, and reasoning replayed to Kimi as a placeholder).

==========================================  =================================================
the config                                  the secret
==========================================  =================================================
``server.secret_key`` set                   that one
not set, ``store.backend: redis``           refused: instances that share a store share
                                            conversations, so they must be given one secret
                                            (``check-config`` and ``serve`` say so, exit 2)
not set, otherwise                          ``secret.key`` beside the SQLite store (the
                                            directory of ``store.path``, else the user's state
                                            directory): read, or made (48 random bytes,
                                            base64, mode 0600) by the first process that
                                            needs it; every other process reads it
==========================================  =================================================

Making it is race-free across workers: the secret is written to a temporary file, then
hard-linked to its name, which fails when another process got there first; that process's
secret is then read.  ``machine_secret`` runs in ``switchboard serve`` (each worker) and
``check-config`` only: an app built in a test from a config object (``create_app``) keeps
the config's secret as it is.
"""

from __future__ import annotations

import base64
import contextlib
import os
from pathlib import Path

from app.config import ConfigError
from app.store import default_sqlite_path
from providers.config import Config

__all__ = ["machine_secret", "secret_path", "with_machine_secret"]

REDIS_NEEDS_ONE = (
    "server.secret_key is required with store.backend: redis: the instances that share the store serve each "
    "other's conversations, and a reasoning or compaction envelope sealed by one opens on another only with the "
    "same secret. Set it on every instance (e.g. SWITCHBOARD_SECRET_KEY from `openssl rand -base64 48`)."
)


def secret_path(cfg: Config) -> Path:
    store = cfg.store.path if cfg.store.path and cfg.store.path != ":memory:" else default_sqlite_path()
    return Path(store).parent / "secret.key"


def machine_secret(cfg: Config) -> str:
    """The secret to use (module docstring); raises ``ConfigError`` when one must be given."""
    if cfg.server.secret:
        return cfg.server.secret
    if cfg.store.enabled and cfg.store.backend == "redis":
        raise ConfigError(REDIS_NEEDS_ONE)
    path = secret_path(cfg)
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, base64.b64encode(os.urandom(48)) + b"\n")
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # fails when another process made it first: theirs is the one
    except FileExistsError:
        pass
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return _read(path)


def _read(path: Path) -> str:
    text = path.read_text(encoding="ascii").strip()
    if len(text) < 32:
        raise ConfigError(f"{path}: the server secret there is shorter than 32 characters; delete it to make another")
    return text


def with_machine_secret(cfg: Config) -> Config:
    """``cfg`` with its effective secret in ``server.secret_key``."""
    secret = machine_secret(cfg)
    if secret == cfg.server.secret_key:
        return cfg
    server = cfg.server.model_copy(update={"secret_key": secret})
    out = cfg.model_copy(update={"server": server})
    out._env_values = (*cfg._env_values, secret)  # masked in logs like a configured one
    return out
