"""Configuration loading: YAML file → validated, immutable settings.

The schema (``Config`` and its parts) is ``providers.config``; this module reads the file
and validates it with pydantic at start-up, never on the hot path.  ``${VAR}`` is replaced
by the environment variable VAR (an error if unset), ``${VAR:-default}`` falls back to
``default``.  Every error names the file, the field path and what is wrong, and never
prints a value that came from the environment.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from providers.config import (
    PROFILES,
    AuthCfg,
    Config,
    ModelCfg,
    ProviderCfg,
    QuirksCfg,
    ServerCfg,
    TimeoutsCfg,
)
from transformers.masking import SecretMask

__all__ = [
    "PROFILES",
    "AuthCfg",
    "Config",
    "ConfigError",
    "ModelCfg",
    "ProviderCfg",
    "QuirksCfg",
    "ServerCfg",
    "TimeoutsCfg",
    "load_config",
    "parse_config",
]

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ConfigError(Exception):
    pass


def _expand(value: Any, path: str, seen: list[str]) -> Any:
    """Replace ``${VAR}`` in every string; the values taken from the environment are
    appended to ``seen`` (they may be secrets: error messages must not print them)."""
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            var, default = m.group(1), m.group(2)
            got = os.environ.get(var)
            if got is None:
                if default is None:
                    raise ConfigError(
                        f"{path}: environment variable {var} is not set (use ${{{var}:-}} to allow empty)"
                    )
                return default
            seen.append(got)
            return got

        return _ENV.sub(sub, value)
    if isinstance(value, list):
        return [_expand(v, f"{path}[{i}]", seen) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: _expand(v, f"{path}.{k}" if path else str(k), seen) for k, v in value.items()}
    return value


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("str", "list[literal['chat','responses']]", "QuirksCfg", "list[QuirksCfg]") or "literal" in str(
            part
        ):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out or "(root)"


def parse_config(data: Any, source: str = "<config>", *, sections: tuple[str, ...] | None = None) -> Config:
    """``sections``: read only these top-level sections (the rest as if absent, no providers
    or models): a command that only reads the store needs no provider's key in the
    environment."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping with providers and models")
    if sections is not None:
        data = {"providers": [], "models": [], **{k: v for k, v in data.items() if k in sections}}
    env_values: list[str] = []
    try:
        expanded = _expand(data, "", env_values)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    try:
        cfg = Config.model_validate(expanded)
    except ValidationError as e:
        lines = [f"{source}: invalid configuration:"]
        seen = set()
        for err in e.errors():
            msg = f"  {_loc(err['loc'])}: {err['msg']}"
            if msg not in seen:
                seen.add(msg)
                lines.append(msg)
        # a message may quote a value that came from the environment: never print it
        mask = SecretMask(v for v in env_values if v)
        text = "\n".join(lines)
        for v in sorted({v for v in env_values if 0 < len(v) < 6}, key=len, reverse=True):
            text = re.sub(rf"(?<![\w-]){re.escape(v)}(?![\w-])", "[from the environment]", text)
        raise ConfigError(mask(text).replace("[redacted]", "[from the environment]")) from None
    cfg._env_values = tuple(v for v in env_values if v)
    return cfg


def load_config(path: str | os.PathLike[str], *, sections: tuple[str, ...] | None = None) -> Config:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from None
    return parse_config(data, str(p), sections=sections)
