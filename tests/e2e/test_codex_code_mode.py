"""Codex 0.171 code mode (``use_responses_lite`` + ``tool_mode: "code_mode_only"``) with the
built-in ``openai`` provider, ``openai_base_url`` on 127.0.0.1.

  direct     Codex -> the scripted upstream (Responses), no proxy: proves the script and
             records the wire shape (no top-level ``tools``; ``input[0]`` an
             ``additional_tools`` item; the follow-up carries ``custom_tool_call`` with
             ``namespace: "functions"`` and its ``custom_tool_call_output``; no
             ``GET /models``); writes ``tests/fixtures/codex_0.171_code_mode_request.json``
             when missing or with ``E2E_UPDATE_FIXTURES=1``, else compares its shape
  chat       Codex -> Switchboard -> a Chat upstream (``openai-compatible`` with the
             embedded slug ``gpt-5.6-sol``; ``kimi`` with ``kimi-k2.6`` made code-mode by a
             custom catalogue entry): ``exec`` is offered as a one-string function under a
             flat name; the upstream calls it with ``{"input": script}``; Codex runs the
             script (``tools.exec_command`` -> ``echo``), the output comes back under the
             call id, the final text prints
  responses  Codex -> Switchboard -> a non-OpenAI Responses upstream (``openai-compatible``,
             protocol responses): the ``additional_tools`` item is gone and its tools are
             top-level; the upstream's namespaced ``custom_tool_call`` runs in Codex

Each proxied case runs over the WebSocket (what the built-in provider speaks first) and over
HTTP (the proxy's WebSocket turned off: a 426, Codex falls back at once).  Codex runs as the
rest of the suite does (no network namespace in ``codex_harness``); every URL it is given is
on 127.0.0.1 and the scripted upstream records everything it asked for.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import codex_harness
import pytest
import scenarios_code_mode as cm
from proxy_harness import PROXY_CLIENT_KEY, REPO, UPSTREAM_KEY, proxy_python

pytestmark = pytest.mark.e2e

FIXTURE = REPO / "tests" / "fixtures" / "codex_0.171_code_mode_request.json"
PROMPT = "echo the marker"
TRANSPORTS = {"websocket": None, "http": {"websocket": {"enabled": False}}}


@pytest.fixture
def codex171(codex_at) -> Path:
    return codex_at(cm.CODE_MODE_VERSION)


def proxy_catalog(launcher: Path, px, tmp_path: Path) -> dict:
    """The operator's recipe (docs/clients.md, "Codex's model catalogue"): Codex's own
    catalogue (``codex debug models --bundled``) plus the proxy config's ``codex:`` blocks,
    written by ``switchboard codex-catalog``."""
    home = tmp_path / "catalog_home"
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CODEX_HOME": str(home)}
    bundled = subprocess.run(
        [str(launcher), "debug", "models", "--bundled"], env=env, capture_output=True, text=True, timeout=60
    )
    assert bundled.returncode == 0, bundled.stderr[-2000:]
    base = tmp_path / "codex-bundled.json"
    base.write_text(bundled.stdout, encoding="utf-8")
    out = subprocess.run(
        [str(proxy_python()), "-m", "app.cli", "codex-catalog", "--config", str(px.cfg_path), "--base", str(base)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def run_codex(launcher: Path, tmp_path: Path, *, base_url: str, model: str, px=None) -> codex_harness.CodexRun:
    """The built-in provider at ``base_url``; the embedded catalogue for its own slugs, the
    proxy's ``codex-catalog`` (from ``px``'s config) for any other."""
    catalog = None
    if model != cm.CODE_MODE_SLUG:
        assert px is not None
        catalog = proxy_catalog(launcher, px, tmp_path)
    assert base_url.startswith("http://127.0.0.1:"), base_url
    return codex_harness.run_codex(
        launcher,
        PROMPT,
        base_url=base_url,
        model=model,
        workspace=tmp_path / "ws",
        home=tmp_path / "codex_home",
        catalog=catalog,
        api_key=PROXY_CLIENT_KEY,
        provider="openai",
        timeout=60,
    )


def assert_turn_done(run, up, info) -> None:
    assert run.returncode == 0 and not run.timed_out, info
    assert run.turn_completed, info
    assert not up.errors, info
    assert [r.turn for r in up.model_requests] == [0, 1], info
    assert [r.matched for r in up.model_requests] == [True, True], info
    assert run.final_message == cm.FINAL_TEXT, info
    # the nested tools.exec_command call shows as a command execution of its own
    outs = [c.get("aggregated_output") or "" for c in run.command_executions]
    assert len(outs) == 1 and cm.MARKER in outs[0], info
    assert not [r for r in up.requests if r.method == "GET"], info  # no /models, nothing else


# --------------------------------------------------------------------------- direct


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def scrub(body: dict, run) -> dict:
    """The request without this run's paths and ids (uuids renumbered, consistently)."""
    text = json.dumps(body, ensure_ascii=False)
    for path, alias in ((run.workspace, "/workspace"), (run.home, "/codex-home")):
        text = text.replace(json.dumps(str(path))[1:-1], alias).replace(str(path), alias)
    seen: dict[str, str] = {}
    text = _UUID.sub(lambda m: seen.setdefault(m.group(0), f"00000000-0000-7000-8000-{len(seen) + 1:012d}"), text)
    return json.loads(text)


def shape(body: dict) -> dict:
    """What the fixture comparison holds Codex to: keys, item types, the tools' structure."""
    at = cm.additional_tools_items(body)
    return {
        "keys": sorted(body),
        "items": [(i.get("type"), i.get("role")) for i in body["input"]],
        "additional_tools": [
            (t.get("type"), t.get("name"), [(c.get("type"), c.get("name")) for c in t.get("tools") or []])
            for it in at
            for t in it.get("tools") or []
        ],
        "exec_format": (cm.responses_exec_tool(body, where="additional_tools") or {}).get("format"),
        "tool_choice": body.get("tool_choice"),
        "parallel_tool_calls": body.get("parallel_tool_calls"),
    }


def test_code_mode_direct_request_shape(codex171, tmp_path):
    up = cm.RefusingWebSocketUpstream(cm.code_mode_responses(where="additional_tools"), name="code-mode-direct")
    up.start()
    try:
        run = run_codex(codex171, tmp_path, base_url=up.base_url, model=cm.CODE_MODE_SLUG)
    finally:
        up.stop()
    info = f"{run.describe()}\n{up.describe()}"
    assert_turn_done(run, up, info)
    assert up.ws_refused == 1, info  # one 426, then HTTP
    first, second = up.model_requests
    for r in (first, second):
        assert r.path == "/v1/responses", info
        assert r.headers.get("x-openai-internal-codex-responses-lite") == "true", info
        assert r.headers.get("user-agent", "").startswith(f"codex_exec/{cm.CODE_MODE_VERSION}"), info
    body = first.json
    assert "tools" not in body and "instructions" not in body, info
    assert body["tool_choice"] == "auto" and body["parallel_tool_calls"] is False, info
    assert body["reasoning"] == {"effort": "low", "context": "all_turns"}, info
    at = body["input"][0]
    assert at["type"] == "additional_tools" and at["role"] == "developer", info
    assert len(cm.additional_tools_items(body)) == 1, info
    namespaces = {t["name"]: t for t in at["tools"]}
    assert [t["type"] for t in at["tools"]] == ["namespace"] * len(at["tools"]), info
    assert [(c["type"], c["name"]) for c in namespaces[cm.NS]["tools"]] == [
        ("custom", "exec"),
        ("function", "wait"),
        ("function", "request_user_input"),
    ], info
    exec_tool = cm.responses_exec_tool(body, where="additional_tools")
    assert exec_tool["description"].startswith("Run JavaScript code"), info
    assert "exec_command(args" in exec_tool["description"], info  # the nested tools are documented in it
    assert exec_tool["format"]["type"] == "grammar" and exec_tool["format"]["syntax"] == "lark", info
    assert {i["type"] for i in body["input"][1:]} == {"message"}, info
    # the follow-up: the same prefix, then the call (namespace kept) and its output
    tail = second.json["input"][len(body["input"]) :]
    assert [i["type"] for i in tail] == ["reasoning", "custom_tool_call", "custom_tool_call_output"], info
    call, out = tail[1], tail[2]
    assert (call["call_id"], call["name"], call.get("namespace"), call["input"]) == (
        cm.CALL_ID,
        cm.EXEC,
        cm.NS,
        cm.EXEC_SCRIPT,
    ), info
    assert out["call_id"] == cm.CALL_ID and isinstance(out["output"], list), info
    assert [p["type"] for p in out["output"]] == ["input_text"] * len(out["output"]), info
    assert out["output"][0]["text"].startswith("Script completed"), info

    recorded = scrub(second.json, run)
    if os.environ.get("E2E_UPDATE_FIXTURES") == "1" or not FIXTURE.exists():
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(json.dumps(recorded, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    fixture = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert shape(recorded) == shape(fixture), "Codex code-mode request drifted; rerun with E2E_UPDATE_FIXTURES=1"


# --------------------------------------------------------------------------- through the proxy


def _info(run, up, px) -> str:
    return f"{run.describe()}\n{up.describe()}\n--- proxy log ---\n{px.log()}"


def _upstream_key_only(up, info) -> None:
    for r in up.model_requests:
        assert r.headers.get("authorization") == f"Bearer {UPSTREAM_KEY}", info
        assert PROXY_CLIENT_KEY not in json.dumps(r.headers), info


CODE_MODE_BLOCK = {"codex": {"tool_mode": "code_mode_only", "apply_patch_tool_type": "freeform"}}
CHAT_CASES = {
    "openai-compatible": {"model": cm.CODE_MODE_SLUG, "profile": "openai-compatible", "kimi": False},
    "kimi": {"model": cm.CUSTOM_SLUG, "profile": "kimi", "kimi": True, "model_extra": CODE_MODE_BLOCK},
}


@pytest.mark.parametrize("transport", list(TRANSPORTS))
@pytest.mark.parametrize("case", list(CHAT_CASES))
def test_code_mode_chat_upstream(upstream, proxy_for, codex171, tmp_path, case, transport):
    c = CHAT_CASES[case]
    up = upstream(cm.code_mode_chat(c["model"], kimi=c["kimi"]), f"code-mode-chat-{case}")
    px = proxy_for(
        up, model=c["model"], profile=c["profile"], protocol="chat", server=TRANSPORTS[transport],
        model_extra=c.get("model_extra"),
    )  # fmt: skip
    run = run_codex(codex171, tmp_path, base_url=px.base_url, model=c["model"], px=px)
    info = _info(run, up, px)
    assert up.model_requests and up.model_requests[0].path == "/v1/chat/completions", info
    first = up.model_requests[0].json
    assert "additional_tools" not in json.dumps(first), info  # translated, not passed on
    try:
        name, param = cm.chat_exec_tool(first)  # offered once, as a one-string function
    except LookupError as exc:
        pytest.fail(f"{exc}\n{info}")
    assert len(name) <= 64, info
    assert_turn_done(run, up, info)
    _upstream_key_only(up, info)
    call_id = cm.kimi_call_id(name) if c["kimi"] else cm.CALL_ID
    # the call goes back under the advertised name with the script as its one argument
    second = up.model_requests[1].json
    asst = [m for m in second["messages"] if m.get("tool_calls")]
    assert len(asst) == 1 and len(asst[0]["tool_calls"]) == 1, info
    tc = asst[0]["tool_calls"][0]
    assert tc["id"] == call_id and tc["function"]["name"] == name, info
    assert json.loads(tc["function"]["arguments"]) == {param: cm.EXEC_SCRIPT}, info
    tool_msgs = [m for m in second["messages"] if m.get("role") == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == [call_id], info
    assert cm.MARKER in cm.tool_outputs(second)[call_id], info
    if c["kimi"]:  # Kimi thinking mode: the replayed tool-call message carries its reasoning
        assert asst[0].get("reasoning_content") == cm.REASONING, info
    seen = _transports(px)
    assert len(seen) == 2 and set(seen) == {transport}, (seen, info)


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_code_mode_responses_upstream(upstream, proxy_for, codex171, tmp_path, transport):
    model = cm.CODE_MODE_SLUG
    up = upstream(cm.code_mode_responses(model, where="tools"), "code-mode-responses")
    px = proxy_for(up, model=model, profile="openai-compatible", protocol="responses", server=TRANSPORTS[transport])
    run = run_codex(codex171, tmp_path, base_url=px.base_url, model=model)
    info = _info(run, up, px)
    assert up.model_requests and up.model_requests[0].path == "/v1/responses", info
    first = up.model_requests[0].json
    assert not cm.additional_tools_items(first), info  # hoisted
    exec_tool = cm.responses_exec_tool(first, where="tools")
    assert exec_tool is not None and exec_tool["format"]["syntax"] == "lark", info
    assert_turn_done(run, up, info)
    _upstream_key_only(up, info)
    second = up.model_requests[1].json
    assert not cm.additional_tools_items(second), info
    assert cm.responses_exec_tool(second, where="tools") is not None, info
    calls = [i for i in second["input"] if i.get("type") == "custom_tool_call"]
    outs = [i for i in second["input"] if i.get("type") == "custom_tool_call_output"]
    assert [(i["call_id"], i["name"], i["input"]) for i in calls] == [(cm.CALL_ID, cm.EXEC, cm.EXEC_SCRIPT)], info
    assert calls[0].get("namespace") in (cm.NS, None), info
    assert [i["call_id"] for i in outs] == [cm.CALL_ID], info
    assert cm.MARKER in cm.tool_outputs(second)[cm.CALL_ID], info
    seen = _transports(px)
    assert len(seen) == 2 and set(seen) == {transport}, (seen, info)


def _transports(px) -> list[str]:
    """The transport of every request the proxy answered from an upstream (its JSON log)."""
    out = []
    for line in px.log(tail=400_000).splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("event") == "request" and rec.get("stream") is not None:
            out.append(rec.get("transport"))
    return out


def test_codex_catalog_without_code_mode_gives_ordinary_tools(upstream, proxy_for, codex171, tmp_path):
    """The same routed model with ``codex: {tool_mode: null}`` in the proxy's config: Codex
    sends ordinary top-level tools (apply_patch freeform among them), no additional_tools."""
    model = cm.CUSTOM_SLUG
    up = upstream(cm.code_mode_chat(model, kimi=True), "catalog-no-code-mode")
    px = proxy_for(
        up, model=model, profile="kimi", protocol="chat", server=TRANSPORTS["http"],
        model_extra={"codex": {"tool_mode": None, "apply_patch_tool_type": "freeform", "context_window": 131072}},
    )  # fmt: skip
    catalog = proxy_catalog(codex171, px, tmp_path)
    entry = next(m for m in catalog["models"] if m["slug"] == model)
    assert entry["tool_mode"] is None and entry["use_responses_lite"] is False and entry["context_window"] == 131072
    run = run_codex(codex171, tmp_path, base_url=px.base_url, model=model, px=px)
    info = _info(run, up, px)
    assert up.model_requests, info
    first = up.model_requests[0].json
    names = [t["function"]["name"] for t in first.get("tools") or []]
    assert "exec_command" in names and "apply_patch" in names, (names, info)
    assert "functions__exec" not in names, info
