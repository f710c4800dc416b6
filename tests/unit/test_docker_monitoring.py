"""docker/compose.yaml, docker/prometheus.yml, the Grafana provisioning and the dashboard agree.

Docker does not run here: these checks read the files and hold them to each other: Prometheus
scrapes the ``switchboard`` service on the port its replicas listen on, compose mounts the
configuration where Prometheus and Grafana read it, the dashboard provider's path is where
the dashboard is mounted, and every query of the dashboard names metrics and labels
``app/metrics.py`` exports.  That every panel has data is ``tests/system/test_dashboard.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from app.metrics import LABELS, METRICS

DOCKER = Path(__file__).resolve().parent.parent.parent / "docker"


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


COMPOSE = load(DOCKER / "compose.yaml")
PROM = load(DOCKER / "prometheus.yml")
DASH = json.loads((DOCKER / "grafana" / "switchboard.json").read_text(encoding="utf-8"))


def mounts(service: str) -> dict[str, Path]:
    """Container path → host path (relative to docker/) of a service's bind mounts."""
    out = {}
    for v in COMPOSE["services"][service].get("volumes", []):
        src, dst = v.split(":")[:2]
        if src.startswith("."):
            out[dst] = (DOCKER / src).resolve()
    return out


def flag(argv: list[str], name: str) -> str:
    for i, a in enumerate(argv):
        if a == name:
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    raise AssertionError(f"{name} not in {argv}")


def test_prometheus_scrapes_every_switchboard_replica_on_its_port() -> None:
    port = int(flag(COMPOSE["services"]["switchboard"]["command"], "--port"))
    [job] = [j for j in PROM["scrape_configs"] if j["job_name"] == "switchboard"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    [sd] = job["dns_sd_configs"]  # one A record per replica: each scraped on its own
    assert sd["names"] == ["switchboard"] and sd["type"] == "A" and sd["port"] == port
    assert "switchboard" in COMPOSE["services"]  # the DNS name is the compose service
    assert COMPOSE["services"]["switchboard"]["deploy"]["replicas"] > 1


def test_compose_mounts_prometheus_config_where_prometheus_reads_it() -> None:
    svc = COMPOSE["services"]["prometheus"]
    path = flag(svc["command"], "--config.file")
    assert mounts("prometheus")[path] == (DOCKER / "prometheus.yml").resolve()
    assert "switchboard" in svc["depends_on"]


def test_grafana_provisioning_matches_the_mounted_dashboard() -> None:
    m = mounts("grafana")
    prov = m["/etc/grafana/provisioning"]
    assert prov == (DOCKER / "grafana" / "provisioning").resolve()
    [provider] = load(prov / "dashboards" / "switchboard.yaml")["providers"]
    dashboards = [dst for dst, src in m.items() if src == (DOCKER / "grafana" / "switchboard.json").resolve()]
    assert [str(PurePosixPath(d).parent) for d in dashboards] == [provider["options"]["path"]]
    home = COMPOSE["services"]["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home in dashboards
    [ds] = load(prov / "datasources" / "prometheus.yaml")["datasources"]
    assert ds["type"] == "prometheus" and ds["url"] == "http://prometheus:9090" and ds["isDefault"]
    assert "prometheus" in COMPOSE["services"]


# --------------------------------------------------------------------------- the dashboard

PANELS = [p for top in DASH["panels"] for p in (top, *top.get("panels", []))]
EXPRS = [(p["title"], t["expr"]) for p in PANELS for t in p.get("targets", [])]
# series names that are not exported by app/metrics.py: Prometheus's own
EXTRA_METRICS = {"up"}
EXTRA_LABELS = {"instance", "job", "le"}
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "rate", "increase", "histogram_quantile", "by", "without",
    "and", "or", "unless", "on", "ignoring", "group_left", "group_right", "bool",
}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The series names in ``expr`` (selectors, ranges, strings and label groupings left out)."""
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"|\b(?:by|on|without)\s*\([^)]*\)", "", expr)
    return set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare)) - PROMQL_WORDS


def labels_used(expr: str) -> set[str]:
    out = set()
    for group in re.findall(r"\b(?:by|on|without)\s*\(([^)]*)\)", expr):
        out |= {x.strip() for x in group.split(",") if x.strip()}
    for sel in re.findall(r"\{([^}]*)\}", expr):
        out |= set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", sel))
    return out


def test_dashboard_shape() -> None:
    assert DASH["schemaVersion"] >= 39 and DASH["uid"] == "switchboard"
    variables = {v["name"]: v for v in DASH["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource" and variables["DS_PROMETHEUS"]["query"] == "prometheus"
    for name in ("instance", "model"):
        assert variables[name]["includeAll"] and variables[name]["allValue"] == ".*"
    assert [p["id"] for p in PANELS] == sorted({p["id"] for p in PANELS})
    for p in PANELS:
        assert p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p["title"]
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${DS_PROMETHEUS}", p["title"]
            assert p["targets"] and p.get("description"), p["title"]
    assert len(EXPRS) >= 30


def test_every_query_names_exported_metrics_and_labels() -> None:
    known_metrics = set(EXTRA_METRICS)
    for name, (kind, _, _) in METRICS.items():
        known_metrics |= {name, f"{name}_sum", f"{name}_count"} | ({f"{name}_bucket"} if kind == "histogram" else set())
    known_labels = set(LABELS) | EXTRA_LABELS
    job = PROM["scrape_configs"][0]["job_name"]
    for title, expr in EXPRS:
        assert metric_names(expr) <= known_metrics, (title, metric_names(expr) - known_metrics)
        assert labels_used(expr) <= known_labels, (title, labels_used(expr) - known_labels)
        assert 'instance=~"$instance"' in expr, title  # every panel follows the instance picker
        if "gen_ai_" in expr:
            assert 'gen_ai_request_model=~"$model"' in expr, title
        if "up{" in expr:
            assert f'job="{job}"' in expr, title


def test_dashboard_covers_the_operational_metrics() -> None:
    used = {re.sub(r"_(bucket|sum|count)$", "", m) for _, e in EXPRS for m in metric_names(e)}
    wanted = {
        "switchboard_requests_total", "switchboard_stream_outcomes_total", "switchboard_repairs_total",
        "switchboard_upstream_attempts_total", "switchboard_breaker_state", "switchboard_store_errors_total",
        "switchboard_websocket_connections_total", "switchboard_limits_refused_total", "switchboard_store_bytes",
        "gen_ai_server_request_duration_seconds", "gen_ai_server_time_to_first_token_seconds",
        "gen_ai_server_time_per_output_token_seconds", "gen_ai_client_token_usage",
    }  # fmt: skip
    assert wanted <= used, wanted - used
