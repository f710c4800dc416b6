"""bench/reference.py: the reference forwarder gives the client what the upstream sent
(status, content type, body; streams too), answers /readyz, and starts as a process the way
bench/run starts it.  Correctness only (no timing assertion)."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from bench.fake_upstream import serve
from bench.reference import Reference

CHAT = {"model": "bench-chat-n5-d0", "messages": [{"role": "user", "content": "hi"}]}
RESP = {"model": "bench-resp-n5-d0", "input": "hi"}


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    server = await serve("127.0.0.1", 0)
    yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    server.close()
    await server.wait_closed()


async def _lifespan(app: Reference, event: str) -> None:
    msgs = [{"type": f"lifespan.{event}"}]
    sent: list[dict] = []

    async def receive() -> dict:
        if msgs:
            return msgs.pop()
        await asyncio.sleep(3600)  # pragma: no cover - the app returns first
        return {}

    async def send(m: dict) -> None:
        sent.append(m)

    task = asyncio.ensure_future(app({"type": "lifespan"}, receive, send))
    for _ in range(100):
        if sent:
            break
        await asyncio.sleep(0.01)
    if event == "shutdown":
        await task
    else:
        task.cancel()
    assert sent == [{"type": f"lifespan.{event}.complete"}]


@pytest.mark.parametrize(
    "path, body, stream",
    [
        ("/chat/completions", CHAT, False),
        ("/chat/completions", CHAT, True),
        ("/responses", RESP, False),
        ("/responses", RESP, True),
    ],
)
async def test_forwards_what_the_upstream_sends(upstream: str, path: str, body: dict, stream: bool) -> None:
    app = Reference(upstream)
    await _lifespan(app, "startup")
    payload = dict(body, stream=stream)
    async with httpx.AsyncClient() as direct:
        want = await direct.post(upstream + path, json=payload)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ref") as c:
        got = await c.post("/v1" + path, json=payload)
        ready = await c.get("/readyz")
        missing = await c.get("/nothing")
    await _lifespan(app, "shutdown")
    assert got.status_code == want.status_code == 200
    assert got.headers["content-type"] == want.headers["content-type"]
    assert got.content == want.content
    assert ready.status_code == 200 and missing.status_code == 404


async def test_upstream_errors_pass_through(upstream: str) -> None:
    app = Reference(upstream)
    await _lifespan(app, "startup")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ref") as c:
        got = await c.post("/v1/nowhere", json=CHAT)
    await _lifespan(app, "shutdown")
    assert got.status_code == 404


def test_runs_as_bench_run_starts_it() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fake = subprocess.Popen([sys.executable, "-m", "bench.fake_upstream", "--port", "0"], stdout=subprocess.PIPE)
    ref = None
    try:
        assert fake.stdout is not None
        m = re.match(rb"READY (\d+)", fake.stdout.readline())
        assert m
        base = f"http://127.0.0.1:{int(m.group(1))}/v1"
        ref = subprocess.Popen([sys.executable, "-m", "bench.reference", "--upstream", base, "--port", str(port)])
        deadline = time.monotonic() + 30
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1)
                break
            except httpx.TransportError:
                assert ref.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        assert r.status_code == 200
        got = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=CHAT, timeout=10)
        assert got.status_code == 200 and got.json()["object"] == "chat.completion"
    finally:
        for p in (ref, fake):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(10)
