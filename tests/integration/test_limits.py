"""Per-key limits through the app: refusals in the client's protocol before any upstream
call, the rate-limit headers on every answer, the settled tokens, the usage record, and
the codex.rate_limits event on a Responses WebSocket."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import CHAT_URL, chat_stream_two_calls, sse_response

KEYS = {
    "keys": [
        {"name": "alice", "key": "sk-alice", "limits": {"requests_per_minute": 2, "tokens_per_day": 1000}},
        {"name": "bob", "key": "sk-bob", "limits": {"models": ["demo-*"]}},
        {"name": "carol", "key": "sk-carol"},
    ]
}
BODIES = {
    "chat": ("/v1/chat/completions", {"model": "chat-model", "messages": [{"role": "user", "content": "hi"}]}),
    "responses": ("/v1/responses", {"model": "chat-model", "input": "hi", "store": False}),
    "messages": ("/v1/messages", {"model": "chat-model", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}),
}  # fmt: skip


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@pytest.mark.parametrize("client_proto", ["chat", "responses", "messages"])
async def test_the_third_request_of_the_minute_is_refused_in_the_clients_protocol(
    client_factory: Any, mock: Any, client_proto: str
) -> None:
    c = await client_factory(auth=KEYS)
    route = mock.post(CHAT_URL).mock(side_effect=lambda req: sse_response(chat_stream_two_calls(), done=True))
    path, body = BODIES[client_proto]
    for i in range(2):
        r = await c.post(path, json={**body, "stream": True}, headers=auth("sk-alice"))
        assert r.status_code == 200, r.text
        assert r.headers["x-ratelimit-limit-requests"] == "2"
        assert r.headers["x-ratelimit-remaining-requests"] == str(1 - i)
        assert r.headers["x-codex-primary-window-minutes"] == "1"
        assert float(r.headers["x-codex-secondary-used-percent"]) >= 0
    r = await c.post(path, json=body, headers=auth("sk-alice"))
    assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 60
    assert r.headers["x-switchboard-limit"] == "requests"
    assert (r.headers["x-ratelimit-limit-requests"], r.headers["x-ratelimit-remaining-requests"]) == ("2", "0")
    if client_proto == "messages":
        assert r.json()["error"]["type"] == "rate_limit_error"
    else:
        assert r.json()["error"]["code"] == "rate_limit_exceeded" and "try again in" in r.json()["error"]["message"]
    assert route.call_count == 2  # refused before any upstream call
    r = await c.post(path, json={**body, "stream": True}, headers=auth("sk-carol"))  # no policy: no limit, no headers
    assert r.status_code == 200 and "x-ratelimit-limit-requests" not in r.headers
    m = (await c.get("/metrics")).text
    assert 'switchboard_limits_refused_total{kind="requests"} 1.0' in m


async def test_a_model_outside_the_keys_list_is_forbidden(client_factory: Any, mock: Any) -> None:
    c = await client_factory(auth=KEYS)
    path, body = BODIES["chat"]
    r = await c.post(path, json=body, headers=auth("sk-bob"))
    assert r.status_code == 403 and r.json()["error"]["code"] == "model_not_allowed"
    assert not mock.calls


async def test_tokens_are_settled_and_the_usage_recorded(client_factory: Any, mock: Any, tmp_path: Any) -> None:
    c = await client_factory(auth=KEYS, store={"backend": "sqlite", "path": str(tmp_path / "s.db")})
    mock.post(CHAT_URL).mock(side_effect=lambda req: sse_response(chat_stream_two_calls(), done=True))
    path, body = BODIES["chat"]
    r = await c.post(
        path, json={**body, "stream": True, "stream_options": {"include_usage": True}}, headers=auth("sk-alice")
    )
    assert r.status_code == 200
    app = c._transport.app  # type: ignore[attr-defined]
    svc = app.state.service
    await svc.usage.flush()
    recs = await svc.usage.query(0)
    assert [(x.key, x.model, x.outcome, x.status) for x in recs] == [("alice", "chat-model", "completed", 200)]
    assert recs[0].input == 11 and recs[0].output == 7 and not recs[0].estimated  # the upstream's usage
    pol = svc.limiter.policy("alice")
    assert pol is not None
    r = await c.post(path, json={**body, "stream": True}, headers=auth("sk-alice"))
    # the day window holds what was settled (11 + 7) and this request's reservation
    assert 1.8 <= float(r.headers["x-codex-secondary-used-percent"]) < 10


async def test_a_compaction_counts_against_the_key(client_factory: Any, mock: Any) -> None:
    c = await client_factory(auth={"keys": [{"name": "dan", "key": "sk-dan", "limits": {"requests_per_minute": 1}}]})
    mock.post(CHAT_URL).mock(side_effect=lambda req: sse_response(chat_stream_two_calls(), done=True))
    path, body = BODIES["chat"]
    r = await c.post(path, json={**body, "stream": True}, headers=auth("sk-dan"))
    assert r.status_code == 200
    r = await c.post("/v1/responses/compact", json={"model": "chat-model", "input": "hi"}, headers=auth("sk-dan"))
    assert r.status_code == 429 and r.headers["retry-after"] and r.json()["error"]["code"] == "rate_limit_exceeded"


async def test_a_concurrency_refusal_carries_the_rate_limit_headers(client_factory: Any, mock: Any) -> None:
    keys = {"keys": [{"name": "dave", "key": "sk-dave", "limits": {"requests_per_minute": 10, "concurrent": 1}}]}
    c = await client_factory(auth=keys)
    mock.post(CHAT_URL).mock(side_effect=lambda req: sse_response(chat_stream_two_calls(), done=True))
    limiter = c._transport.app.state.service.limiter  # type: ignore[attr-defined]
    held = await limiter.admit("dave", "chat-model", 0, "held")  # an answer in flight holds the one slot
    path, body = BODIES["chat"]
    r = await c.post(path, json=body, headers=auth("sk-dave"))
    assert r.status_code == 429 and r.headers["x-switchboard-limit"] == "concurrent"
    assert r.headers["retry-after"] == "1"
    assert (r.headers["x-ratelimit-limit-requests"], r.headers["x-ratelimit-remaining-requests"]) == ("10", "9")
    assert r.headers["x-codex-primary-window-minutes"] == "1"
    await limiter.settle(held, "chat-model", None)
    r = await c.post(path, json={**body, "stream": True}, headers=auth("sk-dave"))
    assert r.status_code == 200 and r.headers["x-ratelimit-remaining-requests"] == "8"
