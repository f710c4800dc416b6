"""The harness proves itself without the proxy: real clients against the scripted upstream.

Codex and the openai SDK talk to its Responses endpoint, kosong and the SDK to its Chat
endpoint.  If these fail, the harness (not the proxy) is broken.  The Codex run also
captures the tool list Codex 0.169 sends into tests/fixtures/codex_tools_0.169.json
(written when missing or when E2E_UPDATE_FIXTURES=1; otherwise compared).
"""

from __future__ import annotations

import json
import os

import pytest
import scenarios as sc
from client_checks import kosong_two_turns, sdk_chat, sdk_responses
from proxy_harness import PROXY_CLIENT_KEY, REPO

pytestmark = pytest.mark.e2e

TOOLS_FIXTURE = REPO / "tests" / "fixtures" / "codex_tools_0.169.json"


def _tool_names(tools: list[dict]) -> list[str]:
    return [t.get("name") or t.get("type") for t in tools]


def test_codex_direct_exec_and_wire_shape(upstream, codex_run):
    up = upstream(sc.codex_responses_exec("e2e-direct"), "direct-exec")
    run = codex_run("run the command", base_url=up.base_url, model="e2e-direct")
    info = run.describe() + "\n" + up.describe()
    assert run.returncode == 0 and run.turn_completed, info
    assert run.final_message == sc.FINAL_TEXT["exec"], info
    assert (run.workspace / sc.EXEC_FILE).read_text() == sc.EXEC_MARKER, info
    assert [c["aggregated_output"] for c in run.command_executions] == [sc.EXEC_MARKER], info
    reqs = up.model_requests
    assert [r.matched for r in reqs] == [None, True] and not up.errors, info

    # --- what Codex 0.169 puts on the wire (asserted so a client upgrade is noticed)
    first = reqs[0]
    h, body = first.headers, first.json
    assert first.path == "/v1/responses"
    assert h["authorization"] == f"Bearer {PROXY_CLIENT_KEY}"
    assert h["accept"] == "text/event-stream"
    assert h["originator"] == "codex_exec"
    assert h["user-agent"].startswith("codex_exec/0.169.0")
    assert h.get("content-encoding") is None  # not compressed in API-key mode
    for k in ("session-id", "thread-id", "x-client-request-id", "x-codex-turn-metadata", "x-codex-window-id"):
        assert k in h, k
    assert body["stream"] is True and body["store"] is False
    assert body["tool_choice"] == "auto" and body["parallel_tool_calls"] is True
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["reasoning"] == {"effort": "medium"}
    assert "instructions" not in body  # 0.169 sends the base prompt as a developer message
    assert "max_output_tokens" not in body
    assert body["input"][0]["role"] == "developer"
    tools = body["tools"]
    by_name = {t.get("name") or t["type"]: t for t in tools}
    assert by_name["exec_command"]["type"] == "function"
    assert by_name["exec_command"]["parameters"]["required"] == ["cmd"]
    assert by_name["apply_patch"]["type"] == "custom"
    assert by_name["apply_patch"]["format"]["syntax"] == "lark"
    assert "web_search" in by_name and "tool_search" in by_name

    # second request replays the call with ids Codex keeps (it sends item ids back)
    second = reqs[1].json["input"]
    fc = [i for i in second if i["type"] == "function_call"]
    fco = [i for i in second if i["type"] == "function_call_output"]
    assert [i["call_id"] for i in fc] == ["call_exec_r1"] and [i["call_id"] for i in fco] == ["call_exec_r1"]
    assert fc[0]["arguments"] == sc.EXEC_ARGS
    assert isinstance(fco[0]["output"], str) and "Process exited with code 0" in fco[0]["output"]

    # --- the tool list fixture
    if os.environ.get("E2E_UPDATE_FIXTURES") == "1" or not TOOLS_FIXTURE.exists():
        TOOLS_FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        TOOLS_FIXTURE.write_text(json.dumps(tools, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    recorded = json.loads(TOOLS_FIXTURE.read_text(encoding="utf-8"))
    assert _tool_names(tools) == _tool_names(recorded)
    assert tools == recorded, "Codex tool list drifted; rerun with E2E_UPDATE_FIXTURES=1 if intended"


def test_codex_direct_apply_patch_custom_tool(upstream, codex_run):
    up = upstream(sc.codex_responses_patch("e2e-direct"), "direct-patch")
    run = codex_run("add the notes file", base_url=up.base_url, model="e2e-direct")
    info = run.describe() + "\n" + up.describe()
    assert run.returncode == 0 and run.turn_completed, info
    assert (run.workspace / sc.PATCH_FILE).read_bytes() == sc.PATCH_EXPECTED_BYTES, info
    assert run.final_message == sc.FINAL_TEXT["patch"], info
    second = up.model_requests[1].json["input"]
    ctc = [i for i in second if i["type"] == "custom_tool_call"]
    out = [i for i in second if i["type"] == "custom_tool_call_output"]
    assert ctc[0]["input"] == sc.RAW_PATCH and ctc[0]["name"] == "apply_patch"
    assert "Success. Updated the following files:\nA " + sc.PATCH_FILE in out[0]["output"]


def test_codex_direct_kimi_ids_on_responses(upstream, codex_run):
    """Codex itself keeps functions.exec_command:0 verbatim as call_id (so any loss is the proxy's)."""
    turns = [
        sc.responses_turn(tool_calls=[sc.ToolCall("exec_command", sc.EXEC_ARGS, id=sc.KIMI_ID)]),
        sc.responses_turn(
            text=sc.FINAL_TEXT["kimi"],
            when=sc.chat_history_carries_id(sc.KIMI_ID),
            otherwise=sc.miss("responses", "id lost"),
        ),
    ]
    up = upstream(turns, "direct-kimi")
    run = codex_run("run it", base_url=up.base_url, model="e2e-direct")
    assert run.final_message == sc.FINAL_TEXT["kimi"], run.describe() + up.describe()


def test_harness_detects_lost_id(upstream, codex_run):
    """Self-test of the guard: when the replayed history does not carry the Kimi id, the
    upstream plays the reasoning-only turn and the run has no final agent message."""
    turns = [
        sc.responses_turn(tool_calls=[sc.ToolCall("exec_command", sc.EXEC_ARGS, id="functions_exec_command_0")]),
        sc.responses_turn(
            text=sc.FINAL_TEXT["kimi"],
            when=sc.chat_history_carries_id(sc.KIMI_ID),
            otherwise=sc.responses_turn(reasoning="who called that?"),
        ),
    ]
    up = upstream(turns, "direct-miss")
    run = codex_run("run it", base_url=up.base_url, model="e2e-direct")
    assert [r.matched for r in up.model_requests] == [None, False], run.describe() + up.describe()
    assert run.final_message is None and up.errors, run.describe() + up.describe()


def test_scripted_upstream_rechunk_and_keepalive(upstream):
    """Raw transport splits inside UTF-8 characters and SSE comments still parse in the SDK."""
    t = sc.with_keepalives(
        sc.chat_turn(text=sc.SDK_TEXT, reasoning=sc.SDK_REASONING, tool_calls=list(sc.SDK_CALLS), rechunk=2)
    )
    up = upstream([t], "rechunk")
    got = sdk_chat(up.base_url, PROXY_CLIENT_KEY, "e2e-sdk", stream=True)
    assert got["text"] == sc.SDK_TEXT and got["tool_calls"] == [(c.id, c.name, c.arguments) for c in sc.SDK_CALLS]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "nonstream"])
def test_sdk_direct_chat(upstream, stream):
    up = upstream(sc.sdk_parallel("chat"), "sdk-chat")
    got = sdk_chat(up.base_url, PROXY_CLIENT_KEY, "e2e-sdk", stream=stream)
    assert got["text"] == sc.SDK_TEXT
    assert got["reasoning"] == sc.SDK_REASONING
    assert got["tool_calls"] == [(t.id, t.name, t.arguments) for t in sc.SDK_CALLS]
    assert got["finish"] == "tool_calls"


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "nonstream"])
def test_sdk_direct_responses(upstream, stream):
    up = upstream(sc.sdk_parallel("responses"), "sdk-responses")
    got = sdk_responses(up.base_url, PROXY_CLIENT_KEY, "e2e-sdk", stream=stream)
    assert got["text"] == sc.SDK_TEXT
    assert got["reasoning"] == sc.SDK_REASONING
    assert got["tool_calls"] == [(t.id, t.name, t.arguments) for t in sc.SDK_CALLS]
    assert got["finish"] == "completed"
    if stream:
        assert got["delta_text"] == sc.SDK_TEXT
        assert sorted(got["args_delta"].values()) == sorted(t.arguments for t in sc.SDK_CALLS)


@pytest.mark.parametrize(
    "provider_kind,kind", [("kimi", "chat"), ("openai_legacy", "chat"), ("responses", "responses")]
)
def test_kosong_direct(upstream, provider_kind, kind):
    up = upstream(sc.kosong_kimi(kind), f"kosong-{provider_kind}")
    got = kosong_two_turns(provider_kind, up.base_url, PROXY_CLIENT_KEY, "kimi-k2.6")
    info = f"{got}\n{up.describe()}"
    assert got["turn1"]["tool_calls"] == [(t.id, t.name, t.arguments) for t in sc.KOSONG_CALLS], info
    assert got["turn1"]["reasoning"] == sc.KOSONG_REASONING, info
    assert got["turn2"]["text"] == sc.KOSONG_FINAL, info
    assert [r.matched for r in up.model_requests] == [None, True], info


def test_codex_direct_namespace_tool(upstream, codex_run):
    """Without tool_search Codex offers multi_agent_v1 as a Responses namespace tool; a call
    with namespace + name is routed (the output is the handler's, not "unsupported call")."""
    up = upstream(sc.codex_namespace_call("responses", "e2e-direct"), "direct-ns")
    run = codex_run(
        "close it", base_url=up.base_url, model="e2e-direct", catalog_overrides={"supports_search_tool": False}
    )
    info = run.describe() + "\n" + up.describe()
    assert run.final_message == sc.NS_FINAL and not up.errors, info
    tools = up.model_requests[0].json["tools"]
    ns = [t for t in tools if t["type"] == "namespace"]
    assert [t["name"] for t in ns] == [sc.NS] and sc.NS_TOOL in [c["name"] for c in ns[0]["tools"]], info
    NS_FIXTURE = REPO / "tests" / "e2e" / "fixtures" / "codex_tools_0.169_no_tool_search.json"
    if os.environ.get("E2E_UPDATE_FIXTURES") == "1" or not NS_FIXTURE.exists():
        NS_FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        NS_FIXTURE.write_text(json.dumps(tools, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    assert tools == json.loads(NS_FIXTURE.read_text(encoding="utf-8"))
    replay = [i for i in up.model_requests[1].json["input"] if i.get("type") == "function_call"]
    assert [(i.get("namespace"), i["name"]) for i in replay] == [(sc.NS, sc.NS_TOOL)], info


def test_codex_direct_invalid_json_arguments(upstream, codex_run):
    """Codex answers invalid function arguments with a parse error as the tool output and
    runs the valid call of the same batch (what T3-9 relies on)."""
    up = upstream(sc.codex_mimo_invalid_json("responses", "e2e-direct"), "direct-badjson")
    run = codex_run("run both", base_url=up.base_url, model="e2e-direct")
    assert run.final_message == sc.MIXED_FINAL and not up.errors, run.describe() + up.describe()
