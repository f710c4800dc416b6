"""bench/timeline.py: the proxy, started with its time stamps, answers as usual, and every
stream of every round gets every stamp, in the order a stream passes them.  Correctness
only (no timing assertion)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.timeline import STAMPS, STEPS, machine, measure, report

PYTHON = str(Path(sys.executable))


@pytest.mark.parametrize(("case", "keep"), [("pace-resp2chat", False), ("pace-chat", True)])
def test_every_stream_of_every_round_has_its_stamps_in_order(case: str, keep: bool) -> None:
    result = measure(PYTHON, case, rounds=2, streams=3, idle=0.05, keep=keep)
    assert len(result) == 2
    for rnd in result:
        assert len(rnd) == 3
        assert len({r["port"] for r in rnd}) == 3  # one stream per connection
        if keep:  # the same connections in every round
            assert {r["port"] for r in rnd} == {r["port"] for r in result[0]}
        assert [r["read"] for r in rnd] == sorted(r["read"] for r in rnd)  # in order of arrival
        for r in rnd:
            # one clock for both processes: each stamp after the one before it on the request's
            # way, and on the answer's (the head and the first text may come in one read when
            # the proxy was kept off its core for a whole 5 ms step)
            # and the fake upstream's own: the request read there after the proxy wrote it, its
            # first text written one 5 ms step after that at the earliest, before the proxy read it
            assert set(STAMPS) <= r.keys()
            for way in (
                ("sent", "read", "up", "upstream read", "head in", "head out"),
                ("upstream read", "upstream text", "text in", "text out", "got"),
                ("head in", "text in"),
            ):
                assert [r[s] for s in way] == sorted(r[s] for s in way), r
            assert r["upstream text"] - r["upstream read"] >= 0.005, r
    table = report(result).splitlines()
    assert table[0].count("stream ") == 3
    titles = [line.split(" | ")[0].strip("| ") for line in table[2:]]
    assert titles == ["sent: after the round's first request", *(title for title, _, _ in STEPS)]


def test_the_machine_probe_times_its_two_pieces_of_work() -> None:
    rows = machine(0.01, 2).splitlines()[2:]
    assert [r.split(" | ")[0].strip("| ") for r in rows] == ["a loop of 300 steps", "64 pages of memory written"]
    for r in rows:
        first, again = (float(x) for x in r.strip("| ").split(" | ")[1:])
        assert first > 0 and again > 0
