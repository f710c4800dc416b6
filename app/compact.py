"""``POST /v1/responses/compact``: OpenAI's public compaction endpoint, on every upstream.

Theory of operation
-------------------
The endpoint takes ``{model, input, instructions?, previous_response_id?}`` and answers a
*compacted response* ``{"id", "object": "response.compaction", "created_at", "output",
"usage"}`` whose ``output`` is every user message of the input followed by one
``compaction`` item (openai-python ``CompactedResponse``).  It is served by the very
machinery of ``POST /v1/responses``, so it behaves the same on every upstream
(``transformers/compaction.py``): the body becomes a non-streamed Responses request whose
last input item is ``{"type": "compaction_trigger"}``, ``prepare()`` routes it (an upstream
without native compaction gets the summarisation request, a native one the trigger) and
``ProxyResponse`` pumps it, with its timeouts, retries, errors, log line and counters.

The answer is made from the Bridge's Responses answer object by ``Prepared.reshape``
(``compact_answer``) before its status line goes out, so the log line and
``switchboard_requests_total`` count the status the client got:

========================================  ==============================================
the Responses answer                      the client gets
========================================  ==============================================
completed, with compaction item(s)        200 compacted response
failed / incomplete / no compaction item  502 ``{"error"}`` with the response's own error
                                          code (``compaction_failed`` …) and message
an error answer (4xx/5xx)                 passed through unchanged
========================================  ==============================================
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import orjson

from app import accounting
from app.pipeline import ProxyResponse
from app.prepare import new_request_id, scope_headers
from transformers.errors import ProxyError, RequestError
from transformers.ids import random_hex
from transformers.request_check import check_integers, check_values

PATH = "/v1/responses/compact"
_ALLOWED = ("model", "input", "instructions", "previous_response_id")


def compact_body(raw: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The Responses body to send, and the user messages the answer echoes."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        check_integers(raw)  # an integer too long even for a double: name it
        raise RequestError("the request body is not valid JSON", code="invalid_json") from None
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object", code="invalid_type")
    # the request is written again from ``body``: an integer beyond 64 bits is a float by
    # now, and only ``raw`` still shows it (as check_body does for /v1/responses)
    check_values(raw, body)
    items = body.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    elif items is None:
        items = []
    elif not isinstance(items, list):
        raise RequestError("input must be a string or an array of items", param="input", code="invalid_type")
    sent = {k: body[k] for k in _ALLOWED if k in body}
    sent.update(input=[*items, {"type": "compaction_trigger"}], stream=False, store=False)
    return sent, [_user_output(it) for it in items if _is_user_message(it)]


def _is_user_message(it: Any) -> bool:
    return isinstance(it, dict) and it.get("role") == "user" and it.get("type", "message") == "message"


def _user_output(it: dict[str, Any]) -> dict[str, Any]:
    content = it.get("content")
    parts = [{"type": "input_text", "text": content}] if isinstance(content, str) else content
    return {
        "id": it.get("id") or "msg_" + random_hex(),
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": parts if isinstance(parts, list) else [],
    }


def compacted(response: dict[str, Any], users: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    """(status, body) of the compact answer for the Responses answer object ``response``."""
    output = response.get("output")
    items = (
        [it for it in output if isinstance(it, dict) and it.get("type") == "compaction"]
        if isinstance(output, list)
        else []
    )
    if response.get("status") != "completed" or not items:
        error = response.get("error")
        err: dict[str, Any] = error if isinstance(error, dict) else {}
        return 502, {
            "error": {
                "message": err.get("message") or "the upstream gave no compaction for this conversation",
                "type": "upstream_error",
                "param": None,
                "code": err.get("code") or "compaction_failed",
            }
        }
    return 200, {
        "id": response.get("id") or "resp_" + random_hex(),
        "object": "response.compaction",
        "created_at": response.get("created_at") or int(time.time()),
        "output": [*users, *items],
        "usage": response.get("usage"),
    }


def compact_answer(users: list[dict[str, Any]], request_id: str, body: bytes) -> tuple[int, bytes]:
    """(status, body) the client gets for the Bridge's non-streamed answer ``body``."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        answer = {}
    status, obj = compacted(answer if isinstance(answer, dict) else {}, users)
    if status != 200:
        obj["error"]["request_id"] = request_id
    return status, orjson.dumps(obj)


def compact_handler(svc: Any) -> Any:
    """The raw ASGI handler of ``POST /v1/responses/compact`` for the app's ``Service``."""

    async def handler(scope: Any, receive: Any, send: Any) -> None:
        started = time.perf_counter()
        rid = new_request_id(scope)
        scope.setdefault("state", {})["request_id"] = rid
        h = scope_headers(scope)
        try:
            owner = svc.authorize(h)
            raw = await svc.read_body(receive, h.get("content-length"))
            sent, users = compact_body(raw)
            # a compaction is never "incomplete as completed": its one item must be whole
            p = svc.prepare(
                orjson.dumps(sent), "responses", rid, h, started, incomplete_as_completed=False, owner=owner
            )
            ticket = await accounting.admit(svc, owner, p, len(raw))  # its key's limits, as any request
        except (ProxyError, RequestError) as e:
            status = e.status
            err = (
                orjson.loads(e.body(rid))["error"] if isinstance(e, ProxyError) else {**e.to_dict(), "request_id": rid}
            )
            body = orjson.dumps({"error": err})
            headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
            headers.append((b"x-request-id", rid.encode()))
            if isinstance(e, ProxyError):  # (a limit's retry-after)
                headers += [(k.encode(), v.encode()) for k, v in e.headers.items()]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            svc.counters.inc("switchboard_requests_total", route=PATH, client="-", provider="-", status=str(status))
            return
        p.route_name = PATH
        p.reshape = partial(compact_answer, users, rid)
        response = ProxyResponse(p)
        try:
            await response(scope, receive, send)
        finally:
            await accounting.close(svc, owner, ticket, response.p, len(raw))

    return handler
