"""Claude Code harness: install the pinned native build from the committed lock, write a
throwaway HOME / CLAUDE_CONFIG_DIR, run ``claude -p PROMPT --output-format stream-json
--verbose`` once, off the network, and hand back the parsed stream-json events.

Theory of operation
-------------------
* ``ensure_claude_code(repo)`` copies ``tests/e2e/claude_code/package.json`` and
  ``package-lock.json`` into ``<repo>/.e2e/claude-code-<version>`` (gitignored) and runs
  ``npm ci --ignore-scripts`` there (under ``procs.installing``), unless that folder already
  holds the same lock and a binary answering ``--version`` with the pinned version.  The
  npm package ``@anthropic-ai/claude-code`` is only a wrapper whose postinstall links one of
  its ``optionalDependencies`` (a native, self-contained build per platform: no Node needed
  to run it) as ``bin/claude.exe``; the lock pins that build for linux-x64 (glibc),
  ``@anthropic-ai/claude-code-linux-x64``, directly.  A missing node/npm or a failed
  install raises ``ClaudeCodeUnavailable`` (the fixture turns it into a test failure, not
  a skip).
* The run's environment: nothing of the caller's ``ANTHROPIC_*`` / ``CLAUDE_*`` / proxy
  variables; ``HOME`` and ``CLAUDE_CONFIG_DIR`` in a throwaway dir; ``ANTHROPIC_BASE_URL``
  (the bare origin ``http://127.0.0.1:<port>``: Claude Code appends ``/v1/messages``),
  ``ANTHROPIC_API_KEY`` (sent as ``x-api-key``) or, with ``auth="token"``,
  ``ANTHROPIC_AUTH_TOKEN`` (sent as ``Authorization: Bearer``), ``ANTHROPIC_MODEL`` and
  the small/background model names; and ``NO_NETWORK_ENV`` below (names checked against the
  2.1.332 binary's strings; ``DISABLE_NON_ESSENTIAL_MODEL_CALLS`` does not exist there).
  ``IS_SANDBOX=1``: as root, ``--dangerously-skip-permissions`` is refused without it.
* ``run_claude_code(...)`` runs ``claude -p PROMPT --output-format stream-json --verbose
  --dangerously-skip-permissions`` in the workspace, stdin closed, in the loopback-only
  network namespace of ``kimi_code_harness`` (``run_isolated``: ``unshare -rn``, the
  upstream's port relayed over a unix socket), in its own process group killed by its PID
  on timeout.  ``ClaudeRun`` has the events and helpers (the ``result`` event, final text,
  tool uses and their results, exit code, stderr tail).
"""

from __future__ import annotations

import filecmp
import json
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from kimi_code_harness import run_isolated
from procs import describe_run, installing, json_lines

HERE = Path(__file__).resolve().parent
PACKAGE_DIR = HERE / "claude_code"  # the committed package.json + package-lock.json
CLAUDE_CODE_VERSION = "2.1.332"
PLATFORM_PACKAGE = "@anthropic-ai/claude-code-linux-x64"
NO_NETWORK_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # the umbrella switch (telemetry, updates, ...)
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_UPDATES": "1",
    "DISABLE_GROWTHBOOK": "1",  # feature-flag fetches
    "DISABLE_INSTALLATION_CHECKS": "1",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL": "1",  # plugin marketplace clone
    "CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL": "1",
    "CLAUDE_CODE_MAX_RETRIES": "0",  # a failed scripted turn is not replayed
}


class ClaudeCodeUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class ClaudeCode:
    binary: Path
    prefix: Path
    version: str


def claude_code_prefix(repo: Path, version: str = CLAUDE_CODE_VERSION) -> Path:
    return Path(repo).resolve() / ".e2e" / f"claude-code-{version}"


def _binary(prefix: Path) -> Path:
    return prefix / "node_modules" / PLATFORM_PACKAGE / "claude"


def _binary_version(binary: Path) -> str | None:
    """``claude --version`` in a throwaway HOME (``2.1.332 (Claude Code)``)."""
    home = tempfile.mkdtemp(prefix="sb-claude-version-")
    try:
        out = subprocess.run(
            [str(binary), "--version"],
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, **NO_NETWORK_ENV},
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return out.stdout.split()[0] if out.returncode == 0 and out.stdout.split() else None


def _installed(prefix: Path, version: str) -> ClaudeCode | None:
    lock = prefix / "package-lock.json"
    if not lock.exists() or not filecmp.cmp(lock, PACKAGE_DIR / "package-lock.json", shallow=False):
        return None  # not installed, or from another lock
    binary = _binary(prefix)
    if binary.exists() and _binary_version(binary) == version:
        return ClaudeCode(binary, prefix, version)
    return None


def ensure_claude_code(repo: Path, version: str = CLAUDE_CODE_VERSION, timeout: float = 600) -> ClaudeCode:
    """Install the committed lock under ``.e2e/claude-code-<version>`` (``npm ci``) unless there."""
    prefix = claude_code_prefix(repo, version)
    with installing(prefix):
        found = _installed(prefix, version)
        if found:
            return found
        npm = shutil.which("npm")
        if not npm or not shutil.which("node"):
            raise ClaudeCodeUnavailable(f"node/npm not found on PATH; cannot install Claude Code {version}")
        if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
            raise ClaudeCodeUnavailable(
                f"the committed lock pins Claude Code's linux-x64 build only, not {platform.system()} {platform.machine()}"
            )
        prefix.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(PACKAGE_DIR / name, prefix / name)
        argv = [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"]
        try:
            proc = subprocess.run(argv, cwd=str(prefix), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise ClaudeCodeUnavailable(f"npm ci for Claude Code {version} took more than {timeout}s") from exc
        found = _installed(prefix, version)
        if proc.returncode != 0 or found is None:
            raise ClaudeCodeUnavailable(
                f"npm ci in {prefix} failed or left no Claude Code {version} answering --version "
                f"(rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return found


# --------------------------------------------------------------------------- running


@dataclass
class ClaudeRun:
    argv: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    duration: float
    timed_out: bool
    workspace: Path
    home: Path
    isolation: str
    interfaces: list[str] | None = None  # inside the namespace (netns mode)
    events: list[dict] = field(default_factory=list)
    non_json: list[str] = field(default_factory=list)

    def _blocks(self, role: str) -> list[dict]:
        out = []
        for e in self.events:
            if e.get("type") == role:
                content = (e.get("message") or {}).get("content")
                out += [b for b in content or [] if isinstance(b, dict)] if isinstance(content, list) else []
        return out

    @property
    def result(self) -> dict | None:
        """The closing ``{"type": "result", ...}`` event (``subtype``, ``is_error``, ``result``)."""
        found = [e for e in self.events if e.get("type") == "result"]
        return found[-1] if found else None

    @property
    def init(self) -> dict | None:
        """The ``{"type": "system", "subtype": "init"}`` event (tools, model, cwd, ...)."""
        found = [e for e in self.events if e.get("type") == "system" and e.get("subtype") == "init"]
        return found[0] if found else None

    @property
    def tool_uses(self) -> list[dict]:
        return [b for b in self._blocks("assistant") if b.get("type") == "tool_use"]

    @property
    def tool_results(self) -> list[dict]:
        return [b for b in self._blocks("user") if b.get("type") == "tool_result"]

    @property
    def texts(self) -> list[str]:
        return [b.get("text", "") for b in self._blocks("assistant") if b.get("type") == "text"]

    @property
    def final_text(self) -> str | None:
        r = self.result
        if r is not None and isinstance(r.get("result"), str):
            return r["result"]
        texts = [t for t in self.texts if t]
        return texts[-1] if texts else None

    @property
    def stderr_tail(self) -> str:
        return self.stderr[-3000:]

    def describe(self) -> str:
        head = (
            f"claude rc={self.returncode} timed_out={self.timed_out} {self.duration:.1f}s "
            f"isolation={self.isolation} interfaces={self.interfaces}\n--- stream-json ---\n"
        )
        return describe_run(head, self.events, self.non_json, self.stderr, 3000)


def run_env(
    *,
    base_url: str,
    home: Path,
    api_key: str,
    model: str,
    small_model: str | None = None,
    auth: str = "api_key",
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment of one run (see the module doc)."""
    drop = ("ANTHROPIC_", "CLAUDE", "OTEL_", "AWS_", "GOOGLE_", "VERTEX_", "DISABLE_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and not k.lower().endswith("_proxy")}
    config_dir = home / ".claude"
    config_dir.mkdir(parents=True, exist_ok=True)
    small = small_model or model
    env.update(NO_NETWORK_ENV)
    env.update(
        {
            "HOME": str(home),
            "CLAUDE_CONFIG_DIR": str(config_dir),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "TMPDIR": str(home / "tmp"),
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_MODEL": model,
            "ANTHROPIC_SMALL_FAST_MODEL": small,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": small,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
            "IS_SANDBOX": "1",  # root: --dangerously-skip-permissions is refused without it
            "NO_COLOR": "1",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
    )
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    if auth == "api_key":
        env["ANTHROPIC_API_KEY"] = api_key
    elif auth == "token":
        env["ANTHROPIC_AUTH_TOKEN"] = api_key
    else:
        raise ValueError(f"auth must be 'api_key' or 'token', not {auth!r}")
    env.update(extra or {})
    return env


def run_claude_code(
    cc: ClaudeCode,
    prompt: str,
    *,
    base_url: str,
    model: str,
    workspace: Path,
    home: Path,
    api_key: str,
    small_model: str | None = None,
    auth: str = "api_key",
    extra_args: list[str] | None = None,
    extra_env: dict[str, str] | None = None,
    timeout: float = 60,
    isolate: bool = True,
) -> ClaudeRun:
    """One ``claude -p`` run against ``base_url`` (``http://127.0.0.1:<port>``)."""
    url = urlsplit(base_url)
    if url.hostname != "127.0.0.1" or not url.port:
        raise ValueError(f"base_url must be http://127.0.0.1:<port>, not {base_url}")
    workspace.mkdir(parents=True, exist_ok=True)
    env = run_env(
        base_url=base_url, home=home, api_key=api_key, model=model, small_model=small_model, auth=auth, extra=extra_env
    )
    env["PWD"] = str(workspace)
    argv = [str(cc.binary), "-p", prompt, "--output-format", "stream-json", "--verbose"]
    argv += ["--dangerously-skip-permissions", *(extra_args or [])]
    r = run_isolated(argv, port=url.port, cwd=workspace, env=env, timeout=timeout, isolate=isolate)
    run = ClaudeRun(r.argv, r.returncode, r.stdout, r.stderr, r.duration, r.timed_out, workspace, home, r.mode)
    run.interfaces = r.interfaces
    run.events, run.non_json = json_lines(r.stdout)
    return run


def write_json(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
