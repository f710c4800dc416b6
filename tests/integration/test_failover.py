"""Fallbacks, retries and breakers against the loopback fault upstream (app.failover)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from .fault_upstream import CALLS, TEXT, FaultUpstream
from .test_fault_matrix import metric

TIMEOUTS = {"connect": 0.5, "first_byte": 0.6, "idle": 0.6, "write": 2}  # (a stall, timed out)
# where no test waits for a timeout: a loaded machine's pause is not mistaken for a stall
LOOSE = {"connect": 5, "first_byte": 10, "idle": 10, "write": 10}
CHAT = {"messages": [{"role": "user", "content": "read a.py and ls"}]}


@pytest.fixture
async def fault() -> AsyncIterator[FaultUpstream]:
    f = await FaultUpstream().start()
    yield f
    await f.stop()


def cfg(
    f: FaultUpstream, models: list[dict[str, Any]], timeouts: dict[str, float] = LOOSE, **server: Any
) -> dict[str, Any]:
    prov = [("bad", "chat", f.url("bad")), ("good", "chat", f.url("good")), ("goodr", "responses", f.url("good"))]
    return {
        "server": {"keepalive_seconds": 0, **server},
        "providers": [
            {"name": n, "protocol": p, "base_url": u, "api_key": "sk-up", "timeouts": timeouts} for n, p, u in prov
        ],
        "models": models,
    }


async def post(c: Any, model: str, **kw: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    r = await c.post("/v1/chat/completions", json={**CHAT, "model": model, **kw}, timeout=10)
    return r, time.perf_counter() - t0


def bad_hits(f: FaultUpstream) -> int:
    return sum(1 for h in f.hits if h[0] == "bad")


async def test_dead_provider_falls_back_then_its_breaker_skips_it(fault: FaultUpstream, client_factory: Any) -> None:
    c = await client_factory(
        **cfg(
            fault,
            [{"name": "m-fault-stallhead", "targets": [{"provider": "bad"}, {"provider": "good"}]}],
            TIMEOUTS,
            breaker={"failures": 2, "open_seconds": 30},
        )
    )
    for _ in range(2):  # each waits for the first-byte timeout, then succeeds on the fallback
        r, took = await post(c, "m-fault-stallhead")
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == TEXT
        assert took >= 0.55
    ready = (await c.get("/readyz")).json()
    assert ready["breakers"] == {"bad/m-fault-stallhead": "open"}  # a timeout is the model's
    m = (await c.get("/metrics")).text
    assert metric(m, "switchboard_breaker_state", provider="bad", model="m-fault-stallhead") == 2
    assert metric(m, "switchboard_breaker_state", provider="bad", model="-") == 0
    r, took = await post(c, "m-fault-stallhead")  # the dead provider is skipped at once
    assert r.status_code == 200 and took < 0.3, took
    assert bad_hits(fault) == 2
    m = (await c.get("/metrics")).text
    assert metric(m, "switchboard_upstream_attempts_total", provider="bad", outcome="breaker_open") == 1
    assert metric(m, "switchboard_upstream_attempts_total", provider="good", outcome="ok") == 3


async def test_every_breaker_open_is_a_503_with_retry_after(fault: FaultUpstream, client_factory: Any) -> None:
    c = await client_factory(
        **cfg(fault, [{"name": "m-fault-500", "provider": "bad"}], breaker={"failures": 1, "open_seconds": 7})
    )
    r, _ = await post(c, "m-fault-500")
    assert r.status_code == 502 and r.json()["error"]["code"] == "server_error"
    r, took = await post(c, "m-fault-500")
    assert r.status_code == 503 and took < 0.2
    err = r.json()["error"]
    assert err["code"] == "upstream_circuit_open" and err["type"] == "upstream_error"
    assert 1 <= int(r.headers["retry-after"]) <= 7
    assert bad_hits(fault) == 1


async def test_fallback_to_another_protocol_translates_again(fault: FaultUpstream, client_factory: Any) -> None:
    c = await client_factory(
        **cfg(fault, [{"name": "m-fault-503", "targets": [{"provider": "bad"}, {"provider": "goodr"}]}])
    )
    for stream in (False, True):
        r, _ = await post(c, "m-fault-503", stream=stream)
        assert r.status_code == 200, r.text
    kinds = [(h[0], h[1]) for h in fault.hits]
    assert kinds == [("bad", "chat"), ("good", "responses")] * 2
    assert r.text.rstrip().endswith("data: [DONE]") and '"Bash"' in r.text


async def test_same_target_retried_after_retry_after(fault: FaultUpstream, client_factory: Any) -> None:
    c = await client_factory(**cfg(fault, [{"name": "m-fault-429", "provider": "bad"}]))
    r, took = await post(c, "m-fault-429")
    # three attempts, each answered 429 with retry-after 1 (≤ the 5 s cap): two waits of 1 s
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
    assert bad_hits(fault) == 3 and 2.0 <= took < 3.0


async def test_retry_after_beyond_the_cap_is_not_waited(fault: FaultUpstream, client_factory: Any) -> None:
    c = await client_factory(
        **cfg(fault, [{"name": "m-fault-429", "provider": "bad"}], retries={"retry_after_max_seconds": 0.5})
    )
    r, took = await post(c, "m-fault-429")
    assert r.status_code == 429 and bad_hits(fault) == 1 and took < 0.3


async def test_client_errors_are_not_retried(fault: FaultUpstream, client_factory: Any) -> None:
    c = await client_factory(
        **cfg(fault, [{"name": "m-fault-truncjson", "targets": [{"provider": "bad"}, {"provider": "good"}]}])
    )
    r, _ = await post(c, "m-fault-truncjson")
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_bad_response"
    assert len(fault.hits) == 1


async def test_retry_budget_caps_retries_per_provider(fault: FaultUpstream, client_factory: Any) -> None:
    c = await client_factory(
        **cfg(
            fault,
            [{"name": "m-fault-500", "provider": "bad"}],
            retries={"budget_ratio": 0, "budget_min_retries": 2, "backoff_base_seconds": 0.01},
            breaker={"enabled": False},
        )
    )
    for _ in range(3):
        r, _ = await post(c, "m-fault-500")
        assert r.status_code == 502
    # 3 requests, 2 retries in the budget's window: 5 attempts, not 9
    assert bad_hits(fault) == 5
    m = (await c.get("/metrics")).text
    assert metric(m, "switchboard_upstream_attempts_total", provider="bad", outcome="budget_exhausted") == 2


async def test_weighted_targets_share_the_load(fault: FaultUpstream, client_factory: Any) -> None:
    models = [
        {"name": "w", "targets": [{"provider": "good", "weight": 1}, {"provider": "goodr", "weight": 1}]},
    ]
    c = await client_factory(**cfg(fault, models))
    for _ in range(40):
        r, _ = await post(c, "w")
        assert r.status_code == 200
        msg = r.json()["choices"][0]["message"]
        assert (
            msg["content"] == TEXT
            and [(t["function"]["name"], t["function"]["arguments"]) for t in msg["tool_calls"]] == CALLS
        )
    protos = [h[1] for h in fault.hits]
    m = (await c.get("/metrics")).text
    assert (
        metric(m, "switchboard_upstream_attempts_total", provider="good", outcome="ok")
        + metric(m, "switchboard_upstream_attempts_total", provider="goodr", outcome="ok")
        == 40
    ), [x for x in m.splitlines() if "attempts_total" in x]
    assert 8 <= protos.count("chat") <= 32 and len(protos) == 40


async def test_single_target_config_still_valid(client_factory: Any) -> None:
    c = await client_factory()  # the integration config: provider + upstream_model, no targets
    r = await c.post("/v1/chat/completions", json={**CHAT, "model": "demo"})
    assert r.status_code == 200


async def test_one_models_failures_leave_the_providers_other_models_alone(
    fault: FaultUpstream, client_factory: Any
) -> None:
    c = await client_factory(
        **cfg(
            fault,
            [{"name": "m-fault-500", "provider": "bad"}, {"name": "m-fault-ok", "provider": "bad"}],
            breaker={"failures": 1, "open_seconds": 30},
        )
    )
    r, _ = await post(c, "m-fault-500")
    assert r.status_code == 502
    assert (await post(c, "m-fault-500"))[0].status_code == 503  # its own breaker is open
    r, _ = await post(c, "m-fault-ok")  # the same provider's other model is served
    assert r.status_code == 200, r.text
    assert (await c.get("/readyz")).json()["breakers"] == {"bad/m-fault-500": "open"}


async def test_rate_limits_never_open_a_breaker(fault: FaultUpstream, client_factory: Any) -> None:
    c = await client_factory(
        **cfg(
            fault,
            [{"name": "m-fault-429", "targets": [{"provider": "bad"}, {"provider": "good"}]}],
            breaker={"failures": 1, "open_seconds": 30},
        )
    )
    for _ in range(3):  # each: 429 on the first target, answered by the fallback at once
        r, took = await post(c, "m-fault-429")
        assert r.status_code == 200 and took < 0.9, took
    assert bad_hits(fault) == 3  # never skipped: its breaker was never told a failure
    assert "breakers" not in (await c.get("/readyz")).json()
    m = (await c.get("/metrics")).text
    assert metric(m, "switchboard_upstream_attempts_total", provider="bad", outcome="rate_limited") == 3


async def test_a_dead_provider_opens_its_own_breaker_for_every_model(fault: FaultUpstream, client_factory: Any) -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    s.close()
    conf = cfg(
        fault,
        [{"name": "a", "targets": [{"provider": "dead"}, {"provider": "good"}]}, {"name": "b", "provider": "dead"}],
        breaker={"failures": 1, "open_seconds": 30},
    )
    conf["providers"].append({"name": "dead", "protocol": "chat", "base_url": dead, "timeouts": TIMEOUTS})
    c = await client_factory(**conf)
    assert (await post(c, "a"))[0].status_code == 200  # refused, then the fallback
    r, took = await post(c, "b")  # another model of the dead provider: skipped at once
    assert r.status_code == 503 and r.json()["error"]["code"] == "upstream_circuit_open" and took < 0.2
    assert (await c.get("/readyz")).json()["breakers"] == {"dead": "open"}
