"""bench/phases.py: the proxy, started with its time stamps, answers as usual and reports the
four phases of every measured request.  Correctness only (no timing assertion)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from bench.phases import HEAD_CUTS, HEAD_LAST, LAST_STEP, PHASES, STEPS, TAIL, measure, report, report_steps

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


def test_steps_cut_the_request_path_and_the_answer_head_and_time_the_tail() -> None:
    rows = measure(PYTHON, "st-resp-n20", 3, 0.0, warm=2, steps=True)
    assert len(rows) == 3
    names = [name for name, _, _ in STEPS] + [LAST_STEP]
    heads = [name for name, _, _ in HEAD_CUTS] + [HEAD_LAST]
    width = len(PHASES) + len(names) + len(heads)
    for r in rows[:-1]:  # every request another followed: its steps, then its tail
        assert len(r) == width + len(TAIL)
    assert len(rows[-1]) == width  # the last: nothing came after it
    for r in rows:
        steps = r[len(PHASES) : len(PHASES) + len(names)]
        assert all(x > 0 for x in steps)  # a Responses request takes every step
        # the steps are the request path, cut: they add up to its phase
        assert abs(sum(steps) - r[0]) < 0.5
        head = r[len(PHASES) + len(names) : width]
        assert all(x > 0 for x in head)  # a stream's head comes back through every cut
        assert abs(sum(head) - r[2]) < 0.5  # and they add up to the answer head's phase
    table = report_steps(rows).splitlines()
    rows_named = [line.split(" | ")[0].strip("| ") for line in table if line.startswith("| ") and "µs" not in line]
    assert rows_named == names + heads + list(TAIL)
    for r in rows[:-1]:  # the tail's cuts come in their order, each after the answer's last bytes
        tail = r[width:]
        assert tail[0] > 0 and tail == sorted(tail)
    table = report_steps(rows, gap=0.1).splitlines()  # then the next request's arrival is the gap's
    rows_named = [line.split(" | ")[0].strip("| ") for line in table if line.startswith("| ") and "µs" not in line]
    assert rows_named == names + heads + list(TAIL[:-1])


def test_a_whole_answer_has_no_drain_in_its_tail() -> None:
    rows = measure(PYTHON, "ns-chat", 3, 0.0, warm=2, steps=True)
    # the tail's second cut: the rest of the upstream body
    drained = len(PHASES) + len(STEPS) + 1 + len(HEAD_CUTS) + 1 + 1
    assert all(math.isnan(r[drained]) for r in rows[:-1])
    table = report_steps(rows).splitlines()
    assert "→ the rest of the upstream body read" not in [line.split(" | ")[0].strip("| ") for line in table[2:]]
    assert table[-1].startswith("| → the next request read")
