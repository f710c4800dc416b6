"""A read of many events goes through the Bridge a slice at a time (``app/pipeline.py``,
``_SLICE_BYTES``): each slice is cut after an event's blank line, its output goes out by the
coalescing rule (here made to send at once), and the client's bytes are the very bytes the
whole read gives at once.

A real upstream on 127.0.0.1 writes a burst of text chunks in one write (one HTTP chunk per
event, as vLLM sends them), so the proxy reads far more than a slice at a time; the app is
called as ASGI so that the test sees each message it sends.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import orjson
import pytest

from app import pipeline
from tests.upstream_io import CountingUpstream, app_before, asgi_post
from transformers.bridge import Bridge

_N = 600  # text chunks in the burst: ~100 KB, several reads of 64 KiB and many slices


def _event(obj: dict[str, Any]) -> bytes:
    data = b"data: " + orjson.dumps(obj) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


class _Burst(CountingUpstream):
    async def answer(self, w: asyncio.StreamWriter) -> bool:
        parts = [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"]
        parts.append(_event(_chunk({"role": "assistant", "content": ""})))
        parts += [_event(_chunk({"content": f" word{i} é\n"})) for i in range(_N)]
        parts.append(_event(_chunk({}, "stop")))
        usage = {"prompt_tokens": 3, "completion_tokens": _N, "total_tokens": _N + 3}
        parts.append(_event({**_chunk({}), "choices": [], "usage": usage}))
        done = b"data: [DONE]\n\n"
        parts.append(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
        w.write(b"".join(parts))  # one write: the proxy finds many events in each read
        await w.drain()
        return True


_MINTED = re.compile(rb"(msg|resp)_[0-9a-f]{16,}|\"(created_at|completed_at)\":\d{6,}")


async def _turn(path: str, body: dict[str, Any]) -> tuple[bytes, list[int], int]:
    """The client's bytes (minted ids masked), the sizes the Bridge was fed, the body messages."""
    fed: list[int] = []
    real = Bridge.receive_data

    def spy(self: Bridge, data: bytes) -> bytes:
        fed.append(len(data))
        return real(self, data)

    sent: list[dict[str, Any]] = []

    async def send(msg: dict[str, Any]) -> None:
        sent.append(msg)

    up = _Burst()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Bridge, "receive_data", spy)
        async with app_before(up.handle) as app:
            await asgi_post(app, path, orjson.dumps(body), send)
    assert sent[0]["status"] == 200
    out = b"".join(m.get("body", b"") for m in sent[1:])
    return _MINTED.sub(b"<minted>", out), fed, len(sent) - 1


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/responses", {"model": "m", "stream": True, "store": False, "input": "hi"}),
    ],
)
async def test_a_burst_goes_out_a_slice_at_a_time_with_the_same_bytes(
    path: str, body: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipeline, "_FLUSH_SECONDS", 0.0)  # every output is sent as it is made
    size = pipeline._SLICE_BYTES
    sliced, fed, messages = await _turn(path, body)
    # every piece fed is at most a slice and the event that crosses its end (~150 bytes here)
    assert max(fed) <= size + 200
    # the burst is ~100 KB: at least that many slices, each one's output sent as it was made
    assert len(fed) >= 100_000 // size
    assert messages >= len(fed)
    monkeypatch.setattr(pipeline, "_SLICE_BYTES", 1 << 30)  # whole reads, as before slicing
    whole, fed_whole, _ = await _turn(path, body)
    assert max(fed_whole) > size  # the reads were larger than a slice: slicing cut them
    assert sliced == whole
    assert (b"word%d " % (_N - 1)) in sliced and sliced.count(b" word") >= _N  # (Responses: and its done events)


@pytest.mark.parametrize(
    ("chunk", "cut"),
    [
        (b"", None),
        (b"data: x\n\n" * 10, None),  # not past a slice
        (b"data: " + b"x" * 20_000 + b"\n\n", None),  # one event longer than a slice: whole
        (b"data: " + b"x" * 20_000, None),  # no blank line at all
        (b"data: a\n\n" + b"data: " + b"x" * 20_000 + b"\n\ndata: b\n\n", 20_017),  # after the long one
        ((b"data: " + b"y" * 90 + b"\n\n") * 300, 16_464),  # the first blank line past 16 KiB (168 events of 98 bytes)
    ],
)
def test_slice(chunk: bytes, cut: int | None) -> None:
    head, rest = pipeline._slice(chunk)
    assert head + rest == chunk
    if cut is None:
        assert rest == b""
    else:
        assert len(head) == cut and head.endswith(b"\n\n") and rest
        assert b"\n\n" not in head[pipeline._SLICE_BYTES - 2 : -2]
