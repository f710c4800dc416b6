"""Kimi Code CLI harness: install the pinned npm package with a Node 22 runtime, write a
throwaway KIMI_CODE_HOME, run ``kimi -p PROMPT --output-format stream-json`` once, off the
network, and hand back the parsed JSON lines.

Theory of operation
-------------------
* ``ensure_kimi_code(repo)`` runs ``npm install --prefix <repo>/.e2e/kimi-code-<version>
  @moonshot-ai/kimi-code@<version> node@<NODE_VERSION>`` unless both exact versions are
  already there.  Kimi Code 2.x needs Node >= 22.19 (it imports ``node:sqlite``); the npm
  package ``node`` ships a Node 22 binary, so the machine's own Node (20 here) only runs
  npm.  It returns a ``KimiCode`` (the Node binary and ``dist/main.mjs``) after checking
  that the binary answers ``--version`` with the pinned version.  A missing node/npm or a
  failed install raises ``KimiCodeUnavailable`` (the fixture turns it into a test
  failure, not a skip).
* ``write_home(home, ...)`` writes ``config.toml``: one ``[providers.switchboard]`` of the
  asked ``type`` (``kimi`` | ``openai`` | ``openai_responses`` | ``anthropic``) with ``base_url`` and
  ``api_key_env``, one ``[models.switchboard]`` (``capabilities = ["thinking"]``),
  ``default_model``, ``[loop_control] max_attempts_per_step = 1`` (a failed step is not
  retried, so a scripted turn is never replayed) and ``[model_catalog] refresh_on_start =
  false``.  The environment adds ``KIMI_CODE_NO_AUTO_UPDATE=1`` and
  ``KIMI_DISABLE_TELEMETRY=1``: without either one Kimi Code 2.1.0 makes DNS look-ups at
  start (seen with ``strace -e connect``); with both, its only connection is the model
  endpoint.
* Isolation, by ``isolation()`` (probed once):

  ===========  ========================================================================
  mode         what
  ===========  ========================================================================
  ``netns``    Kimi Code runs in a new network namespace (``unshare -rn``, else
               ``unshare -n``) that has only a loopback interface.  This module, run as
               ``python kimi_code_harness.py --netns-relay``, is the namespace's first
               process: it brings ``lo`` up, listens on 127.0.0.1:<proxy port> and
               relays each connection over a unix socket to ``UnixRelay`` in the test
               process, which connects to the real proxy.  Anything else Kimi Code might
               reach for fails at once (no route).  The relay reports the namespace's
               interfaces, and the run records them.
  ``loopback`` no namespace (``unshare`` refused): every URL Kimi Code is given is on
               127.0.0.1 and the update check and telemetry are off; the scripted
               upstream's record is then the evidence of what it needed.
  ===========  ========================================================================

* ``run_kimi_code(...)`` starts it in a new process group with stdin closed, bounded by
  ``timeout``; on timeout that group (by the PID) is killed.  The result ``KimiRun`` has
  the stream-json lines and helpers (tool calls, tool results, the final text).
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

from procs import NODE_COMPILE_CACHE, describe_run, installing, json_lines, run_group, toml_str

KIMI_CODE_VERSION = "2.1.0"
KIMI_CODE_PACKAGE = "@moonshot-ai/kimi-code"
NODE_VERSION = "22.23.3"  # the npm package `node`; Kimi Code 2.1.0 needs >= 22.19
PROVIDER_TYPES = ("kimi", "openai", "openai_responses", "anthropic")
ENV_KEY = "SWITCHBOARD_E2E_KEY"
MODEL_ALIAS = "switchboard"


class KimiCodeUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class KimiCode:
    node: Path
    main: Path
    version: str


def kimi_code_prefix(repo: Path, version: str = KIMI_CODE_VERSION) -> Path:
    return Path(repo).resolve() / ".e2e" / f"kimi-code-{version}"


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


def _installed(prefix: Path, version: str, node_version: str) -> KimiCode | None:
    nm = prefix / "node_modules"
    pkg = nm / "@moonshot-ai" / "kimi-code"
    node = nm / "node" / "bin" / "node"
    if _package_version(pkg) != version or _package_version(nm / "node") != node_version:
        return None
    if not node.exists() or _node_version(node) != node_version:
        return None
    main = pkg / "dist" / "main.mjs"
    return KimiCode(node, main, version) if main.exists() else None


def ensure_kimi_code(
    repo: Path, version: str = KIMI_CODE_VERSION, node_version: str = NODE_VERSION, timeout: float = 300
) -> KimiCode:
    """Install Kimi Code ``version`` and Node ``node_version`` under ``.e2e/kimi-code-<version>``."""
    prefix = kimi_code_prefix(repo, version)
    with installing(prefix):
        return _ensure_kimi_code(prefix, version, node_version, timeout)


def _ensure_kimi_code(prefix: Path, version: str, node_version: str, timeout: float) -> KimiCode:
    found = _installed(prefix, version, node_version)
    if found:
        return found
    npm = shutil.which("npm")
    if not npm or not shutil.which("node"):
        raise KimiCodeUnavailable(f"node/npm not found on PATH; cannot install {KIMI_CODE_PACKAGE}@{version}")
    prefix.mkdir(parents=True, exist_ok=True)
    argv = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix)]
    argv += [f"{KIMI_CODE_PACKAGE}@{version}", f"node@{node_version}"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    found = _installed(prefix, version, node_version)
    if proc.returncode != 0 or found is None:
        raise KimiCodeUnavailable(
            f"npm install {KIMI_CODE_PACKAGE}@{version} node@{node_version} failed or left no working "
            f"Node {node_version} (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return found


# --------------------------------------------------------------------------- isolation

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, SIOCGIFFLAGS, ifr))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))


def _interfaces() -> list[str]:
    return sorted(name for _, name in socket.if_nameindex())


UNSHARE_VARIANTS = (["-rn"], ["-n"])


@cache
def isolation() -> tuple[str, list[str], str]:
    """(mode, unshare argv prefix, why): ``netns`` when a loopback-only namespace works here."""
    unshare = shutil.which("unshare")
    if not unshare:
        return "loopback", [], "no unshare binary"
    here = str(Path(__file__).resolve().parent)
    probe = (
        f"import sys; sys.path.insert(0, {here!r}); import kimi_code_harness as h; h._loopback_up(); "
        "print(','.join(h._interfaces()))"
    )
    why = []
    for flags in UNSHARE_VARIANTS:
        argv = [unshare, *flags]
        try:
            out = subprocess.run([*argv, sys.executable, "-c", probe], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            why.append(f"unshare {' '.join(flags)}: {exc!r}")
            continue
        if out.returncode == 0 and out.stdout.strip() == "lo":
            return "netns", argv, f"unshare {' '.join(flags)}"
        why.append(f"unshare {' '.join(flags)}: rc={out.returncode} {out.stdout.strip()} {out.stderr.strip()[-300:]}")
    return "loopback", [], "; ".join(why)


class UnixRelay:
    """Accepts on a unix socket in a fresh short temp dir (reachable from inside the
    namespace: the file system is shared; AF_UNIX paths are at most 107 bytes) and pipes
    each connection to ``host:port`` (the proxy).  ``close()`` removes the dir."""

    def __init__(self, host: str, port: int):
        self.path = Path(tempfile.mkdtemp(prefix="sb-kimi-")) / "relay.sock"
        self.host, self.port = host, port
        self.connections = 0
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.bind(str(self.path))
            self._sock.listen(32)
        except OSError:
            self._sock.close()
            shutil.rmtree(self.path.parent, ignore_errors=True)
            raise
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="kimi-unix-relay", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            try:
                upstream = socket.create_connection((self.host, self.port), timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self) -> None:
        try:
            self._sock.close()
        finally:
            for s in self._open:
                try:
                    s.close()
                except OSError:
                    pass
            shutil.rmtree(self.path.parent, ignore_errors=True)


async def _relay_main(port: int, unix_path: str, report: str, argv: list[str]) -> int:
    """Inside the namespace: loopback up, 127.0.0.1:port -> unix socket, run ``argv``."""
    _loopback_up()
    Path(report).write_text(json.dumps({"interfaces": _interfaces()}), encoding="utf-8")

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            try:
                writer.write_eof()
            except (OSError, RuntimeError):
                pass

    handlers: set[asyncio.Task] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            handlers.add(task)
        try:
            ur, uw = await asyncio.open_unix_connection(unix_path)
            await asyncio.gather(pump(reader, uw), pump(ur, writer))
            uw.close()
        except (OSError, asyncio.CancelledError):  # ends normally: asyncio reports a cancelled handler
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    proc = await asyncio.create_subprocess_exec(*argv)
    rc = await proc.wait()
    server.close()
    for t in handlers:
        t.cancel()
    await asyncio.gather(*handlers, return_exceptions=True)
    return rc


# --------------------------------------------------------------------------- running


@dataclass
class KimiRun:
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

    @property
    def tool_calls(self) -> list[dict]:
        return [tc for e in self.events if e.get("role") == "assistant" for tc in e.get("tool_calls") or []]

    @property
    def tool_results(self) -> list[dict]:
        return [e for e in self.events if e.get("role") == "tool"]

    @property
    def assistant_texts(self) -> list[str]:
        out = []
        for e in self.events:
            c = e.get("content") if e.get("role") == "assistant" else None
            if isinstance(c, list):
                c = "".join(p.get("text", "") for p in c if isinstance(p, dict) and p.get("type") == "text")
            if c:
                out.append(c)
        return out

    @property
    def final_text(self) -> str | None:
        texts = self.assistant_texts
        return texts[-1] if texts else None

    def describe(self) -> str:
        head = (
            f"kimi-code rc={self.returncode} timed_out={self.timed_out} {self.duration:.1f}s "
            f"isolation={self.isolation} interfaces={self.interfaces}\n--- stream-json ---\n"
        )
        return describe_run(head, self.events, self.non_json, self.stderr, 3000)


def write_home(
    home: Path,
    *,
    provider_type: str,
    base_url: str,
    model: str,
    max_context_size: int = 131072,
    env_key: str = ENV_KEY,
) -> Path:
    if provider_type not in PROVIDER_TYPES:
        raise ValueError(f"provider_type must be one of {PROVIDER_TYPES}, not {provider_type!r}")
    home.mkdir(parents=True, exist_ok=True)
    lines = [
        f"default_model = {toml_str(MODEL_ALIAS)}",
        "",
        f"[providers.{MODEL_ALIAS}]",
        f"type = {toml_str(provider_type)}",
        f"base_url = {toml_str(base_url)}",
        f"api_key_env = {toml_str(env_key)}",
        "",
        f"[models.{MODEL_ALIAS}]",
        f"provider = {toml_str(MODEL_ALIAS)}",
        f"model = {toml_str(model)}",
        f"max_context_size = {int(max_context_size)}",
        'capabilities = ["thinking"]',
        "",
        "[loop_control]",
        "max_attempts_per_step = 1",
        "",
        "[model_catalog]",
        "refresh_on_start = false",
        "",
    ]
    cfg = home / "config.toml"
    cfg.write_text("\n".join(lines), encoding="utf-8")
    return cfg


@dataclass
class Isolated:
    argv: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    duration: float
    timed_out: bool
    mode: str  # "netns" | "loopback"
    interfaces: list[str] | None  # inside the namespace (netns mode)


def run_isolated(
    command: list[str], *, port: int, cwd: Path, env: dict[str, str], timeout: float, isolate: bool = True
) -> Isolated:
    """Run ``command`` with 127.0.0.1:``port`` (the proxy) reachable and, in netns mode,
    nothing else; in its own process group, killed by that PID on timeout."""
    mode, unshare, _why = isolation() if isolate else ("loopback", [], "not asked")
    relay: UnixRelay | None = None
    report_dir = Path(tempfile.mkdtemp(prefix="sb-kimi-report-"))
    report = report_dir / "netns.json"
    if mode == "netns":
        relay = UnixRelay("127.0.0.1", port)
        argv = [*unshare, sys.executable, str(Path(__file__).resolve()), "--netns-relay"]
        argv += ["--port", str(port), "--unix", str(relay.path), "--report", str(report), "--", *command]
    else:
        argv = list(command)
    try:
        done = run_group(argv, cwd=cwd, env=env, timeout=timeout)
    finally:
        if relay is not None:
            relay.close()
    interfaces = None
    if mode == "netns":
        try:
            interfaces = json.loads(report.read_text(encoding="utf-8"))["interfaces"]
        except (OSError, ValueError, KeyError):
            pass
    shutil.rmtree(report_dir, ignore_errors=True)
    return Isolated(argv, done.returncode, done.stdout, done.stderr, done.seconds, done.timed_out, mode, interfaces)


def run_kimi_code(
    kc: KimiCode,
    prompt: str,
    *,
    provider_type: str,
    base_url: str,
    model: str,
    workspace: Path,
    home: Path,
    api_key: str,
    timeout: float = 90,
    isolate: bool = True,
) -> KimiRun:
    """One ``kimi -p`` run against ``base_url`` (``http://127.0.0.1:<port>/...``: the proxy)."""
    url = urlsplit(base_url)
    if url.hostname != "127.0.0.1" or not url.port:
        raise ValueError(f"base_url must be http://127.0.0.1:<port>/..., not {base_url}")
    workspace.mkdir(parents=True, exist_ok=True)
    write_home(home, provider_type=provider_type, base_url=base_url, model=model)
    kimi = [str(kc.node), str(kc.main), "-p", prompt, "--output-format", "stream-json"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "KIMI_", "ANTHROPIC_"))}
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env.pop(k, None)
    env.update(
        {
            "KIMI_CODE_HOME": str(home),
            "HOME": str(home),
            ENV_KEY: api_key,
            "KIMI_CODE_NO_AUTO_UPDATE": "1",
            "KIMI_DISABLE_TELEMETRY": "1",
            **NODE_COMPILE_CACHE,
            "NO_COLOR": "1",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
    )
    r = run_isolated(kimi, port=url.port, cwd=workspace, env=env, timeout=timeout, isolate=isolate)
    run = KimiRun(r.argv, r.returncode, r.stdout, r.stderr, r.duration, r.timed_out, workspace, home, r.mode)
    run.interfaces = r.interfaces
    run.events, run.non_json = json_lines(r.stdout)
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="in-namespace relay for the Kimi Code e2e harness")
    ap.add_argument("--netns-relay", action="store_true", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--unix", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    return asyncio.run(_relay_main(a.port, a.unix, a.report, cmd))


if __name__ == "__main__":
    sys.exit(main())
