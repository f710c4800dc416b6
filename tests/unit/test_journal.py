"""The SQLite store's put journal (app/journal.py): its frames, torn tails, the two files of
a process, and the files of a process that is gone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from app import journal
from app.journal import Entry

ROOT = Path(__file__).resolve().parents[2]


def entry(seq: int, blob: bytes = b"{}") -> Entry:
    return Entry(seq, 1700000000.5 + seq, f"scope/resp_{seq}", blob, [f"scope/resp_{seq - 1}"], [f"scope/msg_{seq}"])


def test_frames_read_back_as_written():
    es = [entry(1, b'{"a":1}'), entry(2, bytes(range(256)) * 20), entry(3, b"")]
    assert journal.decode_all(b"".join(journal.encode(e) for e in es)) == es


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=6), st.data())
def test_a_torn_or_damaged_frame_ends_the_reading(blobs, data):
    """Whatever prefix of the file a reader sees (a write under way, a process killed in
    it), it reads the whole frames before the cut and nothing after; a damaged byte ends
    the reading at its frame."""
    es = [entry(i + 1, b) for i, b in enumerate(blobs)]
    frames = [journal.encode(e) for e in es]
    raw = b"".join(frames)
    cut = data.draw(st.integers(0, len(raw)))
    ends = [sum(len(f) for f in frames[: i + 1]) for i in range(len(frames))]
    assert journal.decode_all(raw[:cut]) == [e for e, end in zip(es, ends) if end <= cut]
    at = data.draw(st.integers(0, len(raw) - 1))
    damaged = raw[:at] + bytes([raw[at] ^ 0x41]) + raw[at + 1 :]
    hit = next(i for i, end in enumerate(ends) if at < end)
    assert journal.decode_all(damaged) == es[:hit]


def test_two_files_per_process_and_only_a_gone_ones_are_orphans(tmp_path):
    d = str(tmp_path / "r.db-puts")
    live = journal.Journal(d)
    other = journal.Journal(d)  # (another process's, as far as the locks go)
    live.append(journal.encode(entry(1)))
    old = live.swap()
    live.append(journal.encode(entry(2)))
    assert [e.seq for e in journal.read_siblings(d, other.token)] == [1, 2]
    assert list(journal.orphans(d, other.token)) == []  # (its locks are held)
    live.clear(old)
    assert [e.seq for e in journal.read_siblings(d, other.token)] == [2]
    live.close(unlink=False)  # (gone, one put not applied)
    found = list(journal.orphans(d, other.token))
    assert [[e.seq for e in o.entries] for o in found] == [[2]]
    assert list(journal.orphans(d, other.token)) == []  # (locked by whoever took it)
    journal.release(found[0], applied=True)
    assert sorted(os.listdir(d)) == sorted(os.path.basename(other.path(i)) for i in (0, 1))
    other.close(unlink=True)
    assert os.listdir(d) == []
    assert oct(os.stat(d).st_mode & 0o777) == "0o700"


_SHORT = """
import os, resource, signal, sys
from app import journal
from app.journal import Entry
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (past the limit: a short write, not a signal)
j = journal.Journal(sys.argv[1])
first = journal.encode(Entry(1, 1.5, "k/resp_1", b"x" * 100, [], []))
j.append(first)
resource.setrlimit(resource.RLIMIT_FSIZE, (len(first) + 40, resource.RLIM_INFINITY))
try:
    j.append(journal.encode(Entry(2, 2.5, "k/resp_2", b"y" * 100, [], [])))
except OSError as e:
    print("raised", e)
print(os.path.getsize(j.path(0)), len(first))
"""


def test_a_short_write_is_cut_off_and_raised(tmp_path):
    """A write the disk takes only part of (here: a file size limit, in a process of its
    own) raises, and the journal is cut back to its last whole frame: no partial frame
    stays for the next append to follow."""
    d = str(tmp_path / "r.db-puts")
    out = subprocess.run([sys.executable, "-c", _SHORT, d], capture_output=True, text=True, timeout=60, cwd=ROOT)
    lines = out.stdout.splitlines()
    assert lines[:1] == ["raised journal: short write"], out.stderr[-2000:]
    size, first = lines[1].split()
    assert size == first  # (the 40 bytes of the second frame that went in were cut off)
    (name,) = [n for n in os.listdir(d) if n.endswith(".0.log")]
    with open(os.path.join(d, name), "rb") as f:
        assert [e.seq for e in journal.decode_all(f.read())] == [1]
