"""Shared pieces of the tests that put the scripted Gemini upstream (``gemini_upstream.py``)
behind the proxy: the module-scoped stage, the three scripted cases, and the checks on what
Gemini got.

Theory of operation
-------------------
* ``gemini_stage(*models)``: a module-scoped fixture ``stage``: ONE proxy process (a
  ``server.secret_key`` set, so the proxy seals signatures) in front of one ``GeminiUpstream``
  per model, each its own provider ``profile: gemini`` (``base_url`` the upstream's
  ``/v1beta/openai``).  ``stage.script(model, build)`` gives that upstream a fresh script
  (``build(up)`` returns the turns, so predicates can read ``up.issued``) and returns it;
  ``mark()`` / ``log_since(mark)`` cut one test's part out of the proxy log;
  ``repairs(rule, model)`` reads ``switchboard_repairs_total`` off ``/metrics``.
* ``script(case, call, final)``: the three cases, ``call(k)`` the client's shell tool
  call printing ``marker(case, k)``:

  ============  ==============================================================
  ``single``    call 0; then ``final`` once call 0's output came back
  ``parallel``  text, then calls 0 and 1 in one step (only call 0 signed); then
                ``final`` once both outputs came back
  ``steps``     call 0; then text and call 1 once call 0's output came back;
                then ``final`` once both did
  ============  ==============================================================

  A missed predicate answers ``PREDICATE-MISS: ...``, which the client prints: the
  final-text check fails.
* ``check_signatures(up, escape=...)``: every request after the first sent each signed call
  of the current turn back with the signature Gemini issued for it, byte for byte
  (``escape=True``: with the escape value instead), no signature on the unsigned calls,
  under Gemini's own call ids; and no request was refused (``up.rejections``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
import pytest
from gemini_upstream import ESCAPE, Call, GeminiTurn, GeminiUpstream, assistant_steps
from proxy_harness import PROXY_CLIENT_KEY, UPSTREAM_KEY, Proxy, provider_entry
from scenarios import tool_outputs

SECRET_KEY = "e2e-gemini-secret-key-0123456789abcdef0123456789"
CASES = ("single", "parallel", "steps")
CALL_ID = re.compile(r"^function-call-\d{19}$")
SAID = ("Printing both markers at once.", "Now the second marker.")  # text before the calls


def marker(case: str, k: int) -> str:
    return f"gemini-e2e-{case}-{k}-ok"


def provider_name(model: str) -> str:
    return f"gemini-{model}"


class GeminiStage:
    """One proxy process in front of one scripted Gemini upstream per model."""

    def __init__(self, models: tuple[str, ...], workdir) -> None:
        self.ups: dict[str, GeminiUpstream] = {}
        providers, entries = [], []
        try:
            for m in models:
                up = GeminiUpstream([], name=f"gemini-{m}").start()
                self.ups[m] = up
                prov = provider_entry(up, name=provider_name(m), profile="gemini", protocol="chat")
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
        for up in self.ups.values():
            up.stop()


def gemini_stage(*models: str):
    """A module-scoped fixture named ``stage`` (assign it to a module-level name)."""

    @pytest.fixture(scope="module", name="stage")
    def _stage(tmp_path_factory):
        st = GeminiStage(models, tmp_path_factory.mktemp("gemini-stage"))
        yield st
        st.stop()

    return _stage


def repairs(proxy_url: str, rule: str, provider: str) -> float:
    """``switchboard_repairs_total`` for ``rule`` and ``provider`` (0 when absent)."""
    text = httpx.get(f"{proxy_url}/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        if not line.startswith("switchboard_repairs_total{"):
            continue
        labels, _, value = line.rpartition(" ")
        if f'rule="{rule}"' in labels and f'provider="{provider}"' in labels:
            total += float(value)
    return total


# --------------------------------------------------------------------------- scripts


def _outputs_back(up: GeminiUpstream, case: str, n: int) -> Callable[[dict], bool]:
    """The outputs of the first ``n`` calls Gemini made came back under their ids, each with
    its marker."""

    def pred(req: dict) -> bool:
        outs = tool_outputs(req)
        ids = [cid for _, cid, _ in up.calls]
        return len(ids) >= n and all(marker(case, k) in (outs.get(ids[k]) or "") for k in range(n))

    return pred


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
        raise ValueError(case)

    return build


def expected_requests(case: str) -> int:
    return 3 if case == "steps" else 2


# --------------------------------------------------------------------------- checks


def sent_signatures(up: GeminiUpstream) -> list[list[list[tuple[str, str | None]]]]:
    """Per request: the current turn's assistant steps, each [(call id, signature sent)]."""
    out = []
    for r in up.model_requests:
        steps = [[(cid, sig) for cid, _, sig in calls] for _, current, calls in assistant_steps(r.json) if current]
        out.append(steps)
    return out


def expected_signatures(up: GeminiUpstream, *, escape: bool) -> list[list[list[tuple[str, str | None]]]]:
    """What each request should have carried: every step Gemini answered before it, its first
    call with the signature Gemini issued for it (or the escape value), the others none."""
    reqs = up.model_requests
    out = []
    for n, r in enumerate(reqs):
        steps = []
        for _, current, calls in assistant_steps(r.json):
            if not current:
                continue
            row = []
            for j, (cid, _, _) in enumerate(calls):
                sig = (ESCAPE if escape else up.issued_for(cid)) if j == 0 else None
                row.append((cid, sig))
            steps.append(row)
        # the steps must be the ones Gemini answered on the requests before this one
        assert len(steps) == n, f"request {n} replays {len(steps)} assistant steps, expected {n}"
        out.append(steps)
    return out


def check_signatures(up: GeminiUpstream, info: str, *, escape: bool) -> None:
    assert up.rejections == [], info  # no 400 from Gemini
    sent = sent_signatures(up)
    assert sent == expected_signatures(up, escape=escape), info
    # the calls went back under Gemini's own ids, each issued signature exactly once per request
    for r in up.model_requests[1:]:
        for _, _, calls in assistant_steps(r.json):
            assert all(CALL_ID.match(cid or "") for cid, _, _ in calls), info
    if not escape:
        issued = [i.signature for i in up.issued]
        for n, steps in enumerate(sent):
            carried = [sig for step in steps for _, sig in step if sig is not None]
            assert carried == issued[:n], info


def check_headers(up: GeminiUpstream, info: str) -> None:
    for r in up.model_requests:
        assert r.path == "/v1beta/openai/chat/completions", info
        assert r.headers.get("authorization") == f"Bearer {UPSTREAM_KEY}", info
        assert PROXY_CLIENT_KEY not in str(r.headers), info
