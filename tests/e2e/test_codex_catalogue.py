"""Codex with its catalogue from the proxy alone: a custom provider with
``model_catalog_url = "<proxy>/v1/models"`` and no ``model_catalog_json``.

Codex fetches ``GET /v1/models?client_version=<its version>`` with the client key, and the
answer is its whole catalogue (its own entries are gone; one entry it cannot decode empties
it).  Code mode on 0.171; the catalogue and apply_patch on 0.169 and 0.171.

  catalogue    ``codex debug models`` (the catalogue Codex ends up with) lists exactly the
               models the client key may use, each with the proxy's settings; a model of
               another key is not there
  code mode    a routed model on a Chat upstream runs code mode: ``gpt-5.6-sol`` on an
               ``openai-compatible`` upstream by the facts alone, ``kimi-k2.6`` on a ``kimi``
               upstream by its ``codex:`` block.  ``exec`` is offered as a one-string
               function, Codex runs the script, the output comes back under the call id
  apply_patch  another routed model (``glm-5``, no ``codex:`` block) gets ordinary tools with
               ``apply_patch`` as a freeform tool: offered upstream as a one-string function,
               the patch the upstream sends is applied by Codex, the file written

Every URL Codex is given is on 127.0.0.1, and the scripted upstreams record what they got.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import codex_harness
import pytest
import scenarios as sc
import scenarios_code_mode as cm
from proxy_harness import PROXY_CLIENT_KEY, UPSTREAM_KEY, provider_entry

pytestmark = pytest.mark.e2e

TEAM_KEY = "sk-e2e-team"  # Codex's key: it may use the models of TEAM_MODELS only
PATCH_MODEL = "glm-5"
HIDDEN_MODEL = "other-team-model"
CODE_MODE = {
    "facts": {"model": cm.CODE_MODE_SLUG, "profile": "openai-compatible", "kimi": False, "codex": None},
    "block": {"model": cm.CUSTOM_SLUG, "profile": "kimi", "kimi": True, "codex": {"tool_mode": "code_mode_only"}},
}
TEAM_MODELS = [PATCH_MODEL, cm.CODE_MODE_SLUG, cm.CUSTOM_SLUG]


@pytest.fixture
def codex171(codex_at) -> Path:
    return codex_at(cm.CODE_MODE_VERSION)


def start_proxy(proxy, ups: dict[str, tuple[object, str]], codex_blocks: dict[str, dict]) -> object:
    """One proxy for every model (its own scripted upstream each), and two client keys: the
    harness's (every model) and Codex's (``TEAM_MODELS``)."""
    providers, models = [], []
    for model, (up, profile) in ups.items():
        prov = provider_entry(up, name=f"up-{len(providers)}", profile=profile, protocol="chat")
        providers.append(prov)
        models.append(
            {
                "name": model,
                "provider": prov["name"],
                **({"codex": codex_blocks[model]} if model in codex_blocks else {}),
            }
        )
    keys = [PROXY_CLIENT_KEY, {"name": "team", "key": TEAM_KEY, "limits": {"models": TEAM_MODELS}}]
    return proxy(providers=providers, models=models, auth_keys=keys, server={"websocket": {"enabled": False}})


def run_codex(launcher: Path, tmp_path: Path, px, model: str, prompt: str) -> codex_harness.CodexRun:
    assert px.base_url.startswith("http://127.0.0.1:"), px.base_url
    run = codex_harness.run_codex(
        launcher, prompt, base_url=px.base_url, model=model, workspace=tmp_path / "ws", home=tmp_path / "home",
        api_key=TEAM_KEY, catalog=None, catalog_url=f"{px.base_url}/models", timeout=60,
    )  # fmt: skip
    config = (run.home / "config.toml").read_text()
    assert "model_catalog_json" not in config and not (run.home / "models.json").exists()
    return run


def catalogue_fetches(px) -> list[dict]:
    """The proxy's log lines of Codex's catalogue requests (``codex_catalogue``)."""
    out = []
    for line in px.log(tail=400_000).splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("event") == "codex_catalogue":
            out.append(rec)
    return out


def info_of(run, ups, px) -> str:
    return "\n".join([run.describe(), *(up.describe() for up in ups), "--- proxy log ---", px.log()])


@pytest.mark.parametrize("version", codex_harness.CODEX_VERSIONS)
def test_codex_catalogue_is_the_keys_models(upstream, proxy, codex_at, tmp_path, version):
    up = upstream([], "catalogue")
    px = start_proxy(
        proxy,
        {PATCH_MODEL: (up, "openai-compatible"), cm.CODE_MODE_SLUG: (up, "openai-compatible"),
         cm.CUSTOM_SLUG: (up, "kimi"), HIDDEN_MODEL: (up, "openai-compatible")},
        {cm.CUSTOM_SLUG: {"tool_mode": "code_mode_only", "reasoning_levels": ["low", "high"]}},
    )  # fmt: skip
    home = tmp_path / "home"
    codex_harness.write_codex_home(
        home, base_url=px.base_url, model=PATCH_MODEL, catalog=None, catalog_url=f"{px.base_url}/models"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    env.update({"CODEX_HOME": str(home), "SWITCHBOARD_E2E_KEY": TEAM_KEY, "NO_PROXY": "127.0.0.1"})
    done = subprocess.run(
        [str(codex_at(version)), "debug", "models"], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    info = f"{done.stderr[-3000:]}\n--- proxy log ---\n{px.log()}"
    assert done.returncode == 0, info
    got = {m["slug"]: m for m in json.loads(done.stdout)["models"]}
    assert list(got) == TEAM_MODELS, (list(got), info)  # the proxy's answer is the whole catalogue
    assert got[cm.CODE_MODE_SLUG]["tool_mode"] == "code_mode_only" and got[cm.CODE_MODE_SLUG]["use_responses_lite"]
    assert got[cm.CODE_MODE_SLUG]["context_window"] == 272_000
    assert got[cm.CUSTOM_SLUG]["context_window"] == 262_144 and got[cm.CUSTOM_SLUG]["tool_mode"] == "code_mode_only"
    assert [lvl["effort"] for lvl in got[cm.CUSTOM_SLUG]["supported_reasoning_levels"]] == ["low", "high"]
    assert got[PATCH_MODEL].get("tool_mode") is None and got[PATCH_MODEL]["apply_patch_tool_type"] == "freeform"
    assert got[PATCH_MODEL]["context_window"] == 200_000
    fetches = catalogue_fetches(px)
    assert fetches and {(f["key_name"], f["client_version"], f["models"]) for f in fetches} == {
        ("team", version, len(TEAM_MODELS))
    }, info


@pytest.mark.parametrize("case", list(CODE_MODE))
def test_code_mode_on_a_chat_upstream_with_the_proxys_catalogue(upstream, proxy, codex171, tmp_path, case):
    c = CODE_MODE[case]
    up = upstream(cm.code_mode_chat(c["model"], kimi=c["kimi"]), f"catalogue-code-mode-{case}")
    other = upstream([], "catalogue-other")
    ups = {c["model"]: (up, c["profile"]), PATCH_MODEL: (other, "openai-compatible")}
    px = start_proxy(proxy, ups, {c["model"]: c["codex"]} if c["codex"] else {})
    run = run_codex(codex171, tmp_path, px, c["model"], "echo the marker")
    info = info_of(run, [up], px)
    assert [(f["key_name"], f["client_version"]) for f in catalogue_fetches(px)][:1] == [
        ("team", cm.CODE_MODE_VERSION)
    ], info
    assert up.model_requests and up.model_requests[0].path == "/v1/chat/completions", info
    first = up.model_requests[0].json
    assert "additional_tools" not in json.dumps(first), info  # Codex sent code mode; translated
    name, param = cm.chat_exec_tool(first)
    names = [t["function"]["name"] for t in first.get("tools") or []]
    assert "exec_command" not in names and "apply_patch" not in names, (names, info)  # code mode: nested
    assert run.returncode == 0 and run.turn_completed and not up.errors, info
    assert [r.matched for r in up.model_requests] == [True, True], info
    assert run.final_message == cm.FINAL_TEXT, info
    outs = [x.get("aggregated_output") or "" for x in run.command_executions]
    assert len(outs) == 1 and cm.MARKER in outs[0], info
    call_id = cm.kimi_call_id(name) if c["kimi"] else cm.CALL_ID
    assert cm.MARKER in cm.tool_outputs(up.model_requests[1].json)[call_id], info
    for r in up.model_requests:
        assert r.headers.get("authorization") == f"Bearer {UPSTREAM_KEY}", info
    assert not other.requests, info


@pytest.mark.parametrize("version", codex_harness.CODEX_VERSIONS)
def test_apply_patch_on_a_chat_upstream_with_the_proxys_catalogue(upstream, proxy, codex_at, tmp_path, version):
    up = upstream(sc.codex_chat_json_patch(PATCH_MODEL), "catalogue-apply-patch")
    other = upstream([], "catalogue-other")
    px = start_proxy(proxy, {PATCH_MODEL: (up, "openai-compatible"), cm.CUSTOM_SLUG: (other, "kimi")}, {})
    run = run_codex(codex_at(version), tmp_path, px, PATCH_MODEL, "add the notes file")
    info = info_of(run, [up], px)
    assert [(f["key_name"], f["client_version"]) for f in catalogue_fetches(px)][:1] == [("team", version)], info
    first = up.model_requests[0].json
    tools = {t["function"]["name"]: t["function"] for t in first.get("tools") or [] if t.get("type") == "function"}
    assert "exec_command" in tools and "functions__exec" not in tools, (list(tools), info)  # ordinary tools
    ap = tools["apply_patch"]["parameters"]  # Codex's freeform tool, as a one-string function
    assert ap["required"] == ["input"] and ap["properties"]["input"]["type"] == "string", info
    assert run.returncode == 0 and run.turn_completed and not up.errors, info
    assert [r.turn for r in up.model_requests] == [0, 1] and up.model_requests[1].matched is True, info
    assert run.final_message == sc.FINAL_TEXT["json_patch"], info
    assert (run.workspace / sc.PATCH_FILE).read_bytes() == sc.PATCH_EXPECTED_BYTES, info
    # the instructions Codex put first: the proxy's entry's base instructions
    dev = [m for m in first["messages"] if m.get("role") in ("system", "developer")]
    assert dev and "coding agent running in the Codex CLI" in json.dumps(dev), info
    assert not other.requests, info
