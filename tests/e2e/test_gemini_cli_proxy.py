"""Gemini CLI 0.61 (the real npm package, pinned) -> Switchboard -> Chat, Responses and
Messages upstreams, off the network (gemini_cli_harness).

Gemini CLI speaks only Gemini's own API: it streams every turn from
``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` with its key in
``x-goog-api-key``.  Each test runs one prompt (``gemini -p ... --output-format stream-json
--yolo``): the scripted upstream asks for its shell tool (``run_shell_command``, running
``echo`` with a marker), Gemini CLI runs it and sends the output back as a
``functionResponse``, and the upstream answers the final text only when the call came back
under its own id with its output (else a text that says so).

* ``test_gemini_cli_chat_upstream``: a Kimi-like Chat upstream that streams reasoning with
  its call: the reasoning comes back on the call's assistant message (sealed in the
  ``thoughtSignature`` Gemini CLI keeps on the ``functionCall`` part).
* ``test_gemini_cli_responses_upstream``: a Responses upstream (by way of the Chat form).
* ``test_gemini_cli_messages_upstream``: an Anthropic Messages upstream (the same way): its
  signed thinking block comes back before the tool result as it signed it.
* ``test_gemini_cli_native_gemini_upstream``: a scripted Gemini in its own API
  (``protocol: gemini``, ``gemini_native_upstream``) that signs its call and refuses the
  next request unless its signature comes back: it does, byte for byte.
* ``test_gemini_cli_direct``: Gemini CLI straight to that scripted Gemini (no proxy): what it
  sends (``x-goog-api-key``, ``alt=sse``, its ``GeminiCLI`` user agent, the signature back on
  the ``functionCall`` part) is what the scripted upstream takes.
"""

from __future__ import annotations

import json

import pytest
from gemini_cli_harness import GeminiCli, GeminiCliUnavailable, ensure_gemini_cli, run_gemini_cli
from gemini_native_upstream import NativeGeminiUpstream, NativeTurn
from messages_upstream import MessagesUpstream, MessageTurn, thinking, tool_results, tool_use
from messages_upstream import text as text_block
from proxy_harness import PROXY_CLIENT_KEY, REPO, UPSTREAM_KEY
from scripted_upstream import ToolCall, Turn, chat_turn, responses_turn

pytestmark = pytest.mark.e2e

MODEL = "gemini-2.5-flash"
MARKER = "sb-gemini-cli-7f3a"
PROMPT = f"Run `echo {MARKER}` in the shell, then tell me what it printed."
CALL_ID = "functions.run_shell_command:0"
REASONING = "The user wants the shell: run echo."
FINAL = f"It printed {MARKER}."
MISSED = "The tool output did not come back."
ARGS = json.dumps({"command": f"echo {MARKER}", "description": "Print the marker."})
TIMEOUT = 120  # seconds per Gemini CLI run (a passing run takes some 10 s)


@pytest.fixture(scope="session")
def gemini_cli() -> GeminiCli:
    try:
        return ensure_gemini_cli(REPO)
    except GeminiCliUnavailable as exc:
        pytest.fail(str(exc))


def _chat_results(req: dict) -> list[dict]:
    return [m for m in req.get("messages") or [] if m.get("role") == "tool"]


def _responses_results(req: dict) -> list[dict]:
    items = req.get("input") if isinstance(req.get("input"), list) else []
    return [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]


def _run(gemini_cli, tmp_path, px, up) -> tuple:
    run = run_gemini_cli(
        gemini_cli,
        PROMPT,
        base_url=px.url,
        model=MODEL,
        workspace=tmp_path / "ws",
        home=tmp_path / "home",
        api_key=PROXY_CLIENT_KEY,
        timeout=TIMEOUT,
    )
    info = f"{run.describe()}\n{up.describe()}\n--- proxy log ---\n{px.log()}"
    assert not run.timed_out, info
    if run.isolation == "netns":
        assert run.interfaces == ["lo"], info  # nothing but loopback inside the namespace
    # the shell tool ran echo, and its output went back
    assert [c["tool_name"] for c in run.tool_calls] == ["run_shell_command"], info
    assert run.tool_calls[0]["parameters"]["command"] == f"echo {MARKER}", info
    assert [r["status"] for r in run.tool_results] == ["success"], info
    assert MARKER in run.tool_results[0]["output"], info
    assert run.returncode == 0, info
    assert run.final_text == FINAL, info
    # every turn of Gemini CLI's went through the Gemini route to this upstream
    log = px.log(tail=200000)
    assert log.count('"route":"/v1beta/models/{model}:streamGenerateContent"') == 2, info
    assert '"client_protocol":"gemini"' in log, info
    return run, info


def _chat(req: dict) -> Turn:
    results = _chat_results(req)
    if not results:
        return chat_turn(reasoning=REASONING, tool_calls=[ToolCall("run_shell_command", ARGS, id=CALL_ID)])
    ok = results[0].get("tool_call_id") == CALL_ID and MARKER in str(results[0].get("content"))
    return chat_turn(text=FINAL if ok else MISSED)


def test_gemini_cli_chat_upstream(gemini_cli, upstream, proxy_for, tmp_path):
    up = upstream([Turn(respond=_chat), Turn(respond=_chat)], "gemini-cli-chat")
    px = proxy_for(up, model=MODEL, upstream_model="kimi-like")
    _, info = _run(gemini_cli, tmp_path, px, up)
    first, second = (r.json for r in up.model_requests)
    assert first["model"] == "kimi-like" and first["stream"] is True, info
    assert any(t["function"]["name"] == "run_shell_command" for t in first["tools"]), info
    calls = [m for m in second["messages"] if m.get("tool_calls")]
    assert [tc["id"] for m in calls for tc in m["tool_calls"]] == [CALL_ID], info
    assert calls[0].get("reasoning_content") == REASONING, info  # back from the thoughtSignature
    assert "extra_content" not in calls[0]["tool_calls"][0], info  # the proxy's envelope stays with the proxy
    assert up.errors == [], info


def _responses(req: dict) -> Turn:
    results = _responses_results(req)
    if not results:
        return responses_turn(tool_calls=[ToolCall("run_shell_command", ARGS, id="call_sh_1")])
    ok = results[0].get("call_id") == "call_sh_1" and MARKER in str(results[0].get("output"))
    return responses_turn(text=FINAL if ok else MISSED)


def test_gemini_cli_responses_upstream(gemini_cli, upstream, proxy_for, tmp_path):
    up = upstream([Turn(respond=_responses), Turn(respond=_responses)], "gemini-cli-responses")
    px = proxy_for(up, model=MODEL, protocol="responses", upstream_model="resp-model")
    _, info = _run(gemini_cli, tmp_path, px, up)
    first = up.model_requests[0].json
    assert first["model"] == "resp-model" and first["instructions"], info
    assert up.errors == [], info


def _messages(req: dict) -> MessageTurn:
    results = tool_results(req)
    if not results:
        return MessageTurn(
            [
                thinking(REASONING, "c2lnbmVkLWJ5LWFudGhyb3BpYw=="),
                tool_use("run_shell_command", json.loads(ARGS), "toolu_sh1"),
            ]
        )
    ok = results[0].get("tool_use_id") == "toolu_sh1" and MARKER in json.dumps(results[0])
    return MessageTurn([text_block(FINAL if ok else MISSED)])


def test_gemini_cli_messages_upstream(gemini_cli, proxy_for, tmp_path):
    up = MessagesUpstream([MessageTurn(respond=_messages), MessageTurn(respond=_messages)], name="gc-msg").start()
    try:
        px = proxy_for(up, model=MODEL, profile="anthropic", protocol="messages", upstream_model="claude-like")
        run, info = _run(gemini_cli, tmp_path, px, up)
    finally:
        up.stop()
    first, second = (r.json for r in up.requests)
    assert first["model"] == "claude-like" and first["system"], info
    assert up.errors == [], info
    blocks = [b for m in second["messages"] if m["role"] == "assistant" for b in m["content"]]
    assert blocks[0] == {"type": "thinking", "thinking": REASONING, "signature": "c2lnbmVkLWJ5LWFudGhyb3BpYw=="}, info
    assert blocks[1]["type"] == "tool_use" and blocks[1]["id"] == "toolu_sh1", info


def _native(req: dict) -> NativeTurn:
    results = [p["functionResponse"] for c in req["contents"] for p in c["parts"] if "functionResponse" in p]
    if not results:
        return NativeTurn(thought=REASONING, calls=[("run_shell_command", json.loads(ARGS))])
    ok = results[0].get("name") == "run_shell_command" and MARKER in json.dumps(results[0])
    return NativeTurn(text=FINAL if ok else MISSED)


def test_gemini_cli_native_gemini_upstream(gemini_cli, proxy_for, tmp_path):
    up = NativeGeminiUpstream(_native, key=UPSTREAM_KEY).start()
    try:
        px = proxy_for(up, model=MODEL, profile="gemini", protocol="gemini", upstream_model="gemini-2.5-pro")
        run, info = _run(gemini_cli, tmp_path, px, up)
    finally:
        up.stop()
    first, second = up.model_requests
    assert first.path == "/v1beta/models/gemini-2.5-pro:streamGenerateContent" and first.query == "alt=sse", info
    assert up.rejections == [], info
    calls = [p for c in second.json["contents"] for p in c["parts"] if "functionCall" in p]
    assert [p["thoughtSignature"] for p in calls] == up.issued, info  # Gemini's own, byte for byte


def test_gemini_cli_direct(gemini_cli, tmp_path):
    up = NativeGeminiUpstream(_native, key="direct-key").start()
    try:
        run = run_gemini_cli(
            gemini_cli,
            PROMPT,
            base_url=up.url,
            model=MODEL,
            workspace=tmp_path / "ws",
            home=tmp_path / "home",
            api_key="direct-key",
            timeout=TIMEOUT,
        )
    finally:
        up.stop()
    info = f"{run.describe()}\n{up.describe()}"
    assert not run.timed_out and run.returncode == 0 and run.final_text == FINAL, info
    first, second = up.model_requests
    assert first.path == f"/v1beta/models/{MODEL}:streamGenerateContent" and first.query == "alt=sse", info
    assert first.headers["user-agent"].startswith("GeminiCLI"), info
    calls = [p for c in second.json["contents"] for p in c["parts"] if "functionCall" in p]
    assert [p["thoughtSignature"] for p in calls] == up.issued and up.rejections == [], info
