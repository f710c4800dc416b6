"""In-process metrics, exported at ``GET /metrics`` in the Prometheus text format.

Counters are plain dicts keyed by label tuples: an increment is one dict update, cheap
enough for the per-request path.  With several workers or instances, each process exports
its own series (scrape every instance; sum in the query).  Metric list: docs/operations.md.
"""

from __future__ import annotations

from collections import defaultdict

COUNTERS: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(lambda: defaultdict(float))

HELP = {
    "switchboard_requests_total": "Requests answered, by route, client protocol, provider and status.",
    "switchboard_stream_outcomes_total": "Streams by terminal outcome (completed, incomplete, failed, client_cancel).",
    "switchboard_repairs_total": "Wire repairs that fired, by rule and provider.",
    "switchboard_upstream_errors_total": "Upstream failures before the first byte, by provider and code.",
    "switchboard_request_duration_seconds_sum": "Total request time, by route.",
    "switchboard_ttfb_seconds_sum": "Total time to first upstream byte, by route.",
}


def inc(name: str, value: float = 1.0, **labels: str) -> None:
    COUNTERS[name][tuple(sorted(labels.items()))] += value


def get(name: str, **labels: str) -> float:
    return COUNTERS.get(name, {}).get(tuple(sorted(labels.items())), 0.0)


def render() -> bytes:
    out: list[str] = []
    for name in sorted(COUNTERS):
        kind = "counter"
        out.append(f"# HELP {name} {HELP.get(name, name)}")
        out.append(f"# TYPE {name} {kind}")
        for labels, v in sorted(COUNTERS[name].items()):
            lab = ",".join(f'{k}="{_esc(val)}"' for k, val in labels)
            out.append(f"{name}{{{lab}}} {v:g}" if lab else f"{name} {v:g}")
    return ("\n".join(out) + "\n").encode()


def _esc(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
