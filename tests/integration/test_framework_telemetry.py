"""FastAPI's own OpenTelemetry stays off, also in a process with a global tracer and meter
provider (as under ``opentelemetry-instrument``): nothing about a request leaves through
it, not the URL with a Gemini client's ``?key=``, not an exception.  The proxy's own traces
(app/tracing.py) are opt-in by config.  In a child process: a global provider is set once
per process."""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = r"""
import os, sys
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from fastapi.testclient import TestClient

spans = InMemorySpanExporter()
tp = TracerProvider()
tp.add_span_processor(SimpleSpanProcessor(spans))
trace.set_tracer_provider(tp)
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

from app.main import create_app
from app.config import parse_config

cfg = parse_config(
    {
        "auth": {"keys": [{"name": "k", "key": "sk-client-secret-0123456789"}]},
        "providers": [{"name": "demo", "profile": "demo"}],
        "models": [{"name": "demo", "provider": "demo"}],
    },
    "<test>",
)
paths = ["/v1beta/models?key=sk-client-secret-0123456789", "/v1/models", "/healthz", "/nowhere?key=x"]
with TestClient(create_app(cfg)) as c:
    auth = {"authorization": "Bearer sk-client-secret-0123456789"}
    statuses = [c.get(p, headers=auth if "key=" not in p else {}).status_code for p in paths]
    statuses.append(c.post("/v1/chat/completions", json={"model": "demo"}, headers=auth).status_code)
data = reader.get_metrics_data()
points = sum(len(m.data.data_points) for rm in (data.resource_metrics if data else []) for sm in rm.scope_metrics for m in sm.metrics)
print(statuses, len(spans.get_finished_spans()), points, sep="|")
"""


def test_fastapis_own_telemetry_records_nothing_under_a_global_provider() -> None:
    env = {**os.environ, "FASTAPI_OTEL_AUTO_CONFIGURE": "true"}
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    statuses, spans, points = r.stdout.strip().splitlines()[-1].split("|")
    assert statuses == "[200, 200, 200, 404, 400]", statuses  # served, refused, failed: all seen
    assert (spans, points) == ("0", "0"), r.stdout
