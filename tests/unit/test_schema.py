"""Tool JSON-schema sanitiser (docs/rules.md F16): every rule of ``schema.RULES`` on and off, and the
real tool list Codex 0.169 sends (tests/fixtures/codex_tools_0.169.json)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformers.context import QUIRKS, Ctx
from transformers.request_quirks import prepare_chat, prepare_responses
from transformers.request_r2c import responses_to_chat
from transformers.schema import RULES, SCHEMA_QUIRKS, sanitize_parameters, sanitize_tools, subschemas

CODEX_TOOLS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent.parent / "fixtures" / "codex_tools_0.169.json").read_text()
)
# Gemini's subset removes what strict mode adds: no profile has both (providers/profiles.py)
GEMINI = frozenset({"gemini_request"})
ALL = frozenset(SCHEMA_QUIRKS) - GEMINI
QUIRK_SETS = [frozenset(), *(frozenset({q}) for q in sorted(ALL)), ALL]
# with Gemini's: every set that does not close schemas strictly
GEMINI_SETS = [q | GEMINI for q in QUIRK_SETS if "schema_strict_mode" not in q]
COMBINATORS = ("anyOf", "oneOf", "allOf", "not", "if", "then", "else", "$ref")
GEMINI_UNKNOWN = ("$schema", "additionalProperties", "propertyNames", "patternProperties", "const", "exclusiveMinimum")


def violations(schema: Any, quirks: frozenset[str], strict: bool) -> list[str]:
    """What an upstream with these quirks would reject; [] when the schema is acceptable."""
    out: list[str] = []
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return ["root is not type object"]
    # (keywords Gemini's function declarations refuse: "Unknown name … Cannot find field")
    for n in subschemas(schema):
        if "type" in n and n["type"] is None:
            out.append("type: null")
        if "schema_strict_subset" in quirks and "type" not in n and not any(k in n for k in COMBINATORS):
            out.append(f"untyped subschema {n}")
    if "schema_no_root_combinators" in quirks:
        out += [f"root {k}" for k in ("anyOf", "oneOf", "allOf", "enum", "const", "not") if k in schema]
    if "gemini_request" in quirks:
        for n in [schema, *subschemas(schema)]:
            out += [f"{k} (Gemini does not know it)" for k in GEMINI_UNKNOWN if k in n]
    if "schema_strict_mode" in quirks and strict:
        for n in [schema, *subschemas(schema)]:
            t = n.get("type")
            if t == "object" or (isinstance(t, list) and "object" in t) or (t is None and "properties" in n):
                if n.get("additionalProperties") is not False:
                    out.append("object without additionalProperties:false")
                if n.get("required") != list(n.get("properties") or {}):
                    out.append("object with optional properties")
    return out


def functions(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every function definition of a Responses (flat / namespace) or Chat tool list."""
    out = []
    for t in tools:
        if isinstance(t.get("function"), dict):
            out.append(t["function"])
        elif t.get("type") == "function":
            out.append(t)
        elif t.get("type") == "namespace":
            out.extend(c for c in t["tools"] if c.get("type", "function") == "function")
    return out


def test_table_shape() -> None:
    names = [r[0] for r in RULES]
    assert len(names) == len(set(names))
    for rule, quirk, scope, when, fix in RULES:
        assert rule.startswith("tool_schema_")
        assert quirk is None or quirk in QUIRKS
        assert scope in ("root", "sub", "all") and when in ("any", "strict") and callable(fix)


# -- the captured Codex 0.169 tool list -------------------------------------------------------


def test_codex_fixture_is_the_real_list() -> None:
    kinds = [t["type"] for t in CODEX_TOOLS]
    assert kinds.count("function") == 7 and "custom" in kinds and "web_search" in kinds
    assert {t["name"] for t in CODEX_TOOLS if t["type"] == "function"} >= {"exec_command", "request_user_input"}


@pytest.mark.parametrize("quirks", QUIRK_SETS, ids=lambda q: "+".join(sorted(q)) or "none")
def test_codex_tools_unchanged_and_valid_responses_shape(quirks: frozenset[str]) -> None:
    """docs/rules.md F16 on Codex's real list, Responses upstream shape: every schema is already
    acceptable, so nothing is rewritten (same objects) and nothing is recorded."""
    tools = copy.deepcopy(CODEX_TOOLS)
    fired: list[str] = []
    assert sanitize_tools(tools, quirks, fired.append) is None
    assert fired == [] and tools == CODEX_TOOLS
    for fn in functions(tools):
        assert violations(fn["parameters"], quirks, fn.get("strict") is True) == [], fn["name"]


@pytest.mark.parametrize("quirks", QUIRK_SETS, ids=lambda q: "+".join(sorted(q)) or "none")
def test_codex_tools_through_responses_to_chat(quirks: frozenset[str]) -> None:
    """Codex → a Chat upstream: the translated tools pass the sanitiser untouched and valid."""
    body = {"model": "m", "input": "hi", "tools": copy.deepcopy(CODEX_TOOLS)}
    c = Ctx(quirks=quirks, upstream_model="m")
    translated = responses_to_chat(body, c)
    out = prepare_chat(translated, c, translated=True)
    assert out["tools"] is translated["tools"]
    assert not [r for r in c.repairs if r.startswith("tool_schema_")]
    for fn in functions(out["tools"]):
        assert violations(fn["parameters"], quirks, fn.get("strict") is True) == [], fn["name"]


def test_codex_tools_toward_gemini_lose_only_what_gemini_refuses() -> None:
    """Codex's tools close their objects (additionalProperties: false), which Gemini's
    function declarations refuse: removed, one repair per tool, the rest as it was."""
    body = {"model": "m", "input": "hi", "tools": copy.deepcopy(CODEX_TOOLS)}
    c = Ctx(quirks=GEMINI, upstream_model="m")
    out = prepare_chat(responses_to_chat(body, c), c, translated=True)
    fns = [fn for fn in functions(out["tools"]) if _codex_params(fn["name"]) is not None]
    changed = [fn for fn in fns if fn["parameters"] != _codex_params(fn["name"])]
    assert changed and c.repairs.count("tool_schema_gemini_subset") == len(changed)
    for fn in functions(out["tools"]):
        assert violations(fn["parameters"], GEMINI, False) == [], fn["name"]
    for fn in fns:
        assert _strip_closed(_codex_params(fn["name"])) == fn["parameters"]


def _codex_params(name: str) -> Any:
    for fn in functions(CODEX_TOOLS):
        if fn["name"] == name:
            return fn["parameters"]
    return None


def _strip_closed(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_closed(v) for k, v in node.items() if k != "additionalProperties"}
    if isinstance(node, list):
        return [_strip_closed(v) for v in node]
    return node


def test_gemini_subset_const_becomes_enum() -> None:
    got, fired = sanitize_parameters(
        {
            "type": "object",
            "$schema": "x",
            "properties": {"k": {"const": "a"}, "n": {"type": "number", "exclusiveMinimum": 0}},
        },
        GEMINI,
        strict=False,
    )
    assert got == {"type": "object", "properties": {"k": {"enum": ["a"]}, "n": {"type": "number"}}}
    assert fired == ["tool_schema_gemini_subset"]


def test_codex_tools_strict_variant_made_strict() -> None:
    """The same list declared strict: with schema_strict_mode every object is closed and
    every property required; without it nothing changes."""
    tools = copy.deepcopy(CODEX_TOOLS)
    for t in tools:
        if t["type"] == "function":
            t["strict"] = True
    assert sanitize_tools(tools, frozenset(), lambda r: None) is None
    fired: list[str] = []
    out = sanitize_tools(tools, frozenset({"schema_strict_mode"}), fired.append)
    assert out is not None
    # exec_command has optional properties: it changes; get_goal is already strict: it does not
    by_name = {t.get("name"): t for t in out}
    orig = {t.get("name"): t for t in tools}
    assert by_name["get_goal"] is orig["get_goal"]
    assert by_name["exec_command"]["parameters"]["required"] == list(orig["exec_command"]["parameters"]["properties"])
    assert fired == ["tool_schema_strict_mode"] * len(fired) and 1 <= len(fired) < 7
    for fn in functions(out):
        assert violations(fn["parameters"], frozenset({"schema_strict_mode"}), True) == [], fn["name"]
    assert tools[0].get("parameters", {}).get("required") == ["cmd"]  # input untouched


# -- each rule, on and off --------------------------------------------------------------------

OBJ = {"type": "object", "properties": {"a": {"type": "string"}}}
AUTOMATION = {  # shape of Codex desktop's automation_update (cc-switch#4992/#5357/#7459)
    "type": None,
    "oneOf": [
        {"properties": {"id": {"type": "string"}, "model": {"type": None}}, "required": ["id"]},
        {"properties": {"id": {"type": "string"}, "rrule": {"type": "string"}}, "required": ["id", "rrule"]},
    ],
}

CASES: list[tuple[str, frozenset[str], bool, Any, Any, list[str]]] = [
    # id, quirks, strict, parameters in, parameters out, rules fired
    ("type_object-missing-params", frozenset(), False, None, {"type": "object", "properties": {}},
     ["tool_schema_type_object"]),
    ("type_object-empty", frozenset(), False, {}, {"type": "object"}, ["tool_schema_type_object"]),
    ("type_object-null", frozenset(), False, {"type": None, "properties": {}}, {"type": "object", "properties": {}},
     ["tool_schema_type_object"]),
    ("type_object-nullable-list", frozenset(), False, {"type": ["object", "null"]}, {"type": "object"},
     ["tool_schema_type_object"]),
    ("type_object-already", frozenset(), False, OBJ, OBJ, []),
    ("null_type-nested", frozenset(), False,
     {"type": "object", "properties": {"m": {"type": None, "description": "d"}, "n": {"type": "integer"}}},
     {"type": "object", "properties": {"m": {"description": "d"}, "n": {"type": "integer"}}},
     ["tool_schema_null_type"]),
    ("null_type-in-items", frozenset(), False,
     {"type": "object", "properties": {"l": {"type": "array", "items": {"type": None}}}},
     {"type": "object", "properties": {"l": {"type": "array", "items": {}}}},
     ["tool_schema_null_type"]),
    ("property_types-off", frozenset(), False,
     {"type": "object", "properties": {"mode": {"enum": ["smart", "full"]}}},
     {"type": "object", "properties": {"mode": {"enum": ["smart", "full"]}}}, []),
    ("property_types-enum-str", frozenset({"schema_strict_subset"}), False,
     {"type": "object", "properties": {"mode": {"enum": ["smart", "full"]}}},
     {"type": "object", "properties": {"mode": {"enum": ["smart", "full"], "type": "string"}}},
     ["tool_schema_property_types"]),
    ("property_types-infer", frozenset({"schema_strict_subset"}), False,
     {"type": "object", "properties": {
         "i": {"enum": [1, 2]}, "n": {"enum": [1, 2.5]}, "b": {"const": True}, "mixed": {"enum": ["a", 1]},
         "o": {"properties": {"x": {}}}, "arr": {"items": {"enum": [None]}}, "s": {"pattern": "^a"},
         "num": {"minimum": 0}, "any": {"description": "anything"},
         "u": {"anyOf": [{"type": "string"}, {"type": "integer"}]}, "r": {"$ref": "#/$defs/x"}}},
     {"type": "object", "properties": {
         "i": {"enum": [1, 2], "type": "integer"}, "n": {"enum": [1, 2.5], "type": "number"},
         "b": {"const": True, "type": "boolean"}, "mixed": {"enum": ["a", 1], "type": "string"},
         "o": {"properties": {"x": {"type": "string"}}, "type": "object"},
         "arr": {"items": {"enum": [None], "type": "null"}, "type": "array"}, "s": {"pattern": "^a", "type": "string"},
         "num": {"minimum": 0, "type": "number"}, "any": {"description": "anything", "type": "string"},
         "u": {"anyOf": [{"type": "string"}, {"type": "integer"}]}, "r": {"$ref": "#/$defs/x"}}},
     ["tool_schema_property_types"]),
    ("property_types-after-null", frozenset({"schema_strict_subset"}), False,
     {"type": "object", "properties": {"m": {"type": None, "enum": ["a"]}}},
     {"type": "object", "properties": {"m": {"enum": ["a"], "type": "string"}}},
     ["tool_schema_null_type", "tool_schema_property_types"]),
    ("property_named_like_keywords", frozenset({"schema_strict_subset"}), False,
     {"type": "object", "properties": {"type": {"type": "string"}, "items": {"type": "string"}}},
     {"type": "object", "properties": {"type": {"type": "string"}, "items": {"type": "string"}}}, []),
    ("root_combinators-off", frozenset(), False,
     {"type": "object", "oneOf": [{"properties": {"a": {"type": "string"}}}]},
     {"type": "object", "oneOf": [{"properties": {"a": {"type": "string"}}}]}, []),
    ("root_combinators-oneOf", frozenset({"schema_no_root_combinators"}), False, AUTOMATION,
     {"type": "object", "properties": {"id": {"type": "string"}, "model": {}, "rrule": {"type": "string"}},
      "required": ["id"]},
     ["tool_schema_type_object", "tool_schema_null_type", "tool_schema_root_combinators"]),
    ("root_combinators-allOf", frozenset({"schema_no_root_combinators"}), False,
     {"type": "object", "required": ["z"], "properties": {"z": {"type": "integer"}},
      "allOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]},
                {"properties": {"b": {"type": "string"}, "z": {"type": "string"}}, "required": ["b"]}]},
     {"type": "object", "required": ["z", "a", "b"],
      "properties": {"z": {"type": "integer"}, "a": {"type": "string"}, "b": {"type": "string"}}},
     ["tool_schema_root_combinators"]),
    ("root_combinators-enum", frozenset({"schema_no_root_combinators"}), False,
     {"type": "object", "properties": {}, "enum": [{}], "not": {"required": ["x"]}},
     {"type": "object", "properties": {}}, ["tool_schema_root_combinators"]),
    ("root_combinators-nested-kept", frozenset({"schema_no_root_combinators"}), False,
     {"type": "object", "properties": {"u": {"anyOf": [{"type": "string"}, {"type": "null"}]}}},
     {"type": "object", "properties": {"u": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}, []),
    ("strict_mode-not-strict-tool", frozenset({"schema_strict_mode"}), False, OBJ, OBJ, []),
    ("strict_mode-off", frozenset(), True, OBJ, OBJ, []),
    ("strict_mode-on", frozenset({"schema_strict_mode"}), True,
     {"type": "object", "properties": {"a": {"type": "string"},
                                       "o": {"type": "object", "properties": {"x": {"type": "integer"}},
                                             "additionalProperties": True}},
      "required": ["a"]},
     {"type": "object", "properties": {"a": {"type": "string"},
                                       "o": {"type": "object", "properties": {"x": {"type": "integer"}},
                                             "additionalProperties": False, "required": ["x"]}},
      "required": ["a", "o"], "additionalProperties": False},
     ["tool_schema_strict_mode"]),
    ("strict_mode-in-array-and-defs", frozenset({"schema_strict_mode"}), True,
     {"type": "object", "properties": {"l": {"type": "array", "items": {"type": "object", "properties": {}}}},
      "$defs": {"d": {"type": "object"}}, "required": ["l"], "additionalProperties": False},
     {"type": "object", "properties": {"l": {"type": "array", "items": {"type": "object", "properties": {},
                                                                         "additionalProperties": False,
                                                                         "required": []}}},
      "$defs": {"d": {"type": "object", "additionalProperties": False, "required": [], "properties": {}}},
      "required": ["l"], "additionalProperties": False},
     ["tool_schema_strict_mode"]),
    ("strict_mode-already", frozenset({"schema_strict_mode"}), True,
     {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": False},
     {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": False},
     []),
]  # fmt: skip


@pytest.mark.parametrize("quirks, strict, params, want, want_fired", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rules(quirks: frozenset[str], strict: bool, params: Any, want: Any, want_fired: list[str]) -> None:
    before = copy.deepcopy(params)
    got, fired = sanitize_parameters(params, quirks, strict=strict)
    assert got == want
    assert fired == want_fired
    assert params == before  # the client's schema is never mutated
    if not want_fired:
        assert got is params
    else:
        assert violations(got, quirks, strict) == []
        again, fired_again = sanitize_parameters(got, quirks, strict=strict)
        assert again is got and fired_again == []  # idempotent


def test_sanitize_tools_shapes_and_repairs() -> None:
    bad = {"type": None}
    chat = [
        {"type": "function", "function": {"name": "f", "parameters": bad}},
        {"type": "builtin_function", "function": {"name": "$web_search"}},
    ]
    flat = [{"type": "function", "name": "g", "parameters": bad},
            {"type": "namespace", "name": "mcp__x__", "tools": [{"type": "function", "name": "h"},
                                                                {"type": "function", "name": "ok", "parameters": OBJ}]},
            {"type": "custom", "name": "apply_patch"}, {"type": "web_search"}]  # fmt: skip
    fired: list[str] = []
    out = sanitize_tools(chat, frozenset(), fired.append)
    assert out is not None and out[0]["function"]["parameters"] == {"type": "object"} and out[1] is chat[1]
    out = sanitize_tools(flat, frozenset(), fired.append)
    assert out is not None
    assert out[0]["parameters"] == {"type": "object"}
    assert out[1]["tools"][0]["parameters"] == {"type": "object", "properties": {}}
    assert out[1]["tools"][1] is flat[1]["tools"][1]
    assert out[2] is flat[2] and out[3] is flat[3]
    assert fired == ["tool_schema_type_object"] * 3
    assert chat[0]["function"]["parameters"] is bad and bad == {"type": None}


def test_hooked_into_prepare_chat_and_responses() -> None:
    """The ``tool_schemas`` row of the request quirk table: same-protocol requests too."""
    tools = [
        {
            "type": "function",
            "function": {"name": "f", "parameters": {"type": "object", "properties": {"mode": {"enum": ["a", "b"]}}}},
        }
    ]
    c = Ctx(quirks=frozenset({"schema_strict_subset"}), upstream_model="kimi-k2.6")
    out = prepare_chat({"model": "x", "messages": [], "tools": tools}, c, translated=False)
    assert out["tools"][0]["function"]["parameters"]["properties"]["mode"]["type"] == "string"
    assert c.repairs == ["tool_schema_property_types"]
    assert "type" not in tools[0]["function"]["parameters"]["properties"]["mode"]

    c = Ctx(quirks=frozenset(), upstream_model="kimi-k2.6")
    out = prepare_chat({"model": "x", "messages": [], "tools": tools}, c, translated=False)
    assert out["tools"] is tools and c.repairs == []

    rtools = [
        {
            "type": "function",
            "name": "f",
            "strict": True,
            "parameters": {"type": "object", "properties": {"a": {"type": "string"}}},
        }
    ]
    c = Ctx(quirks=frozenset({"schema_strict_mode"}), upstream_model="gpt-5")
    out = prepare_responses({"model": "x", "input": "hi", "tools": rtools}, c, translated=False)
    assert out["tools"][0]["parameters"] == {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "additionalProperties": False,
        "required": ["a"],
    }
    assert c.repairs == ["tool_schema_strict_mode"]


# -- property: whatever the schema, the result is acceptable and a fixed point --------------

_leaf = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from([None, "string", "integer", "number", "boolean", "object", "array"]),
        "enum": st.lists(st.one_of(st.integers(), st.text(max_size=3), st.booleans()), min_size=1, max_size=3),
        "description": st.text(max_size=5),
        "pattern": st.just("^x"),
    },
)
_schema = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.builds(lambda p, extra: {**extra, "properties": p}, st.dictionaries(st.sampled_from(["a", "b", "type", "items"]), inner, max_size=3), _leaf),
        st.builds(lambda i, extra: {**extra, "items": i}, inner, _leaf),
        st.builds(lambda bs: {"anyOf": bs}, st.lists(inner, min_size=1, max_size=2)),
        st.builds(lambda bs, req: {"oneOf": [{**b, "required": req} for b in bs]}, st.lists(inner, min_size=1, max_size=2), st.lists(st.sampled_from(["a", "b"]), max_size=2)),
    ),
    max_leaves=8,
)  # fmt: skip


_root = st.builds(
    lambda props, t, comb: {**({"type": t} if t != "absent" else {}), "properties": props, **comb},
    st.dictionaries(st.sampled_from(["a", "b", "type"]), _schema, max_size=3),
    st.sampled_from(["absent", None, "object", ["object", "null"]]),
    st.one_of(st.just({}), st.builds(lambda bs: {"oneOf": bs}, st.lists(_schema, min_size=1, max_size=2))),
)


@settings(max_examples=300, deadline=None)
@given(_root, st.sampled_from(QUIRK_SETS + GEMINI_SETS), st.booleans())
def test_property_result_is_valid_and_fixed_point(schema: dict[str, Any], quirks: frozenset[str], strict: bool) -> None:
    before = copy.deepcopy(schema)
    got, _ = sanitize_parameters(schema, quirks, strict=strict)
    assert schema == before
    assert violations(got, quirks, strict) == []
    again, fired = sanitize_parameters(got, quirks, strict=strict)
    assert fired == [] and again is got
