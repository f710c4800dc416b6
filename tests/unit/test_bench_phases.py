"""bench/phases.py: the proxy, started with its time stamps, answers as usual and reports the
four phases of every measured request.  Correctness only (no timing assertion)."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.phases import PHASES, measure, report

PYTHON = str(Path(sys.executable))


def test_every_measured_request_has_its_four_phases() -> None:
    rows = measure(PYTHON, "st-chat-n20", 4, 0.0, warm=3)
    assert len(rows) == 4
    for r in rows:
        assert len(r) == len(PHASES) and all(x > 0 for x in r)
    table = report(rows).splitlines()
    assert [line.split(" | ")[0].strip("| ") for line in table[2:]] == list(PHASES)


def test_a_non_streamed_request_too() -> None:
    rows = measure(PYTHON, "ns-chat", 2, 0.01, warm=1)
    assert len(rows) == 2 and all(len(r) == 4 for r in rows)
