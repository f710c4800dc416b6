"""Vercel AI SDK harness: install the pinned npm packages with a Node 22 runtime, run
``aisdk/driver.mjs`` once per job, hand back its JSON summary.

Theory of operation
-------------------
* ``aisdk/package.json`` + ``aisdk/package-lock.json`` (committed) pin ``ai``,
  ``@ai-sdk/openai``, their peer ``zod`` and the npm package ``node`` (both SDK packages
  declare ``engines.node >= 22``; the ``node`` package ships a Node 22 binary, so the
  machine's own Node, 20 here, only runs npm, as for Kimi Code).
* ``ensure_aisdk(repo)`` holds ``procs.installing`` on ``<repo>/.e2e/aisdk-<ai version>``
  (gitignored) and, unless that folder's ``.lock-sha256`` stamp matches the two committed
  files and the pinned versions are there, starts it over: copies both files in and runs
  ``npm ci`` (the lock file's exact tree, integrity-checked).  The stamp is written last,
  so a half-made install is redone.  ``driver.mjs`` is copied next to ``node_modules`` on
  every call (an ES module resolves ``ai`` from its own folder) when its bytes changed.
  A missing node/npm or a failed install raises ``AiSdkUnavailable`` (the fixture turns it
  into a test failure, never a skip).
* ``run_driver(sdk, job)`` feeds the job to ``node driver.mjs`` on stdin, in a new process
  group (``procs.run_group``), bounded by ``timeout``, with the ``*_PROXY`` variables
  removed; the result ``AiSdkRun`` has the summary (``got``) and the raw output for
  assertion messages.  The driver bounds the SDK call itself too (``AbortSignal.timeout``)
  and sets ``maxRetries: 0`` (a retry would consume the scripted upstream's next turn).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from procs import NODE_COMPILE_CACHE, installing, run_group

HERE = Path(__file__).resolve().parent
PROJECT = HERE / "aisdk"  # package.json, package-lock.json, driver.mjs
INSTALL_TIMEOUT = 300  # seconds for npm ci
RUN_TIMEOUT = 30  # seconds per driver run (a passing run takes about 1 s)


class AiSdkUnavailable(RuntimeError):
    pass


def pinned() -> dict[str, str]:
    """Package -> exact version, from the committed package.json."""
    return json.loads((PROJECT / "package.json").read_text())["dependencies"]


@dataclass(frozen=True)
class AiSdk:
    node: Path
    driver: Path
    versions: dict[str, str]  # what is installed: ai, @ai-sdk/openai, zod, node


def aisdk_prefix(repo: Path) -> Path:
    return Path(repo).resolve() / ".e2e" / f"aisdk-{pinned()['ai']}"


def _digest() -> str:
    h = hashlib.sha256()
    for name in ("package.json", "package-lock.json"):
        h.update((PROJECT / name).read_bytes())
    return h.hexdigest()


def _package_version(pkg_dir: Path) -> str | None:
    try:
        return json.loads((pkg_dir / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def _node_version(node: Path) -> str | None:
    try:
        out = subprocess.run([str(node), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().removeprefix("v") if out.returncode == 0 else None


def _installed(prefix: Path) -> AiSdk | None:
    stamp = prefix / ".lock-sha256"
    if not stamp.exists() or stamp.read_text().strip() != _digest():
        return None
    nm = prefix / "node_modules"
    want = pinned()
    got = {pkg: _package_version(nm / pkg) for pkg in want}
    node = nm / "node" / "bin" / "node"
    if got != want or not node.exists() or _node_version(node) != want["node"]:
        return None
    return AiSdk(node, prefix / "driver.mjs", got)


def _copy_driver(prefix: Path) -> None:
    src, dst = PROJECT / "driver.mjs", prefix / "driver.mjs"
    data = src.read_bytes()
    if dst.exists() and dst.read_bytes() == data:
        return
    tmp = dst.with_suffix(".mjs.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, dst)


def ensure_aisdk(repo: Path, timeout: float = INSTALL_TIMEOUT) -> AiSdk:
    prefix = aisdk_prefix(repo)
    with installing(prefix):
        found = _installed(prefix) or _install(prefix, timeout)
        _copy_driver(prefix)
        return found


def _install(prefix: Path, timeout: float) -> AiSdk:
    npm = shutil.which("npm")
    if not npm or not shutil.which("node"):
        raise AiSdkUnavailable(f"node/npm not found on PATH; cannot install the AI SDK ({pinned()})")
    shutil.rmtree(prefix, ignore_errors=True)  # a stale or half-made one: start over
    prefix.mkdir(parents=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(PROJECT / name, prefix / name)
    argv = [npm, "ci", "--no-audit", "--no-fund"]
    try:
        proc = subprocess.run(
            argv, cwd=prefix, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise AiSdkUnavailable(f"npm ci in {prefix} did not finish within {timeout}s") from None
    if proc.returncode != 0:
        raise AiSdkUnavailable(
            f"npm ci in {prefix} failed (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    (prefix / ".lock-sha256").write_text(_digest() + "\n")  # written last: its absence means "not finished"
    found = _installed(prefix)
    if found is None:
        raise AiSdkUnavailable(
            f"npm ci in {prefix} left no working install of {pinned()}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return found


# --------------------------------------------------------------------------- running


@dataclass
class AiSdkRun:
    job: dict[str, Any]
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool
    got: dict[str, Any] = field(default_factory=dict)  # the driver's summary ({} if none)

    @property
    def requests(self) -> list[dict]:
        """What the SDK sent: ``{url, method, body, status}`` per HTTP request."""
        return self.got.get("requests") or []

    def describe(self, body_chars: int = 4000) -> str:
        got = {k: v for k, v in self.got.items() if k not in ("requests", "stream_parts")}
        lines = [
            f"AI SDK driver ({self.job.get('api')} client, {self.job.get('mode')}): rc={self.returncode} "
            f"timed_out={self.timed_out} {self.seconds:.1f}s",
            "summary: " + json.dumps(got, ensure_ascii=False)[:6000],
        ]
        for i, r in enumerate(self.requests):
            body = json.dumps(r.get("body"), ensure_ascii=False)
            lines.append(f"SDK request {i}: {r.get('method')} {r.get('url')} -> {r.get('status')}: {body[:body_chars]}")
        if not self.got:
            lines.append(f"--- stdout ---\n{self.stdout[-3000:]}")
        lines.append(f"--- stderr (tail) ---\n{self.stderr[-3000:]}")
        return "\n".join(lines)


def run_driver(sdk: AiSdk, job: dict[str, Any], *, cwd: Path, timeout: float = RUN_TIMEOUT) -> AiSdkRun:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["NODE_OPTIONS"] = ""
    env.update(NODE_COMPILE_CACHE)
    job = {"timeout_ms": int((timeout - 5) * 1000), **job}
    cwd.mkdir(parents=True, exist_ok=True)
    fin = run_group([str(sdk.node), str(sdk.driver)], cwd=cwd, env=env, timeout=timeout, stdin_text=json.dumps(job))
    run = AiSdkRun(job, fin.returncode, fin.stdout, fin.stderr, fin.seconds, fin.timed_out)
    for line in reversed(fin.stdout.splitlines()):
        try:
            got = json.loads(line)
        except ValueError:
            continue
        if isinstance(got, dict):
            run.got = got
            break
    return run
