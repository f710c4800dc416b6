"""A protocol is one row of data (``transformers/protocols.py``): nothing else branches on its name.

Every ``.py`` file under ``app/``, ``providers/`` and ``transformers/`` is read with ``ast``
and refused when it holds, outside the rows' own module:

* a comparison with a protocol's name (``client == "chat"``, ``upstream != "gemini"``,
  ``client in ("messages", "gemini")``);
* a ``match`` case on one;
* a table keyed by protocol names (a dict literal whose keys are two or more of them): such
  a table belongs in the rows.

A protocol's name may still be an argument (``check_body(raw, "chat")`` on a route that is
Chat's by definition) or a row's key (``SPECS["gemini"]``).  ``ALLOWED`` lists the files
that may hold a table keyed by the names, each with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import orjson
import pytest

from tests.protocol_samples import hello
from transformers.bridge import DIRECTIONS, open_bridge
from transformers.context import Ctx
from transformers.protocols import SPECS
from transformers.vocab import PROTOCOLS

ROOT = Path(__file__).resolve().parents[2]
NAMES = frozenset(PROTOCOLS)
ROWS = "transformers/protocols.py"
# file → why a table keyed by the names may stay there (branches are refused everywhere)
ALLOWED = {
    # the registry of top-level fields: one table per client protocol, each cell naming the
    # upstream protocols a field reaches; docs/fields.md renders it as it is
    "transformers/fields.py": "the field registry, client × upstream",
    # its keys are the item policy columns (native, responses, chat kinds), not protocols
    "transformers/items.py": "the upstream kinds of the item registry",
}


def _names(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        consts = [e for e in node.elts if isinstance(e, ast.Constant)]
        return len(consts) == len(node.elts) > 0 and any(e.value in NAMES for e in consts)
    return False


def branches(source: str) -> list[tuple[int, str]]:
    """(line, what) of every protocol-name branch or table in ``source``."""
    found: list[tuple[int, str]] = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Compare):
            sides = [n.left, *n.comparators]
            for op, left, right in zip(n.ops, sides[:-1], sides[1:], strict=True):
                if isinstance(op, ast.Eq | ast.NotEq) and (_names(left) or _names(right)):
                    found.append((n.lineno, "comparison"))
                elif isinstance(op, ast.In | ast.NotIn) and not isinstance(right, ast.Constant) and _names(right):
                    found.append((n.lineno, "membership"))
        elif isinstance(n, ast.match_case) and isinstance(n.pattern, ast.MatchValue) and _names(n.pattern.value):
            found.append((n.pattern.lineno, "match case"))
        elif isinstance(n, ast.Dict):
            keys = [k.value for k in n.keys if isinstance(k, ast.Constant)]
            if len(keys) == len(n.keys) >= 2 and set(keys) <= NAMES:
                found.append((n.lineno, "table"))
    return found


def test_no_protocol_name_branch_outside_the_rows() -> None:
    bad = []
    for package in ("app", "providers", "transformers"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == ROWS:
                continue
            for line, what in branches(path.read_text()):
                if what == "table" and rel in ALLOWED:
                    continue
                bad.append(f"{rel}:{line}: {what} on a protocol's name (put the decision in its row: {ROWS})")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ('if client == "chat": pass', [(1, "comparison")]),
        ('ok = "gemini" != upstream', [(1, "comparison")]),
        ('ok = client in ("messages", "gemini")', [(1, "membership")]),
        ('ok = client not in {"responses"}', [(1, "membership")]),
        ('match p:\n    case "responses":\n        pass', [(2, "match case")]),
        ('PATHS = {"chat": "/a", "responses": "/b"}', [(1, "table")]),
        # a field named like a protocol is no branch: the body's "messages", a role's values
        ('ok = "messages" in body and role in ("user", "assistant")', []),
        ('ok = SPECS["gemini"].route', []),
        ('T = {"messages": (list,), "model": (str,)}', []),
    ],
)
def test_the_scan_finds_what_it_must(source: str, found: list[tuple[int, str]]) -> None:
    assert branches(source) == found


def test_every_protocol_has_a_row_and_every_pair_a_direction() -> None:
    assert set(SPECS) == NAMES
    assert set(DIRECTIONS) == {(c, u) for c in SPECS for u in SPECS}
    routes = [s.route for s in SPECS.values()] + [s.stream_route for s in SPECS.values() if s.stream_route]
    assert len(set(routes)) == len(routes)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_rows_error_shape_is_a_json_object_with_the_message(name: str) -> None:
    body = orjson.loads(SPECS[name].error(429, {"message": "slow down", "type": "x", "code": "y"}, "req_1"))
    assert isinstance(body, dict) and "slow down" in orjson.dumps(body).decode()


@pytest.mark.parametrize(("client", "upstream"), sorted(DIRECTIONS))
def test_every_row_has_a_sample_every_direction_takes(client: str, upstream: str) -> None:
    """The property tests' sample request of each client (tests/protocol_samples.py) goes
    every direction, its function offered as a function the upstream's body names."""
    fn = {"name": "shell", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}
    out, bridge = open_bridge(hello(client, [fn]), client, upstream, Ctx(upstream_model="m", public_model="pub"))
    assert b"shell" in orjson.dumps(out) and bridge.direction is DIRECTIONS[(client, upstream)]
