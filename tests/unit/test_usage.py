"""transformers/usage.py: every field the openai SDK 3.x requires, with the upstream's figure
when it reports one and 0 when it does not, in both directions (the table in its docstring)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformers.context import Ctx
from transformers.usage import from_chat, normalize_responses, to_chat


class _Ctx:
    def __init__(self) -> None:
        self.repairs: list[str] = []

    def repaired(self, name: str) -> None:
        self.repairs.append(name)


def _resp(inp, out, total, cached=0, write=0, reasoning=0, **extra):
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": write, **extra},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": total,
    }


# (case, Chat upstream usage, Responses-shaped usage inside the proxy)
FROM_CHAT = [
    ("absent", None, _resp(0, 0, 0)),
    ("plain", {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}, _resp(11, 7, 18)),
    (
        "openai-details",
        {
            "prompt_tokens": 20,
            "completion_tokens": 5,
            "total_tokens": 25,
            "prompt_tokens_details": {"cached_tokens": 8, "cache_write_tokens": 12},
            "completion_tokens_details": {"reasoning_tokens": 3},
        },
        _resp(20, 5, 25, cached=8, write=12, reasoning=3),
    ),
    (
        "anthropic-style",
        {"prompt_tokens": 30, "completion_tokens": 2, "cache_read_input_tokens": 10, "cache_creation_input_tokens": 15},
        _resp(30, 2, 32, cached=10, write=15),
    ),
    ("moonshot", {"prompt_tokens": 9, "completion_tokens": 2, "cached_tokens": 4}, _resp(9, 2, 11, cached=4)),
    ("deepseek", {"prompt_tokens": 9, "completion_tokens": 1, "prompt_cache_hit_tokens": 6}, _resp(9, 1, 10, cached=6)),
    (
        "details-win-over-top-level",
        {
            "prompt_tokens": 9,
            "completion_tokens": 1,
            "prompt_tokens_details": {"cache_write_tokens": 2},
            "cache_creation_input_tokens": 7,
        },
        _resp(9, 1, 10, write=2),
    ),
]


@pytest.mark.parametrize("name,chat,want", FROM_CHAT, ids=[c[0] for c in FROM_CHAT])
def test_from_chat(name, chat, want):
    assert from_chat(chat) == want


# (case, Responses upstream usage, normalised usage)
NORMALIZE = [
    ("absent", None, _resp(0, 0, 0)),
    (
        "2.x-shape-no-cache-write",
        {
            "input_tokens": 11,
            "input_tokens_details": {"cached_tokens": 3},
            "output_tokens": 7,
            "output_tokens_details": {"reasoning_tokens": 2},
            "total_tokens": 18,
        },
        _resp(11, 7, 18, cached=3, reasoning=2),
    ),
    ("cache-write-kept", _resp(40, 4, 44, cached=1, write=30), _resp(40, 4, 44, cached=1, write=30)),
    (
        "ttl-split-kept",
        _resp(40, 4, 44, write=30, cache_write_tokens_details={"ttl_12h_tokens": 10, "ttl_30m_tokens": 20}),
        _resp(40, 4, 44, write=30, cache_write_tokens_details={"ttl_12h_tokens": 10, "ttl_30m_tokens": 20}),
    ),
    ("details-missing", {"input_tokens": 5, "output_tokens": 1}, _resp(5, 1, 6)),
]


@pytest.mark.parametrize("name,upstream,want", NORMALIZE, ids=[c[0] for c in NORMALIZE])
def test_normalize_responses(name, upstream, want):
    ctx = _Ctx()
    assert normalize_responses(upstream, ctx) == want
    assert ctx.repairs == []


@pytest.mark.parametrize(
    "ttl",
    [{"ttl_12h_tokens": 1}, {"ttl_12h_tokens": "1", "ttl_30m_tokens": 2}, "10"],
    ids=["half", "string-count", "not-an-object"],
)
def test_partial_ttl_split_dropped_and_recorded(ttl):
    ctx = _Ctx()
    got = normalize_responses(_resp(40, 4, 44, write=30, cache_write_tokens_details=ttl), ctx)
    assert got == _resp(40, 4, 44, write=30)
    assert ctx.repairs == ["usage_malformed_field_dropped"]


def test_to_chat_writes_every_detail():
    assert to_chat(_resp(20, 5, 25, cached=8, write=12, reasoning=3)) == {
        "prompt_tokens": 20,
        "completion_tokens": 5,
        "total_tokens": 25,
        "prompt_tokens_details": {"cached_tokens": 8, "cache_write_tokens": 12},
        "completion_tokens_details": {"reasoning_tokens": 3},
    }
    assert to_chat({})["prompt_tokens_details"] == {"cached_tokens": 0, "cache_write_tokens": 0}


@pytest.mark.parametrize("name,chat,want", FROM_CHAT, ids=[c[0] for c in FROM_CHAT])
def test_chat_round_trip_keeps_cache_figures(name, chat, want):
    back = to_chat(from_chat(chat))
    assert back["prompt_tokens_details"] == {
        "cached_tokens": want["input_tokens_details"]["cached_tokens"],
        "cache_write_tokens": want["input_tokens_details"]["cache_write_tokens"],
    }


@pytest.mark.parametrize("bad", [-1, 2**63, 1.8446744073709552e19, -3.0])
def test_counts_outside_the_64_bit_range_or_negative_are_malformed(bad: Any) -> None:
    ctx = Ctx(quirks=frozenset(), upstream_model="m", public_model="m", max_output_tokens=None, envelope_key=b"")
    u = from_chat({"prompt_tokens": bad, "completion_tokens": 2}, ctx)
    assert u["input_tokens"] == 0 and u["total_tokens"] == 2
    assert "usage_malformed_field_dropped" in ctx.repairs


_COUNTS = st.one_of(
    st.none(),
    st.integers(min_value=-5, max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=3),
    st.just({}),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_COUNTS, max_size=5))
def test_first_is_the_first_usable_count_and_notes_bad_ones_before_it(vals: list[Any]) -> None:
    """``_Reader.first``: the count of the first value ``count`` makes something of (0 when
    none), each value before it looked at by ``count`` as well (its verdict on a bad one)."""
    from transformers.usage import _Reader

    r, ref = _Reader(), _Reader()
    want = 0
    for v in vals:
        n = ref.count(v)
        if n is not None:
            want = n
            break
    got = r.first(*vals)
    assert got == want and type(got) is int
    assert r.bad is ref.bad


@pytest.mark.parametrize(
    ("usage", "quirks", "want_out", "want_reasoning", "repaired"),
    [
        # Gemini thinking: only the total counts it
        ({"prompt_tokens": 21, "completion_tokens": 0, "total_tokens": 81}, {"gemini_request"}, 60, 60, True),
        ({"prompt_tokens": 20, "completion_tokens": 198, "total_tokens": 623}, {"gemini_request"}, 603, 405, True),
        # the endpoint counted it already: nothing to add
        ({"prompt_tokens": 20, "completion_tokens": 603, "total_tokens": 623,
          "completion_tokens_details": {"reasoning_tokens": 405}}, {"gemini_request"}, 603, 405, False),
        # any other upstream: its figures as they came
        ({"prompt_tokens": 20, "completion_tokens": 198, "total_tokens": 623}, set(), 198, 0, False),
    ],
)  # fmt: skip
def test_gemini_thinking_counted_as_output(
    usage: dict[str, Any], quirks: set[str], want_out: int, want_reasoning: int, repaired: bool
) -> None:
    ctx = Ctx(quirks=frozenset(quirks))
    got = from_chat(usage, ctx)
    assert got["output_tokens"] == want_out
    assert got["output_tokens_details"]["reasoning_tokens"] == want_reasoning
    assert got["input_tokens"] + got["output_tokens"] == usage["total_tokens"] or not repaired
    assert ("gemini_thought_tokens" in ctx.repairs) is repaired
