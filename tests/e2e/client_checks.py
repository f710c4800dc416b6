"""Client-side drivers shared by the direct (harness) and through-proxy tests.

Theory of operation
-------------------
Each driver talks to ``base_url`` with a real client library, consumes the whole answer and
returns what a user of that library would see, normalised to plain data:
``{"text", "reasoning", "tool_calls": [(id, name, arguments)], "finish", "events"}``.
The tests then compare that to the script (``scenarios.SDK_*`` / ``KOSONG_*``), so a
proxy that drops, reorders or re-serialises anything shows up as an exact-value diff.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import sdk_checks
from procs import JobServer, installing
from scenarios import SDK_TOOLS_CHAT, SDK_TOOLS_RESPONSES

TIMEOUT = httpx.Timeout(30.0, connect=5.0)


# --------------------------------------------------------------------------- openai SDK

SDK_PROMPT = "read a.py and b.py"
# each openai SDK a venv of its own under .e2e/<name>, from its hash-locked requirements
SDK_LOCKS = {name: Path(__file__).resolve().parent / f"requirements-{name}.lock" for name in ("openai2", "openai3")}
INSTALL_TIMEOUT = 300  # seconds for pip to install the locked SDK
RUN_TIMEOUT = 90  # seconds for one driver run in the other interpreter


def _tuples(got: dict[str, Any]) -> dict[str, Any]:
    if "tool_calls" in got:
        got["tool_calls"] = [tuple(c) for c in got["tool_calls"]]
    return got


def sdk_chat(base_url: str, api_key: str, model: str, *, stream: bool, python: Path | None = None) -> dict[str, Any]:
    """The Chat driver of ``sdk_checks`` (strict validation), in process or under ``python``."""
    kw = dict(base_url=base_url, api_key=api_key, model=model, stream=stream, tools=SDK_TOOLS_CHAT, prompt=SDK_PROMPT)
    if python is None:
        return _tuples(sdk_checks.chat(**kw))
    return _tuples(run_sdk_checks(python, "chat", **kw))


def sdk_responses(
    base_url: str, api_key: str, model: str, *, stream: bool, python: Path | None = None
) -> dict[str, Any]:
    """The Responses driver of ``sdk_checks`` (strict validation), in process or under ``python``."""
    kw = dict(
        base_url=base_url, api_key=api_key, model=model, stream=stream, tools=SDK_TOOLS_RESPONSES, prompt=SDK_PROMPT
    )
    if python is None:
        return _tuples(sdk_checks.responses(**kw))
    return _tuples(run_sdk_checks(python, "responses", **kw))


# one ``sdk_checks.py --serve`` per interpreter, kept for the whole test process: each
# request builds its own client, as a one-shot run does, without importing the SDK again
_DRIVERS: dict[Path, JobServer] = {}


def run_sdk_checks(python: Path, api: str, **kw: Any) -> dict[str, Any]:
    """Run ``sdk_checks`` under another interpreter; its exception is raised here."""
    driver = _DRIVERS.get(python)
    if driver is None:
        driver = _DRIVERS[python] = JobServer([str(python), str(Path(sdk_checks.__file__)), "--serve"])
    try:
        out = driver.run({"api": api, **kw}, timeout=RUN_TIMEOUT)
    except RuntimeError as exc:
        raise RuntimeError(f"sdk_checks under {python}: {exc}") from None
    if "exception" in out:
        raise RuntimeError(f"openai SDK under {python}: {out['exception']}")
    return out


class SdkUnavailable(RuntimeError):
    pass


def locked_sdk_version(name: str) -> str:
    """The openai release that ``SDK_LOCKS[name]`` pins."""
    for line in SDK_LOCKS[name].read_text().splitlines():
        if line.startswith("openai=="):
            return line.removeprefix("openai==").split()[0]
    raise SdkUnavailable(f"{SDK_LOCKS[name]} pins no openai release")


def ensure_sdk(repo: Path, name: str) -> Path:
    """The python of ``<repo>/.e2e/<name>``: a venv with ``SDK_LOCKS[name]`` installed
    (hash-checked), made once per lock file and reused while the lock is unchanged."""
    home = repo / ".e2e" / name
    with installing(home):
        return _ensure_sdk(home, SDK_LOCKS[name])


def _ensure_sdk(home: Path, lock: Path) -> Path:
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()
    python = home / "bin" / "python"
    stamp = home / ".lock-sha256"
    if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return python
    shutil.rmtree(home, ignore_errors=True)  # a stale or half-made one: start over
    steps = [
        [sys.executable, "-m", "venv", str(home)],
        [str(python), "-m", "pip", "install", "-q", "--require-hashes", "--no-deps", "-r", str(lock)],
    ]
    for cmd in steps:
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise SdkUnavailable(f"{' '.join(cmd)} did not finish within {INSTALL_TIMEOUT}s") from None
        if res.returncode != 0:
            raise SdkUnavailable(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    stamp.write_text(digest + "\n")  # written last: its absence means "not finished"
    return python


# --------------------------------------------------------------------------- kosong


READ_TOOL_PARAMS = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "line_offset": {"type": "integer"}},
    "required": ["path"],
}


def kosong_two_turns(
    provider_kind: str, base_url: str, api_key: str, model: str, *, stream: bool = True
) -> dict[str, Any]:
    """Turn 1: model calls Read twice in parallel. Turn 2: history with both tool results
    goes back; the model answers. Returns what kosong saw on both turns."""
    from kosong import generate
    from kosong.message import Message, TextPart, ThinkPart
    from kosong.tooling import Tool

    if provider_kind == "kimi":
        from kosong.chat_provider.kimi import Kimi

        provider = Kimi(model=model, api_key=api_key, base_url=base_url, stream=stream, max_retries=0, timeout=TIMEOUT)
    elif provider_kind == "openai_legacy":
        from kosong.contrib.chat_provider.openai_legacy import OpenAILegacy

        provider = OpenAILegacy(
            model=model,
            api_key=api_key,
            base_url=base_url,
            stream=stream,
            reasoning_key="reasoning_content",
            max_retries=0,
            timeout=TIMEOUT,
        )
    elif provider_kind == "responses":
        from kosong.contrib.chat_provider.openai_responses import OpenAIResponses

        provider = OpenAIResponses(
            model=model, api_key=api_key, base_url=base_url, stream=stream, max_retries=0, timeout=TIMEOUT
        )
    else:  # pragma: no cover
        raise ValueError(provider_kind)

    tools = [Tool(name="Read", description="Read a file", parameters=READ_TOOL_PARAMS)]

    def summarize(msg) -> dict[str, Any]:
        return {
            "text": "".join(p.text for p in msg.content if isinstance(p, TextPart)),
            "reasoning": "".join(p.think for p in msg.content if isinstance(p, ThinkPart)),
            "tool_calls": [(tc.id, tc.function.name, tc.function.arguments) for tc in msg.tool_calls or []],
        }

    async def go() -> dict[str, Any]:
        history = [Message(role="user", content="read src/main.py and README.md")]
        r1 = await generate(provider, "You are a test agent.", tools, history)
        out = {"turn1": summarize(r1.message)}
        history.append(r1.message)
        for tc in r1.message.tool_calls or []:
            history.append(Message(role="tool", tool_call_id=tc.id, content=f"contents of {tc.function.arguments}"))
        r2 = await generate(provider, "You are a test agent.", tools, history)
        out["turn2"] = summarize(r2.message)
        return out

    return asyncio.run(go())


def types_not_in_policy_table(body: dict) -> list[str]:
    """The input item and tool types of a Responses request body that the policy table
    (``transformers/items.py``) has no row for: a real client's request must have none."""
    from transformers import items

    missing = []
    for it in body.get("input") or () if isinstance(body.get("input"), list) else ():
        if isinstance(it, dict):
            kind = items.item_type(it)
            if kind not in items.INPUT_ITEMS:
                missing.append(f"item {kind}")
            nested = it.get("tools") if kind == "additional_tools" else None
            for t in nested or ():
                if isinstance(t, dict) and t.get("type") not in items.TOOLS:
                    missing.append(f"tool {t.get('type')}")
    for t in body.get("tools") or ():
        if isinstance(t, dict) and "function" not in t and t.get("type") not in items.TOOLS:
            missing.append(f"tool {t.get('type')}")
    return missing
