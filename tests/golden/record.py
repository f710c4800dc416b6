"""Record the golden corpus: ``.venv/bin/python tests/golden/record.py [SUBSTRING ...]``.

Runs every case of ``cases.py`` in each of its modes through the app (``harness.run``) and
rewrites ``tests/golden/corpus/<case>.<stream|json>.txt``.  With arguments, only the cases
whose file name contains one of them are rewritten; without, every file is, and corpus
files no case produces any more are deleted.  Run from the repository root.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import structlog  # noqa: E402

from tests.golden import harness  # noqa: E402
from tests.golden.cases import CASES, runs  # noqa: E402


async def main(filters: list[str]) -> int:
    started = time.perf_counter()
    harness.CORPUS.mkdir(parents=True, exist_ok=True)
    wanted = {harness.corpus_path(c, m).name for c, m in runs()}
    written = 0
    for case, mode in runs():
        path = harness.corpus_path(case, mode)
        if filters and not any(f in path.name for f in filters):
            continue
        text = harness.render(await harness.run(case, mode))
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        written += 1
    removed = 0
    if not filters:
        for p in harness.CORPUS.glob("*.txt"):
            if p.name not in wanted:
                p.unlink()
                removed += 1
    by_dir: dict[str, int] = {}
    for c, m in runs():
        key = f"{c.client}-to-{c.upstream} {m}"
        by_dir[key] = by_dir.get(key, 0) + 1
    print(
        f"{len(CASES)} cases, {written} corpus files written, {removed} stale removed, "
        f"{time.perf_counter() - started:.1f}s"
    )
    for k in sorted(by_dir):
        print(f"  {k}: {by_dir[k]}")
    return 0


if __name__ == "__main__":
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    sys.exit(asyncio.run(main(sys.argv[1:])))
