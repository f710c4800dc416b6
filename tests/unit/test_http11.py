"""app.http11: an upstream exchange run with h11's readers and writers, without its state
machine, gives what httpcore's own HTTP/1.1 connection gives.  Each case runs both classes
on the app's network stream against the same scripted upstream on loopback (the answer in
pieces, with pauses) and compares what the client saw (status, head, body, error class and
message, the connection idle or closed after) and what the upstream received, byte for
byte; then a second request on the connection when it stayed idle."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import h11
import httpcore
import httpcore._async.connection_pool as connection_pool
import pytest
from h11._writers import write_request
from httpcore._async.http11 import AsyncHTTP11Connection

import app.pipeline  # noqa: F401  (the app's httpcore and h11 replacements, installed on import)
from app import http11
from app.http11 import Http11Connection, PooledConnection, ResponseBody
from app.netio import LoopBackend

_ORIGINAL_CONNECTION = httpcore._async.connection.AsyncHTTPConnection  # what the app's pools replace
OK = b"HTTP/1.1 200 OK\r\n"
CHUNKED = OK + b"transfer-encoding: chunked\r\n\r\n"
ANSWER = OK + b"content-length: 2\r\n\r\nok"

# name: the answer to each request, in pieces written with a pause between them;
# "close" closes the connection, "wait" keeps it silent past the read timeout
SCRIPTS: dict[str, list[Any]] = {
    "length": [OK + b"content-length: 11\r\nx-a: 1\r\n\r\nhel", b"lo w", b"orld"],
    "chunked": [CHUNKED + b"3\r\nabc\r\n", b"2\r\nde\r\n", b"1\r\nf\r\n0\r\n\r\n"],
    "chunked-trailer": [CHUNKED + b"3\r\nabc\r\n0\r\nx-t: 1\r\n\r\n"],
    "chunked-cut": [CHUNKED + b"3\r\nabc\r\n", b"5\r\nde", "close"],
    "chunked-cut-in-size-line": [CHUNKED + b"3\r\nabc\r\n", b"5", "close"],
    "length-cut": [OK + b"content-length: 20\r\n\r\nshort", "close"],
    "bad-chunk-header": [CHUNKED + b"3\r\nabc\r\n", b"zz\r\nxx\r\n"],
    "silent": [CHUNKED + b"3\r\nabc\r\n", "wait"],
    "silent-head": ["wait"],
    "eof-before-head": ["close"],
    "eof-inside-head": [OK + b"content-le", "close"],
    "bad-status-line": [b"HTTX/1.1 200 OK\r\n\r\n"],
    "bad-header-line": [OK + b"no colon here\r\n\r\n"],
    "obs-fold": [OK + b"content-length: 2\r\nx-a: 1\r\n  more\r\n\r\nok"],
    "two-lengths": [OK + b"content-length: 2\r\ncontent-length: 3\r\n\r\nok"],
    "no-framing": [OK + b"x-a: 1\r\n\r\nuntil ", b"the end", "close"],
    "http10": [b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok"],
    "connection-close": [OK + b"content-length: 2\r\nconnection: close\r\n\r\nok"],
    "no-content": [b"HTTP/1.1 204 No Content\r\n\r\n"],
    "informational": [
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n",
        ANSWER,
    ],
    "switching-unasked": [b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n"],
    "head-too-long": [OK + b"x-a: " + b"a" * 120_000],
    "error-status": [b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\nretry-after: 1\r\n\r\nbusy"],
}


class Upstream:
    """Answers each request on a connection with the script; keeps every byte received."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.received = bytearray()

    async def handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        reading = asyncio.ensure_future(self._keep(r))
        try:
            answered = 0
            while True:
                while self.received.count(b"\r\n\r\n") <= answered:
                    if reading.done():
                        return
                    await asyncio.sleep(0.005)
                await asyncio.sleep(0.02)  # the rest of a body written in pieces
                answered = self.received.count(b"\r\n\r\n")
                for piece in self.script:
                    if piece == "close":
                        return
                    if piece == "wait":
                        await asyncio.sleep(0.6)  # past the client's read timeout (0.4 s)
                        return
                    w.write(piece)
                    await w.drain()
                    await asyncio.sleep(0.01)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            w.close()
            reading.cancel()

    async def _keep(self, r: asyncio.StreamReader) -> None:
        while data := await r.read(65536):
            self.received += data


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for p in parts:
        await asyncio.sleep(0.005)
        yield p


class _Parts:
    """A body in hand in several parts, iterable both ways (as httpx's ``ByteStream``)."""

    def __init__(self, *parts: bytes) -> None:
        self.parts = parts

    def __iter__(self) -> Any:
        return iter(self.parts)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for p in self.parts:
            yield p


def _request(port: int, method: bytes = b"POST", body: Any = b"{}", headers: list[Any] | None = None) -> Any:
    if headers is None:
        headers = [(b"Host", b"127.0.0.1"), (b"Content-Type", b"application/json")]
        if isinstance(body, bytes):
            headers.append((b"Content-Length", str(len(body)).encode()))
        else:
            headers.append((b"Transfer-Encoding", b"chunked"))
    return httpcore.Request(
        method,
        httpcore.URL(scheme=b"http", host=b"127.0.0.1", port=port, target=b"/v1/chat/completions"),
        headers=headers,
        content=body,
        extensions={"timeout": {"read": 0.4, "write": 1.0}},
    )


async def _run(cls: type, script: list[Any], requests: list[Any]) -> dict[str, Any]:
    """What the client saw of each request (stopping after the first the connection could
    not take) and what the upstream received."""
    up = Upstream(script)
    srv = await asyncio.start_server(up.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    stream = await LoopBackend().connect_tcp("127.0.0.1", port, timeout=2)
    conn = cls(httpcore.Origin(b"http", b"127.0.0.1", port), stream, keepalive_expiry=5.0)
    seen: list[Any] = []
    try:
        for i, make in enumerate(requests):
            req = make(port, i)
            try:
                resp = await conn.handle_async_request(req)
            except Exception as e:
                seen.append(("request failed", type(e).__name__, str(e), conn.is_idle(), conn.is_closed()))
                break
            body: list[bytes] = []
            error = None
            try:
                async for chunk in resp.stream:
                    body.append(chunk)
            except Exception as e:
                error = (type(e).__name__, str(e))
            await resp.stream.aclose()
            ext = resp.extensions
            seen.append(
                (resp.status, resp.headers, ext["http_version"], ext["reason_phrase"], b"".join(body), error)
                + (conn.is_idle(), conn.is_closed(), conn.is_available())
            )
            if not conn.is_idle():
                break
    finally:
        await conn.aclose()
        srv.close()
        await srv.wait_closed()
    await asyncio.sleep(0.03)
    return {"seen": seen, "received": bytes(up.received)}


def _twice(port: int, i: int) -> Any:
    return _request(port, body=b"{}" if i == 0 else b'{"a":1}')


# where this class closes a connection that h11 and httpcore leave idle (app/http11.py)
KEPT_BY_HTTPCORE = {
    "bytes-past-the-end": [ANSWER + b"HTTP/1.1 200 OK\r\n"],
    "no-framing": SCRIPTS["no-framing"],
}
WHOLE = ("length", "chunked", "chunked-trailer", "no-content", "informational", "error-status", "obs-fold")


@pytest.mark.parametrize("name", sorted(SCRIPTS))
async def test_an_answer_as_httpcore_reads_it(name: str) -> None:
    new = await _run(Http11Connection, SCRIPTS[name], [_twice, _twice])
    old = await _run(AsyncHTTP11Connection, SCRIPTS[name], [_twice, _twice])
    if name in KEPT_BY_HTTPCORE:  # the same answer (the connection after it: below)
        assert new["seen"][0][:6] == old["seen"][0][:6]
        return
    assert new == old
    first = new["seen"][0]
    if name in WHOLE:
        assert len(new["seen"]) == 2 and first[5] is None and first[6]  # whole: idle, then reused
        assert new["received"].count(b"POST /v1/chat/completions HTTP/1.1\r\n") == 2
    else:
        assert len(new["seen"]) == 1
        if first[0] == "request failed":
            assert first[3:] == (False, True)  # closed
        else:  # whole but not to be kept (the upstream said so), or the body failed: closed
            assert (first[5] is None) == (name in ("connection-close", "http10")) and first[6:8] == (False, True)


@pytest.mark.parametrize("name", sorted(KEPT_BY_HTTPCORE))
async def test_a_connection_h11_would_reuse_is_closed(name: str) -> None:
    old = await _run(AsyncHTTP11Connection, KEPT_BY_HTTPCORE[name], [_twice, _twice])
    assert len(old["seen"]) == 2 and old["seen"][1][0] == "request failed"
    got = await _run(Http11Connection, KEPT_BY_HTTPCORE[name], [_twice, _twice])
    assert len(got["seen"]) == 1
    status, _, _, _, body, error, idle, closed, _ = got["seen"][0]
    assert (status, error, idle, closed) == (200, None, False, True)
    assert body in (b"ok", b"until the end")


def _with(*headers: tuple[bytes, bytes], method: bytes = b"POST") -> Any:
    """A request with these headers; the second one's body is longer (the same head but
    for a Content-Length that says so)."""

    def make(port: int, i: int) -> Any:
        body = b"{}" if i == 0 else b'{"a":1}'
        hs = [(n, v(len(body)) if callable(v) else v) for n, v in headers]
        return _request(port, method, body, hs)

    return make


HOST = (b"Host", b"127.0.0.1")
LEN = (b"Content-Length", lambda n: b"%d" % n)
LEN_3 = (b"Content-Length", b"3")
REQUESTS: dict[str, Any] = {
    "head": lambda port, i: _request(port, b"HEAD", b"", [HOST]),  # (the answer: no body)
    "get-no-body": lambda port, i: _request(port, b"GET", b"", [HOST, (b"Accept", b"*/*")]),
    "streamed-body": lambda port, i: _request(port, body=_chunks(b'{"a":', b"1}" if i == 0 else b"22}")),
    "usual": _with(HOST, (b"Accept", b"*/*"), (b"Authorization", b"Bearer sk-1"), LEN, (b"User-Agent", b"t")),
    "length-first": _with(LEN, (b"Content-Type", b"application/json"), HOST),
    "length-lower-case": _with(HOST, (b"content-length", lambda n: b"%d" % n)),
    "length-zero-padded": _with(HOST, (b"Content-Length", lambda n: b"%04d" % n)),
    "length-with-space": _with(HOST, (b"Content-Length", lambda n: b"%d " % n)),
    "length-listed": _with(HOST, (b"Content-Length", lambda n: b"%d, %d" % (n, n))),
    "length-twice": _with(HOST, LEN, LEN),
    "length-twice-differing": _with(HOST, (b"Content-Length", b"2"), (b"Content-Length", b"3")),
    "length-not-digits": _with(HOST, (b"Content-Length", b"2x")),
    "length-and-chunked": _with(HOST, LEN, (b"Transfer-Encoding", b"chunked")),
    "header-with-crlf": _with(HOST, LEN, (b"X-A", b"1\r\nX-B: 2")),
    "name-not-a-token": _with(HOST, LEN, (b"X A", b"1")),
    "no-host": _with(LEN),
    "two-hosts": _with(HOST, HOST, LEN),
    "bad-target-method": _with(HOST, LEN, method=b"PO ST"),
    "too-little-body": lambda port, i: _request(port, body=b"{}", headers=[HOST, (b"Content-Length", b"5")]),
    "too-much-body": lambda port, i: _request(port, body=b"{}", headers=[HOST, (b"Content-Length", b"1")]),
    "body-without-framing": lambda port, i: _request(port, body=b"{}", headers=[HOST]),
    # a body in hand, in parts (an iterable), of its Content-Length, or not
    "body-in-parts": lambda port, i: _request(
        port, body=_Parts(b'{"a":', b"1}" if i == 0 else b"22}"), headers=[HOST, (b"Content-Length", b"%d" % (7 + i))]
    ),
    "body-in-parts-too-little": lambda port, i: _request(port, body=_Parts(b"{", b"}"), headers=[HOST, LEN_3]),
    "body-in-parts-too-much": lambda port, i: _request(port, body=_Parts(b"{", b"", b"}}}"), headers=[HOST, LEN_3]),
    "length-zero": lambda port, i: _request(port, body=b"", headers=[HOST, (b"Content-Length", b"0")]),
    "asks-to-close": _with(HOST, LEN, (b"Connection", b"close")),
    "asks-to-upgrade": _with(HOST, LEN, (b"Connection", b"upgrade"), (b"Upgrade", b"x")),
}
FAILING = (
    "length-with-space",
    "length-not-digits",
    "length-twice-differing",
    "header-with-crlf",
    "name-not-a-token",
    "no-host",
    "two-hosts",
    "bad-target-method",
    "too-little-body",
    "too-much-body",
    "body-without-framing",
    "body-in-parts-too-little",
    "body-in-parts-too-much",
)


@pytest.mark.parametrize("name", sorted(REQUESTS))
async def test_a_request_as_httpcore_writes_it(name: str) -> None:
    answer = [OK + b"content-length: 2\r\n\r\n" + (b"" if name == "head" else b"ok")]
    new = await _run(Http11Connection, answer, [REQUESTS[name], REQUESTS[name]])
    old = await _run(AsyncHTTP11Connection, answer, [REQUESTS[name], REQUESTS[name]])
    assert new == old
    if name in FAILING:
        assert new["seen"][0][0] == "request failed" and new["seen"][0][4]  # and closed
        assert new["received"] == b""  # nothing of a refused request went out
    elif name == "asks-to-close":
        assert new["seen"][0][4] == b"ok" and new["seen"][0][7]  # answered, then closed
    else:
        assert len(new["seen"]) == 2 and new["seen"][1][6]  # reused, idle
        assert new["received"].count(b" /v1/chat/completions HTTP/1.1\r\n") == 2


def test_a_head_is_kept_only_as_h11_would_write_it_every_time() -> None:
    """What ``_HEADS`` keeps, by case: only heads whose one Content-Length h11 writes as given."""
    kept = {}
    for name, make in REQUESTS.items():
        http11._HEADS.clear()
        req = make(80, 0)
        # the first call renders the head, the second finds it kept
        kept[name] = http11._known_head(req) is not None and http11._known_head(req) is not None
    assert sorted(n for n, k in kept.items() if k) == [
        "asks-to-close",
        "asks-to-upgrade",
        "body-in-parts",
        "body-in-parts-too-little",
        "body-in-parts-too-much",
        "length-first",
        "length-lower-case",
        "length-zero",
        "length-zero-padded",
        "too-little-body",
        "too-much-body",
        "usual",
    ]
    # each kept head is h11's for that very request, with every case's heads in the table at once
    http11._HEADS.clear()
    for _ in range(2):
        for name, make in REQUESTS.items():
            for i in (0, 1):
                req = make(80, i)
                known = http11._known_head(req)
                if known is not None:
                    out: list[bytes] = []
                    event = h11.Request(method=req.method, target=req.url.target, headers=req.headers)
                    write_request(event, out.append)
                    assert known[0] + known[1] + known[2] == b"".join(out), name
    http11._HEADS.clear()
    for i in range(http11._HEADS_MAX + 5):  # bounded, whatever heads come
        assert http11._known_head(_request(80, headers=[HOST, (b"X-I", str(i).encode()), (b"Content-Length", b"2")]))
    assert 0 < len(http11._HEADS) <= http11._HEADS_MAX


@asynccontextmanager
async def _connection(script: list[Any]) -> AsyncIterator[tuple[Http11Connection, int]]:
    """An ``Http11Connection`` to an upstream on loopback that answers with ``script``, and
    the upstream's port; the connection and the upstream closed at the end."""
    up = Upstream(script)
    srv = await asyncio.start_server(up.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    stream = await LoopBackend().connect_tcp("127.0.0.1", port, timeout=2)
    conn = Http11Connection(httpcore.Origin(b"http", b"127.0.0.1", port), stream)
    try:
        yield conn, port
    finally:
        await conn.aclose()
        srv.close()
        await srv.wait_closed()


async def test_a_cancelled_read_closes_the_connection() -> None:
    async with _connection(SCRIPTS["silent"]) as (conn, port):
        resp = await conn.handle_async_request(_request(port))
        body = resp.stream
        assert isinstance(body, ResponseBody)
        assert await body.read() == b"abc"
        task = asyncio.ensure_future(body.read())
        await asyncio.sleep(0.05)
        assert not conn.is_closed()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert conn.is_closed() and not conn.is_available()
        assert await body.read() == b""  # and every read after it ends


async def test_a_body_left_unread_closes_the_connection() -> None:
    got = await _run(Http11Connection, [ANSWER], [_twice])
    assert got["seen"][0][6] is True  # read whole: idle
    async with _connection([ANSWER]) as (conn, port):
        resp = await conn.handle_async_request(_request(port))
        await resp.stream.aclose()  # type: ignore[union-attr]
        assert conn.is_closed()


async def test_a_busy_connection_takes_no_second_request() -> None:
    async with _connection([ANSWER]) as (conn, port):
        resp = await conn.handle_async_request(_request(port))
        with pytest.raises(httpcore.ConnectionNotAvailable):
            await conn.handle_async_request(_request(port))
        with pytest.raises(RuntimeError, match="Attempted to send request"):
            other = _request(port)
            other.url = httpcore.URL(scheme=b"http", host=b"localhost", port=port, target=b"/")
            await conn.handle_async_request(other)
        assert "Request Count: 1" in repr(conn) and "ACTIVE" in conn.info()
        await resp.stream.aclose()  # type: ignore[union-attr]


def test_installed_in_httpcore() -> None:
    import httpcore._async.connection as connection

    assert connection.AsyncHTTP11Connection is Http11Connection
    assert connection_pool.AsyncHTTPConnection is PooledConnection


async def _through_pool(cls: type, script: list[Any], port: int | None = None) -> dict[str, Any]:
    """Three requests, one after the other, through an httpcore pool whose connections are
    ``cls``: what the client saw of each, the pool's connections after each, what the
    upstream received.  ``port``: a port nobody listens on (the connect fails)."""
    up = Upstream(script)
    srv = await asyncio.start_server(up.handle, "127.0.0.1", 0)
    real = srv.sockets[0].getsockname()[1]
    pool = httpcore.AsyncConnectionPool(network_backend=LoopBackend(), max_keepalive_connections=1)
    seen: list[Any] = []
    saved = connection_pool.AsyncHTTPConnection
    connection_pool.AsyncHTTPConnection = cls
    try:
        for i in range(3):
            try:
                resp = await pool.handle_async_request(_request(port or real, body=b"{}" if i % 2 else b"[1]"))
                body = b"".join([chunk async for chunk in resp.stream])
                await resp.aclose()
                seen.append((resp.status, resp.headers, body))
            except Exception as e:
                seen.append(("failed", type(e).__name__, str(e)))
            conns = pool.connections
            seen.append(
                [
                    (c.is_idle(), c.is_closed(), c.is_available(), c.info().replace(str(port or real), "PORT"))
                    for c in conns
                ]
            )
    finally:
        connection_pool.AsyncHTTPConnection = saved
        await pool.aclose()
        srv.close()
        await srv.wait_closed()
    await asyncio.sleep(0.03)
    return {"seen": seen, "received": bytes(up.received).replace(b"%d" % real, b"PORT")}


@pytest.mark.parametrize("name", ["length", "chunked", "connection-close", "chunked-cut", "silent-head", "refused"])
async def test_a_pooled_connection_does_what_httpcores_does(name: str) -> None:
    """``PooledConnection`` (its exchanges straight to the HTTP/1.1 connection once it is
    connected) and httpcore's ``AsyncHTTPConnection`` in httpcore's pool: the same answers,
    errors, reuse and pool state, and the same bytes sent."""
    port = None
    if name == "refused":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # closed again: nothing listens there
    script = SCRIPTS.get(name, [ANSWER])
    new = await _through_pool(PooledConnection, script, port)
    old = await _through_pool(_ORIGINAL_CONNECTION, script, port)
    assert new == old
    if name in ("length", "chunked"):  # one connection, kept alive and reused
        assert new["received"].count(b"POST /v1/chat/completions") == 3
        assert [len(s) for s in new["seen"][1::2]] == [1, 1, 1]


class _RefusingStream(httpcore.AsyncNetworkStream):
    """A network stream whose writes fail and whose reads give an answer: an upstream that
    answered (an error, say) and closed before it read the request."""

    def __init__(self) -> None:
        self.pieces = [ANSWER]
        self.closed = False

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.pieces.pop(0) if self.pieces else b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        raise httpcore.WriteError("broken pipe")

    async def aclose(self) -> None:
        self.closed = True

    def get_extra_info(self, info: str) -> Any:
        return None


@pytest.mark.parametrize("cls", [Http11Connection, AsyncHTTP11Connection])
async def test_a_failed_write_still_reads_the_answer_then_closes(cls: type) -> None:
    stream = _RefusingStream()
    conn = cls(httpcore.Origin(b"http", b"127.0.0.1", 80), stream)
    resp = await conn.handle_async_request(_request(80))
    assert resp.status == 200
    assert b"".join([c async for c in resp.stream]) == b"ok"
    await resp.stream.aclose()
    assert conn.is_closed() and stream.closed
