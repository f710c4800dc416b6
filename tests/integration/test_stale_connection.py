"""A turn sent on a kept-alive upstream connection that the upstream closes as the request
goes out (its idle timeout: uvicorn under vLLM or SGLang closes idle connections after 5 s)
is answered at once, by the same target, on a new connection: no failed attempt, no
backoff, nothing for the breaker (``providers/transport.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from tests.upstream_io import read_request

from .test_fault_matrix import metric

ANSWER = orjson.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "up",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
)


class _Upstream:
    """Answers every request, but closes the first connection when its second request comes."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0

    async def handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        conn = self.connections
        self.connections += 1
        try:
            for n in range(100):
                await read_request(r)
                self.requests += 1
                if (conn, n) == (0, 1):
                    return  # closed idle as the request crossed it: not a byte of answer
                w.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(ANSWER)
                )
                w.write(ANSWER)
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            w.close()


async def test_a_turn_crossing_the_upstreams_idle_close_is_answered_at_once(client_factory: Any) -> None:
    up = _Upstream()
    srv = await asyncio.start_server(up.handle, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/v1"
    c = await client_factory(
        server={"upstream_transport": "fast"},  # the resend is the proxy's transport's (httpx has none)
        providers=[{"name": "local", "protocol": "chat", "base_url": base}],
        models=[{"name": "m", "provider": "local", "upstream_model": "up"}],
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(3):
        r = await c.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == "hi"
    srv.close()
    assert (up.connections, up.requests) == (2, 4)
    text = (await c.get("/metrics")).text
    assert metric(text, "switchboard_upstream_attempts_total", provider="local", outcome="ok") == 3
    assert metric(text, "switchboard_upstream_attempts_total", provider="local") == 3  # no other outcome
