"""The registry of repair names (transformers/repairs.py) against the code that records them.

The source of ``transformers/``, ``providers/`` and ``app/`` is read, not run, so a name on
a branch no other test reaches is checked too: every name passed to ``ctx.repaired`` (or
to the aliases a stage binds it to) is registered, every registered name is recorded
somewhere, and ``ctx.repaired`` is never handed around under a name this scan does not
follow.  docs/quirks.md is checked against the registry in tests/unit/test_profiles.py.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
from collections import defaultdict
from pathlib import Path

import pytest

from app import metrics
from transformers import ids, repairs, schema, tool_stage
from transformers.context import Ctx

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(p for d in ("transformers", "providers", "app") for p in (ROOT / d).glob("*.py"))

# names a stage binds ``ctx.repaired`` to (``rep = self.ctx.repaired``, a ``record``
# parameter): a call of any of them records a repair
ALIASES = frozenset({"repaired", "rep", "_rep", "record"})
# functions that take ``ctx.repaired`` as an argument → the parameter that receives it
SINKS = {"upstream_call_id": (ids.upstream_call_id, "rep"), "sanitize_tools": (schema.sanitize_tools, "record")}
# the only calls whose argument is not a string literal: (file, argument) → its values
DYNAMIC: dict[tuple[str, str], frozenset[str]] = {
    ("transformers/tool_stage.py", "MIMO_RAW_PATCH"): frozenset({tool_stage.MIMO_RAW_PATCH}),
    ("transformers/tool_stage.py", "INVALID_JSON_PASSTHROUGH"): frozenset({tool_stage.INVALID_JSON_PASSTHROUGH}),
    ("transformers/schema.py", "rule"): frozenset(r[0] for r in schema.RULES),  # the RULES table's names
}


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


@functools.cache
def _scan() -> tuple[dict[str, set[str]], dict[tuple[str, str], int], list[str]]:
    """(literal name → files, non-literal (file, argument) → count, loose references).
    Read once, when a test first asks (not at collection: every pytest-xdist worker
    collects this module, one of them runs it)."""
    literals: dict[str, set[str]] = defaultdict(set)
    dynamic: dict[tuple[str, str], int] = defaultdict(int)
    loose: list[str] = []
    for path in SOURCES:
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(), filename=rel)
        parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _name(node.func) in ALIASES:
                if len(node.args) != 1 or node.keywords:
                    dynamic[(rel, ast.unparse(node))] += 1
                elif isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                    literals[node.args[0].value].add(rel)
                else:
                    dynamic[(rel, ast.unparse(node.args[0]))] += 1
            elif isinstance(node, ast.Attribute) and node.attr == "repaired":
                up = parent[node]
                if isinstance(up, ast.Call) and up.func is node:
                    continue  # ctx.repaired(...): handled above
                while isinstance(up, ast.IfExp):  # self._rep = ctx.repaired if ctx is not None else _noop
                    up = parent[up]
                if isinstance(up, ast.Assign) and all(_name(t) in ALIASES for t in up.targets):
                    continue
                if isinstance(up, ast.Call) and _name(up.func) in SINKS and node in up.args:
                    continue
                loose.append(f"{rel}:{node.lineno}: {ast.unparse(up)[:80]}")
    return literals, dict(dynamic), loose


def test_every_recorded_name_is_registered() -> None:
    literals, _, _ = _scan()
    unknown = {n: sorted(f) for n, f in literals.items() if n not in repairs.NAMES}
    assert unknown == {}


def test_non_literal_names_are_the_known_table_driven_sites() -> None:
    _, found_dynamic, _ = _scan()
    assert set(found_dynamic) == set(DYNAMIC), "a new non-literal repair name: make it a literal, or list it here"
    for site, names in DYNAMIC.items():
        assert names and names <= repairs.NAMES, site


def test_repaired_is_not_handed_around_under_other_names() -> None:
    _, _, loose = _scan()
    assert loose == []
    for fn, param in SINKS.values():
        assert param in inspect.signature(fn).parameters and param in ALIASES


def test_every_registered_name_is_recorded_somewhere() -> None:
    literals, _, _ = _scan()
    recorded = set(literals).union(*DYNAMIC.values())
    assert sorted(repairs.NAMES - recorded) == []
    assert len(recorded) > 40  # the scan really found the stages


def test_one_name_per_repair() -> None:
    # tool_call_dropped_no_name was the Responses encoder's name for tool_call_unnamed_dropped
    assert "tool_call_unnamed_dropped" in repairs.NAMES and "tool_call_dropped_no_name" not in repairs.NAMES
    literals, _, _ = _scan()
    assert literals["tool_call_unnamed_dropped"] >= {"transformers/chat_encode.py", "transformers/responses_encode.py"}


def test_registry_rows() -> None:
    assert frozenset(repairs.REPAIRS) == repairs.NAMES
    for name, row in repairs.REPAIRS.items():
        assert re.fullmatch(r"[a-z][a-z0-9_]{0,63}", name), name  # a metric label value
        assert row.side in ("request", "response"), name
        assert row.where and row.what and "\n" not in row.what, name


def test_unregistered_name_is_refused_in_tests_and_counted_as_other_in_production(monkeypatch) -> None:
    assert repairs.STRICT  # tests/conftest.py
    c = Ctx()
    with pytest.raises(KeyError, match="no_such_rule"):
        c.repaired("no_such_rule")
    monkeypatch.setattr(repairs, "STRICT", False)
    c.repaired("no_such_rule")
    assert c.repairs == ["no_such_rule"] and {"no_such_rule"} == repairs.UNREGISTERED
    repairs.UNREGISTERED.clear()  # the suite-wide check would fail this test otherwise
    c.repaired("inline_think")
    assert c.repairs == ["no_such_rule", "inline_think"] and not repairs.UNREGISTERED


def test_metric_rule_label_is_the_registry() -> None:
    assert metrics.LABELS["rule"] is repairs.NAMES
    m = metrics.Metrics()
    m.inc("switchboard_repairs_total", rule="inline_think", provider="-")
    m.inc("switchboard_repairs_total", rule="not_a_rule", provider="-")
    assert m.get("switchboard_repairs_total", rule="inline_think", provider="-") == 1
    assert m.get("switchboard_repairs_total", rule="other", provider="-") == 1
