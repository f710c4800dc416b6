"""Codex CLI (0.169.0 and the newest, 0.171.0) -> Switchboard, in the provider modes of
the harness: the custom provider (with and without ``supports_websockets``) and Codex's
built-in ``openai`` provider pointed at the proxy with ``openai_base_url``.

  modes  one exec_command turn on a Chat upstream in every (version, provider) mode: the
         turn completes, the command runs, the upstream sees the tool output
"""

from __future__ import annotations

import pytest
import scenarios as sc
from codex_harness import CODEX_VERSIONS

pytestmark = pytest.mark.e2e

MODES = {
    "custom": {"provider": "custom"},
    "custom-ws": {"provider": "custom", "supports_websockets": True},
    "builtin-openai": {"provider": "openai"},
}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("version", CODEX_VERSIONS)
def test_modes_exec_turn(upstream, proxy_for, codex_run, version, mode):
    up = upstream(sc.codex_chat_exec("e2e-chat"), f"modes-{mode}")
    px = proxy_for(up, model="e2e-chat", profile="openai-compatible", protocol="chat")
    run = codex_run("do the task", base_url=px.base_url, model="e2e-chat", version=version, **MODES[mode])
    info = f"{run.describe()}\n{up.describe()}\n--- proxy log ---\n{px.log()}"
    assert run.returncode == 0 and not run.timed_out, info
    assert run.turn_completed, info
    assert not up.errors, info
    assert [r.turn for r in up.model_requests] == [0, 1] and up.model_requests[1].matched is True, info
    assert run.final_message == sc.FINAL_TEXT["exec"], info
    assert (run.workspace / sc.EXEC_FILE).read_text() == sc.EXEC_MARKER, info
