"""Codex CLI (0.169.0 and the newest, 0.171.0) -> Switchboard, in the provider modes of
the harness: the custom provider (with and without ``supports_websockets``) and Codex's
built-in ``openai`` provider pointed at the proxy with ``openai_base_url``.

  modes       one exec_command turn on a Chat upstream in every (version, provider) mode:
              the turn completes, the command runs, the upstream sees the tool output
  compaction  the built-in provider with ``model_auto_compact_token_limit`` set low, on a
              Chat and on a Responses upstream: the first answer (a tool call) reports a
              large usage, so Codex compacts mid-turn (a ``compaction_trigger`` request);
              the proxy asks the model for the summary (the upstream sees the compaction
              prompt, no tools) and hands Codex one sealed compaction item; Codex carries
              on, and the upstream's next request holds the summary instead of the old
              history (no tool call, no tool output, no first user prompt beyond Codex's own
              retained messages)

Two proxy processes serve the module (``scenarios_messages.stage_fixture``, one scripted
upstream per model, re-scripted per test): ``stage`` as configured by default, and
``stage_http`` with the WebSocket turned off; each test runs its own Codex.
"""

from __future__ import annotations

import json

import pytest
import scenarios as sc
from codex_harness import CODEX_VERSIONS
from scenarios_messages import Route, stage_fixture
from scripted_upstream import ToolCall, Turn, chat_turn, responses_turn

from transformers.compaction import COMPACTION_PROMPT, SUMMARY_PREFACE

pytestmark = pytest.mark.e2e

MODES = {
    "custom": {"provider": "custom"},
    "custom-ws": {"provider": "custom", "supports_websockets": True},
    "builtin-openai": {"provider": "openai"},
}

_CMP_ROUTES = tuple(
    Route(f"e2e-cmp-{kind}", profile="openai-compatible", protocol=kind, kind=kind) for kind in ("chat", "responses")
)
_stage = stage_fixture(Route("e2e-chat", profile="openai-compatible", protocol="chat", kind="chat"), *_CMP_ROUTES)
# the built-in provider speaks the WebSocket first; with it turned off (426) Codex uses HTTP
_stage_http = stage_fixture(*_CMP_ROUTES, name="stage_http", server={"websocket": {"enabled": False}})


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("version", CODEX_VERSIONS)
def test_modes_exec_turn(stage, codex_run, version, mode):
    up, px, mark = stage.script("e2e-chat", sc.codex_chat_exec("e2e-chat")), stage.proxy, stage.mark()
    run = codex_run("do the task", base_url=px.base_url, model="e2e-chat", version=version, **MODES[mode])
    info = f"{run.describe()}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)}"
    assert run.returncode == 0 and not run.timed_out, info
    assert run.turn_completed, info
    assert not up.errors, info
    assert [r.turn for r in up.model_requests] == [0, 1] and up.model_requests[1].matched is True, info
    assert run.final_message == sc.FINAL_TEXT["exec"], info
    assert (run.workspace / sc.EXEC_FILE).read_text() == sc.EXEC_MARKER, info


# --------------------------------------------------------------------------- compaction

SUMMARY = "Task: write the marker file. Done: exec_command ran and printed the marker. Next: report."
AFTER = "Carried on after compaction."
CALL_ID = "call_exec_cmp1"
BIG_CHAT = {"prompt_tokens": 50_000, "completion_tokens": 40, "total_tokens": 50_040}
BIG_RESPONSES = {
    "input_tokens": 50_000,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 40,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 50_040,
}


def _text(req: dict) -> str:
    return json.dumps(req.get("messages") if "messages" in req else req.get("input"), ensure_ascii=False)


def is_summarisation(req: dict) -> bool:
    """The proxy's summarisation request: the compaction prompt last, no tools, no trigger."""
    t = _text(req)
    return COMPACTION_PROMPT[:60] in t and "tools" not in req and "compaction_trigger" not in t


def carries_summary(req: dict) -> bool:
    """After compaction: the summary is there, the replaced history is not."""
    t = _text(req)
    return SUMMARY_PREFACE[:40] in t and SUMMARY in t and CALL_ID not in t and sc.EXEC_MARKER not in t


def compaction_script(kind: str, model: str) -> list[Turn]:
    turn = chat_turn if kind == "chat" else responses_turn
    big = BIG_CHAT if kind == "chat" else BIG_RESPONSES
    return [
        turn(model=model, tool_calls=[ToolCall("exec_command", sc.EXEC_ARGS, id=CALL_ID)], usage=big, label="exec"),
        turn(model=model, text=SUMMARY, label="summary", when=is_summarisation, otherwise=sc.miss(kind, "no summary")),
        turn(model=model, text=AFTER, label="after", when=carries_summary, otherwise=sc.miss(kind, "history kept")),
    ]


@pytest.mark.parametrize("transport", ["websocket", "http"])
@pytest.mark.parametrize("kind", ["chat", "responses"])
@pytest.mark.parametrize("version", CODEX_VERSIONS)
def test_compaction_builtin_provider(request, codex_run, version, kind, transport):
    model = f"e2e-cmp-{kind}"
    stage = request.getfixturevalue("stage" if transport == "websocket" else "stage_http")
    up, px, mark = stage.script(model, compaction_script(kind, model)), stage.proxy, stage.mark()
    run = codex_run(
        "do the task",
        base_url=px.base_url,
        model=model,
        version=version,
        provider="openai",
        extra_toml="model_auto_compact_token_limit = 20000",
    )
    log = stage.log_since(mark)  # this test's part of the module's log
    info = f"{run.describe()}\n{up.describe()}\n--- proxy log ---\n{log}"
    assert run.returncode == 0 and not run.timed_out, info
    assert run.turn_completed and not run.errors, info
    assert not up.errors, info
    reqs = up.model_requests
    assert [r.turn for r in reqs] == [0, 1, 2] and all(r.matched is not False for r in reqs), info
    assert run.final_message == AFTER, info
    assert (run.workspace / sc.EXEC_FILE).read_text() == sc.EXEC_MARKER, info
    # the summarisation request still had the history (the tool call and its output)
    assert CALL_ID in _text(reqs[1].json) and sc.EXEC_MARKER in _text(reqs[1].json), info
    assert reqs[2].json.get("tools"), info  # the turn after compaction has its tools again
    seen = [
        rec.get("transport")
        for rec in (json.loads(line) for line in log.splitlines() if line.startswith("{"))
        if rec.get("event") == "request" and rec.get("stream") is not None
    ]
    assert len(seen) == 3 and set(seen) == {transport}, (seen, info)
