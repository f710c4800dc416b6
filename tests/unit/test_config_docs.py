"""Every key of the config schema (``providers/config.py``) is documented in
``docs/configuration.md``: in a table row of its section, by name in the row's first column,
or (a key of a nested mapping) named in the row of the key that holds it."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from providers.config import Config

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The models a field's value may be (through unions, lists and mappings)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list, dict):
        return [m for a in typing.get_args(annotation) for m in _models(a)]
    return []


def _keys(model: type[BaseModel], path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name, field in model.model_fields.items():
        out.append((*path, name))
        for sub in _models(field.annotation):
            out += _keys(sub, (*path, name))
    return out


def _rows(section: str) -> list[tuple[set[str], set[str]]]:
    """Each table row of the section: (the words in backticks of its first cell, of the row)."""
    rows = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = line.split(" | ")

        def words(text: str) -> set[str]:
            return {w for span in re.findall(r"`([^`]*)`", text) for w in re.findall(r"[A-Za-z_]\w*", span)}

        rows.append((words(cells[0]), words(line)))
    return rows


def _sections() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    parts = re.split(r"^## `([a-z_]+)(?:\[\])?`\s*$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def _documented(rows: list[tuple[set[str], set[str]]], key: tuple[str, ...]) -> bool:
    if any(key[-1] in first for first, _ in rows):
        return True
    return any(key[-1] in row and first & set(key[:-1]) for first, row in rows)


def test_every_config_key_is_documented() -> None:
    sections = _sections()
    missing = []
    for top in Config.model_fields:
        if top not in sections:
            missing.append(f"{top} (no section '## `{top}`')")
            continue
        rows = _rows(sections[top])
        for sub in _models(Config.model_fields[top].annotation):
            missing += [f"{top}.{'.'.join(k)}" for k in _keys(sub) if not _documented(rows, k)]
    assert not missing, f"config keys not documented in {DOC.name}: {missing}"


def test_the_tables_render() -> None:
    """A table row after a blank line is a paragraph of raw pipes, not a row."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines[1:], 1):
        if line.startswith("| `") and not lines[i - 1].startswith("|"):
            raise AssertionError(f"{DOC.name}:{i + 1}: a table row outside a table: {line[:60]}")
