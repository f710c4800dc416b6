"""A circuit breaker: a small pure state machine (the caller passes the clock).

Theory of operation
-------------------
One ``Breaker`` guards one provider, or one (provider, upstream model).  The caller asks
``allow(now)`` before an attempt and reports it with ``success(now)`` / ``failure(now)``,
or ``release(now)`` when the attempt ended without telling anything (the client left).

=============  =====================  =============================================  ===========
state          event                  condition                                      next state
=============  =====================  =============================================  ===========
closed         allow                  always                                         closed (yes)
closed         success                —                                              closed
closed         failure                ``failures`` in a row, or in the last          open
                                      ``window`` s at least ``min_calls`` calls and
                                      a failure share ≥ ``ratio``
closed         failure                otherwise                                      closed
open           allow                  ``open_seconds`` not over                      open (no)
open           allow                  ``open_seconds`` over: this is the probe       half_open (yes)
half_open      allow                  a probe is in flight                           half_open (no)
half_open      success                —                                              closed (counts reset)
half_open      failure                —                                              open (timer restarts)
half_open      release                the probe told nothing                         half_open (a new probe may go)
=============  =====================  =============================================  ===========

A report that arrives for an attempt allowed in an earlier state (a slow request that
started while the breaker was closed and ends after it opened) only feeds the counts;
it never closes an open breaker.

Defaults (``BreakerCfg`` in providers/config.py): 5 failures in a row, or half of at least
10 calls in 60 s; open for 30 s.  cc-switch opens after 4 failures in 60 s; 5 in a row here
because one request may make up to ``retries.max_attempts`` (3) attempts on one provider,
so a single unlucky request can never open a breaker on its own.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

State = Literal["closed", "open", "half_open"]
STATES: tuple[State, ...] = ("closed", "half_open", "open")  # gauge value = index
_MAX_CALLS = 1000  # the failure ratio looks at the latest calls of the window at most


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    failures: int = 5  # consecutive failures that open the breaker
    ratio: float = 0.5  # failure share in the window that opens it …
    min_calls: int = 10  # … once the window holds at least this many calls
    window: float = 60.0  # seconds
    open_seconds: float = 30.0  # before the half-open probe


@dataclass(slots=True)
class Breaker:
    policy: BreakerPolicy = field(default_factory=BreakerPolicy)
    state: State = "closed"
    consecutive: int = 0
    opened_at: float = 0.0
    probing: bool = False
    # (time, failed) of the calls in the window, the latest _MAX_CALLS at most
    calls: deque[tuple[float, bool]] = field(default_factory=lambda: deque(maxlen=_MAX_CALLS))

    def allow(self, now: float) -> bool:
        if self.state == "closed":
            return True
        if self.state == "open":
            if now - self.opened_at < self.policy.open_seconds:
                return False
            self.state = "half_open"
            self.probing = False
        if self.probing:
            return False
        self.probing = True
        return True

    def retry_in(self, now: float) -> float:
        """Seconds until an open breaker lets a probe through (0 when it would now)."""
        if self.state != "open":
            return 0.0
        return max(0.0, self.opened_at + self.policy.open_seconds - now)

    def success(self, now: float) -> None:
        self._count(now, False)
        self.consecutive = 0
        if self.state == "half_open" and self.probing:
            self.state = "closed"
            self.probing = False
            self.calls.clear()

    def failure(self, now: float) -> None:
        self._count(now, True)
        self.consecutive += 1
        if self.state == "half_open":
            if self.probing:
                self._open(now)
            return
        if self.state == "closed" and (self.consecutive >= self.policy.failures or self._ratio_tripped()):
            self._open(now)

    def release(self, now: float) -> None:
        if self.state == "half_open":
            self.probing = False

    def _open(self, now: float) -> None:
        self.state = "open"
        self.opened_at = now
        self.probing = False

    def _count(self, now: float, failed: bool) -> None:
        calls = self.calls
        calls.append((now, failed))
        horizon = now - self.policy.window
        while calls and calls[0][0] < horizon:
            calls.popleft()

    def _ratio_tripped(self) -> bool:
        n = len(self.calls)
        if n < self.policy.min_calls:
            return False
        return sum(1 for _, f in self.calls if f) / n >= self.policy.ratio
