"""For the test upstreams that speak HTTP/1.1 on an asyncio stream: one request read."""

from __future__ import annotations

import asyncio


async def read_request(r: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """The next request's head and its body (``Content-Length`` bytes; none without it).
    Raises ``asyncio.IncompleteReadError`` when the peer closes first."""
    head = await r.readuntil(b"\r\n\r\n")
    size = next((int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length:")), 0)
    return head, await r.readexactly(size)
