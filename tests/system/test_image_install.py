"""The Docker image's install step, run as the image's unprivileged user in a scratch copy.

There is no Docker engine here, so the image is rebuilt by hand from the Dockerfile itself:
its ``ENV`` lines, its ``COPY`` lines (the same files, owned by the user) and its ``RUN
scripts/dev install …`` lines, in order, as an unprivileged uid (``nobody``) under a scratch
``/opt/switchboard``.  The uid keeps ``CAP_DAC_READ_SEARCH`` only, so it can read the
machine's Python (under a root-only home here) but writes exactly where the image's user
may write: the permission mistakes images make (a root-owned source directory, a venv
outside the user's home) fail here as they would in the build.  Then the image's
``ENTRYPOINT`` serves its ``CMD`` config and its ``HEALTHCHECK`` command passes.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UID = GID = 65534  # nobody / nogroup


def dockerfile() -> dict[str, list[str]]:
    lines: dict[str, list[str]] = {"ENV": [], "COPY": [], "RUN": [], "USER": [], "ENTRYPOINT": [], "CMD": []}
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    for line in text.splitlines():
        m = re.match(r"^(ENV|COPY|RUN|USER|ENTRYPOINT|CMD|HEALTHCHECK)\s+(.*)$", line.strip())
        if m:
            lines.setdefault(m.group(1), []).append(m.group(2))
    return lines


def user_argv(argv: list[str]) -> list[str]:
    """``argv`` as the unprivileged uid, which keeps only the right to read and search."""
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed to run the install as an unprivileged user"
    caps = ["--inh-caps", "+dac_read_search", "--ambient-caps", "+dac_read_search"]
    return [setpriv, "--reuid", str(UID), "--regid", str(GID), "--clear-groups", *caps, *argv]


def as_user(argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(user_argv(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_image_install_step_as_its_unprivileged_user(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("this test builds the image's file tree for another uid: it must run as root (CI does)")
    df = dockerfile()
    assert df["USER"] == ["switchboard"], "the image must not run as root"
    # the install step is the README's command, as the image's user
    runs = [r for r in df["RUN"] if "scripts/dev" in r]
    assert runs == ["scripts/dev install --deps-only", "scripts/dev install --no-editable"], runs

    home = tmp_path / "opt" / "switchboard"  # useradd --create-home: the user's own
    src = home / "src"  # install -d -o switchboard: the user's own
    src.mkdir(parents=True)
    env: dict[str, str] = {}
    for e in df["ENV"]:
        for k, v in (kv.split("=", 1) for kv in shlex.split(e)):
            env[k] = v.replace("/opt/switchboard", str(home))
    for c in df["COPY"]:
        parts = [p for p in shlex.split(c) if not p.startswith("--")]
        *sources, dest = parts
        into = dest.endswith("/") or dest == "."  # a directory: the sources go inside it
        for s in sources:
            if (ROOT / s).is_dir():  # a directory's contents go to the destination
                shutil.copytree(ROOT / s, src / dest / s if dest in (".", "./") else src / dest)
            else:
                shutil.copy2(ROOT / s, src / dest / Path(s).name if into else src / dest)
    for p in [home, *home.rglob("*")]:
        os.chown(p, UID, GID)
    python_dir = str(Path(sys._base_executable).resolve().parent)
    env.update({"HOME": str(home), "PATH": f"{python_dir}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"})

    # the image's RUN lines, in order, with the user's rights
    for r in runs:
        done = as_user(["/bin/sh", "-c", r], cwd=src, env=env, timeout=400)
        assert done.returncode == 0, f"{r}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    venv = Path(env["SWITCHBOARD_VENV"])
    assert (venv / "bin" / "switchboard").exists()
    assert {p.lstat().st_uid for p in [venv, *venv.rglob("*")]} == {UID}
    # every module copied into the image carries its bytecode: the image's processes (with
    # PYTHONDONTWRITEBYTECODE) would otherwise compile the sources in memory at every start
    site = next(venv.glob("lib/python3*/site-packages"))
    sources = [p for pkg in ("app", "providers", "transformers") for p in (site / pkg).glob("*.py")]
    assert len(sources) > 50, sources
    missing = [p.name for p in sources if not Path(importlib.util.cache_from_source(str(p))).exists()]
    assert not missing, f"installed without bytecode: {missing}"

    # the ENTRYPOINT serving the CMD (on loopback: the image's 0.0.0.0 is overridden by a
    # later --host, as arguments after the image name are), then the HEALTHCHECK command
    entry = re.findall(r'"((?:[^"\\]|\\.)*)"', df["ENTRYPOINT"][0])
    entry = [x.replace('\\"', '"').replace("/opt/switchboard", str(home)) for x in entry]
    cmd = [x.replace("/opt/switchboard", str(home)) for x in re.findall(r'"([^"]*)"', df["CMD"][0])]
    port = free_port()
    env["SWITCHBOARD_PORT"] = str(port)
    serve = subprocess.Popen(
        user_argv([*entry, *cmd, "--host", "127.0.0.1"]),
        cwd=src,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        health = re.findall(r'"((?:[^"\\]|\\.)*)"', df["HEALTHCHECK"][0])
        health = [x.replace("/opt/switchboard", str(home)) for x in health]
        deadline = time.monotonic() + 30
        while True:
            ok = as_user(health, cwd=src, env=env, timeout=10)
            if ok.returncode == 0:
                break
            assert serve.poll() is None, f"the entrypoint exited: {serve.communicate()[1][-3000:]}"
            assert time.monotonic() < deadline, ok.stderr[-2000:]
            time.sleep(0.2)
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, 15)
        serve.wait(10)
