"""Codex CLI 0.169 -> Switchboard -> scripted upstream, one real tool turn per scenario.

Each scenario must: finish the turn (exit 0, ``turn.completed``), run the tool for real
(file on disk / output replayed to the upstream under the right id), and end with the
scripted final text.  Turn 2 of every script only answers properly when its predicate on
the replayed history holds, so a lost id or a lost tool output turns into a visible
``PREDICATE-MISS`` / reasoning-only answer instead of a silent pass.

  a  openai-compatible, Chat upstream: exec_command, then text
  a2 openai-compatible, Chat upstream: apply_patch JSON-wrapped {"input": raw} (T3-2)
  b  mimo (mimo-v2.6-flash), Chat upstream: apply_patch with RAW patch text in arguments
     (small patch in 3-byte transport writes; 20 KB patch in 7-byte writes, SHA-256 compared)
  c  kimi, Chat upstream: call id functions.exec_command:0 must be replayed verbatim
  d  bedrock-mantle, Responses upstream: id-less done items, id-less completed.output
  e  openai-compatible, Responses upstream: late identity (name only in done events)
  f  deepseek, Chat upstream: raw patch from a non-MiMo model is not wrapped; the failed
     response must not hand Codex a phantom apply_patch call
  g  openai-compatible, Chat upstream: a Codex namespace tool (multi_agent_v1/close_agent)
  h  mimo, Chat upstream: mixed batch, call 0 has invalid JSON arguments (T3-9)
  i  openai-compatible, Chat upstream answers HTTP 400: Codex must not retry
  j  openai-compatible, Chat upstream drops the stream mid-call: Codex retries, the
     command runs exactly once

One proxy process serves the module (``scenarios_messages.stage_fixture``): one scripted
upstream per model below, each its own provider, re-scripted per test (i and j, whose
upstream fails on purpose, on a route of their own); each test runs its own Codex.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import scenarios as sc
from proxy_harness import PROXY_CLIENT_KEY, UPSTREAM_KEY
from scenarios_messages import Route, stage_fixture

pytestmark = pytest.mark.e2e

HOSTED = {"web_search", "tool_search", "image_generation", "file_search", "local_shell", "code_interpreter"}

ROUTES = {  # model: (profile, upstream protocol)
    "e2e-chat": ("openai-compatible", "chat"),
    "e2e-fault": ("openai-compatible", "chat"),  # i, j: an upstream that fails on purpose
    "mimo-v2.6-flash": ("mimo", "chat"),
    "kimi-k2.6": ("kimi", "chat"),
    "openai.gpt-oss-120b": ("bedrock-mantle", "responses"),
    "e2e-late": ("openai-compatible", "responses"),
    "deepseek-v4": ("deepseek", "chat"),
}
_stage = stage_fixture(*(Route(m, profile=pr, protocol=proto, kind=proto) for m, (pr, proto) in ROUTES.items()))


def _run(stage, codex_run, script, *, model, profile, protocol, prompt="do the task", **kw):
    assert ROUTES[model] == (profile, protocol)
    up, px, mark = stage.script(model, script), stage.proxy, stage.mark()
    run = codex_run(prompt, base_url=px.base_url, model=model, **kw)
    info = f"{run.describe()}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)}"
    return up, px, run, info


def _common(up, run, info, final_key):
    assert run.returncode == 0 and not run.timed_out, info
    assert run.turn_completed, info
    assert not up.errors, info
    reqs = up.model_requests
    assert [r.turn for r in reqs] == [0, 1], info
    assert reqs[1].matched is True, info
    assert run.final_message == sc.FINAL_TEXT[final_key], info
    for r in reqs:  # the proxy's own key goes upstream, never the client's
        assert r.headers.get("authorization") == f"Bearer {UPSTREAM_KEY}", info
        assert PROXY_CLIENT_KEY not in json.dumps(r.headers), info


def _chat_tools(req) -> dict[str, dict]:
    return {t["function"]["name"]: t for t in req.json.get("tools") or [] if t.get("type") == "function"}


def _assert_exec_ran(run, info):
    assert (run.workspace / sc.EXEC_FILE).read_text() == sc.EXEC_MARKER, info
    # the command's output ends with the marker (a login shell may print the machine's own
    # profile warnings first, e.g. pyenv's "cannot rehash" while another shell holds its lock)
    outputs = [c.get("aggregated_output") or "" for c in run.command_executions]
    assert len(outputs) == 1 and outputs[0].splitlines()[-1:] == [sc.EXEC_MARKER], info


# --------------------------------------------------------------------------- a


def test_a_codex_chat_upstream_exec(stage, codex_run):
    up, px, run, info = _run(
        stage,
        codex_run,
        sc.codex_chat_exec("e2e-chat"),
        model="e2e-chat",
        profile="openai-compatible",
        protocol="chat",
    )
    _common(up, run, info, "exec")
    _assert_exec_ran(run, info)
    # reasoning_content -> a reasoning item Codex shows; Chat usage -> Responses usage (2 turns x 11/7)
    assert [it.get("text") for it in run.items("reasoning")] == ["Run the command first."], info
    usage = next(e["usage"] for e in run.events if e.get("type") == "turn.completed")
    assert (usage["input_tokens"], usage["output_tokens"]) == (22, 14), info
    first, second = (r.json for r in up.model_requests)
    assert up.model_requests[0].path == "/v1/chat/completions", info
    assert first["model"] == "e2e-chat" and first["stream"] is True, info
    tools = _chat_tools(up.model_requests[0])
    # docs/rules.md §7.1: function tools pass as functions; custom apply_patch becomes a function with
    # one required string parameter; hosted tools are dropped.
    assert tools["exec_command"]["function"]["parameters"]["required"] == ["cmd"], info
    ap = tools["apply_patch"]["function"]["parameters"]
    assert ap["type"] == "object" and ap["required"] == ["input"] and ap["properties"]["input"]["type"] == "string", (
        info
    )
    assert not [t for t in first.get("tools") or [] if t.get("type") in HOSTED], info
    # turn 2: one assistant tool_calls message + one tool message with the real output
    asst = [m for m in second["messages"] if m.get("tool_calls")]
    assert len(asst) == 1 and asst[0]["tool_calls"][0]["id"] == "call_exec_a1", info
    assert asst[0]["tool_calls"][0]["function"] == {"name": "exec_command", "arguments": sc.EXEC_ARGS}, info
    outs = sc.tool_outputs(second)
    assert sc.EXEC_MARKER in outs["call_exec_a1"], info


def test_a2_codex_chat_upstream_json_wrapped_apply_patch(stage, codex_run):
    """T3-2 on a non-MiMo Chat upstream (keepalive comments between frames): {"input": raw}
    is decoded and handed to Codex as a custom_tool_call; the file is written."""
    up, px, run, info = _run(
        stage,
        codex_run,
        sc.codex_chat_json_patch("e2e-chat"),
        model="e2e-chat",
        profile="openai-compatible",
        protocol="chat",
    )
    assert (run.workspace / sc.PATCH_FILE).read_bytes() == sc.PATCH_EXPECTED_BYTES, info
    _common(up, run, info, "json_patch")
    tc = [m for m in up.model_requests[1].json["messages"] if m.get("tool_calls")][0]["tool_calls"][0]
    assert tc["id"] == "call_patch_a2" and json.loads(tc["function"]["arguments"]) == {"input": sc.RAW_PATCH}, info


# --------------------------------------------------------------------------- b


@pytest.mark.parametrize("big,rechunk", [(False, 3), (True, 7)], ids=["small-3byte-writes", "20KB-7byte-writes"])
def test_b_codex_mimo_raw_apply_patch(stage, codex_run, big, rechunk):
    up, px, run, info = _run(
        stage,
        codex_run,
        sc.codex_mimo_patch("mimo-v2.6-flash", big=big, rechunk=rechunk),
        model="mimo-v2.6-flash",
        profile="mimo",
        protocol="chat",
    )
    path, expected, raw = (
        (sc.BIG_PATCH_FILE, sc.BIG_PATCH_EXPECTED_BYTES, sc.BIG_RAW_PATCH)
        if big
        else (sc.PATCH_FILE, sc.PATCH_EXPECTED_BYTES, sc.RAW_PATCH)
    )
    assert (run.workspace / path).exists(), info
    got = (run.workspace / path).read_bytes()
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(expected).hexdigest(), info
    assert [c["kind"] for fc in run.file_changes for c in fc["changes"]] == ["add"], info
    _common(up, run, info, "patch")
    first, second = (r.json for r in up.model_requests)
    # T3-14: MiMo request normalisation
    ap = _chat_tools(up.model_requests[0])["apply_patch"]["function"]
    assert ap.get("strict") is True and ap["parameters"].get("additionalProperties") is False, info
    assert "parallel_tool_calls" not in first and first.get("tool_choice", "auto") == "auto", info
    # T3-13: replay of the custom call as {"input": raw}, the tool output next to it
    asst = [m for m in second["messages"] if m.get("tool_calls")]
    tc = asst[0]["tool_calls"][0]
    assert tc["id"] == "call_patch_b1" and tc["function"]["name"] == "apply_patch", info
    assert json.loads(tc["function"]["arguments"]) == {"input": raw}, info
    assert "Success. Updated the following files" in sc.tool_outputs(second)["call_patch_b1"], info
    # reasoning_replay (mimo profile): the assistant tool-call message carries reasoning_content
    assert asst[0].get("reasoning_content") == "I will add the notes file.", info


# --------------------------------------------------------------------------- c


def test_c_codex_kimi_native_ids(stage, codex_run):
    up, px, run, info = _run(
        stage,
        codex_run,
        sc.codex_kimi_ids("kimi-k2.6"),
        model="kimi-k2.6",
        profile="kimi",
        protocol="chat",
    )
    _common(up, run, info, "kimi")
    _assert_exec_ran(run, info)
    second = up.model_requests[1].json
    asst = [m for m in second["messages"] if m.get("tool_calls")]
    tool = [m for m in second["messages"] if m.get("role") == "tool"]
    assert [tc["id"] for tc in asst[0]["tool_calls"]] == [sc.KIMI_ID], info
    assert [m["tool_call_id"] for m in tool] == [sc.KIMI_ID], info
    # Kimi thinking mode: every replayed assistant tool-call message needs reasoning_content
    assert asst[0].get("reasoning_content") == "The user wants the command run.", info
    # Kimi: tool-call messages without text omit content (or null), never ""
    assert asst[0].get("content") in (None,) or "content" not in asst[0], info


# --------------------------------------------------------------------------- d


def test_d_codex_mantle_responses_upstream(stage, codex_run):
    up, px, run, info = _run(
        stage,
        codex_run,
        sc.codex_mantle("openai.gpt-oss-120b"),
        model="openai.gpt-oss-120b",
        profile="bedrock-mantle",
        protocol="responses",
    )
    _common(up, run, info, "mantle")
    _assert_exec_ran(run, info)
    assert up.model_requests[0].path == "/v1/responses", info
    second = up.model_requests[1].json
    fc = [i for i in second["input"] if i.get("type") == "function_call"]
    fco = [i for i in second["input"] if i.get("type") == "function_call_output"]
    assert [i["call_id"] for i in fc] == ["call_mantle_d1"] and [i["call_id"] for i in fco] == ["call_mantle_d1"], info
    assert fc[0]["name"] == "exec_command" and fc[0]["arguments"] == sc.EXEC_ARGS, info


# --------------------------------------------------------------------------- e


def test_e_codex_late_identity_responses_upstream(stage, codex_run):
    up, px, run, info = _run(
        stage,
        codex_run,
        sc.codex_late_identity("e2e-late"),
        model="e2e-late",
        profile="openai-compatible",
        protocol="responses",
    )
    _common(up, run, info, "late")
    _assert_exec_ran(run, info)
    second = up.model_requests[1].json
    fc = [i for i in second["input"] if i.get("type") == "function_call"]
    assert [(i["call_id"], i["name"], i["arguments"]) for i in fc] == [
        ("call_late_e1", "exec_command", sc.EXEC_ARGS)
    ], info


# --------------------------------------------------------------------------- g


def test_g_codex_namespace_tool_via_chat_upstream(stage, codex_run):
    """docs/rules.md §7.1/§3: namespace children are flattened for Chat and split back into
    namespace + name for Codex, which routes by the pair (else "unsupported call")."""
    up, px, run, info = _run(
        stage,
        codex_run,
        sc.codex_namespace_call("chat", "e2e-chat"),
        model="e2e-chat",
        profile="openai-compatible",
        protocol="chat",
        prompt="close the agent",
        catalog_overrides={"supports_search_tool": False},
    )
    assert run.returncode == 0 and run.turn_completed, info
    assert not up.errors, info
    assert run.final_message == sc.NS_FINAL, info
    second = up.model_requests[1].json
    asst = [m for m in second["messages"] if m.get("tool_calls")]
    flat = up.model_requests[0].json
    names = [t["function"]["name"] for t in flat.get("tools") or [] if t.get("type") == "function"]
    assert asst[0]["tool_calls"][0]["function"]["name"] in names, info  # replayed under the flat name
    assert all(len(n) <= 64 for n in names), info


# --------------------------------------------------------------------------- f (negative path)


def test_f_codex_non_mimo_raw_patch_fails_without_phantom_call(stage, codex_run):
    """T3-5 end to end: the same raw patch from a non-MiMo model is NOT wrapped and the
    previous error path applies (the response fails).  Codex builds tool calls from
    output_item.done alone and ignores its status, so a failed response must not carry an
    apply_patch item for Codex to execute (stderr "apply_patch verification failed")."""
    up, px, run, info = _run(
        stage,
        codex_run,
        sc.codex_mimo_patch("deepseek-v4"),
        model="deepseek-v4",
        profile="deepseek",
        protocol="chat",
        prompt="add the notes file",
    )
    assert not (run.workspace / sc.PATCH_FILE).exists(), info
    assert not run.turn_completed and run.returncode != 0, info
    assert len(up.model_requests) == 1, info
    assert "apply_patch verification failed" not in run.stderr, "Codex tried to execute a phantom apply_patch:\n" + info


# --------------------------------------------------------------------------- h, i, j


def test_h_codex_mimo_invalid_json_passthrough(stage, codex_run):
    up, px, run, info = _run(
        stage,
        codex_run,
        sc.codex_mimo_invalid_json("chat", "mimo-v2.6-flash"),
        model="mimo-v2.6-flash",
        profile="mimo",
        protocol="chat",
    )
    assert run.returncode == 0 and run.turn_completed, info
    assert not up.errors and up.model_requests[1].matched is True, info
    assert run.final_message == sc.MIXED_FINAL, info
    fc = [m for m in up.model_requests[1].json["messages"] if m.get("tool_calls")][0]["tool_calls"]
    # the invalid bytes went to Codex and came back unchanged
    assert [(t["id"], t["function"]["arguments"]) for t in fc] == [
        ("call_bad_h0", sc.BAD_ARGS),
        ("call_good_h1", sc.EXEC_ARGS),
    ], info


def test_i_codex_upstream_400_is_not_retried(stage, codex_run):
    up, px, run, info = _run(
        stage,
        codex_run,
        sc.codex_upstream_400("e2e-fault"),
        model="e2e-fault",
        profile="openai-compatible",
        protocol="chat",
        prompt="hello",
        retries=2,
    )
    assert run.returncode != 0 and not run.turn_completed, info
    assert len(up.model_requests) == 1, "Codex retried a deterministic 400:\n" + info
    assert any("context too long for this deployment" in json.dumps(e) for e in run.errors), info


def test_j_codex_dropped_stream_is_retried_without_phantom_call(stage, codex_run):
    up, px, run, info = _run(
        stage,
        codex_run,
        sc.codex_truncated_then_retry("e2e-fault"),
        model="e2e-fault",
        profile="openai-compatible",
        protocol="chat",
        prompt="run it",
        retries=2,
    )
    runs = (run.workspace / sc.RUNS_FILE).read_text() if (run.workspace / sc.RUNS_FILE).exists() else ""
    assert runs == "run\n", f"command ran {runs.count('run')} times:\n" + info
    assert run.returncode == 0 and run.turn_completed, info
    assert [r.turn for r in up.model_requests] == [0, 1, 2] and up.model_requests[2].matched is True, info
    assert run.final_message == sc.RETRY_FINAL, info
