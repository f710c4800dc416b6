"""``GET /`` says where to go next; ``/health`` is ``/healthz``."""

from __future__ import annotations

from typing import Any


async def test_the_root_says_where_to_go_next(client: Any) -> None:
    r = await client.get("/")
    assert r.status_code == 200
    body = r.json()
    assert body["name"] == "switchboard"
    assert (body["health"], body["ready"], body["metrics"]) == ("/healthz", "/readyz", "/metrics")
    assert "/v1/responses" in body["api"]["routes"] and "docs/" in body["docs"]
    for path in (body["health"], body["ready"], body["metrics"]):
        assert (await client.get(path)).status_code == 200, path


async def test_health_is_healthz(client: Any) -> None:
    r = await client.get("/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
