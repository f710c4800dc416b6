"""``procs.installing``: two test processes (pytest-xdist workers) that reach the same client
install at once take turns; installs into other folders do not wait on each other."""

from __future__ import annotations

import threading
import time

from procs import installing


def _hold(prefix, held: threading.Event, order: list[str], release: threading.Event | None = None) -> None:
    """Holds ``prefix``'s lock 0.3 s, or until ``release`` (at most 10 s)."""
    with installing(prefix):
        order.append("first in")
        held.set()
        if release is None:
            time.sleep(0.3)
        else:
            release.wait(10)
        order.append("first out")


def test_a_second_install_into_one_folder_waits_for_the_first(tmp_path):
    # flock belongs to an open file description: two threads that each open the lock file
    # contend as two processes do
    prefix = tmp_path / ".e2e" / "codex-0.0.0"
    held, order = threading.Event(), []
    first = threading.Thread(target=_hold, args=(prefix, held, order))
    first.start()
    assert held.wait(10)
    with installing(prefix):
        order.append("second in")
    first.join(10)
    assert order == ["first in", "first out", "second in"]
    assert (tmp_path / ".e2e" / ".codex-0.0.0.lock").exists()


def test_installs_into_two_folders_do_not_wait(tmp_path):
    held, release, order = threading.Event(), threading.Event(), []
    first = threading.Thread(target=_hold, args=(tmp_path / ".e2e" / "a", held, order, release))
    first.start()
    assert held.wait(10)
    with installing(tmp_path / ".e2e" / "b"):  # had it waited for "a", "first out" came first
        order.append("second in")
    release.set()
    first.join(10)
    assert order == ["first in", "second in", "first out"]
