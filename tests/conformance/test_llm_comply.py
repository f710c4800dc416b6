"""The public llm-comply conformance suites, run through the proxy against the demo provider.

Theory of operation
-------------------
A module-scoped fixture starts ``switchboard serve --config config.example.yaml`` on
127.0.0.1 and a free port (a real process: uvicorn, the pipeline, the in-process ``demo``
provider), with ``SWITCHBOARD_API_KEY`` set so client auth is exercised too, waits for
``GET /readyz`` and stops that PID at the end.  Each test runs the ``llm-comply`` CLI that
sits next to ``sys.executable`` (the ``test`` extra installs it) for one ``--format`` with
``--json``, bounded by ``SUITE_TIMEOUT``, and asserts that every test in the report passed
with no warning, except the skips and warnings listed below with their reason.  Chat
clients hit the Chat path directly; ``open-responses`` goes through the Responses→Chat
translation and the Responses encoder.  ``update-spec`` is never run (it needs the
internet): the suites use the specs bundled with the pinned llm-comply.

Both model names of ``config.example.yaml`` run: ``demo`` (the first, what a user tries
first) and ``gpt-5-demo``, the same demo under its second name.  llm-comply skips its
reasoning tests unless the model name looks like a reasoning model (o1/o3/o4/gpt-5/
deepseek-r); the demo does reason when asked, so under ``gpt-5-demo`` nothing is skipped and
under ``demo`` only those two name-gated tests are.  The tool-calling tests get a real call
with schema-valid arguments (the demo calls an offered tool on the first turn).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "config.example.yaml"
BIN = Path(sys.executable).parent
MODELS = ["demo", "gpt-5-demo"]  # config.example.yaml's model names, first first
API_KEY = "sb-conformance-test-key"
START_TIMEOUT = 30.0  # seconds for the proxy to answer /readyz
SUITE_TIMEOUT = 300.0  # seconds for one llm-comply run
REQUEST_TIMEOUT = 30  # llm-comply's per-request timeout

# the tests each suite must contain (llm-comply 0.5.0); a new test must pass as well
EXPECTED: dict[str, set[str]] = {
    "openai-chat": {
        "chat-basic-response",
        "chat-system-prompt",
        "chat-multi-turn",
        "chat-tool-calling",
        "chat-streaming-response",
        "chat-streaming-usage",
        "chat-image-input",
        "chat-reasoning-summary",
        "chat-error-handling",
    },
    "open-responses": {
        "basic-response",
        "system-prompt",
        "multi-turn",
        "tool-calling",
        "streaming-response",
        "streaming-usage",
        "image-input",
        "assistant-phase",
        "response-output-phase-schema",
        "compact-response",
        "compact-missing-model",
        "reasoning-summary",
        "error-handling",
    },
}

_NAME_GATED = "llm-comply runs reasoning tests only for o-series/gpt-5 model names; gpt-5-demo runs them"
# (model, format, test id) → why a skip is acceptable: only what the demo cannot be asked by this name
ALLOWED_SKIPS: dict[tuple[str, str, str], str] = {
    ("demo", "openai-chat", "chat-reasoning-summary"): _NAME_GATED,
    ("demo", "open-responses", "reasoning-summary"): _NAME_GATED,
}

# (format, test id) → why its advisory warnings are acceptable (the test itself must pass)
ALLOWED_WARNINGS: dict[tuple[str, str], str] = {
    ("open-responses", "compact-response"): (
        "Switchboard has no POST /v1/responses/compact endpoint yet: it answers 404, which the "
        "suite accepts, and the compaction checks are advisory"
    ),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_cmd() -> list[str]:
    exe = BIN / "switchboard"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "app.cli"]


class Proxy:
    def __init__(self, proc: subprocess.Popen[bytes], base_url: str, log: Path) -> None:
        self.proc = proc
        self.base_url = base_url
        self.log_path = log

    def log(self, tail: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""


def _wait_ready(proxy: Proxy) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proxy.proc.poll() is not None:
            raise RuntimeError(f"switchboard exited with {proxy.proc.returncode}:\n{proxy.log()}")
        try:
            if httpx.get(proxy.base_url.removesuffix("/v1") + "/readyz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"switchboard not ready after {START_TIMEOUT:g}s:\n{proxy.log()}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    log = tmp_path_factory.mktemp("switchboard") / "serve.log"
    env = {**os.environ, "SWITCHBOARD_API_KEY": API_KEY}
    port = _free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*_serve_cmd(), "serve", "--config", str(CONFIG), "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    p = Proxy(proc, f"http://127.0.0.1:{port}/v1", log)
    try:
        _wait_ready(p)
        yield p
    finally:
        _stop(proc)


def _run_suite(proxy: Proxy, fmt: str, model: str) -> dict:
    exe = BIN / "llm-comply"
    assert exe.exists(), f"llm-comply is not installed next to {sys.executable} (pip install -e '.[test]')"
    cmd = [
        str(exe),
        "run",
        "-u",
        proxy.base_url,
        "-k",
        API_KEY,
        "-m",
        model,
        "--format",
        fmt,
        "--json",
        "--timeout",
        str(REQUEST_TIMEOUT),
    ]
    try:
        res = subprocess.run(
            cmd, cwd=REPO, capture_output=True, text=True, timeout=SUITE_TIMEOUT, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"llm-comply --format {fmt} did not finish within {SUITE_TIMEOUT:g}s\n{proxy.log()}")
    try:
        report = json.loads(res.stdout)
    except json.JSONDecodeError:
        pytest.fail(
            f"llm-comply --format {fmt} printed no JSON report (exit {res.returncode})\n"
            f"stdout:\n{res.stdout[-3000:]}\nstderr:\n{res.stderr[-3000:]}\n{proxy.log()}"
        )
    return report


def _problems(fmt: str, model: str, results: list[dict]) -> list[str]:
    problems = []
    for r in results:
        tid, status = r["id"], r["status"]
        errors, warnings = r.get("errors", []), r.get("warnings", [])
        if status == "skipped" and (model, fmt, tid) in ALLOWED_SKIPS:
            continue
        if status != "passed":
            problems.append(f"{tid}: {status}: " + "; ".join(errors[:12]) + (" …" if len(errors) > 12 else ""))
        elif warnings and (fmt, tid) not in ALLOWED_WARNINGS:
            problems.append(f"{tid}: warnings: " + "; ".join(warnings))
    return problems


@pytest.mark.parametrize("fmt", sorted(EXPECTED))
@pytest.mark.parametrize("model", MODELS)
def test_llm_comply_suite(proxy: Proxy, fmt: str, model: str) -> None:
    report = _run_suite(proxy, fmt, model)
    results = report["results"]
    assert report["summary"]["total"] == len(results) > 0
    missing = EXPECTED[fmt] - {r["id"] for r in results}
    assert not missing, f"llm-comply --format {fmt} no longer runs {sorted(missing)}"
    problems = _problems(fmt, model, results)
    assert not problems, (
        f"llm-comply --format {fmt} -m {model} through the proxy:\n  "
        + "\n  ".join(problems)
        + (f"\n--- proxy log (tail) ---\n{proxy.log()}")
    )
    assert proxy.proc.poll() is None, f"the proxy died during the suite:\n{proxy.log()}"
