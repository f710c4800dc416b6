"""A Codex-shaped conversation through Switchboard: HTTP (the whole history every turn) vs
the Responses WebSocket (``previous_response_id`` + the new items), in the same run.

Theory of operation
-------------------
The fake upstream (``bench/fake_upstream.py``, a Chat upstream here) answers every turn
with text and one tool call.  A conversation starts as Codex's does — instructions, its
real tool list (``tests/fixtures/codex_tools_0.169.json``) and a user message — and each
turn appends the previous answer's output items and a tool output of ``--output-kb`` KiB.
Over HTTP every turn POSTs the whole conversation (what Codex does after a 426); over the
socket the first turn is a warm-up (``generate: false``, as Codex sends it) and every
later turn sends only the new items.  Per turn it records the bytes the client sent and
the time to the first text delta (TTFT, from the request's send).  Rounds alternate which
transport goes first; figures are medians (min–max) over rounds, for turn 2 and the last.

Run: ``python -m bench.ws_turns [--turns 12] [--rounds 5] [--output-kb 8]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from websockets.asyncio.client import connect

from bench.run import HOST, ROOT, start_fake, start_proxy

MODEL = "bench-chat-n20"
COMPRESSION: str | None = "deflate"  # what Codex offers (permessage-deflate); --no-compression: None
TOOLS = json.loads((ROOT / "tests/fixtures/codex_tools_0.169.json").read_text())
INSTRUCTIONS = "You are a coding agent. " * 400  # ~10 KB, the size of Codex's base prompt


def first_input() -> list[dict[str, Any]]:
    return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the failing test"}]}]


def base_body(inp: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "model": MODEL,
        "instructions": INSTRUCTIONS,
        "input": inp,
        "tools": TOOLS,
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "store": False,
        "stream": True,
    }


def tool_outputs(output: list[dict[str, Any]], kb: int) -> list[dict[str, Any]]:
    blob = ("x" * 1023 + "\n") * kb
    return [
        {"type": "function_call_output", "call_id": it["call_id"], "output": blob}
        for it in output
        if it.get("type") == "function_call"
    ]


class Turn:
    __slots__ = ("sent", "ttft", "output", "response_id")

    def __init__(self, sent: int, ttft: float, output: list[dict[str, Any]], response_id: str) -> None:
        self.sent = sent
        self.ttft = ttft
        self.output = output
        self.response_id = response_id


async def http_conversation(port: int, turns: int, kb: int) -> list[Turn]:
    out: list[Turn] = []
    history = first_input()
    async with httpx.AsyncClient(base_url=f"http://{HOST}:{port}", timeout=30) as c:
        for _ in range(turns):
            body = orjson.dumps(base_body(history))
            t0 = time.perf_counter()
            ttft = None
            final: dict[str, Any] = {}
            async with c.stream(
                "POST", "/v1/responses", content=body, headers={"content-type": "application/json"}
            ) as r:
                async for line in r.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    ev = orjson.loads(line[6:])
                    if ttft is None and ev["type"] == "response.output_text.delta":
                        ttft = time.perf_counter() - t0
                    if ev["type"] == "response.completed":
                        final = ev["response"]
            assert ttft is not None and final, "the turn did not complete"
            out.append(Turn(len(body), ttft, final["output"], final["id"]))
            history = [*history, *final["output"], *tool_outputs(final["output"], kb)]
    return out


async def ws_conversation(port: int, turns: int, kb: int) -> list[Turn]:
    out: list[Turn] = []
    async with connect(f"ws://{HOST}:{port}/v1/responses", max_size=None, compression=COMPRESSION) as ws:
        warm = orjson.dumps({"type": "response.create", **base_body(first_input()), "generate": False}).decode()
        await ws.send(warm)
        prev = ""
        while True:
            ev = orjson.loads(await ws.recv())
            if ev["type"] == "response.completed":
                prev = ev["response"]["id"]
                break
        new: list[dict[str, Any]] = []
        for _ in range(turns):
            frame = orjson.dumps({"type": "response.create", **base_body(new), "previous_response_id": prev}).decode()
            t0 = time.perf_counter()
            await ws.send(frame)
            ttft = None
            while True:
                ev = orjson.loads(await ws.recv())
                if ttft is None and ev["type"] == "response.output_text.delta":
                    ttft = time.perf_counter() - t0
                if ev["type"] in ("response.completed", "response.failed", "error"):
                    break
            assert ev["type"] == "response.completed" and ttft is not None, ev
            final = ev["response"]
            # bytes of the first turn count the warm-up too: it carried the opening input
            sent = len(frame) + (len(warm) if not out else 0)
            out.append(Turn(sent, ttft, final["output"], final["id"]))
            prev = final["id"]
            new = tool_outputs(final["output"], kb)
    return out


def fake_chat_config(fake_port: int, model: str, **extra: Any) -> dict[str, Any]:
    """A proxy config with one model on the fake Chat upstream (no heartbeats; ``extra``
    adds top-level sections, e.g. ``store``)."""
    return {
        "server": {"keepalive_seconds": 0},
        **extra,
        "providers": [
            {
                "name": "fake-chat",
                "profile": "openai-compatible",
                "protocol": "chat",
                "base_url": f"http://{HOST}:{fake_port}/v1",
            }
        ],
        "models": [{"name": model, "provider": "fake-chat"}],
    }


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}–{max(xs):.2f})"


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="sb-bench-ws-") as tmp:
        work = Path(tmp)
        fake, fport = await start_fake(work, None)
        cfg = work / "config.yaml"
        cfg.write_text(json.dumps(fake_chat_config(fport, MODEL)))
        proxy, port, _ = await start_proxy([str(ROOT / ".venv/bin/switchboard")], cfg, work, None)
        try:
            runs: dict[str, list[list[Turn]]] = {"http": [], "websocket": []}
            for rnd in range(args.rounds):
                order = ("http", "websocket") if rnd % 2 == 0 else ("websocket", "http")
                for side in order:
                    conv = http_conversation if side == "http" else ws_conversation
                    runs[side].append(await conv(port, args.turns, args.output_kb))
        finally:
            proxy.stop()
            fake.stop()
    print(f"# {args.turns} turns, {args.rounds} rounds, tool output {args.output_kb} KiB per turn, Chat upstream\n")
    print("| transport | TTFT turn 2 (ms) | TTFT last turn (ms) | client bytes turn 2 | client bytes last turn |")
    print("|---|---|---|---|---|")
    for side, convs in runs.items():
        t2 = [c[1].ttft * 1000 for c in convs]
        tl = [c[-1].ttft * 1000 for c in convs]
        print(f"| {side} | {med(t2)} | {med(tl)} | {convs[0][1].sent:,} | {convs[0][-1].sent:,} |")
    total = {side: sum(t.sent for t in convs[0]) for side, convs in runs.items()}
    print(f"\nclient bytes for the whole conversation: http {total['http']:,}, websocket {total['websocket']:,}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--output-kb", type=int, default=8)
    ap.add_argument("--no-compression", action="store_true", help="the socket without permessage-deflate")
    args = ap.parse_args()
    if args.no_compression:
        global COMPRESSION
        COMPRESSION = None
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
