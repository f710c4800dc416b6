"""bench/codex_body.py: the Codex-sized request the big-* scenarios send is deterministic,
as big as said, a valid Responses request, and translates for both upstream protocols."""

from __future__ import annotations

import orjson

from bench.codex_body import codex_request, history
from bench.fake_upstream import parse_model
from bench.instructions import CASES
from bench.run import request_body, scenarios
from transformers.bridge import open_bridge
from transformers.context import Ctx
from transformers.protocols import check_body


def test_the_body_is_the_same_every_time_and_about_370_kb() -> None:
    a, b = codex_request("bench-chat-n20-d0"), codex_request("bench-chat-n20-d0")
    assert a == b
    assert 300_000 < len(a) < 450_000
    body = orjson.loads(a)
    assert len(body["input"]) == 30 * 9 + 1 and body["store"] is False and body["stream"] is True
    assert len(history(2)) == 18


def test_it_passes_the_checks_and_translates_both_ways() -> None:
    raw = codex_request("bench-chat-n20-d0")
    for upstream in ("chat", "responses"):
        body = check_body(raw, "responses")
        out, _bridge = open_bridge(body, "responses", upstream, Ctx(quirks=frozenset()))
        if upstream == "chat":
            calls = [c for m in out["messages"] for c in m.get("tool_calls", ())]
            tools = [m for m in out["messages"] if m["role"] == "tool"]
            assert len(calls) == len(tools) == 90
        else:
            assert len(out["input"]) == len(body["input"])


def test_the_big_scenarios_send_it() -> None:
    big = [s for s in scenarios(quick=True) if s.name.startswith("big-")]
    assert [(s.name, s.client, s.upstream) for s in big] == [
        ("big-resp-c1", "responses", "responses"),
        ("big-resp2chat-c1", "responses", "chat"),
    ]
    for s in big:
        raw = request_body(s)
        assert raw == codex_request(s.model, 30) and parse_model(s.model) == (20, 0.0)
    assert CASES["big-resp2chat-n20"][1] == codex_request("bench-chat-n20-d0")
