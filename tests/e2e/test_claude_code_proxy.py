"""Claude Code 2.1.332 through Switchboard's ``POST /v1/messages`` to a Kimi-like Chat
upstream: the model calls ``Bash`` as ``functions.Bash:0`` with reasoning; Claude Code runs
it; the next request carries the call under the same id, its output, and the reasoning
back (Claude Code returns the thinking block whose signature the proxy sealed), which a
Kimi upstream needs to answer; the final text prints.  Claude Code runs in the
loopback-only network namespace (``claude_code_harness``), its client key sent as
``x-api-key``."""

from __future__ import annotations

import json

import pytest
import scenarios as sc
from claude_code_harness import ClaudeCode, ClaudeCodeUnavailable, ensure_claude_code, run_claude_code
from proxy_harness import PROXY_CLIENT_KEY, REPO

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="session")
def claude_code() -> ClaudeCode:
    try:
        return ensure_claude_code(REPO)
    except ClaudeCodeUnavailable as exc:
        pytest.fail(str(exc))


def _claude(claude_code: ClaudeCode, px, model: str, tmp_path):
    """One Claude Code run through the proxy ``px``, its client key as ``x-api-key``."""
    return run_claude_code(
        claude_code,
        "Write the marker file with Bash, then say you are done.",
        base_url=px.url,
        model=model,
        small_model=model,
        workspace=tmp_path / "ws",
        home=tmp_path / "home",
        api_key=PROXY_CLIENT_KEY,
        timeout=60,
    )


def test_claude_code_bash_turn_on_a_kimi_chat_upstream(claude_code, upstream, proxy_for, tmp_path) -> None:
    model = "kimi-k2.6"
    up = upstream(sc.kimi_code_bash(model), "claude-code-kimi")
    px = proxy_for(up, model=model, profile="kimi", protocol="chat")
    run = _claude(claude_code, px, model, tmp_path)
    info = f"{run.stderr[-2000:]}\n{up.describe()}\n{px.log()[-4000:]}"
    assert run.returncode == 0 and not run.timed_out, info
    assert run.result is not None and not run.result.get("is_error"), info
    assert (tmp_path / "ws" / sc.KIMI_CODE_FILE).read_text() == sc.KIMI_CODE_MARKER, info
    assert run.result.get("result") == sc.KIMI_CODE_FINAL, info
    reqs = up.model_requests
    assert [r.turn for r in reqs] == [0, 1] and reqs[1].matched is True, info
    second = reqs[1].json
    calls = [m for m in second["messages"] if m.get("tool_calls")]
    assert calls and calls[0]["tool_calls"][0]["id"] == sc.KIMI_CODE_ID, info
    assert calls[0].get("reasoning_content") == sc.KIMI_CODE_REASONING, info  # the sealed thinking, opened
    assert any(t["function"]["name"] == "Bash" for t in second["tools"]), info
    assert json.loads(calls[0]["tool_calls"][0]["function"]["arguments"])["command"] == sc.KIMI_CODE_CMD


def test_claude_code_bash_turn_on_a_responses_upstream(claude_code, upstream, proxy_for, tmp_path) -> None:
    """The same turn on a Responses upstream (an openai-compatible one: xAI, Mantle, vLLM):
    the Bash call as a function_call, its output as a function_call_output."""
    import json as _json

    from scripted_upstream import ToolCall, responses_turn

    model = "e2e-resp"
    call_id = "call_cc_bash_1"
    args = _json.dumps({"command": sc.KIMI_CODE_CMD, "description": "write the marker file"})
    turns = [
        responses_turn(
            model=model, text="Running it.", tool_calls=[ToolCall("Bash", args, id=call_id)], label="Bash call"
        ),
        responses_turn(
            model=model,
            text=sc.KIMI_CODE_FINAL,
            label="final",
            when=sc.tool_output_contains(call_id, sc.KIMI_CODE_MARKER),
            otherwise=sc.miss("responses", "Bash output missing"),
        ),
    ]
    up = upstream(turns, "claude-code-responses")
    px = proxy_for(up, model=model, profile="openai-compatible", protocol="responses")
    run = _claude(claude_code, px, model, tmp_path)
    info = f"{run.stderr[-2000:]}\n{up.describe()}\n{px.log()[-4000:]}"
    assert run.returncode == 0 and not run.timed_out, info
    assert (tmp_path / "ws" / sc.KIMI_CODE_FILE).read_text() == sc.KIMI_CODE_MARKER, info
    assert run.result is not None and run.result.get("result") == sc.KIMI_CODE_FINAL, info
    reqs = up.model_requests
    assert [r.endpoint for r in reqs] == ["responses", "responses"] and reqs[1].matched is True, info
    items = reqs[1].json["input"]
    assert [i.get("type") for i in items if i.get("type") in ("function_call", "function_call_output")] == [
        "function_call",
        "function_call_output",
    ], info
