"""Long upstream silences mid-stream: the client gets heartbeats (docs/rules.md F21), the stream stays valid."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest

from .conftest import CHAT_URL, chat_chunk, parse_sse
from .test_directions import check_responses_grammar


def silent_then_done(silence: float) -> httpx.Response:
    async def gen():  # type: ignore[no-untyped-def]
        yield b"data: " + orjson.dumps(chat_chunk({"role": "assistant", "content": "be"})) + b"\n\n"
        await asyncio.sleep(silence)  # a long reasoning gap
        yield b"data: " + orjson.dumps(chat_chunk({"content": "fore"})) + b"\n\n"
        yield b"data: " + orjson.dumps(chat_chunk({}, "stop")) + b"\n\ndata: [DONE]\n\n"

    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=gen())


async def test_responses_client_gets_in_progress_heartbeats(client_factory: Any, mock: Any) -> None:
    c = await client_factory(server={"keepalive_seconds": 0.1})
    mock.post(CHAT_URL).mock(side_effect=lambda req: silent_then_done(0.45))
    r = await c.post("/v1/responses", json={"model": "chat-model", "stream": True, "input": "hi"})
    events = parse_sse(r.content)
    check_responses_grammar(events)
    types = [e["type"] for e in events]
    first_delta = types.index("response.output_text.delta")
    beats = [i for i, t in enumerate(types) if t == "response.in_progress" and i > first_delta]
    assert len(beats) >= 2, types
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == "before"
    assert types[-1] == "response.completed"


async def test_chat_client_gets_comments(client_factory: Any, mock: Any) -> None:
    c = await client_factory(server={"keepalive_seconds": 0.1})
    mock.post(CHAT_URL).mock(side_effect=lambda req: silent_then_done(0.45))
    r = await c.post(
        "/v1/chat/completions",
        json={"model": "chat-model", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert r.content.count(b": keep-alive\n\n") >= 2
    chunks = parse_sse(r.content)
    assert chunks[-1] == "[DONE]"
    assert "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks[:-1] if ch["choices"]) == "before"


@pytest.mark.parametrize("keepalive", [0, 5])
async def test_no_heartbeat_when_disabled_or_not_silent(client_factory: Any, mock: Any, keepalive: float) -> None:
    c = await client_factory(server={"keepalive_seconds": keepalive})
    mock.post(CHAT_URL).mock(side_effect=lambda req: silent_then_done(0.3))
    r = await c.post("/v1/responses", json={"model": "chat-model", "stream": True, "input": "hi"})
    types = [e["type"] for e in parse_sse(r.content)]
    assert types.count("response.in_progress") == 1


async def test_silence_never_exceeds_one_interval(client_factory: Any, mock: Any) -> None:
    """A chunk that lands just after a heartbeat tick must not push the next heartbeat to
    two intervals: the client's longest silence is one interval (plus scheduling)."""
    interval = 0.2
    c = await client_factory(server={"keepalive_seconds": interval})
    app = c._transport.app  # type: ignore[attr-defined]

    def upstream(_: Any) -> httpx.Response:
        async def gen():  # type: ignore[no-untyped-def]
            yield b"data: " + orjson.dumps(chat_chunk({"role": "assistant", "content": "a"})) + b"\n\n"
            await asyncio.sleep(0.05)
            yield b"data: " + orjson.dumps(chat_chunk({"content": "b"})) + b"\n\n"
            await asyncio.sleep(0.9)
            yield b"data: " + orjson.dumps(chat_chunk({}, "stop")) + b"\n\ndata: [DONE]\n\n"

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=gen())

    mock.post(CHAT_URL).mock(side_effect=upstream)
    body = orjson.dumps({"model": "chat-model", "stream": True, "input": "hi"})
    msgs = [{"type": "http.request", "body": body, "more_body": False}]
    times: list[float] = []
    loop = asyncio.get_running_loop()

    async def receive() -> Any:
        if msgs:
            return msgs.pop(0)
        await asyncio.sleep(10)
        return {"type": "http.disconnect"}

    async def send(m: Any) -> None:
        if m["type"] == "http.response.body":
            times.append(loop.time())

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/responses",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
    }
    await app(scope, receive, send)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert len(times) >= 5 and max(gaps) <= interval + 0.08, gaps


async def test_a_stream_shorter_than_the_interval_starts_no_heartbeat_task(
    client_factory: Any, mock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.pipeline as pipeline

    started: list[float] = []
    real = pipeline._heartbeats

    def counted(bridge: Any, send: Any, interval: float, waiting: list[Any]) -> Any:
        started.append(interval)
        return real(bridge, send, interval, waiting)

    monkeypatch.setattr(pipeline, "_heartbeats", counted)
    c = await client_factory(server={"keepalive_seconds": 0.2})
    mock.post(CHAT_URL).mock(side_effect=lambda req: silent_then_done(0.05))
    r = await c.post("/v1/responses", json={"model": "chat-model", "stream": True, "input": "hi"})
    assert [e["type"] for e in parse_sse(r.content)][-1] == "response.completed"
    assert started == []  # done within one interval: a timer, cancelled; no task
    await asyncio.sleep(0.3)  # past the interval: the cancelled timer does not start one either
    assert started == []
    mock.post(CHAT_URL).mock(side_effect=lambda req: silent_then_done(0.5))
    r = await c.post("/v1/responses", json={"model": "chat-model", "stream": True, "input": "hi"})
    types = [e["type"] for e in parse_sse(r.content)]
    assert started == [0.2] and types.count("response.in_progress") >= 2, types
