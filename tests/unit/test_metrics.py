"""Metrics.answered: one proxied answer's counters, the same as the inc() calls it replaces."""

from __future__ import annotations

import pytest

from app import metrics
from app.metrics import Metrics


def _by_inc(
    m: Metrics, route: str, client: str, provider: str, status: int, dur: float, ttfb: float | None, outcome: str | None
) -> None:
    m.inc("switchboard_requests_total", route=route, client=client, provider=provider, status=str(status))
    m.inc("switchboard_request_duration_seconds_sum", dur, route=route)
    if ttfb is not None:
        m.inc("switchboard_ttfb_seconds_sum", ttfb, route=route)
    if outcome is not None:
        m.inc("switchboard_stream_outcomes_total", outcome=outcome, client=client)


CALLS = [
    ("/v1/chat/completions", "chat", "p", 200, 0.5, 0.1, "completed"),
    ("/v1/chat/completions", "chat", "p", 200, 0.25, 0.2, "completed"),
    ("/v1/responses", "responses", "p", 502, 0.125, None, "failed"),
    ("/v1/responses", "responses", "p", 200, 1.0, 0.5, None),  # not a stream
    # values outside the closed sets: counted under "other"
    ("/v1/secret/path", "nope", "unknown-provider", 200, 2.0, 1.0, "made-up"),
]


def test_answered_counts_as_the_incs_do() -> None:
    a, b = Metrics(providers=["p"]), Metrics(providers=["p"])
    for call in CALLS * 3:
        a.answered(*call)
        _by_inc(b, *call)
    assert {k: dict(v) for k, v in a.counters.items()} == {k: dict(v) for k, v in b.counters.items()}
    assert (
        a.get("switchboard_requests_total", route="/v1/chat/completions", client="chat", provider="p", status="200")
        == 6
    )
    assert a.render() == b.render()


def test_answered_keeps_the_series_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "MAX_SERIES", 2)
    a, b = Metrics(), Metrics()
    for status in (200, 400, 404, 500):
        call = ("/v1/responses", "responses", "-", status, 0.5, 0.1, "completed")
        a.answered(*call)
        _by_inc(b, *call)
    assert len(a.counters["switchboard_requests_total"]) == 3  # two, then the all-"other" one
    assert a.render() == b.render()
