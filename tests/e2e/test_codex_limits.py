"""Codex CLI 0.171.0 and the proxy's per-key limits (issue #54): what Codex does with the
``x-codex-primary-*``/``x-codex-secondary-*`` headers (HTTP) and the ``codex.rate_limits``
event (Responses WebSocket: the upgrade carries no limits, the event before each response
does).

Measured (``codex exec --json``, 0.171.0):

* the ``--json`` stdout says nothing about limits: ``thread.started``, ``turn.started``,
  ``item.completed``, ``turn.completed`` (its ``usage`` is the upstream's tokens) — no
  ``token_count`` event, no ``rate_limits``;
* Codex does take them in: its session file (``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl``)
  records an ``event_msg`` ``token_count`` after the response whose ``rate_limits`` is
  ``{"limit_id": "codex", "primary": {"used_percent", "window_minutes", "resets_at"},
  "secondary": {…}, …}``: primary = the key's minute window (requests or tokens, the more
  used; ``window_minutes`` 1, ``resets_at`` the minute's end), secondary = the day budget
  (``window_minutes`` 1440, ``resets_at`` the next UTC midnight), the percentages as the
  proxy sent them (at admission: this request counted, its tokens the request's estimate);
  the same over HTTP (headers) and over the WebSocket (the event);
* a refused request (429, ``rate_limit_exceeded``, ``retry-after``): over HTTP (retries off)
  the turn fails with Codex's own words, ``exceeded retry limit, last status: 429 Too Many
  Requests, request id: req_…`` (``error`` + ``turn.failed``; the proxy's message is not
  shown); over the WebSocket Codex reports ``Falling back from WebSockets to HTTPS
  transport. exceeded retry limit, last status: 429 …`` as an ``error`` item, waits for the
  window (``retry-after``), sends the request again over HTTP and completes the turn.
"""

from __future__ import annotations

import calendar
import json
import time
from pathlib import Path

import pytest
from codex_harness import CODEX_LATEST
from proxy_harness import PROXY_CLIENT_KEY, provider_entry
from scripted_upstream import chat_turn

pytestmark = pytest.mark.e2e

MODEL = "e2e-limits"
USAGE = {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}
TRANSPORTS = {"http": {}, "websocket": {"supports_websockets": True}}


def rollout_rate_limits(home: Path) -> list[dict]:
    """The ``rate_limits`` of every ``token_count`` event in Codex's session files."""
    out = []
    for f in sorted(home.glob("sessions/**/rollout-*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            payload = rec.get("payload") or {}
            if rec.get("type") == "event_msg" and payload.get("type") == "token_count":
                out.append(payload.get("rate_limits"))
    return out


def next_midnight(t: float) -> int:
    g = time.gmtime(t)
    return calendar.timegm((g.tm_year, g.tm_mon, g.tm_mday, 0, 0, 0)) + 86400


def start(upstream, proxy, limits: dict, turns: int):
    up = upstream([chat_turn(text="hello there", usage=USAGE) for _ in range(turns)], "limits")
    keys = ["sk-probe", {"name": "alice", "key": PROXY_CLIENT_KEY, "limits": limits}]
    px = proxy(providers=[provider_entry(up)], models=[{"name": MODEL, "provider": "scripted"}], auth_keys=keys)
    return up, px


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_codex_records_the_keys_windows(upstream, proxy, codex_run, transport):
    _, px = start(upstream, proxy, {"requests_per_minute": 10, "tokens_per_day": 100_000}, 2)
    left = 60 - time.time() % 60
    if left < 8:  # both runs in one calendar minute
        time.sleep(left + 0.05)
    seen = []
    for n in (1, 2):
        t0 = time.time()
        run = codex_run("say hello", base_url=px.base_url, model=MODEL, version=CODEX_LATEST, **TRANSPORTS[transport])
        info = f"{run.describe()}\n--- proxy log ---\n{px.log()}"
        assert run.returncode == 0 and run.turn_completed and run.final_message == "hello there", info
        # nothing about limits on the --json stdout
        assert [e["type"] for e in run.events] == ["thread.started", "turn.started", "item.completed", "turn.completed"]
        assert "rate_limits" not in run.stdout and "used_percent" not in run.stdout, info
        assert run.events[-1]["usage"]["input_tokens"] == 1000 and run.events[-1]["usage"]["output_tokens"] == 500
        # the session file has them: one token_count after the response
        got = rollout_rate_limits(run.home)
        assert len(got) == 1 and got[0] is not None, (got, info)
        rl = got[0]
        assert rl["limit_id"] == "codex", rl
        p, s = rl["primary"], rl["secondary"]
        assert p["window_minutes"] == 1 and p["used_percent"] == 10.0 * n, rl  # n of 10 requests this minute
        assert p["resets_at"] % 60 == 0 and t0 < p["resets_at"] <= t0 + 60, rl  # the minute's end
        assert s["window_minutes"] == 1440 and s["resets_at"] == next_midnight(t0), rl
        assert 0 < s["used_percent"] < 100, rl
        seen.append(s["used_percent"])
    # the second run's day window holds the first's settled 1500 tokens (1.5 %) on top of its own estimate
    assert seen[1] >= seen[0] + 1.5 - 0.1, seen


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_codex_shows_a_refusal(upstream, proxy, codex_run, transport):
    up, px = start(upstream, proxy, {"requests_per_minute": 1}, 2)
    left = 60 - time.time() % 60
    if left < 8:
        time.sleep(left + 0.05)
    first = codex_run("say hello", base_url=px.base_url, model=MODEL, version=CODEX_LATEST, **TRANSPORTS[transport])
    assert first.returncode == 0 and first.turn_completed, first.describe()
    assert rollout_rate_limits(first.home)[0]["primary"]["used_percent"] == 100.0
    t1 = time.time()
    # over the WebSocket Codex waits for retry-after (the minute's end) before it goes on: it
    # is stopped after a few seconds unless the minute ended by then (both are checked below)
    wait = {"timeout": 12} if transport == "websocket" else {}
    second = codex_run(
        "say hello", base_url=px.base_url, model=MODEL, version=CODEX_LATEST, **TRANSPORTS[transport], **wait
    )
    info = f"{second.describe()}\n--- proxy log ---\n{px.log()}"
    refused = "exceeded retry limit, last status: 429 Too Many Requests, request id: req_"
    if transport == "http":  # the turn fails with Codex's own words, not the proxy's message
        assert second.returncode == 1 and not second.turn_completed, info
        assert up.turns_played == 1, info  # refused before any upstream call
        assert [e["type"] for e in second.events] == ["thread.started", "turn.started", "error", "turn.failed"], info
        assert second.events[-1]["error"]["message"].startswith(refused), info
        assert "Rate limit reached" not in second.stdout, info
    else:  # refused on the socket: Codex falls back to HTTP, waits for retry-after, then goes on
        assert "falling back to HTTP" in second.stderr, info
        if second.turn_completed:  # the minute ended while it waited: it went on in the next one
            errs = second.items("error")
            assert len(errs) == 1 and errs[0]["message"].startswith(
                "Falling back from WebSockets to HTTPS transport. " + refused
            ), info
            assert second.returncode == 0 and second.final_message == "hello there", info
            assert up.turns_played == 2 and up.model_requests[1].t >= (t1 // 60 + 1) * 60, info
        else:  # still waiting for retry-after when stopped (its error item is not out yet):
            # nothing more reached the upstream, and the proxy refused the socket's turn
            assert second.timed_out and up.turns_played == 1, info
            assert time.time() < (t1 // 60 + 1) * 60 + 2 and '"status":429' in px.log(), info
