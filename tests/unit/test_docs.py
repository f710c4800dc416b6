"""What the docs say agrees with the repository and with itself."""

from __future__ import annotations

import os
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


_SKIP_DIRS = {
    ".git",
    ".venv",
    ".e2e",
    ".hypothesis",
    "node_modules",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
}


def _texts() -> list[tuple[str, str]]:
    """(path, text) of every text file of the repository (recorded golden bytes aside)."""
    out = []
    paths = []
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(
            d for d in dirs if d not in _SKIP_DIRS and not d.startswith(".venv") and not d.endswith(".egg-info")
        )
        paths += [Path(top) / f for f in sorted(files)]
    for path in paths:
        rel = path.relative_to(ROOT)
        if rel.parts[:2] == ("tests", "golden") and path.suffix != ".py" and path.name != "README.md":
            continue  # recorded bytes, not prose
        try:
            out.append((rel.as_posix(), path.read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError):
            continue
    return out


def test_nothing_cites_a_note_outside_the_repository() -> None:
    found = []
    for name, text in _texts():
        if name == "tests/unit/test_docs.py":
            continue  # the pattern itself
        for n, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{name}:{n}: {line.strip()[:100]}")
    assert not found, "citations of notes outside the repository:\n" + "\n".join(found)


def test_the_rules_page_has_every_rule_cited() -> None:
    """Every ``docs/rules.md`` §n or Fn that a file cites is on that page."""
    rules = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    have = set(re.findall(r"§\d+(?:\.\d+)?|\bF\d+\b", rules))
    cited = set()
    for _, text in _texts():
        for line in text.splitlines():
            for tail in re.findall(r"docs/rules\.md,? ((?:(?:§\d+(?:\.\d+)?|F\d+)[^()\n|]*?)+)(?:[)|\n]|$)", line):
                cited |= set(re.findall(r"§\d+(?:\.\d+)?|\bF\d+\b", tail))
    assert cited and not cited - have, sorted(cited - have)


# Every page is written in short sentences and paragraphs. The count is plain: sentences end
# at . ! or ? followed by whitespace, and a list item ends one too; fenced code, table rows,
# headings and block quotes are not counted (a block quote gives text verbatim, such as the
# summary prompt docs/clients.md quotes from transformers/compaction.py).
MAX_AVERAGE_WORDS = 22  # per sentence, over the page
MAX_PARAGRAPH_WORDS = 100

_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _prose_paragraphs(text: str) -> list[str]:
    """The page's prose: paragraphs and list items, each joined into one line."""
    out: list[str] = []
    cur: list[str] = []
    fenced = False

    def flush() -> None:
        if cur:
            out.append(" ".join(cur))
            cur.clear()

    for line in text.splitlines():
        s = line.strip()
        if s.startswith(("```", "~~~")):
            flush()
            fenced = not fenced
        elif fenced:
            continue
        elif not s or s.startswith(("|", "#", "<!--", ">")):
            flush()
        elif _ITEM.match(line):
            flush()
            cur.append(_ITEM.sub("", line).strip())
        else:
            cur.append(s)
    flush()
    return out


def _sentences(paragraph: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(paragraph) if re.search(r"\w", s)]


def test_every_page_is_written_in_short_sentences() -> None:
    problems = []
    for page in PAGES:
        name = page.relative_to(ROOT).as_posix()
        paragraphs = _prose_paragraphs(page.read_text(encoding="utf-8"))
        sentences = [s for p in paragraphs for s in _sentences(p)]
        words = sum(len(s.split()) for s in sentences)
        average = words / max(len(sentences), 1)
        if average > MAX_AVERAGE_WORDS:
            problems.append(f"{name}: {average:.1f} words a sentence on average (at most {MAX_AVERAGE_WORDS})")
        for p in paragraphs:
            if len(p.split()) > MAX_PARAGRAPH_WORDS:
                first = " ".join(p.split()[:12])
                problems.append(
                    f"{name}: a paragraph of {len(p.split())} words (at most {MAX_PARAGRAPH_WORDS}): {first} …"
                )
    assert not problems, "\n".join(problems)


def test_the_sentence_count_reads_prose_only() -> None:
    page = (
        "# A heading of many words that is not counted\n\n"
        "One two three. Four five!\nSix seven?\n\n"
        "```\nnot. counted. at. all.\n```\n\n"
        "| a table. | row. |\n\n"
        "> a quote. Given verbatim.\n\n"
        "- an item\n  that goes on\n- another item. With two sentences\n"
    )
    paragraphs = _prose_paragraphs(page)
    assert paragraphs == [
        "One two three. Four five! Six seven?",
        "an item that goes on",
        "another item. With two sentences",
    ]
    assert [len(_sentences(p)) for p in paragraphs] == [3, 1, 2]


# A path a page names in backticks, under one of the repository's own top-level folders
# (`app/x.py`, `bench/y.py`, `docs/z.md`, `tests/...`), is a file or folder of the repository.
# Paths of other projects (`codex-rs/...`) and generated ones (`bench/results/<name>`) are not
# checked. The one exception is a file since deleted, and it is explicit and narrow:
#
# - the page declares it on one line, with the commit that deleted it:
#   <!-- deleted in 775ebe9: app/http11.py app/netio.py -->
# - the paragraph, list item or table row that names it names that commit too, so that the
#   sentence reads as history ("until 775ebe9, ...");
# - a file declared deleted does not exist.
_PATH = re.compile(r"`((?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.-]*)`")
_DELETED = re.compile(r"^<!-- deleted in ([0-9a-f]{7,40}): (.+?) -->$")


def _top_folders() -> set[str]:
    return {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name not in _SKIP_DIRS}


def _blocks(text: str) -> list[str]:
    """The page's paragraphs, list items and table rows (headings and fenced code included
    as blocks of their own), each joined into one line."""
    out: list[str] = []
    cur: list[str] = []
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith(("|", "#", "```", "~~~")) or _ITEM.match(line):
            if cur:
                out.append(" ".join(cur))
                cur.clear()
            if s.startswith(("|", "#", "```", "~~~")):
                out.append(s)
                continue
        if s:
            cur.append(_ITEM.sub("", line).strip())
    if cur:
        out.append(" ".join(cur))
    return out


def _deleted(text: str) -> dict[str, str]:
    """path → the commit that deleted it, as the page declares them."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _DELETED.match(line.strip())
        if m:
            out |= {path: m.group(1) for path in m.group(2).split()}
    return out


def test_every_path_a_page_names_is_in_the_repository() -> None:
    tops = _top_folders()
    problems = []
    for page in PAGES:
        name = page.relative_to(ROOT).as_posix()
        text = page.read_text(encoding="utf-8")
        deleted = _deleted(text)
        for path, commit in deleted.items():
            if (ROOT / path).exists():
                problems.append(f"{name}: declares {path} deleted in {commit}, but it exists")
        for block in _blocks(text):
            if _DELETED.match(block):
                continue
            for path in _PATH.findall(block):
                if path.split("/")[0] not in tops or (ROOT / path).exists():
                    continue
                if path not in deleted:
                    problems.append(f"{name}: `{path}` is not in the repository")
                elif deleted[path] not in block:
                    problems.append(
                        f"{name}: `{path}` (deleted in {deleted[path]}) named without its commit: "
                        + " ".join(block.split()[:12])
                        + " …"
                    )
    assert not problems, "\n".join(problems)


def test_the_path_check_reads_declarations_and_blocks() -> None:
    page = (
        "<!-- deleted in 775ebe9: app/http11.py app/netio.py -->\n\n"
        "Until 775ebe9, `app/http11.py` ran each exchange.\n"
        "It went on.\n\n"
        "- an item naming `app/netio.py`\n"
        "| a row | `bench/run.py` |\n"
    )
    assert _deleted(page) == {"app/http11.py": "775ebe9", "app/netio.py": "775ebe9"}
    blocks = _blocks(page)
    assert "Until 775ebe9, `app/http11.py` ran each exchange. It went on." in blocks
    assert "an item naming `app/netio.py`" in blocks
    assert "| a row | `bench/run.py` |" in blocks
    assert _PATH.findall("`app/x.py`, `tests/e2e/`, `application/json` and `git show a:b`") == [
        "app/x.py",
        "tests/e2e/",
        "application/json",
    ]
