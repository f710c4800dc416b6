"""Fallbacks, retries and circuit breakers before the first byte (the I/O around
``providers.retry`` and ``providers.breaker``).

Theory of operation
-------------------
``Resilience`` is one app's state: a ``Breaker`` per provider and per configured
(provider, upstream model), a ``RetryBudget`` per provider, the policies, a clock and a
random source.  ``Failover(p, res).run(attempt, retarget)`` gets a request its upstream
answer head:

1. The model's targets are put in order (``order_targets``: list order, or drawn by weight).
   A target whose breaker (provider's or model's) is open is skipped at once
   (``breaker_open``).  The Bridge was opened by ``prepare()`` for the model's first target;
   any other target gets its own (``retarget``: the client's body translated again for
   that target's protocol and quirks), lazily, the first time it is tried.  A target the
   body cannot be translated for is skipped (``untranslatable``).
2. ``attempt(p)`` sends the request and reads what must be read before the first byte
   (the status, and a whole JSON answer: a 200 can carry an error).  A failure is
   classified (``providers.retry.FAILURES``): not retried → answered at once; retried →
   the next target in the cycle, at once; a target already tried → after the backoff or
   its ``retry-after`` (≤ cap, else it is not tried again), if its provider's retry budget
   allows.  No new attempt starts after the deadline or past ``max_attempts``.
3. Each attempt is reported to both breakers, counted in
   ``switchboard_upstream_attempts_total{provider,outcome}`` and, when it failed or was
   not the first, logged (``upstream_attempt``).  When nothing answered: the last failure;
   when no target could even be tried (every breaker open): 503 ``upstream_circuit_open``
   with ``retry-after`` = the time to the first half-open probe.

Nothing here runs after the first byte: the answer from then on is the Bridge's.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from app.logs import log
from app.metrics import Metrics
from providers.breaker import STATES, Breaker, BreakerPolicy
from providers.config import BreakerCfg, RetryCfg
from providers.retry import NOT_AGAIN, RetryBudget, RetryPolicy, classify, order_targets
from providers.upstream import Route
from transformers.errors import ProxyError, RequestError

# stream failures after the first byte that say the upstream broke (reported to its breakers)
STREAM_FAULTS = frozenset({"upstream_idle_timeout", "upstream_stream_error", "upstream_stream_truncated"})
# an attempt's outcome → the breaker's method for it
_REPORTS = {"ok": "success", "failure": "failure", "release": "release"}


class Resilience:
    """One app's breakers, retry budgets and policies (see the module docstring)."""

    def __init__(
        self,
        retry: RetryCfg,
        breaker: BreakerCfg,
        models: Iterable[tuple[str, str]] = (),
        metrics: Metrics | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.policy = RetryPolicy(
            max_attempts=retry.max_attempts,
            backoff_base=retry.backoff_base_seconds,
            backoff_max=retry.backoff_max_seconds,
            retry_after_max=retry.retry_after_max_seconds,
            deadline=retry.deadline_seconds,
            budget_ratio=retry.budget_ratio,
            budget_min_retries=retry.budget_min_retries,
            budget_window=retry.budget_window_seconds,
        )
        self.enabled = breaker.enabled
        self.breaker_policy = BreakerPolicy(
            failures=breaker.failures,
            ratio=breaker.failure_ratio,
            min_calls=breaker.min_calls,
            window=breaker.window_seconds,
            open_seconds=breaker.open_seconds,
        )
        # per-model breakers only for configured (provider, upstream model) pairs: a glob
        # model forwards client-chosen names, which must not create state
        self.models = frozenset(models)
        self.breakers: dict[tuple[str, str], Breaker] = {}
        # the state each breaker's gauge shows: written when the state moves from it (most
        # reports leave a closed breaker closed, and write nothing)
        self.shown: dict[tuple[str, str], str] = {}
        self.budgets: dict[str, RetryBudget] = {}
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.rng = rng or random.Random()

    # -- breakers ---------------------------------------------------------------------------

    def _keys(self, route: Route) -> list[tuple[str, str]]:
        prov = route.provider.name
        keys = [(prov, "-")]
        if (prov, route.upstream_model) in self.models:
            keys.append((prov, route.upstream_model))
        return keys

    def _breaker(self, key: tuple[str, str]) -> Breaker:
        b = self.breakers.get(key)
        if b is None:
            b = self.breakers[key] = Breaker(self.breaker_policy)
        return b

    def allow(self, route: Route) -> bool:
        """Whether ``route`` may be tried now (an open breaker: no; a half-open one lets one
        probe through, and this call is it: report it, or ``release`` it)."""
        if not self.enabled:
            return True
        now = self.clock()
        breakers = [self._breaker(k) for k in self._keys(route)]
        for b in breakers:  # (a loop: no generator made per request)
            if b.state == "open" and b.retry_in(now) > 0:
                return False
        allowed: list[Breaker] = []
        for b in breakers:
            if not b.allow(now):
                for a in allowed:
                    a.release(now)
                return False
            allowed.append(b)
        return True

    def retry_in(self, route: Route) -> float:
        now = self.clock()
        return max((self._breaker(k).retry_in(now) for k in self._keys(route)), default=0.0)

    def report(self, route: Route, outcome: str, scope: str = "model") -> None:
        """``ok``, ``failure`` or ``release`` for an attempt ``allow`` let through.  A failure
        counts against the breaker of its ``scope`` (providers/retry.py): the provider's, or
        the (provider, model)'s when that pair has one (else the provider's); the other
        breaker the attempt went through is released."""
        if not self.enabled:
            return
        now = self.clock()
        shown = self.shown
        keys = self._keys(route)
        failing = None
        if outcome == "failure" and len(keys) == 2:
            failing = keys[0] if scope == "provider" else keys[1]
        for k in keys:
            b = self._breaker(k)
            before = b.state
            getattr(b, _REPORTS[outcome] if failing is None or k == failing else "release")(now)
            state = b.state
            if state != before:
                log.warning("breaker", provider=k[0], model=k[1], state=state, previous=before)
            if shown.get(k) != state:
                shown[k] = state
                self.metrics.set_gauge("switchboard_breaker_state", STATES.index(state), provider=k[0], model=k[1])

    def states(self) -> dict[str, str]:
        """Every breaker that is not closed, as ``provider`` or ``provider/model`` → state."""
        now = self.clock()
        out: dict[str, str] = {}
        for (prov, model), b in sorted(self.breakers.items()):
            state = "half_open" if b.state == "open" and b.retry_in(now) == 0 else b.state
            if state != "closed":
                out[prov if model == "-" else f"{prov}/{model}"] = state
        return out

    def budget(self, provider: str) -> RetryBudget:
        b = self.budgets.get(provider)
        if b is None:
            p = self.policy
            b = self.budgets[provider] = RetryBudget(p.budget_ratio, p.budget_min_retries, p.budget_window)
        return b


Attempt = Callable[[Any], Awaitable[tuple[Any, Any]]]
Retarget = Callable[[Any, Route], Any]


class Failover:
    """One request's way to an upstream answer head (see the module docstring).  ``p`` is
    the Prepared of the target tried last (the one to account the request to)."""

    def __init__(self, p: Any, res: Resilience) -> None:
        self.p = p
        self.res = res
        self.attempts = 0

    async def run(self, attempt: Attempt, retarget: Retarget) -> tuple[Any, Any]:
        res = self.res
        policy = res.policy
        first = self.p
        routes = first.route.all_targets()
        order = [routes[i] for i in order_targets(first.route.weights, res.rng)] if len(routes) > 1 else list(routes)
        prepared: dict[int, Any] = {}
        if order[0] is routes[0]:
            prepared[0] = first
        tried = [0] * len(order)
        waits: dict[int, float] = {}  # target → its upstream's retry-after
        blocked: set[int] = set()
        open_skips: list[float] = []
        deadline = first.started + policy.deadline
        last: ProxyError | None = None
        pos = 0
        while self.attempts < policy.max_attempts:
            pick = self._pick(order, pos, blocked, open_skips)
            if pick is None:
                break
            route = order[pick]
            prov = route.provider.name
            wait = 0.0
            if tried[pick]:  # the same target again: back off, within the budget
                wait = waits.get(pick) or policy.backoff(tried[pick], res.rng)
                if time.perf_counter() + wait > deadline:
                    res.report(route, "release")
                    break
                if not res.budget(prov).try_retry(res.clock()):
                    res.report(route, "release")
                    self._count(prov, "budget_exhausted")
                    blocked.add(pick)
                    continue
            elif self.attempts and time.perf_counter() > deadline:
                res.report(route, "release")
                break
            cur = prepared.get(pick)
            if cur is None:
                try:
                    cur = prepared[pick] = retarget(first, route)
                except (ProxyError, RequestError) as e:
                    res.report(route, "release")
                    self._count(prov, "untranslatable")
                    log.warning("upstream_attempt", request_id=first.request_id, provider=prov, outcome="untranslatable",
                                code=e.code)  # fmt: skip
                    blocked.add(pick)
                    continue
            if wait:
                try:
                    await asyncio.sleep(wait)
                except asyncio.CancelledError:
                    res.report(route, "release")
                    raise
            if not tried[pick]:
                res.budget(prov).request(res.clock())
                if self.attempts:  # another target than the ones tried: a fallback
                    res.metrics.inc("switchboard_fallbacks_total", provider=prov)
            tried[pick] += 1
            self.attempts += 1
            self.p = cur
            cur.attempts = self.attempts
            try:
                got = await attempt(cur)
            except ProxyError as e:
                outcome, retry, scope = classify(e.code)
                if scope:
                    res.report(route, "failure", scope)
                else:  # the upstream answered (a 4xx of the request's own), or rate limits it
                    res.report(route, "release" if outcome == "rate_limited" else "ok")
                self._count(prov, outcome)
                self._log(cur, outcome, e.code, wait)
                if not retry:
                    raise
                if outcome in NOT_AGAIN:
                    blocked.add(pick)
                last = e
                ra = e.headers.get("retry-after")
                if ra is not None:
                    secs = float(ra)
                    if secs > policy.retry_after_max:
                        blocked.add(pick)
                    else:
                        waits[pick] = secs
                pos = pick + 1
                continue
            except BaseException:
                res.report(route, "release")
                self._count(prov, "cancelled")
                raise
            res.report(route, "ok")
            self._count(prov, "ok")
            if self.attempts > 1:
                self._log(cur, "ok", None, wait)
            return got
        if last is not None:
            raise last
        after = max(1, math.ceil(min(open_skips, default=1.0)))
        raise ProxyError(
            503,
            f"no upstream is available for model '{first.route.public_model[:200]}': the circuit breaker of every "
            f"provider that serves it is open; try again in {after}s",
            type="upstream_error",
            code="upstream_circuit_open",
            headers={"retry-after": str(after)},
        )

    def _pick(self, order: list[Route], pos: int, blocked: set[int], open_skips: list[float]) -> int | None:
        """The next target from ``pos`` on (cyclically) that is not blocked and whose
        breakers let it through; an open one is blocked for this request."""
        n = len(order)
        for k in range(n):
            j = (pos + k) % n
            if j in blocked:
                continue
            route = order[j]
            if self.res.allow(route):
                return j
            blocked.add(j)
            open_skips.append(self.res.retry_in(route))
            self._count(route.provider.name, "breaker_open")
            log.info("upstream_attempt", request_id=self.p.request_id, provider=route.provider.name,
                     upstream_model=route.upstream_model, outcome="breaker_open")  # fmt: skip
        return None

    def _count(self, provider: str, outcome: str) -> None:
        self.res.metrics.inc("switchboard_upstream_attempts_total", provider=provider, outcome=outcome)

    def _log(self, p: Any, outcome: str, code: str | None, wait: float) -> None:
        (log.info if outcome == "ok" else log.warning)(
            "upstream_attempt",
            request_id=p.request_id,
            attempt=self.attempts,
            provider=p.route.provider.name,
            upstream_model=p.route.upstream_model,
            upstream_protocol=p.upstream,
            outcome=outcome,
            code=code,
            waited_ms=round(wait * 1000, 1),
        )
