"""app.exchange.drain_rest: what is left of an upstream body after the terminal event is read,
at most ``_DRAIN_BYTES`` and ``_DRAIN_SECONDS``, whether its parts are already buffered (read
eagerly, no timer) or come later; a transport error ends it quietly."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from app import exchange
from app.exchange import drain_rest as _drain


class _Body:
    """An upstream body's rest: each part is bytes (ready at once), a float (a wait of that
    many seconds, then the next part) or an exception (raised)."""

    def __init__(self, *parts: Any) -> None:
        self.parts = list(parts)
        self.read: list[bytes] = []

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        while self.parts:
            part = self.parts.pop(0)
            if isinstance(part, float):
                await asyncio.sleep(part)
                continue
            if isinstance(part, BaseException):
                raise part
            self.read.append(part)
            return part
        raise StopAsyncIteration


@pytest.mark.parametrize(
    ("parts", "read"),
    [
        ((b"data: [DONE]\n\n", b""), 2),  # all buffered: read to the end, no timer
        ((), 0),  # nothing left
        ((0.02, b"late", 0.02, b"later"), 2),  # parts that come later: read under the timer
        ((b"now", 0.02, b"late"), 2),  # one buffered, one later
        ((b"x" * 40_000, b"y" * 40_000, b"never"), 2),  # past _DRAIN_BYTES (buffered): stopped
        ((b"x" * 40_000, 0.01, b"y" * 40_000, b"never"), 2),  # the same, crossing it later
        ((0.01, b"y" * 70_000, b"never"), 1),  # the first part that waits is past it
        ((b"a", httpx.ReadError("cut")), 1),  # a transport error: ends quietly
        ((0.01, httpx.RemoteProtocolError("bad chunk")), 0),
    ],
)
async def test_the_rest_is_read_within_its_bounds(parts: tuple[Any, ...], read: int) -> None:
    body = _Body(*parts)
    await _drain(body)
    assert len(body.read) == read


async def test_a_silent_rest_is_left_after_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exchange, "_DRAIN_SECONDS", 0.05)
    body = _Body(b"ready", 5.0, b"never")
    t0 = time.monotonic()
    await _drain(body)
    assert body.read == [b"ready"] and time.monotonic() - t0 < 1.0


async def test_another_error_is_not_swallowed() -> None:
    with pytest.raises(ValueError):
        await _drain(_Body(b"a", ValueError("not a transport error")))
    with pytest.raises(ValueError):
        await _drain(_Body(0.01, ValueError("not a transport error")))
