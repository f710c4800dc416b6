"""The pipelined Redis connection (app/redis_wire.py) and the store's puts on it: RESP
packing, a batch lost with a kept connection sent once more, a Redis restart between two
puts, a script the server lost (NOSCRIPT) loaded again, and redis-py's path for clients the
wire cannot stand for."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import hiredis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.exceptions import ConnectionError as RedisConnectionError

from app.metrics import Metrics
from app.redis_wire import Wire, pack
from app.store import Record, RedisStore, StoreUnavailable
from providers.config import StoreCfg


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server:
    """Our own redis-server on a fixed port, which a test may stop and start again (by its PID)."""

    def __init__(self, tmp: Path) -> None:
        exe = shutil.which("redis-server")
        assert exe, "redis-server is needed"
        self.port = _free_port()
        self.argv = [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.argv += ["--dir", str(tmp)]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        from redis import Redis as SyncRedis

        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                with SyncRedis(port=self.port, socket_timeout=0.5) as ping:
                    ping.ping()
                return
            except Exception:
                time.sleep(0.05)
        raise AssertionError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()  # (this PID only)
            self.proc.wait(timeout=10)
            self.proc = None


@pytest.fixture
def server(tmp_path: Path) -> Any:
    srv = _Server(tmp_path)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def rec(rid: str, ancestors: list[str] | None = None) -> Record:
    return Record(
        id=rid,
        owner="alice",
        response={"id": rid, "output": [{"type": "message", "id": "msg_" + rid, "content": []}]},
        input=[],
        provider="p",
        upstream="chat",
        ancestors=ancestors or [],
    )


def _store(port: int, m: Metrics, wire: bool = True, timeout: float = 1) -> RedisStore:
    """The Redis store on ``port``; ``wire=False``: its puts on redis-py's connections, as
    for a client the wire cannot stand for (TLS, a credential provider)."""
    s = RedisStore(StoreCfg(backend="redis", url=f"redis://127.0.0.1:{port}/0", timeout_seconds=timeout), m)
    if not wire:
        s._wire = None
    return s


def test_pack_writes_resp_for_text_integers_and_bytes() -> None:
    for cmd in [("SET", "k", 5), ("SET", "clé", "é"), (b"SET", b"k\r\n", b"\x00\xff", 7, "é")]:
        reader = hiredis.Reader()
        reader.feed(pack(cmd))
        want = [c if isinstance(c, bytes) else str(c).encode() for c in cmd]
        assert reader.gets() == want  # (a RESP array of bulk strings reads back as itself)
    assert pack(("PING",)) == b"*1\r\n$4\r\nPING\r\n"


async def test_a_batch_lost_with_a_kept_connection_goes_once_more_and_a_fresh_one_does_not() -> None:
    """The server answers on its first connection once, then closes it on the next command
    (a restart, an idle timeout): that batch goes again on a new connection.  A batch lost
    with the connection opened for it fails (the server is not there to answer it)."""
    opened: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        opened.append(1)
        first = len(opened) == 1
        answered = 0
        while await reader.read(65536):
            if first and answered == 1:
                break  # (closed without an answer)
            writer.write(b"+OK\r\n")
            answered += 1
        writer.close()

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    params = {"host": "127.0.0.1", "port": port, "username": None, "password": None, "db": 0}
    wire = Wire({**params, "timeout": 1.0, "connect_timeout": 1.0})
    try:
        assert await wire.call([("PING",)]) == [b"OK"]
        assert await wire.call([("PING",)]) == [b"OK"]  # lost on the first connection, sent on a second
        assert len(opened) == 2
    finally:
        wire.close()
        srv.close()
        await srv.wait_closed()

    async def slam(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        opened.append(1)
        await reader.read(65536)
        writer.close()

    srv = await asyncio.start_server(slam, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    wire = Wire({**params, "port": port, "timeout": 1.0, "connect_timeout": 1.0})
    opened.clear()
    try:
        with pytest.raises(RedisConnectionError):
            await wire.call([("PING",)])
        assert len(opened) == 1
    finally:
        wire.close()
        srv.close()
        await srv.wait_closed()


@pytest.mark.parametrize("wire", [True, False], ids=["wire", "redis-py"])
async def test_a_redis_restart_between_two_puts_costs_neither(server: _Server, wire: bool) -> None:
    """A restart closes the kept connection and forgets the script: the next put goes again
    on a new connection, loads the script and lands.  The same on redis-py's connections (a
    client the wire cannot stand for: TLS, a credential provider).  (It takes a few ms; the
    store's timeout is 5 s here, not 1: on a host loaded past its cores, redis-py's put
    after the restart once took longer than 1 s.)"""
    m = Metrics()
    s = _store(server.port, m, wire, timeout=5)
    try:
        await s.put(rec("resp_r1"))
        assert not wire or (s._wire is not None and s._wire.connected)
        server.stop()
        server.start()  # (the same port, nothing kept: resp_r1 is gone with it)
        await s.put(rec("resp_r2"))
        assert await s.get("resp_r2", "alice") is not None
        assert m.get("switchboard_store_errors_total", op="put") == 0
    finally:
        await s.aclose()


async def test_a_put_while_redis_is_down_fails_and_the_next_one_lands(server: _Server) -> None:
    m = Metrics()
    s = _store(server.port, m)
    try:
        await s.put(rec("resp_d1"))
        server.stop()
        with pytest.raises(StoreUnavailable):
            await s.put(rec("resp_d2"))  # (the caller answers store: false)
        assert m.get("switchboard_store_errors_total", op="put") == 1
        server.start()
        await s.put(rec("resp_d3"))
        assert await s.get("resp_d3", "alice") is not None
    finally:
        await s.aclose()


@pytest.mark.parametrize("wire", [True, False], ids=["wire", "redis-py"])
async def test_puts_after_script_flush_load_the_script_again(server: _Server, wire: bool) -> None:
    """SCRIPT FLUSH between two puts (a restart keeping the data, a failover): NOSCRIPT means
    the batch did not run; the script is loaded and the batch sent again, once.  The same on
    redis-py's connections (a client the wire cannot stand for: TLS, a credential provider)."""
    m = Metrics()
    s = _store(server.port, m, wire)
    try:
        await s.put(rec("resp_s1"))
        await s.redis.script_flush()
        await asyncio.gather(s.put(rec("resp_s2", ancestors=["resp_s1"])), s.put(rec("resp_s3")))
        assert [r.id for r in await s.chain("resp_s2", "alice") or []] == ["resp_s1", "resp_s2"]
        assert await s.get("resp_s3", "alice") is not None
        assert m.get("switchboard_store_errors_total", op="put") == 0
        sizes = await s.redis.hgetall(s.prefix + "meta:sizes")
        assert len(sizes) == 3  # each record counted once
        assert await s.redis.script_exists(s._puts_sha.decode()) == [True]  # loaded again
    finally:
        await s.aclose()


_IDS = st.text(min_size=1, max_size=40)  # (any text: a client's item ids need not be ASCII)


@settings(max_examples=200, deadline=None)
@given(
    prefix=st.sampled_from(["", "sb:", "équipe:"]),
    puts=st.lists(
        st.tuples(_IDS, st.binary(max_size=300), st.lists(_IDS, max_size=4), st.lists(_IDS, max_size=4)),
        min_size=1,
        max_size=5,
    ),
)
def test_the_puts_command_written_in_one_pass_is_the_packed_one(prefix: str, puts: list[Any]) -> None:
    """``_puts_data`` (the puts' own connection) sends the arguments ``_puts_command`` gives
    redis-py's path, one RESP array; the time argument is the only one that may differ."""
    store = RedisStore(StoreCfg(backend="redis", url="redis://127.0.0.1:1/0", key_prefix=prefix))
    data = store._puts_data(puts)
    want = [bytes(a) for a in store._puts_command(puts)]
    reader = hiredis.Reader()
    reader.feed(data)
    got = reader.gets()
    assert reader.gets() is False  # (one command, nothing after it)
    assert isinstance(got, list) and len(got) == len(want)
    assert abs(float(got[7]) - float(want[7])) < 5.0
    got[7] = want[7]
    assert got == want
