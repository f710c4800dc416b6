"""The Responses WebSocket transport (app/ws.py) on a real uvicorn server and a real
WebSocket client (the ``websockets`` library), upstreams scripted by an httpx transport."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from app.main import create_app
from tests.integration.conftest import chat_chunk, make_config, resp_stream_two_calls, sse_response

KEY = "sk-client-ws"
AUTH = {"Authorization": f"Bearer {KEY}", "openai-beta": "responses_websockets=2026-02-06"}


class Upstream(httpx.AsyncBaseTransport):
    """Answers each upstream request with the next scripted response; records the bodies."""

    def __init__(self, answers: list[Callable[[dict[str, Any]], httpx.Response]]) -> None:
        self.answers = list(answers)
        self.bodies: list[dict[str, Any]] = []
        self.closed = asyncio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = orjson.loads(await request.aread())
        self.bodies.append(body)
        r = self.answers.pop(0)(body)
        if isinstance(r.stream, httpx.ByteStream):  # built from bytes: hand it over unread, as a transport does
            return httpx.Response(r.status_code, headers=r.headers, stream=httpx.ByteStream(r.content))
        return r


SERVICES: list[Any] = []  # the app's Service, per server started (the latest last)


@asynccontextmanager
async def serving(
    upstream: httpx.AsyncBaseTransport, *, keys: list[Any] | None = None, **server: Any
) -> AsyncIterator[str]:
    app = create_app(make_config(auth={"keys": keys or [KEY]}, server=server), transport=upstream)
    SERVICES.append(app.state.service)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="on", log_level="warning", ws="websockets-sansio")
    srv = uvicorn.Server(config)
    task = asyncio.create_task(srv.serve())
    for _ in range(500):
        if srv.started:
            break
        await asyncio.sleep(0.01)
    port = srv.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        await asyncio.wait_for(task, 10)


async def events_until_terminal(ws: ClientConnection, timeout: float = 5) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while True:
            msg = await ws.recv()
            assert isinstance(msg, str), "every server frame is a text frame"
            ev = orjson.loads(msg)
            out.append(ev)
            if ev["type"] in ("response.completed", "response.failed", "response.incomplete", "error"):
                if ev["type"] != "error" or "status" in ev:
                    return out


def create(model: str, items: list[Any], **extra: Any) -> str:
    return orjson.dumps(
        {"type": "response.create", "model": model, "input": items, "stream": True, "store": False, **extra}
    ).decode()


USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]}


def chat_tool_turn(_: dict[str, Any]) -> httpx.Response:
    return sse_response(
        [
            chat_chunk({"role": "assistant", "content": ""}),
            chat_chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_up_1",
                            "type": "function",
                            "function": {"name": "exec_command", "arguments": '{"cmd":"ls"}'},
                        }
                    ]
                }
            ),
            chat_chunk({}, "tool_calls"),
        ],
        done=True,
    )


def chat_text_turn(text: str) -> Callable[[dict[str, Any]], httpx.Response]:
    def answer(_: dict[str, Any]) -> httpx.Response:
        return sse_response([chat_chunk({"role": "assistant", "content": text}), chat_chunk({}, "stop")], done=True)

    return answer


TOOLS = [
    {
        "type": "function",
        "name": "exec_command",
        "description": "run",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    }
]


async def test_tool_turn_then_continuation_rebuilds_the_full_history_for_a_chat_upstream() -> None:
    up = Upstream([chat_tool_turn, chat_text_turn("two files")])
    async with serving(up) as host, connect(f"ws://{host}/v1/responses", additional_headers=AUTH) as ws:
        # warm-up: answered by the proxy alone
        await ws.send(create("chat-model", [USER], tools=TOOLS, generate=False, instructions="be brief"))
        warm = await events_until_terminal(ws)
        assert [e["type"] for e in warm] == ["response.created", "response.in_progress", "response.completed"]
        assert warm[-1]["response"]["output"] == []
        assert up.bodies == []
        warm_id = warm[-1]["response"]["id"]

        # turn 1: continues the warm-up with no new items, as Codex does
        await ws.send(create("chat-model", [], tools=TOOLS, previous_response_id=warm_id, instructions="be brief"))
        t1 = await events_until_terminal(ws)
        assert t1[-1]["type"] == "response.completed"
        calls = [e["item"] for e in t1 if e["type"] == "response.output_item.done"]
        assert [c["type"] for c in calls] == ["function_call"]
        call = calls[0]
        assert call["arguments"] == '{"cmd":"ls"}'
        assert [m["role"] for m in up.bodies[0]["messages"]] == ["system", "user"]

        # turn 2: only the tool output, chained on turn 1
        out = {"type": "function_call_output", "call_id": call["call_id"], "output": "a.py\nb.py"}
        await ws.send(
            create(
                "chat-model", [out], tools=TOOLS, previous_response_id=t1[-1]["response"]["id"], instructions="be brief"
            )
        )
        t2 = await events_until_terminal(ws)
        assert t2[-1]["type"] == "response.completed"
        text = "".join(e["delta"] for e in t2 if e["type"] == "response.output_text.delta")
        assert text == "two files"

    msgs = up.bodies[1]["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool"]
    assert msgs[2]["tool_calls"][0]["function"] == {"name": "exec_command", "arguments": '{"cmd":"ls"}'}
    assert msgs[3]["tool_call_id"] == msgs[2]["tool_calls"][0]["id"]
    assert msgs[3]["content"] == "a.py\nb.py"


async def test_unknown_previous_response_id_is_previous_response_not_found_and_the_socket_stays_usable() -> None:
    up = Upstream([chat_text_turn("fresh")])
    async with serving(up) as host, connect(f"ws://{host}/v1/responses", additional_headers=AUTH) as ws:
        await ws.send(create("chat-model", [USER], previous_response_id="resp_from_another_socket"))
        err = orjson.loads(await ws.recv())
        assert err["type"] == "error" and err["status"] == 400
        assert err["error"]["code"] == "previous_response_not_found"
        assert err["error"]["param"] == "previous_response_id"
        # the client re-sends the whole conversation on the same socket: it works
        await ws.send(create("chat-model", [USER]))
        evs = await events_until_terminal(ws)
        assert evs[-1]["type"] == "response.completed"
    assert len(up.bodies) == 1


async def test_responses_upstream_gets_the_rebuilt_input_and_no_previous_response_id() -> None:
    def first(_: dict[str, Any]) -> httpx.Response:
        return sse_response(resp_stream_two_calls(), event_names=True)

    up = Upstream([first, first])
    async with serving(up) as host, connect(f"ws://{host}/v1/responses", additional_headers=AUTH) as ws:
        await ws.send(create("resp-model", [USER]))
        t1 = await events_until_terminal(ws)
        assert t1[-1]["type"] == "response.completed"
        done = [e["item"] for e in t1 if e["type"] == "response.output_item.done"]
        outs = [
            {"type": "function_call_output", "call_id": d["call_id"], "output": "ok"}
            for d in done
            if d["type"] == "function_call"
        ]
        await ws.send(create("resp-model", outs, previous_response_id=t1[-1]["response"]["id"]))
        t2 = await events_until_terminal(ws)
        assert t2[-1]["type"] == "response.completed"
    second = up.bodies[1]
    assert "previous_response_id" not in second
    kinds = [i.get("type") for i in second["input"]]
    assert kinds[0] == "message"
    assert kinds.count("function_call") == 2 and kinds.count("function_call_output") == 2
    assert kinds.index("function_call_output") > kinds.index("function_call")


async def test_errors_before_the_first_byte_are_error_frames_with_the_http_status() -> None:
    def rate_limited(_: dict[str, Any]) -> httpx.Response:
        return httpx.Response(
            429,
            headers={"retry-after": "7", "content-type": "application/json"},
            content=b'{"error":{"message":"slow down","type":"rate_limit_error","code":"rate_limit_exceeded"}}',
        )

    up = Upstream([rate_limited])
    async with serving(up) as host, connect(f"ws://{host}/v1/responses", additional_headers=AUTH) as ws:
        await ws.send(create("no-such-model", [USER]))
        e1 = orjson.loads(await ws.recv())
        assert e1["type"] == "error" and e1["status"] == 404 and e1["error"]["code"] == "model_not_found"
        await ws.send(create("chat-model", [USER]))
        e2 = orjson.loads(await ws.recv())
        assert e2["type"] == "error" and e2["status"] == 429
        assert e2["error"]["code"] == "rate_limit_exceeded" and "slow down" in e2["error"]["message"]
        assert e2["headers"]["retry-after"] == "7" and e2["headers"]["x-request-id"].startswith("req_")
        # bad frames: an error each, the socket stays open
        await ws.send("not json")
        assert orjson.loads(await ws.recv())["error"]["code"] == "invalid_json"
        await ws.send(b"\x00binary")
        assert orjson.loads(await ws.recv())["error"]["code"] == "invalid_frame"
        await ws.send('{"type":"response.cancel"}')  # nothing running
        assert orjson.loads(await ws.recv())["error"]["code"] == "response_cancel_not_active"
        await ws.send('{"type":"response.bogus","stream_id":"a"}')
        unknown = orjson.loads(await ws.recv())
        assert unknown["error"]["code"] == "unsupported_frame_type" and "response.bogus" in unknown["error"]["message"]
        assert unknown["stream_id"] == "a"
        await ws.send('{"type":"response.processed","response_id":"resp_x"}')  # acknowledged silently
        await ws.send(create("chat-model", [{"type": "message", "role": "user", "content": 5}]))
        bad = orjson.loads(await ws.recv())
        assert bad["status"] == 400 and bad["error"]["type"] == "invalid_request_error"
        await ws.send(create("chat-model", [USER])[:-1] + ',"metadata":{"n":18446744073709551616}}')
        big = orjson.loads(await ws.recv())
        assert big["status"] == 400 and big["error"]["code"] == "integer_above_max_value"
        assert big["error"]["param"] == "metadata.n"


async def test_a_stream_failing_midway_ends_with_its_terminal_and_the_transcript_is_dropped() -> None:
    def cut(_: dict[str, Any]) -> httpx.Response:
        return httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            content=b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
            b'"delta":{"content":"par"},"finish_reason":null}]}\n\n',
        )

    up = Upstream([chat_text_turn("ok"), cut])
    async with serving(up) as host, connect(f"ws://{host}/v1/responses", additional_headers=AUTH) as ws:
        await ws.send(create("chat-model", [USER]))
        t1 = await events_until_terminal(ws)
        await ws.send(create("chat-model", [USER], previous_response_id=t1[-1]["response"]["id"]))
        t2 = await events_until_terminal(ws)
        assert t2[-1]["type"] == "response.failed"
        assert [e["type"] for e in t2].count("response.failed") == 1
        await ws.send(create("chat-model", [USER], previous_response_id=t2[-1]["response"]["id"]))
        err = orjson.loads(await ws.recv())
        assert err["error"]["code"] == "previous_response_not_found"


async def test_handshake_refusals() -> None:
    up = Upstream([])
    async with serving(up, websocket={"max_connections": 1}) as host:
        with pytest.raises(InvalidStatus) as no_key:
            async with connect(f"ws://{host}/v1/responses"):
                pass
        assert no_key.value.response.status_code == 401
        async with connect(f"ws://{host}/v1/responses", additional_headers=AUTH):
            with pytest.raises(InvalidStatus) as full:
                async with connect(f"ws://{host}/v1/responses", additional_headers=AUTH):
                    pass
            assert full.value.response.status_code == 426
            assert b"websocket_capacity" in full.value.response.body
        with pytest.raises(InvalidStatus) as browser:
            async with connect(
                f"ws://{host}/v1/responses", additional_headers={**AUTH, "Origin": "https://evil.example"}
            ):
                pass
        assert browser.value.response.status_code == 403
    async with serving(up, websocket={"enabled": False}) as host:
        with pytest.raises(InvalidStatus) as off:
            async with connect(f"ws://{host}/v1/responses", additional_headers=AUTH):
                pass
        assert off.value.response.status_code == 426


async def test_idle_timeout_and_lifetime_limit() -> None:
    up = Upstream([])
    async with serving(up, websocket={"idle_timeout_seconds": 0.3}) as host:
        async with connect(f"ws://{host}/v1/responses", additional_headers=AUTH) as ws:
            t0 = time.monotonic()
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 5)
            assert time.monotonic() - t0 < 3
    async with serving(up, websocket={"max_lifetime_seconds": 0.2}) as host:
        async with connect(f"ws://{host}/v1/responses", additional_headers=AUTH) as ws:
            await asyncio.sleep(0.3)
            await ws.send(create("chat-model", [USER]))
            err = orjson.loads(await ws.recv())
            assert err["error"]["code"] == "websocket_connection_limit_reached"
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 5)
    assert up.bodies == []


async def test_client_leaving_mid_turn_closes_the_upstream() -> None:
    closed = asyncio.Event()

    class Slow(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}\n\n'
            await asyncio.sleep(30)

        async def aclose(self) -> None:
            closed.set()

    def slow(_: dict[str, Any]) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Slow())

    up = Upstream([slow])
    async with serving(up) as host:
        ws = await connect(f"ws://{host}/v1/responses", additional_headers=AUTH)
        await ws.send(create("chat-model", [USER]))
        first = orjson.loads(await ws.recv())
        assert first["type"] == "response.created"
        await ws.close()
        await asyncio.wait_for(closed.wait(), 5)


async def test_drain_closes_idle_sockets_at_once_and_busy_ones_after_their_turn() -> None:
    release = asyncio.Event()

    class Held(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield orjson.dumps(chat_chunk({"role": "assistant", "content": "held "})).join((b"data: ", b"\n\n"))
            await release.wait()
            yield orjson.dumps(chat_chunk({"content": "done"}, "stop")).join((b"data: ", b"\n\n")) + b"data: [DONE]\n\n"

    def held(_: dict[str, Any]) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Held())

    up = Upstream([held])
    async with serving(up) as host:
        svc = SERVICES[-1]
        idle = await connect(f"ws://{host}/v1/responses", additional_headers=AUTH)
        busy = await connect(f"ws://{host}/v1/responses", additional_headers=AUTH)
        await busy.send(create("chat-model", [USER]))
        assert orjson.loads(await busy.recv())["type"] == "response.created"
        for _ in range(100):
            if len(svc.drain.open) >= 3:  # two sockets and the turn in flight
                break
            await asyncio.sleep(0.01)
        svc.drain.begin()
        with pytest.raises(ConnectionClosed) as gone:
            await asyncio.wait_for(idle.recv(), 5)
        assert gone.value.rcvd is not None and gone.value.rcvd.code == 1012
        release.set()
        evs = await events_until_terminal(busy)
        assert evs[-1]["type"] == "response.completed"
        text = "".join(e["delta"] for e in evs if e["type"] == "response.output_text.delta")
        assert text == "held done"  # the turn in flight ended whole
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(busy.recv(), 5)
        assert svc.counters.get("switchboard_websocket_connections_total", event="closed_shutdown") == 2


async def test_stored_turns_over_the_socket_and_a_reconnect_continuing_from_the_store() -> None:
    """store=true turns on a socket are stored (retrievable over HTTP, scoped to the key);
    a new socket continuing one of them is rebuilt from the store; an unknown id is
    previous_response_not_found."""
    up = Upstream([chat_text_turn("one"), chat_text_turn("two"), chat_text_turn("three")])
    keys = [{"name": "alice", "key": KEY}, {"name": "bob", "key": "sk-bob"}]
    async with serving(up, keys=keys) as host:
        async with connect(f"ws://{host}/v1/responses", additional_headers=AUTH) as ws:
            await ws.send(create("chat-model", [USER], store=True))
            t1 = (await events_until_terminal(ws))[-1]["response"]
            assert t1["store"] is True
            u2 = {"type": "message", "role": "user", "content": "and then?"}
            await ws.send(create("chat-model", [u2], store=True, previous_response_id=t1["id"]))
            t2 = (await events_until_terminal(ws))[-1]["response"]
            assert t2["previous_response_id"] == t1["id"]
        async with httpx.AsyncClient(base_url=f"http://{host}") as http:
            got = await http.get(f"/v1/responses/{t2['id']}", headers={"Authorization": f"Bearer {KEY}"})
            assert got.status_code == 200 and got.json()["id"] == t2["id"]
            items = await http.get(f"/v1/responses/{t2['id']}/input_items", headers={"Authorization": f"Bearer {KEY}"})
            assert [i.get("content") for i in items.json()["data"]] == ["and then?"]
            other = await http.get(f"/v1/responses/{t2['id']}", headers={"Authorization": "Bearer sk-bob"})
            assert other.status_code == 404
        # a new socket (a reconnecting client) continues the stored conversation
        async with connect(f"ws://{host}/v1/responses", additional_headers=AUTH) as ws:
            u3 = {"type": "message", "role": "user", "content": "last"}
            await ws.send(create("chat-model", [u3], store=False, previous_response_id=t2["id"]))
            t3 = await events_until_terminal(ws)
            assert t3[-1]["type"] == "response.completed"
            await ws.send(create("chat-model", [u3], previous_response_id="resp_nobody_knows"))
            err = orjson.loads(await ws.recv())
            assert err["status"] == 400 and err["error"]["code"] == "previous_response_not_found"
        # another key cannot continue it
        bob = {**AUTH, "Authorization": "Bearer sk-bob"}
        async with connect(f"ws://{host}/v1/responses", additional_headers=bob) as ws:
            await ws.send(create("chat-model", [USER], previous_response_id=t2["id"]))
            err = orjson.loads(await ws.recv())
            assert err["error"]["code"] == "previous_response_not_found"
    third = up.bodies[2]["messages"]
    assert [m["role"] for m in third] == ["user", "assistant", "user", "assistant", "user"]
    assert [m["content"] for m in third][1:] == ["one", "and then?", "two", "last"]


async def test_a_stored_turn_is_in_the_store_before_its_completed_frame() -> None:
    """The put of a stored turn ends before its response.completed frame goes out: while the
    put waits, the client has the events before it and not the terminal."""
    up = Upstream([chat_text_turn("one")])
    async with serving(up) as host:
        store = SERVICES[-1].store
        entered, release = asyncio.Event(), asyncio.Event()
        real = store.put

        async def put(rec: Any) -> None:
            entered.set()
            await release.wait()
            await real(rec)

        store.put = put
        async with connect(f"ws://{host}/v1/responses", additional_headers=AUTH) as ws:
            await ws.send(create("chat-model", [USER], store=True))
            reader = asyncio.create_task(events_until_terminal(ws))
            await asyncio.wait_for(entered.wait(), 5)
            await asyncio.sleep(0.2)  # (room for a terminal frame that did not wait)
            assert not reader.done()
            release.set()
            events = await reader
        assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
        final = events[-1]["response"]
        assert final["store"] is True
        async with httpx.AsyncClient(base_url=f"http://{host}") as http:
            got = await http.get(f"/v1/responses/{final['id']}", headers={"Authorization": f"Bearer {KEY}"})
            assert got.status_code == 200 and got.json()["output"] == final["output"]
