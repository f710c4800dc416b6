"""A program from Debian's packages for the system tests, obtained without root.

``debian_binary(home, packages, exe, works)`` returns ``<home>/root/<exe>``: the first call
downloads ``packages`` as a plain user and unpacks them there, touching nothing outside
``home`` (under ``<repo>/.e2e/``, git-ignored like the other clients)::

    cd <home>/deb && apt-get download <packages…>
    dpkg-deb -x <each .deb> <home>/root

Later calls find it and only check ``works(path)``.  A missing ``apt-get``/``dpkg-deb``, a
failed download or a program that does not run fails the test with the commands' output:
a test that needs the program is never skipped.  Two pytest-xdist workers never download
into one folder at once (``procs.installing``'s lock file).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

E2E = Path(__file__).resolve().parent.parent / "e2e"
if str(E2E) not in sys.path:
    sys.path.insert(0, str(E2E))
from procs import installing  # noqa: E402


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LANG", "LC_ALL")}
    return subprocess.run(argv, cwd=str(cwd), env=env, capture_output=True, text=True, timeout=300, check=False)


def answers(exe: Path, argv: list[str], needle: str) -> bool:
    """Does ``exe argv…`` run and print ``needle``?"""
    if not exe.is_file():
        return False
    try:
        r = subprocess.run([str(exe), *argv], capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return False
    return r.returncode == 0 and needle in (r.stdout + r.stderr)


def debian_binary(home: Path, packages: list[str], exe: str, works: Callable[[Path], bool]) -> Path:
    path = home / "root" / exe
    with installing(home):
        if works(path):
            return path
        for tool in ("apt-get", "dpkg-deb"):
            if shutil.which(tool) is None:
                pytest.fail(f"cannot obtain {packages[0]}: {tool} is not installed (a Debian or Ubuntu host is needed)")
        debs = home / "deb"
        shutil.rmtree(debs, ignore_errors=True)
        debs.mkdir(parents=True)
        got = run(["apt-get", "download", *packages], debs)
        files = sorted(debs.glob("*.deb"))
        if got.returncode != 0 or len(files) < len(packages):
            pytest.fail(
                f"cannot obtain {packages[0]}: `apt-get download {' '.join(packages)}` failed "
                f"(rc={got.returncode}; are the package lists there? `apt-get update` refreshes them)\n"
                f"stdout:\n{got.stdout[-3000:]}\nstderr:\n{got.stderr[-3000:]}"
            )
        root = home / "root"
        shutil.rmtree(root, ignore_errors=True)
        for f in files:
            unpacked = run(["dpkg-deb", "-x", str(f), str(root)], home)
            if unpacked.returncode != 0:
                pytest.fail(f"cannot obtain {packages[0]}: `dpkg-deb -x {f.name}` failed\n{unpacked.stderr[-3000:]}")
        if not works(path):
            pytest.fail(f"cannot obtain {packages[0]}: the unpacked {path} does not run")
        return path
