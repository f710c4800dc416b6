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


# design notes that live outside this repository: a comment or a page citing one points a
# reader at a file a clone does not have (the rules the code keeps are in docs/rules.md)
OUTSIDE = re.compile(
    r"\.\./shared|\bshared/(?:seeds|tools|[A-Z])|\bDESIGN(?:\.md| rule)|\bSPEC\b|\bPAINS\b|\bCLIENTS\.md|\bseeds/|\bseed 0\d\d"
)


def test_nothing_cites_a_note_outside_the_repository() -> None:
    import subprocess

    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    found = []
    for name in tracked.splitlines():
        path = ROOT / name
        if name.startswith("tests/golden/") and not name.endswith(".py") or not path.is_file():
            continue  # recorded bytes, not prose
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line) and path != Path(__file__):
                found.append(f"{name}:{n}: {line.strip()[:100]}")
    assert not found, "citations of notes outside the repository:\n" + "\n".join(found)


def test_the_rules_page_has_every_rule_cited() -> None:
    """Every ``docs/rules.md`` §n or Fn that a file cites is on that page."""
    import subprocess

    rules = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    have = set(re.findall(r"§\d+(?:\.\d+)?|\bF\d+\b", rules))
    grep = subprocess.run(["git", "grep", "-h", "docs/rules.md"], cwd=ROOT, capture_output=True, text=True).stdout
    cited = set()
    for line in grep.splitlines():
        for tail in re.findall(r"docs/rules\.md,? ((?:(?:§\d+(?:\.\d+)?|F\d+)[^()\n|]*?)+)(?:[)|\n]|$)", line):
            cited |= set(re.findall(r"§\d+(?:\.\d+)?|\bF\d+\b", tail))
    assert cited and not cited - have, sorted(cited - have)
