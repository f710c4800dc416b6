"""Routing (public model → provider, upstream model, quirks) and the shared httpx client.

One ``httpx.AsyncClient`` per process, with a pool sized for many concurrent long streams;
the in-process ``demo`` provider is an httpx transport, so a demo request goes through the
very same pipeline (bytes, SSE parsing, transformers) as a real upstream.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

import httpx

from app.config import Config, ModelCfg, ProviderCfg
from providers.catalog import ModelInfo, catalog_entry
from providers.demo import DemoTransport
from providers.profiles import Override, QuirkSet, auth_headers, upstream_query, upstream_url


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

    @classmethod
    def build(cls, config: Config, *, transport: httpx.AsyncBaseTransport | None = None) -> Router:
        r = cls(config)
        limits = httpx.Limits(max_connections=2048, max_keepalive_connections=256, keepalive_expiry=30.0)
        # what AsyncClient(limits=limits, trust_env=False) would build, made here to be shared
        shared_transport = transport or httpx.AsyncHTTPTransport(limits=limits, trust_env=False)
        shared = httpx.AsyncClient(transport=shared_transport, follow_redirects=False, trust_env=False)
        demo_transport = DemoTransport()
        demo = httpx.AsyncClient(transport=demo_transport, trust_env=False)
        r.clients = [shared, demo]
        providers: dict[str, Provider] = {}
        for p in config.providers:
            query = upstream_query(p.profile, p.deployment, p.query)
            if query is not p.query:
                p = p.model_copy(update={"query": query})
            t = p.timeouts
            providers[p.name] = Provider(
                cfg=p,
                quirkset=QuirkSet(p.profile, tuple(_override(q) for q in p.quirk_overrides), p.base_url or ""),
                client=demo if p.profile == "demo" else shared,
                transport=demo_transport if p.profile == "demo" else shared_transport,
                headers={**{k.lower(): v for k, v in p.headers.items()}, **_auth_headers(p)},
                timeout=httpx.Timeout(connect=t.connect, read=t.idle, write=t.write, pool=t.connect),
                first_byte=t.first_byte,
            )
        for m in config.models:
            r.model_overrides[m.name] = _model_override(m)
            r.routes[m.name] = _route(m, providers[m.provider])
        return r

    def resolve(self, model: str) -> Route | None:
        route = self.routes.get(model)
        if route is None:
            for name, rt in self.routes.items():
                if any(c in name for c in "*?[") and fnmatch.fnmatchcase(model, name):
                    # a glob model entry forwards the client's model name as is
                    quirks = rt.provider.quirkset.resolve(model, model, self.model_overrides.get(name))
                    return Route(model, model, rt.provider, quirks, rt.info)
        return route

    async def aclose(self) -> None:
        for c in self.clients:
            await c.aclose()


def _model_override(m: ModelCfg) -> Override | None:
    return _override(m.quirks) if (m.quirks.enable or m.quirks.disable) else None


def _route(m: ModelCfg, provider: Provider) -> Route:
    upstream = m.upstream_model or m.name
    quirks = provider.quirkset.resolve(upstream, m.name, _model_override(m))
    return Route(m.name, upstream, provider, quirks, catalog_entry(m, upstream, provider.cfg.name))
