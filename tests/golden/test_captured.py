"""Captured exchanges (``switchboard replay FILE --golden NAME`` writes them here) replay
through today's code to the bytes the client got when they were captured (app/replay.py)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from app.replay import replay_line

CAPTURED = sorted((Path(__file__).parent / "captured").glob("*.json"))


def test_there_are_captured_cases() -> None:
    """Besides field captures: one turn per store mode (absent and true are echoed as
    stored, false is stateless) and one whose created_at equals its completed_at."""
    names = {p.stem for p in CAPTURED}
    assert {"store-absent", "store-true", "store-false", "equal-clocks"} <= names
    assert len(CAPTURED) >= 7


@pytest.mark.parametrize("path", CAPTURED, ids=[p.stem for p in CAPTURED])
def test_a_captured_exchange_replays_to_the_same_bytes(path: Path) -> None:
    out = replay_line(orjson.loads(path.read_bytes()))
    assert out.same, f"{path.name}: the proxy's bytes changed since the capture:\n{out.diff()}"
