"""Claude Code 2.1.332 -> Switchboard -> a scripted Anthropic Messages upstream
(``messages_upstream.py``) as ``profile: anthropic`` (protocol ``messages``), and once as
``profile: kimi, protocol: messages`` (Kimi's Anthropic-compatible endpoint).

Claude Code runs headless (``claude -p ... --output-format stream-json``) in the
loopback-only network namespace with non-essential traffic off (``claude_code_harness``),
its client key as ``x-api-key``.  Every turn-2 script answers the final text only when its
predicate on the replayed history holds, else ``PREDICATE-MISS`` (which Claude Code prints,
so the final-text assertion fails).

* ``test_bash_turn_with_signed_thinking``: turn 1 is a signed thinking block + text + a
  ``Bash`` tool_use; Claude Code shows the thinking with the upstream's signature, runs the
  command, and request 2 carries the tool_result under the same id and the thinking block
  with the SAME signature (Anthropic rejects a changed one); thinking stays on.  Every
  request: ``x-api-key`` is the provider's key, ``anthropic-version``, Claude Code's
  ``anthropic-beta`` forwarded as it sent it; its ``cache_control`` marks arrive where
  and as it put them (measured direct: ``test_claude_code_direct.py``'s fixture).
* ``test_parallel_tool_calls``: two ``Bash`` tool_use blocks in one turn; both run, both
  results come back in one user turn under their ids.
* ``test_long_argument_stream``: a ``Write`` whose input (~12 KB of content with escapes
  and non-ASCII) arrives as thousands of ``input_json_delta`` pieces; the file on disk is
  byte for byte the scripted content.
* ``test_kimi_messages_profile``: ``profile: kimi, protocol: messages``: Kimi's tool id
  ``functions.Bash:0`` reaches Claude Code as ``sbx_<hex>`` and goes back upstream as
  ``functions.Bash:0``; no ``anthropic-beta``, no ``context_management`` and no billing
  line reach the upstream; Claude Code's ``cache_control`` is kept.
"""

from __future__ import annotations

import json

import pytest
from claude_code_harness import ClaudeCode, ClaudeCodeUnavailable, ensure_claude_code, run_claude_code
from messages_upstream import MessageTurn, block_text, text, thinking, tool_results, tool_use
from proxy_harness import PROXY_CLIENT_KEY, REPO
from scenarios_messages import (
    Route,
    all_of,
    assistant_blocks,
    cache_control_paths,
    check_upstream_headers,
    replays_block,
    result_has,
    sbx_id,
    stage_fixture,
    thinking_consistent,
    tool_result_for,
)
from test_claude_code_direct import BETAS  # what Claude Code 2.1.332 sends, measured direct

pytestmark = pytest.mark.e2e

MODEL = "e2e-claude"
CLAUDE_TIMEOUT = 60
EPHEMERAL = {"type": "ephemeral"}
KIMI_MODEL = "kimi-k2.6"

# one proxy for the module: MODEL -> profile anthropic, KIMI_MODEL -> profile kimi (messages)
_stage = stage_fixture(Route(MODEL), Route(KIMI_MODEL, profile="kimi"))

MARKER = "CC_MSG_UPSTREAM_4411"
BASH_ID = "toolu_e2e_msgup_bash_01"
SIG1 = "RXJnb25vbWljLXNpZ25hdHVyZS1vbmUtZnJvbS1hbnRocm9waWM="
SIG2 = "c2Vjb25kLXNpZ25hdHVyZS1vZi10aGUtZmluYWwtdHVybg=="
THOUGHT1 = "The user wants the marker echoed; I will run it with Bash."
THOUGHT2 = "The command printed the marker; I can answer."
FINAL = f"Done: the command printed {MARKER}."


@pytest.fixture(scope="session")
def claude_code() -> ClaudeCode:
    try:
        return ensure_claude_code(REPO)
    except ClaudeCodeUnavailable as exc:
        pytest.fail(str(exc))


def _miss(label: str) -> MessageTurn:
    return MessageTurn([text(f"PREDICATE-MISS: {label}")], label="miss")


def _claude(cc: ClaudeCode, px, tmp_path, prompt: str):
    return run_claude_code(
        cc,
        prompt,
        base_url=px.url,
        model=MODEL,
        small_model=MODEL,
        workspace=tmp_path / "ws",
        home=tmp_path / "home",
        api_key=PROXY_CLIENT_KEY,
        timeout=CLAUDE_TIMEOUT,
    )


def _check_done(run, up, log: str, final: str) -> str:
    info = f"{run.describe()}\n{up.describe()}\n--- proxy log (this test) ---\n{log[-6000:]}"
    assert not run.timed_out, info
    if run.isolation == "netns":
        assert run.interfaces == ["lo"], info
    assert run.returncode == 0, info
    assert run.result is not None and run.result.get("subtype") == "success", info
    assert run.result.get("is_error") is False, info
    assert run.final_text == final, info
    assert up.errors == [], info
    assert [r.matched for r in up.message_requests] == [None, True], info
    return info


def _shown_thinking(run) -> list[dict]:
    return [b for b in run._blocks("assistant") if b.get("type") == "thinking"]


def test_bash_turn_with_signed_thinking(claude_code, stage, tmp_path):
    call = tool_use("Bash", {"command": f"echo {MARKER}", "description": "Print the marker"}, BASH_ID)
    signed = thinking(THOUGHT1, SIG1)
    turns = [
        MessageTurn([signed, text("Running it."), call], label="bash call"),
        MessageTurn(
            [thinking(THOUGHT2, SIG2), text(FINAL)],
            when=all_of(lambda r: result_has(r, BASH_ID, MARKER), lambda r: replays_block(r, signed)),
            otherwise=_miss("tool_result or signed thinking missing"),
            label="final",
        ),
    ]
    up, px, mark = stage.script(MODEL, turns), stage.proxy, stage.mark()
    run = _claude(claude_code, px, tmp_path, f"Run `echo {MARKER}` with the Bash tool.")
    info = _check_done(run, up, stage.log_since(mark), FINAL)

    # what Claude Code got and did: the signed thinking, the call, its result
    assert [(b.get("thinking"), b.get("signature")) for b in _shown_thinking(run)] == [
        (THOUGHT1, SIG1),
        (THOUGHT2, SIG2),
    ], info
    assert [(u["id"], u["name"], u["input"]["command"]) for u in run.tool_uses] == [
        (BASH_ID, "Bash", f"echo {MARKER}")
    ], info
    assert [(r["tool_use_id"], block_text(r).strip()) for r in run.tool_results] == [(BASH_ID, MARKER)], info

    # what the upstream got
    check_upstream_headers(up, info, beta=",".join(BETAS))
    first, second = (r.json for r in up.message_requests)
    for body in (first, second):
        assert body["model"] == MODEL and body["stream"] is True, info
        assert body["thinking"] == {"type": "adaptive", "display": "updates"}, info  # a signed turn: thinking stays
        assert body.get("context_management") == {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}, info
    assert thinking_consistent(second), info
    blocks = assistant_blocks(second)
    assert [b["type"] for b in blocks] == ["thinking", "text", "tool_use"], info
    assert blocks[0] == signed, info  # the same signature, byte for byte
    assert blocks[2] == call, info
    result = tool_result_for(second, BASH_ID)
    assert result is not None and block_text(result).strip() == MARKER and result.get("is_error") is False, info

    # cache_control as Claude Code puts it (measured direct): on system[1], system[2] and the
    # last user turn's last block (request 1: the system-role message's text; request 2: the
    # tool_result); Anthropic gets Claude Code's billing line (system[0]) as it was sent
    assert first["system"][0]["text"].startswith("x-anthropic-billing-header:"), info
    assert cache_control_paths(first) == {
        ("system", 1): EPHEMERAL,
        ("system", 2): EPHEMERAL,
        ("messages", 1, 0, "text"): EPHEMERAL,
    }, (cache_control_paths(first), info)
    n = len(second["messages"]) - 1
    assert cache_control_paths(second) == {
        ("system", 1): EPHEMERAL,
        ("system", 2): EPHEMERAL,
        ("messages", n, 0, "tool_result"): EPHEMERAL,
    }, (cache_control_paths(second), info)
    assert [m["role"] for m in second["messages"]] == ["user", "system", "assistant", "user"], info


PAR_IDS = ("toolu_e2e_msgup_par_a", "toolu_e2e_msgup_par_b")
PAR_MARKERS = ("CC_PAR_ALPHA_1", "CC_PAR_BETA_2")
PAR_FINAL = "Both commands ran."


def test_parallel_tool_calls(claude_code, stage, tmp_path):
    calls = [
        tool_use("Bash", {"command": f"echo {m}", "description": f"Print {m}"}, i)
        for i, m in zip(PAR_IDS, PAR_MARKERS, strict=True)
    ]
    signed = thinking("Two independent commands: run both at once.", SIG1)
    turns = [
        MessageTurn([signed, *calls], label="two Bash calls"),
        MessageTurn(
            [text(PAR_FINAL)],
            when=lambda r: all(result_has(r, i, m) for i, m in zip(PAR_IDS, PAR_MARKERS, strict=True)),
            otherwise=_miss("a tool_result is missing"),
            label="final",
        ),
    ]
    up, px, mark = stage.script(MODEL, turns), stage.proxy, stage.mark()
    run = _claude(claude_code, px, tmp_path, "Run both echo commands with Bash, in parallel.")
    info = _check_done(run, up, stage.log_since(mark), PAR_FINAL)
    assert sorted((u["id"], u["input"]["command"]) for u in run.tool_uses) == [
        (i, f"echo {m}") for i, m in zip(PAR_IDS, PAR_MARKERS, strict=True)
    ], info
    assert sorted((r["tool_use_id"], block_text(r).strip()) for r in run.tool_results) == list(
        zip(PAR_IDS, PAR_MARKERS, strict=True)
    ), info
    check_upstream_headers(up, info, beta=",".join(BETAS))
    second = up.message_requests[1].json
    assert assistant_blocks(second) == [signed, *calls], info  # one assistant turn, both calls, in order
    assert thinking_consistent(second), info
    last = second["messages"][-1]
    assert last["role"] == "user", info
    assert sorted(b.get("tool_use_id") for b in last["content"] if b.get("type") == "tool_result") == sorted(PAR_IDS), (
        info
    )


LONG_ID = "toolu_e2e_msgup_write_01"
LONG_FILE = "long_stream.txt"
LONG_FINAL = "The long file is written."


def _long_content(target: int = 12_000) -> str:
    """No trailing whitespace on any line: Claude Code's Write strips it (measured direct)."""
    lines, i = [], 0
    while sum(len(x) + 1 for x in lines) < target:
        lines.append(f'{i:04d}\tline "{i}" with a back\\slash, ünïcødé ✓ and 中文 x{"y" * (i % 17)}')
        i += 1
    return "\n".join(lines) + "\n"


def test_long_argument_stream(claude_code, stage, tmp_path):
    content = _long_content()
    path = tmp_path / "ws" / LONG_FILE
    call = tool_use("Write", {"file_path": str(path), "content": content}, LONG_ID)
    first_turn = MessageTurn([text("Writing it."), call], chunk=5, label="long Write")
    n_pieces = len(json.dumps(call["input"], ensure_ascii=False, separators=(",", ":"))) // 5
    assert n_pieces > 2000  # the script really streams thousands of input_json_delta pieces
    turns = [
        first_turn,
        MessageTurn(
            [text(LONG_FINAL)],
            when=lambda r: (tr := tool_result_for(r, LONG_ID)) is not None and not tr.get("is_error"),
            otherwise=_miss("Write's tool_result missing or failed"),
            label="final",
        ),
    ]
    up, px, mark = stage.script(MODEL, turns), stage.proxy, stage.mark()
    run = _claude(claude_code, px, tmp_path, f"Write {LONG_FILE} with the Write tool.")
    info = _check_done(run, up, stage.log_since(mark), LONG_FINAL)
    assert path.read_bytes() == content.encode(), info
    assert [(u["id"], u["name"], u["input"].get("content") == content) for u in run.tool_uses] == [
        (LONG_ID, "Write", True)
    ], info
    second = up.message_requests[1].json
    assert [b for b in assistant_blocks(second) if b["type"] == "tool_use"] == [call], info


KIMI_ID = "functions.Bash:0"
KIMI_MARKER = "CC_KIMI_MSG_7720"
KIMI_FINAL = f"Kimi got functions.Bash:0 back; {KIMI_MARKER}."


def test_kimi_messages_profile(claude_code, stage, tmp_path):
    call = tool_use("Bash", {"command": f"echo {KIMI_MARKER}", "description": "Print the marker"}, KIMI_ID)
    kimi_thinking = thinking("Kimi thinks: run it.", "")  # Kimi's endpoint signs nothing
    turns = [
        MessageTurn([kimi_thinking, call], label="kimi Bash call"),
        MessageTurn(
            [text(KIMI_FINAL)],
            when=all_of(lambda r: result_has(r, KIMI_ID, KIMI_MARKER), lambda r: replays_block(r, call)),
            otherwise=_miss("functions.Bash:0 did not come back"),
            label="final",
        ),
    ]
    up, px, mark = stage.script(KIMI_MODEL, turns), stage.proxy, stage.mark()
    run = run_claude_code(
        claude_code,
        f"Run `echo {KIMI_MARKER}` with Bash.",
        base_url=px.url,
        model=KIMI_MODEL,
        small_model=KIMI_MODEL,
        workspace=tmp_path / "ws",
        home=tmp_path / "home",
        api_key=PROXY_CLIENT_KEY,
        timeout=CLAUDE_TIMEOUT,
    )
    info = f"{run.describe()}\n{up.describe()}\n--- proxy log (this test) ---\n{stage.log_since(mark)[-6000:]}"
    assert run.returncode == 0 and not run.timed_out, info
    # Claude Code saw an Anthropic-valid id (the reversible mapping), and ran the command
    assert [(u["id"], u["input"]["command"]) for u in run.tool_uses] == [(sbx_id(KIMI_ID), f"echo {KIMI_MARKER}")], info
    assert [r["tool_use_id"] for r in run.tool_results] == [sbx_id(KIMI_ID)], info
    # the upstream: no betas, no beta fields, cache_control kept
    check_upstream_headers(up, info, beta=None)
    assert len(up.message_requests) == 2, info
    first, second = (r.json for r in up.message_requests)
    for body in (first, second):
        assert "context_management" not in body, info
        assert body["model"] == KIMI_MODEL, info
    # Claude Code's own breakpoints, one block earlier: its billing line (system[0]) is for
    # Anthropic only and would head Kimi's prefix cache (docs/caching.md)
    assert not any(b["text"].startswith("x-anthropic-billing-header:") for b in first["system"]), info
    assert cache_control_paths(first) == {
        ("system", 0): EPHEMERAL,
        ("system", 1): EPHEMERAL,
        ("messages", 1, 0, "text"): EPHEMERAL,
    }, (cache_control_paths(first), info)
    # the thinking Kimi's endpoint gave (no Anthropic signature) is replayed to it
    assert [b.get("thinking") for b in assistant_blocks(second) if b.get("type") == "thinking"] == [
        kimi_thinking["thinking"]
    ], info
    # Kimi's own id back on the call and on the result (the mapping reversed), as it is
    # toward a Kimi Chat upstream (test_claude_code_proxy.py)
    sent_ids = [b.get("id") for b in assistant_blocks(second) if b.get("type") == "tool_use"]
    result_ids = [r.get("tool_use_id") for r in tool_results(second)]
    assert (sent_ids, result_ids) == ([KIMI_ID], [KIMI_ID]), (
        f"PROXY DEFECT: messages->messages toward profile kimi does not map Claude Code's "
        f"{sbx_id(KIMI_ID)!r} back to Kimi's own {KIMI_ID!r}: tool_use ids {sent_ids}, tool_result ids "
        f"{result_ids} (transformers/request_messages.py only applies to_anthropic_id)\n{info}"
    )
    assert [b for b in assistant_blocks(second) if b["type"] == "tool_use"] == [call], info
    _check_done(run, up, stage.log_since(mark), KIMI_FINAL)
