"""The reference forwarder: what a proxy on this stack costs before it does anything.

Theory of operation
-------------------
``python -m bench.reference --upstream URL [--host H] [--port P]`` serves, on uvicorn with
uvloop and httptools (Switchboard's own server stack), an ASGI app that forwards every
``POST`` to ``URL`` + the request's path (less a leading ``/v1``) with httpx, the usual
way (one ``httpx.AsyncClient``, ``client.send(request, stream=True)``), and answers with
the upstream's status, content type and body: a stream chunk by chunk as it is read
(``aiter_raw``), anything else whole.  No routing, checking, translation, repair, metrics
or log line; ``GET /readyz`` answers 200.

``bench/run`` measures it beside direct and Switchboard (the ``ref-*`` scenarios, pinned to
the proxy's core): the CPU per request of uvicorn + httpx alone, the floor under any proxy
written on them, and Switchboard's cost above that floor.  Loopback only.
"""

from __future__ import annotations

import argparse
from typing import Any

import httpx
import uvicorn

_FORWARDED = {b"content-type"}  # the request headers passed on


class Reference:
    """The forwarder as an ASGI app (``upstream``: the base URL, e.g. ``http://h:p/v1``)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.client: httpx.AsyncClient | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    self.client = httpx.AsyncClient(timeout=60.0, limits=httpx.Limits(max_keepalive_connections=64))
                    await send({"type": "lifespan.startup.complete"})
                else:
                    if self.client is not None:
                        await self.client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":
            status = 200 if scope["path"] == "/readyz" else 404
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        path = scope["path"].removeprefix("/v1")
        assert self.client is not None
        req = self.client.build_request("POST", self.upstream + path, content=body, headers=_forwarded(scope))
        resp = await self.client.send(req, stream=True)
        try:
            headers = [(b"content-type", resp.headers.get("content-type", "application/json").encode())]
            await send({"type": "http.response.start", "status": resp.status_code, "headers": headers})
            if resp.headers.get("content-type", "").startswith("text/event-stream"):
                async for chunk in resp.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
            else:
                await send({"type": "http.response.body", "body": await resp.aread()})
        finally:
            await resp.aclose()


def _forwarded(scope: dict[str, Any]) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in scope["headers"] if k in _FORWARDED]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:8001/v1")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args(argv)
    uvicorn.run(
        Reference(args.upstream),
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
