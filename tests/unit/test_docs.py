"""What the docs say agrees with the repository and with itself."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]


def test_the_docs_do_not_deny_the_limits() -> None:
    """The proxy limits every client key (app/limits.py): no page may say it does not."""
    for page in PAGES:
        text = " ".join(page.read_text(encoding="utf-8").split())
        assert "does not rate-limit" not in text and "no rate limit" not in text, page.name


def test_readme_and_the_bench_readme_give_the_same_run_times() -> None:
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    bench = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    quick = re.search(r"bench/run --quick +# about (\d+) minutes", bench)
    full = re.search(r"bench/run +# full: .*\(about (\d+) minutes\)", bench)
    assert quick and full, "bench/README.md: the run times are not where they were"
    said = re.search(r"`bench/run --quick` \(about (\d+) minutes; `bench/run` for the full run, about (\d+)\)", readme)
    assert said, "README.md: the run times are not where they were"
    assert said.groups() == (quick.group(1), full.group(1))
