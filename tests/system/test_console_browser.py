"""The console (app/console.py) in a real headless browser: Debian's Chromium, driven by
playwright-core (tests/system/browser.py, tests/system/console_browser/driver.mjs), against
a real ``switchboard serve`` under load.

The proxy has a ``demo`` model (the built-in demo provider, with a price) and ``bad-*`` on a
provider whose port nothing listens on (every request fails upstream: 502, then 503 once its
breaker opens), three client keys (one named as markup) and an admin key.  While four
threads send chat requests (whole and streamed, on every key, some to a ``bad-*`` model
whose name is markup), the browser:

1. as a non-admin: the login form refuses a client key (401, its message shown, no
   cookie), and the overview and the keys API answer 401 without a session;
2. signs in with the admin key: the session cookie is HttpOnly and SameSite=Strict, no key
   is in any URL;
3. sees the "now" panel move (requests per second above 0, the chart drawn, a time to
   first token);
4. makes a key named ``<script>…</script>`` with a model glob that is an ``<img onerror>``
   through the form, reads its secret once, sees the name and the glob as text, uses the
   secret (200), revokes the key from its row (401 after).

The load stops; the page refreshes; what it shows is compared with ``/v1/admin/usage``
and ``/metrics`` read by the test: every key's requests, tokens, cost and errors today;
requests since start; each provider's requests, attempts, failed attempts, upstream error
codes and breaker; the errors of the last minute by kind; the failed turns' request ids
and their markup model name, as text.  No console error, no page error, no failed
response in the signed-in page; nothing the clients named became markup.  A screenshot is
left in the test's folder.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.system.browser import chromium, driver
from tests.system.test_limits_cluster import E2E, free_port

if str(E2E) not in sys.path:
    sys.path.insert(0, str(E2E))
from proxy_harness import Proxy

REPO = Path(__file__).resolve().parent.parent.parent
ADMIN = "sk-console-browser-admin"
ODD_KEY = "<script>window.__pwned='key'</script>"
ODD_MODEL = "bad-<img src=x onerror=\"window.__pwned='model'\">"
NEW_KEY = "<script>window.__pwned='new'</script>new"
NEW_MODEL = '<img src=x onerror="window.__pwned=1">'
KEYS = {"team": "sk-team", ODD_KEY: "sk-odd"}
LOAD_SECONDS = 90  # at most: the load stops when the browser is done with its steps


def config() -> dict[str, Any]:
    return {
        "server": {"secret_key": "console-browser-test-secret-0123456789abcdef", "retries": {"max_attempts": 1}},
        "auth": {
            "keys": [
                "sk-probe",
                {"name": "team", "key": "sk-team", "limits": {"tokens_per_day": 10_000_000, "cost_per_day": 50.0}},
                {"name": ODD_KEY, "key": "sk-odd"},
            ],
            "admin_keys": [ADMIN],
        },
        "providers": [
            {"name": "demo", "profile": "demo"},
            {
                "name": "down",
                "profile": "openai-compatible",
                "protocol": "chat",
                "base_url": f"http://127.0.0.1:{free_port()}/v1",
            },
        ],
        "models": [
            {"name": "demo", "provider": "demo", "price": {"input": 2.0, "output": 8.0}},
            {"name": "bad-*", "provider": "down"},
        ],
    }


class Load:
    """Chat requests from four threads until stopped: (key, model, stream, status, request id)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.stop = threading.Event()
        self.sent: list[tuple[str, str, bool, int, str]] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(4)]

    def run(self, i: int) -> None:
        plan = [
            ("sk-team", "demo", False),
            ("sk-team", "demo", True),
            ("sk-odd", "demo", False),
            ("sk-team", "demo", True),
        ]
        deadline = time.monotonic() + LOAD_SECONDS
        n = 0
        with httpx.Client(timeout=20) as c:
            while not self.stop.is_set() and time.monotonic() < deadline and n < 2000:
                key, model, stream = plan[n % len(plan)]
                if i == 3 and n % 10 == 5:
                    key, model, stream = "sk-odd", ODD_MODEL, False
                body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": f"hello {n}"}]}
                r = c.post(f"{self.base}/chat/completions", json=body, headers={"authorization": f"Bearer {key}"})
                r.read()
                with self.lock:
                    self.sent.append((key, model, stream, r.status_code, r.headers.get("x-request-id", "")))
                n += 1
                time.sleep(0.02)

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)


def num(text: str) -> float:
    return float(text.replace(",", "").split()[0])


def metrics(url: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        m = re.match(r"^([a-z_]+)(?:\{(.*)\})? (\S+)$", line)
        if m:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            out.append((m.group(1), labels, float(m.group(3))))
    return out


def msum(rows: list[tuple[str, dict[str, str], float]], name: str, **want: str) -> float:
    return sum(v for n, lab, v in rows if n == name and all(lab.get(k) == x for k, x in want.items()))


@pytest.fixture(scope="module")
def browser() -> tuple[Path, dict[str, str], Path]:
    exe, env = chromium(REPO / ".e2e" / "chromium")
    return exe, env, driver(REPO / ".e2e" / "console-browser")


def test_the_console_in_chromium_under_load(browser: tuple[Path, dict[str, str], Path], tmp_path: Path) -> None:
    exe, env, script = browser
    proxy = Proxy(config(), tmp_path / "proxy", startup_timeout=20)
    proxy.start()
    load = Load(proxy.base_url)
    try:
        # a console looking from now on: the metrics are sampled for the whole load
        look = httpx.get(f"{proxy.url}/console/api/overview", headers={"authorization": f"Bearer {ADMIN}"}, timeout=10)
        assert look.status_code == 200, look.text
        time.sleep(1.2)
        load.start()
        job = {
            "exe": str(exe),
            "env": env,
            "userDataDir": str(tmp_path / "chromium-profile"),  # a fresh one
            "base": proxy.url,
            "adminKey": ADMIN,
            "clientKey": "sk-team",
            "oddKey": NEW_KEY,
            "oddModel": NEW_MODEL,
            "readyFile": str(tmp_path / "ready"),
            "quietFile": str(tmp_path / "quiet"),
            "settleMs": 2500,
            "screenshot": str(tmp_path / "console.png"),
        }
        (tmp_path / "job.json").write_text(json.dumps(job))
        node = subprocess.Popen(
            ["node", str(script), str(tmp_path / "job.json")],
            cwd=script.parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 240
            while not (tmp_path / "ready").exists() and node.poll() is None:
                assert time.monotonic() < deadline, "the browser never got through its steps"
                time.sleep(0.2)
            load.finish()
            (tmp_path / "quiet").write_text("quiet")
            stdout, stderr = node.communicate(timeout=120)
        finally:
            if node.poll() is None:
                node.kill()  # (this PID only)
                node.wait()
        assert stdout.strip(), f"no output from the driver:\n{stderr[-4000:]}"
        got = json.loads(stdout.strip().splitlines()[-1])
        assert "error" not in got, f"{got['error']}\nsteps: {json.dumps(got['steps'])[:6000]}\n{proxy.log(3000)}"
        steps = {s["name"]: s for s in got["steps"]}
        usage = httpx.get(
            f"{proxy.base_url}/admin/usage",
            params={"by": "key", "since": time.strftime("%Y-%m-%d", time.gmtime())},
            headers={"authorization": f"Bearer {ADMIN}"},
            timeout=10,
        ).json()["data"]
        scrape = metrics(proxy.url)
    finally:
        load.finish()
        proxy.stop()

    # 1. a non-admin
    na = steps["non_admin"]
    assert na["status"] == 401 and "not an admin key" in na["error"]
    assert na["overview"] == 401 and na["keys"] == 401 and "sb_console" not in na["cookies"]
    assert "sk-team" not in na["url"]
    # 2. the session
    signed = steps["signed_in"]
    assert signed["cookie"] == {**signed["cookie"], "httpOnly": True, "sameSite": "Strict"}
    assert signed["url"] == f"{proxy.url}/console" and ADMIN not in json.dumps(got["steps"])
    # 3. live
    live = steps["live"]["snapshot"]
    assert num(live["tiles"]["rps"]) > 0 and live["chartPoints"] > 1 and "ms" in live["tiles"]["ttft"]
    assert live["cookieVisible"] is False
    # 4. the key made in the page
    made = steps["made_and_revoked"]
    assert made["secretPrefix"] == "sk-sb-" and made["works"] == 200 and made["afterRevoke"] == 401
    assert made["row"]["name"] == NEW_KEY and NEW_MODEL in made["row"]["limits"]

    final = steps["final"]["snapshot"]
    for snap in (live, made["snapshot"], final):  # nothing the clients named became markup
        assert snap["scripts"] == 1 and snap["injected"] == 0 and snap["pwned"] is None, snap
    assert got["consoleErrors"] == [] and got["pageErrors"] == [] and got["failedResponses"] == [], got

    # the keys: the same sums as /v1/admin/usage
    rows = {r["data"]["key"]: r["cells"] for r in final["keys"]}
    by_key = {u["key"]: u for u in usage}
    assert set(by_key) == {"team", ODD_KEY, NEW_KEY}, by_key.keys()  # (the revoked key's request stays)
    for name, u in by_key.items():
        cells = rows[name]
        assert cells[0] == name  # (the markup name, as text)
        assert num(cells[2]) == u["requests"], (name, cells, u)
        assert num(cells[3]) == u["input"] + u["output"]
        assert abs(num(cells[4]) - u["cost_usd"]) < 0.00006
        assert num(cells[7]) == u["errors"]
    sent = Counter(k for k, m, s, st, rid in load.sent if m == "demo" and st == 200)
    assert by_key["team"]["requests"] == sent["sk-team"]
    assert "cost per day" in rows["team"][8] and "tokens per day" in rows["team"][8]

    # requests since start, and each provider's health: as /metrics says
    assert num(final["tiles"]["total"]) == msum(scrape, "switchboard_requests_total") == len(load.sent) + 2
    health = {r["data"]["provider"]: r["cells"] for r in final["health"]}
    for prov in ("demo", "down"):
        cells = health[prov]
        assert num(cells[2]) == msum(scrape, "switchboard_requests_total", provider=prov), (prov, cells)
        tried = sum(
            v for n, lab, v in scrape
            if n == "switchboard_upstream_attempts_total" and lab["provider"] == prov
            and lab["outcome"] not in ("breaker_open", "budget_exhausted", "untranslatable")
        )  # fmt: skip
        assert num(cells[3]) == tried, (prov, cells)
    down = health["down"]
    errors = {
        lab["code"]: int(v)
        for n, lab, v in scrape
        if n == "switchboard_upstream_errors_total" and lab["provider"] == "down" and v
    }
    assert down[8] == ", ".join(f"{c}: {n}" for c, n in sorted(errors.items())), (down, errors)
    state = msum(scrape, "switchboard_breaker_state", provider="down", model="-")
    assert down[1] == {0: "closed", 1: "half_open", 2: "open"}[int(state)], (down, state)
    assert num(down[4]) > 0 and num(health["demo"][4]) == 0

    # the errors of the last minute, by kind (the whole run fits in the sampler's minute)
    kinds = {r["cells"][0]: num(r["cells"][1]) for r in final["errors"]}
    failed_statuses = Counter(st for _, _, _, st, _ in load.sent if st >= 400)
    for status, n in failed_statuses.items():
        assert kinds.get(f"HTTP {status}", 0) >= n, (kinds, failed_statuses)
    # the last failed turns: their request ids, the model's markup name as text
    failed_ids = {rid for _, m, _, st, rid in load.sent if m == ODD_MODEL and st >= 500}
    shown = final["failures"]
    assert shown and all(r["data"]["requestId"] in failed_ids for r in shown), (shown[:3], list(failed_ids)[:3])
    assert {r["cells"][3] for r in shown} == {ODD_MODEL} and {r["cells"][2] for r in shown} == {ODD_KEY}
    print(f"\nconsole: {len(load.sent)} requests under load; screenshot {tmp_path / 'console.png'}")
