"""opencode 1.18.33 (the real CLI, pinned by tests/e2e/opencode/package-lock.json) through
Switchboard, and straight to a scripted upstream to record what it sends.

Every run is ``opencode run --format json`` in a throwaway HOME, off the network (see
opencode_harness), with one custom provider: ``chat`` (``@ai-sdk/openai-compatible``, Chat
Completions) or ``responses`` (``@ai-sdk/openai``, the Responses API).  The scripted turn 1
calls opencode's ``bash`` tool (``call_opencode_bash_1``) to write a marker file; turn 2
answers the final text only if that id and the marker came back (scenarios_opencode).

* ``test_opencode_bash``: each provider -> proxy -> a Chat upstream: the command ran in
  the workspace, opencode reports the call completed, the upstream got the call and its
  output, the final text prints.
* ``test_opencode_wire_shape``: no proxy: opencode straight to a scripted upstream of its
  own protocol, to pin what the client sends (headers, top-level fields, tools, history
  items).  The Responses provider sends ``store: false`` (opencode sets it for
  ``@ai-sdk/openai``) and so no ``item_reference``; with the model option ``store: true``
  it refers to turn 1's reasoning and message items by ``item_reference`` (the function
  call itself is still sent inline, without an id).  The bodies are written to
  ``<tmp_path>/opencode-<case>-requests.json``.
* ``test_opencode_responses_store_item_reference``: that ``store: true`` run through the
  proxy (its store in ``tmp_path``) to a Chat upstream: the proxy must resolve the
  ``item_reference``\\ s to the items it stored in turn 1 (turn 2 needs turn 1's text back).
"""

from __future__ import annotations

import json
from functools import partial

import pytest
import scenarios_opencode as sc
from client_checks import types_not_in_policy_table
from opencode_harness import (
    OPENCODE_VERSION,
    PROVIDERS,
    Opencode,
    OpencodeUnavailable,
    ensure_opencode,
    run_opencode,
)
from proxy_harness import PROXY_CLIENT_KEY, REPO, UPSTREAM_KEY, Proxy, provider_entry

pytestmark = pytest.mark.e2e

MODEL = "e2e-opencode"
PROMPT = "Write the marker file with bash, then tell me you are done."
OPENCODE_TIMEOUT = 60  # seconds per opencode run (a passing run takes 3-5 s)
TOOLS = ["bash", "edit", "glob", "grep", "read", "skill", "task", "todowrite", "webfetch", "write"]


@pytest.fixture(scope="session")
def opencode() -> Opencode:
    try:
        return ensure_opencode(REPO)
    except OpencodeUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture
def store_proxy(tmp_path):
    """A proxy whose response store is a SQLite file in ``tmp_path`` (never the user's)."""
    started: list[Proxy] = []

    def start(up) -> Proxy:
        prov = provider_entry(up, protocol="chat")
        cfg = {
            "server": {"host": "127.0.0.1", "port": 0},
            "auth": {"keys": [PROXY_CLIENT_KEY]},
            "store": {"backend": "sqlite", "path": str(tmp_path / "responses.db")},
            "providers": [prov],
            "models": [{"name": MODEL, "provider": prov["name"]}],
        }
        p = Proxy(cfg, tmp_path / f"store-proxy{len(started)}")
        started.append(p)
        return p.start()

    yield start
    for p in started:
        p.stop()


def _run(opencode, tmp_path, provider, base_url, **kw):
    return run_opencode(
        opencode,
        PROMPT,
        provider=provider,
        base_url=base_url,
        model=MODEL,
        workspace=tmp_path / "ws",
        home=tmp_path / "opencode_home",
        api_key=PROXY_CLIENT_KEY,
        timeout=OPENCODE_TIMEOUT,
        **kw,
    )


def _check_run(run, up, endpoint: str, info: str) -> None:
    """What every run must show: off the network, two model calls, the bash call ran, the
    upstream's turn 2 predicate held, the final text printed."""
    assert not run.timed_out, info
    if run.isolation == "netns":
        assert run.interfaces == ["lo"], info  # nothing but loopback inside the namespace
    assert [(r.method, r.endpoint) for r in up.requests] == [("POST", endpoint)] * 2, info
    assert [(u.get("tool"), u.get("callID"), (u.get("state") or {}).get("status")) for u in run.tool_uses] == [
        ("bash", sc.OPENCODE_CALL_ID, "completed")
    ], info
    assert sc.OPENCODE_MARKER in str(run.tool_uses[0]["state"].get("output")), info
    assert (run.workspace / sc.OPENCODE_FILE).read_text() == sc.OPENCODE_MARKER, info
    assert up.model_requests[1].matched is True, info
    assert run.errors == [], info
    assert run.returncode == 0, info
    assert run.final_text == sc.OPENCODE_FINAL, info


def _tool_names(req: dict) -> list[str]:
    return [t.get("name") or (t.get("function") or {}).get("name") for t in req.get("tools") or []]


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_opencode_bash(opencode, upstream, proxy_for, tmp_path, provider):
    up = upstream(sc.opencode_bash("chat", MODEL), f"opencode-{provider}")
    px = proxy_for(up, model=MODEL, protocol="chat")
    run = _run(opencode, tmp_path, provider, px.base_url)
    info = f"{run.describe()}\n{up.describe()}\n--- proxy log ---\n{px.log()}"
    _check_run(run, up, "chat", info)
    assert all(r.headers.get("authorization") == f"Bearer {UPSTREAM_KEY}" for r in up.requests), info
    first, second = (r.json for r in up.model_requests)
    assert _tool_names(first) == TOOLS, info  # opencode's tools reach the upstream
    calls = [tc for m in second["messages"] for tc in m.get("tool_calls") or []]
    assert [(tc["id"], tc["function"]["name"], json.loads(tc["function"]["arguments"])) for tc in calls] == [
        (sc.OPENCODE_CALL_ID, "bash", {"command": sc.OPENCODE_CMD})
    ], info
    outputs = [m for m in second["messages"] if m.get("role") == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in outputs] == [(sc.OPENCODE_CALL_ID, sc.OPENCODE_MARKER)], info


WIRE_CASES = {  # case -> (provider, upstream protocol, scenario, model options)
    "chat": ("chat", "chat", sc.opencode_bash, None),
    "responses": ("responses", "responses", sc.opencode_bash, None),
    # the scripted upstream keeps nothing: turn 2 cannot need the referenced text back
    "responses-store": ("responses", "responses", partial(sc.opencode_bash_rich, text_back=False), {"store": True}),
}


def _item_kind(it: dict) -> str:
    return it.get("type") if it.get("type") not in (None, "message") else f"{it.get('role')} message"


@pytest.mark.parametrize("case", list(WIRE_CASES))
def test_opencode_wire_shape(opencode, upstream, tmp_path, case):
    provider, kind, scenario, options = WIRE_CASES[case]
    turns = scenario(kind, MODEL)
    up = upstream(turns, f"opencode-direct-{case}")
    run = _run(opencode, tmp_path, provider, up.base_url, model_options=options)
    record = [{"path": r.path, "headers": r.headers, "body": r.json} for r in up.model_requests]
    (tmp_path / f"opencode-{case}-requests.json").write_text(json.dumps(record, indent=1, ensure_ascii=False))
    info = f"{run.describe()}\n{up.describe()}\nrecorded: {tmp_path / f'opencode-{case}-requests.json'}"
    _check_run(run, up, kind, info)

    for r in up.model_requests:
        h = r.headers
        assert h.get("authorization") == f"Bearer {PROXY_CLIENT_KEY}", info
        assert h.get("content-type") == "application/json", info
        assert h.get("user-agent", "").startswith(f"opencode/{OPENCODE_VERSION} ai-sdk/provider-utils/"), info
        assert h.get("x-session-id", "").startswith("ses_") and h.get("x-session-affinity") == h["x-session-id"], info
        assert _tool_names(r.json) == TOOLS, info
        assert types_not_in_policy_table(r.json) == [], info
        assert r.json["model"] == MODEL and r.json["stream"] is True and r.json["tool_choice"] == "auto", info
    first, second = (r.json for r in up.model_requests)

    if kind == "chat":
        assert sorted(first) == sorted(
            ["model", "max_tokens", "messages", "tools", "tool_choice", "stream", "stream_options"]
        ), info
        assert first["stream_options"] == {"include_usage": True} and first["max_tokens"] == 8192, info
        assert all(
            t["type"] == "function" and set(t["function"]) == {"name", "description", "parameters"}
            for t in first["tools"]
        ), info
        assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"], info
        return

    session = up.model_requests[0].headers["x-session-id"]
    assert sorted(first) == sorted(
        ["model", "input", "max_output_tokens", "store", "prompt_cache_key", "tools", "tool_choice", "stream"]
    ), info
    assert first["store"] is bool(options and options.get("store")), info
    assert first["prompt_cache_key"] == session and first["max_output_tokens"] == 8192, info
    assert all(set(t) == {"type", "name", "description", "parameters", "strict"} for t in first["tools"]), info
    assert all(t["type"] == "function" and t["strict"] is False for t in first["tools"]), info
    items = second["input"]
    call = next(it for it in items if it.get("type") == "function_call")
    # inline and without an item id, whatever store says
    assert sorted(call) == ["arguments", "call_id", "name", "type"], info
    assert (call["call_id"], call["name"], json.loads(call["arguments"])) == (
        sc.OPENCODE_CALL_ID,
        "bash",
        {"command": sc.OPENCODE_CMD},
    ), info
    if case == "responses":
        assert [_item_kind(it) for it in items] == [
            "system message",
            "user message",
            "function_call",
            "function_call_output",
        ], info
        return
    # store: true: turn 1's reasoning and message items come back as references to their ids
    completed = [f for f in turns[0].frames if isinstance(f, dict) and f.get("type") == "response.completed"]
    stored = [it["id"] for it in completed[-1]["response"]["output"] if it["type"] in ("reasoning", "message")]
    assert [_item_kind(it) for it in items] == [
        "system message",
        "user message",
        "item_reference",
        "item_reference",
        "function_call",
        "function_call_output",
    ], info
    assert [it["id"] for it in items if it.get("type") == "item_reference"] == stored, info


def test_opencode_responses_store_item_reference(opencode, upstream, store_proxy, tmp_path):
    """opencode's Responses provider with ``store: true`` -> proxy -> Chat upstream: turn 2
    refers to turn 1's reasoning and message items (``item_reference``); the proxy must
    answer from its store, so the upstream gets turn 1's text, the call and its output."""
    up = upstream(sc.opencode_bash_rich("chat", MODEL), "opencode-responses-store")
    px = store_proxy(up)
    run = _run(opencode, tmp_path, "responses", px.base_url, model_options={"store": True})
    info = f"{run.describe()}\n{up.describe()}\n--- proxy log ---\n{px.log()}"
    _check_run(run, up, "chat", info)
    second = up.model_requests[1].json
    assistant = [m for m in second["messages"] if m.get("role") == "assistant"]
    assert [m.get("content") for m in assistant] == [sc.OPENCODE_TEXT], info
    assert [tc["id"] for m in assistant for tc in m.get("tool_calls") or []] == [sc.OPENCODE_CALL_ID], info
