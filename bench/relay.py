"""The byte relay: what one more process on the path costs, with no HTTP in it at all.

Theory of operation
-------------------
``python -m bench.relay --upstream-port P [--host H] [--port N]`` listens on loopback and,
for each client connection, opens one connection to the upstream and copies bytes both
ways as they come (uvloop ``Protocol``s: a read is written on at once, nothing parsed or
held).  A client's bytes that arrive before the upstream connection is up are kept and
sent first.  Flow control both ways: a side whose writes back up pauses reading on the
other.  A close on either side closes the other once what was read is written.  It prints
``READY <port>`` when it listens.

``bench/run`` puts it where the proxy goes (the ``relay-*`` scenarios, pinned to the
proxy's core): the latency that crossing one more process and one more connection adds on
this machine (two more hops between the cores per round trip, a process woken per read),
which no proxy, in any language, can go under.  The reference forwarder
(``bench/reference.py``) adds uvicorn and httpx to it; Switchboard adds its own work.
Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import uvloop


class _Side(asyncio.Protocol):
    """One connection of a pair: what it reads is written to ``peer``."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.peer: _Side | None = None
        self.early: list[bytes] = []  # read before the peer was connected (and written after)
        self.ready = True  # the peer takes writes (a client's: once its upstream is connected)
        self.closed = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.ready and self.peer is not None:
            self.peer.transport.write(data)
        else:  # in order: what came early goes first
            self.early.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.close()  # after what it has buffered

    # the peer's writes back up: stop reading what would be written to it
    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


class _Client(_Side):
    def __init__(self, host: str, upstream_port: int) -> None:
        super().__init__()
        self.ready = False
        self.host = host
        self.upstream_port = upstream_port

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        # held here: the loop keeps only a weak reference to a task
        self.connecting = asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        up = _Side()
        up.peer = self
        self.peer = up
        try:
            await asyncio.get_running_loop().create_connection(lambda: up, self.host, self.upstream_port)
        except OSError:
            self.transport.close()
            return
        if self.closed:
            up.transport.close()
            return
        if self.early:
            up.transport.writelines(self.early)
            self.early.clear()
        self.ready = True


async def serve(host: str, port: int, upstream_port: int) -> asyncio.AbstractServer:
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: _Client(host, upstream_port), host, port)


async def _main(host: str, port: int, upstream_port: int) -> None:
    server = await serve(host, port, upstream_port)
    print(f"READY {server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream-port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        uvloop.run(_main(args.host, args.port, args.upstream_port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
