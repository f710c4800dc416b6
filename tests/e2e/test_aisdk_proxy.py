"""Vercel AI SDK (``ai`` 7 + ``@ai-sdk/openai`` 4, pinned in ``aisdk/package.json``) ->
Switchboard -> scripted upstream: one tool loop per case, ``streamText`` and ``generateText``.

The driver (``aisdk/driver.mjs``) offers one tool, runs the loop with
``stopWhen: isStepCount(3)`` and reports what the SDK saw and every request it sent.  The
upstream answers turn 1 with reasoning, a text and a tool call, and turn 2 with the final
text only if its own history check passes (``scenarios_aisdk.history_problems``); so every
case asserts: the tool ran exactly once with the arguments the upstream sent, the final text
arrived, and the upstream got the call, its output and the turn-1 text (and, for a
Responses client, its reasoning) in its own protocol's form.

``openai.responses(model)`` at its defaults sends no ``store``: the proxy stores, and step 2
carries the reasoning and the text as ``{"type": "item_reference", "id": ...}`` with the ids
the proxy gave them (the ``function_call`` and ``function_call_output`` in full, no
``previous_response_id``, no ``include``).  The proxy must resolve those references from
its store: toward Chat into ``reasoning_content`` + assistant content, toward Responses
into the items themselves (an upstream never saw the proxy's ids).

  exec       exec_command over the four client/upstream protocol pairs (openai-compatible)
  mantle     Responses client, bedrock-mantle Responses upstream (id-less done items)
  mimo       mimo-v2.6-flash on a ``mimo`` provider: raw apply_patch text as arguments,
             which the tool must receive byte for byte as ``{"input": raw}``

One proxy process serves the module (``scenarios_messages.stage_fixture``, its store in the
module's temporary folder): one scripted upstream per provider (openai-compatible Chat and
Responses, bedrock-mantle, mimo) under its own model name, re-scripted per case; each case
runs the AI SDK's own driver through it.
"""

from __future__ import annotations

import json

import pytest
import scenarios as sc
import scenarios_aisdk as sa
from aisdk_harness import AiSdk, AiSdkRun, AiSdkUnavailable, ensure_aisdk, run_driver
from client_checks import types_not_in_policy_table
from proxy_harness import PROXY_CLIENT_KEY, REPO, UPSTREAM_KEY
from scenarios_messages import Route, stage_fixture

pytestmark = pytest.mark.e2e

MODEL = "e2e-aisdk"
MODES = ["stream", "generate"]  # streamText / generateText
MANTLE_MODEL = "openai.gpt-oss-120b"
MIMO_MODEL = "mimo-v2.6-flash"

_stage = stage_fixture(
    Route(f"{MODEL}-chat", profile="openai-compatible", protocol="chat", kind="chat"),
    Route(f"{MODEL}-responses", profile="openai-compatible", protocol="responses", kind="responses"),
    Route(MANTLE_MODEL, profile="bedrock-mantle", protocol="responses", kind="responses"),
    Route(MIMO_MODEL, profile="mimo", protocol="chat", kind="chat"),
)


@pytest.fixture(scope="session")
def aisdk() -> AiSdk:
    try:
        return ensure_aisdk(REPO)
    except AiSdkUnavailable as exc:
        pytest.fail(str(exc))


def _drive(aisdk: AiSdk, tmp_path, px, *, api: str, mode: str, model: str, tool: dict, prompt: str) -> AiSdkRun:
    job = {
        "base_url": px.base_url,
        "api_key": PROXY_CLIENT_KEY,
        "model": model,
        "api": api,
        "mode": mode,
        "prompt": prompt,
        "max_steps": 3,
        "tools": [tool],
    }
    return run_driver(aisdk, job, cwd=tmp_path / "driver")


def _info(run: AiSdkRun, up, log: str, problems: list[str] | None = None) -> str:
    parts = [run.describe()]
    if problems:
        parts.append("turn-2 history problems: " + "; ".join(problems))
    parts.append(up.describe())
    for r in up.model_requests:
        parts.append(f"upstream got (turn {r.turn}, {r.path}): {json.dumps(r.json, ensure_ascii=False)[:5000]}")
    parts.append(f"--- proxy log ---\n{log}")
    return "\n".join(parts)


def _check(run: AiSdkRun, up, px, log, *, api, tool, call_id, args, final, problems_of, step1_text, step1_reasoning):
    """What every case must show; ``problems_of(request)`` is turn 2's history check."""
    reqs = up.model_requests
    problems = problems_of(reqs[1].json) if len(reqs) > 1 else ["the upstream got no turn-2 request"]
    info = _info(run, up, log, problems)
    assert run.returncode == 0 and not run.timed_out and run.got, info
    got = run.got
    assert got["errors"] == [], info

    # the SDK's requests: both to the proxy, the client API's path, no server-side state asked for
    path = "/responses" if api == "responses" else "/chat/completions"
    sent = run.requests
    assert [(r["method"], r["url"]) for r in sent] == [("POST", px.base_url + path)] * 2, info
    for r in sent:
        assert not {"store", "previous_response_id", "include"} & set(r["body"]), info
        assert types_not_in_policy_table(r["body"]) == [], info
    if api == "responses":
        # step 2 refers to step 1's reasoning and message by the ids the proxy gave them
        step1_ids = [(m or {}).get("openai", {}).get("itemId") for m in got["steps"][0]["provider_metadata"]]
        items = sent[1]["body"]["input"]
        refs = [it["id"] for it in items if it.get("type") == "item_reference"]
        want_refs = [i for i, t in zip(step1_ids, got["steps"][0]["content_types"]) if t in ("reasoning", "text")]
        assert refs and refs == want_refs, info
        assert [it.get("type") for it in items if it.get("type") != "item_reference"][-2:] == [
            "function_call",
            "function_call_output",
        ], info

    # the upstream: both turns played, the proxy's key, turn 2's history complete
    assert [r.turn for r in reqs] == [0, 1], info
    for r in reqs:
        assert r.headers.get("authorization") == f"Bearer {UPSTREAM_KEY}", info
    assert problems == [] and reqs[1].matched is True, info
    assert not up.errors, info

    # what the SDK user sees: the tool ran exactly once, with the upstream's arguments, then the final text
    param = tool["param"]
    assert got["executions"] == [{"tool": tool["name"], "input": {param: args}}], info
    assert [len(got["steps"]), got["text"], got["finish_reason"]] == [2, final, "stop"], info
    first = got["steps"][0]
    assert first["finish_reason"] == "tool-calls", info
    assert first["tool_calls"] == [{"id": call_id, "name": tool["name"], "input": {param: args}}], info
    assert first["tool_results"] == [{"id": call_id, "name": tool["name"], "output": tool["output"]}], info
    if step1_text is not None:
        assert first["text"] == step1_text, info
    if step1_reasoning is not None:
        assert first["reasoning"] == step1_reasoning, info


EXEC_CASES = {
    # id: (client api, upstream protocol, model (its stage route: profile and protocol), mantle quirks)
    "responses-client-chat-upstream": ("responses", "chat", f"{MODEL}-chat", False),
    "responses-client-responses-upstream": ("responses", "responses", f"{MODEL}-responses", False),
    "chat-client-chat-upstream": ("chat", "chat", f"{MODEL}-chat", False),
    "chat-client-responses-upstream": ("chat", "responses", f"{MODEL}-responses", False),
    "responses-client-mantle-upstream": ("responses", "responses", MANTLE_MODEL, True),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(EXEC_CASES))
def test_aisdk_exec_tool_loop(aisdk, stage, tmp_path, case, mode):
    api, protocol, model, mantle = EXEC_CASES[case]
    # a Chat client (openai.chat) never sends reasoning back; a Responses client refers to it
    reasoning = api == "responses"
    up, px, mark = (
        stage.script(model, sa.exec_turns(protocol, model=model, reasoning=reasoning, mantle=mantle)),
        stage.proxy,
        stage.mark(),
    )
    run = _drive(aisdk, tmp_path, px, api=api, mode=mode, model=model, tool=sa.EXEC_TOOL, prompt=sa.PROMPT)
    _check(
        run,
        up,
        px,
        stage.log_since(mark),
        api=api,
        tool=sa.EXEC_TOOL,
        call_id=sa.EXEC_CALL_ID,
        args=sc.EXEC_CMD,
        final=sa.FINAL_TEXT,
        problems_of=sa.exec_problems(protocol, reasoning=reasoning),
        step1_text=sa.STEP1_TEXT,
        # openai.chat ignores reasoning_content: only the Responses client shows reasoning
        step1_reasoning=sa.STEP1_REASONING if api == "responses" else None,
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", ["responses", "chat"], ids=["responses-client", "chat-client"])
def test_aisdk_mimo_raw_apply_patch(aisdk, stage, tmp_path, api, mode):
    """MiMo calls apply_patch with the raw patch as arguments; the AI SDK's one-string
    function tool must get ``{"input": raw}`` byte for byte (R3-a′), and MiMo must get the
    call back as ``{"input": raw}`` with its output (and, from a Responses client, its
    reasoning as ``reasoning_content``, which only the stored item behind the client's
    ``item_reference`` has)."""
    model = MIMO_MODEL
    reasoning = api == "responses"
    up, px, mark = stage.script(model, sa.mimo_patch_turns(model=model, reasoning=reasoning)), stage.proxy, stage.mark()
    run = _drive(aisdk, tmp_path, px, api=api, mode=mode, model=model, tool=sa.PATCH_TOOL, prompt=sa.MIMO_PROMPT)
    log = stage.log_since(mark)
    _check(
        run,
        up,
        px,
        log,
        api=api,
        tool=sa.PATCH_TOOL,
        call_id=sa.MIMO_CALL_ID,
        args=sc.RAW_PATCH,
        final=sa.MIMO_FINAL,
        problems_of=sa.mimo_problems(reasoning=reasoning),
        step1_text=None,
        step1_reasoning=sa.MIMO_REASONING if api == "responses" else None,
    )
    # MiMo request normalisation applies to the AI SDK's function apply_patch too
    ap = next(t["function"] for t in up.model_requests[0].json["tools"] if t["function"]["name"] == "apply_patch")
    assert ap["parameters"]["required"] == ["input"], _info(run, up, log)
