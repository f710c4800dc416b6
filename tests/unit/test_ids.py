"""docs/rules.md §1: tool-call id policies and the uniqueness pass, table T0-1…T0-10."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transformers import ids
from transformers.ids import (
    chat_policy,
    is_canonical_kimi,
    kimi_restore_map,
    responses_policy,
    sanitize,
    strict_policy,
    unique_map,
)

LONG12 = "functions.mcp__atlassian__confluence_search_pages_by_cql_query:12"
LONG13 = "functions.mcp__atlassian__confluence_search_pages_by_cql_query:13"
LONG_R1 = "functions_mcp__atlassian__confluence_search_pages_by_cql_query_1"
LONG_R2 = "functions_mcp__atlassian__confluence_search_pages_by_cql_query_2"

CHAT = (chat_policy, 64)
RESP = (responses_policy, 64)
STRICT = (strict_policy, 64)


def run(policy, raw):
    fn, max_len = policy
    m = unique_map(raw, fn, max_len)
    return [m[r] for r in raw]


def test_long_id_lengths():
    assert len(LONG12) == 65
    assert len(LONG_R1) == 64


# (case id, policy, raw ids in history order, expected wire ids)
T0 = [
    ("T0-1-chat", CHAT, ["functions.Read:0"], ["functions.Read:0"]),
    ("T0-1-responses", RESP, ["functions.Read:0"], ["functions.Read:0"]),
    ("T0-1-strict", STRICT, ["functions.Read:0"], ["functions_Read_0"]),
    ("T0-2-chat", CHAT, ["Write:6"], ["Write_6"]),
    ("T0-2-responses", RESP, ["Write:6"], ["Write_6"]),
    ("T0-2-strict", STRICT, ["Write:6"], ["Write_6"]),
    ("T0-3-chat", CHAT, ["functions.Read:0|fc_abc"], ["functions_Read_0_fc_abc"]),
    ("T0-3-responses", RESP, ["functions.Read:0|fc_abc"], ["functions.Read:0"]),
    ("T0-3-strict", STRICT, ["functions.Read:0|fc_abc"], ["functions_Read_0_fc_abc"]),
    (
        "T0-4-responses",
        RESP,
        ["functions.Read:0|fc_1", "functions.Read:0|fc_2"],
        ["functions.Read:0", "functions.Read:0_2"],
    ),
    ("T0-5-chat", CHAT, [LONG12], [LONG12]),
    ("T0-5-responses", RESP, [LONG12], [LONG_R1]),
    ("T0-5-strict", STRICT, [LONG12], [LONG_R1]),
    ("T0-6-chat", CHAT, [LONG12, LONG13], [LONG12, LONG13]),
    ("T0-6-responses", RESP, [LONG12, LONG13], [LONG_R1, LONG_R2]),
    (
        "T0-7-chat",
        CHAT,
        ["functions.Bash:123", "functions.read-file:7"],
        ["functions.Bash:123", "functions.read-file:7"],
    ),
    (
        "T0-7-responses",
        RESP,
        ["functions.Bash:123", "functions.read-file:7"],
        ["functions.Bash:123", "functions.read-file:7"],
    ),
    (
        "T0-7-strict",
        STRICT,
        ["functions.Bash:123", "functions.read-file:7"],
        ["functions_Bash_123", "functions_read-file_7"],
    ),
    (
        "T0-8-chat",
        CHAT,
        ["functions.Read:x", "functions..Read:0", "functions.Read:0_2"],
        ["functions_Read_x", "functions__Read_0", "functions_Read_0_2"],
    ),
    (
        "T0-8-responses",
        RESP,
        ["functions.Read:x", "functions..Read:0", "functions.Read:0_2"],
        ["functions_Read_x", "functions__Read_0", "functions_Read_0_2"],
    ),
    (
        "T0-8-strict",
        STRICT,
        ["functions.Read:x", "functions..Read:0", "functions.Read:0_2"],
        ["functions_Read_x", "functions__Read_0", "functions_Read_0_2"],
    ),
    (
        "T0-9-strict",
        STRICT,
        ["functions_Read_0", "functions.Read:0"],
        ["functions_Read_0", "functions_Read_0_2"],
    ),
    ("T0-10-chat", CHAT, ["call_abc123"], ["call_abc123"]),
    ("T0-10-responses", RESP, ["call_abc123"], ["call_abc123"]),
    ("T0-10-strict", STRICT, ["call_abc123"], ["call_abc123"]),
]


@pytest.mark.parametrize(("policy", "raw", "expected"), [c[1:] for c in T0], ids=[c[0] for c in T0])
def test_t0_table(policy, raw, expected):
    assert run(policy, raw) == expected


@pytest.mark.parametrize(
    ("id_", "canonical"),
    [
        ("functions.Read:0", True),
        ("functions.read-file:7", True),
        ("functions.Bash:123", True),
        (LONG12, True),
        ("Write:6", False),
        ("functions.Read:x", False),
        ("functions..Read:0", False),
        ("functions.Read:0_2", False),
        ("functions.Read:0\n", False),
        ("functions.Read:٣", False),  # Arabic-Indic digit: ASCII digits only
        ("functions.:0", False),
        ("call_abc123", False),
    ],
)
def test_is_canonical_kimi(id_, canonical):
    assert is_canonical_kimi(id_) is canonical


def test_sanitize_and_cut():
    assert sanitize("a.b:c|d é") == "a_b_c_d__"
    assert sanitize("abcdef", 3) == "abc"


def test_empty_id_becomes_tool_call():
    assert unique_map(["", "...", ":"], strict_policy, 64) == {
        "": "tool_call",
        "...": "___",
        ":": "_",
    }
    assert unique_map(["", "|x"], responses_policy, 64) == {"": "tool_call", "|x": "tool_call_2"}


def test_pass1_reserves_before_pass2():
    # `functions.Read:0` (pass 2 under strict) must not steal the later, unchanged raw id
    assert unique_map(["functions.Read:0", "functions_Read_0"], strict_policy, 64) == {
        "functions.Read:0": "functions_Read_0_2",
        "functions_Read_0": "functions_Read_0",
    }


def test_suffix_keeps_counting_past_reserved():
    m = unique_map(["a.b", "a_b", "a_b_2", "a:b"], strict_policy, 64)
    assert m == {"a_b": "a_b", "a_b_2": "a_b_2", "a.b": "a_b_3", "a:b": "a_b_4"}


def test_chat_policy_caps_non_canonical_at_64():
    raw = "call_" + "x" * 100
    assert chat_policy(raw) == raw[:64]


def test_responses_policy_canonical_over_64_with_pipe():
    assert responses_policy(LONG12 + "|fc_1") == LONG_R1


def test_unlimited_suffix_when_no_max_len():
    assert unique_map(["a.b", "a:b"], lambda s: sanitize(s), None) == {"a.b": "a_b", "a:b": "a_b_2"}


def test_max_len_too_small_raises():
    with pytest.raises(ValueError):
        unique_map(["a.", "a:"], lambda s: sanitize(s, 2), 2)


ID_CHARS = st.text(alphabet="abfnRdo._-:|0123456789é", max_size=80)


def _policies_without_shortcut(id: str) -> tuple[str, str, str]:
    """The three policies as written before their safe-id shortcut (ids._as_is)."""
    left = id.split("|", 1)[0]
    responses = left if len(left) <= 64 and is_canonical_kimi(left) else sanitize(left, 64)
    return (id if is_canonical_kimi(id) else sanitize(id, 64)), responses, sanitize(id, 64)


@given(st.one_of(ID_CHARS, st.text(alphabet="azAZ09_-", min_size=60, max_size=70), st.text(max_size=70)))
def test_the_safe_id_shortcut_changes_no_policy(id):
    assert (chat_policy(id), responses_policy(id), strict_policy(id)) == _policies_without_shortcut(id)


@given(st.lists(ID_CHARS, max_size=12))
def test_property_mapping_injective_deterministic_and_fits(raw):
    for policy in (chat_policy, responses_policy, strict_policy):
        m = unique_map(raw, policy, 64)
        assert set(m) == set(raw)
        assert len(set(m.values())) == len(m)  # distinct raw ids never merge
        assert m == unique_map(raw, policy, 64)  # stateless: same input, same output
        for r, w in m.items():
            if policy is chat_policy and is_canonical_kimi(r):
                assert w == r  # canonical ids survive at any length
            else:
                assert len(w) <= 64
            if policy is strict_policy:
                assert sanitize(w) == w
        # idempotent: feeding the output back changes nothing
        again = unique_map(list(m.values()), policy, 64)
        assert all(k == v for k, v in again.items())


# -- kimi_restore_map: Kimi Code's sanitised native ids put back (issue 11, docs/rules.md §1) --------


def _asst(*calls: tuple[str, str]) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": i, "type": "function", "function": {"name": n, "arguments": "{}"}} for i, n in calls],
    }


def _tool(i: str) -> dict:
    return {"role": "tool", "tool_call_id": i, "content": "ok"}


LONG_NAME = "mcp__atlassian__confluence_search_pages_by_cql_query"  # functions_<it>_1 is 64 long

# (case id, messages, expected map)
RESTORE = [
    ("plain", [_asst(("functions_Read_0", "Read")), _tool("functions_Read_0")],
     {"functions_Read_0": "functions.Read:0"}),
    ("parallel-increasing", [_asst(("functions_Read_3", "Read"), ("functions_Bash_4", "Bash"))],
     {"functions_Read_3": "functions.Read:3", "functions_Bash_4": "functions.Bash:4"}),
    ("multi-digit-idx", [_asst(("functions_Read_120", "Read"))], {"functions_Read_120": "functions.Read:120"}),
    ("name-with-underscore-and-dash", [_asst(("functions_mcp__fs__read-file_2", "mcp__fs__read-file"))],
     {"functions_mcp__fs__read-file_2": "functions.mcp__fs__read-file:2"}),
    ("suffixed-_2-alone", [_asst(("functions_Read_0_2", "Read"))], {"functions_Read_0_2": "functions.Read:0"}),
    ("suffixed-_12-alone", [_asst(("functions_Read_0_12", "Read"))], {"functions_Read_0_12": "functions.Read:0"}),
    ("same-id-two-turns", [_asst(("functions_Read_0", "Read")), _tool("functions_Read_0"),
                           _asst(("functions_Read_0", "Read")), _tool("functions_Read_0")],
     {"functions_Read_0": "functions.Read:0"}),
    # colliding: two different sanitised ids would become one canonical id
    ("colliding-suffix", [_asst(("functions_Read_0", "Read")), _asst(("functions_Read_0_2", "Read"))], {}),
    ("colliding-with-present-canonical", [_asst(("functions.Read:0", "Read")), _asst(("functions_Read_0", "Read"))],
     {}),
    ("colliding-with-tool-message-id", [_asst(("functions_Read_0", "Read")), _tool("functions.Read:0")], {}),
    ("colliding-only-that-one", [_asst(("functions_Read_0", "Read")), _asst(("functions_Read_0_2", "Read")),
                                 _asst(("functions_Bash_1", "Bash"))],
     {"functions_Bash_1": "functions.Bash:1"}),
    # ambiguous: the same sanitised id read as two canonical ids (different call names)
    ("ambiguous-same-id-two-names", [_asst(("functions_Read_0", "Read")), _asst(("functions_Read_0", "Bash"))], {}),
    # name mismatch
    ("name-mismatch", [_asst(("functions_Bash_0", "Read"))], {}),
    ("name-prefix-is-not-enough", [_asst(("functions_Read_File_0", "Read"))], {}),
    ("name-outside-charset", [_asst(("functions_mcp_read_0", "mcp.read"))], {}),
    ("name-not-a-string", [{"role": "assistant", "tool_calls": [{"id": "functions_Read_0", "function": {}}]}], {}),
    # wrong index
    ("index-not-digits", [_asst(("functions_Read_x", "Read"))], {}),
    ("index-missing", [_asst(("functions_Read_", "Read"))], {}),
    ("suffix-_1-is-not-kimi-code", [_asst(("functions_Read_0_1", "Read"))], {}),
    ("suffix-leading-zero", [_asst(("functions_Read_0_02", "Read"))], {}),
    ("index-decreasing-in-one-message", [_asst(("functions_Read_4", "Read"), ("functions_Bash_3", "Bash"))], {}),
    ("index-repeated-in-one-message", [_asst(("functions_Read_4", "Read"), ("functions_Bash_4", "Bash"))], {}),
    ("bad-message-taints-its-id", [_asst(("functions_Read_4", "Read"), ("functions_Bash_3", "Bash")),
                                   _asst(("functions_Read_4", "Read"))], {}),
    # foreign and canonical ids pass unchanged
    ("foreign", [_asst(("call_abc123", "Read"), ("toolu_01XYZ", "Bash"), ("Read_0", "Read")),
                 _tool("call_abc123")], {}),
    ("already-canonical", [_asst(("functions.Read:0", "Read"))], {}),
    ("bare-kimi-code-327-shape", [_asst(("Write_6", "Write"))], {}),
    ("tool-message-without-call", [_tool("functions_Read_0")], {}),
    # a cut id (64 characters) cannot be proven
    ("cut-at-64", [_asst((f"functions_{LONG_NAME}_1", LONG_NAME))], {}),
    ("just-under-64", [_asst((f"functions_{LONG_NAME[:-1]}_1", LONG_NAME[:-1]))],
     {f"functions_{LONG_NAME[:-1]}_1": f"functions.{LONG_NAME[:-1]}:1"}),
    ("junk-entries", ["x", {"role": "assistant", "tool_calls": "no"}, {"role": "assistant", "tool_calls": [1, {}]},
                      _asst(("functions_Read_0", "Read"))], {"functions_Read_0": "functions.Read:0"}),
]  # fmt: skip


@pytest.mark.parametrize("messages, want", [r[1:] for r in RESTORE], ids=[r[0] for r in RESTORE])
def test_kimi_restore_map(messages, want):
    assert kimi_restore_map(messages) == want
    for sid, canonical in want.items():
        assert sanitize(canonical) == sid.rsplit("_", 1)[0] or sanitize(canonical) == sid
        assert is_canonical_kimi(canonical)


def test_cut_at_64_is_where_kimi_code_cuts():
    assert len(f"functions_{LONG_NAME}_1") == 64
    assert len(f"functions_{LONG_NAME[:-1]}_1") == 63


@given(st.lists(st.tuples(st.sampled_from(["Read", "Bash", "Write_File"]), st.integers(0, 30)), max_size=6))
def test_kimi_code_round_trip(calls):
    """Whatever Kimi Code's sanitiser + uniqueness pass makes of one answer's native ids, the
    map gives back the native ids (when they are distinct and increasing, as Kimi issues them)."""
    native = [f"functions.{n}:{i}" for n, i in calls]
    if len(set(native)) != len(native) or [i for _, i in calls] != sorted({i for _, i in calls}):
        return
    wire = unique_map(native, strict_policy, 64)  # Kimi Code's rule, byte for byte
    msgs = [_asst(*((wire[c], n) for c, (n, _) in zip(native, calls)))]
    restored = kimi_restore_map(msgs)
    assert [restored.get(wire[c], wire[c]) for c in native] == native


def test_random_hex_is_128_random_bits_in_32_lowercase_hex_digits() -> None:
    got = {ids.random_hex() for _ in range(1000)}
    assert len(got) == 1000
    assert all(re.fullmatch(r"[0-9a-f]{32}", h) for h in got)
    # every bit varies (uuid4's version and variant bits were fixed)
    assert all(len({int(h, 16) >> bit & 1 for h in got}) == 2 for bit in range(128))


def test_ordered_hex_is_the_time_then_80_random_bits_and_sorts_as_made(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1_796_640_245_123_456_789]
    monkeypatch.setattr(ids, "_now_ns", lambda: now[0])
    first = ids.ordered_hex()
    assert re.fullmatch(r"[0-9a-f]{32}", first)
    assert int(first[:12], 16) == 1_796_640_245_123  # milliseconds
    same_ms = {ids.ordered_hex() for _ in range(1000)}
    assert len(same_ms) == 1000 and {h[:12] for h in same_ms} == {first[:12]}
    assert all(len({int(h[12:], 16) >> bit & 1 for h in same_ms}) == 2 for bit in range(80))
    now[0] += 1_000_000  # a millisecond later: sorts after, whatever the random part
    later = {ids.ordered_hex() for _ in range(100)}
    assert min(later) > max(same_ms)
    monkeypatch.undo()
    made = [ids.ordered_hex() for _ in range(3)]  # the real clock
    assert abs(int(made[0][:12], 16) - time.time_ns() // 1_000_000) < 60_000


# -- Anthropic's tool id pattern: a reversible mapping ----------------------------------------


@pytest.mark.parametrize(
    ("given", "sent"),
    [
        ("toolu_01AbC", "toolu_01AbC"),  # valid: as it is
        ("call_x-1", "call_x-1"),
        ("functions.Bash:0", "sbx_" + b"functions.Bash:0".hex()),  # Kimi's native id
        ("sbx_41", "sbx_" + b"sbx_41".hex()),  # the prefix itself is encoded: exact both ways
        ("a|b", "sbx_" + b"a|b".hex()),
    ],
)
def test_to_anthropic_id(given: str, sent: str) -> None:
    from transformers.ids import from_anthropic_id, to_anthropic_id

    assert to_anthropic_id(given) == sent and from_anthropic_id(sent) == given
    assert re.fullmatch(r"[a-zA-Z0-9_-]+", sent)


@given(st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=80))
def test_anthropic_id_mapping_round_trips(raw: str) -> None:
    from transformers.ids import from_anthropic_id, to_anthropic_id

    sent = to_anthropic_id(raw)
    assert re.fullmatch(r"[a-zA-Z0-9_-]+", sent) and from_anthropic_id(sent) == raw


@pytest.mark.parametrize("other", ["toolu_1", "sbx_zz", "sbx_4", "sbx_ff", "sbx_", "sbx_00"])
def test_from_anthropic_id_leaves_other_ids(other: str) -> None:
    from transformers.ids import from_anthropic_id

    assert from_anthropic_id(other) == other  # not hex, odd length, not UTF-8, empty, a control
