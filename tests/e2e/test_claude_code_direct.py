"""Claude Code 2.1.332 (the real CLI, pinned by tests/e2e/claude_code/package-lock.json)
straight against the scripted Anthropic Messages upstream (``messages_upstream``), no
proxy: what it sends and what it does with the answers, the groundwork for serving
``POST /v1/messages`` from Switchboard.

Every run is ``claude -p PROMPT --output-format stream-json --verbose
--dangerously-skip-permissions`` in a throwaway HOME / CLAUDE_CONFIG_DIR, in the
loopback-only network namespace (see claude_code_harness).

* ``test_messages_upstream_sdk``: the scripted upstream's wire format, parsed by the
  official ``anthropic`` SDK (stream, non-stream, count_tokens).
* ``test_claude_code_text``: one text-only turn, with ``ANTHROPIC_API_KEY`` (sent as
  ``x-api-key``) and with ``ANTHROPIC_AUTH_TOKEN`` (``Authorization: Bearer``): the text
  prints; one ``POST /v1/messages?beta=true`` and nothing else; its headers and top-level
  body (``stream: true``, adaptive thinking, the tool list, the ``system`` role message
  Claude Code puts inside ``messages`` after the first user message).
* ``test_claude_code_bash_tool``: turn 1 is thinking (with a signature) + text + a ``Bash``
  ``tool_use`` (``echo <marker>``); Claude Code runs it; turn 2 answers the final text
  only if request 2 carries the tool_result (same id, the marker) and turn 1's thinking
  with its signature.  Both bodies are written, scrubbed, to
  ``tests/fixtures/claude_code_messages_request.json`` when missing or with
  ``E2E_UPDATE_FIXTURES=1``; otherwise their shape is compared with it.
* ``test_claude_code_count_tokens``: a ``Read`` of a ~70 KB file makes Claude Code call
  ``POST /v1/messages/count_tokens?beta=true`` (its own beta set, plus
  ``token-counting-2024-11-01``); with that endpoint answering 404 the turn still ends
  well (an estimate is used).
"""

from __future__ import annotations

import json
import os
import re

import pytest
from claude_code_harness import (
    CLAUDE_CODE_VERSION,
    ClaudeCode,
    ClaudeCodeUnavailable,
    ensure_claude_code,
    run_claude_code,
)
from messages_upstream import MessagesUpstream, MessageTurn, block_text, text, thinking, tool_results, tool_use
from proxy_harness import REPO

pytestmark = pytest.mark.e2e

MODEL = "e2e-claude"
SMALL_MODEL = "e2e-claude-small"  # background/"haiku" calls would show under this name
API_KEY = "sk-e2e-claude-direct"
CLAUDE_TIMEOUT = 45  # seconds per run (a passing run takes about 1 s)
FIXTURE = REPO / "tests" / "fixtures" / "claude_code_messages_request.json"

MARKER = "CC_E2E_MARKER_7319"
BASH_ID = "toolu_e2e_bash_01"
SIGNATURE = "c2NyaXB0ZWQtdGhpbmtpbmctc2lnbmF0dXJlLTAx"
THOUGHT = "The user wants the marker echoed; I will run it with Bash."
FINAL = f"Done: the command printed {MARKER}."
TEXT_REPLY = "Hello from the scripted Messages upstream."

BETAS = [
    "claude-code-20250219",
    "interleaved-thinking-2025-05-14",
    "context-management-2025-06-27",
    "mid-conversation-tool-changes-2026-07-01",
    "thinking-token-count-2026-05-13",
    "advanced-tool-use-2025-11-20",
    "effort-2025-11-24",
    "thinking-display-updates-2026-08-18",
]
TOOLS = [
    "Agent",
    "Bash",
    "Edit",
    "ListAgents",
    "Read",
    "ReportFindings",
    "ScheduleWakeup",
    "Skill",
    "ToolSearch",
    "Workflow",
    "DeferredToolPlaceholder",
    "Write",
]
BODY_KEYS = [
    "context_management",
    "max_tokens",
    "messages",
    "metadata",
    "model",
    "output_config",
    "stream",
    "system",
    "thinking",
    "tools",
]


@pytest.fixture(scope="session")
def claude_code() -> ClaudeCode:
    try:
        return ensure_claude_code(REPO)
    except ClaudeCodeUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture
def messages_upstream():
    started: list[MessagesUpstream] = []

    def make(turns, **kw) -> MessagesUpstream:
        up = MessagesUpstream(turns, **kw).start()
        started.append(up)
        return up

    yield make
    for up in started:
        up.stop()


def _run(cc, tmp_path, up, prompt, **kw):
    return run_claude_code(
        cc,
        prompt,
        base_url=up.base_url,
        model=MODEL,
        small_model=SMALL_MODEL,
        workspace=tmp_path / "ws",
        home=tmp_path / "home",
        api_key=API_KEY,
        timeout=CLAUDE_TIMEOUT,
        **kw,
    )


def _check_done(run, up, info: str, final: str) -> None:
    assert not run.timed_out, info
    if run.isolation == "netns":
        assert run.interfaces == ["lo"], info
    assert run.returncode == 0, info
    assert run.result is not None and run.result.get("subtype") == "success", info
    assert run.result.get("is_error") is False, info
    assert run.final_text == final, info
    assert up.errors == [], info


def _roles(body: dict) -> list[str]:
    return [m.get("role") for m in body.get("messages") or []]


def _check_request(rec, info: str, *, auth: str = "api_key") -> None:
    """What every Claude Code ``/v1/messages`` request carries (measured on 2.1.332)."""
    h = rec.headers
    assert (rec.method, rec.path, rec.query) == ("POST", "/v1/messages", "beta=true"), info
    assert h.get("anthropic-version") == "2023-06-01", info
    assert h.get("anthropic-beta", "").split(",") == BETAS, info
    assert h.get("user-agent") == f"claude-cli/{CLAUDE_CODE_VERSION} (external, sdk-cli)", info
    assert h.get("x-app") == "cli", info
    assert re.fullmatch(r"[0-9a-f-]{36}", h.get("x-claude-code-session-id", "")), info
    assert h.get("content-type") == "application/json", info
    if auth == "api_key":
        assert h.get("x-api-key") == API_KEY and "authorization" not in h, info
    else:
        assert h.get("authorization") == f"Bearer {API_KEY}" and "x-api-key" not in h, info
    body = rec.json
    assert sorted(body) == BODY_KEYS, info
    assert body["model"] == MODEL and body["stream"] is True, info
    assert body["thinking"] == {"type": "adaptive", "display": "updates"}, info
    assert body["output_config"] == {"effort": "high"}, info
    assert body["context_management"] == {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}, info
    assert body["max_tokens"] == 32000, info
    meta = json.loads(body["metadata"]["user_id"])  # a JSON document inside a string
    assert meta["session_id"] == h["x-claude-code-session-id"], info
    assert [t["name"] for t in body["tools"]] == TOOLS, info
    assert [t for t in body["tools"] if t.get("defer_loading")] == [
        {
            "name": "DeferredToolPlaceholder",
            "description": "Reserved placeholder that keeps deferred tool loading active; never call this tool.",
            "input_schema": {"type": "object", "properties": {}},
            "defer_loading": True,
        }
    ], info
    bash = next(t for t in body["tools"] if t["name"] == "Bash")
    assert bash["input_schema"]["required"] == ["command"], info
    assert [b["type"] for b in body["system"]] == ["text"] * 3, info
    assert body["system"][0]["text"].startswith("x-anthropic-billing-header: cc_version="), info
    # a system-role message inside `messages`, right after the first user message
    assert _roles(body)[:2] == ["user", "system"], info
    sysmsg = body["messages"][1]["content"]
    sys_text = sysmsg if isinstance(sysmsg, str) else "".join(b.get("text", "") for b in sysmsg)
    assert sys_text.startswith("# Environment\n"), info
    assert f"You are powered by the model {MODEL}." in sys_text, info


def test_messages_upstream_sdk(messages_upstream):
    import anthropic  # the official SDK (kosong pulls it into the suite's venv)

    turn = MessageTurn([thinking(THOUGHT, SIGNATURE), text(TEXT_REPLY), tool_use("Bash", {"command": "ls"}, BASH_ID)])
    up = messages_upstream([turn, turn])
    client = anthropic.Anthropic(base_url=up.base_url, api_key=API_KEY, max_retries=0, timeout=10)
    args = {"model": MODEL, "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    with client.messages.stream(**args) as s:
        streamed = s.get_final_message()
    created = client.messages.create(**args)
    for m in (streamed, created):
        assert [
            b.model_dump(include={"type", "thinking", "signature", "text", "id", "name", "input"}) for b in m.content
        ] == [
            {"type": "thinking", "thinking": THOUGHT, "signature": SIGNATURE},
            {"type": "text", "text": TEXT_REPLY},
            {"type": "tool_use", "id": BASH_ID, "name": "Bash", "input": {"command": "ls"}},
        ]
        assert (m.stop_reason, m.model, m.usage.input_tokens, m.usage.output_tokens) == ("tool_use", MODEL, 120, 30)
    assert client.messages.count_tokens(**{k: args[k] for k in ("model", "messages")}).input_tokens > 0
    assert [(r.path, r.turn) for r in up.requests] == [
        ("/v1/messages", 0),
        ("/v1/messages", 1),
        ("/v1/messages/count_tokens", None),
    ]
    assert up.errors == []


@pytest.mark.parametrize("auth", ["api_key", "token"])
def test_claude_code_text(claude_code, messages_upstream, tmp_path, auth):
    up = messages_upstream([MessageTurn([text(TEXT_REPLY)])])
    run = _run(claude_code, tmp_path, up, "Say hello.", auth=auth)
    info = f"{run.describe()}\n{up.describe()}"
    _check_done(run, up, info, TEXT_REPLY)
    assert run.init is not None and run.init.get("claude_code_version") == CLAUDE_CODE_VERSION, info
    assert run.init.get("permissionMode") == "bypassPermissions", info
    assert run.tool_uses == [], info
    # one model call and nothing else: no HEAD /api/hello, no count_tokens, no small-model call
    assert [(r.method, r.path) for r in up.requests] == [("POST", "/v1/messages")], info
    (rec,) = up.message_requests
    _check_request(rec, info, auth=auth)
    assert rec.headers["x-claude-code-session-id"] == run.init["session_id"], info
    assert _roles(rec.json) == ["user", "system"], info  # the system message comes last here
    first = rec.json["messages"][0]["content"]
    assert [b["type"] for b in first] == ["text", "text"] and first[-1]["text"] == "Say hello.", info
    assert first[0]["text"].startswith("<system-reminder>"), info


def _bash_turns() -> list[MessageTurn]:
    def replayed(req: dict) -> bool:
        results = [r for r in tool_results(req) if r.get("tool_use_id") == BASH_ID]
        assistant = [m for m in req.get("messages") or [] if m.get("role") == "assistant"]
        blocks = assistant[-1]["content"] if assistant else []
        return (
            len(results) == 1
            and MARKER in block_text(results[0])
            and results[0].get("is_error") is False
            and {"type": "thinking", "thinking": THOUGHT, "signature": SIGNATURE} in blocks
        )

    call = tool_use("Bash", {"command": f"echo {MARKER}", "description": "Print the marker"}, BASH_ID)
    return [
        MessageTurn([thinking(THOUGHT, SIGNATURE), text("Running it."), call], label="bash call"),
        MessageTurn([text(FINAL)], when=replayed, otherwise=MessageTurn([text("PREDICATE-MISS")]), label="final"),
    ]


def test_claude_code_bash_tool(claude_code, messages_upstream, tmp_path):
    up = messages_upstream(_bash_turns())
    run = _run(claude_code, tmp_path, up, f"Run `echo {MARKER}` with the Bash tool.")
    info = f"{run.describe()}\n{up.describe()}"
    _check_done(run, up, info, FINAL)
    # what Claude Code printed: the call, its result, the final text
    assert [(u["id"], u["name"], u["input"]["command"]) for u in run.tool_uses] == [
        (BASH_ID, "Bash", f"echo {MARKER}")
    ], info
    assert [(r["tool_use_id"], block_text(r).strip(), r.get("is_error")) for r in run.tool_results] == [
        (BASH_ID, MARKER, False)
    ], info
    # what the upstream got
    assert [(r.method, r.path) for r in up.requests] == [("POST", "/v1/messages")] * 2, info
    first, second = up.message_requests
    for rec in (first, second):
        _check_request(rec, info)
    assert first.headers["x-claude-code-session-id"] == second.headers["x-claude-code-session-id"], info
    assert second.matched is True, info
    assert _roles(first.json) == ["user", "system"], info
    assert _roles(second.json) == ["user", "system", "assistant", "user"], info
    assert second.json["messages"][:2] == [
        first.json["messages"][0],
        {"role": "system", "content": "".join(b["text"] for b in first.json["messages"][1]["content"])},
    ], info  # request 1's system message (blocks + cache_control) comes back as a plain string
    assistant = second.json["messages"][2]["content"]
    assert [b["type"] for b in assistant] == ["thinking", "text", "tool_use"], info
    assert assistant[2] == {
        "type": "tool_use",
        "id": BASH_ID,
        "name": "Bash",
        "input": {"command": f"echo {MARKER}", "description": "Print the marker"},
    }, info
    (result,) = second.json["messages"][3]["content"]
    assert result == {
        "tool_use_id": BASH_ID,
        "type": "tool_result",
        "content": MARKER,
        "is_error": False,
        "cache_control": {"type": "ephemeral"},
    }, info

    recorded = {
        "claude_code_version": CLAUDE_CODE_VERSION,
        "note": "tests/e2e/test_claude_code_direct.py::test_claude_code_bash_tool, scrubbed",
        "headers": _scrub(_headers(first.headers), run),
        "requests": [_scrub(first.json, run), _scrub(second.json, run)],
    }
    if os.environ.get("E2E_UPDATE_FIXTURES") == "1" or not FIXTURE.exists():
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(json.dumps(recorded, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    fixture = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert _shape(recorded) == _shape(fixture), "Claude Code request drifted; rerun with E2E_UPDATE_FIXTURES=1"


@pytest.mark.parametrize("served", [True, False], ids=["served", "404"])
def test_claude_code_count_tokens(claude_code, messages_upstream, tmp_path, served):
    ws = tmp_path / "ws"
    ws.mkdir()
    big = ws / "big.txt"
    big.write_text("".join(f"line {i} of a file large enough to be counted\n" for i in range(2000)), encoding="utf-8")
    read = tool_use("Read", {"file_path": str(big)}, "toolu_e2e_read_01")
    up = messages_upstream([MessageTurn([read]), MessageTurn([text("Read it.")])], count_tokens=served)
    run = _run(claude_code, tmp_path, up, "Read big.txt.")
    info = f"{run.describe()}\n{up.describe()}"
    _check_done(run, up, info, "Read it.")
    assert [(r.method, r.path, r.query) for r in up.requests] == [
        ("POST", "/v1/messages", "beta=true"),
        ("POST", "/v1/messages/count_tokens", "beta=true"),
        ("POST", "/v1/messages", "beta=true"),
    ], info
    (ct,) = up.count_tokens_requests
    assert ct.headers.get("anthropic-beta", "").split(",") == [*BETAS[:3], "token-counting-2024-11-01"], info
    assert ct.headers.get("anthropic-version") == "2023-06-01" and ct.headers.get("x-api-key") == API_KEY, info
    assert sorted(ct.json) == ["messages", "model", "tools"] and ct.json["model"] == MODEL, info
    assert ct.json["tools"] == [], info
    assert [(m["role"], type(m["content"]).__name__) for m in ct.json["messages"]] == [("user", "str")], info
    assert ct.json["messages"][0]["content"].startswith("line 0 of a file"), info
    (result,) = run.tool_results
    assert result["tool_use_id"] == "toolu_e2e_read_01" and "line 1999 of a file" in block_text(result), info


# --------------------------------------------------------------------------- fixture helpers

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_DEVICE = re.compile(r"[0-9a-f]{64}")
_DATE = re.compile(r"Today's date is \d{4}-\d\d-\d\d")
_KEEP_HEADERS = ("anthropic-", "x-app", "x-claude", "user-agent", "content-type", "accept", "x-api-key")


def _headers(h: dict) -> dict:
    return {k: v for k, v in sorted(h.items()) if k.startswith(_KEEP_HEADERS)}


def _scrub(obj: dict, run) -> dict:
    """``obj`` without this run's paths, ids, date and kernel (consistent placeholders)."""
    s = json.dumps(obj, ensure_ascii=False)
    for path, alias in ((run.workspace, "/workspace"), (run.home, "/claude-home")):
        slug = re.sub(r"[^A-Za-z0-9]", "-", str(path))
        s = s.replace(str(path), alias).replace(slug, re.sub(r"[^A-Za-z0-9]", "-", alias))
    seen: dict[str, str] = {}
    s = _UUID.sub(lambda m: seen.setdefault(m.group(0), f"00000000-0000-4000-8000-{len(seen) + 1:012d}"), s)
    s = _DEVICE.sub("0" * 64, s)
    s = _DATE.sub("Today's date is 2000-01-01", s)
    s = re.sub(r"OS Version: [^\\\"]+", "OS Version: Linux <kernel>", s)
    s = re.sub(r"cc_version=[0-9.]+[0-9a-f]*", f"cc_version={CLAUDE_CODE_VERSION}.xxx", s)
    return json.loads(s)


def _shape(recorded: dict) -> dict:
    """What the fixture comparison holds Claude Code to."""

    def body(b: dict) -> dict:
        return {
            "keys": sorted(b),
            "messages": [
                (m["role"], [c.get("type") for c in m["content"]] if isinstance(m["content"], list) else "str")
                for m in b["messages"]
            ],
            "tools": [(t["name"], sorted(t), sorted(t["input_schema"].get("properties", {}))) for t in b["tools"]],
            "system": [(s["type"], s.get("cache_control")) for s in b["system"]],
            "thinking": b.get("thinking"),
            "output_config": b.get("output_config"),
            "context_management": b.get("context_management"),
        }

    h = recorded["headers"]
    return {
        "version": recorded["claude_code_version"],
        "headers": sorted(h),
        "betas": h.get("anthropic-beta"),
        "requests": [body(b) for b in recorded["requests"]],
    }
