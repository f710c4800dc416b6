"""Codex CLI harness: install the pinned npm package, write a throwaway CODEX_HOME (and
HOME), run ``codex exec --json`` once and hand back the parsed JSON lines.

Theory of operation
-------------------
* ``ensure_codex(repo, version)`` runs ``npm install --prefix <repo>/.e2e/codex-<version>
  @openai/codex@<version>`` unless that exact version is already there, and returns the
  path of the ``codex`` launcher.  Each version has its own prefix, so 0.169.0 (the
  default, ``CODEX_VERSION``) and the newest release (``CODEX_LATEST``) live side by
  side.  A missing node/npm raises ``CodexUnavailable`` (the fixture turns it into a
  test failure, not a skip).
* ``builtin_catalog(codex)`` reads Codex's own model catalogue out of the vendored Rust
  binary (it is embedded as a JSON document ``{"models": [...]}``) and caches it under
  ``.e2e/codex-<version>/``.  ``catalog_entry(slug)`` clones the built-in ``gpt-5.5`` entry (the
  GPT-5 family entry with ``tool_mode: null``, ``apply_patch_tool_type: "freeform"``)
  under our test slug, with ``shell_type: "unified_exec"`` so Codex offers the
  ``exec_command`` function tool and ``apply_patch`` as a freeform ``custom`` tool.
  Without a catalogue entry Codex falls back to generic metadata: no apply_patch at all.
* ``run_codex(...)`` writes ``config.toml`` and runs Codex against one of two providers:

  ==============  ====================================================================
  ``provider``    what Codex is told
  ==============  ====================================================================
  ``"custom"``    ``model_provider = "switchboard"``, a ``[model_providers.switchboard]``
                  table (``name`` not "OpenAI", so no remote compaction; ``wire_api =
                  "responses"``, ``base_url``, ``env_key``; retries off by default so a
                  failure shows at once and never replays a scripted turn);
                  ``supports_websockets = true`` when asked (the Responses WebSocket)
  ``"openai"``    the built-in provider (``model_provider = "openai"``) with
                  ``openai_base_url`` pointed at the proxy; the key goes in
                  ``OPENAI_API_KEY`` and ``CODEX_API_KEY`` (what ``codex exec`` reads).
                  Built in: ``name = "OpenAI"`` (remote compaction on),
                  ``supports_websockets = true`` (a WebSocket first, HTTP after a 426),
                  retries at Codex's defaults (a built-in provider cannot be overridden)
  ==============  ====================================================================

  plus ``model_catalog_json`` (a file written from ``catalog``), or, for the custom provider,
  ``model_catalog_url`` (``catalog_url``: Codex fetches its catalogue from there, and that
  answer is its whole catalogue), and runs
  ``codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox``
  in a new process group with stdin closed, bounded by ``timeout``; on timeout the group
  of that PID is killed.  Result: ``CodexRun`` with the JSON events and helpers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from procs import describe_run, installing, json_lines, run_group, toml_str

CODEX_VERSION = "0.169.0"  # the default version (the tool-list fixtures were captured with it)
CODEX_LATEST = "0.171.0"  # the newest release the suite is checked against
CODEX_VERSIONS = (CODEX_VERSION, CODEX_LATEST)
CODEX_PACKAGE = f"@openai/codex@{CODEX_VERSION}"
TEMPLATE_SLUG = "gpt-5.5"
PROVIDERS = ("custom", "openai")


class CodexUnavailable(RuntimeError):
    pass


def codex_prefix(repo: Path, version: str = CODEX_VERSION) -> Path:
    return Path(repo).resolve() / ".e2e" / f"codex-{version}"


def _installed_version(prefix: Path) -> str | None:
    pj = prefix / "node_modules" / "@openai" / "codex" / "package.json"
    try:
        return json.loads(pj.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def ensure_codex(repo: Path, version: str = CODEX_VERSION, timeout: float = 300) -> Path:
    """Install Codex CLI ``version`` under ``<repo>/.e2e/codex-<version>`` if needed; return the launcher."""
    prefix = codex_prefix(repo, version)
    with installing(prefix):
        return _ensure_codex(prefix, version, timeout)


def _ensure_codex(prefix: Path, version: str, timeout: float) -> Path:
    package = f"@openai/codex@{version}"
    launcher = prefix / "node_modules" / ".bin" / "codex"
    if _installed_version(prefix) == version and launcher.exists():
        return launcher
    npm = shutil.which("npm")
    node = shutil.which("node")
    if not npm or not node:
        raise CodexUnavailable(f"node/npm not found on PATH (node={node}, npm={npm}); cannot install {package}")
    prefix.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), package],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0 or _installed_version(prefix) != version:
        raise CodexUnavailable(f"npm install {package} failed (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return launcher


def launcher_version(launcher: Path) -> str:
    """The version installed beside ``launcher`` (``<prefix>/node_modules/.bin/codex``)."""
    version = _installed_version(Path(launcher).parent.parent.parent)
    if version is None:
        raise CodexUnavailable(f"no @openai/codex package.json beside {launcher}")
    return version


def vendored_binary(launcher: Path) -> Path:
    prefix = launcher.parent.parent  # node_modules
    hits = sorted(prefix.glob("@openai/codex-*/vendor/*/bin/codex"))
    if not hits:
        raise CodexUnavailable(f"no vendored codex binary under {prefix}")
    return hits[0]


def builtin_catalog(launcher: Path) -> dict:
    """Codex's built-in model catalogue, extracted from the vendored binary (cached)."""
    cache = launcher.parent.parent.parent / f"builtin_models_{launcher_version(launcher)}.json"
    if cache.exists():
        return json.loads(cache.read_text(encoding="utf-8"))
    data = vendored_binary(launcher).read_bytes()
    start = data.find(b'{\n  "models": [')
    if start < 0:
        raise CodexUnavailable("built-in model catalogue not found in the codex binary")
    text = data[start : start + 8_000_000].decode("utf-8", "replace")
    obj, _ = json.JSONDecoder().raw_decode(text)
    # written whole, then renamed: another test process may read the cache meanwhile
    tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, cache)
    return obj


def catalog_entry(launcher: Path, slug: str, **overrides: Any) -> dict:
    """A catalogue entry for ``slug`` modelled on the built-in GPT-5 entry."""
    models = builtin_catalog(launcher)["models"]
    tmpl = next((m for m in models if m["slug"] == TEMPLATE_SLUG), None)
    if tmpl is None:  # pick any GPT-5-family entry that is not code-mode only
        tmpl = next(m for m in models if m.get("tool_mode") is None)
    entry = json.loads(json.dumps(tmpl))
    entry.update(
        slug=slug,
        display_name=slug,
        description="Switchboard e2e test model",
        shell_type="unified_exec",  # -> exec_command + write_stdin tools
        apply_patch_tool_type="freeform",  # -> apply_patch as a custom (freeform) tool
        upgrade=None,
        availability_nux=None,
        visibility="list",
        supported_in_api=True,
        priority=1,
    )
    entry.update(overrides)
    return entry


# --------------------------------------------------------------------------- running


@dataclass
class CodexRun:
    argv: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    duration: float
    timed_out: bool
    workspace: Path
    home: Path
    events: list[dict] = field(default_factory=list)
    non_json: list[str] = field(default_factory=list)

    def items(self, type_: str | None = None) -> list[dict]:
        out = []
        for e in self.events:
            if e.get("type") == "item.completed":
                it = e.get("item") or {}
                if type_ is None or it.get("type") == type_:
                    out.append(it)
        return out

    @property
    def agent_messages(self) -> list[str]:
        return [it.get("text", "") for it in self.items("agent_message")]

    @property
    def final_message(self) -> str | None:
        msgs = self.agent_messages
        return msgs[-1] if msgs else None

    @property
    def command_executions(self) -> list[dict]:
        return self.items("command_execution")

    @property
    def file_changes(self) -> list[dict]:
        return self.items("file_change")

    @property
    def errors(self) -> list[dict]:
        return [e for e in self.events if e.get("type") in ("error", "turn.failed")] + self.items("error")

    @property
    def turn_completed(self) -> bool:
        return any(e.get("type") == "turn.completed" for e in self.events)

    def describe(self) -> str:
        head = f"codex rc={self.returncode} timed_out={self.timed_out} {self.duration:.1f}s\n--- events ---\n"
        return describe_run(head, self.events, self.non_json, self.stderr, 4000)


def write_codex_home(
    home: Path,
    *,
    base_url: str,
    model: str,
    catalog: dict | None,
    env_key: str = "SWITCHBOARD_E2E_KEY",
    stream_idle_timeout_ms: int = 60_000,
    retries: int = 0,
    extra_toml: str = "",
    provider: str = "custom",
    supports_websockets: bool = False,
    catalog_url: str | None = None,
) -> Path:
    if provider not in PROVIDERS:
        raise ValueError(f"provider must be one of {PROVIDERS}, not {provider!r}")
    if catalog_url is not None and provider != "custom":
        raise ValueError("model_catalog_url is a custom provider's (the built-in one takes ChatGPT hosts only)")
    home.mkdir(parents=True, exist_ok=True)
    lines = [
        f"model = {toml_str(model)}",
        'model_provider = "switchboard"' if provider == "custom" else 'model_provider = "openai"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
    ]
    if provider == "openai":
        lines.append(f"openai_base_url = {toml_str(base_url)}")
    if catalog is not None:
        cat_path = home / "models.json"
        cat_path.write_text(json.dumps(catalog, ensure_ascii=False), encoding="utf-8")
        lines.append(f"model_catalog_json = {toml_str(str(cat_path))}")
    lines += [extra_toml, ""]  # top-level keys first, then any [tables] it opens
    if provider == "custom":
        lines += [
            "[model_providers.switchboard]",
            'name = "Switchboard e2e"',
            f"base_url = {toml_str(base_url)}",
            f"env_key = {toml_str(env_key)}",
            'wire_api = "responses"',
            f"request_max_retries = {int(retries)}",
            f"stream_max_retries = {int(retries)}",
            f"stream_idle_timeout_ms = {int(stream_idle_timeout_ms)}",
        ]
        if supports_websockets:
            lines.append("supports_websockets = true")
        if catalog_url is not None:
            lines.append(f"model_catalog_url = {toml_str(catalog_url)}")
        lines.append("")
    lines += [
        # no startup network traffic to github.com / chatgpt.com (curated plugin sync);
        # it does not change the tool list sent to the model
        "[features]",
        "plugins = false",
        # 0.169 otherwise retries connection failures forever ("Reconnecting... waiting for
        # network"), ignoring request_max_retries: a dead proxy would cost the whole timeout
        "unbounded_connection_retries = false",
        "",
    ]
    cfg = home / "config.toml"
    cfg.write_text("\n".join(lines), encoding="utf-8")
    return cfg


def run_codex(
    launcher: Path,
    prompt: str,
    *,
    base_url: str,
    model: str,
    workspace: Path,
    home: Path,
    catalog: dict | None = None,
    api_key: str = "sk-e2e-client",
    env_key: str = "SWITCHBOARD_E2E_KEY",
    timeout: float = 120,
    extra_args: list[str] = (),
    extra_toml: str = "",
    retries: int = 0,
    provider: str = "custom",
    supports_websockets: bool = False,
    catalog_url: str | None = None,
) -> CodexRun:
    workspace.mkdir(parents=True, exist_ok=True)
    write_codex_home(
        home,
        base_url=base_url,
        model=model,
        catalog=catalog,
        env_key=env_key,
        extra_toml=extra_toml,
        retries=retries,
        provider=provider,
        supports_websockets=supports_websockets,
        catalog_url=catalog_url,
    )
    argv = [
        str(launcher),
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "--color",
        "never",
        "-C",
        str(workspace),
        *extra_args,
        prompt,
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    # Codex runs each command in a login shell (``bash -lc``): with the machine's HOME it
    # would read that user's dotfiles, whose output (a version manager's, say) would join
    # the command's own
    shell_home = home.parent / f"{home.name}-shell-home"
    shell_home.mkdir(parents=True, exist_ok=True)
    env.update(
        {
            "HOME": str(shell_home),
            "CODEX_HOME": str(home),
            env_key: api_key,
            **({"OPENAI_API_KEY": api_key, "CODEX_API_KEY": api_key} if provider == "openai" else {}),
            "NO_COLOR": "1",
            "RUST_LOG": env.get("RUST_LOG", "warn"),
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
    )
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env.pop(k, None)
    done = run_group(argv, cwd=workspace, env=env, timeout=timeout)
    run = CodexRun(argv, done.returncode, done.stdout, done.stderr, done.seconds, done.timed_out, workspace, home)
    run.events, run.non_json = json_lines(done.stdout)
    return run
