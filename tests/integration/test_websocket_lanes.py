"""The Responses WebSocket's lanes, cancel, steering and inject (app/ws.py,
transformers/ws_lanes.py) on a real uvicorn server and a real WebSocket client, a Chat
upstream scripted by an httpx transport that can hold its stream open."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import orjson
from websockets.asyncio.client import ClientConnection, connect

from tests.integration.conftest import chat_chunk
from tests.integration.test_websocket import AUTH, SERVICES, TOOLS, USER, create, serving

TERMINALS = ("response.completed", "response.failed", "response.incomplete")


def sse(chunk: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


class Held(httpx.AsyncByteStream):
    """Some chunks, then nothing until ``release`` (or the proxy closes it), then the rest."""

    def __init__(self, before: list[bytes], after: list[bytes], release: asyncio.Event | None = None) -> None:
        self.before = before
        self.after = after
        self.release = release or asyncio.Event()
        self.closed = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for b in self.before:
            yield b
        await self.release.wait()
        for b in self.after:
            yield b

    async def aclose(self) -> None:
        self.closed.set()


class Scripted(httpx.AsyncBaseTransport):
    """Answers by the last user text of the Chat request; records the bodies."""

    def __init__(self, by_text: dict[str, Callable[[], httpx.Response]]) -> None:
        self.by_text = by_text
        self.bodies: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = orjson.loads(await request.aread())
        self.bodies.append(body)
        last = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        text = last if isinstance(last, str) else "".join(p.get("text", "") for p in last)
        return self.by_text[text]()


def streamed(held: Held) -> Callable[[], httpx.Response]:
    return lambda: httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=held)


def text_answer(text: str) -> Callable[[], httpx.Response]:
    body = sse(chat_chunk({"role": "assistant", "content": text})) + sse(chat_chunk({}, "stop")) + b"data: [DONE]\n\n"
    return lambda: httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


async def recv(ws: ClientConnection, timeout: float = 5) -> dict[str, Any]:
    msg = await asyncio.wait_for(ws.recv(), timeout)
    assert isinstance(msg, str)
    return orjson.loads(msg)


async def until(ws: ClientConnection, pred: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        ev = await recv(ws)
        out.append(ev)
        if pred(ev):
            return out


def is_terminal(ev: dict[str, Any]) -> bool:
    return ev["type"] in TERMINALS or (ev["type"] == "error" and "status" in ev)


async def test_cancel_stops_the_upstream_at_once_and_ends_the_response_cancelled() -> None:
    held = Held([sse(chat_chunk({"role": "assistant", "content": "hello "}))], [sse(chat_chunk({}, "stop"))])
    up = Scripted({"slow": streamed(held), "next": text_answer("fine")})
    async with serving(up) as host, connect(f"ws://{host}/v1/responses", additional_headers=AUTH) as ws:
        await ws.send(create("chat-model", [user("slow")]))
        first = await until(ws, lambda e: e["type"] == "response.output_text.delta")
        rid = first[0]["response"]["id"]
        await ws.send(orjson.dumps({"type": "response.cancel", "response_id": rid}).decode())
        rest = await until(ws, is_terminal)
        await asyncio.wait_for(held.closed.wait(), 5)  # the upstream call was stopped
        end = rest[-1]
        assert end["type"] == "response.failed" and end["response"]["status"] == "cancelled"
        assert end["response"]["id"] == rid and end["response"]["error"] is None
        out = end["response"]["output"]
        assert [i["type"] for i in out] == ["message"] and out[0]["status"] == "incomplete"
        assert out[0]["content"][0]["text"] == "hello "
        seqs = [e["sequence_number"] for e in first + rest]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        # nothing left to cancel: an error, the socket stays usable
        await ws.send('{"type":"response.cancel"}')
        err = await recv(ws)
        assert err["type"] == "error" and err["error"]["code"] == "response_cancel_not_active"
        await ws.send(create("chat-model", [user("next")]))
        again = await until(ws, is_terminal)
        assert again[-1]["type"] == "response.completed"
    svc = SERVICES[-1]
    assert svc.counters.get("switchboard_websocket_events_total", event="cancel") >= 1


async def test_cancel_before_the_upstream_answers_and_on_a_named_lane() -> None:
    class Never(httpx.AsyncBaseTransport):
        def __init__(self) -> None:
            self.cancelled = asyncio.Event()

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            raise AssertionError("not reached")

    up = Never()
    async with serving(up) as host, connect(f"ws://{host}/v1/responses", additional_headers=AUTH) as ws:
        await ws.send(create("chat-model", [USER], stream_id="lane-1"))
        await asyncio.sleep(0.1)
        await ws.send('{"type":"response.cancel","stream_id":"lane-1"}')
        evs = await until(ws, is_terminal)
        assert [e["type"] for e in evs] == ["response.created", "response.in_progress", "response.failed"]
        assert all(e["stream_id"] == "lane-1" for e in evs)
        assert evs[-1]["response"]["status"] == "cancelled" and evs[-1]["response"]["output"] == []
        await asyncio.wait_for(up.cancelled.wait(), 5)


async def test_lanes_run_at_the_same_time_fifo_within_a_lane_and_echo_stream_id() -> None:
    release = asyncio.Event()
    slow = Held([sse(chat_chunk({"role": "assistant", "content": "a-1 "}))], [sse(chat_chunk({}, "stop"))], release)
    up = Scripted({"a1": streamed(slow), "a2": text_answer("a-2"), "b1": text_answer("b-1"), "d1": text_answer("d-1")})
    async with serving(up) as host, connect(f"ws://{host}/v1/responses", additional_headers=AUTH) as ws:
        await ws.send(create("chat-model", [user("a1")], stream_id="a"))
        await ws.send(create("chat-model", [user("a2")], stream_id="a"))  # waits for a1 (FIFO)
        await ws.send(create("chat-model", [user("b1")], stream_id="b"))
        await ws.send(create("chat-model", [user("d1")]))  # the default lane
        events: list[dict[str, Any]] = []
        ends: list[str | None] = []
        while len(ends) < 4:
            ev = await recv(ws)
            events.append(ev)
            if ev["type"] in TERMINALS:
                ends.append(ev.get("stream_id"))
                if len(ends) == 2:  # b and the default lane ended while a1 still streams
                    assert set(ends) == {"b", None}
                    release.set()
        assert ends[2:] == ["a", "a"]
        by_lane: dict[str | None, list[dict[str, Any]]] = {}
        for ev in events:
            by_lane.setdefault(ev.get("stream_id"), []).append(ev)
        texts = {
            k: "".join(e["delta"] for e in v if e["type"] == "response.output_text.delta") for k, v in by_lane.items()
        }
        assert texts == {"a": "a-1 a-2", "b": "b-1", None: "d-1"}
        kinds_a = [e["type"] for e in by_lane["a"]]
        assert kinds_a.count("response.created") == 2
        # FIFO: the second create of lane a starts after the first one's terminal
        assert kinds_a.index("response.completed") < len(kinds_a) - 1 - kinds_a[::-1].index("response.created")
        assert all("stream_id" not in e for e in by_lane[None])
        # a continuation may fork from another lane's response
        b_id = next(e for e in by_lane["b"] if e["type"] == "response.completed")["response"]["id"]
        up.by_text["fork"] = text_answer("forked")
        await ws.send(create("chat-model", [user("fork")], stream_id="c", previous_response_id=b_id))
        fork = await until(ws, is_terminal)
        assert fork[-1]["type"] == "response.completed" and fork[-1]["stream_id"] == "c"
    assert [m.get("content") for m in up.bodies[-1]["messages"]][-2:] == ["b-1", "fork"]


async def test_invalid_stream_id_and_the_lane_limit() -> None:
    up = Scripted({"x": text_answer("x")})
    async with serving(up, websocket={"max_lanes": 1}) as host:
        async with connect(f"ws://{host}/v1/responses", additional_headers=AUTH) as ws:
            await ws.send(create("chat-model", [user("x")], stream_id="bad id"))
            err = await recv(ws)
            assert err["error"]["code"] == "invalid_stream_id" and err["error"]["param"] == "stream_id"
            await ws.send(create("chat-model", [user("x")], stream_id="one"))
            assert (await until(ws, is_terminal))[-1]["type"] == "response.completed"
            await ws.send(create("chat-model", [user("x")], stream_id="two"))
            err = await recv(ws)
            assert err["error"]["code"] == "websocket_stream_limit_reached" and err["stream_id"] == "two"


async def test_steering_ends_the_response_steered_and_a_successor_continues_with_the_input() -> None:
    held = Held([sse(chat_chunk({"role": "assistant", "content": "part one"}))], [sse(chat_chunk({}, "stop"))])
    up = Scripted({"write it": streamed(held), "shorter please": text_answer("short version")})
    async with serving(up) as host, connect(f"ws://{host}/v1/responses", additional_headers=AUTH) as ws:
        await ws.send(create("chat-model", [user("write it")], instructions="be kind", stream_id="main"))
        first = await until(ws, lambda e: e["type"] == "response.output_text.delta")
        rid = first[0]["response"]["id"]
        await ws.send(
            orjson.dumps({"type": "response.steer", "previous_response_id": rid, "input": "shorter please"}).decode()
        )
        evs = await until(ws, lambda e: e["type"] in TERMINALS and e["response"]["id"] != rid)
        await asyncio.wait_for(held.closed.wait(), 5)
        kinds = [e["type"] for e in evs]
        acc = evs[kinds.index("response.steer.accepted")]
        assert acc["steer"]["previous_response_id"] == rid and acc["steer"]["id"].startswith("steer_")
        assert acc["stream_id"] == "main"
        steered = evs[kinds.index("response.incomplete")]
        assert steered["response"]["id"] == rid
        assert steered["response"]["incomplete_details"] == {"reason": "steered"}
        assert steered["response"]["output"][0]["content"][0]["text"] == "part one"
        succ = evs[kinds.index("response.incomplete") + 1]
        assert succ["type"] == "response.created" and succ["response"]["id"] != rid
        assert succ["response"]["previous_response_id"] == rid and succ["stream_id"] == "main"
        assert evs[-1]["type"] == "response.completed"
        assert "".join(e["delta"] for e in evs[kinds.index("response.created") :] if "delta" in e) == "short version"
        # the client continues from the successor
        up.by_text["and then"] = text_answer("done")
        await ws.send(
            create("chat-model", [user("and then")], stream_id="main", previous_response_id=evs[-1]["response"]["id"])
        )
        assert (await until(ws, is_terminal))[-1]["type"] == "response.completed"
    second = up.bodies[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[2]["content"] == "part one" and second[3]["content"] == "shorter please"
    assert [m.get("content") for m in up.bodies[2]["messages"]][-3:] == ["shorter please", "short version", "and then"]


async def test_steering_during_a_tool_call_stays_pending_until_the_continuation() -> None:
    release = asyncio.Event()
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "exec_command", "arguments": "{}"}}
    held = Held(
        [sse(chat_chunk({"role": "assistant", "content": None, "tool_calls": [call]}))],
        [sse(chat_chunk({}, "tool_calls")), b"data: [DONE]\n\n"],
        release,
    )
    up = Scripted({"run ls": streamed(held), "also list hidden files": text_answer("ok")})
    async with serving(up) as host, connect(f"ws://{host}/v1/responses", additional_headers=AUTH) as ws:
        await ws.send(create("chat-model", [user("run ls")], tools=TOOLS))
        first = await until(ws, lambda e: e["type"] == "response.output_item.added")
        rid = first[0]["response"]["id"]
        await ws.send(
            orjson.dumps(
                {"type": "response.steer", "previous_response_id": rid, "input": [user("also list hidden files")]}
            ).decode()
        )
        acc = await until(ws, lambda e: e["type"] == "response.steer.accepted")
        release.set()
        evs = await until(ws, lambda e: e["type"] == "response.steer.pending")
        kinds = [e["type"] for e in evs]
        assert "response.completed" in kinds and "response.incomplete" not in kinds
        pend = evs[-1]
        assert pend["reason"] == "waiting_for_required_input"
        call_id = next(e for e in evs if e["type"] == "response.output_item.done")["item"]["call_id"]
        assert pend["required_input"] == [{"type": "function_call_output", "call_id": call_id, "name": "exec_command"}]
        assert pend["steer"] == {"id": acc[-1]["steer"]["id"], "previous_response_id": rid}
        out = {"type": "function_call_output", "call_id": call_id, "output": "a.txt"}
        await ws.send(create("chat-model", [out], tools=TOOLS, previous_response_id=rid))
        assert (await until(ws, is_terminal))[-1]["type"] == "response.completed"
    # the queued input went first in the continuation; a Chat upstream gets the tool result
    # right after its call (the translation keeps a call and its output together)
    second = up.bodies[1]["messages"]
    assert [(m["role"], m.get("content")) for m in second] == [
        ("user", "run ls"),
        ("assistant", None),
        ("tool", "a.txt"),
        ("user", "also list hidden files"),
    ]


async def test_steer_and_inject_refusals() -> None:
    up = Scripted({"hi": text_answer("hello")})
    async with serving(up) as host, connect(f"ws://{host}/v1/responses", additional_headers=AUTH) as ws:

        async def steer(**kw: Any) -> dict[str, Any]:
            await ws.send(orjson.dumps({"type": "response.steer", **kw}).decode())
            return await recv(ws)

        f = await steer(previous_response_id="resp_nope", input="x")
        assert f["type"] == "response.steer.failed" and f["error"]["code"] == "response_not_found"
        assert f["steer"] == {"previous_response_id": "resp_nope", "input": "x"}
        f = await steer(previous_response_id="resp_nope", input=[{"role": "assistant", "content": "x"}])
        assert f["error"]["code"] == "invalid_input" and f["error"]["type"] == "invalid_request_error"
        f = await steer(previous_response_id="resp_nope", input="x", stream_id="a")
        assert f["error"]["code"] == "invalid_input"
        await ws.send(create("chat-model", [user("hi")]))
        done = (await until(ws, is_terminal))[-1]["response"]["id"]
        f = await steer(previous_response_id=done, input="x")
        assert f["error"]["code"] == "response_already_completed"
        await ws.send(orjson.dumps({"type": "response.inject", "response_id": done, "input": [USER]}).decode())
        i = await recv(ws)
        assert i["type"] == "response.inject.failed" and i["error"]["code"] == "response_already_completed"
        assert i["input"] == [USER] and i["response_id"] == done
        await ws.send(orjson.dumps({"type": "response.inject", "response_id": "resp_x", "input": []}).decode())
        assert (await recv(ws))["error"]["code"] == "response_not_found"


async def test_at_most_max_active_responses_run_at_once_and_inject_is_answered_at_the_end() -> None:
    release = asyncio.Event()
    slow = Held([sse(chat_chunk({"role": "assistant", "content": "first "}))], [sse(chat_chunk({}, "stop"))], release)
    up = Scripted({"one": streamed(slow), "two": text_answer("second")})
    async with serving(up, websocket={"max_active_responses": 1}) as host:
        async with connect(f"ws://{host}/v1/responses", additional_headers=AUTH) as ws:
            await ws.send(create("chat-model", [user("one")], stream_id="a"))
            first = await until(ws, lambda e: e["type"] == "response.output_text.delta")
            rid = first[0]["response"]["id"]
            await ws.send(create("chat-model", [user("two")], stream_id="b"))
            inject = {"type": "response.inject", "response_id": rid, "input": [USER]}
            await ws.send(orjson.dumps(inject).decode())
            await asyncio.sleep(0.3)
            assert len(up.bodies) == 1  # lane b waits for the one slot
            release.set()
            evs = await until(ws, lambda e: e["type"] == "response.completed" and e.get("stream_id") == "b")
            kinds = [(e["type"], e.get("stream_id")) for e in evs]
            a_end = kinds.index(("response.completed", "a"))
            failed = kinds.index(("response.inject.failed", "a"))
            assert a_end < failed < kinds.index(("response.created", "b"))
            assert evs[failed]["error"]["code"] == "response_already_completed" and evs[failed]["input"] == [USER]


async def test_a_response_with_context_management_cannot_be_steered() -> None:
    held = Held([sse(chat_chunk({"role": "assistant", "content": "x"}))], [sse(chat_chunk({}, "stop"))])
    up = Scripted({"go": streamed(held)})
    async with serving(up) as host, connect(f"ws://{host}/v1/responses", additional_headers=AUTH) as ws:
        cm = [{"type": "compaction", "compact_threshold": 100000}]
        await ws.send(create("chat-model", [user("go")], context_management=cm))
        first = await until(ws, lambda e: e["type"] == "response.output_text.delta")
        rid = first[0]["response"]["id"]
        await ws.send(orjson.dumps({"type": "response.steer", "previous_response_id": rid, "input": "y"}).decode())
        f = await until(ws, lambda e: e["type"] == "response.steer.failed")
        assert f[-1]["error"]["code"] == "steering_not_supported"
        assert f[-1]["sequence_number"] > first[-1]["sequence_number"]  # a number of that response
        await ws.send('{"type":"response.cancel"}')
        end = await until(ws, is_terminal)
        assert end[-1]["response"]["status"] == "cancelled"
