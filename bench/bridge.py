"""The Bridge alone: client events per CPU-second of the sans-IO core, no I/O at all.

Feeds the fake upstream's own stream bodies (``bench.fake_upstream``: 200 text chunks, a
tool call, usage) through ``transformers.bridge`` for each direction, in the chunk sizes
the proxy would read them, and reports client events per second of process CPU time.
This is the ceiling the HTTP plumbing around the Bridge takes its share of.

Run: ``.venv/bin/python -m bench.bridge [--seconds S]``.
"""

from __future__ import annotations

import argparse
import time

from bench.fake_upstream import chat_steps, responses_steps
from providers.profiles import QuirkSet
from transformers.bridge import open_bridge
from transformers.context import Ctx

DIRECTIONS = (("chat", "chat"), ("responses", "responses"), ("responses", "chat"), ("chat", "responses"))
CHUNKS = 200


def _body(client: str) -> dict:
    tool = {
        "type": "function",
        "name": "shell",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    }
    if client == "chat":
        return {
            "model": "m",
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}],
        }
    return {"model": "m", "stream": True, "input": "hi", "tools": [tool]}


def run(client: str, upstream: str, seconds: float) -> tuple[float, int]:
    """(client events per CPU-second, events per stream)"""
    steps = (
        chat_steps(f"bench-n{CHUNKS}", CHUNKS) if upstream == "chat" else responses_steps(f"bench-n{CHUNKS}", CHUNKS)
    )
    quirks = QuirkSet("openai-compatible", (), "").resolve("m", "m", None)
    events = streams = 0
    body = _body(client)
    start = time.process_time()
    while time.process_time() - start < seconds:
        ctx = Ctx(quirks=quirks, upstream_model="m", public_model="m")
        _, bridge = open_bridge(body, client, upstream, ctx)
        out = [bridge.receive_data(s) for s in steps]
        out.append(bridge.end())
        events += b"".join(out).count(b"\n\n")
        streams += 1
    spent = time.process_time() - start
    return events / spent, events // max(streams, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="CPU seconds per direction")
    args = ap.parse_args()
    print("| direction | client events per CPU-second | events per stream |")
    print("|---|---|---|")
    for client, upstream in DIRECTIONS:
        rate, per = run(client, upstream, args.seconds)
        print(f"| {client} → {upstream} | {rate / 1000:.0f}k | {per} |")


if __name__ == "__main__":
    main()
