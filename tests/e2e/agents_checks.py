"""openai-agents SDK driver for the e2e suite, run by the python of ``.e2e/agents``.

Theory of operation
-------------------
``python agents_checks.py < job.json`` runs one case of the real Agents SDK against
``base_url`` (the proxy) and prints one JSON object on stdout; ``python agents_checks.py
--serve`` (what the suite runs, ``procs.JobServer``) answers one job per stdin line with one
JSON line each, the SDK imported once for them all, each job with its own client and agent.  The job:
``{"case", "base_url", "api_key", "model", "prompts": [str, ...], "workdir", "timeout"}``.

Every case uses ``set_tracing_disabled(True)`` (nothing leaves loopback), one
``AsyncOpenAI(base_url=..., api_key=..., max_retries=0)`` client and an Agent with one
``@function_tool`` ``exec_command(cmd: str) -> str`` that really runs ``cmd`` with bash in
``workdir`` (bounded) and records each call:

==============  ===========================================================================
case            what
==============  ===========================================================================
``run``         ``OpenAIResponsesModel``, ``Runner.run``: tool call, then the final answer
``streamed``    the same with ``Runner.run_streamed``, consuming ``stream_events()``
``chained``     ``OpenAIResponsesModel``, two ``Runner.run`` calls: the first with
                ``auto_previous_response_id=True`` (its second model call continues the first
                by ``previous_response_id``), the second with
                ``previous_response_id=<first result's last_response_id>`` and only the new
                prompt
``chat_model``  ``OpenAIChatCompletionsModel``, ``Runner.run`` against ``/chat/completions``
==============  ===========================================================================

The summary: ``{"sdk", "openai", "runs": [{"final", "last_response_id", "tool_calls":
[{"cmd", "output"}], "items": [item types], "events": [...], "delta_text"}], "wire":
[{"method", "path", "json"}]}``; ``wire`` is every request body the SDK sent, read off its
HTTP client's request hook, so the tests can show and assert what the Agents SDK puts on
the wire.  An exception is printed as ``{"exception": ..., "wire": [...]}``.  The module
imports nothing but the standard library, ``agents`` and the ``openai`` it brings.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import traceback
from typing import Any

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.version import __version__ as AGENTS_VERSION
from openai import AsyncOpenAI, DefaultAsyncHttpxClient
from openai import __version__ as OPENAI_VERSION

TOOL_TIMEOUT = 10.0  # seconds for one exec_command
INSTRUCTIONS = "You are a test agent. Use exec_command to run shell commands."


class Driver:
    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.wire: list[dict[str, Any]] = []
        self.calls: list[dict[str, str]] = []  # exec_command calls of the current run

    async def _record(self, request: Any) -> None:
        try:
            body = json.loads(request.content) if request.content else None
        except (ValueError, RuntimeError):  # a streamed body: not read here
            body = None
        self.wire.append({"method": request.method, "path": request.url.path, "json": body})

    def client(self) -> AsyncOpenAI:
        timeout = float(self.job.get("timeout", 30))
        http = DefaultAsyncHttpxClient(timeout=timeout, event_hooks={"request": [self._record]})
        return AsyncOpenAI(
            base_url=self.job["base_url"], api_key=self.job["api_key"], max_retries=0, timeout=timeout, http_client=http
        )

    def agent(self, model: Any) -> Agent:
        workdir = self.job["workdir"]
        calls = self.calls

        @function_tool
        def exec_command(cmd: str) -> str:
            """Run a shell command in the workspace and return its output.

            Args:
                cmd: the shell command line to run.
            """
            try:
                res = subprocess.run(
                    ["bash", "-c", cmd],
                    cwd=workdir,
                    capture_output=True,
                    text=True,
                    timeout=TOOL_TIMEOUT,
                    stdin=subprocess.DEVNULL,
                )
                output = res.stdout + res.stderr
            except subprocess.TimeoutExpired:
                output = f"timed out after {TOOL_TIMEOUT}s"
            calls.append({"cmd": cmd, "output": output})
            return output

        return Agent(
            name="e2e-agent",
            instructions=INSTRUCTIONS,
            model=model,
            tools=[exec_command],
            model_settings=ModelSettings(),
        )

    def summary(self, result: Any, **extra: Any) -> dict[str, Any]:
        out = {
            "final": result.final_output if isinstance(result.final_output, str) else repr(result.final_output),
            "last_response_id": result.last_response_id,
            "tool_calls": list(self.calls),
            "items": [it.type for it in result.new_items],
            **extra,
        }
        self.calls.clear()
        return out

    async def run(self) -> list[dict[str, Any]]:
        case = self.job["case"]
        prompts = self.job["prompts"]
        client = self.client()
        name = self.job["model"]
        cfg = RunConfig(tracing_disabled=True)
        if case == "chat_model":
            agent = self.agent(OpenAIChatCompletionsModel(model=name, openai_client=client))
        else:
            agent = self.agent(OpenAIResponsesModel(model=name, openai_client=client))
        runs: list[dict[str, Any]] = []
        if case in ("run", "chat_model"):
            r = await Runner.run(agent, prompts[0], max_turns=4, run_config=cfg)
            runs.append(self.summary(r))
        elif case == "streamed":
            r = Runner.run_streamed(agent, prompts[0], max_turns=4, run_config=cfg)
            events: list[str] = []
            delta = ""
            async for ev in r.stream_events():
                if ev.type == "raw_response_event":
                    events.append(ev.data.type)
                    if ev.data.type == "response.output_text.delta":
                        delta += ev.data.delta
                elif ev.type == "run_item_stream_event":
                    events.append(f"item:{ev.name}")
                else:
                    events.append(f"agent:{ev.new_agent.name}")
            runs.append(self.summary(r, events=events, delta_text=delta))
        elif case == "chained":
            r1 = await Runner.run(agent, prompts[0], max_turns=4, run_config=cfg, auto_previous_response_id=True)
            runs.append(self.summary(r1))
            r2 = await Runner.run(
                agent, prompts[1], max_turns=4, run_config=cfg, previous_response_id=r1.last_response_id
            )
            runs.append(self.summary(r2))
        else:
            raise ValueError(f"unknown case {case!r}")
        await client.close()
        return runs


def answer(job: dict[str, Any]) -> dict[str, Any]:
    d = Driver(job)
    out: dict[str, Any] = {"sdk": AGENTS_VERSION, "openai": OPENAI_VERSION}
    try:
        out["runs"] = asyncio.run(asyncio.wait_for(d.run(), float(job.get("deadline", 60))))
    except BaseException as exc:  # reported to the test, with what was sent so far
        out["exception"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-3000:]}"
    out["wire"] = d.wire
    return out


def main() -> int:
    set_tracing_disabled(True)
    if sys.argv[1:] == ["--serve"]:  # one job per line, one summary per line (procs.JobServer)
        from procs import answer_jobs

        return answer_jobs(answer)
    print(json.dumps(answer(json.load(sys.stdin)), ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
