"""Codex CLI (0.169.0 and the newest, 0.171.0) -> Switchboard over the Responses WebSocket.

ws-turn      a tool-call turn over the socket, on a Chat and on a Responses upstream, with
             the custom provider (``supports_websockets = true``) and with the built-in
             ``openai`` provider pointed at the proxy: every request of the turn came over
             the socket (no HTTP fallback), the command ran, and the upstream saw the whole
             history (the proxy rebuilt it from the socket's transcript)
ws-recovery  the proxy cannot continue a response (its transcript cap is below one turn):
             Codex gets ``previous_response_not_found`` and recovers by itself, re-sending
             the whole conversation (over HTTP: both versions fall back for the session),
             and the turn completes

Two proxy processes serve the module (``scenarios_messages.stage_fixture``, re-scripted per
test, each test reading its own part of the log): ``stage`` as configured by default, and
``stage_capped`` with the transcript cap; each test runs its own Codex.
"""

from __future__ import annotations

import json

import pytest
import scenarios as sc
from codex_harness import CODEX_VERSIONS
from scenarios_messages import Route, stage_fixture

pytestmark = pytest.mark.e2e

MODES = {
    "custom-ws": {"provider": "custom", "supports_websockets": True},
    "builtin-openai": {"provider": "openai"},
}
UPSTREAMS = {
    "chat": (sc.codex_chat_exec, "chat"),
    "responses": (sc.codex_responses_exec, "responses"),
}

_stage = stage_fixture(
    *(
        Route(f"e2e-{kind}", profile="openai-compatible", protocol=protocol, kind=protocol)
        for kind, (_, protocol) in UPSTREAMS.items()
    )
)
# a transcript cap far below one Codex request: every continuation is unknown to the proxy
_stage_capped = stage_fixture(
    Route("e2e-chat", profile="openai-compatible", protocol="chat", kind="chat"),
    name="stage_capped",
    server={"websocket": {"max_transcript_bytes": 1024}},
)


def transports(log: str) -> list[str]:
    """The transport of every request that reached an upstream, from the proxy's JSON log."""
    out = []
    for line in log.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("event") == "request" and "transport" in rec:
            out.append(rec["transport"])
    return out


@pytest.mark.parametrize("kind", list(UPSTREAMS))
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("version", CODEX_VERSIONS)
def test_ws_turn(stage, codex_run, version, mode, kind):
    script, protocol = UPSTREAMS[kind]
    model = f"e2e-{kind}"
    up, px, mark = stage.script(model, script(model)), stage.proxy, stage.mark()
    run = codex_run("do the task", base_url=px.base_url, model=model, version=version, **MODES[mode])
    log = stage.log_since(mark)
    info = f"{run.describe()}\n{up.describe()}\n--- proxy log ---\n{log[-6000:]}"
    assert run.returncode == 0 and not run.timed_out, info
    assert run.turn_completed, info
    assert not up.errors, info
    assert [r.turn for r in up.model_requests] == [0, 1] and up.model_requests[1].matched is True, info
    assert run.final_message == sc.FINAL_TEXT["exec"], info
    assert (run.workspace / sc.EXEC_FILE).read_text() == sc.EXEC_MARKER, info
    seen = transports(log)
    # both model requests of the turn came over the socket; nothing fell back to HTTP
    assert seen.count("websocket") >= 2 and "http" not in seen, (seen, info)
    # the upstream's second request carries the whole conversation, not just the tool output
    second = up.model_requests[1].json
    if protocol == "chat":
        roles = [m["role"] for m in second["messages"]]
        assert "user" in roles and roles[-2:] == ["assistant", "tool"], info
    else:
        kinds = [i.get("type") for i in second["input"]]
        assert "message" in kinds and kinds[-2:] == ["function_call", "function_call_output"], info
        assert "previous_response_id" not in second, info


@pytest.mark.parametrize("version", CODEX_VERSIONS)
def test_ws_recovery_after_previous_response_not_found(stage_capped, codex_run, version):
    stage = stage_capped
    up, px, mark = stage.script("e2e-chat", sc.codex_chat_exec("e2e-chat")), stage.proxy, stage.mark()
    run = codex_run(
        "do the task", base_url=px.base_url, model="e2e-chat", version=version, provider="custom",
        supports_websockets=True,
    )  # fmt: skip
    log = stage.log_since(mark)
    info = f"{run.describe()}\n{up.describe()}\n--- proxy log ---\n{log[-6000:]}"
    assert run.returncode == 0 and not run.timed_out, info
    assert run.turn_completed and run.final_message == sc.FINAL_TEXT["exec"], info
    assert [r.turn for r in up.model_requests] == [0, 1] and up.model_requests[1].matched is True, info
    assert (run.workspace / sc.EXEC_FILE).read_text() == sc.EXEC_MARKER, info
    events = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    refused = [e for e in events if e.get("event") == "websocket_frame_refused"]
    assert [e["code"] for e in refused] == ["previous_response_not_found"], info
    # Codex recovered on its own, re-sending the whole history (turn 1 matched above): both
    # 0.169.0 and 0.171.0 switch the session to HTTP after this error (measured), so a
    # transcript cap that is too small costs the socket for the rest of the session
    answered = [e["transport"] for e in events if e.get("event") == "request" and e.get("terminal") == "completed"]
    assert answered == ["http", "http"], info
