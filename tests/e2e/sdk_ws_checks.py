"""The openai SDK's own Responses WebSocket client against ``base_url``: lanes, cancel,
steering, inject (run under the 3.x SDK's interpreter, ``.e2e/openai3``).

Theory of operation
-------------------
``python sdk_ws_checks.py < request.json`` (``{"base_url", "api_key", "model", "prompts"}``)
runs five scenarios on the SDK's client, one socket each, and prints one JSON object:

* ``lanes``: ``client.responses.connect()`` under ``AsyncResponsesWebSocketSession`` with
  lanes ``"a"``, ``"b"`` and the default lane; a create on each (``lane.send``), consumed
  concurrently with ``lane.recv()``; ``a``'s upstream stream is slow.  Gives each lane's
  events (type, ``stream_id``), text, final status (``get_final_response``) and the order
  the terminals came in.
* ``cancel``: ``client.beta.responses.connect()``; a create on a slow stream, then
  ``{"type":"response.cancel","response_id"}`` through the connection's ``send_raw`` (the
  SDK has no typed cancel event for this socket) once the first text delta came; gives the
  terminal and the seconds from the cancel to it.
* ``steer``: the same connection; ``connection.response.steer(...)`` on a running
  response; gives the event types and the successor's text.
* ``lane_steer``: a steer (``lane.send``) on a response of the session's lane ``"s"``:
  everything, the successor included, comes to that lane.
* ``refusals``: ``steer`` on an unknown response, ``inject`` into a finished one.

Every event is parsed by the SDK's own ``parse_event`` (its server-event union); a
``response.*`` terminal's ``response`` is validated with the SDK's ``Response`` type.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import openai
from openai import AsyncOpenAI
from openai.lib.responses_websocket import AsyncResponsesWebSocketSession, ResponsesWebSocketLimits
from openai.types.beta.beta_response import BetaResponse
from openai.types.responses import Response

TERMINALS = ("response.completed", "response.failed", "response.incomplete")
LIMITS = ResponsesWebSocketLimits(
    max_lanes=8, max_events_per_lane=4096, max_events=8192, max_bytes_per_lane=1 << 24, max_bytes=1 << 25
)
WAIT = 20.0  # seconds for any one event


def _ev(e: Any) -> dict[str, Any]:
    d = e.to_dict() if hasattr(e, "to_dict") else dict(e)
    return {"type": d.get("type"), "stream_id": d.get("stream_id"), "raw": d}


async def lanes(client: AsyncOpenAI, model: str, prompts: dict[str, str]) -> dict[str, Any]:
    order: list[str] = []
    async with client.responses.connect(websocket_connection_options={"max_size": None}) as conn:
        async with AsyncResponsesWebSocketSession(conn, limits=LIMITS) as session:
            named = {"a": session.lane("a"), "b": session.lane("b"), "default": session.default}

            async def one(name: str) -> dict[str, Any]:
                lane = named[name]
                await lane.send({"type": "response.create", "model": model, "input": prompts[name], "store": False})
                events: list[dict[str, Any]] = []
                while True:
                    e = _ev(await asyncio.wait_for(lane.recv(), WAIT))
                    events.append(e)
                    if e["type"] in TERMINALS or e["type"] == "error":
                        break
                order.append(name)
                final = await asyncio.wait_for(lane.get_final_response(), WAIT)
                Response.model_validate(final.to_dict())
                return {
                    "types": [e["type"] for e in events],
                    "stream_ids": sorted({str(e["stream_id"]) for e in events}),
                    "text": final.output_text,
                    "status": final.status,
                }

            got = await asyncio.gather(*(one(n) for n in named))
    return {"lanes": dict(zip(named, got, strict=True)), "order": order}


async def _until(conn: Any, pred: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        e = _ev(await asyncio.wait_for(conn.recv(), WAIT))
        out.append(e)
        if e["type"] in TERMINALS:
            BetaResponse.model_validate(e["raw"]["response"])
        if pred(e):
            return out


async def cancel(client: AsyncOpenAI, model: str, prompt: str) -> dict[str, Any]:
    async with client.beta.responses.connect() as conn:
        await conn.response.create(model=model, input=prompt, store=False)
        first = await _until(conn, lambda e: e["type"] == "response.output_text.delta")
        rid = first[0]["raw"]["response"]["id"]
        t0 = time.monotonic()
        await conn.send_raw(json.dumps({"type": "response.cancel", "response_id": rid}))
        rest = await _until(conn, lambda e: e["type"] in TERMINALS)
        seconds = time.monotonic() - t0
        end = rest[-1]["raw"]
        # the socket goes on: nothing left to cancel
        await conn.send_raw(json.dumps({"type": "response.cancel"}))
        after = _ev(await asyncio.wait_for(conn.recv(), WAIT))
    return {
        "terminal": end["type"],
        "status": end["response"]["status"],
        "id_matches": end["response"]["id"] == rid,
        "output": [(i["type"], i.get("status")) for i in end["response"]["output"]],
        "seconds": seconds,
        "after": after["raw"].get("error", {}).get("code"),
    }


async def steer(client: AsyncOpenAI, model: str, prompt: str, steer_text: str) -> dict[str, Any]:
    async with client.beta.responses.connect() as conn:
        await conn.response.create(model=model, input=prompt, store=False)
        first = await _until(conn, lambda e: e["type"] == "response.output_text.delta")
        rid = first[0]["raw"]["response"]["id"]
        await conn.response.steer(input=steer_text, previous_response_id=rid)
        rest = await _until(conn, lambda e: e["type"] in TERMINALS and e["raw"]["response"]["id"] != rid)
    kinds = [e["type"] for e in rest]
    cut = next(e["raw"] for e in rest if e["type"] == "response.incomplete")
    i = kinds.index("response.incomplete")
    successor = [e["raw"] for e in rest[i + 1 :]]
    accepted = next(e["raw"] for e in rest if e["type"] == "response.steer.accepted")
    return {
        "types": kinds,
        "accepted_for": accepted["steer"]["previous_response_id"] == rid,
        "reason": cut["response"]["incomplete_details"]["reason"],
        "cut_text": "".join(e["raw"]["delta"] for e in first + rest[:i] if e["type"] == "response.output_text.delta"),
        "successor_previous": successor[0]["response"].get("previous_response_id") == rid,
        "successor_text": "".join(e["delta"] for e in successor if e["type"] == "response.output_text.delta"),
        "successor_status": successor[-1]["response"]["status"],
    }


async def lane_steer(client: AsyncOpenAI, model: str, prompt: str, steer_text: str) -> dict[str, Any]:
    """Steering a response on a named lane of the session: every event of the steered
    response and of its successor comes to that lane, and the lane's final response is the
    successor's."""
    async with client.responses.connect(websocket_connection_options={"max_size": None}) as conn:
        async with AsyncResponsesWebSocketSession(conn, limits=LIMITS) as session:
            lane = session.lane("s")
            await lane.send({"type": "response.create", "model": model, "input": prompt, "store": False})
            events: list[dict[str, Any]] = []
            rid = None
            while True:
                e = _ev(await asyncio.wait_for(lane.recv(), WAIT))
                events.append(e)
                if e["type"] == "response.created" and rid is None:
                    rid = e["raw"]["response"]["id"]
                if e["type"] == "response.output_text.delta":
                    break
            await lane.send({"type": "response.steer", "previous_response_id": rid, "input": steer_text})
            while True:
                e = _ev(await asyncio.wait_for(lane.recv(), WAIT))
                events.append(e)
                if e["type"] in TERMINALS and e["raw"]["response"]["id"] != rid:
                    break
            final = await asyncio.wait_for(lane.get_final_response(), WAIT)
    return {
        "types": [e["type"] for e in events],
        "stream_ids": sorted({str(e["stream_id"]) for e in events}),
        "final_text": final.output_text,
        "final_previous": final.previous_response_id == rid,
    }


async def refusals(client: AsyncOpenAI, model: str, prompt: str) -> dict[str, Any]:
    async with client.beta.responses.connect() as conn:
        await conn.response.steer(input="x", previous_response_id="resp_unknown")
        unknown = _ev(await asyncio.wait_for(conn.recv(), WAIT))["raw"]
        await conn.response.create(model=model, input=prompt, store=False)
        done = await _until(conn, lambda e: e["type"] in TERMINALS)
        rid = done[-1]["raw"]["response"]["id"]
        await conn.response.inject(
            response_id=rid, input=[{"type": "function_call_output", "call_id": "call_x", "output": "ok"}]
        )
        inject = _ev(await asyncio.wait_for(conn.recv(), WAIT))["raw"]
        await conn.response.steer(input="y", previous_response_id=rid)
        late = _ev(await asyncio.wait_for(conn.recv(), WAIT))["raw"]
    return {
        "unknown": (unknown["type"], unknown["error"]["code"]),
        "inject": (inject["type"], inject["error"]["code"], inject["input"][0]["call_id"]),
        "late": (late["type"], late["error"]["code"]),
    }


async def run(req: dict[str, Any]) -> dict[str, Any]:
    p = req["prompts"]
    async with AsyncOpenAI(base_url=req["base_url"], api_key=req["api_key"], max_retries=0) as client:
        out: dict[str, Any] = {"sdk": openai.__version__}
        out["lanes"] = await lanes(client, req["model"], {"a": p["a"], "b": p["b"], "default": p["default"]})
        out["cancel"] = await cancel(client, req["model"], p["slow"])
        out["steer"] = await steer(client, req["model"], p["slow"], p["steer"])
        out["lane_steer"] = await lane_steer(client, req["model"], p["slow"], p["steer"])
        out["refusals"] = await refusals(client, req["model"], p["b"])
        return out


def main() -> int:
    req = json.load(sys.stdin)
    try:
        out = asyncio.run(run(req))
    except Exception as exc:  # the caller shows it with the proxy's side of the story
        out = {"exception": f"{type(exc).__name__}: {exc!r}"}
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
