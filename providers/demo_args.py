"""Arguments the demo model passes to a tool: a JSON value that satisfies the tool's schema.

Theory of operation
-------------------
``arguments(parameters)`` walks the tool's JSON Schema once and builds the smallest plausible
value for it: an object gets its ``required`` properties (the top level, when nothing is
required, its first property, so a call is never empty when the tool takes something), an
array ``minItems`` items (at least one), a string a value chosen by ``format``, else by the
property's name, else ``"demo"``.  Bounds are honoured where that is arithmetic:
``minimum``/``maximum`` (exclusive too), ``multipleOf``, ``minLength``/``maxLength``,
``minItems``.  ``pattern`` is not solved.  Local ``$ref`` (``#/$defs/…``,
``#/definitions/…``) are followed to a bounded depth; ``const`` and ``enum`` win over
``type``; ``anyOf``/``oneOf`` take the first branch that is not ``null``; ``allOf`` merges its
branches' properties and requirements.  A schema that is not an object yields ``"demo"``.

==============================  ==================================================
string, by ``format``            value
==============================  ==================================================
``date-time``                    ``2025-01-01T12:00:00Z``
``date`` / ``time``              ``2025-01-01`` / ``12:00:00``
``email``                        ``demo@example.com``
``uri`` / ``url`` / ``iri``      ``https://example.com``
``uuid``                         ``00000000-0000-4000-8000-000000000000``
``hostname`` / ``ipv4`` /        ``example.com`` / ``127.0.0.1`` / ``::1``
``ipv6``
==============================  ==================================================

==============================  ==================================================
string, by property name          value (first row whose word is in the name)
==============================  ==================================================
cmd, command, script, shell      ``echo hello from switchboard`` (an array of strings:
                                 ``["echo", "hello from switchboard"]``)
path, file, filename             ``README.md``
dir, cwd, folder, workdir        ``.``
url, uri, link                   ``https://example.com``
email                            ``demo@example.com``
location, city, place            ``Paris``
query, search, pattern, q        ``switchboard``
patch, diff                      a one-line ``*** Begin Patch`` … ``*** End Patch``
lang, language, locale           ``en``
unit                             ``celsius``
==============================  ==================================================
"""

from __future__ import annotations

import re
from typing import Any

MAX_DEPTH = 8  # $ref hops and nesting levels followed before giving up with a placeholder

_FORMATS = {
    "date-time": "2025-01-01T12:00:00Z",
    "date": "2025-01-01",
    "time": "12:00:00",
    "email": "demo@example.com",
    "idn-email": "demo@example.com",
    "uri": "https://example.com",
    "url": "https://example.com",
    "iri": "https://example.com",
    "uri-reference": "https://example.com",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "hostname": "example.com",
    "ipv4": "127.0.0.1",
    "ipv6": "::1",
}

_COMMAND = "echo hello from switchboard"
_PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello from switchboard\n*** End Patch\n"
_BY_NAME: tuple[tuple[tuple[str, ...], str], ...] = (
    (("cmd", "command", "script", "shell"), _COMMAND),
    (("path", "file", "filename"), "README.md"),
    (("dir", "cwd", "folder", "workdir"), "."),
    (("url", "uri", "link"), "https://example.com"),
    (("email",), "demo@example.com"),
    (("location", "city", "place"), "Paris"),
    (("query", "search", "pattern", "q"), "switchboard"),
    (("patch", "diff"), _PATCH),
    (("lang", "language", "locale"), "en"),
    (("unit",), "celsius"),
)
_WORD = re.compile(r"[a-z]+|[A-Z][a-z]*")


def _words(name: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(name)}


def _by_name(name: str) -> str | None:
    words = _words(name)
    for keys, value in _BY_NAME:
        if words.intersection(keys):
            return value
    return None


def _obj(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _num(v: Any) -> float | None:
    return v if isinstance(v, int | float) and not isinstance(v, bool) else None


class _Builder:
    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root

    def resolve(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        while "$ref" in schema and depth < MAX_DEPTH:
            ref = schema["$ref"]
            if not isinstance(ref, str) or not ref.startswith("#"):
                return {}
            node: Any = self.root
            for part in [p for p in ref[1:].split("/") if p]:
                node = _obj(node).get(part.replace("~1", "/").replace("~0", "~"))
            schema = _obj(node)
            depth += 1
        return schema

    def value(self, schema: Any, name: str = "", depth: int = 0, top: bool = False) -> Any:
        if schema is True or not isinstance(schema, dict):
            return "demo"
        s = self.resolve(schema, depth)
        if depth >= MAX_DEPTH:
            return None if "null" in _types(s) else "demo"
        if "const" in s:
            return s["const"]
        enum = s.get("enum")
        if isinstance(enum, list) and enum:
            return next((e for e in enum if e is not None), enum[0])
        for key in ("anyOf", "oneOf"):
            branches = [b for b in s.get(key) or [] if isinstance(b, dict)]
            if branches:
                pick = next((b for b in branches if _types(self.resolve(b, depth)) != ["null"]), branches[0])
                merged = {k: v for k, v in s.items() if k != key}
                return self.value({**merged, **self.resolve(pick, depth + 1)}, name, depth + 1, top)
        if isinstance(s.get("allOf"), list):
            return self.value(self._merge(s, depth), name, depth + 1, top)
        t = next((x for x in _types(s) if x != "null"), None) or ("null" if _types(s) == ["null"] else None)
        if t is None:
            t = "object" if "properties" in s else "array" if "items" in s else "string"
        if t == "object":
            return self._object(s, depth, top)
        if t == "array":
            return self._array(s, name, depth)
        if t in ("integer", "number"):
            return _number(s, integer=t == "integer")
        if t == "boolean":
            return True
        if t == "null":
            return None
        return _string(s, name)

    def _merge(self, s: dict[str, Any], depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {k: v for k, v in s.items() if k != "allOf"}
        props = dict(_obj(out.get("properties")))
        req = list(out.get("required") or [])
        for b in s["allOf"]:
            b = self.resolve(_obj(b), depth + 1)
            props.update(_obj(b.get("properties")))
            req += [r for r in b.get("required") or [] if r not in req]
            for k, v in b.items():
                if k not in ("properties", "required"):
                    out.setdefault(k, v)
        if props:
            out["properties"] = props
        if req:
            out["required"] = req
        return out

    def _object(self, s: dict[str, Any], depth: int, top: bool) -> dict[str, Any]:
        props = _obj(s.get("properties"))
        req = [k for k in s.get("required") or [] if isinstance(k, str)]
        if not req and top:
            req = list(props)[:1]
        floor = _num(s.get("minProperties")) or 0
        req += [k for k in props if k not in req][: max(0, int(floor) - len(req))]
        return {k: self.value(props.get(k, {}), k, depth + 1) for k in req}

    def _array(self, s: dict[str, Any], name: str, depth: int) -> list[Any]:
        prefix = [p for p in s.get("prefixItems") or [] if isinstance(p, dict)]
        items = s.get("items")
        n = max(int(_num(s.get("minItems")) or 0), 1, len(prefix))
        hi = _num(s.get("maxItems"))
        if hi is not None:
            n = min(n, int(hi))
        argv = ["echo", "hello from switchboard"]
        if not prefix and _types(self.resolve(_obj(items), depth)) == ["string"] and _by_name(name) == _COMMAND:
            if n <= len(argv) and (hi is None or hi >= len(argv)):
                return argv
        out = [self.value(prefix[i] if i < len(prefix) else items, name, depth + 1) for i in range(n)]
        if s.get("uniqueItems") and all(isinstance(v, str) for v in out):
            out = [v if i == 0 else f"{v}{i}" for i, v in enumerate(out)]
        return out


def _types(s: dict[str, Any]) -> list[str]:
    t = s.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if isinstance(x, str)]
    return []


def _number(s: dict[str, Any], *, integer: bool) -> int | float:
    lo, hi = _num(s.get("minimum")), _num(s.get("maximum"))
    xlo, xhi = _num(s.get("exclusiveMinimum")), _num(s.get("exclusiveMaximum"))
    v: float = 1
    if lo is not None and v < lo:
        v = lo
    if xlo is not None and v <= xlo:
        v = xlo + 1 if integer else xlo + 0.5
    if hi is not None and v > hi:
        v = hi
    if xhi is not None and v >= xhi:
        v = (
            xhi - 1
            if integer
            else (xhi + max(xlo if xlo is not None else xhi - 1, lo if lo is not None else xhi - 1)) / 2
        )
    step = _num(s.get("multipleOf"))
    if step and step > 0:
        k = -(-v // step)  # the first multiple at or above v
        v = k * step
        if (hi is not None and v > hi) or (xhi is not None and v >= xhi):
            v = (k - 1) * step
    if integer or float(v).is_integer():
        return int(v)
    return v


def _string(s: dict[str, Any], name: str) -> str:
    fmt = s.get("format")
    v = _FORMATS.get(fmt) if isinstance(fmt, str) else None
    if v is None:
        v = _by_name(name) or "demo"
    lo, hi = _num(s.get("minLength")), _num(s.get("maxLength"))
    if lo is not None and len(v) < lo:
        v += "x" * (int(lo) - len(v))
    if hi is not None and len(v) > hi:
        v = v[: int(hi)]
    return v


def arguments(parameters: Any) -> Any:
    """A value for ``parameters`` (a tool's JSON Schema); an object for an object schema."""
    root = _obj(parameters)
    return _Builder(root).value(root, depth=0, top=True) if root else {}
