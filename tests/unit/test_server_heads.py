"""A sized answer's head held for its body (app/server_heads.py): uvicorn's own cycle, one
write where it made two, and each case of the module's table."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from app.server_heads import SizedHeadCycle

SIZED = {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
CHUNKED = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}


class Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def cycle(cls: type[RequestResponseCycle], method: str = "POST", keep_alive: bool = True) -> tuple[Any, Transport]:
    t = Transport()
    c = cls(
        scope={"type": "http", "method": method, "path": "/", "http_version": "1.1"},  # type: ignore[typeddict-item]
        transport=t,  # type: ignore[arg-type]
        flow=FlowControl(t),  # type: ignore[arg-type]
        logger=logging.getLogger("test"),
        access_logger=logging.getLogger("test"),
        access_log=False,
        default_headers=[],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=keep_alive,
        on_response=lambda: None,
    )
    return c, t


async def test_sized_answer_one_write_where_uvicorn_makes_two() -> None:
    for cls, writes in ((RequestResponseCycle, 2), (SizedHeadCycle, 1)):
        c, t = cycle(cls)
        await c.send(SIZED)
        await c.send({"type": "http.response.body", "body": b"{}"})
        assert len(t.writes) == writes
        assert b"".join(t.writes) == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"
        assert c.response_complete


async def test_head_held_until_the_body() -> None:
    c, t = cycle(SizedHeadCycle)
    await c.send(SIZED)
    assert t.writes == [] and c.response_started
    assert c.transport.is_closing() is False  # what uvicorn may ask meanwhile: the connection's
    await c.send({"type": "http.response.body", "body": b"{", "more_body": True})
    await c.send({"type": "http.response.body", "body": b"}"})
    assert t.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{", b"}"]


async def test_a_streams_head_goes_at_once() -> None:
    c, t = cycle(SizedHeadCycle)
    await c.send(CHUNKED)
    assert t.writes == [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"]
    await c.send({"type": "http.response.body", "body": b"data: x\n\n", "more_body": True})
    assert t.writes[1] == b"9\r\ndata: x\n\n\r\n"


async def test_head_request_writes_the_head_alone() -> None:
    c, t = cycle(SizedHeadCycle, method="HEAD")
    await c.send(SIZED)
    await c.send({"type": "http.response.body", "body": b""})
    assert t.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"]


async def test_client_gone_before_the_body_nothing_written() -> None:
    c, t = cycle(SizedHeadCycle)
    await c.send(SIZED)
    c.disconnected = True
    await c.send({"type": "http.response.body", "body": b"{}"})
    assert t.writes == []


async def test_connection_close_after_the_one_write() -> None:
    c, t = cycle(SizedHeadCycle, keep_alive=False)
    await c.send(SIZED)
    await c.send({"type": "http.response.body", "body": b"{}"})
    assert t.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}"]
    assert t.closed


async def test_app_failing_between_head_and_body() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(SIZED)
        raise RuntimeError("boom")

    c, t = cycle(SizedHeadCycle)
    await c.run_asgi(app)
    assert t.writes == [] and t.closed  # uvicorn closes: no answer, where a head alone came before


async def test_a_wrong_message_after_a_held_head_raises_as_uvicorn_does() -> None:
    c, t = cycle(SizedHeadCycle)
    await c.send(SIZED)
    with pytest.raises(RuntimeError, match="Expected ASGI message 'http.response.body'"):
        await c.send(SIZED)
    assert t.writes == []


async def test_a_100_continue_goes_at_once_then_the_answer_in_one_write() -> None:
    c, t = cycle(SizedHeadCycle)
    c.waiting_for_100_continue = True
    c.more_body = False
    c.message_event.set()  # the body is in
    await c.receive()
    assert t.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    await c.send(SIZED)
    await c.send({"type": "http.response.body", "body": b"{}"})
    assert t.writes[1:] == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]


async def test_a_sized_204_or_chunked_and_sized_head_goes_at_once() -> None:
    # uvicorn frames by the first of the two headers: chunked first means a chunked body
    both = [(b"transfer-encoding", b"chunked"), (b"content-length", b"2")]
    c, t = cycle(SizedHeadCycle)
    await c.send({"type": "http.response.start", "status": 200, "headers": both})
    assert t.writes == [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 2\r\n\r\n"]
