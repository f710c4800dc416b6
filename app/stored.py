"""Stored responses on the proxy's routes: ``store``, ``previous_response_id`` and
``GET``/``DELETE /v1/responses/{id}``, whatever the upstream.

Theory of operation
-------------------
The proxy route calls ``begin`` before ``prepare()`` (which stays pure) and hands ``finish``
to the pump as its hold (``ProxyResponse.hold``), only for a Responses request that stores
or continues (a request with ``store: false`` and no ``previous_response_id``, as Codex
sends, never gets here and never touches the store).  ``begin`` decides, from the body,
the route and the stored chain:

=============================================  ===========================================
case                                           what happens
=============================================  ===========================================
storing off (``store.enabled: false``)         ``store: true`` → 400 ``store_disabled``;
                                               absent → ``store: false`` (nothing kept,
                                               upstream included)
``previous_response_id`` unknown, expired,     404 ``previous_response_not_found``
another key's, or a gap in its chain
the store does not answer                      503 ``store_unavailable`` (stateless
                                               requests are not affected)
previous turn answered by this same provider,  passed through: the upstream continues its
a Responses upstream that keeps responses      own conversation
every other continuation (a Chat upstream,     the input is rebuilt: every earlier turn's
a Responses upstream that keeps nothing,       input and output items, oldest first, then
another provider than the previous turn)       this turn's input; replayed item ids are
                                               dropped toward a Responses upstream (they
                                               name items it never stored)
=============================================  ===========================================

``item_reference`` items (the Vercel AI SDK sends earlier items of a stored conversation as
references, with no ``previous_response_id``) are resolved by ``resolve_references`` after
the chain is expanded, whatever ``store`` says, for every request that holds one:

=============================================  ===========================================
the referenced id                              the upstream gets
=============================================  ===========================================
an item of a record of this client key         the item (without its ``id`` toward a
                                               Responses upstream: the ids of stored items
                                               are the proxy's, which no upstream issued)
unknown to this key, native upstream           the reference (the upstream's own id: a
                                               client that also talks to it directly)
unknown, any other upstream                    404 ``Item with id '…' not found.``,
                                               ``param: input[i]`` (OpenAI's answer); with
                                               the store off the message says so
=============================================  ===========================================

The client's response says ``store: true`` and its ``previous_response_id`` whatever the
upstream (``answered``).  ``finish`` stores the response object the client receives with
this turn's input items (ids given to those without), the provider, whether that upstream
keeps it too, and the ids of the earlier turns.  It runs once the answer is whole and
before the bytes that carry its terminal event leave (a non-streamed body, a stream's
``response.completed`` event or WebSocket frame): what the client was told is stored is in
the store before the client can send a next turn, to any instance.  A put that fails (the
store unavailable, a record over ``max_record_bytes``) loses no answer: it goes out with
``store: false`` in its response object (in a stream, the terminal event's), logged and
counted (``switchboard_store_errors_total{op}``).  So a lookup that finds nothing is
answered at once: nothing the client was told is stored can still be on its way.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

from app.logs import log
from app.prepare import Prepared, new_request_id
from app.store import Record, RecordTooLarge, Store, StoreUnavailable
from providers.upstream import Router
from transformers.errors import ProxyError
from transformers.protocols import SPECS

__all__ = ["Turn", "begin", "finish", "has_references", "resolve_references", "routes", "stored_chain"]

_HEX = frozenset("0123456789abcdef")
_ITEM_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


@dataclass(slots=True)
class Turn:
    owner: str
    items: list[Any]  # this turn's input items, as stored
    ancestors: list[str] = field(default_factory=list)
    remote: bool = False
    answered: dict[str, Any] = field(default_factory=dict)
    resolved: bool = False  # item_reference items were replaced (counted as a repair)
    kept: bool = False  # finish stored it


def store_unavailable(cause: StoreUnavailable) -> ProxyError:
    """The 503 answer to a request the store did not serve; the cause (the operation and the
    error's type, never its text) goes to the log, as ``store_unavailable``."""
    log.warning("store_unavailable", error=str(cause))
    return ProxyError(
        503,
        "The response store is unavailable: requests with store=true or previous_response_id cannot be served "
        "right now; retry, or send the whole conversation with store=false.",
        type="server_error",
        code="store_unavailable",
        headers={"retry-after": "1"},
    )


def previous_not_found(rid: str) -> ProxyError:
    return ProxyError(
        404,
        f"Previous response with id '{rid[:200]}' not found.",
        param="previous_response_id",
        code="previous_response_not_found",
    )


def _not_found(rid: str) -> ProxyError:
    return ProxyError(404, f"Response with id '{rid[:200]}' not found.")


async def stored_chain(store: Store, rid: str, owner: str) -> list[Record] | None:
    """The stored conversation ending at ``rid`` (oldest first), None when it is not there;
    ``StoreUnavailable`` raised as the 503 answer.  The WebSocket transport calls this for a
    ``previous_response_id`` that is not on its socket."""
    try:
        return await store.chain(rid, owner)
    except StoreUnavailable as e:
        raise store_unavailable(e) from None


def history(chain: list[Record], strip_ids: bool) -> list[Any]:
    """Every earlier turn's input and output items, oldest first."""
    out: list[Any] = []
    for rec in chain:
        for item in (*rec.input, *(rec.response.get("output") or ())):
            if strip_ids and isinstance(item, dict) and "id" in item:
                item = {k: v for k, v in item.items() if k != "id"}
            out.append(item)
    return out


def input_items(value: Any) -> list[Any]:
    """A request's ``input`` as a list of items (a string is one user message)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}]
    return list(value) if isinstance(value, list) else []


REFERENCE = "item_reference"


def has_references(body: dict[str, Any]) -> bool:
    items = body.get("input")
    return isinstance(items, list) and any(isinstance(it, dict) and it.get("type") == REFERENCE for it in items)


def _item_not_found(i: int, item_id: str, store_off: bool) -> ProxyError:
    msg = f"Item with id '{item_id[:200]}' not found."
    if store_off:
        msg += (
            " This proxy does not store responses (store.enabled: false), so it cannot resolve item_reference "
            "items: send the items themselves (with store=false)."
        )
    return ProxyError(404, msg, param=f"input[{i}]")


async def resolve_references(store: Store | None, router: Router, body: dict[str, Any], owner: str) -> int:
    """Replace every ``item_reference`` of ``body["input"]`` by the stored item it names (the
    module docstring's table); rewrites ``body`` in place, returns how many were resolved."""
    items = body.get("input")
    route = router.resolve(body["model"]) if isinstance(body.get("model"), str) else None
    if not isinstance(items, list) or route is None:
        return 0  # prepare() answers model_not_found
    refs: list[tuple[int, str]] = []
    for i, it in enumerate(items):
        if isinstance(it, dict) and it.get("type") == REFERENCE:
            rid = it.get("id")
            if not isinstance(rid, str) or not rid:
                raise ProxyError(400, f"input[{i}] (item_reference) has no id", param=f"input[{i}].id")
            refs.append((i, rid))
    if not refs:
        return 0
    prov = route.provider
    upstream = prov.protocol_for("responses")
    own = SPECS[upstream].native_items  # the upstream reads the items (and issues ids) itself
    native = own and "responses_native" in route.quirks
    if store is None:
        found = {}
    else:
        ids = [rid for _, rid in refs]
        try:
            found = await store.items(ids, owner)
        except StoreUnavailable as e:
            raise store_unavailable(e) from None
    out = list(items)
    resolved = 0
    for i, rid in refs:
        got = found.get(rid)
        if got is None:
            if native:
                continue  # the upstream's own id: it answers for it
            raise _item_not_found(i, rid, store is None)
        item = got.item  # the proxy gave its items their ids: no upstream issued them
        if own:
            item = {k: v for k, v in item.items() if k != "id"}
        out[i] = item
        resolved += 1
    body["input"] = out
    return resolved


def context_exceeded(limit: int) -> ProxyError:
    return ProxyError(
        400,
        "Your input exceeds the context window of this model: the stored conversation with this turn is larger "
        f"than this proxy takes in one request ({limit} bytes, server.max_body_bytes). Start a new conversation, "
        "or compact this one.",
        param="input",
        code="context_length_exceeded",
    )


async def begin(
    store: Store | None, router: Router, body: dict[str, Any], owner: str, limit: int | None = None
) -> Turn | None:
    """Before ``prepare()``: settle ``store`` and ``previous_response_id`` (module docstring).
    Rewrites ``body`` in place; the Turn to ``finish``, or None when nothing is stored.
    ``limit``: the most bytes the rebuilt input may take (``server.max_body_bytes``: a chain
    of stored turns is bounded as one request is), else 400 ``context_length_exceeded``."""
    flag = body.get("store")
    prev = body.get("previous_response_id")
    if store is None:
        if has_references(body):
            await resolve_references(None, router, body, owner)  # only a native upstream's ids pass
        if flag is True:
            raise ProxyError(
                400,
                "Storing responses is turned off on this proxy (store.enabled: false): send store=false, or leave "
                "store out.",
                param="store",
                code="store_disabled",
            )
        body["store"] = False
        return None
    route = router.resolve(body["model"]) if isinstance(body.get("model"), str) else None
    if route is None:
        return None  # prepare() answers model_not_found
    prov = route.provider
    upstream = prov.protocol_for("responses")
    own = SPECS[upstream].native_items  # the upstream reads the items (and may store them) itself
    keeps = own and prov.cfg.stores_responses and flag is not False
    turn = Turn(owner=owner, items=input_items(body.get("input")), remote=keeps)
    if prev:
        chain = await stored_chain(store, prev, owner)
        if chain is None:
            raise previous_not_found(prev)
        turn.ancestors = [r.id for r in chain]
        last = chain[-1]
        if not (keeps and last.remote and last.provider == prov.name):
            body["input"] = history(chain, strip_ids=own) + turn.items
            del body["previous_response_id"]
            if limit is not None and len(orjson.dumps(body["input"])) > limit:
                raise context_exceeded(limit)
        turn.answered["previous_response_id"] = prev
    if has_references(body):
        if await resolve_references(store, router, body, owner):
            turn.resolved = True
        if not prev or "previous_response_id" in body:
            turn.items = input_items(body.get("input"))  # stored as resolved
        else:
            turn.items = body["input"][len(body["input"]) - len(turn.items) :]
    if flag is False:
        turn.answered["store"] = False
        return turn if prev or turn.resolved else None
    turn.answered["store"] = True
    return turn


def _with_ids(items: list[Any], rid: str) -> list[Any]:
    """The input items, each without an id given one made of the response id and its
    place: 40 hex digits.  A response id this proxy minted (``resp_`` and the 32 hex digits
    of ``ordered_hex``, the time first) gives its 32, then the place's 8: unique as the
    response id is, in the turn's order, and made without a hash (the SHA-256 and the
    regular expression that checked the id cost a stored request 6–7 µs more in the
    server, their code cold there).  Any other response id: the SHA-256 of it and the
    place, after its first 12 digits when they are hex (the store's index keeps the
    turn's items in order then too)."""
    body = rid[5:] if rid.startswith("resp_") else ""
    ours = len(body) == 32 and _HEX.issuperset(body)
    stem = body[:12] if len(body) >= 12 and _HEX.issuperset(body[:12]) else ""
    out = []
    for i, item in enumerate(items):
        if isinstance(item, dict) and not isinstance(item.get("id"), str):
            kind = item.get("type") or "message"
            if ours:
                digest = f"{body}{i:08x}"
            else:
                digest = stem + hashlib.sha256(f"{rid}:{i}".encode()).hexdigest()[: 40 - len(stem)]
            item = {"id": f"{_ITEM_PREFIX.get(kind, 'item')}_{digest}", **item}
        out.append(item)
    return out


async def finish(store: Store, turn: Turn, p: Prepared, completed_only: bool = False) -> bool:
    """Between the whole answer and its terminal's bytes (``ProxyResponse.hold``): store the
    response object the client receives (``completed_only``: only a completed one, as the
    WebSocket keeps).  True when that object changed: the put failed, it says ``store: false``."""
    if turn.answered.get("store") is not True or (completed_only and p.bridge.terminal != "completed"):
        return False
    resp = p.bridge.response_object()
    if resp is None or not isinstance(resp.get("id"), str):
        return False  # no response object goes out (an error answer)
    prov = p.route.provider  # (after a fallback, the target's)
    rec = Record(
        id=resp["id"],
        owner=turn.owner,
        response=resp,
        input=_with_ids(turn.items, resp["id"]),
        provider=prov.name,
        upstream=p.upstream,
        remote=turn.remote and SPECS[p.upstream].native_items and prov.cfg.stores_responses,
        ancestors=turn.ancestors,
    )
    try:
        await store.put(rec)
        turn.kept = True
        return False
    except (StoreUnavailable, RecordTooLarge) as e:
        log.warning("store_put_failed", request_id=p.request_id, error=str(e))
    except Exception as e:  # whatever it was, the answer goes out
        store.counters.inc("switchboard_store_errors_total", op="put")
        log.exception("store_put_failed", request_id=p.request_id, error=type(e).__name__)
    resp["store"] = False  # what the client can rely on: not stored
    return True


# -- the routes ---------------------------------------------------------------------------


def _json(status: int, obj: Any, rid: str) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json", headers={"x-request-id": rid})


def _rid(request: Request) -> str:
    """The request's id (the client's X-Request-Id when plain), kept for the error handlers."""
    rid: str = new_request_id(request.scope)
    request.state.request_id = rid
    return rid


def _sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events)


_TERMINAL_EVENT = {"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed"}


def replay_events(resp: dict[str, Any]) -> list[dict[str, Any]]:
    """A stored response as the stream that produced it, item by item (``?stream=true``)."""
    events: list[dict[str, Any]] = []

    def emit(ev: dict[str, Any]) -> None:
        ev["sequence_number"] = len(events)
        events.append(ev)

    start = {**resp, "status": "in_progress", "output": [], "usage": None}
    emit({"type": "response.created", "response": start})
    emit({"type": "response.in_progress", "response": start})
    for i, item in enumerate(resp.get("output") or ()):
        emit({"type": "response.output_item.added", "output_index": i, "item": item})
        emit({"type": "response.output_item.done", "output_index": i, "item": item})
    emit({"type": _TERMINAL_EVENT.get(resp.get("status") or "", "response.completed"), "response": resp})
    return events


def routes(app: FastAPI, svc: Any) -> None:
    """``GET /v1/responses/{id}`` (``?stream=true``), ``GET …/input_items``, ``DELETE …``."""

    async def lookup(request: Request, rid: str) -> tuple[Store, Record, str]:
        owner = svc.authorize(request.headers)
        store: Store | None = svc.store
        if store is None:
            raise _not_found(rid)
        try:
            rec = await store.get(rid, owner)
        except StoreUnavailable as e:
            raise store_unavailable(e) from None
        if rec is None:
            raise _not_found(rid)
        return store, rec, owner

    # Each handler reads its id off the path rather than declaring it: a declared parameter
    # makes FastAPI build a pydantic field for it and import pydantic.v1 to check its type
    # (1.4 MB of idle memory for one string).
    @app.get("/v1/responses/{response_id}")
    async def get_response(request: Request) -> Response:
        response_id: str = request.path_params["response_id"]
        rid = _rid(request)
        _, rec, _ = await lookup(request, response_id)
        if request.query_params.get("stream") in ("true", "1"):
            return Response(
                _sse(replay_events(rec.response)),
                media_type="text/event-stream; charset=utf-8",
                headers={"x-request-id": rid},
            )
        return _json(200, rec.response, rid)

    @app.get("/v1/responses/{response_id}/input_items")
    async def list_input_items(request: Request) -> Response:
        response_id: str = request.path_params["response_id"]
        rid = _rid(request)
        _, rec, _ = await lookup(request, response_id)
        q = request.query_params
        order = q.get("order", "desc")
        if order not in ("asc", "desc"):
            raise ProxyError(400, "order must be 'asc' or 'desc'", param="order")
        try:
            limit = int(q.get("limit", "20"))
        except ValueError:
            limit = 0
        if not 1 <= limit <= 100:
            raise ProxyError(400, "limit must be an integer between 1 and 100", param="limit")
        items = rec.input if order == "asc" else list(reversed(rec.input))
        after = q.get("after")
        if after:
            ids = [i.get("id") if isinstance(i, dict) else None for i in items]
            items = items[ids.index(after) + 1 :] if after in ids else []
        page = items[:limit]
        return _json(
            200,
            {
                "object": "list",
                "data": page,
                "first_id": page[0].get("id") if page else None,
                "last_id": page[-1].get("id") if page else None,
                "has_more": len(items) > limit,
            },
            rid,
        )

    @app.delete("/v1/responses/{response_id}")
    async def delete_response(request: Request) -> Response:
        response_id: str = request.path_params["response_id"]
        rid = _rid(request)
        store, rec, owner = await lookup(request, response_id)
        try:
            await store.delete(response_id, owner)
        except StoreUnavailable as e:
            raise store_unavailable(e) from None
        if rec.remote:
            await _forward_delete(svc.router, rec)
        return _json(200, {"id": response_id, "object": "response.deleted", "deleted": True}, rid)


async def _forward_delete(router: Router, rec: Record) -> None:
    """Delete the upstream's own copy too (best effort: the proxy's copy is gone already)."""
    prov = next((r.provider for r in router.routes.values() if r.provider.name == rec.provider), None)
    if prov is None:
        return
    url = prov.url("responses").rstrip("/") + "/" + quote(rec.id, safe="")  # an id is one path segment
    try:
        resp = await prov.client.delete(url, headers=prov.headers, params=prov.cfg.query or None, timeout=prov.timeout)
        status = resp.status_code
    except httpx.HTTPError as e:
        status = 0
        log.warning("upstream_delete_failed", provider=prov.name, error=type(e).__name__)
    log.info("upstream_delete", provider=prov.name, status=status)
