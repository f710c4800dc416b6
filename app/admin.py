"""The admin API of runtime keys (app/keys.py) and their audit, and who an admin is.

==========================================  ==================================================
route                                       does
==========================================  ==================================================
``GET /v1/admin/keys``                      every key: the config's (read-only) and the runtime ones
``POST /v1/admin/keys``                     create (``name``, ``models``, ``limits``,
                                            ``expires_at``): 201, with the ``secret`` (shown once)
``GET /v1/admin/keys/{name}``               one key
``PATCH /v1/admin/keys/{name}``             change ``models``, ``limits``, ``expires_at``
``POST /v1/admin/keys/{name}/rotate``       a new secret; the old one works ``grace_seconds`` more
``DELETE /v1/admin/keys/{name}``            revoke
``GET /v1/admin/audit``                     the audit entries, newest first (``key``, ``since``,
                                            ``limit``)
==========================================  ==================================================

An admin is a request with ``Authorization: Bearer <an auth.admin_keys key>``, or the
console's session cookie (app/console.py; a change through it also needs the header
``x-switchboard-console: 1``, which no other site's page can send).  Without any admin key
configured these routes do not exist (404), as ``/v1/admin/usage``.  Every answer carries
``x-request-id`` and is logged (``admin_keys``; never a secret).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from app.keys import KeysError
from app.logs import log
from app.prepare import new_request_id
from app.usage import admin_digests, admin_refusal, parse_when

__all__ = ["AdminAuth", "admin_routes"]


class AdminAuth:
    """Who asks: an admin key (Bearer) or a console session; ``svc.config.auth.admin_keys``
    read at each request."""

    def __init__(self, svc: Any) -> None:
        self.svc = svc
        self._memo: dict[tuple[str, ...], list[bytes]] = {}
        self.console: Any = None  # app.console.Sessions, once the console is mounted

    def digests(self) -> list[bytes]:
        keys = tuple(self.svc.config.auth.admin_keys)
        got = self._memo.get(keys)
        if got is None:
            self._memo.clear()
            got = self._memo[keys] = admin_digests(list(keys))
        return got

    def check_key(self, key: str) -> str | None:
        """The actor of admin key ``key``; None when it is not one."""
        if not self.digests() or admin_refusal(self.digests(), "Bearer " + key) is not None:
            return None
        return self.actor_of(key)

    def actor_of(self, key: str) -> str:
        return "admin:" + hashlib.sha256(key.encode()).hexdigest()[:12]

    def check(self, request: Request, changes: bool) -> tuple[str | None, tuple[int, str, str] | None]:
        """(the actor, None) for an admin; (None, (status, message, code)) otherwise."""
        allowed = self.digests()
        if not allowed:
            return None, (404, f"Unknown route {request.method} {request.url.path[:200]}", "not_found")
        header = request.headers.get("authorization", "")
        if not header and self.console is not None:
            actor = self.console.actor(request)
            if actor is not None:
                if changes and request.headers.get("x-switchboard-console") != "1":
                    return None, (403, "A change from the console needs its header.", "csrf_refused")
                return actor, None
        refused = admin_refusal(allowed, header)
        if refused is not None:
            return None, (401, *refused)
        return self.actor_of(header[7:].strip()), None


def _answer(status: int, body: Any, rid: str) -> Response:
    return Response(
        orjson.dumps(body), status_code=status, media_type="application/json", headers={"x-request-id": rid}
    )


def _error(status: int, message: str, code: str | None, rid: str, param: str | None = None) -> Response:
    err = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return _answer(status, {"error": err}, rid)


def admin_routes(app: Any, svc: Any, auth: AdminAuth) -> None:
    keys = svc.keys.keys

    async def run(request: Request, what: str, changes: bool, fn: Any) -> Response:
        rid = new_request_id(request.scope)
        actor, refused = auth.check(request, changes)
        if refused is not None:
            log.info("admin_keys", request_id=rid, op=what, status=refused[0], code=refused[2])
            return _error(refused[0], refused[1], refused[2], rid)
        assert actor is not None
        try:
            status, body = await fn(actor)
        except KeysError as e:
            log.info("admin_keys", request_id=rid, op=what, status=e.status, code=e.code, actor=actor)
            return _error(e.status, str(e), e.code, rid, e.param)
        except Exception as e:  # the backend did not answer
            log.warning("admin_keys", request_id=rid, op=what, status=503, error=type(e).__name__)
            return _error(503, f"the key store did not answer ({type(e).__name__})", "store_unavailable", rid)
        if changes:  # this instance sees its own change at once (the others within a second)
            try:
                await svc.keys.refresh()
            except Exception as e:
                log.warning("keys_refresh_failed", error=type(e).__name__)
        log.info("admin_keys", request_id=rid, op=what, status=status, actor=actor)
        return _answer(status, body, rid)

    async def body_of(request: Request) -> dict[str, Any]:
        raw = await request.body()
        if not raw:
            return {}
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise KeysError(400, "the request body is not valid JSON", "invalid_json") from None
        if not isinstance(body, dict):
            raise KeysError(400, "the request body must be a JSON object", "invalid_value")
        return body

    async def list_keys(request: Request) -> Response:
        async def fn(actor: str) -> tuple[int, Any]:
            return 200, {"object": "list", "data": await keys.all()}

        return await run(request, "list", False, fn)

    async def create(request: Request) -> Response:
        async def fn(actor: str) -> tuple[int, Any]:
            return 201, await keys.create(await body_of(request), actor)

        return await run(request, "create", True, fn)

    async def one(request: Request) -> Response:
        name: str = request.path_params["name"]
        if request.method == "GET":

            async def show(actor: str) -> tuple[int, Any]:
                return 200, await keys.show(name)

            return await run(request, "show", False, show)
        if request.method == "PATCH":

            async def update(actor: str) -> tuple[int, Any]:
                return 200, await keys.update(name, await body_of(request), actor)

            return await run(request, "update", True, update)

        async def revoke(actor: str) -> tuple[int, Any]:
            return 200, await keys.revoke(name, actor)

        return await run(request, "revoke", True, revoke)

    async def rotate(request: Request) -> Response:
        name: str = request.path_params["name"]

        async def fn(actor: str) -> tuple[int, Any]:
            body = await body_of(request)
            return 200, await keys.rotate(name, body.get("grace_seconds"), actor)

        return await run(request, "rotate", True, fn)

    async def audit(request: Request) -> Response:
        q = request.query_params

        async def fn(actor: str) -> tuple[int, Any]:
            try:
                since = parse_when(q.get("since") or "30d", time.time())
            except ValueError as e:
                raise KeysError(400, f"since: {e}", "invalid_value", "since") from None
            limit = q.get("limit") or "200"
            if not limit.isdigit() or not 1 <= int(limit) <= 10000:
                raise KeysError(400, "limit must be 1 to 10000", "invalid_value", "limit")
            data = await keys.audit(since, q.get("key") or None, int(limit))
            return 200, {"object": "list", "data": data}

        return await run(request, "audit", False, fn)

    app.router.add_route("/v1/admin/keys", list_keys, methods=["GET"])
    app.router.add_route("/v1/admin/keys", create, methods=["POST"])
    app.router.add_route("/v1/admin/keys/{name:path}/rotate", rotate, methods=["POST"])
    app.router.add_route("/v1/admin/keys/{name:path}", one, methods=["GET", "PATCH", "DELETE"])
    app.router.add_route("/v1/admin/audit", audit, methods=["GET"])
