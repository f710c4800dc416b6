"""Gemini CLI (the real npm package, pinned) for the e2e suite, off the network.

* ``ensure_gemini_cli(repo)`` copies ``tests/e2e/gemini_cli/package.json`` and
  ``package-lock.json`` (``@google/gemini-cli`` 0.61.0, exact) into
  ``<repo>/.e2e/gemini-cli-<version>/`` and runs ``npm ci --ignore-scripts`` there once
  (under the install lock of ``procs.installing``); ``GeminiCliUnavailable`` when node or
  npm is missing or the install fails.
* ``write_home(home)`` writes ``<home>/.gemini/settings.json``: the API-key auth Gemini CLI
  needs to reach a custom base URL (``security.auth.selectedType: gemini-api-key``, else
  "Invalid auth method selected"), telemetry, usage statistics, update checks and the
  model router off, the folder trusted.
* ``run_gemini_cli(...)`` runs ``gemini -p PROMPT -m MODEL --output-format stream-json
  --yolo`` with ``HOME`` there, ``GOOGLE_GEMINI_BASE_URL`` the proxy and ``GEMINI_API_KEY``
  the proxy's client key, in a loopback-only network namespace when the machine allows one
  (``kimi_code_harness.run_isolated``: only the proxy's port is relayed in): whatever
  Gemini CLI would fetch from Google fails at once.  Its stream-json lines give the tool
  calls (``tool_use``), their results (``tool_result``) and the answer's text
  (``message`` of role ``assistant``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from kimi_code_harness import run_isolated
from procs import answers_version, installing, json_lines

HERE = Path(__file__).resolve().parent
PACKAGE_DIR = HERE / "gemini_cli"
GEMINI_CLI_VERSION = "0.61.0"


class GeminiCliUnavailable(RuntimeError):
    pass


@dataclass
class GeminiCli:
    prefix: Path
    node: str

    @property
    def main(self) -> Path:
        return self.prefix / "node_modules" / "@google" / "gemini-cli" / "bundle" / "gemini.js"


def gemini_cli_prefix(repo: Path, version: str = GEMINI_CLI_VERSION) -> Path:
    return repo / ".e2e" / f"gemini-cli-{version}"


def _installed(prefix: Path, node: str, version: str) -> GeminiCli | None:
    cli = GeminiCli(prefix, node)
    if not cli.main.exists():
        return None

    def ask() -> str | None:
        # (a throwaway HOME: even --version writes under ~/.gemini)
        home = tempfile.mkdtemp(prefix="sb-gemini-version-")
        try:
            out = subprocess.run(
                [node, str(cli.main), "--version"],
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, "HOME": home, "TMPDIR": home},
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        finally:
            shutil.rmtree(home, ignore_errors=True)
        return out.stdout.strip()

    files = [Path(node).resolve(), cli.main, prefix / "package-lock.json"]
    return cli if answers_version(prefix / ".version-answered", files, version, ask) else None


def ensure_gemini_cli(repo: Path, version: str = GEMINI_CLI_VERSION, timeout: float = 600) -> GeminiCli:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        raise GeminiCliUnavailable("Gemini CLI needs node and npm on PATH")
    prefix = gemini_cli_prefix(repo, version)
    found = _installed(prefix, node, version)
    if found is not None:
        return found
    with installing(prefix):
        found = _installed(prefix, node, version)
        if found is not None:
            return found
        prefix.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(PACKAGE_DIR / name, prefix / name)
        try:
            out = subprocess.run(
                [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
                cwd=prefix,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise GeminiCliUnavailable(f"npm ci failed: {exc!r}") from exc
        if out.returncode != 0:
            raise GeminiCliUnavailable(f"npm ci failed ({out.returncode}): {out.stderr[-2000:]}")
    found = _installed(prefix, node, version)
    if found is None:
        raise GeminiCliUnavailable(f"Gemini CLI {version} did not install into {prefix}")
    return found


SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "general": {"disableAutoUpdate": True, "disableUpdateNag": True, "enableAutoUpdate": False},
    "telemetry": {"enabled": False},
    "privacy": {"usageStatisticsEnabled": False},
    "model": {"skipNextSpeakerCheck": True},
    "ide": {"enabled": False},
}


def write_home(home: Path) -> None:
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS, indent=2), encoding="utf-8")


@dataclass
class GeminiRun:
    argv: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool
    isolation: str
    interfaces: list[str] | None
    workspace: Path
    events: list[dict] = field(default_factory=list)
    non_json: list[str] = field(default_factory=list)

    @property
    def tool_calls(self) -> list[dict]:
        return [e for e in self.events if e.get("type") == "tool_use"]

    @property
    def tool_results(self) -> list[dict]:
        return [e for e in self.events if e.get("type") == "tool_result"]

    @property
    def final_text(self) -> str:
        return "".join(
            str(e.get("content") or "")
            for e in self.events
            if e.get("type") == "message" and e.get("role") == "assistant"
        )

    def describe(self) -> str:
        lines = [
            f"gemini rc={self.returncode} timed_out={self.timed_out} {self.seconds:.1f}s isolation={self.isolation}"
        ]
        lines += [json.dumps(e)[:400] for e in self.events]
        lines += [f"non-json: {x[:300]}" for x in self.non_json[-20:]]
        lines.append("--- stderr ---\n" + self.stderr[-4000:])
        return "\n".join(lines)


def run_gemini_cli(
    cli: GeminiCli,
    prompt: str,
    *,
    base_url: str,
    model: str,
    workspace: Path,
    home: Path,
    api_key: str,
    timeout: float = 120,
    isolate: bool = True,
) -> GeminiRun:
    """One ``gemini -p`` run against ``base_url`` (``http://127.0.0.1:<port>``: the proxy)."""
    url = urlsplit(base_url)
    if url.hostname != "127.0.0.1" or not url.port:
        raise ValueError(f"base_url must be http://127.0.0.1:<port>, not {base_url}")
    workspace.mkdir(parents=True, exist_ok=True)
    write_home(home)
    argv = [cli.node, str(cli.main), "-p", prompt, "-m", model, "--output-format", "stream-json", "--yolo"]
    argv.append("--skip-trust")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEMINI_", "GOOGLE_", "OPENAI_", "ANTHROPIC_"))}
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env.pop(k, None)
    env.update(
        {
            "HOME": str(home),
            "GEMINI_API_KEY": api_key,
            "GOOGLE_GEMINI_BASE_URL": base_url,
            "GEMINI_CLI_NO_RELAUNCH": "true",
            "GEMINI_TELEMETRY_ENABLED": "false",
            "NO_COLOR": "1",
            "CI": "1",
        }
    )
    done = run_isolated(argv, port=url.port, cwd=workspace, env=env, timeout=timeout, isolate=isolate)
    events, non_json = json_lines(done.stdout)
    return GeminiRun(
        argv=argv,
        returncode=done.returncode,
        stdout=done.stdout,
        stderr=done.stderr,
        seconds=done.duration,
        timed_out=done.timed_out,
        isolation=done.mode,
        interfaces=done.interfaces,
        workspace=workspace,
        events=events,
        non_json=non_json,
    )
