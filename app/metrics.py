"""In-process metrics, exported at ``GET /metrics`` in the Prometheus text format.

Counters are plain dicts keyed by label tuples: an increment is one dict update, cheap
enough for the per-request path.  With several workers or instances, each process exports
its own series (scrape every instance; sum in the query).  Metric list: docs/operations.md.

Label values come from closed sets, never from what a client or an upstream sent: a label
whose value is not in its set (``LABELS``, completed for each ``Metrics`` with the
configured provider names and the known error codes) is exported as ``other``.  A request path, an upstream's
own error code or a client's model name can therefore never create a series, and the
number of series is bounded by the product of the sets.  As a second bound, a metric that
somehow reached ``MAX_SERIES`` series adds no new ones: further label sets are counted
under all-``other`` labels.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from app.logs import log
from providers.retry import ATTEMPT_OUTCOMES
from transformers import repairs
from transformers.vocab import OUTCOMES, PROTOCOLS

HELP = {
    "switchboard_requests_total": "Requests answered, by route, client protocol, provider and status.",
    "switchboard_stream_outcomes_total": "Streams by terminal outcome (completed, incomplete, failed, client_cancel).",
    "switchboard_repairs_total": "Wire repairs that fired, by rule and provider.",
    "switchboard_upstream_errors_total": "Upstream failures before the first byte, by provider and code.",
    "switchboard_stream_failures_total": "Answers that ended failed after the first byte, by provider and code.",
    "switchboard_request_duration_seconds_sum": "Total request time, by route.",
    "switchboard_ttfb_seconds_sum": "Total time to first upstream byte, by route.",
    "switchboard_upstream_attempts_total": "Upstream attempts before the first byte (retries and fallbacks), by "
    "provider and outcome.",
    "switchboard_breaker_state": "Circuit breaker state per provider (model -) and per provider+model: "
    "0 closed, 1 half-open, 2 open.",
    "switchboard_envelope_rejected_total": "Proxy-sealed envelopes that did not open, by kind and reason.",
    "switchboard_store_errors_total": "Response store operations that failed, by operation (put, get, chain, ...).",
    "switchboard_websocket_connections_total": "Responses WebSocket upgrades accepted and refused, and closes, by event.",
    "switchboard_store_bytes": "Total compressed size of the stored responses, as of the last put or delete "
    "(store.max_bytes caps it).",
    "switchboard_store_evicted_total": "Stored responses deleted to keep the store under store.max_bytes.",
    "switchboard_usage_records_total": "Usage records written to the store's backend.",
    "switchboard_usage_dropped_total": "Usage records lost: dropped from a full buffer, or still pending at shutdown "
    "when the backend failed.",
    "switchboard_usage_write_errors_total": "Usage record batches whose write failed (kept and written again later).",
}

OTHER = "other"
MAX_SERIES = 4096

# the route templates the app serves; anything else (an unknown path, a model id inside a
# path) is "other"
ROUTES = frozenset({
    "/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses/compact", "/v1/models", "/v1/models/{model}", "/healthz", "/readyz", "/metrics",
})  # fmt: skip

_STATUSES = frozenset(str(s) for s in range(100, 600))

# label name → the closed set of its values (protocols, outcomes and repair rule names come
# from the one vocabulary: transformers/vocab.py, transformers/repairs.py)
LABELS: dict[str, frozenset[str]] = {
    "route": ROUTES,
    "client": PROTOCOLS | {"-"},
    "provider": frozenset({"-"}),
    "status": _STATUSES,
    "outcome": OUTCOMES | ATTEMPT_OUTCOMES,
    "model": frozenset({"-"}),  # breaker gauges: completed with the configured upstream models
    "rule": repairs.NAMES,
    "code": frozenset(),
    # response store operations (app/store.py); too_large: a record over store.max_record_bytes
    "op": frozenset({"put", "get", "chain", "delete", "ping", "too_large"}),
    # Responses WebSocket connections (app/ws.py)
    "event": frozenset(
        {"accepted", "refused_auth", "refused_capacity", "refused_disabled"}
        | {"closed_client", "closed_idle", "closed_lifetime", "closed_shutdown"}
    ),
    # proxy envelopes (transformers/envelope.py): what was sealed, why it did not open
    "kind": frozenset({"reasoning", "compaction"}),
    "reason": frozenset({"bad_mac", "malformed", "unknown_version", "no_key", "foreign"}),
}


_KEY_MEMO = 4096  # label sets whose series key is remembered (Metrics._keys)

Series = dict[tuple[tuple[str, str], ...], float]


class Metrics:
    """The counters of one app instance (``create_app`` makes one: two apps in one process,
    as in the tests, never see each other's counts)."""

    __slots__ = ("counters", "labels", "gauges", "_keys", "_answers")

    def __init__(self, providers: Iterable[str] = (), codes: Iterable[str] = (), models: Iterable[str] = ()) -> None:
        self.counters: dict[str, Series] = defaultdict(lambda: defaultdict(float))
        self.gauges: dict[str, Series] = defaultdict(dict)
        # the closed sets, completed with the configured provider names and the error codes
        # the proxy knows (its own and the well-known OpenAI ones)
        self.labels = {
            **LABELS,
            "provider": LABELS["provider"] | frozenset(providers),
            "code": LABELS["code"] | frozenset(codes),
            "model": LABELS["model"] | frozenset(models),
        }
        # the series key of each label set already seen, as the call site passed it (a call
        # site passes its labels in one order): one lookup instead of a sort and a set test
        # per label on every request; bounded, as the series are
        self._keys: dict[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]] = {}
        # answered(): the series each (route, client, provider, status, outcome) adds to
        self._answers: dict[tuple[str, str, str, int, str | None], tuple[tuple[Series, Any], ...]] = {}

    def _clean(self, labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
        sets = self.labels
        out = []
        for k, v in sorted(labels.items()):
            allowed = sets.get(k)
            out.append((k, v if allowed is not None and v in allowed else OTHER))
        return tuple(out)

    def _key(self, labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
        """``_clean(labels)``, remembered for the label set as the call site passed it."""
        given = tuple(labels.items())
        key = self._keys.get(given)
        if key is None:
            key = self._clean(labels)
            if len(self._keys) < _KEY_MEMO:
                self._keys[given] = key
        return key

    def _slot(self, name: str, labels: dict[str, str]) -> tuple[Series, tuple[tuple[str, str], ...]]:
        """Counter ``name``'s series and the key ``labels`` count under: all-"other" once the
        counter holds MAX_SERIES series and this one is not among them."""
        series = self.counters[name]
        key = self._key(labels)
        if key not in series and len(series) >= MAX_SERIES:
            key = tuple((k, OTHER) for k, _ in key)
        return series, key

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        series, key = self._slot(name, labels)
        series[key] += value

    def answered(
        self,
        route: str,
        client: str,
        provider: str,
        status: int,
        duration: float,
        ttfb: float | None,
        outcome: str | None,
    ) -> None:
        """One proxied answer's counters: ``switchboard_requests_total``, the duration and
        time-to-first-byte sums, and a stream's outcome (``outcome`` None: not a stream).
        What ``inc`` does for each, with the four series found once per combination."""
        at = (route, client, provider, status, outcome)
        series = self._answers.get(at)
        if series is None:
            series = self._answer_series(at)
        (s, k), (ds, dk), (ts, tk), *rest = series
        s[k] += 1.0
        ds[dk] += duration
        if ttfb is not None:
            ts[tk] += ttfb
        for s, k in rest:
            s[k] += 1.0

    def _answer_series(self, at: tuple[str, str, str, int, str | None]) -> tuple[tuple[Series, Any], ...]:
        route, client, provider, status, outcome = at
        wanted: list[tuple[str, dict[str, str]]] = [
            (
                "switchboard_requests_total",
                {"route": route, "client": client, "provider": provider, "status": str(status)},
            ),
            ("switchboard_request_duration_seconds_sum", {"route": route}),
            ("switchboard_ttfb_seconds_sum", {"route": route}),
        ]
        if outcome is not None:
            wanted.append(("switchboard_stream_outcomes_total", {"outcome": outcome, "client": client}))
        out = tuple(self._slot(name, labels) for name, labels in wanted)
        if len(self._answers) < _KEY_MEMO:
            self._answers[at] = out
        return out

    def set_gauge(self, name: str, value: float, **labels: str) -> None:
        series = self.gauges[name]
        key = self._key(labels)
        if key in series or len(series) < MAX_SERIES:
            series[key] = value

    def get(self, name: str, **labels: str) -> float:
        key = self._clean(labels)
        if name in self.gauges:
            return self.gauges[name].get(key, 0.0)
        return self.counters.get(name, {}).get(key, 0.0)

    def series_count(self) -> int:
        return sum(len(s) for s in self.counters.values())

    def render(self) -> bytes:
        out: list[str] = []
        for name in sorted(self.counters):
            out.append(f"# HELP {name} {HELP.get(name, name)}")
            out.append(f"# TYPE {name} counter")
            for labels, v in sorted(self.counters[name].items()):
                lab = ",".join(f'{k}="{_esc(val)}"' for k, val in labels)
                out.append(f"{name}{{{lab}}} {v:g}" if lab else f"{name} {v:g}")
        for name in sorted(self.gauges):
            out.append(f"# HELP {name} {HELP.get(name, name)}")
            out.append(f"# TYPE {name} gauge")
            for labels, v in sorted(self.gauges[name].items()):
                lab = ",".join(f'{k}="{_esc(val)}"' for k, val in labels)
                out.append(f"{name}{{{lab}}} {v:g}" if lab else f"{name} {v:g}")
        return ("\n".join(out) + "\n").encode()


def _esc(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def route_label(path: str) -> str:
    """The route template of a path (a metric label: never the raw path)."""
    if path in ROUTES:
        return path
    return "/v1/models/{model}" if path.startswith("/v1/models/") else OTHER


def log_rejected(counters: Metrics, path: str, status: int, code: str | None, rid: str) -> None:
    """A request refused before any upstream call: counted and logged as the request's line."""
    route = route_label(path)
    counters.inc("switchboard_requests_total", route=route, client="-", provider="-", status=str(status))
    log.info("request", request_id=rid, route=route, path=path[:200], status=status, code=code, terminal="rejected")
