"""GET /v1/admin/usage (app/usage.py ``usage_routes``) on the app ``create_app`` builds: off
(404) without admin keys, 401 without the admin key, the aggregates by key, model and day
for an admin, on both store backends."""

from __future__ import annotations

import calendar
import hashlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.store import RedisStore
from app.usage import UsageLog, UsageRecord, usage_routes

from .conftest import make_config

ADMIN = "sk-admin-secret"
CLIENT = "sk-client-alice"
PATH = "/v1/admin/usage"
DAY = 86400


def _has_route(app: Any) -> bool:
    return any(getattr(r, "path", None) == PATH for r in app.routes)


@pytest.fixture
async def make_app(tmp_path) -> AsyncIterator[Any]:
    """An app with its usage log and the admin route (as create_app wires them, or set up
    here when it does not yet), started; → (client, service)."""
    opened: list[tuple[Any, Any, str]] = []

    async def make(admin_keys: list[str], backend: str = "sqlite", **store: Any) -> tuple[httpx.AsyncClient, Any]:
        prefix = f"switchboard-test:{uuid.uuid4().hex}:"
        cfg = make_config(
            auth={"keys": [{"name": "alice", "key": CLIENT}], "admin_keys": admin_keys},
            store={"backend": backend, "path": str(tmp_path / "r.db"), "key_prefix": prefix, **store},
        )
        app = create_app(cfg)
        svc = app.state.service
        if not isinstance(getattr(svc, "usage", None), UsageLog):
            svc.usage = UsageLog(cfg, svc.store, svc.counters)
        if not _has_route(app):
            usage_routes(app, svc)
        ctx = app.router.lifespan_context(app)
        await ctx.__aenter__()
        opened.append((ctx, svc, prefix))
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8080")
        return client, svc

    yield make
    for ctx, svc, prefix in opened:
        store = svc.store
        if isinstance(store, RedisStore):
            keys = [k async for k in store.redis.scan_iter(match=prefix + "*")]
            if keys:
                await store.redis.delete(*keys)
        await ctx.__aexit__(None, None, None)


async def _seed(svc: Any) -> float:
    now = time.time()
    recs = [
        UsageRecord(now - 2 * DAY, "alice", "chat-model", "chatup", input=1000, output=100, cost_micros=2_000_000),
        UsageRecord(now - 60, "alice", "chat-model", "chatup", input=200, output=20, cache_read=100, cost_micros=400),
        UsageRecord(now - 50, "alice", "resp-model", "respup", input=300, output=30, reasoning=10, cost_micros=900),
        UsageRecord(now - 40, "bob", "resp-model", "respup", input=5, outcome="error", status=429),
        UsageRecord(now - 30, "bob", "chat-model", "chatup", input=7, output=1, outcome="failed", status=502),
    ]
    for r in recs:
        svc.usage.write(r)
    assert await svc.usage.flush()
    return now


def _bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_off_without_admin_keys(make_app):
    client, _ = await make_app([])
    r = await client.get(PATH, headers=_bearer(ADMIN))
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "not_found"
    assert r.headers["x-request-id"]
    r = await client.get(PATH, headers=_bearer(""))
    assert r.status_code == 404  # not even a 401: the route does not exist


@pytest.mark.parametrize(
    "headers,code",
    [
        ({}, "missing_api_key"),
        ({"authorization": "Basic abc"}, "missing_api_key"),
        (_bearer("sk-wrong"), "invalid_api_key"),
        (_bearer(CLIENT), "invalid_api_key"),  # a client key is not an admin key
    ],
)
async def test_401_without_the_admin_key(make_app, headers, code):
    client, _ = await make_app([ADMIN])
    r = await client.get(PATH, headers=headers)
    assert r.status_code == 401
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"}
    assert err["code"] == code and err["type"] == "invalid_request_error"
    assert ADMIN not in r.text


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_rows_by_key_model_and_day(make_app, backend):
    # the admin key given as its digest: the file holds no secret
    client, svc = await make_app(["sha256:" + hashlib.sha256(ADMIN.encode()).hexdigest()], backend)
    now = await _seed(svc)

    r = await client.get(PATH, params={"by": "key", "since": "7d"}, headers=_bearer(ADMIN))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["by"] == "key"
    since = calendar.timegm(time.strptime(body["since"], "%Y-%m-%dT%H:%M:%SZ"))
    assert abs(since - (now - 7 * DAY)) < 5
    assert body["until"] is None
    assert body["data"] == [
        {
            "key": "alice",
            "requests": 3,
            "input": 1500,
            "output": 150,
            "cache_read": 100,
            "cache_write": 0,
            "reasoning": 10,
            "cost_usd": 2.0013,
            "errors": 0,
            "cache_hit": round(100 / 1500, 4),
            "saved_usd": 0.0,
        },
        {
            "key": "bob",
            "requests": 2,
            "input": 12,
            "output": 1,
            "cache_read": 0,
            "cache_write": 0,
            "reasoning": 0,
            "cost_usd": 0.0,
            "errors": 2,
            "cache_hit": 0.0,
            "saved_usd": 0.0,
        },
    ]

    r = await client.get(PATH, params={"by": "model", "since": "24h"}, headers=_bearer(ADMIN))
    rows = r.json()["data"]
    assert [(x["model"], x["requests"], x["errors"]) for x in rows] == [("chat-model", 2, 1), ("resp-model", 2, 1)]

    r = await client.get(PATH, params={"by": "day", "since": "7d"}, headers=_bearer(ADMIN))
    days = {x["day"]: x["requests"] for x in r.json()["data"]}
    assert list(days) == sorted(days)
    assert days[time.strftime("%Y-%m-%d", time.gmtime(now - 2 * DAY))] == 1
    assert sum(days.values()) == 5

    # until: a date includes its day; a span before the records has none
    yesterday = time.strftime("%Y-%m-%d", time.gmtime(now - 3 * DAY))
    r = await client.get(PATH, params={"by": "key", "since": "30d", "until": yesterday}, headers=_bearer(ADMIN))
    assert r.json()["data"] == []
    assert r.json()["until"] == time.strftime("%Y-%m-%dT00:00:00Z", time.gmtime(now - 2 * DAY))


async def test_default_span_and_bad_parameters(make_app):
    client, svc = await make_app([ADMIN])
    await _seed(svc)
    r = await client.get(PATH, headers=_bearer(ADMIN))  # by key, the last 30 days
    assert r.status_code == 200 and r.json()["by"] == "key" and len(r.json()["data"]) == 2
    for params, param in [({"by": "provider"}, "by"), ({"since": "last week"}, "since"), ({"until": "x"}, "until")]:
        r = await client.get(PATH, params=params, headers=_bearer(ADMIN))
        assert r.status_code == 400, params
        assert r.json()["error"]["param"] == param


async def test_with_the_store_off_the_admin_is_told(make_app):
    client, _ = await make_app([ADMIN], enabled=False)
    r = await client.get(PATH, headers=_bearer(ADMIN))
    assert r.status_code == 404
    err = r.json()["error"]
    assert err["code"] == "usage_not_recorded" and "store.enabled: false" in err["message"]
