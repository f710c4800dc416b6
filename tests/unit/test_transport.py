"""providers/transport.py, the upstream client's own transport, against real servers on
loopback.  The stale-connection resend: a kept-alive upstream connection closed as a request
goes out on it (the upstream's idle timeout crossing the request on the wire) is sent again on
another connection, at once, and the caller sees its answer; every other failure is the
caller's (a connection's first request, an answer cut after its first byte).  Then the pool
(reuse, idle expiry, limits), the body (framings, one piece per read, pausing), and the
failures, each as httpx's own transport raises it."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from providers import transport as fast
from providers.config import TimeoutsCfg
from providers.transport import FastTransport
from providers.upstream import Router
from tests.upstream_io import read_request

# what the server does with a request: answer it, close (FIN) or reset (RST) without a byte
# of answer (RESET_AT_HEAD: as soon as the head is read, the body left unread), or close
# after the first bytes of the status line
ANSWER, CLOSE, RESET, RESET_AT_HEAD, CUT = "answer", "close", "reset", "reset at head", "cut"


class _Upstream:
    def __init__(self, policy: Callable[[int, int], str]) -> None:
        self.policy = policy  # (connection number, request number on it) → what to do
        self.connections = 0
        self.requests = 0  # requests read, answered or not

    async def handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        conn = self.connections
        self.connections += 1
        n = 0
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                self.requests += 1
                what = self.policy(conn, n)
                n += 1
                if what != RESET_AT_HEAD:
                    size = next(
                        (
                            int(x.split(b":")[1])
                            for x in head.split(b"\r\n")
                            if x.lower().startswith(b"content-length:")
                        ),
                        0,
                    )
                    if b"transfer-encoding: chunked" in head.lower():
                        await r.readuntil(b"0\r\n\r\n")
                    else:
                        await r.readexactly(size)
                if what in (RESET, RESET_AT_HEAD):
                    sock = w.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    w.transport.abort()
                    return
                if what == CLOSE:
                    return
                if what == CUT:
                    w.write(b"HTTP/1.1 2")
                    await w.drain()
                    return
                w.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%d" % (len(str(conn)), conn))
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            w.close()


async def _serve(policy: Callable[[int, int], str]) -> tuple[asyncio.Server, _Upstream, str]:
    up = _Upstream(policy)
    srv = await asyncio.start_server(up.handle, "127.0.0.1", 0)
    return srv, up, f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/"


def _second_request_dropped(how: str) -> Callable[[int, int], str]:
    """The first connection answers its first request and drops the second; others answer."""
    return lambda conn, n: how if (conn, n) == (0, 1) else ANSWER


@pytest.mark.parametrize("how", [CLOSE, RESET])
async def test_a_request_crossing_the_upstreams_idle_close_is_sent_again(how: str) -> None:
    srv, up, url = await _serve(_second_request_dropped(how))
    t = FastTransport()
    async with httpx.AsyncClient(transport=t) as c:
        assert (await c.post(url, content=b"a")).text == "0"
        assert (await c.post(url, content=b"ab")).text == "1"  # sent again, on a new connection
        assert (await c.post(url, content=b"abc")).text == "1"  # which is kept alive
    srv.close()
    assert (up.connections, up.requests) == (2, 4)


async def test_a_large_body_crossing_the_idle_close_is_sent_again() -> None:
    """A body written apart from its head (past 64 KiB): the reset is found by a write."""
    srv, up, url = await _serve(_second_request_dropped(RESET_AT_HEAD))
    t = FastTransport()
    body = b"x" * (1024 * 1024)
    async with httpx.AsyncClient(transport=t) as c:
        assert (await c.post(url, content=b"a")).text == "0"
        assert (await c.post(url, content=body)).text == "1"
    srv.close()
    assert (up.connections, up.requests) == (2, 3)


async def test_every_kept_alive_connection_closed_at_once() -> None:
    """An upstream closing its idle connections all at the same time: the request tries each
    kept-alive connection of its pool in turn, then a new one, and is answered."""
    held = 3
    srv, up, url = await _serve(lambda conn, n: CLOSE if n == 1 else ANSWER)
    t = FastTransport()  # one pool: it keeps all three
    async with httpx.AsyncClient(transport=t) as c:
        tasks = [asyncio.create_task(c.post(url, content=b"x")) for _ in range(held)]
        assert sorted(r.text for r in await asyncio.gather(*tasks)) == ["0", "1", "2"]
        assert len(t._idle[(b"http", b"127.0.0.1", srv.sockets[0].getsockname()[1])]) == held
        assert (await c.post(url, content=b"y")).text == str(held)
    srv.close()
    assert (up.connections, up.requests) == (held + 1, 2 * held + 1)


async def test_an_upstream_that_never_keeps_a_connection_alive() -> None:
    """An upstream that drops every request on a kept-alive connection and answers the first
    one of each new connection: one answer per request, one resend each."""
    srv, up, url = await _serve(lambda conn, n: ANSWER if n == 0 else CLOSE)
    t = FastTransport()
    async with httpx.AsyncClient(transport=t) as c:
        for i in range(4):
            assert (await c.post(url, content=b"a")).text == str(i)
    srv.close()
    assert (up.connections, up.requests) == (4, 7)


async def test_a_connections_first_request_is_not_sent_again() -> None:
    """Nothing proves that an upstream closing a new connection without answering did not
    take the request: the caller gets the failure."""
    srv, up, url = await _serve(lambda conn, n: CLOSE)
    t = FastTransport()
    async with httpx.AsyncClient(transport=t) as c:
        with pytest.raises(httpx.RemoteProtocolError, match="closed the connection"):
            await c.post(url, content=b"a")
    srv.close()
    assert (up.connections, up.requests) == (1, 1)


async def test_a_reused_connections_answer_cut_after_its_first_byte_is_not_sent_again() -> None:
    """The upstream took a request it began to answer: the caller's failure."""
    srv, up, url = await _serve(_second_request_dropped(CUT))
    t = FastTransport()
    async with httpx.AsyncClient(transport=t) as c:
        assert (await c.post(url, content=b"a")).text == "0"
        with pytest.raises(httpx.RemoteProtocolError):
            await c.post(url, content=b"ab")
        assert (await c.post(url, content=b"abc")).text == "1"  # the next one on a new connection
    srv.close()
    assert (up.connections, up.requests) == (2, 3)


async def test_a_streamed_request_body_is_read_once_and_can_be_sent_again() -> None:
    """The transport reads a request's body whole before sending it (a proxy's requests are
    in memory anyway): a streamed one can be sent again too."""
    srv, up, url = await _serve(_second_request_dropped(CLOSE))
    t = FastTransport()

    async def body() -> AsyncIterator[bytes]:
        yield b"ab"

    async with httpx.AsyncClient(transport=t) as c:
        assert (await c.post(url, content=b"a")).text == "0"
        assert (await c.post(url, content=body())).text == "1"
    srv.close()
    assert (up.connections, up.requests) == (2, 3)


async def test_past_its_resends_a_request_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The resends are bounded (``_STALE_RESENDS``): past them the caller gets the failure."""
    monkeypatch.setattr(fast, "_STALE_RESENDS", 1)
    srv, up, url = await _serve(lambda conn, n: CLOSE if n == 1 else ANSWER)
    t = FastTransport()
    async with httpx.AsyncClient(transport=t) as c:
        tasks = [asyncio.create_task(c.post(url, content=b"x")) for _ in range(3)]
        assert sorted(r.text for r in await asyncio.gather(*tasks)) == ["0", "1", "2"]
        with pytest.raises(httpx.RemoteProtocolError, match="kept-alive"):
            await c.post(url, content=b"y")
    srv.close()
    assert (up.connections, up.requests) == (3, 5)


# -- the pool --------------------------------------------------------------------------------


async def _server(handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]) -> tuple[asyncio.Server, str]:
    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    return srv, f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/"


def test_pools_keep_idle_connections_90_s_by_default() -> None:
    # reqwest, the HTTP client Codex is built on, keeps an idle connection 90 s by default: the
    # same pause between two turns finds the upstream connection open through the proxy as direct
    assert TimeoutsCfg().pool_idle == 90.0
    assert FastTransport().keepalive_expiry == 90.0


def _router(transport: httpx.AsyncBaseTransport | None = None, kind: str = "fast") -> Router:
    from app.config import parse_config

    base = "http://127.0.0.1:9/v1"
    cfg = parse_config(
        {
            "server": {"upstream_transport": kind},
            "providers": [
                {"name": "hosted", "base_url": base},
                {"name": "vllm-a", "base_url": base, "timeouts": {"pool_idle": 4}},
                {"name": "vllm-b", "base_url": base, "timeouts": {"pool_idle": 4.0}},
                {"name": "local", "profile": "demo"},
            ],
            "models": [{"name": n, "provider": n} for n in ("hosted", "vllm-a", "vllm-b", "local")],
        }
    )
    return Router.build(cfg, transport=transport)


async def test_providers_share_the_transport_of_their_pool_idle() -> None:
    r = _router()
    hosted, a, b, demo = (r.routes[n].provider for n in ("hosted", "vllm-a", "vllm-b", "local"))
    assert a.transport is b.transport and a.client is b.client
    assert hosted.transport is not a.transport and hosted.client is not a.client
    assert isinstance(hosted.transport, FastTransport) and isinstance(a.transport, FastTransport)
    assert hosted.transport.keepalive_expiry == 90.0 and a.transport.keepalive_expiry == 4.0
    assert demo.transport is not hosted.transport
    assert len(r.clients) == 3  # the demo's, and one per pool_idle value: all closed by aclose()
    await r.aclose()
    # httpx's own transport, selected by config
    r = _router(kind="httpx")
    assert isinstance(r.routes["hosted"].provider.transport, httpx.AsyncHTTPTransport)
    await r.aclose()
    given = httpx.AsyncHTTPTransport()
    r = _router(given)
    assert {r.routes[n].provider.transport for n in ("hosted", "vllm-a", "vllm-b")} == {given}
    await r.aclose()


async def test_requests_one_at_a_time_keep_one_connection_and_concurrent_ones_more() -> None:
    srv, up, url = await _serve(lambda conn, n: ANSWER)
    t = FastTransport()
    async with httpx.AsyncClient(transport=t) as c:
        for _ in range(5):
            assert (await c.post(url, content=b"x")).text == "0"
        got = await asyncio.gather(*(c.post(url, content=b"x") for _ in range(3)))
        assert sorted(r.text for r in got) == ["0", "1", "2"]
    srv.close()
    assert up.connections == 3


async def test_a_connection_the_upstream_closed_while_idle_is_not_reused() -> None:
    """An upstream that closes idle connections sooner than pool_idle (uvicorn under vLLM:
    5 s): the connection leaves the pool when it closes; the next request opens another."""
    connections = 0

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await r.readuntil(b"\r\n\r\n")
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await w.drain()
        await asyncio.sleep(0.05)  # its keep-alive timeout
        w.close()

    srv, url = await _server(handle)
    t = FastTransport()
    async with httpx.AsyncClient(transport=t) as c:
        for _ in range(3):
            assert (await c.get(url)).text == "ok"
            await asyncio.sleep(0.2)
            assert not any(t._idle.values())  # out of the idle list as it closed
    srv.close()
    assert connections == 3


async def test_idle_expiry_and_the_keepalive_cap() -> None:
    srv, up, url = await _serve(lambda conn, n: ANSWER)
    t = FastTransport(keepalive_expiry=0.1, max_keepalive=1)
    async with httpx.AsyncClient(transport=t) as c:
        await asyncio.gather(*(c.post(url, content=b"x") for _ in range(2)))  # two connections
        assert sum(len(v) for v in t._idle.values()) == 1  # one kept
        await asyncio.sleep(0.2)
        assert (await c.post(url, content=b"x")).text == "2"  # the kept one expired: a new one
    srv.close()
    t0 = FastTransport(keepalive_expiry=0)
    srv, up, url = await _serve(lambda conn, n: ANSWER)
    async with httpx.AsyncClient(transport=t0) as c:
        for i in range(2):
            assert (await c.post(url, content=b"x")).text == str(i)  # never reused
    srv.close()


async def test_past_max_connections_a_request_waits_for_a_slot_then_times_out() -> None:
    gate = asyncio.Event()

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        await gate.wait()
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
        await w.drain()
        w.close()

    srv, url = await _server(handle)
    t = FastTransport(max_connections=1)
    async with httpx.AsyncClient(transport=t, timeout=httpx.Timeout(5, pool=0.2)) as c:
        first = asyncio.create_task(c.post(url, content=b"x"))
        await asyncio.sleep(0.05)
        with pytest.raises(httpx.PoolTimeout):
            await c.post(url, content=b"y")
        second = asyncio.create_task(c.post(url, content=b"z"))  # waits for the first's slot
        await asyncio.sleep(0.05)
        gate.set()
        assert (await first).text == "ok" and (await second).text == "ok"
    srv.close()


# -- the body --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\nhello world",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nhello world",  # to the connection's end
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\nhello world",
    ],
    ids=["length", "chunked", "until-close", "interim"],
)
async def test_framings(answer: bytes) -> None:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(answer)
        await w.drain()
        if b"connection: close" in answer:
            w.close()

    srv, url = await _server(handle)
    async with httpx.AsyncClient(transport=FastTransport()) as c:
        r = await c.get(url)
        assert r.status_code == 200 and r.text == "hello world"
    srv.close()


async def test_no_body_answers() -> None:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            head, _ = await read_request(r)
            w.write(
                b"HTTP/1.1 204 No Content\r\n\r\n"
                if b"GET" in head
                else b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"
            )
            await w.drain()

    srv, url = await _server(handle)
    async with httpx.AsyncClient(transport=FastTransport()) as c:
        assert (await c.get(url)).status_code == 204
        assert (await c.head(url)).headers["content-length"] == "5"
        assert (await c.get(url)).status_code == 204  # the same connection, still in step
    srv.close()


async def test_a_burst_is_one_piece_and_a_slow_reader_pauses_the_socket() -> None:
    events = b"".join(b"data: %d\n\n" % i for i in range(200))
    big = b"x" * (fast._HIGH_WATER * 4)

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            head, _ = await read_request(r)
            body = big if b"/big" in head else events
            w.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
            await w.drain()

    srv, url = await _server(handle)
    async with httpx.AsyncClient(transport=FastTransport()) as c:
        async with c.stream("GET", url) as r:
            await asyncio.sleep(0.05)  # all of it arrived meanwhile
            pieces = [p async for p in r.aiter_raw()]
        assert pieces == [events]
        async with c.stream("GET", url + "big") as r:
            await asyncio.sleep(0.1)
            got = 0
            async for p in r.aiter_raw():
                assert len(p) <= fast._HIGH_WATER + 65536 * 4
                got += len(p)
        assert got == len(big)
    srv.close()


# -- failures, as httpx raises them ------------------------------------------------------------


async def test_refused_is_a_connect_error() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    async with httpx.AsyncClient(transport=FastTransport()) as c:
        with pytest.raises(httpx.ConnectError):
            await c.get(f"http://127.0.0.1:{port}/")


async def test_silence_is_a_read_timeout_in_the_head_and_in_the_body() -> None:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        head, _ = await read_request(r)
        if b"/body" in head:
            w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
            await w.drain()
        await asyncio.sleep(5)

    srv, url = await _server(handle)
    async with httpx.AsyncClient(transport=FastTransport(), timeout=httpx.Timeout(5, read=0.1)) as c:
        with pytest.raises(httpx.ReadTimeout):
            await c.get(url)
        with pytest.raises(httpx.ReadTimeout):
            await c.get(url + "body")
    srv.close()


@pytest.mark.parametrize(
    "answer,error",
    [
        (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc", httpx.RemoteProtocolError),  # cut
        (b"NOT HTTP\r\n\r\n", httpx.RemoteProtocolError),
        (b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n", httpx.RemoteProtocolError),
    ],
    ids=["cut-body", "garbage-head", "bad-length"],
)
async def test_broken_answers(answer: bytes, error: type[Exception]) -> None:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(answer)
        await w.drain()
        w.close()

    srv, url = await _server(handle)
    async with httpx.AsyncClient(transport=FastTransport()) as c:
        with pytest.raises(error):
            await c.get(url)
    srv.close()


async def test_a_cancelled_reader_closes_its_connection() -> None:
    closed = asyncio.Event()

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n")
        await w.drain()
        try:
            await r.read()  # until the proxy side closes
        finally:
            closed.set()

    srv, url = await _server(handle)
    t = FastTransport()
    async with httpx.AsyncClient(transport=t) as c:

        async def reader() -> None:
            async with c.stream("GET", url) as r:
                async for _ in r.aiter_raw():
                    pass

        task = asyncio.create_task(reader())
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(closed.wait(), 2)
        assert not any(t._idle.values())
    srv.close()


async def test_bytes_past_the_end_of_an_answer_are_not_taken_for_the_next_one() -> None:
    """An upstream that writes more than its answer's framing says: the answer is read as
    framed, and the connection is not reused (the extra bytes are not the next answer)."""
    connections = 0

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            await read_request(r)
            w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nstale")
            await w.drain()

    srv, url = await _server(handle)
    async with httpx.AsyncClient(transport=FastTransport()) as c:
        assert (await c.get(url)).text == "ok"
        await asyncio.sleep(0.05)
        assert (await c.get(url)).text == "ok"
    srv.close()
    assert connections == 2


# -- TLS -------------------------------------------------------------------------------------


def _self_signed(tmp: Any) -> tuple[str, str]:
    """A certificate for 127.0.0.1 signed by itself, and its key: (cert path, key path)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(cert_path), str(key_path)


async def test_the_tls_context_is_made_at_the_first_https_connection_and_verifies(tmp_path: Any) -> None:
    import ssl

    fast.default_tls.cache_clear()
    r = _router()  # (plain-http providers: no CA bundle loaded)
    pools = {rt.provider.transport for rt in r.routes.values() if isinstance(rt.provider.transport, FastTransport)}
    assert pools and all(t._tls is None for t in pools)
    assert fast.default_tls.cache_info().currsize == 0
    await r.aclose()

    cert, key = _self_signed(tmp_path)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    srv = await asyncio.start_server(_Upstream(lambda c, n: ANSWER).handle, "127.0.0.1", 0, ssl=server_ctx)
    url = f"https://127.0.0.1:{srv.sockets[0].getsockname()[1]}/"
    try:
        # the default context: the CA bundle, which does not know this certificate
        async with httpx.AsyncClient(transport=FastTransport()) as client:
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await client.get(url)
        assert fast.default_tls.cache_info().currsize == 1
        assert fast.default_tls() is fast.default_tls()  # (one for every pool)
        # a context that trusts it: the answer
        trusting = ssl.create_default_context(cafile=cert)
        async with httpx.AsyncClient(transport=FastTransport(tls=trusting)) as client:
            assert (await client.get(url)).status_code == 200
    finally:
        srv.close()
        await srv.wait_closed()
