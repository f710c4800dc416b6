"""The Redis counters' own connection (app/limits.py on app/redis_wire.py): takes pipelined on it stay
exact across instances, it logs in and selects the store's database (TCP or Unix socket),
scripts a restarted Redis lost are loaded again, a Redis that does not answer fails open in
time, and clients it cannot stand for keep redis-py's connections."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from app.limits import Limiter, LimitExceeded, RedisCounters
from app.metrics import Metrics
from app.redis_wire import params as _wire_params
from app.store import RedisStore
from providers.config import StoreCfg
from tests.unit.test_limits import NOW, config

REDIS_URL = "redis://127.0.0.1:6379/0"
PASSWORD = "wire-test-password"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[int, str]]:
    """Our own redis-server with a password, on a free port and a Unix socket (stopped by its PID)."""
    from redis import Redis as SyncRedis

    exe = shutil.which("redis-server")
    assert exe, "redis-server is needed"
    port, sock = _free_port(), str(tmp_path / "redis.sock")
    argv = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    argv += ["--unixsocket", sock, "--requirepass", PASSWORD, "--dir", str(tmp_path)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                with SyncRedis(port=port, password=PASSWORD, socket_timeout=0.5) as ping:
                    ping.ping()
                break
            except Exception:
                time.sleep(0.05)
        else:
            raise AssertionError("redis-server did not start")
        yield port, sock
    finally:
        proc.terminate()  # (this PID only)
        proc.wait(timeout=10)


async def test_pipelined_takes_stay_exact_across_three_instances() -> None:
    """Three counters on one Redis (three instances), each on its own connection, 300 takes
    over many loop turns against a limit of 100: exactly 100 admitted, each count once."""
    prefix = f"sbtest:{uuid.uuid4().hex}:"
    clients = [RedisStore(StoreCfg(backend="redis", url=REDIS_URL)).redis for _ in range(3)]
    lims = [Limiter(config({"requests_per_minute": 100}), RedisCounters(r, prefix)) for r in clients]
    try:

        async def one(i: int) -> int | None:
            for _ in range(i % 5):
                await asyncio.sleep(0)  # (spread over loop turns: several batches in flight)
            try:
                t = await lims[i % 3].admit("alice", "m", 0, f"r{i}", now=NOW)
            except LimitExceeded:
                return None
            assert not t.degraded
            return int(t.headers()["x-ratelimit-remaining-requests"])

        got = await asyncio.gather(*(one(i) for i in range(300)))
        admitted = sorted(x for x in got if x is not None)
        assert admitted == list(range(100))  # remaining 99…0, once each; the 101st refused
        assert all(isinstance(lim.counters, RedisCounters) and lim.counters._wire is not None for lim in lims)
    finally:
        for lim in lims:
            await lim.aclose()
        keys = [k async for k in clients[0].scan_iter(match=prefix + "*")]
        if keys:
            await clients[0].delete(*keys)
        for r in clients:
            await r.aclose()


@pytest.mark.parametrize("via", ["tcp", "unix"])
async def test_the_connection_logs_in_and_selects_the_database(own_redis: tuple[int, str], via: str) -> None:
    port, sock = own_redis
    url = f"redis://:{PASSWORD}@127.0.0.1:{port}/3" if via == "tcp" else f"unix://{sock}?db=3&password={PASSWORD}"
    r = RedisStore(StoreCfg(backend="redis", url=url)).redis
    counters = RedisCounters(r, "w:")
    assert counters._wire is not None and ("path" in counters._wire.params) == (via == "unix")
    lim = Limiter(config({"requests_per_minute": 2, "tokens_per_day": 1000}), counters)
    try:
        t = await lim.admit("alice", "m", 100, "r1", now=NOW)
        assert not t.degraded and t.counts == [0, 0]
        await lim.settle(t, "m", (300, 0, 0, 0, 0))
        await counters.flush()
        assert int(await r.get("w:" + t.entries[1].key)) == 300  # in db 3 (this client's)
        assert await r.execute_command("SELECT", 0) and await r.get("w:" + t.entries[1].key) is None
    finally:
        await lim.aclose()
        await r.aclose()


async def test_a_wrong_password_fails_open(own_redis: tuple[int, str]) -> None:
    port, _ = own_redis
    r = RedisStore(StoreCfg(backend="redis", url=f"redis://:wrong@127.0.0.1:{port}/0", timeout_seconds=1)).redis
    m = Metrics()
    lim = Limiter(config({"requests_per_minute": 1}), RedisCounters(r, "w:"), m)
    try:
        for i in range(2):  # over the limit, yet admitted: Redis refused us, not the request
            assert (await lim.admit("alice", "m", 0, f"r{i}", now=NOW)).degraded
        assert m.get("switchboard_limits_degraded_total") == 2
    finally:
        await lim.aclose()
        await r.aclose()


async def test_scripts_a_redis_lost_are_loaded_and_their_commands_sent_once(own_redis: tuple[int, str]) -> None:
    """SCRIPT FLUSH between two batches (a restart without its scripts): the next batch's
    NOSCRIPT replies mean nothing ran; loaded and sent again, each counts once."""
    port, _ = own_redis
    r = RedisStore(StoreCfg(backend="redis", url=f"redis://:{PASSWORD}@127.0.0.1:{port}/0")).redis
    counters = RedisCounters(r, "w:")
    lim = Limiter(config({"requests_per_minute": 10, "tokens_per_day": 1000}), counters)
    try:
        t1 = await lim.admit("alice", "m", 100, "r1", now=NOW)
        await r.script_flush()
        await lim.settle(t1, "m", (150, 0, 0, 0, 0))  # owed: rides with the next take
        t2 = await lim.admit("alice", "m", 100, "r2", now=NOW)
        assert t2.counts == [1, 150]  # the settlement ran first, once; then this take, once
        await counters.flush()
        assert int(await r.get("w:" + t2.entries[0].key)) == 2
        assert int(await r.get("w:" + t2.entries[1].key)) == 250
    finally:
        await lim.aclose()
        await r.aclose()


async def test_a_redis_that_does_not_answer_fails_open_in_time() -> None:
    """A server that takes the bytes and never answers: the batch fails after the store's
    timeout, the take fails open, the settlement stays owed."""
    silent: list[asyncio.StreamWriter] = []

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        silent.append(writer)
        while await reader.read(65536):
            pass

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    r = RedisStore(StoreCfg(backend="redis", url=f"redis://127.0.0.1:{port}/0", timeout_seconds=0.2)).redis
    counters = RedisCounters(r, "w:")
    lim = Limiter(config({"requests_per_minute": 1, "tokens_per_day": 1000}), counters)
    try:
        t0 = time.monotonic()
        t = await lim.admit("alice", "m", 0, "r1", now=NOW)
        assert t.degraded and time.monotonic() - t0 < 1  # one try of 0.2 s: a hung Redis is not tried again
        await counters.settle([("lim:alice:tokens_day:d1", 5, 60)], None)
        await counters.flush()
        assert len(counters._owed) == 1  # not answered: owed again, never lost
    finally:
        await lim.aclose()
        await r.aclose()
        for w in silent:
            w.close()
        server.close()
        await server.wait_closed()


def test_clients_it_cannot_stand_for_keep_redis_pys_connections() -> None:
    class _NoPool:  # (a cluster client: a pool per node, none of its own)
        pass

    assert _wire_params(_NoPool()) is None
    assert _wire_params(Redis.from_url("rediss://127.0.0.1:6380/0")) is None  # TLS
    got = _wire_params(Redis.from_url("redis://u:p@10.0.0.5:6390/4", socket_timeout=2.5))
    assert got == {
        "host": "10.0.0.5",
        "port": 6390,
        "username": "u",
        "password": "p",
        "db": 4,
        "timeout": 2.5,
        "connect_timeout": 2.5,
    }


async def test_a_client_without_the_connection_still_counts() -> None:
    """The counters without their own connection (redis-py's pool path): the same counts."""
    r = RedisStore(StoreCfg(backend="redis", url=REDIS_URL)).redis
    prefix = f"sbtest:{uuid.uuid4().hex}:"
    counters = RedisCounters(r, prefix)
    counters._wire = None
    lim = Limiter(config({"requests_per_minute": 2, "tokens_per_day": 1000}), counters)
    try:
        t = await lim.admit("alice", "m", 100, "r1", now=NOW)
        await lim.settle(t, "m", (300, 0, 0, 0, 0))
        t2 = await lim.admit("alice", "m", 0, "r2", now=NOW)
        assert t2.counts == [1, 300] and counters._wire is None
        with pytest.raises(LimitExceeded):
            await lim.admit("alice", "m", 0, "r3", now=NOW)
    finally:
        await lim.aclose()
        keys = [k async for k in r.scan_iter(match=prefix + "*")]
        if keys:
            await r.delete(*keys)
        await r.aclose()
