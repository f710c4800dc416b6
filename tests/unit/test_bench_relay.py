"""bench/relay.py: the byte relay gives each side exactly the other's bytes (answers, streams,
a large body under flow control), closes one side when the other closes, and starts as a
process the way bench/run starts it.  Correctness only (no timing assertion)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import AsyncIterator

import httpx
import pytest

from bench import relay
from bench.fake_upstream import serve as fake_serve
from bench.instructions import _stop, start_fake
from bench.run import scenarios

CHAT = {"model": "bench-chat-n5-d0", "messages": [{"role": "user", "content": "hi"}]}
RESP = {"model": "bench-resp-n5-d0", "input": "hi"}


def _port(server: asyncio.AbstractServer) -> int:
    return int(server.sockets[0].getsockname()[1])


@pytest.fixture
async def fake() -> AsyncIterator[int]:
    server = await fake_serve("127.0.0.1", 0)
    yield _port(server)
    server.close()
    await server.wait_closed()


async def _relay_to(upstream_port: int) -> asyncio.AbstractServer:
    return await relay.serve("127.0.0.1", 0, upstream_port)


@pytest.mark.parametrize(
    "path, body, stream",
    [
        ("/chat/completions", CHAT, False),
        ("/chat/completions", CHAT, True),
        ("/responses", RESP, True),
    ],
)
async def test_the_client_gets_the_upstream_s_bytes(fake: int, path: str, body: dict, stream: bool) -> None:
    server = await _relay_to(fake)
    try:
        payload = dict(body, stream=stream)
        async with httpx.AsyncClient() as c:
            want = await c.post(f"http://127.0.0.1:{fake}/v1{path}", json=payload)
            # two requests on one kept-alive connection through the relay
            got = [await c.post(f"http://127.0.0.1:{_port(server)}/v1{path}", json=payload) for _ in range(2)]
        for g in got:
            assert g.status_code == want.status_code == 200
            assert g.headers["content-type"] == want.headers["content-type"]
            assert g.content == want.content
    finally:
        server.close()


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Echoes until the client's end, then closes."""
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


async def test_a_large_body_crosses_both_ways_whole() -> None:
    echo = await asyncio.start_server(_echo, "127.0.0.1", 0)
    server = await _relay_to(_port(echo))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", _port(server))
        blob = bytes(range(256)) * (16 * 1024)  # 4 MiB: past every buffer on the way
        got = bytearray()

        async def read_all() -> None:
            while len(got) < len(blob):
                chunk = await reader.read(1 << 20)
                assert chunk, "closed early"
                got.extend(chunk)

        task = asyncio.ensure_future(read_all())
        writer.write(blob)
        await writer.drain()
        await asyncio.wait_for(task, 30)
        assert bytes(got) == blob
        writer.write_eof()  # the echo server closes: the relay closes the client's side
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
    finally:
        server.close()
        echo.close()


async def test_an_upstream_that_refuses_closes_the_client() -> None:
    probe = await asyncio.start_server(_echo, "127.0.0.1", 0)
    dead = _port(probe)
    probe.close()
    await probe.wait_closed()
    server = await _relay_to(dead)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", _port(server))
        writer.write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
    finally:
        server.close()


def test_runs_as_bench_run_starts_it() -> None:
    fake, base = start_fake()
    proc = None
    try:
        upstream_port = base.rsplit(":", 1)[1].split("/")[0]
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.relay", "--upstream-port", upstream_port], stdout=subprocess.PIPE
        )
        assert proc.stdout is not None
        r = re.match(rb"READY (\d+)", proc.stdout.readline())
        assert r
        got = httpx.post(f"http://127.0.0.1:{int(r.group(1))}/v1/chat/completions", json=CHAT, timeout=10)
        assert got.status_code == 200 and got.json()["object"] == "chat.completion"
    finally:
        for p in (proc, fake):
            if p is not None:
                _stop(p)


def test_the_bench_measures_the_relay_where_the_proxy_goes() -> None:
    by_name = {s.name: s for s in scenarios(quick=True)}
    pace, ns = by_name["relay-pace-chat"], by_name["relay-ns-chat-c1"]
    assert pace.relay and ns.relay and not pace.reference
    # the same requests as the proxy's own scenarios
    assert (pace.model, pace.concurrency, pace.per_worker) == (
        by_name["pace-chat"].model,
        by_name["pace-chat"].concurrency,
        by_name["pace-chat"].per_worker,
    )
    assert ns.model == by_name["ns-chat-c1"].model and ns.concurrency == 1
