"""The import layers of docs/architecture.md ("Three packages"): every arrow points the allowed way.

* ``transformers/`` (the sans-IO core) imports the standard library, orjson and itself only;
* ``providers/`` imports the standard library, ``transformers``, itself, and the libraries
  of the provider layer (httpx, httptools under its own transport, pydantic, yaml, orjson), never
  ``app``;
* ``app/`` may import everything (not checked).

Every ``.py`` file under the two folders is read with ``ast`` (nothing is imported, so a
module that would pull in a forbidden package at import time is still caught): ``import``
and ``from … import`` statements anywhere in the file (functions and ``TYPE_CHECKING``
blocks included), relative imports resolved against the file's package, and string imports
through ``importlib.import_module(…)`` / ``__import__(…)``; a string import whose name is not
a literal cannot be checked and is refused.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

STDLIB = frozenset(sys.stdlib_module_names)
ALLOWED: dict[str, frozenset[str]] = {
    "transformers": STDLIB | {"transformers", "orjson"},
    "providers": STDLIB | {"providers", "transformers", "httpx", "httptools", "pydantic", "yaml", "orjson"},
}
_STRING_IMPORTERS = frozenset({"import_module", "__import__"})


def _top(name: str) -> str:
    return name.split(".", 1)[0]


def imported_roots(source: str, package: tuple[str, ...]) -> list[tuple[int, str]]:
    """(line, top-level package) for every import in ``source``, a module of ``package``
    (e.g. ``("transformers",)``).  A relative import that climbs out of the top package, or a
    string import whose name is not a literal, is reported as ``"<…>"`` (never allowed)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, _top(a.name)) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.append((node.lineno, _top(node.module or "")))
            else:
                base = package[: len(package) - (node.level - 1)] if node.level - 1 < len(package) else ()
                found.append((node.lineno, base[0] if base else "<relative import above the package>"))
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name not in _STRING_IMPORTERS or not node.args:
                continue
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.append((node.lineno, package[0] if arg.value.startswith(".") else _top(arg.value)))
            else:
                found.append((node.lineno, f"<{name}() of a computed name>"))
    return found


def violations(layer: str, source: str, package: tuple[str, ...]) -> list[tuple[int, str]]:
    return [(line, root) for line, root in imported_roots(source, package) if root not in ALLOWED[layer]]


def _modules(layer: str) -> list[Path]:
    return sorted((ROOT / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_what_it_may(layer: str) -> None:
    files = _modules(layer)
    assert files, f"no modules found under {ROOT / layer}"
    bad = []
    for path in files:
        rel = path.relative_to(ROOT)
        package = rel.parent.parts
        for line, root in violations(layer, path.read_text(encoding="utf-8"), package):
            bad.append(f"{rel}:{line} imports {root}")
    assert not bad, f"{layer}/ may import only stdlib + {sorted(ALLOWED[layer] - STDLIB)}:\n" + "\n".join(bad)


# -- the checker itself ----------------------------------------------------------------------

T = ("transformers",)
P = ("providers",)


@pytest.mark.parametrize(
    ("layer", "package", "source"),
    [
        ("transformers", T, "import httpx\n"),
        ("transformers", T, "from pydantic import BaseModel\n"),
        ("transformers", T, "from app import metrics\n"),
        ("transformers", T, "import providers.profiles\n"),
        ("transformers", T, "def f():\n    import asyncio.x, starlette\n"),
        ("transformers", T, "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import httpx\n"),
        ("transformers", T, "from .. import app\n"),
        ("transformers", T, "import importlib\nimportlib.import_module('httpx')\n"),
        ("transformers", T, "from importlib import import_module as im\nx = __import__('fastapi.responses')\n"),
        ("transformers", T, "import importlib\nname = 'ht' + 'tpx'\nimportlib.import_module(name)\n"),
        ("providers", P, "from app import metrics\n"),
        ("providers", P, "import app.config\n"),
        ("providers", P, "from app.errors import ProxyError\n"),
        ("providers", P, "def f():\n    from app.logs import log\n"),
        ("providers", P, "import importlib\nimportlib.import_module('app.metrics')\n"),
        ("providers", P, "from fastapi import FastAPI\n"),
    ],
)
def test_checker_catches(layer: str, package: tuple[str, ...], source: str) -> None:
    assert violations(layer, source, package)


@pytest.mark.parametrize(
    ("layer", "package", "source"),
    [
        ("transformers", T, "from __future__ import annotations\nimport re, json\nfrom typing import Any\n"),
        ("transformers", T, "import orjson\nfrom .errors import RequestError\nfrom . import sse\n"),
        ("transformers", T, "from transformers.events import Finish\n"),
        ("transformers", ("transformers", "sub"), "from ..errors import RequestError\n"),
        ("transformers", T, "import importlib\nimportlib.import_module('.sse', 'transformers')\n"),
        ("providers", P, "import httpx\nimport orjson\nimport yaml\nfrom pydantic import BaseModel\n"),
        ("providers", P, "from transformers.masking import SecretMask\nfrom providers.catalog import ModelInfo\n"),
        ("providers", P, "from .config import Config\nimport asyncio\n"),
    ],
)
def test_checker_allows(layer: str, package: tuple[str, ...], source: str) -> None:
    assert violations(layer, source, package) == []


def _module_imports(path: Path, package: str) -> set[str]:
    """The modules a file imports when it is imported: its top-level statements only (not
    inside functions or classes, not under ``if TYPE_CHECKING``)."""
    out: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for n in ast.walk(node):
            if isinstance(n, ast.Import):
                out |= {a.name for a in n.names}
            elif isinstance(n, ast.ImportFrom) and n.module:
                base = n.module if n.level == 0 else f"{package}.{n.module}"
                out |= {base, *(f"{base}.{a.name}" for a in n.names)}
    return out


def test_no_import_cycle() -> None:
    """No module of the three packages imports, at import time, one that imports it back
    (directly or through others): the order modules load in never matters."""
    graph: dict[str, set[str]] = {}
    for package in ("app", "providers", "transformers"):
        for path in sorted((ROOT / package).glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            graph[name] = _module_imports(path, package)
    graph = {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}
    done: set[str] = set()

    def visit(module: str, trail: list[str]) -> None:
        if module in trail:
            cycle = trail[trail.index(module) :] + [module]
            pytest.fail("import cycle: " + " -> ".join(cycle))
        if module in done:
            return
        for dep in sorted(graph[module]):
            visit(dep, [*trail, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
