"""opencode CLI harness: install the pinned release from the committed lock, write a
throwaway HOME (XDG dirs) and opencode.json, run ``opencode run --format json`` once, off
the network, and hand back the parsed JSON events.

Theory of operation
-------------------
* ``ensure_opencode(repo)`` copies ``tests/e2e/opencode/package.json`` and
  ``package-lock.json`` into ``<repo>/.e2e/opencode-<version>`` (gitignored) and runs
  ``npm ci --ignore-scripts`` there (under ``procs.installing``), unless that folder already
  holds the same lock and a binary answering ``--version`` with the pinned version.  The
  package pins opencode's own platform packages (``opencode-linux-x64`` and its
  ``-baseline`` build for CPUs without AVX2: what the ``opencode-ai`` wrapper's postinstall
  links as ``bin/opencode``; the wrapper itself cannot be locked here, its other platforms'
  packages are not on this machine's registry) and ``@opencode-ai/plugin``.  A missing
  node/npm or a failed install raises ``OpencodeUnavailable`` (the fixture turns it into a
  test failure, not a skip).
* What opencode would fetch at run time, and how it is not:

  ===================================  ===================================================
  what                                 here
  ===================================  ===================================================
  provider packages                    ``@ai-sdk/openai-compatible`` and ``@ai-sdk/openai``
  (``npm`` of a custom provider)       are bundled in the 1.18 binary (its
                                       ``BUNDLED_PROVIDERS`` map imports ``/$bunfs``
                                       chunks): nothing to install
  ``@opencode-ai/plugin`` in each      ``Npm.install`` reifies it from the registry unless
  config dir (background, at start)    the dir has ``node_modules`` and a
                                       ``package-lock.json`` naming it: ``prepare_home``
                                       copies the prefix's package files into
                                       ``$XDG_CONFIG_HOME/opencode`` and links its
                                       ``node_modules`` (without this, ``strace`` shows a
                                       DNS look-up at start)
  models.dev catalogue                 ``OPENCODE_DISABLE_MODELS_FETCH=1``
  update check                         ``OPENCODE_DISABLE_AUTOUPDATE=1``, ``autoupdate:
                                       false``
  LSP servers, formatters              ``OPENCODE_DISABLE_LSP_DOWNLOAD=1``, ``lsp: false``,
                                       ``formatter: false``
  built-in plugins, external plugins   ``OPENCODE_DISABLE_DEFAULT_PLUGINS=1``, ``--pure``
  share                                ``OPENCODE_DISABLE_SHARE=1``, ``share: disabled``
  session title (a second model call)  ``--title``
  ===================================  ===================================================

  and the run happens in the loopback-only network namespace of ``kimi_code_harness``
  (``run_isolated``: ``unshare -rn``, the proxy's port relayed over a unix socket); with
  all of the above, ``strace -f -e connect`` shows one connection: the model endpoint.
* ``write_config(path, ...)`` writes ``opencode.json`` (``OPENCODE_CONFIG``): one custom
  provider, ``npm`` ``@ai-sdk/openai-compatible`` (``provider="chat"``: Chat Completions)
  or ``@ai-sdk/openai`` (``provider="responses"``: the Responses API), its ``baseURL``,
  ``apiKey: {env:SWITCHBOARD_E2E_KEY}``, one model (``tool_call: true``, optional
  ``options`` such as ``{"store": true}``), ``enabled_providers`` only that one, ``bash``
  allowed.  opencode resolves paths from ``$PWD``, not the process's cwd: the run sets
  ``PWD`` and ``--dir`` to the workspace.
* ``run_opencode(...)`` runs ``opencode run --format json --pure --title ... --dir WS
  --model PROVIDER/MODEL PROMPT`` in its own process group with stdin closed, bounded by
  ``timeout`` (that group killed by its PID on timeout).  ``OpencodeRun`` has the JSON
  events and helpers (tool uses, texts, errors).
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
from procs import answers_version, describe_run, installing, json_lines

HERE = Path(__file__).resolve().parent
PACKAGE_DIR = HERE / "opencode"  # the committed package.json + package-lock.json
OPENCODE_VERSION = "1.18.33"
ENV_KEY = "SWITCHBOARD_E2E_KEY"
TITLE = "switchboard e2e"  # given, so opencode makes no title-generation model call
PROVIDERS = {  # provider kind -> (opencode provider id, npm package of the AI SDK provider)
    "chat": ("switchboard-chat", "@ai-sdk/openai-compatible"),
    "responses": ("switchboard-responses", "@ai-sdk/openai"),
}
NO_NETWORK_ENV = {
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",  # no ~/.claude prompts or skills
    "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
}


class OpencodeUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class Opencode:
    binary: Path
    prefix: Path
    version: str


def opencode_prefix(repo: Path, version: str = OPENCODE_VERSION) -> Path:
    return Path(repo).resolve() / ".e2e" / f"opencode-{version}"


def _binary_candidates(prefix: Path) -> list[Path]:
    """The platform packages in the order the ``opencode-ai`` postinstall tries them."""
    nm = prefix / "node_modules"
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return []
    try:
        avx2 = " avx2" in Path("/proc/cpuinfo").read_text().replace("\t", " ").replace("\n", " ")
    except OSError:
        avx2 = False
    names = ["opencode-linux-x64", "opencode-linux-x64-baseline"]
    if not avx2:
        names.reverse()
    return [nm / name / "bin" / "opencode" for name in names]


def _binary_version(binary: Path) -> str | None:
    """``opencode --version`` (it creates its XDG dirs even for that: a throwaway HOME)."""
    home = tempfile.mkdtemp(prefix="sb-opencode-version-")
    try:
        out = subprocess.run(
            [str(binary), "--version"],
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "TMPDIR": home, **NO_NETWORK_ENV},
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return out.stdout.strip() if out.returncode == 0 else None


def _package_version(pkg_dir: Path) -> str | None:
    try:
        return json.loads((pkg_dir / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def _installed(prefix: Path, version: str) -> Opencode | None:
    lock = prefix / "package-lock.json"
    if not lock.exists() or not filecmp.cmp(lock, PACKAGE_DIR / "package-lock.json", shallow=False):
        return None  # not installed, or from another lock
    if _package_version(prefix / "node_modules" / "@opencode-ai" / "plugin") != version:
        return None
    for binary in _binary_candidates(prefix):
        stamp = prefix / f".version-answered-{binary.parent.parent.name}"
        if binary.exists() and answers_version(stamp, [binary, lock], version, lambda b=binary: _binary_version(b)):
            return Opencode(binary, prefix, version)
    return None


def ensure_opencode(repo: Path, version: str = OPENCODE_VERSION, timeout: float = 600) -> Opencode:
    """Install the committed lock under ``.e2e/opencode-<version>`` (``npm ci``) unless there."""
    prefix = opencode_prefix(repo, version)
    with installing(prefix):
        found = _installed(prefix, version)
        if found:
            return found
        npm = shutil.which("npm")
        if not npm or not shutil.which("node"):
            raise OpencodeUnavailable(f"node/npm not found on PATH; cannot install opencode {version}")
        if not _binary_candidates(prefix):
            raise OpencodeUnavailable(
                f"the committed lock pins opencode's linux-x64 builds only, not {platform.system()} {platform.machine()}"
            )
        prefix.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(PACKAGE_DIR / name, prefix / name)
        argv = [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"]
        try:
            proc = subprocess.run(argv, cwd=str(prefix), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise OpencodeUnavailable(f"npm ci for opencode {version} took more than {timeout}s") from exc
        found = _installed(prefix, version)
        if proc.returncode != 0 or found is None:
            raise OpencodeUnavailable(
                f"npm ci in {prefix} failed or left no opencode {version} answering --version "
                f"(rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return found


# --------------------------------------------------------------------------- config


def write_config(
    path: Path,
    *,
    provider: str,
    base_url: str,
    model: str,
    model_options: dict | None = None,
    env_key: str = ENV_KEY,
) -> dict:
    if provider not in PROVIDERS:
        raise ValueError(f"provider must be one of {sorted(PROVIDERS)}, not {provider!r}")
    pid, npm = PROVIDERS[provider]
    entry: dict = {"name": model, "tool_call": True, "limit": {"context": 131072, "output": 8192}}
    if model_options:
        entry["options"] = model_options
    cfg = {
        "$schema": "https://opencode.ai/config.json",
        "model": f"{pid}/{model}",
        "small_model": f"{pid}/{model}",
        "autoupdate": False,
        "share": "disabled",
        "snapshot": False,
        "lsp": False,
        "formatter": False,
        "enabled_providers": [pid],
        "permission": {"bash": "allow", "edit": "allow"},
        "provider": {
            pid: {
                "npm": npm,
                "name": f"Switchboard ({provider})",
                "options": {"baseURL": base_url, "apiKey": f"{{env:{env_key}}}"},
                "models": {model: entry},
            }
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return cfg


def prepare_home(home: Path, oc: Opencode) -> dict[str, str]:
    """XDG dirs and ``TMPDIR`` under ``home``; opencode's global config dir gets the prefix's
    package files and its ``node_modules`` (so its start-up ``@opencode-ai/plugin`` install
    is a no-op).  (The binary unpacks a 5.5 MB native library into ``$TMPDIR`` at each start
    and leaves it there: in ``/tmp`` every suite run left six.)"""
    xdg = {
        "HOME": home,
        "TMPDIR": home / "tmp",
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_DATA_HOME": home / ".local" / "share",
        "XDG_CACHE_HOME": home / ".cache",
        "XDG_STATE_HOME": home / ".local" / "state",
    }
    for d in xdg.values():
        d.mkdir(parents=True, exist_ok=True)
    cfg_dir = xdg["XDG_CONFIG_HOME"] / "opencode"
    cfg_dir.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(oc.prefix / name, cfg_dir / name)
    link = cfg_dir / "node_modules"
    if not link.exists():
        link.symlink_to(oc.prefix / "node_modules", target_is_directory=True)
    return {k: str(v) for k, v in xdg.items()}


# --------------------------------------------------------------------------- running


@dataclass
class OpencodeRun:
    argv: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    duration: float
    timed_out: bool
    workspace: Path
    home: Path
    config: dict
    isolation: str
    interfaces: list[str] | None = None  # inside the namespace (netns mode)
    events: list[dict] = field(default_factory=list)
    non_json: list[str] = field(default_factory=list)

    @property
    def tool_uses(self) -> list[dict]:
        """The ``part`` of every ``tool_use`` event (tool, callID, state{status,input,output})."""
        return [e.get("part") or {} for e in self.events if e.get("type") == "tool_use"]

    @property
    def texts(self) -> list[str]:
        return [(e.get("part") or {}).get("text", "") for e in self.events if e.get("type") == "text"]

    @property
    def final_text(self) -> str | None:
        texts = [t for t in self.texts if t]
        return texts[-1] if texts else None

    @property
    def errors(self) -> list[dict]:
        return [e for e in self.events if e.get("type") == "error"]

    def describe(self) -> str:
        head = (
            f"opencode rc={self.returncode} timed_out={self.timed_out} {self.duration:.1f}s "
            f"isolation={self.isolation} interfaces={self.interfaces}\n--- json events ---\n"
        )
        return describe_run(head, self.events, self.non_json, self.stderr, 4000)


def run_opencode(
    oc: Opencode,
    prompt: str,
    *,
    provider: str,
    base_url: str,
    model: str,
    workspace: Path,
    home: Path,
    api_key: str,
    model_options: dict | None = None,
    timeout: float = 60,
    isolate: bool = True,
) -> OpencodeRun:
    """One ``opencode run`` against ``base_url`` (``http://127.0.0.1:<port>/v1``)."""
    url = urlsplit(base_url)
    if url.hostname != "127.0.0.1" or not url.port:
        raise ValueError(f"base_url must be http://127.0.0.1:<port>/..., not {base_url}")
    workspace.mkdir(parents=True, exist_ok=True)
    xdg = prepare_home(home, oc)
    cfg_path = home / "opencode.json"
    cfg = write_config(cfg_path, provider=provider, base_url=base_url, model=model, model_options=model_options)
    pid = PROVIDERS[provider][0]
    argv = [str(oc.binary), "run", "--format", "json", "--pure", "--title", TITLE, "--dir", str(workspace)]
    argv += ["--model", f"{pid}/{model}", "--print-logs", "--log-level", "INFO", prompt]
    drop = ("OPENAI_", "OPENCODE", "ANTHROPIC_", "XDG_", "AI_SDK_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and not k.lower().endswith("_proxy")}
    env.update(xdg)
    env.update(NO_NETWORK_ENV)
    env.update(
        {
            "PWD": str(workspace),  # opencode resolves the project and the tools' cwd from $PWD
            "OPENCODE_CONFIG": str(cfg_path),
            ENV_KEY: api_key,
            "NO_COLOR": "1",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
    )
    r = run_isolated(argv, port=url.port, cwd=workspace, env=env, timeout=timeout, isolate=isolate)
    run = OpencodeRun(
        r.argv, r.returncode, r.stdout, r.stderr, r.duration, r.timed_out, workspace, home, cfg, r.mode, r.interfaces
    )
    run.events, run.non_json = json_lines(r.stdout)
    return run
