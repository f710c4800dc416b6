"""Runtime keys (app/keys.py) through the admin API (app/admin.py) of the app ``create_app``
builds, on both store backends (Redis: the machine's on 127.0.0.1:6379, under a uuid key
prefix removed afterwards): created, used with its limits and models, changed, rotated with
a grace, expired, revoked; the config's keys read-only; the audit says who did what; the
routes refuse a non-admin and do not exist without admin keys."""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.store import RedisStore

from .conftest import make_config

ADMIN = "sk-admin-secret"
CHAT = {"model": "demo", "messages": [{"role": "user", "content": "hi"}]}
BACKENDS = ["sqlite", "redis"]


@pytest.fixture
async def make_app(tmp_path) -> AsyncIterator[Any]:
    opened: list[tuple[Any, Any, str]] = []

    async def make(backend: str, admin_keys: list[str] | None = None) -> tuple[httpx.AsyncClient, Any]:
        prefix = f"switchboard-test:{uuid.uuid4().hex}:"
        cfg = make_config(
            auth={
                "keys": [{"name": "cfgkey", "key": "sk-cfg", "limits": {"requests_per_minute": 9}}],
                "admin_keys": [ADMIN] if admin_keys is None else admin_keys,
            },
            store={"backend": backend, "path": str(tmp_path / "r.db"), "key_prefix": prefix},
            server={"secret_key": "runtime-keys-test-secret-0123456789abcdef"},
        )
        app = create_app(cfg)
        svc = app.state.service
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


def admin() -> dict[str, str]:
    return {"authorization": f"Bearer {ADMIN}"}


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_key_is_created_used_changed_rotated_and_revoked(make_app: Any, backend: str) -> None:
    c, svc = await make_app(backend)
    r = await c.post(
        "/v1/admin/keys",
        json={"name": "alice", "models": ["demo"], "limits": {"requests_per_minute": 2}, "expires_at": "30d"},
        headers=admin(),
    )
    assert r.status_code == 201, r.text
    made = r.json()
    secret = made["secret"]
    assert secret.startswith("sk-sb-") and made["hint"].startswith(secret[:10])
    assert made["models"] == ["demo"] and made["limits"] == {"requests_per_minute": 2}
    assert made["source"] == "api" and not made["read_only"]
    # the secret is never shown again, and only its SHA-256 is kept
    listed = (await c.get("/v1/admin/keys", headers=admin())).json()["data"]
    assert [(k["name"], k["source"], k["read_only"]) for k in listed] == [
        ("cfgkey", "config", True),
        ("alice", "api", False),
    ]
    assert secret not in str(listed)
    if isinstance(svc.store, RedisStore):
        raw = await svc.store.redis.hgetall(svc.store.prefix + "keys:records")
        assert secret.encode() not in b"".join(raw.values())

    # used at once on this instance, with its limits and models
    ok = await c.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))
    assert ok.status_code == 200, ok.text
    assert ok.headers["x-ratelimit-limit-requests"] == "2"
    other = await c.post("/v1/chat/completions", json={**CHAT, "model": "chat-model"}, headers=bearer(secret))
    assert other.status_code == 403 and other.json()["error"]["code"] == "model_not_allowed"

    # changed: the new limit applies to the next request
    r = await c.patch("/v1/admin/keys/alice", json={"limits": {"requests_per_minute": 50}}, headers=admin())
    assert r.status_code == 200, r.text
    assert r.json()["models"] == ["demo"]  # (models kept when only limits change)
    ok = await c.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))
    assert ok.headers["x-ratelimit-limit-requests"] == "50"

    # rotated with a grace: both secrets work until it ends, then only the new one
    r = await c.post("/v1/admin/keys/alice/rotate", json={"grace_seconds": 1}, headers=admin())
    assert r.status_code == 200, r.text
    new = r.json()["secret"]
    assert new != secret and r.json()["rotating_until"]
    for key in (secret, new):
        assert (await c.post("/v1/chat/completions", json=CHAT, headers=bearer(key))).status_code == 200
    await asyncio.sleep(1.05)
    old = await c.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))
    assert old.status_code == 401 and old.json()["error"]["code"] == "key_expired"
    assert (await c.post("/v1/chat/completions", json=CHAT, headers=bearer(new))).status_code == 200

    # revoked: refused from the next request on
    r = await c.delete("/v1/admin/keys/alice", headers=admin())
    assert r.status_code == 200 and r.json()["revoked"] is True
    gone = await c.post("/v1/chat/completions", json=CHAT, headers=bearer(new))
    assert gone.status_code == 401 and gone.json()["error"]["code"] == "invalid_api_key"
    assert (await c.get("/v1/admin/keys/alice", headers=admin())).status_code == 404

    # the audit: every change, newest first, with who and what, never a secret
    audit = (await c.get("/v1/admin/audit?key=alice", headers=admin())).json()["data"]
    assert [e["action"] for e in audit] == ["revoke", "rotate", "update", "create"]
    assert {e["actor"] for e in audit} == {"admin:" + hashlib.sha256(ADMIN.encode()).hexdigest()[:12]}
    assert audit[2]["detail"] == {"limits": [{"requests_per_minute": 2}, {"requests_per_minute": 50}]}
    assert secret not in str(audit) and new not in str(audit)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_expiry_names_and_the_configs_keys(make_app: Any, backend: str) -> None:
    c, _ = await make_app(backend)
    r = await c.post("/v1/admin/keys", json={"name": "short", "expires_at": time.time() + 0.5}, headers=admin())
    secret = r.json()["secret"]
    assert (await c.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))).status_code == 200
    await asyncio.sleep(0.6)
    late = await c.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))
    assert late.status_code == 401 and late.json()["error"]["code"] == "key_expired"
    assert (await c.get("/v1/admin/keys/short", headers=admin())).json()["expired"] is True

    # a name that is markup is a name like another (escaping is the console's job)
    odd = "<script>alert(1)</script>"
    r = await c.post("/v1/admin/keys", json={"name": odd}, headers=admin())
    assert r.status_code == 201 and r.json()["name"] == odd
    assert (await c.get("/v1/admin/keys/%3Cscript%3Ealert(1)%3C%2Fscript%3E", headers=admin())).status_code == 200

    # refusals: a duplicate, a config key, bad fields
    assert (await c.post("/v1/admin/keys", json={"name": odd}, headers=admin())).json()["error"]["code"] == "key_exists"
    for call in (
        c.post("/v1/admin/keys", json={"name": "cfgkey"}, headers=admin()),
        c.patch("/v1/admin/keys/cfgkey", json={"limits": {}}, headers=admin()),
        c.delete("/v1/admin/keys/cfgkey", headers=admin()),
        c.post("/v1/admin/keys/cfgkey/rotate", headers=admin()),
    ):
        r = await call
        assert r.status_code == 409 and r.json()["error"]["code"] == "key_read_only", r.text
    bad = await c.post("/v1/admin/keys", json={"name": "x", "limits": {"requests_per_minute": 0}}, headers=admin())
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "limits"
    bad = await c.post("/v1/admin/keys", json={"name": "x", "secret": "mine"}, headers=admin())
    assert bad.status_code == 400
    bad = await c.post("/v1/admin/keys", json={"name": "x", "expires_at": "soon"}, headers=admin())
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "expires_at"
    # the config's key works as before
    assert (await c.post("/v1/chat/completions", json=CHAT, headers=bearer("sk-cfg"))).status_code == 200


@pytest.mark.parametrize("backend", BACKENDS)
async def test_only_an_admin_and_only_with_admin_keys(make_app: Any, backend: str) -> None:
    c, _ = await make_app(backend)
    for headers in ({}, bearer("sk-cfg"), bearer("wrong")):
        r = await c.get("/v1/admin/keys", headers=headers)
        assert r.status_code == 401, r.text
        r = await c.post("/v1/admin/keys", json={"name": "evil"}, headers=headers)
        assert r.status_code == 401
        assert (await c.get("/v1/admin/audit", headers=headers)).status_code == 401
    off, _ = await make_app(backend, admin_keys=[])
    assert (await off.get("/v1/admin/keys", headers=admin())).status_code == 404


async def test_another_instance_sees_a_change_within_a_second(make_app: Any) -> None:
    """Two apps on one SQLite file (two workers of one host): a key made through one works on
    the other within a second, and its revocation too."""
    a, _ = await make_app("sqlite")
    b, _ = await make_app("sqlite")
    secret = (await a.post("/v1/admin/keys", json={"name": "both"}, headers=admin())).json()["secret"]
    t0 = time.monotonic()
    while (await b.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))).status_code != 200:
        assert time.monotonic() - t0 < 1.0
        await asyncio.sleep(0.05)
    await a.delete("/v1/admin/keys/both", headers=admin())
    t0 = time.monotonic()
    while (await b.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))).status_code != 401:
        assert time.monotonic() - t0 < 1.0
        await asyncio.sleep(0.05)


async def test_a_proxy_whose_keys_cannot_be_read_at_start_is_not_open() -> None:
    """No key in the config, the Redis store down at start: runtime keys may exist, so the
    proxy is not open (no key: 401; a key: 503 keys_unavailable, retry-after); a config key
    still works."""
    cfg = make_config(
        auth={"admin_keys": [ADMIN]},
        store={"backend": "redis", "url": "redis://127.0.0.1:1/0", "timeout_seconds": 0.3},
        server={"secret_key": "runtime-keys-test-secret-0123456789abcdef"},
    )
    app = create_app(cfg)
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    try:
        c = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8080")
        r = await c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key", r.text
        r = await c.post("/v1/chat/completions", json=CHAT, headers=bearer("sk-sb-anything"))
        assert r.status_code == 503 and r.json()["error"]["code"] == "keys_unavailable", r.text
        assert r.headers["retry-after"] == "1"
    finally:
        await ctx.__aexit__(None, None, None)
    with_key = make_config(
        auth={"keys": [{"name": "cfg", "key": "sk-cfg"}]},
        store={"backend": "redis", "url": "redis://127.0.0.1:1/0", "timeout_seconds": 0.3},
        server={"secret_key": "runtime-keys-test-secret-0123456789abcdef"},
    )
    app = create_app(with_key)
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    try:
        c = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8080")
        assert (await c.post("/v1/chat/completions", json=CHAT, headers=bearer("sk-cfg"))).status_code == 200
    finally:
        await ctx.__aexit__(None, None, None)
