"""The SIGTERM drain of a real ``switchboard serve`` process (app.drain).

A loopback fault upstream (``tests/integration/fault_upstream.py``, in a thread) streams a
turn slowly: ``slow1`` over one second, ``slow30`` over thirty.  With
``server.drain: {announce_seconds: 1, timeout_seconds: 3}``: two streams are open when the
process gets SIGTERM; ``/readyz`` answers 503 ``draining`` at once and the listener still
accepts during the announce window; the short stream completes normally; the long one ends
at the deadline with an error chunk ``server_shutting_down`` (never cut); the process exits
by itself shortly after, and logs the drain.  A second signal exits at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import parse_sse
from tests.integration.fault_upstream import TEXT, FaultUpstream

E2E = Path(__file__).resolve().parent.parent / "e2e"
if str(E2E) not in sys.path:
    sys.path.insert(0, str(E2E))
from proxy_harness import Proxy  # noqa: E402

ANNOUNCE, TIMEOUT = 1.0, 3.0
KEY = "sk-drain-client"
AUTH = {"authorization": f"Bearer {KEY}"}


@pytest.fixture
def upstream() -> Iterator[FaultUpstream]:
    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    f = asyncio.run_coroutine_threadsafe(FaultUpstream().start(), loop).result(5)
    yield f
    asyncio.run_coroutine_threadsafe(f.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    t.join(5)


@pytest.fixture(params=[1, 2], ids=["one-process", "workers-2"])
def proxy(upstream: FaultUpstream, tmp_path: Path, request: Any) -> Iterator[Proxy]:
    """One process, and ``--workers 2`` (app.workers): the supervisor passes each signal on
    to its workers, so the drain and the second signal behave the same."""
    config: dict[str, Any] = {
        "server": {"drain": {"announce_seconds": ANNOUNCE, "timeout_seconds": TIMEOUT}, "keepalive_seconds": 0},
        "auth": {"keys": [KEY]},
        "providers": [{"name": "up", "protocol": "chat", "base_url": upstream.url("bad"), "api_key": "sk-up"}],
        "models": [{"name": "m-fault-*", "provider": "up"}],
    }
    p = Proxy(config, tmp_path, args=("--workers", str(request.param))).start()
    yield p
    p.stop()


async def stream(url: str, model: str, got: dict[str, Any]) -> None:
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with (
        httpx.AsyncClient(timeout=20, headers=AUTH) as c,
        c.stream("POST", f"{url}/v1/chat/completions", json=body) as r,
    ):
        got["status"] = r.status_code
        raw = b""
        async for chunk in r.aiter_raw():
            if "first" not in got:
                got["first"] = time.monotonic()
                got["started"].set()
            raw += chunk
    got["end"] = time.monotonic()
    got["events"] = parse_sse(raw)


def terminal(events: list[Any]) -> str:
    last = events[-1]
    return "done" if last == "[DONE]" else last["error"]["code"]


def wait_exit(proc: Any, limit: float) -> float:
    t0 = time.monotonic()
    proc.wait(timeout=limit)
    return time.monotonic() - t0


async def test_sigterm_drains_then_exits(proxy: Proxy) -> None:
    assert proxy.proc is not None
    short: dict[str, Any] = {"started": asyncio.Event()}
    long: dict[str, Any] = {"started": asyncio.Event()}
    tasks = [asyncio.ensure_future(stream(proxy.url, "m-fault-slow1.5", short))]
    tasks.append(asyncio.ensure_future(stream(proxy.url, "m-fault-slow30", long)))
    await asyncio.wait_for(asyncio.gather(short["started"].wait(), long["started"].wait()), 10)
    t0 = time.monotonic()
    os.kill(proxy.proc.pid, signal.SIGTERM)
    async with httpx.AsyncClient(timeout=2, headers=AUTH) as c:
        await asyncio.sleep(0.2)
        r = await c.get(f"{proxy.url}/readyz")
        assert r.status_code == 503 and r.json()["status"] == "draining"
        # the listener stays open during the announce window: a new request is still served
        r = await c.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": "m-fault-ok", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == TEXT
        assert time.monotonic() - t0 < ANNOUNCE
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert short["status"] == long["status"] == 200
    assert terminal(short["events"]) == "done"  # in flight at SIGTERM, complete before the deadline
    assert terminal(long["events"]) == "server_shutting_down"
    assert [e for e in long["events"] if e != "[DONE]" and "error" in e][-1] is long["events"][-1]
    ended = long["end"] - t0
    assert TIMEOUT - 0.2 <= ended <= TIMEOUT + 1.0, ended
    exited = wait_exit(proxy.proc, 5)
    total = time.monotonic() - t0
    assert total <= TIMEOUT + 2.5, total
    log = proxy.log(200_000)
    events = [json.loads(x)["event"] for x in log.splitlines() if x.startswith("{")]
    for e in ("drain_started", "drain_listener_closed", "drain_deadline", "drain_done"):
        assert e in events, log[-3000:]
    print(f"\ndrain: long stream ended {ended:.2f}s after SIGTERM, process exited at {total:.2f}s ({exited:.2f})")


async def test_second_signal_exits_at_once(proxy: Proxy) -> None:
    assert proxy.proc is not None
    long: dict[str, Any] = {"started": asyncio.Event()}
    task = asyncio.ensure_future(stream(proxy.url, "m-fault-slow30", long))
    await asyncio.wait_for(long["started"].wait(), 10)
    os.kill(proxy.proc.pid, signal.SIGTERM)
    await asyncio.sleep(0.3)
    t0 = time.monotonic()
    os.kill(proxy.proc.pid, signal.SIGINT)
    await asyncio.to_thread(proxy.proc.wait, 3)
    took = time.monotonic() - t0
    assert took < 1.0, took
    await asyncio.wait_for(task, 5)
    assert terminal(long["events"]) == "server_shutting_down"  # ended the protocol's way, even then
    assert "drain_forced" in proxy.log(200_000)


async def ws_turn(url: str, model: str, got: dict[str, Any]) -> None:
    """One Responses turn over the WebSocket; the events, and how the socket closed."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    events: list[dict[str, Any]] = []
    got["events"] = events
    async with connect(url.replace("http://", "ws://") + "/v1/responses", additional_headers=AUTH) as ws:
        frame = {"type": "response.create", "model": model, "input": "hi", "stream": True, "store": False}
        await ws.send(json.dumps(frame))
        try:
            while True:
                ev = json.loads(await ws.recv())
                events.append(ev)
                if len(events) == 1:
                    got["started"].set()
                if ev["type"] in ("response.completed", "response.failed"):
                    got["end"] = time.monotonic()
                    await ws.recv()  # the socket is closed after the turn: raises
        except ConnectionClosed as e:
            got["close"] = e.rcvd.code if e.rcvd is not None else None


async def test_sigterm_lets_websocket_turns_finish_past_the_announce_window(proxy: Proxy) -> None:
    """uvicorn's own shutdown closes every socket at once (1012); the drain keeps the listener
    open while a socket has a turn in flight, so a turn that ends before the deadline ends
    whole and one still open at the deadline ends with server_shutting_down."""
    assert proxy.proc is not None
    short: dict[str, Any] = {"started": asyncio.Event()}
    long: dict[str, Any] = {"started": asyncio.Event()}
    tasks = [asyncio.ensure_future(ws_turn(proxy.url, "m-fault-slow30", long))]
    await asyncio.wait_for(long["started"].wait(), 10)
    tasks.append(asyncio.ensure_future(ws_turn(proxy.url, "m-fault-slow2", short)))
    await asyncio.wait_for(short["started"].wait(), 10)
    t0 = time.monotonic()
    os.kill(proxy.proc.pid, signal.SIGTERM)
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert short["events"][-1]["type"] == "response.completed"  # past the announce window, whole
    assert short["end"] - t0 > ANNOUNCE
    assert long["events"][-1]["type"] == "response.failed"
    assert long["events"][-1]["response"]["error"]["code"] == "server_shutting_down"
    assert TIMEOUT - 0.2 <= long["end"] - t0 <= TIMEOUT + 1.0
    assert short["close"] == long["close"] == 1012
    wait_exit(proxy.proc, 5)
