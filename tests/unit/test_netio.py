"""app/netio.py: httpx over the loop's own transports — plain and TLS, big bodies both
ways (flow control), and every failure as the httpx error the anyio backend gave."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from collections.abc import Awaitable, Callable

import httpcore
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from app.netio import LoopBackend, LoopStream
from providers.upstream import StaleConnection, _ShardedTransport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def transport(**kw) -> httpx.AsyncHTTPTransport:
    t = httpx.AsyncHTTPTransport(trust_env=False, **kw)
    t._pool._network_backend = LoopBackend()
    return t


async def serve(handler: Handler, tls: ssl.SSLContext | None = None) -> tuple[asyncio.Server, int]:
    srv = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=tls)
    return srv, srv.sockets[0].getsockname()[1]


async def read_request(r: asyncio.StreamReader) -> bytes:
    head = await r.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return await r.readexactly(int(line.split(b":")[1]))
    return b""


def answer(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body)


async def echo_size(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    while True:
        try:
            body = await read_request(r)
        except (asyncio.IncompleteReadError, ConnectionError):
            break
        w.write(answer(str(len(body)).encode()))
        await w.drain()
    w.close()


async def test_plain_requests_keep_their_connection():
    srv, port = await serve(echo_size)
    t = transport()
    async with httpx.AsyncClient(transport=t) as c:
        for n in (0, 10, 3 * 1024 * 1024):  # the big body waits on the transport's flow control
            r = await c.post(f"http://127.0.0.1:{port}/", content=b"x" * n)
            assert r.status_code == 200 and r.text == str(n)
        assert len(t._pool.connections) == 1
        assert isinstance(t._pool.connections[0]._connection._network_stream, LoopStream)
    srv.close()


async def test_big_answer_comes_whole():
    body = bytes(range(256)) * 8192  # 2 MiB: reading pauses past the high-water mark
    srv, port = await serve(lambda r, w: _one(r, w, answer(body)))
    async with httpx.AsyncClient(transport=transport()) as c, c.stream("GET", f"http://127.0.0.1:{port}/") as r:
        got = b""
        async for chunk in r.aiter_raw():
            assert len(chunk) <= 65536
            got += chunk
            await asyncio.sleep(0)
    assert got == body
    srv.close()


async def _one(r: asyncio.StreamReader, w: asyncio.StreamWriter, data: bytes, close: bool = False) -> None:
    await read_request(r)
    w.write(data)
    await w.drain()
    if close:
        w.close()
    else:
        await asyncio.sleep(5)


async def test_idle_connection_closed_by_server_is_not_reused():
    async def once(r, w):
        await read_request(r)
        w.write(answer(b"ok"))
        await w.drain()
        w.close()  # keep-alive announced, then closed: the idle connection is readable (EOF)

    srv, port = await serve(once)
    t = transport()
    async with httpx.AsyncClient(transport=t) as c:
        for _ in range(3):
            assert (await c.get(f"http://127.0.0.1:{port}/")).text == "ok"
            await asyncio.sleep(0.05)
    srv.close()


async def test_read_timeout():
    srv, port = await serve(lambda r, w: _one(r, w, b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nab"))
    async with httpx.AsyncClient(transport=transport(), timeout=httpx.Timeout(1.0, read=0.2)) as c:
        with pytest.raises(httpx.ReadTimeout):
            await c.get(f"http://127.0.0.1:{port}/")
    srv.close()


async def test_peer_closes_mid_body():
    srv, port = await serve(lambda r, w: _one(r, w, b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nab", close=True))
    async with httpx.AsyncClient(transport=transport()) as c:
        with pytest.raises(httpx.RemoteProtocolError):
            await c.get(f"http://127.0.0.1:{port}/")
    srv.close()


async def test_connect_refused():
    srv, port = await serve(echo_size)
    srv.close()
    await srv.wait_closed()
    async with httpx.AsyncClient(transport=transport()) as c:
        with pytest.raises(httpx.ConnectError):
            await c.get(f"http://127.0.0.1:{port}/")


async def test_write_timeout_when_the_peer_never_reads():
    async def deaf(r, w):
        await asyncio.sleep(5)

    srv, port = await serve(deaf)
    async with httpx.AsyncClient(transport=transport(), timeout=httpx.Timeout(2.0, write=0.3)) as c:
        with pytest.raises(httpx.WriteTimeout):
            await c.post(f"http://127.0.0.1:{port}/", content=b"x" * (64 * 1024 * 1024))
    srv.close()


def _tls_pair(tmp_path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    (tmp_path / "c.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "k.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
    client = ssl.create_default_context(cafile=str(tmp_path / "c.pem"))
    return server, client


async def test_tls(tmp_path):
    server_ctx, client_ctx = _tls_pair(tmp_path)
    srv, port = await serve(echo_size, tls=server_ctx)
    t = transport(verify=client_ctx)
    async with httpx.AsyncClient(transport=t) as c:
        for n in (5, 2 * 1024 * 1024):
            r = await c.post(f"https://localhost:{port}/", content=b"y" * n)
            assert r.text == str(n)
        stream = t._pool.connections[0]._connection._network_stream
        assert stream.get_extra_info("ssl_object") is not None
    srv.close()


async def test_tls_with_an_untrusted_certificate_fails_to_connect(tmp_path):
    server_ctx, _ = _tls_pair(tmp_path)
    srv, port = await serve(echo_size, tls=server_ctx)
    async with httpx.AsyncClient(transport=transport(verify=ssl.create_default_context())) as c:
        with pytest.raises(httpx.ConnectError):
            await c.get(f"https://localhost:{port}/")
    srv.close()


class _Recorder(asyncio.Protocol):
    """A server that notes each piece of bytes as the socket delivered it."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.pieces.append(data)


async def _recorded_stream() -> tuple[asyncio.Server, _Recorder, LoopStream]:
    rec = _Recorder()
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(lambda: rec, "127.0.0.1", 0)
    stream = await LoopBackend().connect_tcp("127.0.0.1", srv.sockets[0].getsockname()[1], timeout=5)
    return srv, rec, stream  # type: ignore[return-value]


async def test_writes_are_held_until_the_next_read_and_go_out_as_one():
    srv, rec, stream = await _recorded_stream()
    await stream.write(b"POST / HTTP/1.1\r\ncontent-length: 4\r\n\r\n")
    await stream.write(b"body")
    await asyncio.sleep(0.05)
    assert rec.pieces == []  # nothing sent yet: the head waits for its body
    assert rec.transport is not None
    rec.transport.write(b"answer")
    assert await stream.read(1024, timeout=5) == b"answer"  # the read sent them first
    await asyncio.sleep(0.05)
    assert rec.pieces == [b"POST / HTTP/1.1\r\ncontent-length: 4\r\n\r\nbody"]
    await stream.aclose()
    srv.close()


async def test_a_write_past_the_cork_size_goes_out_at_once():
    srv, rec, stream = await _recorded_stream()
    big = b"x" * (64 * 1024)
    await stream.write(big)
    for _ in range(100):
        if sum(map(len, rec.pieces)) == len(big):
            break
        await asyncio.sleep(0.01)
    assert b"".join(rec.pieces) == big
    await stream.aclose()
    srv.close()


async def test_held_bytes_on_a_lost_connection_fail_the_read():
    srv, rec, stream = await _recorded_stream()
    await stream.write(b"GET / HTTP/1.1\r\n\r\n")
    assert rec.transport is not None
    rec.transport.abort()  # the peer resets before the request went out
    for _ in range(100):
        if stream._lost:
            break
        await asyncio.sleep(0.01)
    with pytest.raises(httpcore.ReadError, match="closed"):
        await stream.read(1024, timeout=1)
    srv.close()


async def _answered_once() -> tuple[asyncio.Server, _Recorder, LoopStream]:
    """A stream that carried one exchange: a kept-alive connection, reused next."""
    srv, rec, stream = await _recorded_stream()
    await stream.write(b"GET / HTTP/1.1\r\n\r\n")
    assert rec.transport is not None
    rec.transport.write(answer(b"1"))
    assert await stream.read(1024, timeout=5) == answer(b"1")
    return srv, rec, stream


async def _until_lost(stream: LoopStream) -> None:
    for _ in range(100):
        if stream._lost:
            return
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("how", ["close", "abort"])
async def test_a_reused_connection_closed_before_any_byte_of_the_answer_is_stale(how):
    srv, rec, stream = await _answered_once()
    await stream.write(b"GET /again HTTP/1.1\r\n\r\n")
    reading = asyncio.ensure_future(stream.read(1024, timeout=5))  # sends the request
    await _second_request_seen(rec)
    assert rec.transport is not None
    getattr(rec.transport, how)()
    with pytest.raises(StaleConnection):
        await reading
    srv.close()


async def test_a_reused_connection_lost_before_the_request_went_out_is_stale():
    srv, rec, stream = await _answered_once()
    assert rec.transport is not None
    rec.transport.abort()
    await _until_lost(stream)
    with pytest.raises(StaleConnection):  # found by the write
        await stream.write(b"GET /again HTTP/1.1\r\n\r\n")
    srv.close()


async def test_held_bytes_of_a_reused_connection_lost_meanwhile_are_stale():
    srv, rec, stream = await _answered_once()
    await stream.write(b"GET /again HTTP/1.1\r\n\r\n")  # held until the read
    assert rec.transport is not None
    rec.transport.abort()
    await _until_lost(stream)
    with pytest.raises(StaleConnection):  # found by the read that sends them
        await stream.read(1024, timeout=1)
    srv.close()


async def test_a_reused_connection_closed_after_a_byte_of_the_answer_is_not_stale():
    srv, rec, stream = await _answered_once()
    await stream.write(b"GET /again HTTP/1.1\r\n\r\n")
    reading = asyncio.ensure_future(stream.read(1024, timeout=5))
    await _second_request_seen(rec)
    assert rec.transport is not None
    rec.transport.write(b"HTTP/1.1 2")
    rec.transport.close()
    assert await reading == b"HTTP/1.1 2"
    assert await stream.read(1024, timeout=5) == b""  # EOF, as on any connection
    srv.close()


async def _second_request_seen(rec: _Recorder) -> None:
    for _ in range(100):
        if len(rec.pieces) == 2:
            return
        await asyncio.sleep(0.01)


async def test_a_stale_tls_connection_is_sent_again(tmp_path):
    server_ctx, client_ctx = _tls_pair(tmp_path)
    seen = []

    async def first_conn_drops_its_second(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        conn = len(seen)
        seen.append(0)
        try:
            while True:
                body = await read_request(r)
                seen[conn] += 1
                if (conn, seen[conn]) == (0, 2):
                    break
                w.write(answer(b"%d:%d" % (conn, len(body))))
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        w.close()

    srv, port = await serve(first_conn_drops_its_second, tls=server_ctx)
    t = _ShardedTransport(2, LoopBackend(), tls=client_ctx)
    async with httpx.AsyncClient(transport=t) as c:
        assert (await c.post(f"https://localhost:{port}/", content=b"a")).text == "0:1"
        assert (await c.post(f"https://localhost:{port}/", content=b"ab")).text == "1:2"
    srv.close()
    assert seen == [2, 1]


# -- a read's deadline: one timer per connection, checked when it fires ----------------------


async def _trickle(r: asyncio.StreamReader, w: asyncio.StreamWriter, gaps: list[float], then_stall: float) -> None:
    """A chunked answer whose chunks come ``gaps`` apart, then (``then_stall``) nothing for
    that long before the end."""
    await read_request(r)
    w.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    await w.drain()
    for gap in gaps:
        await asyncio.sleep(gap)
        w.write(b"1\r\nx\r\n")
        await w.drain()
    await asyncio.sleep(then_stall)
    w.write(b"0\r\n\r\n")
    await w.drain()
    w.close()


async def test_a_stream_longer_than_its_read_timeout_goes_on_while_bytes_come() -> None:
    """Chunks 0.05 s apart for 0.6 s under a 0.2 s read timeout: each wait is short, the
    stream long; the timer armed by the first wait is moved on, never fires a timeout."""
    srv, port = await serve(lambda r, w: _trickle(r, w, [0.05] * 12, 0.0))
    async with httpx.AsyncClient(transport=transport(), timeout=httpx.Timeout(1.0, read=0.2)) as c:
        got = await c.get(f"http://127.0.0.1:{port}/")
    assert got.text == "x" * 12
    srv.close()


async def test_a_stall_after_a_trickle_times_out_on_its_own_deadline() -> None:
    """Chunks 0.05 s apart, then 1 s of nothing: ReadTimeout, ~0.2 s after the last byte
    (not at a deadline an earlier wait set, not never)."""
    srv, port = await serve(lambda r, w: _trickle(r, w, [0.05] * 6, 1.0))
    loop = asyncio.get_running_loop()
    async with httpx.AsyncClient(transport=transport(), timeout=httpx.Timeout(1.0, read=0.2)) as c:
        async with c.stream("GET", f"http://127.0.0.1:{port}/") as resp:
            got = b""
            last = loop.time()
            with pytest.raises(httpx.ReadTimeout):
                async for part in resp.aiter_raw():
                    got += part
                    last = loop.time()
            waited = loop.time() - last
    assert got == b"x" * 6
    assert 0.15 <= waited < 0.6
    srv.close()


async def test_reads_that_wait_arm_a_loop_timer_once_not_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    srv, port = await serve(lambda r, w: _trickle(r, w, [0.01] * 20, 0.0))
    loop = asyncio.get_running_loop()
    armed: list[float] = []
    call_at = loop.call_at

    def counting(when: float, *a: object, **kw: object) -> asyncio.TimerHandle:
        if a and getattr(a[0], "__func__", None) is LoopStream._read_deadline:  # (the server's sleeps too)
            armed.append(when)
        return call_at(when, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(loop, "call_at", counting)
    async with httpx.AsyncClient(transport=transport(), timeout=httpx.Timeout(1.0, read=5.0)) as c:
        got = await c.get(f"http://127.0.0.1:{port}/")
    assert got.text == "x" * 20
    assert 1 <= len(armed) <= 2  # the head's wait, then every wait within the same deadline
    srv.close()


async def test_the_read_timer_goes_with_the_connection() -> None:
    """A closed connection leaves no timer on the loop (nor the stream held by one)."""
    srv, port = await serve(lambda r, w: _trickle(r, w, [0.01], 0.0))
    stream = await LoopBackend().connect_tcp("127.0.0.1", port, timeout=5)
    await stream.write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
    assert await stream.read(65536, timeout=30)  # the head: a wait armed the timer
    assert isinstance(stream, LoopStream) and stream._read_timer is not None
    await stream.aclose()
    assert stream._read_timer is None
    srv.close()
