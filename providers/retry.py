"""Retries and fallbacks before the first byte: which failures, how long to wait, how many.

Theory of operation
-------------------
Pure policy; ``app.failover`` does the I/O.  A request has an ordered list of targets
(``order_targets``); each attempt goes to the next target whose breaker allows it, and a
target already tried is tried again only after a backoff.  An attempt that failed is
retried (on the next target, or the same one) only when its failure is in ``FAILURES``
with ``retry`` set, nothing reached the client yet, the per-request deadline leaves time,
``max_attempts`` is not reached and, for the same provider again, its ``RetryBudget``
allows it.

``FAILURES``: the proxy's error code of a failed attempt → (attempt outcome, retried,
the breaker it counts against).  Any other code (the upstream's 4xx: the request's own fault,
retried anywhere it fails the same) is outcome ``rejected``: answered at once, and the
breaker counts it as a success of the upstream (it answered).

=========================  ==============  =====  ========  ====================================
code                       outcome         retry  breaker   why
=========================  ==============  =====  ========  ====================================
``upstream_unreachable``   ``unreachable`` yes    provider  connect error: nothing was sent
``upstream_auth_failed``   ``auth_failed`` other  provider  401: the provider refuses our key
                                           target           (for every model; not this target
                                                            again in this request)
``upstream_timeout``       ``timeout``     yes    model     no headers in time (or 504/408)
``server_error``           ``server_error`` yes   model     5xx, or a 200 carrying such an error
``server_is_overloaded``   ``overloaded``  yes    model     503/529, engine overloaded
``rate_limit_exceeded``    ``rate_limited`` yes   —         429: rate limiting, not a fault
                                                            (``retry-after`` honoured ≤ cap, or
                                                            the next target); the breaker is
                                                            told nothing
``upstream_stream_error``  ``stream_error`` yes   model     the body broke before any byte went out
``upstream_bad_response``  ``bad_response`` no    model     a 200 that is not an answer: broken
=========================  ==============  =====  ========  ====================================

A *model* failure goes to the breaker of its (provider, upstream model) when that pair is
configured, so one model's failures never block the provider's other models; a glob-routed
model has no breaker of its own (its names are the clients'), and its failures go to the
provider's.  A *provider* failure goes to the provider's breaker, which guards every model
of it.

Backoff before trying a target again: ``base · 2^(n-1)`` capped at ``max``, half of it
fixed and half random ("equal jitter": spread, yet never zero), or the upstream's
``retry-after`` when it is at most ``retry_after_max`` (beyond it, that target is not
tried again for this request).

Retry budget (per provider, as Finagle's): over a sliding ``window`` of seconds, retries
may be at most ``ratio`` of the requests, with a floor of ``min_retries`` so a quiet
proxy can still retry.  When a provider fails everything, its requests are retried at
most 20 % more, not ``max_attempts`` times more: retries cannot multiply an outage.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

# code → (attempt outcome, retried, the breaker it counts against: "provider", "model", "")
FAILURES: dict[str, tuple[str, bool, str]] = {
    "upstream_unreachable": ("unreachable", True, "provider"),
    "upstream_auth_failed": ("auth_failed", True, "provider"),
    "upstream_timeout": ("timeout", True, "model"),
    "server_error": ("server_error", True, "model"),
    "server_is_overloaded": ("overloaded", True, "model"),
    "rate_limit_exceeded": ("rate_limited", True, ""),
    "upstream_stream_error": ("stream_error", True, "model"),
    "upstream_bad_response": ("bad_response", False, "model"),
}
REJECTED = ("rejected", False, "")
# outcomes after which the same target is not tried again in this request (only another)
NOT_AGAIN = frozenset({"auth_failed"})

# every outcome of ``switchboard_upstream_attempts_total{outcome}``
ATTEMPT_OUTCOMES = frozenset(
    {"ok", "rejected", "breaker_open", "budget_exhausted", "untranslatable", "cancelled"}
    | {v[0] for v in FAILURES.values()}
)


def classify(code: str | None) -> tuple[str, bool, str]:
    """(attempt outcome, retried, the breaker scope it fails: "provider", "model" or "") of a
    failed attempt's error code."""
    return FAILURES.get(code or "", REJECTED)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 3
    backoff_base: float = 0.2
    backoff_max: float = 2.0
    retry_after_max: float = 5.0
    deadline: float = 30.0
    budget_ratio: float = 0.2
    budget_min_retries: int = 3
    budget_window: float = 10.0

    def backoff(self, n: int, rng: random.Random) -> float:
        """Seconds to wait before the ``n``-th retry of one target (n ≥ 1)."""
        d = min(self.backoff_max, self.backoff_base * (2 ** (n - 1)))
        return d / 2 + rng.uniform(0, d / 2)


@dataclass(slots=True)
class RetryBudget:
    """Requests and retries of one provider over a sliding window, in one-second buckets."""

    ratio: float = 0.2
    min_retries: int = 3
    window: float = 10.0
    buckets: deque[list[float]] = field(default_factory=deque)  # [second, requests, retries]

    def _bucket(self, now: float) -> list[float]:
        sec = float(int(now))
        b = self.buckets
        while b and b[0][0] <= sec - self.window:
            b.popleft()
        if not b or b[-1][0] != sec:
            b.append([sec, 0.0, 0.0])
        return b[-1]

    def request(self, now: float) -> None:
        self._bucket(now)[1] += 1

    def try_retry(self, now: float) -> bool:
        """Spend one retry if the budget allows it."""
        cur = self._bucket(now)
        requests = sum(x[1] for x in self.buckets)
        retries = sum(x[2] for x in self.buckets)
        if retries + 1 > max(self.min_retries, self.ratio * requests):
            return False
        cur[2] += 1
        return True


def order_targets(weights: tuple[float | None, ...], rng: random.Random) -> list[int]:
    """The order a request tries its targets in: list order when no target has a weight;
    otherwise the weighted ones first, drawn by weight without replacement (load spread),
    then those with weight 0 or none, in list order (fallbacks only)."""
    n = len(weights)
    if n <= 1 or all(w is None for w in weights):
        return list(range(n))
    pool = [(i, w) for i, w in enumerate(weights) if w]
    out: list[int] = []
    while pool:
        total = sum(w for _, w in pool)
        x = rng.uniform(0, total)
        for k, (i, w) in enumerate(pool):
            x -= w
            if x <= 0 or k == len(pool) - 1:
                out.append(i)
                del pool[k]
                break
    return out + [i for i, w in enumerate(weights) if not w]
