"""Tool JSON-schema sanitiser, per upstream (docs/rules.md F16).

Theory of operation
-------------------
Clients declare tools with whatever JSON Schema their authors wrote; upstreams validate
those schemas with very different strictness and reject the WHOLE request for one bad
tool (DeepSeek: ``schema must be a JSON Schema of 'type: "object"', got 'type: null'``;
Kimi: ``tools.function.parameters.type is required``; Moonshot: ``not a valid moonshot
flavored json schema``; OpenAI: no ``oneOf`` at the top level).  ``sanitize_tools`` runs
the table below over every function tool's ``parameters`` just before the request goes
upstream (one row of ``request_quirks.QUIRK_TABLE`` per protocol).

Each row is ``(rule, quirk, scope, when, fix)``.  ``quirk`` ``None`` means always on (the
rule only repairs a schema that is not valid JSON Schema, or not an object schema, which
no upstream accepts); otherwise the rule runs when that quirk is on for the request.
``scope`` says which nodes ``fix`` sees: ``root`` (the ``parameters`` object), ``sub``
(every subschema below it: ``properties`` values, ``items``, ``additionalProperties``,
``anyOf``/``oneOf``/``allOf`` branches, ``$defs``…), ``all`` (both).  ``when`` is ``any``
or ``strict`` (only for tools declared ``strict: true``).  ``fix(node)`` returns the same
object when it has nothing to do, else a new dict; the walk rebuilds a parent only when a
child changed, so a schema no rule applies to comes back as the very same object, and the
client's parsed body is never mutated.  A rule that changed a tool records
``ctx.repaired(<rule>)`` once for that tool.

=============================  ==========================  =====  ======  =================================
rule                           quirk                       scope  when    fix
=============================  ==========================  =====  ======  =================================
tool_schema_type_object        (always)                    root   any     not an object → ``{"type":
                                                                          "object","properties":{}}``;
                                                                          ``type`` missing / ``null`` /
                                                                          a list holding ``"object"`` →
                                                                          ``"object"``
tool_schema_null_type          (always)                    sub    any     ``"type": null`` (not valid JSON
                                                                          Schema) → the key is removed
tool_schema_root_combinators   ``schema_no_root_           root   any     root ``anyOf``/``oneOf``/``allOf``
                               combinators``                              merged into ``properties`` (first
                                                                          definition wins; ``required``:
                                                                          allOf union, anyOf/oneOf the
                                                                          names every branch requires);
                                                                          root ``enum``/``const``/``not``
                                                                          removed
tool_schema_property_types     ``schema_strict_subset``    sub    any     a subschema without ``type`` and
                                                                          without ``anyOf``/``oneOf``/
                                                                          ``allOf``/``not``/``if``/``$ref``
                                                                          gets one: from its ``enum`` /
                                                                          ``const`` values, else from its
                                                                          keywords (``properties`` →
                                                                          object, ``items`` → array,
                                                                          ``pattern`` → string, ``minimum``
                                                                          → number), else ``"string"``
tool_schema_strict_mode        ``schema_strict_mode``      all    strict  every object schema gets
                                                                          ``additionalProperties: false``
                                                                          and ``required`` = all its
                                                                          properties (in order)
tool_schema_gemini_subset      ``gemini_request``          all    any     keywords Gemini's schema subset
                                                                          does not know removed
                                                                          (``additionalProperties``,
                                                                          ``$schema``, ``propertyNames``…);
                                                                          ``const`` → a one-value ``enum``
=============================  ==========================  =====  ======  =================================

Decisions:

* Always-on rules only repair schemas that are invalid or not an object schema; they are
  what ``openai-compatible`` gets (nothing else is assumed about an unnamed upstream).
* ``tool_schema_property_types`` loosens nothing the tool relied on: the property had no
  type, so the upstream could not validate it; Moonshot demands one, kimi-cli fills it the
  same way for the same reason (kosong ``ensure_property_types``).
* ``tool_schema_root_combinators`` widens the schema (a union of the branches' properties,
  only the names every branch requires stay required); the tool still validates its own
  arguments.  ``$ref`` branches cannot be merged and are dropped with the combinator.
* Strict rules run only for tools whose ``strict`` is ``true`` and only where the upstream
  enforces strict schemas (OpenAI, Azure): elsewhere ``strict`` is a hint and making every
  property required would change what the model must send.
* Function tools only: ``custom`` tools have no schema, hosted tools are not ours, and
  ``builtin_function`` (Moonshot ``$web_search``) has no parameters.
* The walk recurses, so it stops ``MAX_WALK_DEPTH`` subschema levels down (deeper
  subschemas are left as they are); the app refuses bodies nested that deep before this
  runs (``request_check``).  A ``required`` that is not an array of strings names nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["RULES", "sanitize_parameters", "sanitize_tools", "subschemas"]

Node = dict[str, Any]
Fix = Callable[[Node], Node]

# keyword → how its value holds subschemas: "map" (name → schema), "list", "one"
SUBSCHEMA_KEYWORDS: dict[str, str] = {
    "properties": "map",
    "patternProperties": "map",
    "$defs": "map",
    "definitions": "map",
    "dependentSchemas": "map",
    "items": "one_or_list",
    "prefixItems": "list",
    "additionalItems": "one",
    "additionalProperties": "one",
    "unevaluatedProperties": "one",
    "unevaluatedItems": "one",
    "contains": "one",
    "propertyNames": "one",
    "not": "one",
    "if": "one",
    "then": "one",
    "else": "one",
    "anyOf": "list",
    "oneOf": "list",
    "allOf": "list",
}

_COMBINATORS = ("anyOf", "oneOf", "allOf", "not", "if", "then", "else", "$ref")
_ROOT_DROP = ("enum", "const", "not")

# structural keywords → the type they imply (first match wins)
_KEYWORD_TYPES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("properties", "additionalProperties", "patternProperties", "propertyNames", "required",
      "minProperties", "maxProperties"), "object"),
    (("items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"), "array"),
    (("minLength", "maxLength", "pattern", "format"), "string"),
    (("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"), "number"),
)  # fmt: skip


# -- the fixes -------------------------------------------------------------------------------


def _type_object(node: Any) -> Any:
    if not isinstance(node, dict):
        return {"type": "object", "properties": {}}
    t = node.get("type")
    if t is None or (isinstance(t, list) and "object" in t):
        return {**node, "type": "object"}
    return node


def _null_type(node: Node) -> Node:
    if "type" in node and node["type"] is None:
        return {k: v for k, v in node.items() if k != "type"}
    return node


def _merge_branches(node: Node) -> Node:
    out = {k: v for k, v in node.items() if k not in ("anyOf", "oneOf", "allOf", *_ROOT_DROP)}
    if len(out) == len(node):
        return node
    props: dict[str, Any] = dict(node["properties"]) if isinstance(node.get("properties"), dict) else {}
    required: list[str] = _names(node.get("required"))
    for key in ("allOf", "anyOf", "oneOf"):
        branches = [b for b in node.get(key) or () if isinstance(b, dict)] if isinstance(node.get(key), list) else []
        for b in branches:
            for name, sub in (b.get("properties") or {}).items() if isinstance(b.get("properties"), dict) else ():
                props.setdefault(name, sub)
        reqs = [_names(b.get("required")) for b in branches]
        if key == "allOf":
            extra = [r for rs in reqs for r in rs]
        else:  # anyOf / oneOf: only what every branch requires
            extra = [r for r in reqs[0] if all(r in rs for rs in reqs[1:])] if reqs else []
        for r in extra:
            if r not in required:
                required.append(r)
    out["type"] = "object"
    out["properties"] = props
    if required:
        out["required"] = required
    else:
        out.pop("required", None)
    return out


def _names(required: Any) -> list[str]:
    """The names of a ``required`` keyword (anything but an array of strings holds none)."""
    return [r for r in required if isinstance(r, str)] if isinstance(required, list) else []


def _infer_type(node: Node) -> str:
    values = (
        node["enum"]
        if isinstance(node.get("enum"), list) and node["enum"]
        else ([node["const"]] if "const" in node else None)
    )
    if values is not None:
        kinds = {_json_type(v) for v in values}
        if len(kinds) == 1:
            return kinds.pop()
        return "number" if kinds == {"integer", "number"} else "string"
    for keys, t in _KEYWORD_TYPES:
        if any(k in node for k in keys):
            return t
    return "string"


def _json_type(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if v is None:
        return "null"
    return "array" if isinstance(v, list) else "object"


def _property_type(node: Node) -> Node:
    if node.get("type") is not None or any(k in node for k in _COMBINATORS):
        return node
    return {**node, "type": _infer_type(node)}


def _is_object_schema(node: Node) -> bool:
    t = node.get("type")
    return (
        t == "object"
        or (isinstance(t, list) and "object" in t)
        or (t is None and isinstance(node.get("properties"), dict))
    )


def _strict_object(node: Node) -> Node:
    if not _is_object_schema(node):
        return node
    props = node.get("properties")
    if not isinstance(props, dict):
        props = {}
    want_required = list(props)
    if node.get("additionalProperties") is False and node.get("required") == want_required:
        return node
    out = {**node, "additionalProperties": False, "required": want_required}
    if "properties" not in node:
        out["properties"] = {}
    return out


# JSON Schema keywords outside the schema subset Gemini's function declarations accept: its
# OpenAI-compatible endpoint answers 400 "Invalid JSON payload received. Unknown name
# \"additionalProperties\" … Cannot find field" for each (docs/quirks.md, gemini_request)
_GEMINI_UNKNOWN = frozenset(
    {
        "$schema", "$id", "$comment", "additionalProperties", "propertyNames", "patternProperties",
        "unevaluatedProperties", "dependentRequired", "dependentSchemas", "exclusiveMinimum",
        "exclusiveMaximum", "const", "examples", "contentEncoding", "contentMediaType",
    }
)  # fmt: skip


def _gemini_subset(node: Node) -> Node:
    if not any(k in _GEMINI_UNKNOWN for k in node):
        return node
    out = {k: v for k, v in node.items() if k not in _GEMINI_UNKNOWN}
    if "const" in node and "enum" not in node:
        out["enum"] = [node["const"]]  # the one value, in the form Gemini reads
    return out


# -- the table -------------------------------------------------------------------------------

RULES: tuple[tuple[str, str | None, str, str, Fix], ...] = (
    # rule                           quirk                          scope   when      fix
    ("tool_schema_type_object",      None,                          "root", "any",    _type_object),
    ("tool_schema_null_type",        None,                          "sub",  "any",    _null_type),
    ("tool_schema_root_combinators", "schema_no_root_combinators",  "root", "any",    _merge_branches),
    ("tool_schema_property_types",   "schema_strict_subset",        "sub",  "any",    _property_type),
    ("tool_schema_strict_mode",      "schema_strict_mode",          "all",  "strict", _strict_object),
    ("tool_schema_gemini_subset",    "gemini_request",              "all",  "any",    _gemini_subset),
)  # fmt: skip

SCHEMA_QUIRKS = frozenset(q for _, q, _, _, _ in RULES if q is not None)


# -- the walk --------------------------------------------------------------------------------


# subschema levels the walk descends at most (the app refuses bodies nested that deep
# anyway); below that a schema is left as it is, so the recursion stays bounded
MAX_WALK_DEPTH = 200


def _children(node: Node, fix: Fix, depth: int = 0) -> Node:
    """``node`` with ``fix`` applied to every subschema below it (depth first, pre-order);
    the same object when nothing changed."""
    if depth >= MAX_WALK_DEPTH:
        return node
    depth += 1
    new: Node | None = None
    for key, val in node.items():
        kind = SUBSCHEMA_KEYWORDS.get(key)
        if kind is None:
            continue
        changed: Any = val
        if kind == "map" and isinstance(val, dict):
            items = {k: _all(v, fix, depth) for k, v in val.items()}
            if any(items[k] is not val[k] for k in val):
                changed = items
        elif (kind == "list" or kind == "one_or_list") and isinstance(val, list):
            lst = [_all(v, fix, depth) for v in val]
            if any(a is not b for a, b in zip(lst, val)):
                changed = lst
        elif kind in ("one", "one_or_list") and isinstance(val, dict):
            changed = _all(val, fix, depth)
        if changed is not val:
            if new is None:
                new = dict(node)
            new[key] = changed
    return node if new is None else new


def _all(node: Any, fix: Fix, depth: int = 0) -> Any:
    if not isinstance(node, dict):
        return node  # booleans (true/false schemas) and junk are left alone
    return _children(fix(node), fix, depth)


def subschemas(node: Any) -> list[Node]:
    """Every subschema below ``node`` (not ``node`` itself), depth first — for tests/docs."""
    out: list[Node] = []

    def visit(n: Node) -> Node:
        out.append(n)
        return n

    if isinstance(node, dict):
        _children(node, visit)
    return out


def sanitize_parameters(params: Any, quirks: frozenset[str], *, strict: bool = False) -> tuple[Any, list[str]]:
    """``(schema, rules that changed it)``; the same object and ``[]`` when none applied."""
    fired: list[str] = []
    for rule, quirk, scope, when, fix in RULES:
        if quirk is not None and quirk not in quirks:
            continue
        if when == "strict" and not strict:
            continue
        if scope == "root":
            new = fix(params)
        elif not isinstance(params, dict):
            continue
        elif scope == "sub":
            new = _children(params, fix)
        else:
            new = _all(params, fix)
        if new is not params:
            fired.append(rule)
            params = new
    return params, fired


def _function_params(tool: Node, quirks: frozenset[str], record: Callable[[str], None]) -> Node:
    """A function definition (Chat ``function`` object or flat Responses tool) with its
    ``parameters`` sanitised; the same object when nothing changed."""
    params = tool.get("parameters")
    new, fired = sanitize_parameters(params, quirks, strict=tool.get("strict") is True)
    if not fired:
        return tool
    for rule in fired:
        record(rule)
    return {**tool, "parameters": new}


def sanitize_tools(tools: list[Any], quirks: frozenset[str], record: Callable[[str], None]) -> list[Any] | None:
    """The tool list with every function schema sanitised (Chat ``{type, function}`` and
    Responses flat / ``namespace`` shapes alike), or ``None`` when nothing changed."""
    out: list[Any] | None = None
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            continue
        new = tool
        fn = tool.get("function")
        kind = tool.get("type", "function")
        if kind == "function" and isinstance(fn, dict):
            nfn = _function_params(fn, quirks, record)
            if nfn is not fn:
                new = {**tool, "function": nfn}
        elif kind == "function":
            new = _function_params(tool, quirks, record)
        elif kind == "namespace" and isinstance(tool.get("tools"), list):
            children = tool["tools"]
            nch = [
                _function_params(c, quirks, record)
                if isinstance(c, dict) and c.get("type", "function") == "function"
                else c
                for c in children
            ]
            if any(a is not b for a, b in zip(nch, children)):
                new = {**tool, "tools": nch}
        if new is not tool:
            if out is None:
                out = list(tools)
            out[i] = new
    return out
