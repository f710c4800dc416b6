"""Every golden case produces, byte for byte (after masking), the recorded corpus file.

A failure shows a unified diff of the recorded file against what the app produces now,
each JSON line pretty-printed.  When a change of the client bytes is intended, re-record
(``.venv/bin/python tests/golden/record.py [SUBSTRING ...]``) and review the corpus diff.
"""

from __future__ import annotations

import pytest

from tests.golden.cases import runs
from tests.golden.harness import CORPUS, corpus_path, diff, render, result

RUNS = runs()


def read(path) -> str:  # type: ignore[no-untyped-def]
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


@pytest.mark.parametrize("case, mode", RUNS, ids=[f"{c.name}.{m}" for c, m in RUNS])
async def test_golden(case, mode) -> None:  # type: ignore[no-untyped-def]
    path = corpus_path(case, mode)
    if not path.exists():
        pytest.fail(f"{path.name} is not recorded: run .venv/bin/python tests/golden/record.py {case.name}")
    expected = read(path)
    actual = render(await result(case, mode))
    if actual != expected:
        pytest.fail(
            f"{path.name}: the client bytes changed ({case.answer.source})\n{diff(expected, actual)}", pytrace=False
        )


def test_no_stale_corpus_files() -> None:
    wanted = {corpus_path(c, m).name for c, m in RUNS}
    stale = sorted(p.name for p in CORPUS.glob("*.txt") if p.name not in wanted)
    assert not stale, f"corpus files no case produces (record.py without arguments removes them): {stale}"
