"""app/ws.py: a client that pipelines frames cannot grow a socket's inbox past
``server.websocket.max_pipelined_frames``: the reader stops reading until one is taken, and
the end of the socket still reaches the consumer after every frame."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from app.ws import _Connection
from providers.config import WebSocketCfg


async def test_the_inbox_is_bounded_and_the_end_comes_after_every_frame() -> None:
    cfg = WebSocketCfg(max_pipelined_frames=3)
    svc = SimpleNamespace(config=SimpleNamespace(server=SimpleNamespace(websocket=cfg)))
    reads = 0

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        if reads > 10:
            return {"type": "websocket.disconnect", "code": 1000}
        return {"type": "websocket.receive", "text": f"frame {reads}"}

    async def send(msg: dict[str, Any]) -> None:
        pass

    conn = _Connection(svc, "c", {}, "-", receive, send)  # type: ignore[arg-type]
    reader = asyncio.ensure_future(conn._read())
    await asyncio.sleep(0.05)
    assert conn.inbox.qsize() == 3 and reads == 4  # three held, the fourth waits to be put
    got = []
    while True:
        msg = await asyncio.wait_for(conn.inbox.get(), 1)
        if msg is None:
            break
        got.append(msg["text"])
        assert conn.inbox.qsize() <= 3
    assert got == [f"frame {i}" for i in range(1, 11)]
    await reader
