"""The SQLite store's put journal: a put is kept once it is appended here; the store's
writer thread copies puts into the database file later, many in one transaction.

Theory of operation
-------------------
A put appended to a file is as safe as a committed SQLite transaction in WAL mode with
``synchronous=NORMAL``: a process that crashes after ``write`` returned loses nothing (the
kernel has the bytes), a power cut may lose the last of them.  Appending costs one
``write``; a transaction costs several frames of the write-ahead log, locks, and a hand-off
to the writer's thread and back.  So the store answers a put once it is appended, and its
writer applies the puts of the last few milliseconds together.

Each process keeps two files in the journal directory (``<database>-puts/``, mode 0700),
``<token>.0.log`` and ``<token>.1.log``, each locked with ``flock`` for the process's life.
Puts go to the current file.  The writer takes the puts appended so far and makes the other
file current (``swap``), applies the puts it took, commits, and only then empties the file
they were in (``clear``).  A file is emptied only when every put in it is in the database.

A frame is ``<III``: the payload's length, the length of its JSON part, the CRC-32 of the
two lengths and the payload; the payload is the JSON ``[seq, now, rid, touch, item_ids]`` followed by the
record's bytes.  ``seq`` orders a process's puts across its two files.  A frame cut short
or failing its CRC ends a file's reading: it was being written when its process died
(that put never returned) or when a reader read.

Other processes (workers on one file) read a sibling's puts that are not in the database
yet with ``read_siblings``: a reader that read the journals and then the database finds
every put whose ``write`` returned before it began.  A put leaves its file only after its
commit.  A process that finds a file whose lock it can take owns it (``orphans``): the
process that wrote it is gone, and its puts are applied by whoever took the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import struct
import zlib
from collections.abc import Iterator
from typing import NamedTuple

import orjson

_FRAME = struct.Struct("<III")
_LENGTHS = struct.Struct("<II")


class Entry(NamedTuple):
    seq: int
    now: float  # the put's time: its expiry and its ancestors' renewal count from it
    rid: str
    blob: bytes
    touch: list[str]
    item_ids: list[str]


def encode(e: Entry) -> bytes:
    head = orjson.dumps([e.seq, e.now, e.rid, e.touch, e.item_ids])
    payload = head + e.blob
    return _FRAME.pack(len(payload), len(head), _crc(len(payload), len(head), payload)) + payload


def _crc(size: int, head: int, payload: bytes) -> int:
    """Over the two lengths and the payload: any damaged byte of a frame is caught."""
    return zlib.crc32(payload, zlib.crc32(_LENGTHS.pack(size, head)))


def decode_all(data: bytes) -> list[Entry]:
    """Every whole frame of ``data``, up to the first torn or damaged one."""
    out: list[Entry] = []
    at = 0
    while at + _FRAME.size <= len(data):
        size, head, crc = _FRAME.unpack_from(data, at)
        start = at + _FRAME.size
        payload = data[start : start + size]
        if len(payload) < size or head > size or _crc(size, head, payload) != crc:
            break
        try:
            seq, now, rid, touch, item_ids = orjson.loads(payload[:head])
        except (orjson.JSONDecodeError, ValueError, TypeError):
            break
        out.append(Entry(int(seq), float(now), str(rid), bytes(payload[head:]), list(touch), list(item_ids)))
        at = start + size
    return out


def directory_of(db_path: str) -> str:
    return db_path + "-puts"


class Journal:
    """This process's two files.  Not thread-safe: the store's lock guards every call."""

    def __init__(self, directory: str) -> None:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self.directory = directory
        self.token = f"{os.getpid()}-{secrets.token_hex(4)}"
        self._fds: list[int] = []
        try:
            for i in (0, 1):
                fd = os.open(self.path(i), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
                self._fds.append(fd)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            self.close(unlink=True)
            raise
        self.current = 0
        self._sizes = [0, 0]

    def path(self, i: int) -> str:
        return os.path.join(self.directory, f"{self.token}.{i}.log")

    def append(self, frame: bytes) -> None:
        """One ``write``; a short one (a full disk) is cut off again and raised."""
        fd = self._fds[self.current]
        try:
            n = os.write(fd, frame)
        except OSError:
            self._cut(fd)
            raise
        if n != len(frame):
            self._cut(fd)
            raise OSError("journal: short write")
        self._sizes[self.current] += n

    def _cut(self, fd: int) -> None:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, self._sizes[self.current])

    def swap(self) -> int:
        """Make the other file current; the one that was (its puts taken by the writer)."""
        old = self.current
        self.current = 1 - old
        return old

    def clear(self, i: int) -> None:
        os.ftruncate(self._fds[i], 0)
        self._sizes[i] = 0

    def close(self, unlink: bool) -> None:
        """Close the files (their locks go with them); ``unlink``: every put in them is in
        the database.  Otherwise they stay for the next process to apply (``orphans``)."""
        fds, self._fds = self._fds, []
        for i, fd in enumerate(fds):
            if unlink:
                with contextlib.suppress(OSError):
                    os.unlink(self.path(i))
            os.close(fd)


def _others(directory: str, own: str) -> list[str]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.endswith(".log") and not n.startswith(own + "."))


def has_siblings(directory: str, own: str) -> bool:
    return bool(_others(directory, own))


def read_siblings(directory: str, own: str) -> list[Entry]:
    """The puts in other processes' files (live or not), in each process's order."""
    out: list[Entry] = []
    for name in _others(directory, own):
        try:
            with open(os.path.join(directory, name), "rb") as f:
                out.extend(decode_all(f.read()))
        except FileNotFoundError:  # (applied and removed meanwhile: in the database now)
            continue
    out.sort(key=lambda e: e.seq)
    return out


class Orphan(NamedTuple):
    paths: list[str]
    fds: list[int]
    entries: list[Entry]


def orphans(directory: str, own: str) -> Iterator[Orphan]:
    """The files of processes that are gone, one process's at a time, each file locked by
    this process until ``release``: their puts, in their order."""
    by_token: dict[str, list[str]] = {}
    for name in _others(directory, own):
        by_token.setdefault(name.rsplit(".", 2)[0], []).append(name)
    for names in by_token.values():
        paths: list[str] = []
        fds: list[int] = []
        entries: list[Entry] = []
        for name in names:
            path = os.path.join(directory, name)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # its process is alive
                os.close(fd)
                continue
            if os.fstat(fd).st_nlink == 0:  # another process applied it and removed it
                os.close(fd)
                continue
            with os.fdopen(os.dup(fd), "rb") as f:
                entries.extend(decode_all(f.read()))
            paths.append(path)
            fds.append(fd)
        if fds:
            entries.sort(key=lambda e: e.seq)
            yield Orphan(paths, fds, entries)


def release(o: Orphan, applied: bool) -> None:
    """``applied``: its puts are in the database, the files go; else they stay for later."""
    for path, fd in zip(o.paths, o.fds):
        if applied:
            with contextlib.suppress(OSError):
                os.unlink(path)
        os.close(fd)
