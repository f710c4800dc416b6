"""Configuration loading: YAML file → validated, immutable settings.

The schema (``Config`` and its parts) is ``providers.config``; this module reads the file
and validates it with pydantic at start-up, never on the hot path.  ``${VAR}`` is replaced
by the environment variable VAR (an error if unset), ``${VAR:-default}`` falls back to
``default``.  Every error names the file, the field path and what is wrong, and never
prints a value that came from the environment.  The path is the one the user wrote: the
names pydantic gives the branches of a union (``str``, ``KeyCfg``) are left out, and only
the errors of the form the value has are shown.  A file's errors carry their line (from
the YAML node tree), and an unknown key gets the closest known one ("did you mean").
"""

from __future__ import annotations

import os
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

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


_TYPE_ONLY = {"string_type", "dict_type", "model_type", "model_attributes_type", "list_type", "int_type",
              "float_type", "bool_type", "literal_error", "int_parsing", "float_parsing", "bool_parsing"}  # fmt: skip


def _members(annotation: Any) -> list[Any]:
    """The types a value under ``annotation`` may have (the members of a union; ``None``
    left out: pydantic names no branch for an optional value)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(annotation) if a is not type(None) for m in _members(a)]
    return [annotation]


def _model(t: Any) -> type[BaseModel] | None:
    return t if isinstance(t, type) and issubclass(t, BaseModel) else None


class _Where(typing.NamedTuple):
    path: tuple[str | int, ...]  # the location as the user wrote it (no union branch names)
    branch: tuple[tuple[str | int, ...], str] | None  # (where a union was, the branch taken)
    deep: bool  # the error is inside the branch, not about the value's type
    model: type[BaseModel] | None  # the model whose key the last part is


def _where(loc: tuple[Any, ...]) -> _Where:
    """Follow pydantic's ``loc`` through the schema: union branch names (``str``,
    ``KeyCfg``, ``literal[...]``…) are dropped, and the model of the last key is kept."""
    path: list[str | int] = []
    types_here: list[Any] = [Config]
    branch = None
    deep = False
    model = None
    for part in loc:
        if branch is not None:
            deep = True
        if isinstance(part, int):
            path.append(part)
            types_here = [
                a for t in types_here if typing.get_origin(t) is list for a in _members(typing.get_args(t)[0])
            ]
            continue
        owner = next((m for m in map(_model, types_here) if m is not None and part in m.model_fields), None)
        if owner is not None:
            path.append(part)
            model = owner
            types_here = _members(owner.model_fields[part].annotation)
            continue
        maps = [t for t in types_here if typing.get_origin(t) is dict]
        if maps:  # a key of a mapping (headers, query)
            path.append(part)
            types_here = _members(typing.get_args(maps[0])[1])
            model = None
            continue
        named = [t for t in types_here if getattr(t, "__name__", None) == part]
        if len(types_here) > 1 or named or "[" in part or part in ("str", "int", "float", "bool"):
            if branch is None:  # a union's branch: not a key the user wrote
                branch = (tuple(path), part)
                deep = False
            types_here = named or []
            continue
        path.append(part)  # a key the model does not have (extra_forbidden)
        model = next((m for m in map(_model, types_here) if m is not None), None)
        types_here = []
    return _Where(tuple(path), branch, deep, model)


def _dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(root)"


def _line(node: Any, path: tuple[str | int, ...]) -> int | None:
    """The line (1-based) of ``path`` in the YAML node tree, or of the deepest part of it
    there (a missing key: its mapping)."""
    if node is None:
        return None
    line = node.start_mark.line + 1
    for part in path:
        if isinstance(node, yaml.MappingNode):
            found = next(((k, v) for k, v in node.value if getattr(k, "value", None) == part), None)
            if found is None:
                break
            line, node = found[0].start_mark.line + 1, found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def _message(err: Any, where: _Where) -> str:
    if err["type"] == "extra_forbidden" and where.path:
        key = str(where.path[-1])
        known = sorted(where.model.model_fields) if where.model is not None else []
        import difflib  # (a config with a typo only: not in a running proxy's memory)

        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        if close:
            return f"unknown key '{key}'; did you mean '{close[0]}'?"
        return f"unknown key '{key}'" + (f"; the keys here are: {', '.join(known)}" if known else "")
    msg = str(err["msg"])
    # pydantic's wording names the schema's classes: a user wrote a mapping, not a KeyCfg
    return re.sub(r" or instance of \w+", "", msg)


def _errors(e: ValidationError, nodes: Any) -> list[str]:
    """One line per distinct error: where (as written), its line in the file, what is wrong.
    For a value that may take several forms (a key: a string or a mapping), only the errors
    of the form the value has are reported."""
    found = [(err, _where(tuple(err["loc"]))) for err in e.errors()]
    inside: dict[tuple[str | int, ...], set[str]] = {}
    for err, w in found:
        if w.branch is not None and (w.deep or err["type"] not in _TYPE_ONLY):
            inside.setdefault(w.branch[0], set()).add(w.branch[1])
    lines: list[str] = []
    for err, w in found:
        if w.branch is not None and inside.get(w.branch[0]) and w.branch[1] not in inside[w.branch[0]]:
            continue  # the value is not of this form: its other form's errors say what is wrong
        line = _line(nodes, w.path)
        at = f" (line {line})" if line is not None else ""
        text = f"  {_dotted(w.path)}{at}: {_message(err, w)}"
        if text not in lines:
            lines.append(text)
    return lines


def parse_config(
    data: Any, source: str = "<config>", *, sections: tuple[str, ...] | None = None, nodes: Any = None
) -> Config:
    """``sections``: read only these top-level sections (the rest as if absent, no providers
    or models): a command that only reads the store needs no provider's key in the
    environment.  ``nodes``: the YAML node tree of ``data`` (``yaml.compose``), for the
    line numbers of errors."""
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
        lines = [f"{source}: invalid configuration:", *_errors(e, nodes)]
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
        nodes = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        # pyyaml names a string it parsed "<unicode string>": the file is what the user knows
        raise ConfigError(f"{p}: not valid YAML: {str(e).replace('<unicode string>', str(p))}") from None
    return parse_config(data, str(p), sections=sections, nodes=nodes)
