"""A request's transformers leave no reference cycle behind: everything a Bridge built is
freed by reference counting when the request ends, not by the cyclic collector.

Garbage in cycles is only found by a collection, which CPython starts once the container
objects allocated and not yet freed pass a threshold (700 by default, 10,000 in the
worker: ``app/asgi.py``): each stream that leaves a few dozen objects in cycles brings the
next collection closer, and a collection (a pause of 0.1–0.3 ms on the bench machine) lands
in whichever request happens to be running.  An object that keeps its own bound methods
(a dispatch table of ``self._on_x``) is such a cycle: the decoder and encoder tables are
class-level, of plain functions, for that reason.

Every direction, in stream and in whole-answer form, over the fixture streams (tool calls,
reasoning, apply_patch, hosted tools), the same streams with junk blocks between their
events, a stream cut before its end, and framed for the WebSocket; the check runs with the
collector off and then asks it what it found.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import pytest

from bench.fake_upstream import chat_json, responses_json
from transformers.bridge import DIRECTIONS, open_bridge
from transformers.context import Ctx

from .test_bridge_blocks import ODD
from .test_hostile_upstream import CHAT_FIXTURES, RESP_FIXTURES, load, sse_bytes, tool_info


@contextmanager
def _collector_off() -> Iterator[list[str]]:
    """Runs the body with the cyclic collector off; then the types of what a collection finds
    unreachable (objects kept alive only by cycles) are in the list."""
    found: list[str] = []
    was = gc.isenabled()
    gc.disable()
    # what exists now, garbage of earlier tests included, is out of the collection below,
    # which walks only what the body made: a full collection of the test session's heap
    # took ~0.25 s, twice per stream checked
    gc.freeze()
    try:
        yield found
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect()
            found += sorted({type(o).__name__ for o in gc.garbage})
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    finally:
        gc.unfreeze()
        if was:
            gc.enable()


def _body(client: str, stream: bool) -> dict[str, Any]:
    if client in ("chat", "messages"):
        return {"model": "pub-model", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    if client == "gemini":
        return {"model": "pub-model", "stream": stream, "contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    return {"model": "pub-model", "stream": stream, "store": False, "input": "hi", "instructions": "be brief"}


def _stream(client: str, upstream: str, body: bytes, *, websocket: bool = False) -> bytes:
    ctx = Ctx(upstream_model="up-model", public_model="pub-model", tools=tool_info(client))
    _, bridge = open_bridge(_body(client, True), client, upstream, ctx, websocket=websocket)
    out = bridge.receive_data(body) + bridge.end()
    assert bridge.terminal  # the stream was really taken through to its end
    return out


def _whole(client: str, upstream: str) -> bytes:
    ctx = Ctx(upstream_model="up-model", public_model="pub-model", tools=tool_info(client))
    _, bridge = open_bridge(_body(client, False), client, upstream, ctx)
    obj = (
        chat_json("up-model", 20)
        if upstream == "chat"
        else _gemini_whole()
        if upstream == "gemini"
        else responses_json("up-model", 20)
    )
    status, out = bridge.complete(obj)
    assert status == 200
    return out


# a Gemini answer in its own API: thought, text, a call, the finish with usage
GEMINI_CHUNKS: list[dict[str, Any]] = [
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "hm", "thought": True}]}}], "responseId": "r"},
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hello"}]}}]},
    {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"a": 1}},
                                                             "thoughtSignature": "c2ln"}]}}]},
    {"candidates": [{"content": {"role": "model", "parts": []}, "finishReason": "STOP"}],
     "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2, "totalTokenCount": 5}},
]  # fmt: skip


def _streams(upstream: str) -> Iterator[bytes]:
    if upstream == "gemini":
        whole = b"".join(b"data: " + orjson.dumps(c) + b"\r\n\r\n" for c in GEMINI_CHUNKS)
        yield whole
        yield whole[: len(whole) // 2]
        return
    for name in CHAT_FIXTURES if upstream == "chat" else RESP_FIXTURES:
        events = load(name)
        whole = sse_bytes(events)
        yield whole
        yield whole[: len(whole) // 2]  # the upstream went away mid-stream
        mixed = itertools.chain.from_iterable(zip(events, ([o] for o in itertools.cycle(ODD)), strict=False))
        yield b"".join((o[0] + b"\n\n") if isinstance(o, list) else sse_bytes([o]) for o in mixed)


def _gemini_whole() -> dict[str, Any]:
    parts = [p for c in GEMINI_CHUNKS for p in c["candidates"][0]["content"]["parts"]]
    return {**GEMINI_CHUNKS[-1], "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}]}


def _assert_no_cycles(run: Callable[[], Any]) -> None:
    run()  # once first: module-level memos and caches fill on a first use
    with _collector_off() as found:
        for _ in range(3):
            run()
    assert found == [], f"left in reference cycles: {found}"


@pytest.mark.parametrize(("client", "upstream"), list(DIRECTIONS))
def test_streams_leave_no_cycles(client: str, upstream: str) -> None:
    for body in _streams(upstream):
        _assert_no_cycles(lambda body=body: _stream(client, upstream, body))


@pytest.mark.parametrize("upstream", ["chat", "responses"])
def test_websocket_streams_leave_no_cycles(upstream: str) -> None:
    for body in _streams(upstream):
        _assert_no_cycles(lambda body=body: _stream("responses", upstream, body, websocket=True))


@pytest.mark.parametrize(("client", "upstream"), list(DIRECTIONS))
def test_whole_answers_leave_no_cycles(client: str, upstream: str) -> None:
    _assert_no_cycles(lambda: _whole(client, upstream))


def test_the_check_finds_a_cycle() -> None:
    """The check itself: an object holding its own bound method is reported."""

    class Holder:
        def __init__(self) -> None:
            self.handler = self.run

        def run(self) -> None:
            pass

    with _collector_off() as found:
        Holder()
    assert "Holder" in found
