"""For the test upstreams that speak HTTP/1.1 on an asyncio stream: one request read, a
connection's requests answered one after the other, the app in front of such an upstream,
and a POST to that app called as ASGI."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any


async def read_request(r: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """The next request's head and its body (``Content-Length`` bytes; none without it).
    Raises ``asyncio.IncompleteReadError`` when the peer closes first."""
    head = await r.readuntil(b"\r\n\r\n")
    size = next((int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length:")), 0)
    return head, await r.readexactly(size)


async def answer_each(
    r: asyncio.StreamReader, w: asyncio.StreamWriter, answer: Callable[[asyncio.StreamWriter], Awaitable[bool]]
) -> None:
    """Read each request off the connection and ``answer`` it, until the peer closes (or the
    test's server closes, cancelling this) or ``answer`` returns False; then close."""
    try:
        while True:
            await read_request(r)
            if not await answer(w):
                return
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
        pass
    finally:
        w.close()


@asynccontextmanager
async def app_before(
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[Any]:
    """An upstream on 127.0.0.1 serving ``handle`` and the app in front of it (one Chat
    provider, model ``m``), its lifespan entered; both closed at the end."""
    from app.config import parse_config
    from app.main import create_app

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/v1"
    cfg = parse_config(
        {
            "providers": [{"name": "local", "protocol": "chat", "base_url": base}],
            "models": [{"name": "m", "provider": "local"}],
        }
    )
    app = create_app(cfg)
    try:
        async with app.router.lifespan_context(app):
            yield app
    finally:
        srv.close()
        await srv.wait_closed()


class CountingUpstream:
    """A test upstream whose connections and requests are counted; ``answer`` (a subclass's)
    writes each answer and says whether the connection stays open."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0

    async def handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.connections += 1
        await answer_each(r, w, self._counted)

    async def _counted(self, w: asyncio.StreamWriter) -> bool:
        self.requests += 1
        return await self.answer(w)

    async def answer(self, w: asyncio.StreamWriter) -> bool:
        raise NotImplementedError


async def asgi_post(
    app: Any,
    path: str,
    body: bytes,
    send: Callable[[dict[str, Any]], Awaitable[None]],
    headers: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    """``app`` called as ASGI with a JSON POST of ``body`` to ``path`` (and ``headers``) from
    a client that stays connected; ``send`` sees each message the app sends.  At most 20 s."""
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client stays
        raise AssertionError("unreachable")

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8080),
    }
    await asyncio.wait_for(app(scope, receive, send), 20)
