"""bench/collector.py: the proxy, started with the collector's hook, answers as usual and
reports what the cyclic collector did and found.  Correctness only (no timing assertion)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench import collector

PYTHON = str(Path(sys.executable))


def test_a_stream_leaves_nothing_for_the_collector() -> None:
    rec = collector.measure(PYTHON, "st-resp2chat-n20", 30, warm=3)
    assert rec["requests"] == 30 and len(rec["counts"]) == len(rec["found"]) == collector.GENERATIONS
    assert rec["found"] == [0, 0, 0]  # nothing held by cycles (tests/unit/test_no_cycles.py)
    line = collector.row("st-resp2chat-n20", rec)
    assert line.startswith("| st-resp2chat-n20 | ") and line.count("|") == 6


def test_garbage_mode_names_what_cycles_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a cycle put back into every Responses encoder (its own bound method), the
    garbage mode names the encoder: the tool sees what it is there to see."""
    rec = collector.measure(PYTHON, "st-resp2chat-n20", 5, garbage=True, warm=2)
    assert rec["types"] == []
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent / "cycle_plugin"))
    rec = collector.measure(PYTHON, "st-resp2chat-n20", 5, garbage=True, warm=2)
    kinds = dict(rec["types"])
    assert kinds.get("transformers.responses_encode.ResponsesStreamEncoder") == 5
