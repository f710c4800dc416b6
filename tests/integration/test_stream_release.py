"""A streamed answer's upstream connection goes back to its pool, kept alive, for the next
turn (``app/pipeline.py``, ``_stream``: the body is read off the response's own stream).

* A stream whose body ends without a terminal event the Bridge stops at (a Chat upstream
  that sends no ``[DONE]``) is read to its end: the response is closed there, before the
  client's last bytes go out, as httpx's ``aiter_raw`` closed it.
* A stream that stops at its terminal event sends the client its last bytes first, then
  drains the rest of the body (``_drain``) and closes the response.

Either way the next turn finds the one kept-alive connection.  A real upstream on
127.0.0.1 (chunked SSE, as vLLM and SGLang send it) and the app's own upstream transport;
the app is called as ASGI, so that the test sees each message it sends and the pools'
requests in flight at that moment.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from tests.upstream_io import CountingUpstream, app_before, asgi_post


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    obj = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "up",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    data = b"data: " + orjson.dumps(obj) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


class _Upstream(CountingUpstream):
    """Chat streams in chunked encoding, any number per connection; ``done``: ending with
    ``[DONE]``."""

    def __init__(self, done: bool) -> None:
        super().__init__()
        self.done = done

    async def answer(self, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        for i in range(3):
            w.write(_chunk({"content": f"w{i} "}))
            await w.drain()
            await asyncio.sleep(0.005)  # a read each, as at token rate
        done = b"data: [DONE]\n\n"
        tail = b"%x\r\n%s\r\n" % (len(done), done) if self.done else b""
        w.write(_chunk({}, "stop") + tail + b"0\r\n\r\n")
        await w.drain()
        return True


CHAT, RESP = "/v1/chat/completions", "/v1/responses"
CHAT_BODY = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
RESP_BODY = {"model": "m", "stream": True, "store": False, "input": "hi"}


def _in_flight(app: Any) -> int:
    """Exchanges the app's upstream transport has in flight (a response not yet closed)."""
    return app.state.router.resolve("m").provider.transport.in_flight()


@pytest.mark.parametrize(
    ("path", "body", "done", "open_at_end"),
    [
        (CHAT, CHAT_BODY, False, 0),  # read to the body's end: closed before the last bytes
        (CHAT, CHAT_BODY, True, 1),  # stopped at [DONE]: the last bytes first, then the drain
        (RESP, RESP_BODY, False, 0),  # the same for a Responses client
        (RESP, RESP_BODY, True, 1),  # stopped at its response.completed
    ],
)
async def test_the_connection_goes_back_kept_alive(
    path: str, body: dict[str, Any], done: bool, open_at_end: int
) -> None:
    up = _Upstream(done)
    async with app_before(up.handle) as app:
        raw = orjson.dumps(body)
        for _ in range(3):  # turns one after the other, as an agent sends them
            sent: list[dict[str, Any]] = []
            at_end: list[int] = []

            async def send(msg: dict[str, Any]) -> None:
                if msg["type"] == "http.response.body" and not msg.get("more_body"):
                    at_end.append(_in_flight(app))  # noqa: B023 (one turn's list, read at once)
                sent.append(msg)  # noqa: B023

            await asgi_post(app, path, raw, send)
            assert sent[0]["status"] == 200
            text = b"".join(m.get("body", b"") for m in sent[1:])
            assert b"w0 " in text and b"w2 " in text
            assert at_end == [open_at_end]
    assert (up.connections, up.requests) == (1, 3)  # one kept-alive connection for every turn
