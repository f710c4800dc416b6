"""Security: what an attacker can send (paths, headers, browser requests, upstream echoes)
never grows memory, never reaches a header unescaped, and never carries a key out."""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
import orjson
import pytest
import structlog

from app import logs, metrics
from app.config import ConfigError, parse_config
from app.guard import Guard
from providers.errors import upstream_error
from transformers.masking import SecretMask

from .conftest import BASE_CONFIG, CHAT_URL, chat_chunk, sse_response

CHAT = {"model": "chat-model", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(autouse=True)
def _restore_logging() -> Any:
    yield
    structlog.reset_defaults()
    logs.set_mask(SecretMask())


# ---------------------------------------------------------------- metric labels


async def test_unknown_paths_never_become_metric_series(client_factory: Any) -> None:
    c = await client_factory(auth={"keys": ["sk-client-key-1"]})
    m = c._transport.app.metrics  # type: ignore[attr-defined]
    await c.get("/v1/models/warm-up")
    await c.get("/nope/warm-up")
    before = m.series_count()
    for i in range(2000):
        r = await c.get(f"/v1/models/{'x' * 200}{i}")
        assert r.status_code == 401
        r = await c.get(f"/attacker/{i}\u00e9")
        assert r.status_code == 404
    assert m.series_count() == before
    text = m.render().decode()
    assert "xxxxxxxx" not in text and "attacker" not in text
    assert (
        m.get("switchboard_requests_total", route="/v1/models/{model}", client="-", provider="-", status="401") == 2001
    )


def test_metric_labels_outside_their_set_are_other() -> None:
    m = metrics.Metrics(["chatup"], ["server_error"])
    m.inc("switchboard_upstream_errors_total", provider="evil\nprovider", code="sk-echoed-secret")
    m.inc("switchboard_upstream_errors_total", provider="chatup", code="server_error")
    assert m.get("switchboard_upstream_errors_total", provider="other", code="other") == 1
    assert m.get("switchboard_upstream_errors_total", provider="chatup", code="server_error") == 1
    assert b"sk-echoed-secret" not in m.render()


# ---------------------------------------------------------------- upstream secrets

SECRET = "sk-prov-0123456789abcdef"


def _echo_headers(status: int, shape: str) -> Any:
    """An upstream that prints the request headers it got into its error answer."""

    def handler(request: httpx.Request) -> httpx.Response:
        dump = "; ".join(f"{k}: {v}" for k, v in request.headers.items())
        if shape == "json":
            return httpx.Response(
                status, json={"error": {"message": f"bad request, got headers {dump}", "code": "weird", "param": dump}}
            )
        if shape == "html":
            return httpx.Response(
                status,
                content=f"<html><body><h1>Debug</h1><pre>{dump}</pre></body></html>".encode(),
                headers={"content-type": "text/html"},
            )
        return httpx.Response(
            status, content=f"error: headers were {dump}".encode(), headers={"content-type": "text/plain"}
        )

    return handler


PROFILES = {
    # name: (provider config, the secret strings it holds)
    "openai-style": (
        {"name": "p", "profile": "openai", "protocol": "chat", "base_url": "http://chat.test/v1", "api_key": SECRET},
        [SECRET],
    ),
    "azure": (
        {
            "name": "p",
            "profile": "azure",
            "protocol": "chat",
            "base_url": "http://chat.test/openai/v1",
            "api_key": SECRET,
        },
        [SECRET],
    ),
    "custom-header-from-env": (
        {
            "name": "p",
            "profile": "openai-compatible",
            "protocol": "chat",
            "base_url": "http://chat.test/v1",
            "headers": {"X-Gateway-Auth": "${SB_TEST_GW_TOKEN}", "X-Tenant": "${SB_TEST_TENANT}"},
        },
        ["gw-token-from-env-42", "tenant-value-777"],
    ),
}


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("status", [400, 401, 403, 429, 500])
@pytest.mark.parametrize("shape", ["json", "html", "text"])
async def test_upstream_echoing_its_headers_never_reaches_the_client(
    client_factory: Any, mock: Any, capsys: Any, monkeypatch: Any, profile: str, status: int, shape: str
) -> None:
    monkeypatch.setenv("SB_TEST_GW_TOKEN", "gw-token-from-env-42")
    monkeypatch.setenv("SB_TEST_TENANT", "tenant-value-777")
    logs.setup("debug")
    prov, secrets = PROFILES[profile]
    c = await client_factory(providers=[prov], models=[{"name": "m", "provider": "p"}])
    mock.route(host="chat.test").mock(side_effect=_echo_headers(status, shape))
    r = await c.post("/v1/chat/completions", json={**CHAT, "model": "m"})
    assert r.status_code >= 400
    body = r.text
    err = capsys.readouterr().err
    for s in secrets:
        assert s not in body, (profile, status, shape, body)
        assert s not in err
    e = r.json()["error"]
    assert set(e) >= {"message", "type", "param", "code"}
    if status in (401, 403):
        assert e["message"] == f"the upstream rejected the proxy's credentials for provider p (HTTP {status})"
        assert "headers" not in body
    if shape == "html":
        assert "<html" not in body and "Debug" not in body


def test_upstream_error_masks_every_configured_secret() -> None:
    mask = SecretMask(["sk-aaaaaaaaaa", "Bearer tok-bbbbbbbbbb", "short"])
    body = orjson.dumps(
        {
            "error": {
                "message": "saw sk-aaaaaaaaaa and tok-bbbbbbbbbb",
                "param": "sk-aaaaaaaaaa",
                "code": "sk_aaaaaaaaaa",
            }
        }
    )
    e = upstream_error(400, body, {}, "p", mask)
    assert "sk-aaaaaaaaaa" not in e.message and "tok-bbbbbbbbbb" not in e.message
    assert e.param == "[redacted]" and "short" not in mask.secrets


def test_config_secrets_cover_keys_headers_env_and_envelope(monkeypatch: Any) -> None:
    monkeypatch.setenv("SB_TEST_KEY", "env-key-1234567")
    cfg = parse_config(
        {
            **BASE_CONFIG,
            "server": {"reasoning_envelope_key": "envelope-key-xyz"},
            "auth": {"keys": ["client-key-abcdef", "sha256:" + "ab" * 32]},
            "providers": [
                {
                    "name": "a",
                    "profile": "openai",
                    "base_url": "http://u:pass-in-url@h/v1",
                    "api_key": "${SB_TEST_KEY}",
                    "headers": {"X-Api-Token": "hdr-tok-123456", "X-Title": "my-app-title"},
                    "query": {"api-version": "2024-10-21", "key": "query-key-99999"},
                },
                {"name": "demo", "profile": "demo"},
            ],
            "models": [{"name": "m", "provider": "a"}],
        }
    )
    s = cfg.secrets().secrets
    for v in (
        "env-key-1234567",
        "envelope-key-xyz",
        "client-key-abcdef",
        "hdr-tok-123456",
        "query-key-99999",
        "pass-in-url",
    ):
        assert v in s, v
    assert "my-app-title" not in s and "2024-10-21" not in s


# ---------------------------------------------------------------- browsers


async def test_cross_site_simple_post_is_refused(client: httpx.AsyncClient, mock: Any) -> None:
    route = mock.post(CHAT_URL).mock(return_value=sse_response([chat_chunk({}, "stop")], done=True))
    r = await client.post(
        "/v1/chat/completions",
        content=orjson.dumps(CHAT),
        headers={"content-type": "text/plain", "origin": "https://evil.example"},
    )
    assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
    r = await client.post("/v1/chat/completions", content=orjson.dumps(CHAT), headers={"content-type": "text/plain"})
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
    r = await client.post("/v1/chat/completions", content=orjson.dumps(CHAT))  # no content type at all
    assert r.status_code == 415
    assert not route.called


@pytest.mark.parametrize(
    "host,ok",
    [
        ("127.0.0.1:8080", True),
        ("localhost", True),
        ("LOCALHOST:1", True),
        ("[::1]:8080", True),
        ("app.localhost", True),
        ("127.9.9.9", True),
        ("evil.example", False),
        ("evil.example:8080", False),
        ("10.0.0.8", False),
        ("127.0.0.1.evil.example", False),
    ],
)
async def test_dns_rebinding_host_refused_on_an_open_proxy(client: httpx.AsyncClient, host: str, ok: bool) -> None:
    r = await client.get("/v1/models", headers={"host": host})
    assert (r.status_code == 200) is ok, r.text
    if not ok:
        assert r.json()["error"]["code"] == "host_not_allowed"
    assert (await client.get("/healthz", headers={"host": host})).status_code == 200


async def test_foreign_host_served_with_keys_or_when_configured(client_factory: Any) -> None:
    keyed = await client_factory(auth={"keys": ["sk-client-key-1"]})
    r = await keyed.get(
        "/v1/models", headers={"host": "switchboard.internal", "authorization": "Bearer sk-client-key-1"}
    )
    assert r.status_code == 200
    listed = await client_factory(server={"allowed_hosts": ["switchboard.internal"]})
    assert (await listed.get("/v1/models", headers={"host": "switchboard.internal:8080"})).status_code == 200
    assert (await listed.get("/v1/models", headers={"host": "other.internal"})).status_code == 403


async def test_allowed_origin_gets_cors(client_factory: Any, mock: Any) -> None:
    c = await client_factory(server={"allowed_origins": ["https://ide.example"]})
    pre = await c.options(
        "/v1/chat/completions",
        headers={
            "origin": "https://ide.example",
            "access-control-request-method": "POST",
            "access-control-request-headers": "content-type, authorization",
        },
    )
    assert pre.status_code == 204
    assert pre.headers["access-control-allow-origin"] == "https://ide.example"
    assert pre.headers["access-control-allow-headers"] == "content-type, authorization"
    mock.post(CHAT_URL).mock(
        return_value=httpx.Response(
            200,
            json={
                "id": "c1",
                "object": "chat.completion",
                "created": 1,
                "model": "up-chat",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hey"}, "finish_reason": "stop"}],
            },
        )
    )
    r = await c.post("/v1/chat/completions", json=CHAT, headers={"origin": "https://ide.example"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://ide.example"
    r = await c.post("/v1/chat/completions", json=CHAT, headers={"origin": "https://other.example"})
    assert r.status_code == 403


def test_guard_host_parsing() -> None:
    g = Guard(open_proxy=True, hosts=["proxy.lan"])
    scope = {"type": "http", "method": "GET", "path": "/v1/models", "headers": [(b"host", b"proxy.lan:80")]}
    assert g.check(scope) is None
    scope["headers"] = [(b"host", b"proxy.lan.evil:80")]
    assert g.check(scope) is not None


# ---------------------------------------------------------------- headers


async def test_dropped_tool_type_with_newline_is_escaped(client: httpx.AsyncClient, mock: Any) -> None:
    mock.post(CHAT_URL).mock(
        return_value=sse_response([chat_chunk({"content": "x"}), chat_chunk({}, "stop")], done=True)
    )
    body = {
        "model": "chat-model",
        "stream": True,
        "input": "hi",
        "tools": [
            {"type": "web_search\r\nset-cookie: pwned=1"},
            {"type": "x" * 4000},
            {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}},
        ],
    }
    r = await client.post("/v1/responses", json=body)
    assert r.status_code == 200
    v = r.headers["x-switchboard-dropped-tools"]
    assert "\n" not in v and "\r" not in v and "set-cookie" in v and "pwned" not in r.headers.get("set-cookie", "")
    assert len(v) <= 512
    assert "response.completed" in r.text


@pytest.mark.parametrize(
    "ua,sent",
    [
        ("codex_cli_rs/0.171.0 (Linux)", "codex_cli_rs/0.171.0 (Linux)"),
        ("caf\u00e9-agent/1.0", "caf-agent/1.0"),
        ("a" * 100_000, "a" * 512),
        ("\u00e9\u00e9", None),
    ],
)
async def test_user_agent_forwarded_only_when_safe(
    client: httpx.AsyncClient, mock: Any, ua: str, sent: str | None
) -> None:
    route = mock.post(CHAT_URL).mock(return_value=sse_response([chat_chunk({}, "stop")], done=True))
    r = await client.post(
        "/v1/chat/completions", json={**CHAT, "stream": True}, headers={"user-agent": ua.encode("utf-8")}
    )
    assert r.status_code == 200
    got = route.calls[0].request.headers.get("user-agent")
    if sent is None:
        assert got is None or "python-httpx" in got
    else:
        assert got == sent


@pytest.mark.parametrize("value", ["inf", "nan", "-5", "1e400", "soon", "9" * 400])
async def test_retry_after_ms_junk_never_crashes(client: httpx.AsyncClient, mock: Any, value: str) -> None:
    mock.post(CHAT_URL).mock(
        return_value=httpx.Response(
            429,
            json={"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}},
            headers={"retry-after-ms": value},
        )
    )
    r = await client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limit_exceeded"
    ra = r.headers.get("retry-after")
    assert ra is None or (ra.isdigit() and 1 <= int(ra) <= 86400)


# ---------------------------------------------------------------- config and logs


def test_config_rejects_bad_sha256_keys() -> None:
    with pytest.raises(ConfigError, match="64 hex digits"):
        parse_config({**BASE_CONFIG, "auth": {"keys": ["sha256:zz"]}})


@pytest.mark.parametrize(
    ("provider", "message"),
    [
        ({"headers": {"Authorization": "Bearer sk-live-secret\r\nX-Injected: 1"}}, "header 'Authorization': the value"),
        ({"headers": {"X-Org": "caf\u00e9 sk-live-secret"}}, "header 'X-Org': the value must be printable ASCII"),
        ({"headers": {"X-Org": " sk-live-secret"}}, "without spaces at either end"),
        ({"headers": {"X Org": "v"}}, "header name 'X Org' is not an HTTP token"),
        ({"api_key": "sk-live-secret\n"}, "api_key: the value must be printable ASCII"),
    ],
)
def test_config_refuses_provider_headers_that_cannot_be_sent(provider: dict[str, Any], message: str) -> None:
    """Found at load, not on every request (httpx or h11 would refuse them there), and the
    value, which may be a credential, is not in the message."""
    bad = {**BASE_CONFIG, "providers": [{"name": "p", "base_url": "http://127.0.0.1:9/v1", **provider}]}
    bad["models"] = [{"name": "m", "provider": "p"}]
    with pytest.raises(ConfigError, match=message) as e:
        parse_config(bad)
    assert "sk-live-secret" not in str(e.value)


def test_config_errors_never_print_environment_values(monkeypatch: Any) -> None:
    monkeypatch.setenv("SB_TEST_SECRET_NAME", "sk-live-secret-in-a-name")
    bad = {
        **BASE_CONFIG,
        "providers": [{"name": "${SB_TEST_SECRET_NAME}", "profile": "demo"}],
        "models": [{"name": "m", "provider": "nope"}],
    }
    with pytest.raises(ConfigError) as e:
        parse_config(bad)
    assert "sk-live-secret-in-a-name" not in str(e.value) and "from the environment" in str(e.value)


async def test_internal_error_is_logged_with_its_traceback(client_factory: Any, capsys: Any, monkeypatch: Any) -> None:
    logs.setup("info")
    c = await client_factory()

    def boom(*a: Any, **k: Any) -> Any:
        raise RuntimeError("kaboom-detail")

    monkeypatch.setattr("app.main.prepare", boom)
    r = await c.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error"
    err = capsys.readouterr().err
    line = next(json.loads(x) for x in err.splitlines() if x.startswith("{") and "internal_error" in x)
    assert "kaboom-detail" in line["exception"] and "Traceback" in line["exception"]


async def test_client_leaving_mid_upload_is_not_an_internal_error(client_factory: Any, capsys: Any) -> None:
    logs.setup("info")
    app_client = await client_factory()
    app = app_client._transport.app  # type: ignore[attr-defined]
    msgs = [{"type": "http.request", "body": b'{"model": "chat-', "more_body": True}, {"type": "http.disconnect"}]
    sent: list[Any] = []

    async def receive() -> Any:
        return msgs.pop(0)

    async def send(m: Any) -> None:
        sent.append(m)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
        "query_string": b"",
        "root_path": "",
    }
    await app(scope, receive, send)
    assert sent == []
    err = capsys.readouterr().err
    assert "internal_error" not in err and '"terminal":"client_cancel"' in err.replace(" ", "")


def test_masking_min_length_and_scheme_split() -> None:
    m = SecretMask(["Bearer abcdefghij", "tiny", os.urandom(4).hex()])
    assert m("token abcdefghij here") == "token [redacted] here"
    assert m("tiny stays") == "tiny stays"


# ---------------------------------------------------------------- bounded upstream bodies


async def test_upstream_bodies_are_read_within_bounds(client: httpx.AsyncClient, mock: Any, monkeypatch: Any) -> None:
    mock.post(CHAT_URL).mock(return_value=httpx.Response(400, content=b'{"error": {"message": "' + b"m" * 5_000_000))
    r = await client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 400 and len(r.content) < 70_000
    monkeypatch.setattr("app.exchange._BODY_MAX", 1000)
    mock.post(CHAT_URL).mock(return_value=httpx.Response(200, json={"choices": [{"message": {"content": "x" * 5000}}]}))
    r = await client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_bad_response"


async def test_streams_are_asked_for_uncompressed(client: httpx.AsyncClient, mock: Any) -> None:
    route = mock.post(CHAT_URL).mock(return_value=sse_response([chat_chunk({}, "stop")], done=True))
    await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert route.calls[0].request.headers["accept-encoding"] == "identity"


async def test_a_body_that_never_arrives_is_answered_408() -> None:
    """A client announcing more body than it sends is not waited for past
    server.body_timeout_seconds: 408, the connection closed."""
    import asyncio

    from app.main import create_app
    from tests.integration.conftest import make_config

    app = create_app(make_config(server={"body_timeout_seconds": 0.2}))
    sent: list[dict[str, Any]] = []
    calls = 0

    async def receive() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            return {"type": "http.request", "body": b'{"model": "chat-model", "messa', "more_body": True}
        await asyncio.Event().wait()  # the rest never comes
        raise AssertionError("unreachable")

    async def send(msg: dict[str, Any]) -> None:
        sent.append(msg)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), (b"content-length", b"5000")],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8080),
    }  # fmt: skip
    async with app.router.lifespan_context(app):
        t0 = asyncio.get_running_loop().time()
        await asyncio.wait_for(app(scope, receive, send), 5)
        took = asyncio.get_running_loop().time() - t0
    assert sent[0]["status"] == 408 and 0.15 < took < 2
    assert (b"connection", b"close") in sent[0]["headers"]
    assert orjson.loads(sent[1]["body"])["error"]["code"] == "request_timeout"
