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
