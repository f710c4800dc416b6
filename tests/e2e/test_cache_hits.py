"""Prompt cache hits through Switchboard, with real clients, against direct (issue 59).

Every upstream here caches as its kind of provider does (``cache_model``): a prefix cache
(OpenAI, Kimi, DeepSeek: the longest common prefix, in blocks) or Anthropic's breakpoint
cache (only prefixes that end at a ``cache_control`` block, 20 blocks of lookback).  Each
answer reports what that request read from cache, and the client must be told it.  A run
is a coding agent's tool loop: five tool rounds, then the answer.  Its hit ratio is the
tokens read from cache over the input tokens of requests 2..n.

* ``test_openai_sdk``: the openai SDK (Chat, streamed) direct to a Chat prefix cache, then
  through ``switchboard serve`` to each kind: Chat and Responses prefix caches, Anthropic
  (``profile: anthropic``) and MiniMax (``profile: minimax``) breakpoint caches, Kimi's
  Messages endpoint (a prefix cache).  Every kind reads at least 95 % of direct, Anthropic
  at least 80 % of its input; each answer's ``cached_tokens`` is what the upstream reported.
  With ``cache_breakpoints`` switched off, Anthropic reads nothing: the measure can fail.
* ``test_codex``: Codex (0.171, HTTP) direct to a Responses prefix cache, then through the
  proxy to Anthropic's breakpoint cache and to a Chat prefix cache, running
  ``exec_command`` five times.
* ``test_claude_code``: Claude Code direct to Anthropic's breakpoint cache (its own
  breakpoints), then through the proxy to Anthropic, Chat and Responses.
* ``test_kimi_code``: Kimi Code's ``openai`` type direct to a Chat prefix cache, then
  through the proxy its ``openai``, ``openai_responses`` and ``anthropic`` types to
  Anthropic, and ``openai`` to Chat (Kimi Code prints no usage: what a client is told is
  checked on the other three).
* ``test_claude_code_second_session``: two Claude Code sessions in a row through the proxy
  to a Chat prefix cache: the second session's first request reads the tools and the
  system prompt from cache, because Claude Code's billing line (its first system block,
  different in each session) is not sent; with the line sent (``billing_header`` switched
  on for that provider) the same request misses from the start.

The figures each test measured are printed (``-s``) and written to the proxy's log.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
from cache_model import BreakpointCache, PrefixCache, chat_usage, messages_usage, responses_usage
from messages_upstream import MessagesUpstream, MessageTurn, text, tool_use
from proxy_harness import PROXY_CLIENT_KEY, provider_entry
from scripted_upstream import ScriptedUpstream, ToolCall, Turn, chat_turn, responses_turn

pytestmark = pytest.mark.e2e

ROUNDS = 5
# what a coding agent's system prompt and tools weigh (Codex's are ~25 KB; these are smaller)
SYSTEM = "You are a coding agent working in a repository. " + " ".join(
    f"Rule {i}: read before you write, keep diffs small, run the tests." for i in range(120)
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository. " + "It returns the file's text. " * 40,
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]


@dataclass
class Metered:
    """An upstream's cache and what it reported for each request: (total, read, written)."""

    cache: PrefixCache | BreakpointCache
    reports: list[tuple[int, int, int]] = field(default_factory=list)

    def measure(self, body: dict, protocol: str) -> tuple[int, int, int]:
        got = self.cache.usage(body, protocol)
        self.reports.append(got)
        return got

    def ratio(self) -> float:
        later = self.reports[1:]
        total = sum(t for t, _, _ in later)
        return sum(r for _, r, _ in later) / total if total else 0.0

    def cost(self) -> float:
        """The run's input at the providers' multiples of the input price: a cache read 0.1,
        a write 1.25 where the cache is written at breakpoints (Anthropic), else 1."""
        write = 1.25 if isinstance(self.cache, BreakpointCache) else 1.0
        return sum((t - r - w) + 0.1 * r + write * w for t, r, w in self.reports)


def _costs(label: str, direct: Metered, meters: dict[str, Metered]) -> None:
    base = direct.cost()
    print(f"[cache hits] {label}, input cost against direct: "
          + ", ".join(f"{k} {m.cost() / base:.2f}x" for k, m in meters.items()))  # fmt: skip


def _tool_id(kind: str, i: int) -> str:
    return f"toolu_cache_{i:02d}" if kind == "messages" else f"call_cache_{i:02d}"


def script(kind: str, meter: Metered, calls: Callable[[int], tuple[str, dict]], final: str) -> list[Any]:
    """ROUNDS tool rounds, then ``final``; every answer's usage from ``meter``."""
    out: list[Any] = []
    for i in range(ROUNDS + 1):
        last = i == ROUNDS
        name, args = calls(i)

        def respond(req: dict, i: int = i, last: bool = last, name: str = name, args: dict = args) -> Any:
            total, read, written = meter.measure(req, kind)
            say = final if last else f"Step {i}: reading more."
            if kind == "messages":
                blocks = [text(say)] if last else [text(say), tool_use(name, args, _tool_id(kind, i))]
                return MessageTurn(blocks, usage=messages_usage(total, read, written))
            call = [] if last else [ToolCall(name, json.dumps(args), id=_tool_id(kind, i))]
            if kind == "chat":
                return chat_turn(text=say, tool_calls=call, usage=chat_usage(total, read, written),
                                 finish_reason="stop" if last else "tool_calls")  # fmt: skip
            return responses_turn(text=say, tool_calls=call, usage=responses_usage(total, read, written))

        out.append(MessageTurn(respond=respond) if kind == "messages" else Turn(respond=respond))
    return out


def upstream_for(kind: str, turns: list[Any], name: str) -> ScriptedUpstream:
    cls = MessagesUpstream if kind == "messages" else ScriptedUpstream
    return cls(turns, name=name).start()


# (case, upstream protocol, profile, cache, extra provider config)
KINDS: list[tuple[str, str, str, Callable[[], Any], dict]] = [
    ("chat", "chat", "openai-compatible", PrefixCache, {}),
    ("responses", "responses", "openai-compatible", PrefixCache, {}),
    ("anthropic", "messages", "anthropic", BreakpointCache, {}),
    ("minimax", "messages", "minimax", BreakpointCache, {}),
    ("kimi-messages", "messages", "kimi", PrefixCache, {}),
    ("anthropic-no-breakpoints", "messages", "anthropic", BreakpointCache,
     {"quirks": {"disable": ["cache_breakpoints"]}}),
]  # fmt: skip


def _report(label: str, figures: dict[str, float]) -> None:
    print(f"\n[cache hits] {label}: " + ", ".join(f"{k} {v:.1%}" for k, v in figures.items()))


# --------------------------------------------------------------------------- openai SDK


def _sdk_loop(base_url: str, model: str, api_key: str) -> list[int]:
    """The openai SDK's tool loop (streamed Chat); the cached_tokens it was told, per answer."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": "Find where the config is parsed."}]  # fmt: skip
    told = []
    for _ in range(ROUNDS + 1):
        stream = client.chat.completions.create(
            model=model, messages=messages, tools=TOOLS, stream=True, stream_options={"include_usage": True}
        )
        content, calls, usage = "", {}, None
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                content += choice.delta.content or ""
                for tc in choice.delta.tool_calls or []:
                    c = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    c["id"] += tc.id or ""
                    c["name"] += (tc.function.name or "") if tc.function else ""
                    c["arguments"] += (tc.function.arguments or "") if tc.function else ""
        assert usage is not None and usage.prompt_tokens_details is not None
        told.append(usage.prompt_tokens_details.cached_tokens or 0)
        msg: dict[str, Any] = {"role": "assistant", "content": content or None}
        if not calls:
            messages.append(msg)
            break
        msg["tool_calls"] = [{"id": c["id"], "type": "function",
                              "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls.values()]  # fmt: skip
        messages.append(msg)
        for c in calls.values():
            path = json.loads(c["arguments"])["path"]
            body = f"# {path}\n" + "\n".join(f"def f{n}(x):\n    return x + {n}" for n in range(60))
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": body})
    return told


def _read_calls(i: int) -> tuple[str, dict]:
    return "read_file", {"path": f"src/module_{i}.py"}


def test_openai_sdk(proxy, tmp_path):
    final = "The config is parsed in src/module_3.py."
    direct = Metered(PrefixCache())
    up = upstream_for("chat", script("chat", direct, _read_calls, final), "direct-chat")
    try:
        told = _sdk_loop(up.base_url, "m", "sk-direct")
    finally:
        up.stop()
    assert len(direct.reports) == ROUNDS + 1 and told == [r for _, r, _ in direct.reports]
    baseline = direct.ratio()
    figures = {"direct chat": baseline}
    meters: dict[str, Metered] = {}
    ups, providers, models = [], [], []
    try:
        for case, protocol, profile, cache, extra in KINDS:
            meter = meters[case] = Metered(cache())
            u = upstream_for(protocol, script(protocol, meter, _read_calls, final), f"cache-{case}")
            ups.append(u)
            providers.append(provider_entry(u, name=f"p-{case}", profile=profile, protocol=protocol, **extra))
            models.append({"name": f"m-{case}", "provider": f"p-{case}"})
        px = proxy(providers=providers, models=models)
        for case, *_ in KINDS:
            got = _sdk_loop(px.base_url, f"m-{case}", PROXY_CLIENT_KEY)
            info = f"{case}\n" + "\n".join(u.describe() for u in ups) + "\n--- proxy log ---\n" + px.log(tail=20_000)
            meter = meters[case]
            assert len(meter.reports) == ROUNDS + 1, info
            # the client is told what the upstream read from cache, answer by answer
            assert got == [r for _, r, _ in meter.reports], info
            figures[case] = meter.ratio()
    finally:
        for u in ups:
            u.stop()
    _report("openai SDK (Chat)", figures)
    _costs("openai SDK (Chat)", direct, meters)
    for case, _protocol, profile, _cache, extra in KINDS:
        if extra:
            continue
        assert figures[case] >= 0.95 * baseline, (case, figures)
        if profile in ("anthropic", "minimax"):
            assert figures[case] >= 0.80, (case, figures)
    assert figures["anthropic-no-breakpoints"] == 0.0, figures  # the issue as it was


# --------------------------------------------------------------------------- Codex

CODEX_FINAL = "All five steps ran."
# (case, upstream protocol, profile, cache)
CODEX_KINDS: list[tuple[str, str, str, Callable[[], Any]]] = [
    ("anthropic", "messages", "anthropic", BreakpointCache),
    ("chat", "chat", "openai-compatible", PrefixCache),
    ("responses", "responses", "openai-compatible", PrefixCache),
]
CODEX_MODES = {"http": {}, "websocket": {"supports_websockets": True}}


def _exec_calls(i: int) -> tuple[str, dict]:
    return "exec_command", {"cmd": f"printf 'step {i}: ' && seq -s ' ' 1 200"}


def _codex_check(run: Any, meter: Metered, info: str) -> None:
    assert run.returncode == 0 and not run.timed_out and run.turn_completed, info
    assert len(run.command_executions) == ROUNDS and run.final_message == CODEX_FINAL, info
    assert len(meter.reports) == ROUNDS + 1, info
    done = [e for e in run.events if e.get("type") == "turn.completed"][-1]
    # Codex is told what the upstreams read: its turn's cached input is their sum
    assert done["usage"]["cached_input_tokens"] == sum(r for _, r, _ in meter.reports), (done, info)


@pytest.mark.parametrize("mode", list(CODEX_MODES))
def test_codex(upstream, proxy, codex_run, mode):
    from codex_harness import CODEX_LATEST

    direct = Metered(PrefixCache())
    up = upstream(script("responses", direct, _exec_calls, CODEX_FINAL), "codex-direct")
    run = codex_run("run the five steps", base_url=up.base_url, model="m", version=CODEX_LATEST, api_key="sk-direct")
    _codex_check(run, direct, f"{run.describe()}\n{up.describe()}")
    figures = {"direct responses": direct.ratio()}
    meters: dict[str, Metered] = {}
    ups, providers, models = [], [], []
    try:
        for case, protocol, profile, cache in CODEX_KINDS:
            meter = meters[case] = Metered(cache())
            u = upstream_for(protocol, script(protocol, meter, _exec_calls, CODEX_FINAL), f"codex-{case}")
            ups.append(u)
            providers.append(provider_entry(u, name=f"p-{case}", profile=profile, protocol=protocol))
            models.append({"name": f"m-{case}", "provider": f"p-{case}"})
        px = proxy(providers=providers, models=models)
        for case, *_ in CODEX_KINDS:
            run = codex_run("run the five steps", base_url=px.base_url, model=f"m-{case}", version=CODEX_LATEST,
                            **CODEX_MODES[mode])  # fmt: skip
            info = f"{case}\n{run.describe()}\n--- proxy log ---\n{px.log(tail=20_000)}"
            _codex_check(run, meters[case], info)
            if mode == "websocket":  # every model request came over the socket
                from test_codex_websocket import transports

                seen = transports(px.log(tail=200_000))
                assert seen.count("websocket") >= len(meters[case].reports) and "http" not in seen, (seen, info)
            figures[case] = meters[case].ratio()
    finally:
        for u in ups:
            u.stop()
    _report(f"Codex {CODEX_LATEST} ({mode})", figures)
    _costs(f"Codex {CODEX_LATEST} ({mode})", direct, meters)
    for case, _protocol, profile, _cache in CODEX_KINDS:
        assert figures[case] >= 0.95 * figures["direct responses"], (case, figures)
        if profile == "anthropic":
            assert figures[case] >= 0.80, (case, figures)


# --------------------------------------------------------------------------- Claude Code

CC_FINAL = "All steps ran."
CC_KINDS: list[tuple[str, str, str, Callable[[], Any]]] = [
    ("anthropic", "messages", "anthropic", BreakpointCache),
    ("chat", "chat", "openai-compatible", PrefixCache),
    ("responses", "responses", "openai-compatible", PrefixCache),
]


@pytest.fixture(scope="module")
def claude_code() -> Any:
    from claude_code_harness import ClaudeCodeUnavailable, ensure_claude_code
    from proxy_harness import REPO

    try:
        return ensure_claude_code(REPO)
    except ClaudeCodeUnavailable as exc:
        pytest.fail(str(exc))


def _bash_calls(i: int) -> tuple[str, dict]:
    return "Bash", {"command": f"echo step {i} && seq -s ' ' 1 200", "description": f"Step {i}"}


def _claude(cc: Any, url: str, model: str, where: Any, prompt: str) -> Any:
    from claude_code_harness import run_claude_code

    return run_claude_code(cc, prompt, base_url=url, model=model, small_model=model, workspace=where / "ws",
                           home=where / "home", api_key=PROXY_CLIENT_KEY, timeout=120)  # fmt: skip


def _cc_check(run: Any, meter: Metered, rounds: int, info: str) -> None:
    assert run.returncode == 0 and not run.timed_out, info
    assert run.result is not None and run.result.get("result") == CC_FINAL, info
    assert len(meter.reports) == rounds + 1, info
    # Claude Code is told what the upstream read (its result's usage sums the session)
    assert run.result["usage"]["cache_read_input_tokens"] == sum(r for _, r, _ in meter.reports), (run.result, info)


def test_claude_code(claude_code, proxy, tmp_path):
    direct = Metered(BreakpointCache())
    up = upstream_for("messages", script("messages", direct, _bash_calls, CC_FINAL), "cc-direct")
    try:
        run = _claude(claude_code, up.url, "claude-e2e", tmp_path / "direct", "Run the five steps with Bash.")
        _cc_check(run, direct, ROUNDS, f"{run.describe()}\n{up.describe()}")
    finally:
        up.stop()
    figures = {"direct messages": direct.ratio()}
    meters: dict[str, Metered] = {}
    ups, providers, models = [], [], []
    try:
        for case, protocol, profile, cache in CC_KINDS:
            meter = meters[case] = Metered(cache())
            u = upstream_for(protocol, script(protocol, meter, _bash_calls, CC_FINAL), f"cc-{case}")
            ups.append(u)
            providers.append(provider_entry(u, name=f"p-{case}", profile=profile, protocol=protocol))
            models.append({"name": f"m-{case}", "provider": f"p-{case}"})
        px = proxy(providers=providers, models=models)
        for case, *_ in CC_KINDS:
            run = _claude(claude_code, px.url, f"m-{case}", tmp_path / case, "Run the five steps with Bash.")
            _cc_check(run, meters[case], ROUNDS, f"{case}\n{run.describe()}\n--- proxy log ---\n{px.log(tail=20_000)}")
            figures[case] = meters[case].ratio()
    finally:
        for u in ups:
            u.stop()
    _report("Claude Code 2.1.332", figures)
    _costs("Claude Code 2.1.332", direct, meters)
    for case, _protocol, profile, _cache in CC_KINDS:
        assert figures[case] >= 0.95 * figures["direct messages"], (case, figures)
        if profile == "anthropic":
            assert figures[case] >= 0.80, (case, figures)


def _shared(body: dict) -> int:
    """The tokens of what two sessions share: the tools and the system prompt."""
    from cache_model import units

    head = [u for u, _ in units(body, "chat")[:2]]
    assert json.loads(head[1])["role"] == "system"
    return -(-sum(len(u) for u in head) // 4)


def test_claude_code_second_session(claude_code, proxy, tmp_path):
    """Two sessions in a row on one Chat prefix cache: the second one's first request reads
    the tools and the system prompt from cache, unless Claude Code's billing line is sent."""
    one_round = 1
    meters = {case: Metered(PrefixCache()) for case in ("stripped", "kept")}
    scripts = {case: script("chat", m, _bash_calls, CC_FINAL)[-one_round - 1 :] for case, m in meters.items()}
    ups = {case: upstream_for("chat", [*s, *script("chat", meters[case], _bash_calls, CC_FINAL)[-one_round - 1 :]],
                              f"cc-{case}") for case, s in scripts.items()}  # fmt: skip
    try:
        providers = [provider_entry(ups["stripped"], name="p-stripped"),
                     provider_entry(ups["kept"], name="p-kept", quirks={"enable": ["billing_header"]})]  # fmt: skip
        px = proxy(providers=providers, models=[{"name": "m-stripped", "provider": "p-stripped"},
                                                {"name": "m-kept", "provider": "p-kept"}])  # fmt: skip
        figures: dict[str, float] = {}
        lines: dict[str, list[str]] = {}
        for case in ("stripped", "kept"):
            for prompt in ("Run one step with Bash.", "Now run one more step with Bash, please."):
                run = _claude(claude_code, px.url, f"m-{case}", tmp_path / case, prompt)  # one directory, as a user
                assert run.returncode == 0 and not run.timed_out, f"{run.describe()}\n{px.log(tail=20_000)}"
                assert run.result is not None and run.result.get("result") == CC_FINAL, run.describe()
            reqs = ups[case].model_requests
            assert len(reqs) == 2 * (one_round + 1), ups[case].describe()
            second = reqs[one_round + 1]  # the second session's first request
            system = second.json["messages"][0]["content"]
            lines[case] = [r.json["messages"][0]["content"].split("\n", 1)[0] for r in (reqs[0], second)]
            shared = _shared(second.json)
            read = meters[case].reports[one_round + 1][1]
            figures[f"{case}: session 2 reads of the shared prefix"] = min(read, shared) / shared
            if case == "stripped":
                assert "x-anthropic-billing-header" not in system, system[:200]
            else:
                assert system.startswith("x-anthropic-billing-header:"), system[:200]
    finally:
        for u in ups.values():
            u.stop()
    _report("Claude Code 2.1.332, second session on a Chat prefix cache", figures)
    print(f"[cache hits] billing lines of the two sessions: {lines['kept']}")
    assert figures["stripped: session 2 reads of the shared prefix"] == 1.0, figures
    if lines["kept"][0] != lines["kept"][1]:  # the line changed with the prompt: the cache misses there
        assert figures["kept: session 2 reads of the shared prefix"] < 0.95, (figures, lines)


# --------------------------------------------------------------------------- Kimi Code

KIMI_FINAL = "All five steps ran."
# (case, Kimi Code's provider type, upstream protocol, profile, cache)
KIMI_KINDS: list[tuple[str, str, str, str, Callable[[], Any]]] = [
    ("openai -> anthropic", "openai", "messages", "anthropic", BreakpointCache),
    ("openai_responses -> anthropic", "openai_responses", "messages", "anthropic", BreakpointCache),
    ("anthropic -> anthropic", "anthropic", "messages", "anthropic", BreakpointCache),
    ("openai -> chat", "openai", "chat", "openai-compatible", PrefixCache),
]


@pytest.fixture(scope="module")
def kimi_code() -> Any:
    from kimi_code_harness import KimiCodeUnavailable, ensure_kimi_code
    from proxy_harness import REPO

    try:
        return ensure_kimi_code(REPO)
    except KimiCodeUnavailable as exc:
        pytest.fail(str(exc))


def _kimi(kc: Any, provider_type: str, base_url: str, model: str, where: Any) -> Any:
    from kimi_code_harness import run_kimi_code

    return run_kimi_code(kc, "Run the five steps with Bash.", provider_type=provider_type, base_url=base_url,
                         model=model, workspace=where / "ws", home=where / "home", api_key=PROXY_CLIENT_KEY,
                         timeout=120)  # fmt: skip


def _kimi_check(run: Any, meter: Metered, info: str) -> None:
    assert not run.timed_out and run.returncode == 0, info
    assert len(run.tool_calls) == ROUNDS and run.final_text == KIMI_FINAL, info
    assert len(meter.reports) == ROUNDS + 1, info


def test_kimi_code(kimi_code, proxy, tmp_path):
    direct = Metered(PrefixCache())
    up = upstream_for("chat", script("chat", direct, _bash_calls, KIMI_FINAL), "kimi-direct")
    try:
        run = _kimi(kimi_code, "openai", up.base_url, "kimi-e2e", tmp_path / "direct")
        _kimi_check(run, direct, f"{run.describe()}\n{up.describe()}")
    finally:
        up.stop()
    figures = {"direct chat": direct.ratio()}
    meters: dict[str, Metered] = {}
    ups, providers, models = [], [], []
    try:
        for n, (case, _type, protocol, profile, cache) in enumerate(KIMI_KINDS):
            meter = meters[case] = Metered(cache())
            u = upstream_for(protocol, script(protocol, meter, _bash_calls, KIMI_FINAL), f"kimi-{n}")
            ups.append(u)
            providers.append(provider_entry(u, name=f"p{n}", profile=profile, protocol=protocol))
            models.append({"name": f"m{n}", "provider": f"p{n}"})
        px = proxy(providers=providers, models=models)
        for n, (case, provider_type, *_) in enumerate(KIMI_KINDS):
            url = px.url if provider_type == "anthropic" else px.base_url
            run = _kimi(kimi_code, provider_type, url, f"m{n}", tmp_path / f"k{n}")
            _kimi_check(run, meters[case], f"{case}\n{run.describe()}\n--- proxy log ---\n{px.log(tail=20_000)}")
            figures[case] = meters[case].ratio()
    finally:
        for u in ups:
            u.stop()
    _report("Kimi Code", figures)
    _costs("Kimi Code", direct, meters)
    for case, _type, _protocol, profile, _cache in KIMI_KINDS:
        assert figures[case] >= 0.95 * figures["direct chat"], (case, figures)
        if profile == "anthropic":
            assert figures[case] >= 0.80, (case, figures)
