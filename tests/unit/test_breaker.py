"""The circuit breaker's state table, the retry budget, the backoff and the target order."""

from __future__ import annotations

import random

import pytest

from providers.breaker import Breaker, BreakerPolicy
from providers.retry import FAILURES, RetryBudget, RetryPolicy, classify, order_targets

P = BreakerPolicy(failures=3, ratio=0.5, min_calls=6, window=10.0, open_seconds=5.0)


def at(state: str, now: float = 100.0) -> Breaker:
    """A breaker put in ``state`` by its own transitions."""
    b = Breaker(P)
    if state == "closed":
        return b
    for _ in range(P.failures):
        b.failure(now - P.open_seconds - 1 if state != "open" else now)
    assert b.state == "open"
    if state == "half_open":
        assert b.allow(now)  # the probe
        assert b.state == "half_open" and b.probing
    return b


# (state, event, time offset, expected answer of allow / None, next state)
TABLE = [
    ("closed", "allow", 0, True, "closed"),
    ("closed", "success", 0, None, "closed"),
    ("closed", "failure", 0, None, "closed"),  # 1 in a row < 3
    ("open", "allow", 1, False, "open"),  # open_seconds not over
    ("open", "allow", 5, True, "half_open"),  # over: this is the probe
    ("open", "success", 1, None, "open"),  # a late report of an earlier attempt: no closing
    ("open", "failure", 1, None, "open"),
    ("half_open", "allow", 0, False, "half_open"),  # a probe is in flight
    ("half_open", "success", 0, None, "closed"),
    ("half_open", "failure", 0, None, "open"),
    ("half_open", "release", 0, None, "half_open"),
]


@pytest.mark.parametrize(("state", "event", "dt", "allowed", "after"), TABLE)
def test_state_table(state: str, event: str, dt: float, allowed: bool | None, after: str) -> None:
    b = at(state)
    now = 100.0 + dt
    if event == "allow":
        assert b.allow(now) is allowed
    else:
        getattr(b, event)(now)
    assert b.state == after


def test_consecutive_failures_open_and_a_success_resets_the_run() -> None:
    b = Breaker(P)
    b.failure(1)
    b.failure(2)
    b.success(3)
    b.failure(4)
    b.failure(5)
    assert b.state == "closed"
    b.failure(6)
    assert b.state == "open" and b.opened_at == 6


def test_failure_ratio_in_the_window_opens() -> None:
    b = Breaker(P)
    for t in range(6):  # alternate: never 3 in a row, half of 6 calls failed
        (b.failure if t % 2 else b.success)(float(t))
    assert b.state == "open"


def test_calls_outside_the_window_do_not_count() -> None:
    b = Breaker(P)
    for t in range(5):
        (b.failure if t % 2 else b.success)(float(t))
    b.failure(100.0)  # the earlier calls left the 10 s window: 1 call only
    assert b.state == "closed"


def test_release_lets_a_new_probe_through() -> None:
    b = at("half_open")
    b.release(100.0)
    assert b.allow(100.0) and not b.allow(100.0)


def test_half_open_failure_restarts_the_timer() -> None:
    b = at("half_open")
    b.failure(200.0)
    assert b.state == "open" and b.retry_in(200.0) == P.open_seconds
    assert not b.allow(204.0) and b.allow(205.0)


def test_closing_clears_the_window() -> None:
    b = at("half_open")
    b.success(100.0)
    b.failure(101.0)
    b.failure(102.0)
    assert b.state == "closed"


def test_budget_allows_the_floor_then_the_ratio() -> None:
    b = RetryBudget(ratio=0.2, min_retries=3, window=10.0)
    for _ in range(5):
        b.request(0.5)
    assert [b.try_retry(0.5) for _ in range(4)] == [True, True, True, False]  # floor 3 > 20 % of 5
    for _ in range(40):
        b.request(1.5)
    # 45 requests: 9 retries in the window, 3 spent
    assert sum(b.try_retry(1.5) for _ in range(10)) == 6


def test_budget_window_slides() -> None:
    b = RetryBudget(ratio=0.0, min_retries=1, window=10.0)
    assert b.try_retry(0.0) and not b.try_retry(9.0)
    assert b.try_retry(10.5)  # the first retry left the window


def test_backoff_grows_with_jitter_within_bounds() -> None:
    p = RetryPolicy(backoff_base=0.2, backoff_max=1.0)
    rng = random.Random(1)
    for n, full in ((1, 0.2), (2, 0.4), (3, 0.8), (4, 1.0), (9, 1.0)):
        waits = [p.backoff(n, rng) for _ in range(200)]
        assert all(full / 2 <= w <= full for w in waits)
        assert max(waits) - min(waits) > full / 4  # jitter: not one value


def test_classification() -> None:
    assert classify("server_error") == ("server_error", True, "model")
    assert classify("upstream_bad_response") == ("bad_response", False, "model")
    assert classify("upstream_unreachable") == ("unreachable", True, "provider")
    assert classify("upstream_auth_failed") == ("auth_failed", True, "provider")
    assert classify("rate_limit_exceeded") == ("rate_limited", True, "")  # rate limiting, not a fault
    for code in ("context_length_exceeded", "model_not_found", None, "insufficient_quota"):
        assert classify(code) == ("rejected", False, "")
    assert {v[0] for v in FAILURES.values()} >= {"unreachable", "timeout", "rate_limited"}


def test_order_targets() -> None:
    rng = random.Random(7)
    assert order_targets((None, None, None), rng) == [0, 1, 2]
    assert order_targets((), rng) == []
    firsts = [order_targets((3.0, 1.0, None), rng) for _ in range(4000)]
    assert all(o[2] == 2 and sorted(o) == [0, 1, 2] for o in firsts)  # the unweighted one: fallback only
    share = sum(o[0] == 0 for o in firsts) / len(firsts)
    assert 0.7 < share < 0.8  # weight 3 of 4
    assert order_targets((0.0, 2.0), rng) == [1, 0]


def test_the_breaker_gauge_shows_each_state_after_every_report() -> None:
    """``Resilience.report`` writes a breaker's gauge only when its state moved from what the
    gauge shows: after every report the gauge is the state, whatever ran before it (an
    ``allow`` that opened a probe, a release that left it half-open), at random."""
    from types import SimpleNamespace

    from app.failover import Resilience
    from app.metrics import Metrics
    from providers.breaker import STATES
    from providers.config import BreakerCfg, RetryCfg

    writes: list[float] = []

    class Counted(Metrics):
        def set_gauge(self, name: str, value: float, **labels: str) -> None:
            writes.append(value)
            super().set_gauge(name, value, **labels)

    now = [0.0]
    m = Counted(["p"])
    res = Resilience(RetryCfg(), BreakerCfg(failures=2, open_seconds=1.0), [("p", "m")], m, clock=lambda: now[0])
    route = SimpleNamespace(provider=SimpleNamespace(name="p"), upstream_model="m")
    rng = random.Random(3)
    moves = 0
    for _ in range(2000):
        now[0] += rng.choice((0.0, 0.3, 1.2))
        if not res.allow(route):  # type: ignore[arg-type]
            continue
        before = {k: res.shown.get(k) for k in (("p", "-"), ("p", "m"))}
        res.report(route, rng.choice(("ok", "failure", "failure", "release")), rng.choice(("provider", "model")))  # type: ignore[arg-type]
        for k in (("p", "-"), ("p", "m")):
            state = res.breakers[k].state
            assert m.get("switchboard_breaker_state", provider=k[0], model=k[1]) == STATES.index(state)
            moves += before[k] != state
    assert len(writes) == moves  # one write per change of what the gauge shows, none besides
    assert 0 < moves < 2000
