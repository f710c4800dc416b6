"""What tracing (app/tracing.py) costs a request, in CPU time: the same requests through the
ASGI app (httpx.ASGITransport, the in-process demo provider, its word delay off) with
tracing off, on with spans dropped at export (the spans alone: made, ended, queued), and on
with the OTLP/HTTP exporter sending to a receiver in another process (what a deployment
pays: protobuf encoding and the POST, on the batch processor's thread, counted too since
each round ends with a flush).  Rounds alternate the modes; the median round is reported.

A request: a Responses client's stream, bridged to the demo's Chat Completions (one
request span, one attempt span).

Run: ``.venv/bin/python -m bench.tracing [--requests N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import httpx

RECEIVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *a): pass
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


class _Drop:
    """A span exporter that drops what it gets."""

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _app(mode: str, port: int) -> tuple[Any, Any]:
    from app.config import parse_config
    from app.main import create_app
    from app.tracing import Tracing

    tracing = {"enabled": mode != "off", "endpoint": f"http://127.0.0.1:{port}/v1/traces"}
    cfg = parse_config(
        {
            "providers": [{"name": "demo", "profile": "demo"}],
            "models": [{"name": "demo", "provider": "demo"}],
            "server": {"keepalive_seconds": 0},
            "store": {"enabled": False},
            "usage": {"enabled": False},
            "tracing": tracing,
        },
        "<bench>",
    )
    app = create_app(cfg)
    svc = app.state.service
    if mode == "on, spans dropped":
        svc.tracing = Tracing(cfg.tracing, exporter=_Drop())  # type: ignore[arg-type]
    return app, svc


async def main_async(requests: int, rounds: int, port: int) -> dict[str, list[float]]:
    import providers.demo
    from app import logs

    providers.demo.WORD_DELAY = 0.0
    logs.setup("warning")  # the request log line is not what is measured
    modes = ["off", "on, spans dropped", "on, OTLP/HTTP to a receiver"]
    out: dict[str, list[float]] = {m: [] for m in modes}
    body = {"model": "demo", "input": "hello there, how are you", "stream": True, "store": False}
    apps = {m: _app(m, port) for m in modes}
    ctxs = []
    clients = {}
    for m, (app, _) in apps.items():
        ctx = app.router.lifespan_context(app)
        await ctx.__aenter__()
        ctxs.append(ctx)
        clients[m] = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8080")
    for m in modes:  # warm-up
        for _ in range(50):
            r = await clients[m].post("/v1/responses", json=body)
            assert r.status_code == 200, r.text
    for _ in range(rounds):
        for m in modes:
            svc = apps[m][1]
            start = time.process_time()
            for _ in range(requests):
                await clients[m].post("/v1/responses", json=body)
            if svc.tracing is not None:
                svc.tracing.flush()
            out[m].append((time.process_time() - start) / requests * 1e6)
    for c in clients.values():
        await c.aclose()
    for ctx in ctxs:
        await ctx.__aexit__(None, None, None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    # the OTLP receiver: another process (its CPU is not the proxy's)
    proc = subprocess.Popen([sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        out = asyncio.run(main_async(args.requests, args.rounds, int(proc.stdout.readline())))
    finally:
        proc.terminate()
        proc.wait()
    base = statistics.median(out["off"])
    print(f"{args.requests} requests x {args.rounds} rounds (alternating), CPU µs/request, median round")
    print("| tracing | µs/request | vs off | rounds |")
    print("|---|---|---|---|")
    for m, xs in out.items():
        med = statistics.median(xs)
        print(f"| {m} | {med:.1f} | {med - base:+.1f} | {' '.join(f'{x:.0f}' for x in xs)} |")


if __name__ == "__main__":
    main()
