"""Upstream heads past h11: httpcore's header check (app/httpcore_heads.py) and the headers
the sharded transport hands httpx (providers.upstream._httpx_headers) give what httpcore's
and httpx's own code give, results and errors alike; the transport answers as httpx's; the
upstream request built from its template (Target.request) is the one httpx builds."""

from __future__ import annotations

import asyncio
import socket

import httpcore
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app import httpcore_heads
from app.config import parse_config
from app.netio import LoopBackend
from bench.fake_upstream import HOSTED_HEADERS
from providers.upstream import Router, Target, _httpx_headers, _ShardedTransport, target_for

_enforce = httpcore_heads._httpcore_enforce_headers


class _Bytes(bytes):
    pass


def _outcome(fn, value):  # type: ignore[no-untyped-def]
    try:
        got = fn(value, name="headers")
    except Exception as e:  # the error itself is what is compared
        return "error", type(e), str(e)
    return "ok", got, [tuple(map(type, item)) for item in got]


CASES = [
    None,
    [],
    [(b"host", b"example.org"), (b"x-key", b"Bearer a b")],
    [("host", "example.org"), (b"x", "y")],
    [("x", "caf\u00e9")],  # not ASCII: httpcore's TypeError
    [(b"x", 1)],
    [[b"a", b"b"]],  # pairs as lists
    [(b"a", b"b", b"c")],
    [(b"a",)],
    [(_Bytes(b"a"), b"b")],
    ((b"a", b"b"),),  # a tuple of pairs
    {"a": "b", b"c": b"d"},
    {b"a": 1},
    "ab",
    12,
]


@pytest.mark.parametrize("value", CASES, ids=range(len(CASES)))
def test_enforce_headers_answers_as_httpcores(value) -> None:  # type: ignore[no-untyped-def]
    assert _outcome(httpcore_heads.enforce_headers, value) == _outcome(_enforce, value)


def test_enforce_headers_makes_a_new_list() -> None:
    raw = [(b"a", b"b")]
    got = httpcore_heads.enforce_headers(raw, name="headers")
    assert got == raw and got is not raw


_ATOM = st.one_of(st.binary(max_size=6), st.text(max_size=4), st.integers(), st.none())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.tuples(_ATOM, _ATOM), st.tuples(st.binary(max_size=4), st.binary(max_size=4)))))
def test_generated_headers_are_checked_as_httpcore_checks_them(value: list) -> None:
    assert _outcome(httpcore_heads.enforce_headers, value) == _outcome(_enforce, value)


def test_install_puts_it_where_httpcore_builds_requests_and_responses() -> None:
    import httpcore._models

    httpcore_heads.install()
    assert httpcore._models.enforce_headers is httpcore_heads.enforce_headers
    assert httpcore.Response(200, headers=[(b"a", b"b")]).headers == [(b"a", b"b")]
    with pytest.raises(TypeError, match="unicode"):
        httpcore.Request("GET", "http://x/", headers=[("x", "caf\u00e9")])


def _view(h: httpx.Headers) -> tuple[object, ...]:
    return (h._list, h.encoding, h.raw, list(h.multi_items()), h.get("content-type"), h.get_list("set-cookie"))


HEADER_SETS = [
    [],
    [(b"Content-Type", b"application/json"), (b"content-length", b"2")],
    [(b"Set-Cookie", b"a=1"), (b"set-cookie", b"b=2"), (b"X-Request-ID", b"req_1")],
    [(b"X", b"caf\xc3\xa9")],  # utf-8
    [(b"X", b"\xff\x80")],  # neither ascii nor utf-8
    [(b"X-\xc3\xa9", b"v")],
    [(b"X", b"\xe9"), (b"Y", b"caf\xc3\xa9")],
]


@pytest.mark.parametrize("raw", HEADER_SETS, ids=range(len(HEADER_SETS)))
def test_httpx_headers_are_what_httpx_builds(raw: list[tuple[bytes, bytes]]) -> None:
    assert _view(_httpx_headers(raw)) == _view(httpx.Headers(raw))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=6), st.binary(max_size=8)), max_size=8))
def test_generated_httpx_headers_are_what_httpx_builds(raw: list[tuple[bytes, bytes]]) -> None:
    assert _view(_httpx_headers(raw)) == _view(httpx.Headers(raw))


# the sharded transport against httpx's own, on one loopback server


async def _serve(answer: bytes) -> tuple[asyncio.Server, int]:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            await r.readuntil(b"\r\n\r\n")
            if answer:
                w.write(answer)
                await w.drain()
        finally:
            w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _exchange(transport: httpx.AsyncBaseTransport, port: int) -> tuple[object, ...]:
    req = httpx.Request("POST", f"http://127.0.0.1:{port}/v1/chat/completions", content=b"{}")
    try:
        resp = await transport.handle_async_request(req)
    except httpx.HTTPError as e:
        return "error", type(e), str(e)
    try:
        body = b"".join([part async for part in resp.stream])  # type: ignore[union-attr]
    except httpx.HTTPError as e:
        body = ("body error", type(e), str(e))  # type: ignore[assignment]
    finally:
        await resp.aclose()
    ext = {k: v for k, v in resp.extensions.items() if k != "network_stream"}
    return resp.status_code, _view(resp.headers), body, ext, sorted(resp.extensions)


ANSWERS = [
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n" + HOSTED_HEADERS + b"content-length: 2\r\n\r\n{}",
    b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\nX: caf\xc3\xa9\r\ncontent-length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nabc",  # cut short
    b"HTTP/1.1 200 OK\r\nbad line\r\n\r\n",
    b"",  # closed without an answer
]


@pytest.mark.parametrize("answer", ANSWERS, ids=range(len(ANSWERS)))
async def test_the_sharded_transport_answers_as_httpxs(answer: bytes) -> None:
    server, port = await _serve(answer)
    ours = _ShardedTransport(2, LoopBackend())
    theirs = httpx.AsyncHTTPTransport(trust_env=False)
    try:
        assert await _exchange(ours, port) == await _exchange(theirs, port)
    finally:
        server.close()
        await ours.aclose()
        await theirs.aclose()


async def test_a_refused_connection_is_httpxs_connect_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once closed
    ours = _ShardedTransport(1, LoopBackend())
    theirs = httpx.AsyncHTTPTransport(trust_env=False)
    try:
        got, want = await _exchange(ours, port), await _exchange(theirs, port)
        assert got[:2] == want[:2] == ("error", httpx.ConnectError)
    finally:
        await ours.aclose()
        await theirs.aclose()


def test_httpcore_is_what_the_transport_was_written_against() -> None:
    # the method follows httpx 0.28's AsyncHTTPTransport.handle_async_request over httpcore 1.x
    assert httpx.__version__.startswith("0.28.") and httpcore.__version__.startswith("1.")


# the upstream request: Target.request builds what httpx.Request builds from the template


def _httpx_request(t: Target, payload: bytes, forward: dict[str, str]) -> httpx.Request:
    """The request as it was built before: httpx.Request over a copy of the template."""
    headers = t.headers
    if t.forward:
        headers = headers.copy()
        for k in t.forward:
            headers[k] = forward[k]
    return httpx.Request("POST", t.url, content=payload, headers=headers, extensions={"timeout": t.timeout})


def _req_view(r: httpx.Request) -> tuple[object, ...]:
    return (r.method, str(r.url), r.headers._list, r.headers.encoding, r.read(), b"".join(r.stream), r.extensions)  # type: ignore[arg-type]


PROVIDERS = [
    {"name": "p", "base_url": "http://127.0.0.1:9/v1"},
    {"name": "p", "profile": "openai", "base_url": "https://api.openai.com/v1", "api_key": "sk-test"},
    {"name": "p", "profile": "azure", "base_url": "https://x.openai.azure.com", "api_key": "k", "deployment": "d"},
    {"name": "p", "base_url": "http://127.0.0.1:9/v1", "headers": {"X-Org": "acme\tinc", "User-Agent": "mine"}},
    {"name": "p", "base_url": "http://127.0.0.1:9/v1", "query": {"api-version": "1"}, "headers": {"x-a": "1"}},
    # headers httpx would otherwise add itself: built by httpx
    {"name": "p", "base_url": "http://127.0.0.1:9/v1", "headers": {"Host": "virtual.example"}},
    {"name": "p", "base_url": "http://127.0.0.1:9/v1", "headers": {"content-length": "5"}},
]


@pytest.mark.parametrize("provider", PROVIDERS, ids=range(len(PROVIDERS)))
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("forward", [{}, {"user-agent": "codex_cli_rs/0.169.0"}])
async def test_the_upstream_request_is_what_httpx_builds(provider: dict, stream: bool, forward: dict[str, str]) -> None:
    cfg = parse_config({"providers": [provider], "models": [{"name": "m", "provider": "p"}]})
    r = Router.build(cfg)
    try:
        prov = r.routes["m"].provider
        t = target_for(prov, "chat", stream, forward)
        template = list(t.headers._list)
        for payload in (b'{"model":"m"}', b"", b"x" * 70000):
            assert _req_view(t.request(payload, forward)) == _req_view(_httpx_request(t, payload, forward))
        if forward:  # the template is left as it was: the next request gets its own value
            other = {"user-agent": "KimiCode/2.1.0"}
            assert _req_view(t.request(b"{}", other)) == _req_view(_httpx_request(t, b"{}", other))
        assert t.headers._list == template
    finally:
        await r.aclose()


URLS = [
    "http://127.0.0.1:8000/v1/chat/completions",
    "https://api.openai.com/v1/responses",
    "https://example.openai.azure.com/openai/v1/responses?api-version=preview",
    "http://[::1]:9/v1/chat/completions?a=1&b=%20",
    "http://example.org/v1/chat/completions",  # the scheme's default port
    "https://example.org:443/x",
]


async def test_the_transport_shares_one_httpcore_url_per_endpoint() -> None:
    """Each endpoint's httpcore URL is built once and shared: what httpcore would build for
    it (scheme, host, port, target, origin), a distinct one per URL, and the memo bounded."""
    import providers.upstream as up

    seen: list[httpcore.Request] = []

    class Recorder:
        async def handle_async_request(self, req: httpcore.Request) -> httpcore.Response:
            seen.append(req)
            return httpcore.Response(204)

    t = _ShardedTransport(1)
    t.shards[0]._pool = Recorder()  # type: ignore[assignment]
    for url in URLS * 2:
        await t.handle_async_request(httpx.Request("POST", url, content=b"{}"))
    for req, url in zip(seen, URLS * 2, strict=True):
        u = httpx.URL(url)
        want = httpcore.URL(scheme=u.raw_scheme, host=u.raw_host, port=u.port, target=u.raw_path)
        got = req.url
        assert (got.scheme, got.host, got.port, got.target) == (want.scheme, want.host, want.port, want.target)
        assert got.origin == want.origin and str(got.origin) == str(want.origin)
        assert got == want
    assert [id(r.url) for r in seen[: len(URLS)]] == [id(r.url) for r in seen[len(URLS) :]]  # shared
    assert len({id(r.url) for r in seen}) == len(URLS)  # one per endpoint
    for i in range(up._URLS_MAX + 5):
        await t.handle_async_request(httpx.Request("POST", f"http://127.0.0.1:9/{i}", content=b"{}"))
    assert 0 < len(t._urls) <= up._URLS_MAX
    assert seen[-1].url.target == b"/%d" % (up._URLS_MAX + 4)
