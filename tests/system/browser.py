"""A real browser for the system tests: Debian's Chromium, driven by playwright-core (npm).

``chromium(home)`` returns the browser's executable and the environment it runs in.  The
first call downloads, without root, Debian's ``chromium`` and ``chromium-driver`` with
those of their dependencies that this machine lacks (``apt-get install -s
--no-install-recommends`` names them), unpacks them under ``home/root`` (under
``<repo>/.e2e/``) and runs the browser with ``LD_LIBRARY_PATH`` on the unpacked libraries;
a stamp (the package list) is written last.  ``driver(home)`` installs the pinned
``playwright-core`` of ``tests/system/console_browser/`` with ``npm ci`` (the lock file's
exact tree) and copies the driver script beside it.  A missing tool or a failed download
fails the test with the commands' output: it is never skipped.  Two pytest-xdist workers
never install into one folder at once (``procs.installing``'s lock file).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.system.debian import run

E2E = Path(__file__).resolve().parent.parent / "e2e"
if str(E2E) not in sys.path:
    sys.path.insert(0, str(E2E))
from procs import installing  # noqa: E402

PROJECT = Path(__file__).resolve().parent / "console_browser"
BROWSER = ["chromium", "chromium-driver"]
EXE = "usr/lib/chromium/chromium"


def _env(root: Path) -> dict[str, str]:
    libs = [root / "usr/lib/x86_64-linux-gnu", root / "usr/lib/x86_64-linux-gnu/pulseaudio", root / "usr/lib/chromium"]
    found = [str(p) for p in libs if p.is_dir()]
    prior = os.environ.get("LD_LIBRARY_PATH")
    return {"LD_LIBRARY_PATH": ":".join(found + ([prior] if prior else []))}


def _runs(exe: Path, env: dict[str, str]) -> bool:
    if not exe.is_file():
        return False
    # (a throwaway HOME: even --version writes ~/.config/chromium* and ~/.cache)
    home = tempfile.mkdtemp(prefix="sb-chromium-version-")
    try:
        r = subprocess.run(
            [str(exe), "--headless", "--no-sandbox", "--disable-gpu", "--version"],
            env={**os.environ, **env, "HOME": home, "XDG_CONFIG_HOME": home, "XDG_CACHE_HOME": home},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except OSError:
        return False
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return r.returncode == 0 and "Chromium" in r.stdout


def chromium(home: Path) -> tuple[Path, dict[str, str]]:
    root = home / "root"
    exe = root / EXE
    with installing(home):
        if (home / "stamp").exists() and _runs(exe, _env(root)):
            return exe, _env(root)
        system = shutil.which("chromium")
        for tool in ("apt-get", "dpkg-deb"):
            if shutil.which(tool) is None:
                pytest.fail(f"cannot obtain Chromium: {tool} is not installed (a Debian host is needed)")
        sim = run(["apt-get", "install", "-s", "-y", "--no-install-recommends", *BROWSER], home.parent)
        names = [line.split()[1] for line in sim.stdout.splitlines() if line.startswith("Inst ")]
        if sim.returncode != 0 or (not names and system is None):
            pytest.fail(
                f"cannot list Chromium's packages (`apt-get update` refreshes the lists):\n{sim.stderr[-3000:]}"
            )
        names = sorted(set(names) | set(BROWSER))
        debs = home / "deb"
        shutil.rmtree(debs, ignore_errors=True)
        debs.mkdir(parents=True)
        got = run(["apt-get", "download", *names], debs)
        files = sorted(debs.glob("*.deb"))
        if got.returncode != 0 or len(files) < len(names):
            pytest.fail(f"cannot download Chromium: `apt-get download` rc={got.returncode}\n{got.stderr[-3000:]}")
        shutil.rmtree(root, ignore_errors=True)
        for f in files:
            unpacked = run(["dpkg-deb", "-x", str(f), str(root)], home)
            if unpacked.returncode != 0:
                pytest.fail(f"cannot unpack {f.name}:\n{unpacked.stderr[-3000:]}")
        if not _runs(exe, _env(root)):
            pytest.fail(f"the unpacked Chromium does not run: {exe}")
        (home / "stamp").write_text("\n".join(names) + "\n")
        return exe, _env(root)


def _lock_digest() -> str:
    return hashlib.sha256((PROJECT / "package-lock.json").read_bytes()).hexdigest()


def driver(home: Path) -> Path:
    """The driver script, with its pinned playwright-core installed beside it."""
    with installing(home):
        stamp = home / ".lock-sha256"
        if not (stamp.exists() and stamp.read_text().strip() == _lock_digest()):
            npm = shutil.which("npm")
            if not npm or not shutil.which("node"):
                pytest.fail("node/npm not found on PATH: cannot install playwright-core")
            shutil.rmtree(home, ignore_errors=True)
            home.mkdir(parents=True)
            for name in ("package.json", "package-lock.json"):
                shutil.copyfile(PROJECT / name, home / name)
            got = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund"],
                cwd=home,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if got.returncode != 0:
                pytest.fail(
                    f"npm ci in {home} failed (rc={got.returncode}):\n{got.stdout[-3000:]}\n{got.stderr[-3000:]}"
                )
            stamp.write_text(_lock_digest() + "\n")
        shutil.copyfile(PROJECT / "driver.mjs", home / "driver.mjs")
        return home / "driver.mjs"
