"""The browser guard: what keeps a web page from using a proxy that listens on a laptop.

Theory of operation
-------------------
A proxy on 127.0.0.1 with no client key is reachable from every web page the user opens:
a page can send a CORS "simple" POST (``Content-Type: text/plain``, no preflight) and have
it executed even though it cannot read the answer, and a page on a domain that the
attacker re-points to 127.0.0.1 (DNS rebinding) can read answers too, because the browser
believes it talks to its own origin.  Non-browser clients (Codex, Kimi Code, the SDKs,
curl) send no ``Origin`` and a loopback ``Host``, so three checks, before any routing,
close both holes without touching them:

==========================================  =============================================
request                                     answer
==========================================  =============================================
``/healthz`` (``/health``), ``/readyz``    always served (load-balancer probes)
``Origin`` present, not allowed             403 ``origin_not_allowed`` (under ``/console``
                                            and ``/v1/admin/``, an ``Origin`` of the
                                            ``Host`` itself is allowed: the console's page)
``Origin`` allowed, ``OPTIONS`` preflight   204 with the CORS headers
no client key configured, ``Host`` not a    403 ``host_not_allowed``
loopback name/address, not the configured
``server.host``, not in ``allowed_hosts``
``POST`` to a JSON endpoint whose           415 ``unsupported_media_type``
``Content-Type`` is not JSON
anything else                               passed on (with CORS headers on the answer
                                            when its ``Origin`` is allowed)
==========================================  =============================================

``server.allowed_origins`` (exact ``scheme://host[:port]`` values, or ``"*"``) is empty by
default: no browser page may call the proxy.  ``server.allowed_hosts`` (names or ``"*"``)
only matters for an open proxy; with client keys configured, a rebinding page has no key.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable
from typing import Any

from transformers.errors import ProxyError

PROBES = frozenset({"/healthz", "/health", "/readyz"})
# the console and the admin API it calls (app/console.py, app/admin.py): a page of the
# proxy's own origin may call them (they need an admin key or the console's session, which
# a page elsewhere, or a rebinding one, does not have)
SAME_ORIGIN = ("/console", "/v1/admin/")
JSON_POSTS = frozenset({"/v1/chat/completions", "/v1/responses"})
_TOKEN_LIST = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~, -]{0,512}$")


def _host_name(host: str) -> str:
    """The name of a ``Host`` header value, without port or IPv6 brackets, lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host[1:]
    name, sep, port = host.rpartition(":")
    return name if sep and port.isdigit() and ":" not in name else host


@functools.lru_cache(maxsize=256)  # a client sends the same Host on every request
def _loopback(name: str) -> bool:
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _same_origin(origin: bytes, host: bytes | None) -> bool:
    """``Origin`` names the ``Host`` the request was sent to (the page is the proxy's own)."""
    if host is None:
        return False
    _, sep, rest = origin.partition(b"://")
    return bool(sep) and rest.lower() == host.strip().lower()


def _is_json(ctype: str) -> bool:
    media = ctype.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


# Content-Type values already decided: a client sends the same one on every request
_JSON_TYPES: dict[bytes, bool] = {}
_JSON_TYPES_MAX = 256


def _is_json_header(value: bytes) -> bool:
    """``_is_json`` of a raw header value, remembered (bounded, whatever values come)."""
    hit = _JSON_TYPES.get(value)
    if hit is None:
        hit = _is_json(value.decode("latin-1"))
        if len(_JSON_TYPES) >= _JSON_TYPES_MAX:
            _JSON_TYPES.clear()
        _JSON_TYPES[value] = hit
    return hit


class Guard:
    __slots__ = ("origins", "any_origin", "hosts", "any_host", "open_proxy")

    def __init__(
        self, origins: Iterable[str] = (), hosts: Iterable[str] = (), *, open_proxy: bool = False, server_host: str = ""
    ) -> None:
        origins = [o.strip().rstrip("/").lower() for o in origins]
        self.any_origin = "*" in origins
        self.origins = frozenset(origins)
        names = {_host_name(h) for h in hosts}
        if server_host and server_host not in ("0.0.0.0", "::", ""):
            names.add(_host_name(server_host))
        self.any_host = "*" in names
        self.hosts = frozenset(names)
        self.open_proxy = open_proxy

    def check(self, scope: Any) -> ProxyError | None:
        """None to pass the request on, else the error to answer with."""
        path = scope.get("path", "")
        if path in PROBES:
            return None
        origin = host = ctype = None
        for k, v in scope["headers"]:
            if k == b"origin":
                origin = v
            elif k == b"host":
                host = v
            elif k == b"content-type":
                ctype = v
        if (
            origin is not None
            and not self.origin_allowed(origin.decode("latin-1"))
            and not (path.startswith(SAME_ORIGIN) and _same_origin(origin, host))
        ):
            return ProxyError(
                403,
                "requests from web pages are not allowed: this Origin is not in the proxy's server.allowed_origins",
                code="origin_not_allowed",
            )
        if self.open_proxy and host is not None and not self.any_host:
            name = _host_name(host.decode("latin-1"))
            if not _loopback(name) and name not in self.hosts:
                return ProxyError(
                    403,
                    "this Host is not served: with no client keys configured the proxy answers "
                    "only loopback names and server.allowed_hosts",
                    code="host_not_allowed",
                )
        if (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and path in JSON_POSTS
            and not _is_json_header(ctype or b"")
        ):
            return ProxyError(
                415,
                "the request body must be JSON, sent with 'Content-Type: application/json'",
                code="unsupported_media_type",
            )
        return None

    def origin_allowed(self, origin: str) -> bool:
        return self.any_origin or origin.strip().rstrip("/").lower() in self.origins

    @staticmethod
    def cors_headers(scope: Any) -> list[tuple[bytes, bytes]] | None:
        """CORS headers for an answer to an (allowed) ``Origin``; None when there is none."""
        origin = host = None
        asked = b""
        for k, v in scope["headers"]:
            if k == b"origin":
                origin = v
            elif k == b"access-control-request-headers":
                asked = v
            elif k == b"host":
                host = v
        if origin is None or (scope.get("path", "").startswith(SAME_ORIGIN) and _same_origin(origin, host)):
            return None  # (none, or the proxy's own page: no CORS needed)
        out = [
            (b"access-control-allow-origin", origin),
            (b"vary", b"Origin"),
            (b"access-control-expose-headers", b"x-request-id, retry-after"),
        ]
        if scope["method"] == "OPTIONS":
            allow = asked if _TOKEN_LIST.match(asked.decode("latin-1")) else b"authorization, content-type"
            out += [
                (b"access-control-allow-methods", b"GET, POST, DELETE, OPTIONS"),
                (b"access-control-allow-headers", allow),
                (b"access-control-max-age", b"600"),
            ]
        return out
