"""json_equal: JSON equality with number lexemes kept (docs/rules.md §3)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transformers.jsoneq import json_equal

CASES = [
    # (id, a, b, expected)
    ("identical", '{"task":"x"}', '{"task":"x"}', True),
    ("T2-3-key-order-whitespace", '{"task":"x","priority":1}', '{\n  "priority": 1,\n  "task": "x"\n}', True),
    ("T2-4-large-ints-differ", '{"value":9007199254740992}', '{"value":9007199254740993}', False),
    ("large-ints-same", '{"value":9007199254740993}', '{ "value" : 9007199254740993 }', True),
    ("float-lexeme-1.0-vs-1.00", '{"a":1.0}', '{"a":1.00}', False),
    ("int-vs-float-lexeme", "1", "1.0", False),
    ("exponent-lexeme", "1e2", "100", False),
    ("negative-zero", "-0", "0", False),
    ("number-vs-true", '{"a":1}', '{"a":true}', False),
    ("number-vs-string", '{"a":1}', '{"a":"1"}', False),
    ("zero-vs-false", "[0]", "[false]", False),
    ("null-vs-null", "null", " null ", True),
    ("unicode-escape", '"\\u0041"', '"A"', True),
    ("nested-order", '{"a":{"x":[1,{"p":2,"q":3}]},"b":null}', '{"b":null,"a":{"x":[1,{"q":3,"p":2}]}}', True),
    ("array-order-matters", "[1,2]", "[2,1]", False),
    ("extra-key", '{"a":1}', '{"a":1,"b":2}', False),
    ("invalid-left", '{"a":', '{"a":1}', False),
    ("invalid-both-identical", "not json", "not json", False),
    ("trailing-garbage", '{"a":1} x', '{"a":1}', False),
    ("nan-rejected", "NaN", "NaN", False),
    ("infinity-rejected", '{"a":Infinity}', '{"a":Infinity}', False),
    ("raw-control-char-invalid", '"a\x01b"', '"a\x01b"', False),
    ("empty-string", "", "", False),
]


@pytest.mark.parametrize(("a", "b", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_json_equal_table(a: str, b: str, expected: bool) -> None:
    assert json_equal(a, b) is expected
    assert json_equal(b, a) is expected


def test_non_string_is_false() -> None:
    assert json_equal(None, "{}") is False  # type: ignore[arg-type]


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


@given(_json_values)
def test_reformatting_is_equal(value: object) -> None:
    compact = json.dumps(value, separators=(",", ":"))
    pretty = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=True)
    assert json_equal(compact, pretty)


@given(st.integers(min_value=2**53, max_value=2**70))
def test_adjacent_large_ints_differ(n: int) -> None:
    assert not json_equal(f'{{"v":{n}}}', f'{{"v":{n + 1}}}')
