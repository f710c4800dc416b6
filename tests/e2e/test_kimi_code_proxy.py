"""Kimi Code CLI 2.x (the real npm package, pinned) -> Switchboard -> a Kimi-like Chat upstream.

Each of Kimi Code's three provider types (``kimi`` and ``openai`` Chat, ``openai_responses``)
runs one prompt (``kimi -p ... --output-format stream-json``) off the network (see
kimi_code_harness).  The scripted upstream calls ``Bash`` as ``functions.Bash:0`` with
reasoning; Kimi Code runs it (the file it writes is checked in the workspace), sends the
history back with the id sanitised to ``functions_Bash_0``, and the upstream answers the
final text only if its own id came back on the call and on the tool message (else
reasoning only, as Kimi K2 does, and Kimi Code stops with an empty-response error).

* ``test_kimi_code_ids_restored``: profile ``kimi`` (``kimi_tool_ids`` on): the upstream
  receives ``functions.Bash:0`` on both, plus the reasoning it sent; the final text prints.
* ``test_kimi_code_parallel_and_multi_turn``: two parallel calls (``functions.Bash:0``,
  ``:1``), then a third (``:2``), then the answer: all three ids and both reasonings come
  back restored in the third request.
* ``test_isolation``: what every run gets (no Kimi Code needed): the relayed port reaches
  a server outside, and in netns mode the namespace has only ``lo`` and an outside address
  is unreachable at once.
* ``test_kimi_code_without_repair``: the same with ``kimi_tool_ids`` switched off: the
  upstream sees ``functions_Bash_0`` and answers reasoning only; Kimi Code prints no final
  text and exits 1 ("a response containing only thinking content").  So the first test passes because of the repair, not by accident.

One proxy process serves the module (``scenarios_messages.stage_fixture``): the Kimi upstream
with the repair (``MODEL``), one with ``kimi_tool_ids`` disabled (``UNREPAIRED``) and a
Responses upstream (``RESPONSES_MODEL``), each its own provider, re-scripted per test; the
repair is stateless (``transformers/ids.kimi_restore_map`` reads one request), so no test
leans on what an earlier one sent. Each test runs its own Kimi Code process.
"""

from __future__ import annotations

import errno
import json
import os
import sys

import pytest
import scenarios as sc
from kimi_code_harness import (
    PROVIDER_TYPES,
    KimiCode,
    KimiCodeUnavailable,
    ensure_kimi_code,
    isolation,
    run_isolated,
    run_kimi_code,
)
from proxy_harness import PROXY_CLIENT_KEY, REPO
from scenarios_messages import Route, stage_fixture

pytestmark = pytest.mark.e2e

MODEL = "kimi-k2.6"
UNREPAIRED = "kimi-k2.6-unrepaired"  # the same upstream kind with kimi_tool_ids disabled
RESPONSES_MODEL = "e2e-resp"
PROMPT = "Write the marker file with Bash, then tell me you are done."
KIMI_TIMEOUT = 60  # seconds per Kimi Code run (a passing run takes 2-3 s)

_stage = stage_fixture(
    Route(MODEL, profile="kimi", protocol="chat", kind="chat"),
    Route(
        UNREPAIRED,
        profile="kimi",
        protocol="chat",
        kind="chat",
        provider_extra=(("quirks", {"disable": ["kimi_tool_ids"]}),),
    ),
    Route(RESPONSES_MODEL, profile="openai-compatible", protocol="responses", kind="responses"),
)


@pytest.fixture(scope="session")
def kimi_code() -> KimiCode:
    try:
        return ensure_kimi_code(REPO)
    except KimiCodeUnavailable as exc:
        pytest.fail(str(exc))


def _history(req: dict) -> tuple[list[dict], list[dict]]:
    """(assistant messages with tool_calls, tool messages) of a Chat request."""
    msgs = req.get("messages") or []
    return [m for m in msgs if m.get("tool_calls")], [m for m in msgs if m.get("role") == "tool"]


def _kimi(kimi_code, stage, tmp_path, provider_type, turns, model=MODEL):
    """Run Kimi Code once through the proxy; check what every run must show."""
    up, px, mark = stage.script(model, turns), stage.proxy, stage.mark()
    run = run_kimi_code(
        kimi_code,
        PROMPT,
        provider_type=provider_type,
        base_url=px.url if provider_type == "anthropic" else px.base_url,
        model=model,
        workspace=tmp_path / "ws",
        home=tmp_path / "kimi_home",
        api_key=PROXY_CLIENT_KEY,
        timeout=KIMI_TIMEOUT,
    )
    info = f"{run.describe()}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)}"
    assert not run.timed_out, info
    if run.isolation == "netns":
        assert run.interfaces == ["lo"], info  # nothing but loopback inside the namespace
    # everything Kimi Code needed came from the proxy: the upstream saw one model call per turn
    assert [(r.method, r.endpoint) for r in up.requests] == [("POST", "chat")] * len(turns), info
    assert all(r.headers.get("authorization") == "Bearer sk-e2e-upstream" for r in up.requests), info
    return up, run, info


def _run(kimi_code, stage, tmp_path, provider_type, model=MODEL):
    up, run, info = _kimi(kimi_code, stage, tmp_path, provider_type, sc.kimi_code_bash(model), model)
    # the Bash call ran in the workspace and its output went back
    assert [tc["function"]["name"] for tc in run.tool_calls] == ["Bash"], info
    assert (run.workspace / sc.KIMI_CODE_FILE).read_text() == sc.KIMI_CODE_MARKER, info
    assert any(sc.KIMI_CODE_MARKER in str(r.get("content")) for r in run.tool_results), info
    return up, run, info


@pytest.mark.parametrize("provider_type", PROVIDER_TYPES)
def test_kimi_code_ids_restored(kimi_code, stage, tmp_path, provider_type):
    up, run, info = _run(kimi_code, stage, tmp_path, provider_type)
    second = up.model_requests[1].json
    calls, tools = _history(second)
    assert [tc["id"] for m in calls for tc in m["tool_calls"]] == [sc.KIMI_CODE_ID], info
    assert [m["tool_call_id"] for m in tools] == [sc.KIMI_CODE_ID], info
    assert calls[0].get("reasoning_content") == sc.KIMI_CODE_REASONING, info
    assert up.model_requests[1].matched is True, info
    assert run.returncode == 0, info
    assert run.final_text == sc.KIMI_CODE_FINAL, info


@pytest.mark.parametrize("provider_type", PROVIDER_TYPES)
def test_kimi_code_without_repair(kimi_code, stage, tmp_path, provider_type):
    up, run, info = _run(kimi_code, stage, tmp_path, provider_type, UNREPAIRED)
    second = up.model_requests[1].json
    calls, tools = _history(second)
    if provider_type == "anthropic":
        # the Messages encoder gave Kimi Code the id mapped to Anthropic's pattern (sbx_…),
        # which its sanitiser leaves as it is, and it comes back as Kimi's own: that type
        # needs no restoring (transformers/ids.py, to_anthropic_id)
        assert run.tool_calls[0]["id"].startswith("sbx_"), info
        assert [tc["id"] for m in calls for tc in m["tool_calls"]] == ["functions.Bash:0"], info
        assert run.returncode == 0 and run.final_text == sc.KIMI_CODE_FINAL, info
        return
    assert [tc["id"] for m in calls for tc in m["tool_calls"]] == [sc.KIMI_CODE_SANITISED], info
    assert [m["tool_call_id"] for m in tools] == [sc.KIMI_CODE_SANITISED], info
    assert up.model_requests[1].matched is False, info  # Kimi's reasoning-only answer was played
    assert run.final_text is None, info
    assert run.returncode != 0 and "only thinking content" in run.stderr, info  # Kimi Code's empty-response error


@pytest.mark.parametrize("provider_type", PROVIDER_TYPES)
def test_kimi_code_parallel_and_multi_turn(kimi_code, stage, tmp_path, provider_type):
    up, run, info = _kimi(kimi_code, stage, tmp_path, provider_type, sc.kimi_code_multi(MODEL))
    assert [tc["function"]["name"] for tc in run.tool_calls] == ["Bash"] * 3, info
    assert (run.workspace / sc.KIMI_CODE_MULTI_FILE).read_text() == "ab", info
    assert [r.matched for r in up.model_requests] == [None, True, True], info
    calls, tools = _history(up.model_requests[2].json)
    assert [[tc["id"] for tc in m["tool_calls"]] for m in calls] == [
        sc.KIMI_CODE_MULTI_IDS[:2],
        sc.KIMI_CODE_MULTI_IDS[2:],
    ], info
    assert [m["tool_call_id"] for m in tools] == sc.KIMI_CODE_MULTI_IDS, info
    assert [m.get("reasoning_content") for m in calls] == sc.KIMI_CODE_MULTI_REASONING, info
    assert run.returncode == 0 and run.final_text == sc.KIMI_CODE_MULTI_FINAL, info


def test_kimi_code_anthropic_on_a_responses_upstream(kimi_code, stage, tmp_path):
    """Kimi Code's ``anthropic`` type on a Responses upstream (Messages → Chat → Responses):
    the Bash call as a function_call, its output back as a function_call_output with the
    same call_id, the final text printed."""
    from scripted_upstream import ToolCall, responses_turn

    model = RESPONSES_MODEL
    call_id = "call_kc_bash_1"
    args = json.dumps({"command": sc.KIMI_CODE_CMD, "description": "write the marker file"})
    turns = [
        responses_turn(model=model, text="Running it.", tool_calls=[ToolCall("Bash", args, id=call_id)], label="Bash"),
        responses_turn(
            model=model,
            text=sc.KIMI_CODE_FINAL,
            label="final",
            when=sc.tool_output_contains(call_id, sc.KIMI_CODE_MARKER),
            otherwise=sc.miss("responses", "Bash output missing"),
        ),
    ]
    up, px, mark = stage.script(model, turns), stage.proxy, stage.mark()
    run = run_kimi_code(
        kimi_code,
        PROMPT,
        provider_type="anthropic",
        base_url=px.url,
        model=model,
        workspace=tmp_path / "ws",
        home=tmp_path / "kimi_home",
        api_key=PROXY_CLIENT_KEY,
        timeout=KIMI_TIMEOUT,
    )
    info = f"{run.describe()}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)}"
    assert not run.timed_out and run.returncode == 0, info
    assert (run.workspace / sc.KIMI_CODE_FILE).read_text() == sc.KIMI_CODE_MARKER, info
    assert run.final_text == sc.KIMI_CODE_FINAL, info
    reqs = up.model_requests
    assert [r.endpoint for r in reqs] == ["responses", "responses"] and reqs[1].matched is True, info
    items = reqs[1].json["input"]
    calls = [i for i in items if i.get("type") in ("function_call", "function_call_output")]
    assert [(i["type"], i["call_id"]) for i in calls] == [("function_call", call_id), ("function_call_output", call_id)]


PROBE = """
import json, socket, sys, urllib.request
out = {}
try:
    socket.create_connection(("192.0.2.1", 80), timeout=3).close()
    out["outside"] = "connected"
except OSError as exc:
    out["outside"] = exc.errno
out["relayed"] = urllib.request.urlopen(sys.argv[1], timeout=5).status
print(json.dumps(out))
"""


def test_isolation(upstream, tmp_path):
    up = upstream([], "isolation-probe")
    r = run_isolated(
        [sys.executable, "-c", PROBE, f"{up.url}/v1/models"],
        port=up.port,
        cwd=tmp_path,
        env=dict(os.environ),
        timeout=30,
    )
    info = f"{r}\n{up.describe()}"
    assert r.returncode == 0 and not r.timed_out, info
    got = json.loads(r.stdout)
    assert got["relayed"] == 200, info
    assert [(q.method, q.path) for q in up.requests] == [("GET", "/v1/models")], info
    if r.mode != "netns":
        pytest.skip(f"no network namespace on this machine ({isolation()[2]}): runs are loopback-only by config")
    assert r.interfaces == ["lo"], info
    assert got["outside"] == errno.ENETUNREACH, info
