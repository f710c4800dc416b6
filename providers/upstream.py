"""Routing (public model → provider, upstream model, quirks) and the shared httpx client.

One ``httpx.AsyncClient`` per process, with a pool sized for many concurrent long streams;
the in-process ``demo`` provider is an httpx transport, so a demo request goes through the
very same pipeline (bytes, SSE parsing, transformers) as a real upstream.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import httpcore
import httpx
import httpx._transports.default as _httpx_default
from httpx._content import ByteStream

from providers.catalog import ModelInfo, catalog_entry
from providers.config import POOL_IDLE, Config, ModelCfg, ProviderCfg
from providers.demo import DemoTransport
from providers.profiles import Override, QuirkSet, auth_headers, upstream_query, upstream_url
from providers.upstream_body import wrap as body_stream
from providers.upstream_pool import Pool

# httpcore's pool walks all its connections (and poll()s every idle one) each time a request
# starts or a response closes, so one pool with many connections costs CPU per request under
# high concurrency; _POOL_SHARDS pools each hold a share of the connections.  A request goes
# to the pool with the fewest requests in flight, the first of equals: under load the pools
# share it evenly, and a client whose requests come one at a time keeps using the first
# pool's kept-alive connection (pools taken in turn left each connection idle eight times as
# long, past keepalive_expiry for a request every 4 s: a new connection, and a new TLS
# handshake to a remote provider, for almost every turn).
# Keep-alive: httpcore closes an idle connection as soon as its pool holds more than
# max_keepalive_connections connections in all (idle or not), so a pool never fills up with
# idle connections it would poll on every request (512 concurrent streams: 0.4 new
# connections per request, cheap scans); below that, every connection is reused.
# An idle connection is kept for the provider's timeouts.pool_idle (default 90 s: the
# default of reqwest, the HTTP client Codex is built on, so a pause between two turns costs
# no more new connections and TLS handshakes through the proxy than direct); providers with
# the same value share one set of pools.  A connection the upstream closed first is seen
# closed (readable while idle) and not reused; one it closed as a request went out on it is
# found so by that request (StaleConnection), which is sent again on another connection.
_POOL_SHARDS = 8
_MAX_CONNECTIONS = 2048 // _POOL_SHARDS
_MAX_KEEPALIVE = 32
# model names whose glob match Router.resolve remembers (a client may make up any number)
_MATCH_MEMO = 1024


class StaleConnection(httpcore.ReadError):
    """Raised by a network stream (``app/netio.py``) when a reused connection was closed or
    broken before any byte of the request's answer came: the upstream closed it while idle,
    as the request went out (and then never read it).  ``_ShardedTransport`` sends the
    request again on another connection."""


# requests sent again after a StaleConnection, at most: each try drops one dead kept-alive
# connection (an upstream closing idle connections may close all of a pool's at once)
_STALE_RESENDS = _MAX_KEEPALIVE


class _TargetURL(httpcore.URL):
    """An upstream endpoint's URL as httpcore takes it, shared by every request to it (the
    transport remembers it per URL): built once, and its origin with it, which httpcore's
    ``origin`` property builds anew, from a dict of default ports, each time the pool and
    then the connection look."""

    def __init__(self, url: httpx.URL) -> None:
        super().__init__(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path)
        self._origin = super().origin

    @property
    def origin(self) -> httpcore.Origin:
        return self._origin


# the URLs a transport remembers (an endpoint's path and query come from the config: a
# few; the bound holds whatever else)
_URLS_MAX = 1024


class _ShardedTransport(httpx.AsyncBaseTransport):
    """Independent connection pools, the least busy one taken (see _POOL_SHARDS)."""

    def __init__(self, n: int, network_backend: Any = None, *, pool_idle: float = POOL_IDLE, tls: Any = None) -> None:
        # each what AsyncClient(limits=..., trust_env=False) would build, sharing one TLS
        # context (building one loads the CA bundle: ~50 ms each)
        tls = tls or httpx.create_ssl_context(trust_env=False)
        limits = httpx.Limits(
            max_connections=_MAX_CONNECTIONS, max_keepalive_connections=_MAX_KEEPALIVE, keepalive_expiry=pool_idle
        )
        self.shards = [httpx.AsyncHTTPTransport(verify=tls, limits=limits, trust_env=False) for _ in range(n)]
        for shard in self.shards:
            # httpcore's pool as httpx built it, with the short way for a kept-alive
            # connection (providers/upstream_pool.py)
            shard._pool = Pool.like(shard._pool)
            if network_backend is not None:
                # httpcore's network layer (an httpcore.AsyncNetworkBackend: the app gives its
                # own, app/netio.py); httpx's transport has no argument for it, its pool has the slot
                shard._pool._network_backend = network_backend
        # each pool's requests in flight: httpcore adds a request to this list when it starts
        # and removes it when its response is closed (the list object is the pool's own)
        self._loads = [(shard, shard._pool._requests) for shard in self.shards]
        self._urls: dict[Any, _TargetURL] = {}  # by httpx's parse of the URL (a NamedTuple)

    def pick(self) -> httpx.AsyncHTTPTransport:
        """The pool with the fewest requests in flight; the first of equals."""
        best, busy = self._loads[0]
        if busy:
            least = len(busy)
            for shard, reqs in self._loads:
                if len(reqs) < least:
                    best, least = shard, len(reqs)
                    if not least:
                        break
        return best

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """httpx's ``AsyncHTTPTransport.handle_async_request`` on the picked pool, the
        answer's headers handed to httpx as they are (``_httpx_headers``)."""
        parsed = request.url._uri_reference
        url = self._urls.get(parsed)
        if url is None:
            if len(self._urls) >= _URLS_MAX:
                self._urls.clear()
            url = self._urls[parsed] = _TargetURL(request.url)
        req = httpcore.Request(
            method=request.method,
            url=url,
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        pool = self.pick()._pool
        resends = 0
        with _httpx_default.map_httpcore_exceptions():  # read at each use (app/httpcore_errors.py)
            while True:
                try:
                    resp = await pool.handle_async_request(req)
                    break
                except StaleConnection:
                    # that connection is closed and out of the pool: another one, or a new one
                    if resends == _STALE_RESENDS or not isinstance(request.stream, ByteStream):
                        raise  # (a body that cannot be read twice)
                    resends += 1
        # the body read off the connection, not through four async generators (upstream_body.py)
        headers = _httpx_headers(resp.headers)
        # given as a Headers, httpx copies its list (not looked at as a mapping first); its
        # encoding is kept by putting the object itself in place
        out = httpx.Response(
            status_code=resp.status, headers=headers, stream=body_stream(resp.stream), extensions=resp.extensions
        )
        out.headers = headers
        return out

    async def aclose(self) -> None:
        for t in self.shards:
            await t.aclose()


def _httpx_headers(raw: list[tuple[bytes, bytes]]) -> httpx.Headers:
    """What ``httpx.Headers(raw)`` builds from httpcore's bytes pairs, and the encoding it
    would find on first use, without its two calls and two decodes per header: an answer's
    head (20-odd lines from a hosted API) is read once per request."""
    # httpx's own choice: ascii when every name and value decodes as ascii, else it tries
    # utf-8, then iso-8859-1 (left to it: the encoding property finds it on first use)
    plain = b"".join(chain.from_iterable(raw)).isascii()
    return _headers([(k, k.lower(), v) for k, v in raw], "ascii" if plain else None)


def _headers(items: list[tuple[bytes, bytes, bytes]], encoding: str | None = None) -> httpx.Headers:
    """An ``httpx.Headers`` holding ``items`` (name, lower-cased name, value), as httpx keeps
    them; made without its ``__init__``, which asks whether its argument is a Mapping (an
    ABC's check) before it looks at it.  ``httpx.Request`` and ``httpx.Response`` given one
    copy its list (a Headers is the first thing they look for)."""
    h = httpx.Headers.__new__(httpx.Headers)
    h._list = items
    h._encoding = encoding
    return h


@dataclass(frozen=True, slots=True)
class Provider:
    cfg: ProviderCfg
    quirkset: QuirkSet
    client: httpx.AsyncClient
    # the client's transport: the pipeline builds its requests once per provider and sends
    # them through this directly (no per-request URL parsing, header merging or cookie jar)
    transport: httpx.AsyncBaseTransport
    headers: dict[str, str]
    timeout: httpx.Timeout
    first_byte: float

    @property
    def name(self) -> str:
        return self.cfg.name

    @property
    def profile(self) -> str:
        return self.cfg.profile

    def protocol_for(self, client_protocol: str) -> str:
        protos = self.cfg.protocols
        return client_protocol if client_protocol in protos else protos[0]

    def url(self, protocol: str) -> str:
        # without query: ``cfg.query`` (profile defaults merged in at build) goes as params
        return upstream_url(self.cfg.profile, self.cfg.base_url, protocol, self.cfg.deployment)


@dataclass(frozen=True, slots=True)
class Route:
    public_model: str
    upstream_model: str
    provider: Provider
    quirks: frozenset[str]
    info: ModelInfo
    # a model with several targets: every target (this one first) as a one-target Route, and
    # their weights (app.failover tries them in providers.retry.order_targets order)
    targets: tuple[Route, ...] = ()
    weights: tuple[float | None, ...] = ()

    def all_targets(self) -> tuple[Route, ...]:
        return self.targets or (self,)


def _auth_headers(p: ProviderCfg) -> dict[str, str]:
    return auth_headers(p.profile, p.api_key)


def _override(q: Any) -> Override:
    return Override(enable=frozenset(q.enable), disable=frozenset(q.disable), models=tuple(q.models))


@dataclass
class Router:
    config: Config
    routes: dict[str, Route] = field(default_factory=dict)
    # model entry name → its own quirk override (glob entries apply it to every match)
    model_overrides: dict[str, Override | None] = field(default_factory=dict)
    clients: list[httpx.AsyncClient] = field(default_factory=list)
    # model name → what the glob entries resolved it to (None: no entry matches)
    _matched: dict[str, Route | None] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls, config: Config, *, transport: httpx.AsyncBaseTransport | None = None, network_backend: Any = None
    ) -> Router:
        r = cls(config)
        demo_transport = DemoTransport()
        demo = httpx.AsyncClient(transport=demo_transport, trust_env=False)
        r.clients = [demo]
        # a set of pools, and a client over it, per pool_idle value (`transport`, when given,
        # serves every provider)
        pools: dict[float, tuple[httpx.AsyncBaseTransport, httpx.AsyncClient]] = {}
        tls = httpx.create_ssl_context(trust_env=False) if transport is None else None

        def pooled(pool_idle: float) -> tuple[httpx.AsyncBaseTransport, httpx.AsyncClient]:
            key = -1.0 if transport is not None else pool_idle
            if key not in pools:
                upstream = transport or _ShardedTransport(_POOL_SHARDS, network_backend, pool_idle=pool_idle, tls=tls)
                client = httpx.AsyncClient(transport=upstream, follow_redirects=False, trust_env=False)
                r.clients.append(client)
                pools[key] = upstream, client
            return pools[key]

        providers: dict[str, Provider] = {}
        for p in config.providers:
            query = upstream_query(p.profile, p.deployment, p.query)
            if query is not p.query:
                p = p.model_copy(update={"query": query})
            t = p.timeouts
            upstream, client = (demo_transport, demo) if p.profile == "demo" else pooled(t.pool_idle)
            providers[p.name] = Provider(
                cfg=p,
                quirkset=QuirkSet(p.profile, tuple(_override(q) for q in p.quirk_overrides), p.base_url or ""),
                client=client,
                transport=upstream,
                headers={**{k.lower(): v for k, v in p.headers.items()}, **_auth_headers(p)},
                timeout=httpx.Timeout(connect=t.connect, read=t.idle, write=t.write, pool=t.connect),
                first_byte=t.first_byte,
            )
        for m in config.models:
            r.model_overrides[m.name] = _model_override(m)
            targets = m.target_list()
            routes = [_route(m, providers[t.provider], t.upstream_model) for t in targets]
            if len(routes) > 1:
                first = routes[0]
                routes[0] = Route(
                    first.public_model,
                    first.upstream_model,
                    first.provider,
                    first.quirks,
                    first.info,
                    tuple(routes),
                    tuple(t.weight for t in targets),
                )
            r.routes[m.name] = routes[0]
        return r

    def resolve(self, model: str) -> Route | None:
        route = self.routes.get(model)
        if route is not None:
            return route
        # a glob entry's answer for a model name, remembered: matching every pattern and
        # resolving the quirks again cost ~13 µs a request.  Bounded, since the client picks
        # the names: once full, a new name is resolved each time, as before.
        try:
            return self._matched[model]
        except KeyError:
            pass
        route = self._match(model)
        if len(self._matched) < _MATCH_MEMO:
            self._matched[model] = route
        return route

    def _match(self, model: str) -> Route | None:
        for name, rt in self.routes.items():
            if any(c in name for c in "*?[") and fnmatch.fnmatchcase(model, name):
                # a glob model entry forwards the client's model name as is
                over = self.model_overrides.get(name)
                found = [
                    Route(model, model, t.provider, t.provider.quirkset.resolve(model, model, over), t.info)
                    for t in rt.all_targets()
                ]
                if len(found) == 1:
                    return found[0]
                f = found[0]
                return Route(f.public_model, f.upstream_model, f.provider, f.quirks, f.info, tuple(found), rt.weights)
        return None

    async def aclose(self) -> None:
        for c in self.clients:
            await c.aclose()


def _model_override(m: ModelCfg) -> Override | None:
    return _override(m.quirks) if (m.quirks.enable or m.quirks.disable) else None


def _route(m: ModelCfg, provider: Provider, upstream_model: str | None) -> Route:
    upstream = upstream_model or m.name
    quirks = provider.quirkset.resolve(upstream, m.name, _model_override(m))
    return Route(m.name, upstream, provider, quirks, catalog_entry(m, upstream, provider.cfg.name))


class Target:
    """One provider endpoint's request template, built once: the URL with its query and the
    headers exactly as ``client.build_request`` merges them (the client's defaults, then
    content-type, accept, the forwarded client headers and the provider's headers, in that
    order, a later one winning).  ``request()`` then builds the ``httpx.Request`` that
    ``httpx.Request("POST", url, content=payload, headers=...)`` builds, without its work per
    header: the head is the template's, ``Host`` first and ``Content-Length`` last (what
    httpx adds), the forwarded values set in their places; where ``build_request`` parsed
    the URL and merged the headers again for every request, and ``httpx.Request`` walked
    them four times."""

    __slots__ = ("provider", "url", "headers", "forward", "timeout", "head", "slots", "encoding")

    def __init__(self, prov: Any, protocol: str, stream: bool, forward: tuple[str, ...]) -> None:
        self.provider = prov  # keeps the id() in the TARGETS key alive
        client = prov.client
        self.url = client.build_request("POST", prov.url(protocol), params=prov.cfg.query or None).url
        headers = httpx.Headers(client.headers)
        # forwarded values are filled in per request, in place (Headers.__setitem__)
        headers.update(
            {
                "content-type": "application/json",
                "accept": "text/event-stream" if stream else "application/json",
                **dict.fromkeys(forward, ""),
                **prov.headers,
            }
        )
        if stream:  # streams are read raw (no decoder in the loop): ask for them uncompressed
            headers["accept-encoding"] = "identity"
        self.headers = headers
        self.forward = tuple(k for k in forward if k not in prov.headers)  # the provider's own win
        self.timeout = prov.timeout.as_dict()
        self.encoding = headers.encoding
        lower = [k for _, k, _ in headers._list]
        if b"host" in lower or b"content-length" in lower or b"transfer-encoding" in lower:
            self.head = None  # httpx would leave out a header it adds: built by httpx itself
        else:
            self.head = [(b"Host", b"host", self.url.netloc), *headers._list]
        # where each forwarded value goes, as Headers.__setitem__ puts it (the key as given),
        # with its name's two forms, encoded once here
        self.slots = tuple(
            (k, 1 + lower.index(raw.lower()), raw, raw.lower())
            for k, raw in ((k, k.encode(self.encoding)) for k in self.forward)
        )

    def request(self, payload: bytes, forward: dict[str, str]) -> httpx.Request:
        if self.head is None or not payload:  # (no body: httpx puts Content-Length: 0 after Host)
            headers = self.headers
            if self.forward:
                headers = headers.copy()
                for k in self.forward:
                    headers[k] = forward[k]
            return httpx.Request(
                "POST", self.url, content=payload, headers=headers, extensions={"timeout": self.timeout}
            )
        items = self.head.copy()
        for k, i, raw, low in self.slots:
            items[i] = (raw, low, forward[k].encode(self.encoding))
        items.append((b"Content-Length", b"content-length", b"%d" % len(payload)))
        req = httpx.Request(
            "POST", self.url, headers=_headers(items), stream=ByteStream(payload), extensions={"timeout": self.timeout}
        )
        req._content = payload  # what httpx.Request reads from a bytes body at once
        return req


TARGETS: dict[tuple[int, str, bool, tuple[str, ...]], Target] = {}


def target_for(prov: Any, protocol: str, stream: bool, forward: dict[str, str]) -> Target:
    key = (id(prov), protocol, stream, tuple(forward))
    t = TARGETS.get(key)
    if t is None or t.provider is not prov:
        t = TARGETS[key] = Target(prov, protocol, stream, key[3])
    return t
