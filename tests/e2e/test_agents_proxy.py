"""openai-agents SDK -> Switchboard -> scripted upstream.

The real Agents SDK (``requirements-agents.lock``, installed into ``.e2e/agents`` by a session
fixture) runs an agent with one ``exec_command`` function tool through the proxy
(``agents_checks.py`` in that venv's python):

* ``test_agents_run``: ``Runner.run`` (``OpenAIResponsesModel``), ``Runner.run_streamed``
  consuming ``stream_events()``, and ``Runner.run`` with ``OpenAIChatCompletionsModel``, each
  against a Chat and a Responses upstream: the tool call, then the final text once the
  upstream got the call and its output back (2 upstream turns);
* ``test_agents_chained``: two ``Runner.run`` calls chained by ``previous_response_id`` (the
  first with ``auto_previous_response_id=True``, so its second model call is chained too; the
  second with the first's ``last_response_id``): every continuation reaches a Chat upstream,
  or a Responses upstream that keeps nothing, expanded from the proxy's store (the
  whole conversation, in order, no ``previous_response_id``); a Responses upstream with
  ``upstream_store`` gets the id passed through and only the new items.

Each test checks the final text, that the tool ran exactly once per run (the command's
file is there), the upstream's requests (endpoint, key, stream flag, predicates) and what
the SDK itself put on the wire (read off its HTTP client: no ``store``, ``include: []``,
``previous_response_id`` only when chained).

One proxy process serves the module (``scenarios_messages.stage_fixture``, its store a
SQLite file in the module's temporary folder), in front of one scripted upstream per kind
in ``UPSTREAMS``, each its own provider under its own model name, re-scripted per test; one
driver process (``agents_checks.py --serve``, ``procs.JobServer``) runs every test's case,
each with its own client and agent, so the Agents SDK is imported once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import scenarios_agents as sa
from client_checks import SdkUnavailable, _ensure_sdk, types_not_in_policy_table
from procs import JobServer, installing
from proxy_harness import PROXY_CLIENT_KEY, REPO, UPSTREAM_KEY, Proxy
from scenarios import EXEC_CMD, EXEC_FILE, EXEC_MARKER
from scenarios_messages import Route, stage_fixture

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
AGENTS_LOCK = HERE / "requirements-agents.lock"
AGENTS_CHECKS = HERE / "agents_checks.py"
MODEL = "e2e-agents"  # the prefix of each upstream kind's model name
RUN_TIMEOUT = 45  # seconds for one job of the driver (its own deadline is 30 s)
ONE_CALL = [{"cmd": EXEC_CMD, "output": EXEC_MARKER}]

UPSTREAMS = {
    # name: (upstream protocol, provider extras)
    "chat": ("chat", {}),
    "responses": ("responses", {}),
    "responses-keeps": ("responses", {"upstream_store": True}),
}


def model_of(kind: str) -> str:
    return f"{MODEL}-{kind}"


_stage = stage_fixture(
    *(
        Route(
            model_of(kind),
            profile="openai-compatible",
            protocol=protocol,
            kind=protocol,
            provider_extra=tuple(extra.items()),
        )
        for kind, (protocol, extra) in UPSTREAMS.items()
    )
)


def locked_agents_version() -> str:
    for line in AGENTS_LOCK.read_text().splitlines():
        if line.startswith("openai-agents=="):
            return line.removeprefix("openai-agents==").split()[0]
    raise AssertionError(f"{AGENTS_LOCK} pins no openai-agents release")


@pytest.fixture(scope="session")
def agents_python() -> Path:
    """The python of ``<repo>/.e2e/agents``, where the hash-locked openai-agents is installed on
    first use (under ``procs.installing``, as the openai SDK venvs)."""
    home = REPO / ".e2e" / "agents"
    try:
        with installing(home):
            return _ensure_sdk(home, AGENTS_LOCK)
    except SdkUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def agents_driver(agents_python) -> Iterator[JobServer]:
    """``agents_checks.py --serve`` under the Agents SDK's python: one driver for the module."""
    driver = JobServer([str(agents_python), str(AGENTS_CHECKS), "--serve"])
    yield driver
    driver.close()


def run_agents(driver: JobServer, case: str, px: Proxy, model: str, workdir: Path) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    job = {
        "case": case,
        "base_url": px.base_url,
        "api_key": PROXY_CLIENT_KEY,
        "model": model,
        "prompts": sa.AGENTS_PROMPTS,
        "workdir": str(workdir),
        "timeout": 20,
        "deadline": 30,
    }
    try:
        return driver.run(job, timeout=RUN_TIMEOUT)
    except RuntimeError as exc:
        return {"exception": f"agents_checks: {exc}", "wire": []}


def describe(got: dict, up, stage, mark: int) -> str:
    """Everything a failure needs: the driver's summary, what the SDK sent, what the upstream
    got, the proxy log."""
    wire = "\n".join(
        f"  {w['method']} {w['path']} {json.dumps(w['json'], ensure_ascii=False)[:1500]}" for w in got.get("wire", [])
    )
    ups = "\n".join(
        f"  #{i} turn={r.turn} matched={r.matched} {json.dumps(r.json, ensure_ascii=False)[:2500]}"
        for i, r in enumerate(up.model_requests)
    )
    head = {k: v for k, v in got.items() if k != "wire"}
    return (
        f"driver: {json.dumps(head, ensure_ascii=False)[:4000]}\n--- SDK wire ---\n{wire}\n"
        f"--- upstream ---\n{up.describe()}\n{ups}\n--- proxy log ---\n{stage.log_since(mark)}"
    )


def check_upstream(up, protocol: str, n: int, stream: bool, info: str) -> None:
    assert len(up.model_requests) == n and not up.errors, info
    assert all(r.matched is not False for r in up.model_requests), info
    for r in up.model_requests:
        assert r.endpoint == protocol, info
        assert r.headers.get("authorization") == f"Bearer {UPSTREAM_KEY}", info
        assert bool(r.json.get("stream")) is stream, info


def check_tool_ran(run: dict, workdir: Path, info: str) -> None:
    assert run["tool_calls"] == ONE_CALL, info  # exactly once, with the scripted command
    assert (workdir / EXEC_FILE).read_text() == EXEC_MARKER, info
    assert run["items"].count("tool_call_item") == 1 and run["items"].count("tool_call_output_item") == 1, info


@pytest.mark.parametrize("upstream_kind", ["chat", "responses"])
@pytest.mark.parametrize("case", ["run", "streamed", "chat_model"])
def test_agents_run(stage, agents_driver, tmp_path, case, upstream_kind):
    protocol, _ = UPSTREAMS[upstream_kind]
    model = model_of(upstream_kind)
    up, mark = stage.script(model, sa.agents_exec(protocol, model=model)), stage.mark()
    got = run_agents(agents_driver, case, stage.proxy, model, tmp_path / "ws")
    info = describe(got, up, stage, mark)
    assert "exception" not in got, info
    assert got["sdk"] == locked_agents_version(), info
    check_upstream(up, protocol, 2, case == "streamed", info)

    (run,) = got["runs"]
    assert run["final"] == sa.AGENTS_FINAL[0], info
    check_tool_ran(run, tmp_path / "ws", info)
    assert run["items"][-1] == "message_output_item", info

    # what the SDK sent: two stateless requests, the second with the call and its output
    client_api = "chat" if case == "chat_model" else "responses"
    wire = got["wire"]
    assert [w["path"] for w in wire] == [f"/v1/{'chat/completions' if client_api == 'chat' else 'responses'}"] * 2
    for w in wire:
        body = w["json"]
        assert "store" not in body and "previous_response_id" not in body, info
        assert types_not_in_policy_table(body) == [], info
        assert bool(body.get("stream")) is (case == "streamed"), info
        if client_api == "responses":
            assert body["include"] == [], info
    assert sa.ran(sa.AGENTS_IDS[0])(wire[1]["json"]), info

    if case == "streamed":
        ev = run["events"]
        assert run["delta_text"] == sa.AGENTS_FINAL[0], info
        assert ev.count("response.completed") == 2, info
        assert ev.count("item:tool_called") == 1 and ev.count("item:tool_output") == 1, info
        assert ev.index("item:tool_output") < ev.index("response.output_text.delta"), info
        assert ev[-1] == "item:message_output_created", info


@pytest.mark.parametrize("upstream_kind", ["chat", "responses", "responses-keeps"])
def test_agents_chained(stage, agents_driver, tmp_path, upstream_kind):
    protocol, extra = UPSTREAMS[upstream_kind]
    keeps = bool(extra.get("upstream_store"))
    model = model_of(upstream_kind)
    up, mark = stage.script(model, sa.agents_chained(protocol, model=model, upstream_keeps=keeps)), stage.mark()
    got = run_agents(agents_driver, "chained", stage.proxy, model, tmp_path / "ws")
    info = describe(got, up, stage, mark)
    assert "exception" not in got, info
    check_upstream(up, protocol, 4, False, info)

    r1, r2 = got["runs"]
    assert (r1["final"], r2["final"]) == tuple(sa.AGENTS_FINAL), info
    assert r1["tool_calls"] == ONE_CALL and r2["tool_calls"] == ONE_CALL, info  # once per run
    assert r1["items"].count("tool_call_item") == 1 and r2["items"].count("tool_call_item") == 1, info
    assert (tmp_path / "ws" / EXEC_FILE).read_text() == EXEC_MARKER, info

    # what the SDK sent: after the first request, previous_response_id and only the new items
    c1, c2 = sa.AGENTS_IDS
    bodies = [w["json"] for w in got["wire"]]
    assert len(bodies) == 4, info
    assert "previous_response_id" not in bodies[0] and all("store" not in b for b in bodies), info
    assert all(b.get("previous_response_id") for b in bodies[1:]), info
    assert bodies[2]["previous_response_id"] == r1["last_response_id"], info
    assert [sa.transcript(b) for b in bodies[1:]] == [
        [("output", c1)],
        [("user", sa.AGENTS_PROMPTS[1])],
        [("output", c2)],
    ], info

    last = up.model_requests[-1].json
    if keeps:  # passed through: the upstream holds the conversation
        assert sa.transcript(last) == [("output", c2)], info
    else:  # expanded: the whole conversation, once, in order
        assert sa.transcript(last) == [
            ("user", sa.AGENTS_PROMPTS[0]),
            ("call", c1),
            ("output", c1),
            ("assistant", sa.AGENTS_FINAL[0]),
            ("user", sa.AGENTS_PROMPTS[1]),
            ("call", c2),
            ("output", c2),
        ], info
        assert all("previous_response_id" not in r.json for r in up.model_requests), info
