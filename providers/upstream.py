"""Routing (public model → provider, upstream model, quirks) and the shared upstream client.

One ``httpx.AsyncClient`` per ``pool_idle`` value, over the transport
``server.upstream_transport`` names (``providers/transport.py``, or httpx's own); the
in-process ``demo`` provider is an httpx transport too, so a demo request goes through the
very same pipeline (bytes, SSE parsing, transformers) as a real upstream.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

import httpx

from providers.catalog import ModelInfo, catalog_entry
from providers.config import POOL_IDLE, Config, ModelCfg, ProviderCfg
from providers.demo import DemoTransport
from providers.profiles import Override, QuirkSet, auth_headers, upstream_query, upstream_url
from providers.transport import FastTransport, default_tls
from transformers.protocols import SPECS

# Connections per upstream origin, at most; idle ones kept per origin, at most.  An idle
# connection is kept for the provider's timeouts.pool_idle (default 90 s: the default of
# reqwest, the HTTP client Codex is built on, so a pause between two turns costs no more
# new connections and TLS handshakes through the proxy than direct); providers with the same
# value share one transport.
_MAX_CONNECTIONS = 2048
_MAX_KEEPALIVE = 256
# model names whose glob match Router.resolve remembers (a client may make up any number)
_MATCH_MEMO = 1024


def upstream_transport(kind: str, pool_idle: float = POOL_IDLE, tls: Any = None) -> httpx.AsyncBaseTransport:
    """The transport under the upstream client (``server.upstream_transport``): the proxy's own
    (``fast``, providers/transport.py) or httpx's (``httpx``), with the same limits."""
    if kind == "httpx":
        tls = tls or default_tls()  # (httpx's transport takes its context when made)
        limits = httpx.Limits(
            max_connections=_MAX_CONNECTIONS, max_keepalive_connections=_MAX_KEEPALIVE, keepalive_expiry=pool_idle
        )
        return httpx.AsyncHTTPTransport(verify=tls, limits=limits, trust_env=False)
    return FastTransport(
        max_connections=_MAX_CONNECTIONS, max_keepalive=_MAX_KEEPALIVE, keepalive_expiry=pool_idle, tls=tls
    )


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
    # per protocol the provider speaks, when its row has headers of its own (a key header,
    # fixed headers: providers/profiles.auth_headers): those in place of ``headers``
    protocol_headers: dict[str, dict[str, str]] = field(default_factory=dict)

    def headers_for(self, protocol: str) -> dict[str, str]:
        return self.protocol_headers.get(protocol, self.headers)

    @property
    def name(self) -> str:
        return self.cfg.name

    @property
    def profile(self) -> str:
        return self.cfg.profile

    def protocol_for(self, client_protocol: str) -> str:
        protos = self.cfg.protocols
        return client_protocol if client_protocol in protos else protos[0]

    def url(self, protocol: str, model: str = "", stream: bool = False) -> str:
        # without query: ``cfg.query`` (profile defaults merged in at build) goes as params
        return upstream_url(self.cfg.profile, self.cfg.base_url, protocol, self.cfg.deployment, model, stream)


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
    def build(cls, config: Config, *, transport: httpx.AsyncBaseTransport | None = None) -> Router:
        r = cls(config)
        demo_transport = DemoTransport()
        demo = httpx.AsyncClient(transport=demo_transport, trust_env=False)
        r.clients = [demo]
        # a set of pools, and a client over it, per pool_idle value (`transport`, when given,
        # serves every provider)
        pools: dict[float, tuple[httpx.AsyncBaseTransport, httpx.AsyncClient]] = {}

        def pooled(pool_idle: float) -> tuple[httpx.AsyncBaseTransport, httpx.AsyncClient]:
            key = -1.0 if transport is not None else pool_idle
            if key not in pools:
                upstream = transport or upstream_transport(config.server.upstream_transport, pool_idle)
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
                protocol_headers={
                    name: {**auth_headers(p.profile, p.api_key, name), **{k.lower(): v for k, v in p.headers.items()}}
                    for name, spec in SPECS.items()
                    if spec.key_header or spec.fixed_headers
                },
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
    """One provider endpoint's request template, built once: the URL with its query, and the
    headers as ``client.build_request`` merges them (the client's defaults, then
    content-type, accept, the forwarded client headers and the provider's headers, in that
    order, a later one winning).  ``request()`` builds the ``httpx.Request`` for one body,
    the forwarded values set in their places."""

    __slots__ = ("provider", "url", "headers", "forward", "timeout")

    def __init__(self, prov: Any, protocol: str, stream: bool, forward: tuple[str, ...], model: str = "") -> None:
        self.provider = prov  # keeps the id() in the TARGETS key alive
        client = prov.client
        query = prov.cfg.query or None
        spec = SPECS[protocol]
        if stream and spec.stream_query:  # (Gemini's stream as SSE, not one JSON array)
            query = {**(query or {}), **dict(spec.stream_query)}
        self.url = client.build_request("POST", prov.url(protocol, model, stream), params=query).url
        headers = httpx.Headers(client.headers)
        own = prov.headers_for(protocol)
        # forwarded values are filled in per request (Headers.__setitem__, in place)
        headers.update(
            {
                "content-type": "application/json",
                "accept": "text/event-stream" if stream else "application/json",
                **dict.fromkeys(forward, ""),
                **own,
            }
        )
        if stream:  # streams are read raw (no decoder in the loop): ask for them uncompressed
            headers["accept-encoding"] = "identity"
        self.headers = headers
        self.forward = tuple(k for k in forward if k not in own)  # the provider's own win
        self.timeout = prov.timeout.as_dict()

    def request(self, payload: bytes, forward: dict[str, str]) -> httpx.Request:
        headers = self.headers
        if self.forward:
            headers = headers.copy()
            for k in self.forward:
                headers[k] = forward[k]
        return httpx.Request("POST", self.url, content=payload, headers=headers, extensions={"timeout": self.timeout})


TARGETS: dict[tuple[int, str, bool, tuple[str, ...], str], Target] = {}


def target_for(prov: Any, protocol: str, stream: bool, forward: dict[str, str], model: str = "") -> Target:
    """``model``: the upstream model, for a protocol whose URL names it (Gemini's own)."""
    key = (id(prov), protocol, stream, tuple(forward), model)
    t = TARGETS.get(key)
    if t is None or t.provider is not prov:
        t = TARGETS[key] = Target(prov, protocol, stream, key[3], model)
    return t
