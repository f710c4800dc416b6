"""A whole (non-streamed) upstream answer, and an upstream error answer, read right whatever
their ``Content-Encoding`` (``app/pipeline.py``, ``_read_capped``: an uncompressed body off
the response's own stream, a compressed one through httpx's decoder), with the upstream
connection kept alive for the next request.  A real upstream on 127.0.0.1 and the app's own
upstream transport."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from typing import Any

import httpx
import orjson
import pytest

from tests.upstream_io import CountingUpstream, app_before

COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "up",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello " * 50}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 50, "total_tokens": 53},
}
ERROR = {"error": {"message": "that model is not here", "type": "invalid_request_error", "code": "model_not_found"}}
ENCODE = {"identity": lambda b: b, "gzip": gzip.compress, "deflate": zlib.compress}


class _Upstream(CountingUpstream):
    """Each answer in ``encoding`` (none said for ``identity``), in two writes."""

    def __init__(self, encoding: str, status: int) -> None:
        super().__init__()
        self.encoding = encoding
        self.status = status

    async def answer(self, w: asyncio.StreamWriter) -> bool:
        body = ENCODE[self.encoding](orjson.dumps(COMPLETION if self.status == 200 else ERROR))
        enc = b"" if self.encoding == "identity" else b"content-encoding: %s\r\n" % self.encoding.encode()
        w.write(
            b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\n%scontent-length: %d\r\n\r\n"
            % (self.status, enc, len(body))
        )
        w.write(body[: len(body) // 2])
        await w.drain()
        await asyncio.sleep(0.005)
        w.write(body[len(body) // 2 :])
        await w.drain()
        return True


@pytest.mark.parametrize("encoding", sorted(ENCODE))
@pytest.mark.parametrize("status", [200, 404])
async def test_whole_answers_in_any_encoding(encoding: str, status: int) -> None:
    up = _Upstream(encoding, status)
    async with (
        app_before(up.handle) as app,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8080") as c,
    ):
        for _ in range(3):
            r = await c.post(
                "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            )
            got: dict[str, Any] = r.json()
            if status == 200:
                assert r.status_code == 200
                assert got["choices"][0]["message"]["content"] == "hello " * 50
                assert got["usage"]["total_tokens"] == 53
            else:
                assert r.status_code == 404
                assert got["error"]["message"].endswith(": that model is not here")
    assert (up.connections, up.requests) == (1, 3)  # each body read to its end: kept alive
