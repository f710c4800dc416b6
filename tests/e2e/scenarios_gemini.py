"""Shared pieces of the tests that put the scripted Gemini upstream (``gemini_upstream.py``)
behind the proxy: the module-scoped stage, the three scripted cases, and the checks on what
Gemini got.

Theory of operation
-------------------
* ``gemini_stage(*models)``: a module-scoped fixture ``stage``: ONE proxy process (a
  ``server.secret_key`` set, so the proxy seals signatures) in front of one ``GeminiUpstream``
  per model, each its own provider ``profile: gemini`` (``base_url`` the upstream's
  ``/v1beta/openai``), and a plain scripted Chat upstream (``openai-compatible``) per
  ``other`` model (``stage.others``), for a conversation that switches models; ``aliases``
  gives a model's upstream another client-facing name (Gemini CLI sends
  ``gemini-3-pro-preview`` as ``gemini-3.1-pro-preview``).  ``stage.script(model, build)`` gives that upstream a fresh script
  (``build(up)`` returns the turns, so predicates can read ``up.issued``) and returns it;
  ``mark()`` / ``log_since(mark)`` cut one test's part out of the proxy log;
  ``repairs(rule, model)`` reads ``switchboard_repairs_total`` off ``/metrics``
  (``counter(url, name, **labels)`` any counter).
* ``script(case, call, final)``: the three cases, ``call(k)`` the client's shell tool
  call printing ``marker(case, k)``:

  ============  ==============================================================
  ``single``    call 0; then ``final`` once call 0's output came back
  ``parallel``  text, then calls 0 and 1 in one step (only call 0 signed); then
                ``final`` once both outputs came back
  ``steps``     call 0; then text and call 1 once call 0's output came back;
                then ``final`` once both did
  ``turns``     (the SDKs) call 0, then ``FIRST_DONE``; the client's second prompt
                (``SECOND_PROMPT``), call 1, then ``final``: the first turn's signed
                step is history, not the current turn
  ============  ==============================================================

  A missed predicate answers ``PREDICATE-MISS: ...``, which the client prints: the
  final-text check fails.
* ``check_signatures(up)``: every request sent back each step Gemini answered before it, in
  order, under Gemini's own call ids, the first call of each with the signature Gemini
  issued for it, byte for byte, no signature on the unsigned calls; and no request was
  refused (``up.rejections``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
import pytest
from gemini_upstream import Call, GeminiTurn, GeminiUpstream, assistant_steps
from proxy_harness import PROXY_CLIENT_KEY, UPSTREAM_KEY, Proxy, provider_entry
from scenarios import tool_outputs
from scripted_upstream import ScriptedUpstream

SECRET_KEY = "e2e-gemini-secret-key-0123456789abcdef0123456789"
CASES = ("single", "parallel", "steps")
SDK_CASES = (*CASES, "turns")  # a second user turn: the SDKs only
CALL_ID = re.compile(r"^function-call-\d{19}$")
FIRST_DONE = "The first marker is printed."  # the answer to the first prompt of ``turns``
SECOND_PROMPT = "Now print the second marker."
SAID = ("Printing both markers at once.", "Now the second marker.")  # text before the calls


def marker(case: str, k: int) -> str:
    return f"gemini-e2e-{case}-{k}-ok"


def provider_name(model: str) -> str:
    return f"gemini-{model}"


class GeminiStage:
    """One proxy process in front of one scripted Gemini upstream per model (and one plain
    scripted Chat upstream, ``openai-compatible``, per ``other`` model)."""

    def __init__(
        self, models: tuple[str, ...], workdir, other: tuple[str, ...] = (), aliases: dict[str, str] | None = None
    ) -> None:
        self.ups: dict[str, GeminiUpstream] = {}
        self.others: dict[str, ScriptedUpstream] = {}
        providers, entries = [], []
        try:
            for m in models:
                up = GeminiUpstream([], name=f"gemini-{m}").start()
                self.ups[m] = up
                prov = provider_entry(up, name=provider_name(m), profile="gemini", protocol="chat")
                providers.append(prov)
                entries.append({"name": m, "provider": prov["name"]})
            for alias, m in (aliases or {}).items():  # another client-facing name of a model's upstream
                entries.append({"name": alias, "provider": provider_name(m)})
            for m in other:
                plain = ScriptedUpstream([], name=f"chat-{m}").start()
                self.others[m] = plain
                prov = provider_entry(plain, name=provider_name(m), profile="openai-compatible", protocol="chat")
                providers.append(prov)
                entries.append({"name": m, "provider": prov["name"]})
            cfg = {
                "server": {"host": "127.0.0.1", "port": 0, "secret_key": SECRET_KEY},
                "auth": {"keys": [PROXY_CLIENT_KEY]},
                "providers": providers,
                "models": entries,
            }
            self.proxy = Proxy(cfg, workdir)
            self.proxy.start()
        except BaseException:
            self.stop()
            raise

    def script(self, model: str, build: Callable[[GeminiUpstream], list[GeminiTurn]]) -> GeminiUpstream:
        up = self.ups[model]
        up.set_script(build(up))
        return up

    def mark(self) -> int:
        try:
            return self.proxy.log_path.stat().st_size
        except OSError:
            return 0

    def log_since(self, mark: int) -> str:
        try:
            with open(self.proxy.log_path, "rb") as f:
                f.seek(mark)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return "<no proxy log>"

    def repairs(self, rule: str, model: str) -> float:
        return repairs(self.proxy.url, rule, provider_name(model))

    def stop(self) -> None:
        proxy = getattr(self, "proxy", None)
        if proxy is not None:
            proxy.stop()
        for up in [*self.ups.values(), *self.others.values()]:
            up.stop()


def gemini_stage(*models: str, other: tuple[str, ...] = (), aliases: dict[str, str] | None = None):
    """A module-scoped fixture named ``stage`` (assign it to a module-level name)."""

    @pytest.fixture(scope="module", name="stage")
    def _stage(tmp_path_factory):
        st = GeminiStage(models, tmp_path_factory.mktemp("gemini-stage"), other, aliases)
        yield st
        st.stop()

    return _stage


def counter(proxy_url: str, name: str, **labels: str) -> float:
    """The sum of counter ``name`` over its series with ``labels`` (0 when none), off ``/metrics``."""
    text = httpx.get(f"{proxy_url}/metrics", timeout=10).text
    want = [f'{k}="{v}"' for k, v in labels.items()]
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        series, _, value = line.rpartition(" ")
        if all(w in series for w in want):
            total += float(value)
    return total


def repairs(proxy_url: str, rule: str, provider: str) -> float:
    """``switchboard_repairs_total`` for ``rule`` and ``provider``."""
    return counter(proxy_url, "switchboard_repairs_total", rule=rule, provider=provider)


# --------------------------------------------------------------------------- scripts


def _outputs_back(up: GeminiUpstream, case: str, n: int) -> Callable[[dict], bool]:
    """The outputs of the first ``n`` calls Gemini made came back under their ids, each with
    its marker."""

    def pred(req: dict) -> bool:
        outs = tool_outputs(req)
        ids = [cid for _, cid, _ in up.calls]
        return len(ids) >= n and all(marker(case, k) in (outs.get(ids[k]) or "") for k in range(n))

    return pred


def _second_prompt(req: dict) -> bool:
    users = [m for m in req.get("messages") or [] if m.get("role") == "user"]
    return bool(users) and SECOND_PROMPT in str(users[-1].get("content"))


def script(case: str, call: Callable[[int], Call], final: str) -> Callable[[GeminiUpstream], list[GeminiTurn]]:
    def build(up: GeminiUpstream) -> list[GeminiTurn]:
        if case == "single":
            return [
                GeminiTurn(calls=[call(0)], label="call 0"),
                GeminiTurn(text=final, when=_outputs_back(up, case, 1), label="output of call 0 missing"),
            ]
        if case == "parallel":
            return [
                GeminiTurn(text=SAID[0], calls=[call(0), call(1)], label="calls 0 and 1"),
                GeminiTurn(text=final, when=_outputs_back(up, case, 2), label="outputs of calls 0, 1 missing"),
            ]
        if case == "steps":
            return [
                GeminiTurn(calls=[call(0)], label="call 0"),
                GeminiTurn(
                    text=SAID[1], calls=[call(1)], when=_outputs_back(up, case, 1), label="output of call 0 missing"
                ),
                GeminiTurn(text=final, when=_outputs_back(up, case, 2), label="outputs of calls 0, 1 missing"),
            ]
        if case == "turns":  # two user turns: the first turn's step is history in the second
            return [
                GeminiTurn(calls=[call(0)], label="call 0"),
                GeminiTurn(text=FIRST_DONE, when=_outputs_back(up, case, 1), label="output of call 0 missing"),
                GeminiTurn(calls=[call(1)], when=_second_prompt, label="second user message missing"),
                GeminiTurn(text=final, when=_outputs_back(up, case, 2), label="outputs of calls 0, 1 missing"),
            ]
        raise ValueError(case)

    return build


def expected_requests(case: str) -> int:
    return {"single": 2, "parallel": 2, "steps": 3, "turns": 4}[case]


# --------------------------------------------------------------------------- checks


def sent_signatures(up: GeminiUpstream) -> list[list[list[tuple[str, str | None]]]]:
    """Per request: its assistant steps (each assistant message with calls), each [(call id,
    signature sent or None)]."""
    return [
        [[(cid, sig) for cid, _, sig in calls] for _, _, calls in assistant_steps(r.json)] for r in up.model_requests
    ]


def expected_signatures(up: GeminiUpstream) -> list[list[list[tuple[str, str | None]]]]:
    """What each request should have carried: every step Gemini answered before it, in order,
    under Gemini's call ids, the first call of each with the signature Gemini issued for it,
    byte for byte, the others none."""
    by_turn: dict[int, list[str]] = {}
    for turn, cid, _ in up.calls:
        by_turn.setdefault(turn, []).append(cid)
    out = []
    for r in up.model_requests:
        steps = [ids for turn, ids in sorted(by_turn.items()) if r.turn is not None and turn < r.turn]
        out.append([[(cid, up.issued_for(ids[0]) if j == 0 else None) for j, cid in enumerate(ids)] for ids in steps])
    return out


def check_signatures(up: GeminiUpstream, info: str) -> None:
    assert up.rejections == [], info  # no 400 from Gemini
    assert all(r.turn is not None for r in up.model_requests), info
    assert sent_signatures(up) == expected_signatures(up), info
    assert all(CALL_ID.match(cid) for _, cid, _ in up.calls), info


def check_headers(up: GeminiUpstream, info: str) -> None:
    for r in up.model_requests:
        assert r.path == "/v1beta/openai/chat/completions", info
        assert r.headers.get("authorization") == f"Bearer {UPSTREAM_KEY}", info
        assert PROXY_CLIENT_KEY not in str(r.headers), info
