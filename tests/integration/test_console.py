"""The console (app/console.py) on the app ``create_app`` builds: the login and its session
cookie, who is refused, the overview's panels against the metrics and the usage records,
the page's security headers.  The page in a real browser: tests/system/test_console_browser.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.console import percentiles
from app.main import create_app

from .conftest import make_config

ADMIN = "sk-console-admin"
CHAT = {"model": "demo", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
async def app_client(tmp_path) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    cfg = make_config(
        auth={
            "keys": [{"name": "alice", "key": "sk-alice", "limits": {"cost_per_day": 5, "tokens_per_day": 10000}}],
            "admin_keys": [ADMIN],
        },
        store={"path": str(tmp_path / "r.db")},
        server={"secret_key": "console-test-secret-0123456789abcdef0123"},
        models=[{"name": "demo", "provider": "demo", "price": {"input": 1, "output": 2}}],
    )
    app = create_app(cfg)
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8080")
    try:
        yield client, app.state.service
    finally:
        await ctx.__aexit__(None, None, None)


async def login(c: httpx.AsyncClient) -> str:
    r = await c.post("/console/login", data={"key": ADMIN})
    assert r.status_code == 303 and r.headers["location"] == "/console"
    return r.headers["set-cookie"]


async def test_login_and_the_session_cookie(app_client: Any) -> None:
    c, _ = app_client
    page = await c.get("/console")
    assert page.status_code == 200 and b'action="/console/login"' in page.content
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    assert (await c.post("/console/login", data={"key": "x" * 10000})).status_code == 413
    bad = await c.post("/console/login", data={"key": "sk-alice"})  # a client key is not an admin key
    assert bad.status_code == 401 and b"login-error" in bad.content and "set-cookie" not in bad.headers
    cookie = await login(c)
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Max-Age=43200" in cookie
    assert ADMIN not in cookie
    app = await c.get("/console")  # (httpx keeps the cookie)
    assert b"console.js" in app.content
    js = await c.get("/console/static/console.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert (await c.get("/console/static/nothing.js")).status_code == 404
    ok = await c.get("/console/api/overview")
    assert ok.status_code == 200, ok.text

    # a tampered or expired cookie is no session
    value = c.cookies["sb_console"]
    exp, actor, mac = value.split(".")
    for forged in (
        f"{int(exp) + 10}.{actor}.{mac}",
        f"{exp}.admin:000000000000.{mac}",
        f"{int(time.time()) - 1}.{actor}.{mac}",
    ):
        c.cookies.set("sb_console", forged)
        assert (await c.get("/console/api/overview")).status_code == 401
    c.cookies.set("sb_console", value)
    out = await c.post("/console/logout")
    assert out.status_code == 303 and "Max-Age=0" in out.headers["set-cookie"]


async def test_a_change_through_the_session_needs_the_consoles_header(app_client: Any) -> None:
    c, _ = app_client
    await login(c)
    r = await c.post("/v1/admin/keys", json={"name": "bob"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "csrf_refused"
    r = await c.post("/v1/admin/keys", json={"name": "bob"}, headers={"x-switchboard-console": "1"})
    assert r.status_code == 201
    audit = (await c.get("/v1/admin/audit")).json()["data"]
    assert audit[0]["actor"].startswith("admin:") and audit[0]["key"] == "bob"
    # a page of another origin is refused before anything; the console's own origin passes
    other = await c.get("/console/api/overview", headers={"origin": "http://evil.example"})
    assert other.status_code == 403
    same = await c.get("/console/api/overview", headers={"origin": "http://127.0.0.1:8080"})
    assert same.status_code == 200 and "access-control-allow-origin" not in same.headers


async def test_non_admins_are_refused(app_client: Any) -> None:
    c, _ = app_client
    for headers in ({}, {"authorization": "Bearer sk-alice"}, {"authorization": "Bearer nope"}):
        assert (await c.get("/console/api/overview", headers=headers)).status_code == 401
    bearer = await c.get("/console/api/overview", headers={"authorization": f"Bearer {ADMIN}"})
    assert bearer.status_code == 200


async def test_the_overview_matches_the_metrics_and_the_usage(app_client: Any) -> None:
    c, svc = app_client
    h = {"authorization": "Bearer sk-alice"}
    assert not svc.sampler.samples  # nobody looked yet: nothing sampled
    svc.sampler.sample(time.time())  # (as the sampler does each second while a console looks)
    for _ in range(7):
        assert (await c.post("/v1/chat/completions", json=CHAT, headers=h)).status_code == 200
    stream = {**CHAT, "stream": True}
    for _ in range(3):
        assert (await c.post("/v1/chat/completions", json=stream, headers=h)).status_code == 200
    assert (await c.post("/v1/chat/completions", json={**CHAT, "model": "nope"}, headers=h)).status_code == 404
    await svc.usage.flush()
    svc.sampler.sample(time.time())
    await asyncio.sleep(0)
    ov = (await c.get("/console/api/overview", headers={"authorization": f"Bearer {ADMIN}"})).json()
    now = ov["now"]
    assert (
        now["requests_total"]
        == 11
        == sum(
            svc.counters.get(
                "switchboard_requests_total", route="/v1/chat/completions", client=cl, provider=p, status=s
            )
            for cl, p, s in (("chat", "demo", "200"), ("-", "-", "404"))
        )
    )
    assert {"kind": "HTTP 404", "count": 1} in now["errors"]
    assert now["ttft_ms"]["p50"] is not None and now["latency_ms"]["p99"] is not None
    assert sum(p["requests"] for p in now["series"]) == 11
    demo = next(p for p in ov["health"] if p["provider"] == "demo")
    assert demo["requests"] == 10 and demo["attempts"] == 10 and demo["breaker"] == "closed"
    usage = (
        await c.get(
            f"/v1/admin/usage?by=key&since={ov['day_start'][:10]}", headers={"authorization": f"Bearer {ADMIN}"}
        )
    ).json()
    row = usage["data"][0]
    alice = next(k for k in ov["keys"] if k["name"] == "alice")
    assert alice["today"] == {k: row[k] for k in ("requests", "input", "output", "cost_usd", "errors")}
    assert alice["today"]["requests"] == 10
    assert alice["month"]["requests"] == 10
    budgets = {b["limit"]: b for b in alice["budgets"]}
    assert budgets["tokens_per_day"]["left"] == 10000 - row["input"] - row["output"]
    assert budgets["cost_per_day"]["used"] == row["cost_usd"]


def test_percentiles_from_buckets() -> None:
    # 10 answers: 5 under 10 ms, 4 in 10-20 ms, 1 past the last bound
    buckets = [5.0, 9.0] + [9.0] * 12 + [10.0]
    got = percentiles(buckets)
    assert got["p50"] == 10.0  # the 5th of 10: the top of the first bucket
    assert 10.0 < got["p90"] <= 20.0
    assert got["p99"] == 81920.0  # past the last finite bound: that bound
    assert percentiles([0.0] * 15) == {"p50": None, "p90": None, "p99": None}


async def test_instances_on_one_redis_are_summed(tmp_path: Any) -> None:
    """Two apps on one Redis prefix: each one's overview counts both (each writes its minute
    every second), and an instance that stopped leaves the sum."""
    import uuid

    from app.store import RedisStore

    prefix = f"switchboard-test:{uuid.uuid4().hex}:"
    cfg = make_config(
        auth={"keys": [{"name": "alice", "key": "sk-alice"}], "admin_keys": [ADMIN]},
        store={"backend": "redis", "key_prefix": prefix},
        server={"secret_key": "console-test-secret-0123456789abcdef0123"},
    )
    apps = [create_app(cfg), create_app(cfg)]
    ctxs = [a.router.lifespan_context(a) for a in apps]
    for ctx in ctxs:
        await ctx.__aenter__()
    try:
        clients = [
            httpx.AsyncClient(transport=httpx.ASGITransport(app=a), base_url="http://127.0.0.1:8080") for a in apps
        ]
        for c, n in zip(clients, (2, 3), strict=True):
            for _ in range(n):
                assert (
                    await c.post("/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer sk-alice"})
                ).status_code == 200
        admin = {"authorization": f"Bearer {ADMIN}"}
        deadline = time.monotonic() + 5
        while True:
            now = (await clients[0].get("/console/api/overview", headers=admin)).json()["now"]
            if now["instances"] == 2 and now["requests_total"] == 5:
                break
            assert time.monotonic() < deadline, now
            await asyncio.sleep(0.2)
        await ctxs[1].__aexit__(None, None, None)  # stopped: its minute is taken back
        ctxs.pop()
        now = (await clients[0].get("/console/api/overview", headers=admin)).json()["now"]
        assert now["instances"] == 1 and now["requests_total"] == 2
    finally:
        store = apps[0].state.service.store
        assert isinstance(store, RedisStore)
        keys = [k async for k in store.redis.scan_iter(match=prefix + "*")]
        if keys:
            await store.redis.delete(*keys)
        for ctx in ctxs:
            await ctx.__aexit__(None, None, None)


async def test_the_month_adds_the_days_before_today(app_client: Any) -> None:
    """The month's sums: the days before today (read once, kept) plus today (read each time)."""
    from app.console import _starts
    from app.usage import UsageRecord

    c, svc = app_client
    day, month = _starts(time.time())
    if day == month:
        pytest.skip("the 1st of the month: no day before today in it")
    svc.usage.write(
        UsageRecord(
            day - 60,
            "alice",
            "demo",
            "demo",
            input=100,
            output=10,
            cost_micros=5000,
            outcome="error",
            status=502,
            request_id="req_old",
        )
    )
    svc.usage.write(
        UsageRecord(time.time(), "alice", "demo", "demo", input=1, output=1, cost_micros=3, request_id="req_new")
    )
    await svc.usage.flush()
    ov = (await c.get("/console/api/overview", headers={"authorization": f"Bearer {ADMIN}"})).json()
    alice = next(k for k in ov["keys"] if k["name"] == "alice")
    assert alice["today"]["requests"] == 1 and alice["month"]["requests"] == 2
    assert alice["month"]["input"] == 101 and alice["month"]["cost_usd"] == 0.005003 and alice["month"]["errors"] == 1
    assert [f["request_id"] for f in ov["failures"]] == ["req_old"]
