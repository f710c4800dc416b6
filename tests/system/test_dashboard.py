"""Every panel of the Grafana dashboard, proven against a real Prometheus scraping real proxies.

Theory of operation
-------------------
The dashboard (``docker/grafana/switchboard.json``) is only worth something if each of its
queries finds the series it names, with the labels it groups by.  This test runs what the
dashboard would look at:

* two ``switchboard serve`` processes (``proxy_harness.Proxy``) on the ``demo`` provider,
  with a provider that is not listening (``dead``: a model whose fallback target it is
  makes failed upstream attempts and opens its breaker; a model served by it alone makes
  502s), two named client keys (``bob`` with ``requests_per_minute`` so some requests are
  refused), and a small SQLite store (``max_record_bytes`` so a large stored turn is refused
  ``too_large``, ``max_bytes`` at its minimum so puts evict);
* a real Prometheus (``prometheus_server``: Debian's package, unpacked under ``.e2e/``)
  scraping both every second;
* a short mixed load on each proxy, three times with scrapes in between (so every counter
  *increases* inside the query window and every rate is above zero): Chat and Responses,
  streamed and not, the fallback model, a 5xx, an unknown model, the limited key, a stored
  turn too large to store, one Responses WebSocket session, a second turn of a Chat
  conversation (the demo provider reads its earlier messages from its prefix cache).

Then every target of every panel (and every template variable's ``label_values`` query) is
sent to ``/api/v1/query`` with the template variables replaced (``$instance`` and ``$model``
by ``.*``, ``$__rate_interval`` by a window covering the run).  A query with an empty
result, or with no value above zero (a rate that never moved, a quantile of nothing: NaN),
fails the test naming the panel.  The breaker gauge is the one panel whose zero is a value
(closed), so it is held only to "not empty".
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

E2E = Path(__file__).resolve().parent.parent / "e2e"
if str(E2E) not in sys.path:
    sys.path.insert(0, str(E2E))
from proxy_harness import REPO, Proxy, free_port  # noqa: E402

from tests.system.prometheus_server import Prometheus, ensure_prometheus  # noqa: E402

DASHBOARD = REPO / "docker" / "grafana" / "switchboard.json"
ALICE = "sk-dash-alice-5c1e"
BOB = "sk-dash-bob-90af"  # limited: requests beyond BOB_RPM in a minute are refused
BOB_RPM = 2
WINDOW = "2m"  # $__rate_interval: longer than the run, so a window holds all its samples
ROUNDS = 3
ZERO_OK = {"switchboard_breaker_state"}  # a gauge whose 0 (closed) is a value


def config(dead_port: int) -> dict[str, Any]:
    return {
        "auth": {
            "keys": [
                ALICE,  # plain (the harness probes with the first key): named key-<12 hex>
                {"name": "bob", "key": BOB, "limits": {"requests_per_minute": BOB_RPM}},
            ]
        },
        # a stored turn of ~20 KB of incompressible input is refused too_large; the rest fit,
        # and a total of 1 KiB makes every put evict the previous records
        "store": {"max_record_bytes": 4096, "max_bytes": 1024},
        "server": {"retries": {"max_attempts": 2, "backoff_base_seconds": 0.01, "backoff_max_seconds": 0.02}},
        "providers": [
            {"name": "demo", "profile": "demo"},
            {
                "name": "dead",
                "profile": "openai-compatible",
                "base_url": f"http://127.0.0.1:{dead_port}/v1",
                "api_key": "sk-dead",
                "timeouts": {"connect": 1, "first_byte": 2},
            },
        ],
        "models": [
            {"name": "demo-model", "provider": "demo"},
            {
                "name": "fallback-model",
                "targets": [
                    {"provider": "dead", "upstream_model": "gone"},
                    {"provider": "demo", "upstream_model": "demo"},
                ],
            },
            {"name": "dead-model", "provider": "dead", "upstream_model": "gone"},
        ],
    }


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, Any]]:
    exe = ensure_prometheus()  # before any process starts: a failed download leaves nothing running
    dead_port = free_port()  # nothing listens there: connection refused
    proxies = [Proxy(config(dead_port), tmp_path / f"proxy{i}") for i in range(2)]
    prom: Prometheus | None = None
    try:
        for p in proxies:
            p.start()
        prom = Prometheus([f"127.0.0.1:{p.port}" for p in proxies], tmp_path / "prometheus", exe).start()
        yield {"proxies": proxies, "prom": prom}
    finally:
        if prom is not None:
            prom.stop()
        for p in proxies:
            p.stop()


# --------------------------------------------------------------------------- load


def _auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def _post(c: httpx.Client, path: str, key: str, body: dict[str, Any]) -> int:
    if body.get("stream"):
        with c.stream("POST", path, json=body, headers=_auth(key)) as r:
            for _ in r.iter_bytes():
                pass
            return r.status_code
    return c.post(path, json=body, headers=_auth(key)).status_code


async def _ws_session(url: str) -> list[str]:
    """Two turns on one Responses WebSocket: the event types of each turn's end."""
    from websockets.asyncio.client import connect

    ends = []
    headers = {**_auth(ALICE), "openai-beta": "responses_websockets=2026-02-06"}
    async with connect(url.replace("http://", "ws://") + "/v1/responses", additional_headers=headers) as ws:
        for text in ("hello over a socket", "and again"):
            await ws.send(json.dumps({"type": "response.create", "model": "demo-model", "input": text, "store": False}))
            while True:
                ev = json.loads(await asyncio.wait_for(ws.recv(), 10))
                if ev["type"] in ("response.completed", "response.failed", "response.incomplete", "error"):
                    ends.append(ev["type"])
                    break
    return ends


def load(proxy: Proxy) -> dict[str, int]:
    """One round of mixed traffic on ``proxy``; the statuses, by request."""
    big = os.urandom(10_000).hex()  # ~20 KB that compression cannot shrink below max_record_bytes
    medium = "hello " + os.urandom(400).hex()
    got: dict[str, int] = {}
    with httpx.Client(base_url=proxy.base_url, timeout=20) as c:
        msgs = [{"role": "user", "content": "Say hello"}]
        got["chat"] = _post(c, "/chat/completions", ALICE, {"model": "demo-model", "messages": msgs})
        # a second turn: the demo's prefix cache reads the first from cache (the cache-hit panel)
        turn2 = [*msgs, {"role": "assistant", "content": "Hello there"}, {"role": "user", "content": "Again"}]
        got["chat_turn2"] = _post(c, "/chat/completions", ALICE, {"model": "demo-model", "messages": turn2})
        got["chat_stream"] = _post(
            c,
            "/chat/completions",
            ALICE,
            {"model": "demo-model", "messages": msgs, "stream": True, "reasoning_effort": "low"},
        )
        # stored (store defaults to true): ~600 bytes each, so the second put of a round evicts
        got["responses"] = _post(c, "/responses", ALICE, {"model": "demo-model", "input": medium})
        got["responses_stream"] = _post(
            c, "/responses", ALICE, {"model": "fallback-model", "input": medium, "stream": True}
        )
        got["chat_fallback"] = _post(c, "/chat/completions", ALICE, {"model": "fallback-model", "messages": msgs})
        got["too_large"] = _post(c, "/responses", ALICE, {"model": "demo-model", "input": big, "store": True})
        got["dead"] = _post(c, "/chat/completions", ALICE, {"model": "dead-model", "messages": msgs})
        got["unknown"] = _post(c, "/chat/completions", ALICE, {"model": "no-such-model", "messages": msgs})
        for i in range(BOB_RPM + 2):
            got[f"bob{i}"] = _post(
                c, "/chat/completions", BOB, {"model": "demo-model", "messages": msgs, "stream": i % 2 == 0}
            )
    ends = asyncio.run(_ws_session(proxy.url))
    assert ends == ["response.completed", "response.completed"], ends
    return got


# --------------------------------------------------------------------------- the dashboard


def panels(dash: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in dash["panels"]:
        yield p
        yield from p.get("panels", [])  # a collapsed row holds its panels


def targets(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(``panel title / refId``, expr) of every query target of every panel."""
    out = []
    for p in panels(dash):
        for t in p.get("targets", []):
            if t.get("expr"):
                out.append((f"{p['title']} / {t.get('refId', '?')}", t["expr"]))
    return out


def variable_queries(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """Each query variable's ``label_values(selector, label)`` as the PromQL that answers it."""
    out = []
    for v in dash["templating"]["list"]:
        if v.get("type") != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", q.strip())
        assert m, f"variable {v['name']}: not a label_values query: {q}"
        out.append((f"variable ${v['name']}", f"group by ({m[2]}) ({m[1]})"))
    return out


def substitute(expr: str) -> str:
    for name in ("instance", "model"):
        expr = expr.replace(f"${{{name}}}", ".*").replace(f"${name}", ".*")
    expr = expr.replace("$__rate_interval", WINDOW).replace("${__rate_interval}", WINDOW)
    assert "$" not in expr, f"a template variable left unreplaced: {expr}"
    return expr


def _values(result: list[dict[str, Any]]) -> list[float]:
    return [float(s["value"][1]) for s in result]


def test_every_dashboard_panel_has_data(env: dict[str, Any]) -> None:
    started = time.monotonic()
    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = variable_queries(dash) + targets(dash)
    assert len(queries) > 20, queries
    prom: Prometheus = env["prom"]
    proxies: list[Proxy] = env["proxies"]

    # rounds with scrapes in between: the later ones make every counter of the earlier move
    # (the dead provider's breaker opens in the first: its error series of the second only
    # moves in the third)
    for _ in range(ROUNDS):
        for p in proxies:
            statuses = load(p)
            assert statuses["chat"] == statuses["responses_stream"] == statuses["too_large"] == 200, statuses
            assert statuses["dead"] >= 500 and statuses["unknown"] == 404, statuses
            assert 429 in {statuses[f"bob{i}"] for i in range(BOB_RPM + 2)}, statuses
        prom.wait_scrapes(2)
    assert set(prom.targets_up().values()) == {"up"}, prom.targets_up()

    empty, flat = [], []
    for name, expr in queries:
        result = prom.query(substitute(expr))
        values = _values(result)
        if not result:
            empty.append(f"{name}: {expr}")
        elif not name.startswith("variable") and not any(v > 0 and not math.isnan(v) for v in values):
            if not any(m in expr for m in ZERO_OK):
                flat.append(f"{name}: {expr} -> {values}")
    logs = "\n".join(f"--- proxy {i} ---\n{p.log(3000)}" for i, p in enumerate(proxies))
    assert not empty, "panels with no data:\n" + "\n".join(empty) + "\n" + logs
    assert not flat, "panels with nothing above zero:\n" + "\n".join(flat)
    # every Switchboard replica is on the dashboard: the instance variable lists both
    instances = {s["metric"]["instance"] for s in prom.query(substitute(variable_queries(dash)[0][1]))}
    assert instances == {f"127.0.0.1:{p.port}" for p in proxies}, instances
    assert time.monotonic() - started < 60


def test_compose_prometheus_config_passes_promtool() -> None:
    """docker/prometheus.yml as Prometheus itself reads it (its package's promtool)."""
    promtool = ensure_prometheus().with_name("promtool")
    r = subprocess.run(
        [str(promtool), "check", "config", str(REPO / "docker" / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0 and "SUCCESS" in r.stdout + r.stderr, r.stdout + r.stderr
