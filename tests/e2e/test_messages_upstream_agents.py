"""Kimi Code 2.1.0 and Codex CLI (the newest pinned, 0.171.0) -> Switchboard -> a scripted
Anthropic Messages upstream (``messages_upstream.py``, ``profile: anthropic``).

Turn 1 of every script is a signed thinking block + a tool_use (the client's shell tool
writing a marker file); turn 2 answers the final text only when request 2 carries the
tool_result under the same tool_use_id with the command's output (else ``PREDICATE-MISS``,
which the client prints, failing the final-text check).

* ``test_kimi_code_tool_turn``: Kimi Code through each of its provider types: ``anthropic``
  (Messages -> Messages), ``openai`` (Chat -> Messages) and ``openai_responses``
  (Responses -> Messages, via the Chat form).  ``Bash`` runs in the loopback-only
  namespace, the file is on disk, the final text prints; the upstream got the provider's
  ``x-api-key``, ``anthropic-version``, the ``anthropic-beta`` Kimi Code's ``anthropic``
  type sends (none from the others), and the call + its result under the upstream's id.
  From the ``anthropic`` type the signed thinking comes back with its signature, from
  ``openai_responses`` too (in the reasoning item's ``encrypted_content``); a Chat client
  has no place for a signature, so no thinking block goes back (Anthropic would refuse an
  unsigned one).
* ``test_codex_tool_turn_with_thinking``: Codex over HTTP and over the Responses WebSocket
  (custom provider, ``supports_websockets = true``): ``exec_command`` runs, its output
  reaches the upstream as a tool_result with the same tool_use_id, the answer prints, and
  request 2 carries turn 1's thinking block with the upstream's signature (it travelled
  through Codex as the reasoning item's ``encrypted_content``).
"""

from __future__ import annotations

import json

import pytest
import scenarios as sc
from codex_harness import CODEX_LATEST
from kimi_code_harness import KimiCode, KimiCodeUnavailable, ensure_kimi_code, run_kimi_code
from messages_upstream import MessageTurn, block_text, text, thinking, tool_results, tool_use
from proxy_harness import PROXY_CLIENT_KEY, REPO
from scenarios_messages import (
    Route,
    all_of,
    assistant_blocks,
    check_upstream_headers,
    replays_block,
    result_has,
    stage_fixture,
    thinking_consistent,
    tool_result_for,
)
from test_codex_websocket import transports

pytestmark = pytest.mark.e2e

SIG = "S2ltaS1jb2RlLXNpZ25lZC10aGlua2luZy1mcm9tLWFudGhyb3BpYw=="
THOUGHT = "The user wants the marker file; run it with the shell."

KIMI_MODEL = "e2e-claude-for-kimi"
CODEX_MODEL = "e2e-claude-for-codex"
# one proxy for the module, both models on profile anthropic (each its own upstream)
_stage = stage_fixture(Route(KIMI_MODEL), Route(CODEX_MODEL))


def _miss(label: str) -> MessageTurn:
    return MessageTurn([text(f"PREDICATE-MISS: {label}")], label="miss")


# --------------------------------------------------------------------------- Kimi Code

KIMI_TOOL_ID = "toolu_e2e_kimi_code_bash_01"
KIMI_PROMPT = "Write the marker file with Bash, then tell me you are done."
KIMI_FINAL = "Kimi Code's Bash ran through the Messages upstream."
# what Kimi Code 2.1.0's anthropic provider sends (measured); the proxy forwards it to
# profile anthropic as it came
KIMI_CODE_BETA = {"anthropic": "context-management-2025-06-27"}


@pytest.fixture(scope="session")
def kimi_code() -> KimiCode:
    try:
        return ensure_kimi_code(REPO)
    except KimiCodeUnavailable as exc:
        pytest.fail(str(exc))


def _kimi_turns() -> tuple[list[MessageTurn], dict, dict]:
    args = {"command": sc.KIMI_CODE_CMD, "description": "write the marker file"}
    call = tool_use("Bash", args, KIMI_TOOL_ID)
    signed = thinking(THOUGHT, SIG)
    turns = [
        MessageTurn([signed, call], label="Bash call"),
        MessageTurn(
            [text(KIMI_FINAL)],
            when=all_of(
                lambda r: result_has(r, KIMI_TOOL_ID, sc.KIMI_CODE_MARKER),
                lambda r: replays_block(r, {"type": "tool_use", "id": KIMI_TOOL_ID, "name": "Bash", "input": args}),
            ),
            otherwise=_miss("Bash call or its output missing"),
            label="final",
        ),
    ]
    return turns, call, signed


@pytest.mark.parametrize("provider_type", ["anthropic", "openai", "openai_responses"])
def test_kimi_code_tool_turn(kimi_code, stage, tmp_path, provider_type):
    turns, call, signed = _kimi_turns()
    up, px, mark = stage.script(KIMI_MODEL, turns), stage.proxy, stage.mark()
    run = run_kimi_code(
        kimi_code,
        KIMI_PROMPT,
        provider_type=provider_type,
        base_url=px.url if provider_type == "anthropic" else px.base_url,
        model=KIMI_MODEL,
        workspace=tmp_path / "ws",
        home=tmp_path / "kimi_home",
        api_key=PROXY_CLIENT_KEY,
        timeout=60,
    )
    info = f"{run.describe()}\n{up.describe()}\n--- proxy log (this test) ---\n{stage.log_since(mark)[-6000:]}"
    assert not run.timed_out, info
    if run.isolation == "netns":
        assert run.interfaces == ["lo"], info
    # the command ran in the workspace, its output went back, the final text printed
    assert [tc["function"]["name"] for tc in run.tool_calls] == ["Bash"], info
    assert (run.workspace / sc.KIMI_CODE_FILE).read_text() == sc.KIMI_CODE_MARKER, info
    assert any(sc.KIMI_CODE_MARKER in str(r.get("content")) for r in run.tool_results), info
    assert [r.matched for r in up.message_requests] == [None, True] and up.errors == [], info
    assert run.returncode == 0 and run.final_text == KIMI_FINAL, info
    # the upstream: the provider's key, the version, the client's betas (profile anthropic)
    assert [(r.method, r.path) for r in up.requests] == [("POST", "/v1/messages")] * 2, info
    check_upstream_headers(up, info, beta=KIMI_CODE_BETA.get(provider_type))
    second = up.message_requests[1].json
    result = tool_result_for(second, KIMI_TOOL_ID)
    assert result is not None and sc.KIMI_CODE_MARKER in block_text(result), info
    assert thinking_consistent(second), info
    if provider_type != "openai":
        # a Messages client keeps the block as it came; a Responses client carried the
        # signature in the reasoning item's encrypted_content
        assert assistant_blocks(second)[0] == signed, info
    else:  # a Chat client has nowhere to keep a signature: no unsigned thinking goes to Anthropic
        assert [b["type"] for b in assistant_blocks(second)] == ["tool_use"], info


# --------------------------------------------------------------------------- Codex

CODEX_TOOL_ID = "toolu_e2e_codex_exec_01"
CODEX_FINAL = "Codex ran exec_command through the Messages upstream."
CODEX_MODES = {
    "http": {"provider": "custom"},
    "websocket": {"provider": "custom", "supports_websockets": True},
}


def _codex_turns() -> tuple[list[MessageTurn], dict, dict]:
    call = tool_use("exec_command", {"cmd": sc.EXEC_CMD}, CODEX_TOOL_ID)
    signed = thinking(THOUGHT, SIG)
    turns = [
        MessageTurn([signed, text("Running the command."), call], label="exec call"),
        MessageTurn(
            [thinking("It printed the marker.", SIG[::-1]), text(CODEX_FINAL)],
            when=all_of(
                lambda r: result_has(r, CODEX_TOOL_ID, sc.EXEC_MARKER),
                lambda r: replays_block(r, signed),
            ),
            otherwise=_miss("exec output or signed thinking missing"),
            label="final",
        ),
    ]
    return turns, call, signed


@pytest.mark.parametrize("mode", list(CODEX_MODES))
def test_codex_tool_turn_with_thinking(stage, codex_run, mode):
    turns, call, signed = _codex_turns()
    up, px, mark = stage.script(CODEX_MODEL, turns), stage.proxy, stage.mark()
    run = codex_run("do the task", base_url=px.base_url, model=CODEX_MODEL, version=CODEX_LATEST, **CODEX_MODES[mode])
    log = stage.log_since(mark)  # this run's part of the module's proxy log
    info = f"{run.describe()}\n{up.describe()}\n--- proxy log ---\n{log[-6000:]}"
    assert run.returncode == 0 and not run.timed_out and run.turn_completed, info
    # the command ran, Codex printed the answer, and showed the thinking
    assert (run.workspace / sc.EXEC_FILE).read_text() == sc.EXEC_MARKER, info
    # the command's output ends with the marker (a login shell may print the machine's own
    # profile warnings first, e.g. pyenv's "cannot rehash" while another shell holds its lock)
    outputs = [c.get("aggregated_output") or "" for c in run.command_executions]
    assert len(outputs) == 1 and outputs[0].splitlines()[-1:] == [sc.EXEC_MARKER], info
    assert run.final_message == CODEX_FINAL, info
    assert THOUGHT in [it.get("text") for it in run.items("reasoning")], info
    # the upstream: the provider's key; request 2 has the call, its output, the signature
    assert [r.matched for r in up.message_requests] == [None, True] and up.errors == [], info
    check_upstream_headers(up, info, beta=None)  # Codex sends no anthropic-beta
    second = up.message_requests[1].json
    blocks = assistant_blocks(second)
    assert [b for b in blocks if b.get("type") == "thinking"] == [signed], info  # the SAME signature
    assert [b for b in blocks if b.get("type") == "tool_use"] == [call], info
    assert [r.get("tool_use_id") for r in tool_results(second)] == [CODEX_TOOL_ID], info
    assert sc.EXEC_MARKER in block_text(tool_result_for(second, CODEX_TOOL_ID)), info
    assert second["thinking"]["type"] in ("enabled", "adaptive"), info  # a signed turn: thinking stays on
    assert thinking_consistent(second), info
    seen = transports(log)
    if mode == "websocket":  # both model requests came over the socket, none fell back
        assert seen.count("websocket") >= 2 and "http" not in seen, (seen, info)
    else:
        assert seen == ["http", "http"], (seen, info)
    assert json.dumps(second).count(SIG) == 1, info


PATCH_TOOL_ID = "toolu_e2e_codex_patch_01"
PATCH_FINAL = "The notes file is written."


def test_codex_apply_patch_on_a_messages_upstream(stage, codex_run):
    """Codex's freeform ``apply_patch`` (a custom tool) goes to the Messages upstream as a
    client tool with one string ``input``; the model's ``tool_use`` comes back to Codex as a
    ``custom_tool_call`` holding the raw patch, which Codex applies, and the output reaches
    the upstream under the same tool_use_id."""
    call = tool_use("apply_patch", {"input": sc.RAW_PATCH}, PATCH_TOOL_ID)
    turns = [
        MessageTurn([text("Patching."), call], label="apply_patch call"),
        MessageTurn(
            [text(PATCH_FINAL)],
            when=lambda r: result_has(r, PATCH_TOOL_ID, sc.PATCH_FILE),
            otherwise=_miss("apply_patch output missing"),
            label="final",
        ),
    ]
    up, px, mark = stage.script(CODEX_MODEL, turns), stage.proxy, stage.mark()
    run = codex_run("patch the notes", base_url=px.base_url, model=CODEX_MODEL, version=CODEX_LATEST)
    info = f"{run.describe()}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)[-6000:]}"
    assert run.returncode == 0 and not run.timed_out and run.turn_completed, info
    assert (run.workspace / sc.PATCH_FILE).read_bytes() == sc.PATCH_EXPECTED_BYTES, info
    assert run.final_message == PATCH_FINAL, info
    first = up.message_requests[0].json
    tool = next(t for t in first["tools"] if t["name"] == "apply_patch")
    assert tool["input_schema"]["required"] == ["input"], info
    assert [r.matched for r in up.message_requests] == [None, True] and up.errors == [], info
