"""The request rows for a Messages upstream (transformers/request_messages.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from transformers.context import Ctx
from transformers.envelope import seal
from transformers.errors import RequestError
from transformers.ids import to_anthropic_id
from transformers.request_c2m import DEFAULT_MAX_TOKENS
from transformers.request_messages import BETA_FIELDS, prepare_messages

ANTHROPIC = frozenset({"anthropic_signatures", "anthropic_tool_ids", "messages_server_tools", "anthropic_beta"})
SEALED = seal("another upstream's reasoning", b"k")


def body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "claude",
        "max_tokens": 1000,
        "system": [{"type": "text", "text": ""}, {"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "run ls"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "signed", "signature": "sig"},
                {"type": "thinking", "thinking": "sealed", "signature": SEALED},
                {"type": "text", "text": ""},
                {"type": "tool_use", "id": "functions.Bash:0", "name": "Bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "functions.Bash:0",
                                          "content": [{"type": "text", "text": ""}]}]},
            {"role": "user", "content": [{"type": "text", "text": ""}]},
        ],
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}],
        **extra,
    }  # fmt: skip


def run(b: dict[str, Any], quirks: frozenset[str] = ANTHROPIC, **ctx: Any) -> tuple[dict[str, Any], Ctx]:
    c = Ctx(quirks=quirks, upstream_model="claude-x", **ctx)
    before = copy.deepcopy(b)
    out = prepare_messages(b, c)
    assert b == before  # the client's body is never mutated
    return out, c


def test_anthropic_gets_signed_thinking_only_and_no_empty_text() -> None:
    out, ctx = run(body())
    assert out["model"] == "claude-x"
    assert out["system"] == [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]
    blocks = out["messages"][1]["content"]
    assert [b["type"] for b in blocks] == ["thinking", "tool_use"] and blocks[0]["signature"] == "sig"
    assert blocks[1]["id"].startswith("sbx_")  # Kimi's id made valid, reversibly
    result = out["messages"][2]["content"][0]
    assert result["tool_use_id"] == blocks[1]["id"] and "content" not in result
    assert len(out["messages"]) == 3  # the empty user turn is gone
    assert out["tools"][0]["cache_control"] == {"type": "ephemeral"}  # prompt caching kept
    assert ctx.repairs.count("thinking_unsigned_dropped") == 1
    assert ctx.repairs.count("empty_text_block_dropped") == 4


def test_a_compatible_endpoint_gets_every_thinking_block_back() -> None:
    out, ctx = run(body(), quirks=frozenset())
    thinking = [b["thinking"] for b in out["messages"][1]["content"] if b["type"] == "thinking"]
    assert thinking == ["signed", "sealed"] and "thinking_unsigned_dropped" not in ctx.repairs


@pytest.mark.parametrize("strict", [True, False])
def test_tool_ids_go_back_as_the_upstream_issued_them(strict: bool) -> None:
    b = body()
    mapped = to_anthropic_id("functions.Bash:0")  # what Claude Code got from the encoder
    b["messages"][1]["content"][3]["id"] = b["messages"][2]["content"][0]["tool_use_id"] = mapped
    out, _ = run(b, quirks=frozenset({"anthropic_tool_ids"}) if strict else frozenset())
    want = mapped if strict else "functions.Bash:0"  # Kimi's endpoint gets its own id back
    assert out["messages"][1]["content"][-1]["id"] == want
    assert out["messages"][2]["content"][0]["tool_use_id"] == want


@pytest.mark.parametrize("first", ["sealed", "none", "signed"])
def test_thinking_goes_off_when_the_tool_turn_has_no_signed_thinking(first: str) -> None:
    b = body(thinking={"type": "enabled", "budget_tokens": 500})
    blocks = b["messages"][1]["content"]
    if first == "sealed":
        del blocks[0]
    elif first == "none":
        del blocks[0:2]
    out, ctx = run(b)
    if first == "signed":
        assert out["thinking"]["type"] == "enabled"
    else:  # Anthropic would refuse it: the turn goes on without thinking
        assert "thinking" not in out and "thinking_disabled_unsigned_turn" in ctx.repairs
    out, _ = run(b, quirks=frozenset())
    assert out["thinking"]["type"] == "enabled"  # a compatible endpoint checks nothing


def test_thinking_stays_on_after_a_plain_answer() -> None:
    b = body(thinking={"type": "adaptive"})
    b["messages"] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
        {"role": "user", "content": "more"},
    ]
    out, ctx = run(b)
    assert out["thinking"] == {"type": "adaptive"} and ctx.repairs == ["empty_text_block_dropped"]


def test_server_tools() -> None:
    ws = {"type": "web_search_20250305", "name": "web_search"}
    b = body()
    b["tools"] = [*b["tools"], ws]
    out, _ = run(b)
    assert out["tools"][1] == ws
    out, ctx = run(b, quirks=frozenset())
    assert [t["name"] for t in out["tools"]] == ["Bash"] and ctx.tools.dropped == ["web_search_20250305"]
    b["tools"] = [ws]
    with pytest.raises(RequestError) as e:
        run(b, quirks=frozenset())
    assert e.value.param == "tools[0]"
    out, _ = run({**b, "tool_choice": {"type": "none"}}, quirks=frozenset())
    assert "tools" not in out


def test_beta_fields() -> None:
    b = body(context_management={"edits": []}, container="c", mcp_servers=[])
    out, _ = run(b)
    assert all(k in out for k in BETA_FIELDS)
    out, ctx = run(b, quirks=frozenset())
    assert not any(k in out for k in BETA_FIELDS) and ctx.repairs.count("messages_beta_fields_dropped") == 3


@pytest.mark.parametrize("given", [None, 0, "9", True])
def test_max_tokens(given: Any) -> None:
    b = body()
    if given is None:
        del b["max_tokens"]
    else:
        b["max_tokens"] = given
    assert run(b)[0]["max_tokens"] == DEFAULT_MAX_TOKENS
    assert run(b, max_output_tokens=64000)[0]["max_tokens"] == 64000


def test_string_contents_and_empty_system() -> None:
    out, ctx = run({"model": "m", "max_tokens": 5, "system": "", "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]})  # fmt: skip
    assert "system" not in out and out["messages"] == [{"role": "user", "content": "hi"}]
    assert ctx.repairs == ["empty_text_block_dropped"]


# -- prompt caching: breakpoints, ttl, Claude Code's billing line ----------------------------

CACHE = frozenset({"cache_breakpoints"})
EPH = {"type": "ephemeral"}


def _plain(**extra: Any) -> dict[str, Any]:
    """A Chat or Responses client's request after translation: no cache_control anywhere."""
    return {
        "model": "claude",
        "max_tokens": 1000,
        "system": [{"type": "text", "text": "rules"}, {"type": "text", "text": "more rules"}],
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}},
                  {"name": "Read", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "run ls"}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"},
                                              {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py"}]},
        ],
        **extra,
    }  # fmt: skip


def _where(out: dict[str, Any]) -> list[str]:
    """Where the breakpoints are: tools[i], system[i], messages[i][j]."""
    found = [f"tools[{i}]" for i, t in enumerate(out.get("tools", ())) if "cache_control" in t]
    system = out.get("system")
    found += [f"system[{i}]" for i, b in enumerate(system if isinstance(system, list) else ()) if "cache_control" in b]
    for i, m in enumerate(out["messages"]):
        content = m["content"] if isinstance(m["content"], list) else ()
        found += [f"messages[{i}][{j}]" for j, b in enumerate(content) if "cache_control" in b]
    return found


def _with(b: dict[str, Any], path: str, cc: dict[str, Any]) -> dict[str, Any]:
    region, _, rest = path.partition("[")
    idx = [int(x) for x in rest.replace("]", "").split("[")]
    target = b[region][idx[0]] if len(idx) == 1 else b[region][idx[0]]["content"][idx[1]]
    target["cache_control"] = cc
    return b


CASES: list[tuple[str, list[str], list[str]]] = [
    # (case, the client's breakpoints, where they are after the row)
    ("no breakpoint anywhere", [], ["system[1]", "messages[2][0]"]),
    ("the client marked the system only", ["system[0]"], ["system[0]", "messages[2][0]"]),
    ("the client marked a tool only", ["tools[0]"], ["tools[0]", "messages[2][0]"]),
    ("the client marked messages only", ["messages[0][0]"], ["system[1]", "messages[0][0]"]),
    ("both regions", ["system[0]", "messages[0][0]"], ["system[0]", "messages[0][0]"]),
    ("one left: the conversation's", ["tools[0]", "tools[1]", "system[0]"],
     ["tools[0]", "tools[1]", "system[0]", "messages[2][0]"]),
    ("four already", ["tools[0]", "tools[1]", "system[0]", "system[1]"],
     ["tools[0]", "tools[1]", "system[0]", "system[1]"]),
]  # fmt: skip


@pytest.mark.parametrize("case, given, want", CASES, ids=[c[0] for c in CASES])
def test_breakpoints_where_the_client_set_none(case: str, given: list[str], want: list[str]) -> None:
    b = _plain()
    for path in given:
        _with(b, path, {"type": "ephemeral", "ttl": "1h"})
    out, ctx = run(b, quirks=CACHE | {"cache_ttl"})
    assert _where(out) == want
    assert len(want) <= 4
    assert ctx.repairs.count("cache_breakpoint_added") == len(want) - len(given)
    for path in given:  # the client's own stay where they were, as they were
        region, _, rest = path.partition("[")
        idx = [int(x) for x in rest.replace("]", "").split("[")]
        got = out[region][idx[0]] if len(idx) == 1 else out[region][idx[0]]["content"][idx[1]]
        assert got["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


def test_no_breakpoint_without_the_quirk() -> None:
    out, ctx = run(_plain(), quirks=frozenset())
    assert _where(out) == [] and "cache_breakpoint_added" not in ctx.repairs


def test_the_conversation_breakpoint_moves_forward_and_the_rest_stays() -> None:
    turn1 = _plain()
    turn1["messages"] = turn1["messages"][:1]
    turn2 = _plain()
    out1, _ = run(turn1, quirks=CACHE)
    out2, _ = run(turn2, quirks=CACHE)
    assert _where(out1) == ["system[1]", "messages[0][0]"]
    assert _where(out2) == ["system[1]", "messages[2][0]"]
    strip = lambda o: [{k: v for k, v in blk.items() if k != "cache_control"} for blk in o["messages"][0]["content"]]  # noqa: E731
    assert strip(out1) == strip(out2) and out1["system"] == out2["system"] and out1["tools"] == out2["tools"]


def test_never_on_a_thinking_or_empty_block() -> None:
    b = _plain()
    b["messages"] = b["messages"][:2]
    b["messages"][1]["content"] = [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}},
                                   {"type": "thinking", "thinking": "t", "signature": "s"},
                                   {"type": "text", "text": ""}]  # fmt: skip
    out, _ = run(b, quirks=CACHE)
    assert _where(out) == ["system[1]", "messages[1][0]"]
    b["messages"][1]["content"] = [{"type": "redacted_thinking", "data": "x"}]
    out, _ = run(b, quirks=CACHE)
    assert _where(out) == ["system[1]", "messages[0][0]"]  # the turn before


def test_string_system_and_content_become_one_marked_block() -> None:
    b = {"model": "c", "max_tokens": 10, "system": "rules", "messages": [{"role": "user", "content": "hi"}]}
    out, _ = run(b, quirks=CACHE)
    assert out["system"] == [{"type": "text", "text": "rules", "cache_control": EPH}]
    assert out["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": EPH}]}]


def test_no_system_marks_the_last_tool() -> None:
    b = _plain()
    del b["system"]
    out, _ = run(b, quirks=CACHE)
    assert _where(out) == ["tools[1]", "messages[2][0]"]


def test_the_prefix_breakpoint_lives_as_long_as_a_later_client_one() -> None:
    b = _with(_plain(), "messages[0][0]", {"type": "ephemeral", "ttl": "1h"})
    out, _ = run(b, quirks=CACHE | {"cache_ttl"})
    assert out["system"][1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}  # longer lives first
    out, _ = run(copy.deepcopy(b), quirks=CACHE)
    assert out["system"][1]["cache_control"] == EPH


def test_ttl_kept_for_anthropic_dropped_elsewhere() -> None:
    b = _with(_plain(), "system[0]", {"type": "ephemeral", "ttl": "1h"})
    b["messages"][2]["content"] = [{"type": "tool_result", "tool_use_id": "toolu_1",
                                    "content": [{"type": "text", "text": "a", "cache_control": {"type": "ephemeral", "ttl": "5m"}}]}]  # fmt: skip
    out, ctx = run(b, quirks=frozenset({"cache_ttl"}))
    assert out["system"][0]["cache_control"]["ttl"] == "1h" and "cache_ttl_dropped" not in ctx.repairs
    out, ctx = run(b, quirks=frozenset())
    assert out["system"][0]["cache_control"] == EPH
    assert out["messages"][2]["content"][0]["content"][0]["cache_control"] == EPH
    assert ctx.repairs.count("cache_ttl_dropped") == 2


@pytest.mark.parametrize("turn", [0, 1])
def test_claude_code_goes_to_anthropic_as_it_sent_its_cache_fields(turn: int) -> None:
    """Claude Code 2.1.332's own requests: its breakpoints, billing line and ttl untouched."""
    import json
    from pathlib import Path

    fixture = Path(__file__).parents[1] / "fixtures" / "claude_code_messages_request.json"
    sent = json.loads(fixture.read_text())["requests"][turn]
    anthropic = ANTHROPIC | {"cache_breakpoints", "cache_ttl", "billing_header"}
    out, ctx = run(copy.deepcopy(sent), quirks=anthropic)
    assert _where(out) == _where(sent) and len(_where(out)) == 3
    assert out["system"] == sent["system"] and out["system"][0]["text"].startswith("x-anthropic-billing-header:")
    assert not {"cache_breakpoint_added", "cache_ttl_dropped", "billing_header_dropped"} & set(ctx.repairs)
    out, ctx = run(copy.deepcopy(sent), quirks=frozenset({"cache_breakpoints"}))  # MiniMax
    assert out["system"] == sent["system"][1:] and ctx.repairs.count("billing_header_dropped") == 1
    assert _where(out) == [f"system[{int(p[7:-1]) - 1}]" if p.startswith("system") else p for p in _where(sent)]


BILLING = "x-anthropic-billing-header: cc_version=2.1.332.bc4; cc_entrypoint=sdk-cli; cch=00ab3;"

BILLING_CASES: list[tuple[str, Any, Any]] = [
    ("its own block (Claude Code)", [{"type": "text", "text": BILLING}, {"type": "text", "text": "You are"}],
     [{"type": "text", "text": "You are"}]),
    ("the first line of a block", [{"type": "text", "text": BILLING + "\nYou are", "cache_control": EPH}],
     [{"type": "text", "text": "You are", "cache_control": EPH}]),
    ("a string system", BILLING + "\nYou are", "You are"),
    ("the only block", [{"type": "text", "text": BILLING}], None),
    ("not first: kept", [{"type": "text", "text": "You are"}, {"type": "text", "text": BILLING}],
     [{"type": "text", "text": "You are"}, {"type": "text", "text": BILLING}]),
    ("none", [{"type": "text", "text": "You are"}], [{"type": "text", "text": "You are"}]),
]  # fmt: skip


@pytest.mark.parametrize("case, system, want", BILLING_CASES, ids=[c[0] for c in BILLING_CASES])
def test_billing_line(case: str, system: Any, want: Any) -> None:
    b = {"model": "c", "max_tokens": 10, "system": system, "messages": [{"role": "user", "content": "hi"}]}
    out, ctx = run(copy.deepcopy(b), quirks=frozenset())
    assert out.get("system") == want
    assert ("billing_header_dropped" in ctx.repairs) is (want != system)
    out, ctx = run(copy.deepcopy(b), quirks=frozenset({"billing_header"}))  # Anthropic: as sent
    assert out["system"] == system and "billing_header_dropped" not in ctx.repairs


@pytest.mark.parametrize("upstream", ["chat", "responses", "messages"])
@pytest.mark.parametrize("anthropic", [True, False])
def test_billing_line_reaches_anthropic_only_in_every_direction(upstream: str, anthropic: bool) -> None:
    from transformers.bridge import open_bridge

    b = {"model": "c", "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": "hi"}],
         "system": [{"type": "text", "text": BILLING}, {"type": "text", "text": "You are Claude Code."}]}  # fmt: skip
    ctx = Ctx(quirks=frozenset({"billing_header"}) if anthropic else frozenset(), upstream_model="up")
    out, _ = open_bridge(copy.deepcopy(b), "messages", upstream, ctx)
    assert (BILLING in str(out)) is anthropic and "You are Claude Code." in str(out)
    assert ("billing_header_dropped" in ctx.repairs) is not anthropic


def test_the_token_estimate_does_not_count_the_billing_line() -> None:
    from app.tokens import estimate

    b = {"system": [{"type": "text", "text": BILLING * 30}, {"type": "text", "text": "x"}], "messages": []}
    assert estimate(b) == estimate({"system": [{"type": "text", "text": "x"}], "messages": []})
