"""The benchmark: Switchboard's cost against calling the upstream directly, in one run.

Theory of operation
-------------------
``python -m bench.run [--quick]`` (or ``bench/run [--quick]``), from the repository root:

1. pins itself (the load generator) to core 1, starts the fake upstream
   (``bench/fake_upstream.py``) under ``taskset -c 1``, and writes a proxy config whose
   providers point at it (``openai-compatible``; one ``chat``, one ``responses``, one
   ``messages``);
2. starts ``.venv/bin/switchboard serve`` under ``taskset -c 0`` (the proxy alone on its
   core), timing start → ``/readyz`` 200 (several times) and reading its RSS;
3. warms both paths up, reads the idle RSS, then runs every scenario for several rounds,
   each round measuring **direct** (the client's protocol served by the fake itself) and
   **through Switchboard**, alternating which goes first;
4. per measurement: the load generator's figures (req/s, latency, TTFB, TTFT, events/s),
   the proxy's CPU from ``/proc/<pid>/stat`` (utime+stime deltas, whole process tree) and
   its peak RSS (``VmHWM``, reset before each measurement through ``clear_refs``); one
   answer per measurement is checked in full (text, tool call, usage, terminator);
5. prints a markdown table (medians with min–max over rounds) and the targets, and writes
   ``bench/results/latest-<mode>.md`` and JSON lines (``sample``, ``summary``, ``target``,
   ``meta``) to ``bench/results/``;
6. stops what it started, by process group id (each child is started in its own session),
   also on error or Ctrl-C.

Everything stays on loopback.  Nothing here asserts a timing; targets are reported.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import orjson

from bench.codex_body import codex_request
from bench.fake_upstream import PROVIDER_OF, TOOL_NAME, proxy_providers
from bench.loadgen import LoadResult, LoadSpec, percentile, run_load

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KB = 1024

PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
SHORT = {"chat": "chat", "responses": "resp", "messages": "msg", "gemini": "gem"}
# Gemini's own API: the model and the method in the path, a stream asked as SSE
GEMINI_PATH = "/v1beta/models/{model}:{method}"


# the Gemini directions' tags: same-protocol, Gemini CLI on a Chat upstream, a Chat client on Gemini
GEM_TAGS = ("gem", "gem2chat", "chat2gem")


def client_path(s: Scenario) -> str:
    """The path a client of ``s`` POSTs to, the proxy's and the fake upstream's alike."""
    if s.client != "gemini":
        return PATHS[s.client]
    if s.stream:
        return GEMINI_PATH.format(model=s.model, method="streamGenerateContent") + "?alt=sse"
    return GEMINI_PATH.format(model=s.model, method="generateContent")


# ------------------------------------------------------------------------ scenarios
@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    kind: str  # ns (non-stream) | lat (stream, c=1) | tput (stream, CPU-bound) | rt | mem
    client: str  # protocol the client speaks: chat | responses | messages | gemini
    upstream: str  # protocol the (fake) upstream speaks behind the proxy
    stream: bool
    n: int
    delay_ms: int
    concurrency: int
    duration: float | None = None
    per_worker: int | None = None
    pacing: str = ""  # fake upstream pacing flags in the model name: "pe" (per event), "rel"
    workers: int = 0  # 0: the pinned one-worker proxy; N: a proxy of its own, --workers N, unpinned
    reference: bool = False  # the proxy side is bench/reference.py (uvicorn + httpx alone), pinned alike
    relay: bool = False  # the proxy side is bench/relay.py (bytes copied, no HTTP), pinned alike
    turns: int = 0  # > 0: a Codex-sized request with this many earlier turns (bench/codex_body.py)
    reasoning: int = 0  # > 0: this many reasoning chunks before a Chat upstream's text (``think<R>``)
    args: int = 0  # > 0: the tool call's command of this many words, a delta each (``args<A>``)

    @property
    def model(self) -> str:
        tail = f"-{self.pacing}" if self.pacing else ""
        think = f"-think{self.reasoning}" if self.reasoning else ""
        args = f"-args{self.args}" if self.args else ""
        return f"bench-{SHORT[self.upstream]}-n{self.n}-d{self.delay_ms}{tail}{think}{args}"

    @property
    def bridged(self) -> bool:
        return self.client != self.upstream


def scenarios(quick: bool, duration: float | None = None) -> list[Scenario]:
    d = duration if duration is not None else (1.0 if quick else 2.0)
    rt_per = 1 if quick else 2
    mem_n = 50 if quick else 100
    out = [
        Scenario(f"ns-chat-c{c}", f"non-streaming chat, c={c}", "ns", "chat", "chat", False, 20, 0, c, d)
        for c in (1, 16, 64)
    ]
    flows = (
        ("chat", "chat", "streaming chat"),
        ("responses", "responses", "streaming Responses"),
        ("responses", "chat", "bridged Responses→Chat"),
        ("chat", "responses", "bridged Chat→Responses"),
    )
    # Anthropic Messages: Claude Code on a Messages upstream and on a Chat one (Kimi's), Codex
    # on a Messages upstream, a Chat client on one
    msg_flows = (
        ("messages", "messages", "streaming Messages"),
        ("messages", "chat", "bridged Messages→Chat"),
        ("responses", "messages", "bridged Responses→Messages"),
        ("chat", "messages", "bridged Chat→Messages"),
    )
    # Gemini's own API: Gemini CLI on a Gemini upstream and on a Chat one, a Chat client on a
    # Gemini upstream; whole answers too, one at a time
    gem_flows = (
        ("gemini", "gemini", "streaming Gemini"),
        ("gemini", "chat", "bridged Gemini→Chat"),
        ("chat", "gemini", "bridged Chat→Gemini"),
    )
    for cl, up, title in gem_flows:
        tag = f"{SHORT[cl]}" if cl == up else f"{SHORT[cl]}2{SHORT[up]}"
        title = title.replace("streaming", "non-streaming") if cl == up else f"{title}, non-streaming"
        out.append(Scenario(f"ns-{tag}-c1", f"{title}, c=1", "ns", cl, up, False, 20, 0, 1, d))
    for cl, up, title in flows + msg_flows + gem_flows:
        tag = f"{SHORT[cl]}" if cl == up else f"{SHORT[cl]}2{SHORT[up]}"
        out.append(Scenario(f"st-{tag}-c1", f"{title}, 200 chunks, c=1", "lat", cl, up, True, 200, 0, 1, d))
        out.append(Scenario(f"st-{tag}-c8", f"{title}, 200 chunks, c=8", "tput", cl, up, True, 200, 0, 8, d))
    for cl, up, title in flows + msg_flows[1:3] + gem_flows[1:]:
        tag = f"{SHORT[cl]}" if cl == up else f"{SHORT[cl]}2{SHORT[up]}"
        out.append(
            Scenario(f"rt-{tag}", f"{title}, 200 chunks × 5 ms, 4 streams", "rt", cl, up, True, 200, 5, 4, None, rt_per)
        )
    # the independent run's worse case: 218 client events per stream (n chosen per client
    # protocol: Chat adds 8 events around the text, Responses 14), one at a time
    for cl, up, title in flows[:3]:
        tag = f"{SHORT[cl]}" if cl == up else f"{SHORT[cl]}2{SHORT[up]}"
        n218 = EV218_N[cl]
        out.append(Scenario(f"ev218-{tag}-c1", f"{title}, 218 events, c=1", "lat", cl, up, True, n218, 0, 1, d))
    # the same Chat stream with vLLM's chunk layout, which the Chat → Chat passthrough does
    # not take (what most real Chat upstreams send): the text lane and the encoder's writer
    title = "streaming chat, vLLM's chunk layout, 218 events, c=1"
    out.append(Scenario("ev218-chatv-c1", title, "lat", "chat", "chat", True, EV218_N["chat"], 0, 1, d, pacing="vllm"))
    # a reasoning model's stream (Kimi K2, DeepSeek, GLM, MiMo on vLLM): half of the same 218
    # upstream events are reasoning chunks, to a Chat client (Kimi Code) and a Responses one (Codex)
    half = EV218_N["chat"] // 2
    for cl, tag in (("chat", "chatv"), ("responses", "resp2chatv")):
        title = f"{'streaming chat' if cl == 'chat' else 'bridged Responses→Chat'}, vLLM's chunk layout, "
        title += f"{half} reasoning + {half} text chunks (218 upstream events), c=1"
        out.append(
            Scenario(f"think-{tag}-c1", title, "lat", cl, "chat", True, half, 0, 1, d, pacing="vllm", reasoning=half)
        )
    # and on a Responses upstream (Codex on OpenAI): a reasoning item's summary deltas first
    # (the 218-event stream's 204 deltas, half of them reasoning, and its 5 events: 223 events)
    half = EV218_N["responses"] // 2
    title = f"streaming Responses, {half} reasoning summary + {half} text deltas (223 upstream events), c=1"
    out.append(Scenario("think-resp-c1", title, "lat", "responses", "responses", True, half, 0, 1, d, reasoning=half))
    # an agent's tool call with a long command or patch: 20 text chunks, then the call's
    # argument text in 182 deltas (``args180``), from a Chat upstream (vLLM's layout) to both
    # clients and from a Responses one (Codex on OpenAI)
    for cl, up, tag, pacing in (
        ("chat", "chat", "chatv", "vllm"),
        ("responses", "chat", "resp2chatv", "vllm"),
        ("responses", "responses", "resp", ""),
    ):
        title = {"chatv": "streaming chat", "resp2chatv": "bridged Responses→Chat", "resp": "streaming Responses"}[tag]
        title += ", vLLM's chunk layout" if pacing else ""
        title += ", 20 text chunks + a tool call's 182 argument deltas, c=1"
        out.append(Scenario(f"args-{tag}-c1", title, "lat", cl, up, True, 20, 0, 1, d, pacing=pacing, args=180))
    # a request as Codex sends it late in a session: 30 earlier turns, ~370 KB, one at a time
    for cl, up, title in (flows[1], flows[2]):
        tag = f"{SHORT[cl]}" if cl == up else f"{SHORT[cl]}2{SHORT[up]}"
        title = f"{title}, Codex body of 30 turns (~370 KB), 20 chunks, c=1"
        out.append(Scenario(f"big-{tag}-c1", title, "lat", cl, up, True, 20, 0, 1, d, turns=30))
    # 4 streams paced to the end: 200 text chunks and the tool call's 5 steps × 5 ms (206 steps);
    # the same pacing on a same-protocol stream, through Switchboard, through the reference
    # forwarder (uvicorn + httpx alone) and through the byte relay (one more process on the
    # path, no HTTP: bench/README.md, "What a paced stream's first text waits for")
    paced = (
        ("pace-resp2chat", "bridged Responses→Chat", "responses", ""),
        ("pace-chat", "streaming chat", "chat", ""),
        ("ref-pace-chat", "streaming chat", "chat", "reference forwarder"),
        ("relay-pace-chat", "streaming chat", "chat", "byte relay"),
    )
    for name, title, cl, floor in paced:
        tail = f", {floor}" if floor else ""
        out.append(
            Scenario(
                name,
                f"{title}, 206 steps × 5 ms (tail paced too), 4 streams{tail}",
                "ref" if floor else "rt",
                cl,
                "chat",
                True,
                200,
                5,
                4,
                None,
                rt_per,
                pacing="pt",
                reference=floor == "reference forwarder",
                relay=floor == "byte relay",
            )
        )
    # pace-resp2chat's streams one at a time (each client's streams in a row, the next sent
    # when one ends): a paced stream's first text with no other request ahead of it on the
    # proxy's core, the floor under the 4 streams' figure (bench/README.md, "One stream at a time")
    four = next(s for s in out if s.name == "pace-resp2chat")
    out.append(
        replace(
            four,
            name="pace1-resp2chat",
            title=four.title.replace("4 streams", "one stream at a time"),
            concurrency=1,
            per_worker=2 * rt_per,
        )
    )
    # the floor: the same requests through a forwarder that only forwards (bench/reference.py)
    out.append(
        Scenario(
            "ref-ns-chat-c1",
            "non-streaming chat, c=1, reference forwarder",
            "ref",
            "chat",
            "chat",
            False,
            20,
            0,
            1,
            d,
            reference=True,
        )
    )
    out.append(
        Scenario(
            "ref-st-chat-c1",
            "streaming chat, 200 chunks, c=1, reference forwarder",
            "ref",
            "chat",
            "chat",
            True,
            200,
            0,
            1,
            d,
            reference=True,
        )
    )
    # the hop's own latency: the short request through the byte relay (bench/relay.py)
    out.append(
        Scenario(
            "relay-ns-chat-c1",
            "non-streaming chat, c=1, byte relay",
            "ref",
            "chat",
            "chat",
            False,
            20,
            0,
            1,
            d,
            relay=True,
        )
    )
    # --workers 1 against --workers 2, both unpinned (the load generator shares core 1)
    for w in (1, 2):
        out.append(
            Scenario(
                f"wk{w}-ns-chat-c32",
                f"non-streaming chat, c=32, --workers {w}",
                "wk",
                "chat",
                "chat",
                False,
                20,
                0,
                32,
                d,
                workers=w,
            )
        )
        out.append(
            Scenario(
                f"wk{w}-st-chat-c8",
                f"streaming chat, 200 chunks, c=8, --workers {w}",
                "wk",
                "chat",
                "chat",
                True,
                200,
                0,
                8,
                d,
                workers=w,
            )
        )
    out.append(
        Scenario(
            "mem-512",
            f"512 slow streams (Responses→Chat, {mem_n} × 20 ms)",
            "mem",
            "responses",
            "chat",
            True,
            mem_n,
            20,
            512,
            None,
            1,
        )
    )
    return out


# text chunks that make a 218-event stream for a client of this protocol (Chat: role chunk,
# tool call with 3 argument deltas, finish, usage, [DONE]; Responses: 4 opening events,
# 10 for the text's end, the call and completed)
EV218_N = {"chat": 210, "responses": 204}


def request_body(s: Scenario) -> bytes:
    """What a coding agent would send: a short conversation and one function tool (or, with
    ``turns``, the whole session Codex sends late in it)."""
    if s.turns:
        return codex_request(s.model, s.turns, stream=s.stream)
    params = {
        "type": "object",
        "properties": {"command": {"type": "array", "items": {"type": "string"}}, "workdir": {"type": "string"}},
        "required": ["command"],
    }
    if s.client == "gemini":  # as Gemini CLI sends it: no model or stream (the path's), thoughts asked for
        body = {
            "contents": [{"role": "user", "parts": [{"text": "List the files in /tmp."}]}],
            "systemInstruction": {"role": "user", "parts": [{"text": "You are a coding agent."}]},
            "tools": [
                {
                    "functionDeclarations": [
                        {"name": TOOL_NAME, "description": "Run a command", "parametersJsonSchema": params}
                    ]
                }
            ],
            "generationConfig": {"temperature": 0, "topP": 1, "thinkingConfig": {"includeThoughts": True}},
        }
    elif s.client == "messages":  # as Claude Code sends it: system and content as blocks
        body = {
            "model": s.model,
            "max_tokens": 32000,
            "system": [{"type": "text", "text": "You are a coding agent."}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "List the files in /tmp."}]}],
            "tools": [{"name": TOOL_NAME, "description": "Run a command", "input_schema": params}],
            "stream": s.stream,
        }
    elif s.client == "chat":
        body = {
            "model": s.model,
            "messages": [
                {"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": "List the files in /tmp."},
            ],
            "tools": [
                {
                    "type": "function",
                    "function": {"name": TOOL_NAME, "description": "Run a command", "parameters": params},
                }
            ],
            "stream": s.stream,
        }
        if s.stream:
            body["stream_options"] = {"include_usage": True}
    else:
        body = {
            "model": s.model,
            "instructions": "You are a coding agent.",
            "input": [
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "List the files in /tmp."}],
                }
            ],
            "tools": [
                {
                    "type": "function",
                    "name": TOOL_NAME,
                    "description": "Run a command",
                    "parameters": params,
                    "strict": False,
                }
            ],
            "tool_choice": "auto",
            "parallel_tool_calls": False,
            "store": False,
            "stream": s.stream,
        }
    return orjson.dumps(body)


def proxy_config(upstream_port: int, scs: list[Scenario]) -> dict:
    base = f"http://{HOST}:{upstream_port}/v1"
    models = sorted({s.model: s for s in scs}.items())
    return {
        "server": {"host": HOST, "port": 0},
        "providers": proxy_providers(base),
        "models": [{"name": m, "provider": PROVIDER_OF[s.upstream]} for m, s in models],
    }


# -------------------------------------------------------------------------- /proc
def proc_children(pid: int) -> list[int]:
    """pid and all its descendants (workers of a multi-process server)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                st = f.read()
        except OSError:
            continue
        ppid = int(st[st.rindex(b")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out


def paired_added(xs: list[float], refs: list[float]) -> float:
    """The median of each round's difference: a case against its reference measured next to
    it in the same round (the cases alternate), so that the machine's drift between rounds
    cancels."""
    return statistics.median(x - r for x, r in zip(xs, refs, strict=True))


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of these processes (all their threads), in seconds."""
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat", "rb") as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rindex(b")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)
    return total / CLK_TCK


def cpu_stat(path: str = "/proc/stat") -> tuple[float, list[float]]:
    """From /proc/stat: the CPU-seconds all cores spent busy since boot (not idle, iowait or
    steal), and each core's steal: the seconds its virtual CPU wanted to run while the
    hypervisor ran something else (a shared host's other guests, which no process here
    shows).  Steal is kept apart from busy: it is time no process of this machine used."""
    busy = 0.0
    steal: list[float] = []
    try:
        with open(path, "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return 0.0, []
    for line in lines:
        if not line.startswith(b"cpu"):
            break
        try:
            fields = [int(x) for x in line.split()[1:]]
        except ValueError:
            return 0.0, []
        st = fields[7] if len(fields) > 7 else 0
        if line[3:4] == b" ":  # the first line: all cores together
            idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
            # guest time is already counted in user/nice
            busy = (sum(fields[:8]) - idle - st) / CLK_TCK
        else:
            steal.append(st / CLK_TCK)
    return busy, steal


def mem_kb(pids: list[int]) -> tuple[int, int]:
    """(VmRSS, VmHWM) in kB, summed over the processes."""
    rss = hwm = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmRSS:"):
                        rss += int(line.split()[1])
                    elif line.startswith(b"VmHWM:"):
                        hwm += int(line.split()[1])
        except OSError:
            continue
    return rss, hwm


def reset_hwm(pids: list[int]) -> bool:
    ok = True
    for p in pids:
        try:
            with open(f"/proc/{p}/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            ok = False
    return ok


# ------------------------------------------------------------------------ processes
def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def pinned(cmd: list[str], core: int | str | None) -> list[str]:
    """``cmd`` under ``taskset -c core`` (a core, or a list such as "0,1"); the runner pins
    itself to the load generator's core, so a child started without this inherits that core."""
    if core is None or not shutil.which("taskset"):
        return cmd
    return ["taskset", "-c", str(core), *cmd]


class Child:
    """A process we started in its own session; stopped by its process-group id only."""

    def __init__(self, name: str, cmd: list[str], log: Path, **kw) -> None:
        self.name = name
        self.cmd = cmd
        self.log = log
        self.logf = open(log, "ab")
        self.t_start = time.perf_counter()
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stderr=self.logf, start_new_session=True, cwd=ROOT, **kw
        )
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 5.0) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout)
        else:
            # the leader is gone; anything left in its group is still ours
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.logf.close()

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


async def http_get_status(port: int, path: str, timeout: float = 1.0) -> int:
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(HOST, port), timeout)
    except (TimeoutError, OSError):
        return 0
    try:
        w.write(f"GET {path} HTTP/1.1\r\nhost: {HOST}:{port}\r\nconnection: close\r\n\r\n".encode())
        line = await asyncio.wait_for(r.readline(), timeout)
        parts = line.split()
        return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    except (TimeoutError, OSError):
        return 0
    finally:
        w.close()


async def fake_stats(port: int) -> dict:
    """The fake upstream's counters (connections accepted, requests answered)."""
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(HOST, port), 2)
    except (TimeoutError, OSError):
        return {}
    try:
        w.write(f"GET /stats HTTP/1.1\r\nhost: {HOST}:{port}\r\nconnection: close\r\n\r\n".encode())
        head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 2)
        m = re.search(rb"content-length: *(\d+)", head, re.I)
        return orjson.loads(await asyncio.wait_for(r.readexactly(int(m.group(1))), 2))
    except (
        TimeoutError,
        OSError,
        asyncio.IncompleteReadError,
        asyncio.LimitOverrunError,
        AttributeError,
        orjson.JSONDecodeError,
    ):
        return {}
    finally:
        w.close()


async def start_fake(workdir: Path, core: int | None) -> tuple[Child, int]:
    child = Child(
        "fake-upstream",
        pinned([sys.executable, "-m", "bench.fake_upstream", "--port", "0"], core),
        workdir / "fake_upstream.log",
        stdout=subprocess.PIPE,
    )
    loop = asyncio.get_running_loop()
    line = await asyncio.wait_for(loop.run_in_executor(None, child.proc.stdout.readline), 20)
    m = re.match(rb"READY (\d+)", line)
    if not m:
        child.stop()
        raise RuntimeError(f"fake upstream did not start: {line!r}\n{child.log_tail()}")
    return child, int(m.group(1))


async def start_proxy(
    cmd_base: list[str],
    config: Path,
    workdir: Path,
    core: int | str | None,
    timeout: float = 30.0,
    workers: int = 0,
) -> tuple[Child, int, float]:
    port = free_port()
    extra = ["--workers", str(workers)] if workers else []
    cmd = pinned([*cmd_base, "serve", "--config", str(config), "--host", HOST, "--port", str(port), *extra], core)
    child = Child("switchboard", cmd, workdir / "switchboard.log", stdout=subprocess.DEVNULL)
    path = "/readyz"
    deadline = child.t_start + timeout
    while time.perf_counter() < deadline:
        if not child.alive():
            child.stop()
            raise RuntimeError(f"switchboard exited with {child.proc.returncode}:\n{child.log_tail()}")
        st = await http_get_status(port, path, 0.5)
        if st == 200:
            return child, port, time.perf_counter() - child.t_start
        if st == 404 and path == "/readyz":
            path = "/healthz"
        await asyncio.sleep(0.005)
    child.stop()
    raise RuntimeError(f"switchboard not ready after {timeout}s:\n{child.log_tail()}")


async def start_relay(fake_port: int, workdir: Path, core: int | str | None) -> tuple[Child, int]:
    """bench/relay.py in front of the fake upstream, listening (it prints ``READY <port>``)."""
    cmd = pinned([sys.executable, "-m", "bench.relay", "--upstream-port", str(fake_port)], core)
    child = Child("relay", cmd, workdir / "relay.log", stdout=subprocess.PIPE)
    assert child.proc.stdout is not None
    line = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, child.proc.stdout.readline), 20)
    m = re.match(rb"READY (\d+)", line)
    if not m:
        child.stop()
        raise RuntimeError(f"the byte relay did not start: {line!r}\n{child.log_tail()}")
    return child, int(m.group(1))


async def start_reference(fake_port: int, workdir: Path, core: int | str | None) -> tuple[Child, int]:
    """bench/reference.py forwarding to the fake upstream, ready (``/readyz`` 200)."""
    port = free_port()
    base = f"http://{HOST}:{fake_port}/v1"
    cmd = pinned([sys.executable, "-m", "bench.reference", "--upstream", base, "--port", str(port)], core)
    child = Child("reference", cmd, workdir / "reference.log", stdout=subprocess.DEVNULL)
    deadline = child.t_start + 30
    while time.perf_counter() < deadline:
        if not child.alive():
            child.stop()
            raise RuntimeError(f"the reference forwarder exited:\n{child.log_tail()}")
        if await http_get_status(port, "/readyz", 0.5) == 200:
            return child, port
        await asyncio.sleep(0.01)
    child.stop()
    raise RuntimeError(f"the reference forwarder was not ready after 30 s:\n{child.log_tail()}")


# ---------------------------------------------------------------------- measuring
def _ms(x: float | None) -> float | None:
    return None if x is None else x * 1000.0


async def measure(
    s: Scenario, side: str, port: int, proxy: Child | None, fake: Child, rnd: int, fake_port: int
) -> dict:
    spec = LoadSpec(
        host=HOST,
        port=port,
        path=client_path(s),
        proto=s.client,
        body=request_body(s),
        stream=s.stream,
        concurrency=s.concurrency,
        duration=s.duration,
        per_worker=s.per_worker,
        n=s.n,
        reasoning=s.reasoning,
        args=s.args,
        same_ids=not s.bridged,
        validate=True,
        timeout=max(30.0, 4 * s.n * s.delay_ms / 1000.0),
    )
    ppids = proc_children(proxy.pid) if (side == "switchboard" and proxy) else []
    hwm_reset = reset_hwm(ppids) if ppids else False
    pcpu0 = cpu_seconds(ppids) if ppids else 0.0
    fcpu0 = cpu_seconds([fake.pid])
    sys0, steal0 = cpu_stat()
    st0 = await fake_stats(fake_port)
    res: LoadResult = await run_load(spec)
    st1 = await fake_stats(fake_port)
    pcpu = (cpu_seconds(ppids) - pcpu0) if ppids else None
    fcpu = cpu_seconds([fake.pid]) - fcpu0
    sys1, steal1 = cpu_stat()
    others = sys1 - sys0 - fcpu - res.cpu - (pcpu or 0.0)
    stolen = [b - a for a, b in zip(steal0, steal1, strict=False)]
    rss, hwm = mem_kb(ppids) if ppids else (None, None)
    recs = res.records
    ok = [r for r in recs if r[5]]
    n_ok = len(ok)
    lat = [r[3] for r in ok]
    ttfb = [r[1] for r in ok if r[1] is not None]
    ttft = [r[2] for r in ok if r[2] is not None]
    events = sum(r[4] for r in ok)
    wall = res.wall or 1e-9
    row = {
        "type": "sample",
        "scenario": s.name,
        "side": side,
        "round": rnd,
        "requests": n_ok,
        "errors": len(recs) - n_ok + sum(1 for e in res.errors if e.startswith("conn:")),
        "wall_s": round(wall, 4),
        "req_s": n_ok / wall,
        "lat_p50_ms": _ms(percentile(lat, 50)),
        "lat_p99_ms": _ms(percentile(lat, 99)),
        "lat_mean_ms": _ms(statistics.fmean(lat)) if lat else None,
        "ttfb_p50_ms": _ms(percentile(ttfb, 50)),
        "ttfb_p99_ms": _ms(percentile(ttfb, 99)),
        "ttft_p50_ms": _ms(percentile(ttft, 50)) if s.stream else None,
        "ttft_p99_ms": _ms(percentile(ttft, 99)) if s.stream else None,
        "events": events if s.stream else None,
        "events_s": events / wall if s.stream else None,
        "proxy_cpu_ms": pcpu * 1000 if pcpu is not None else None,
        "proxy_cpu_ms_per_req": (pcpu * 1000 / n_ok) if (pcpu is not None and n_ok) else None,
        "proxy_events_per_cpu_s": (events / pcpu) if (pcpu and s.stream) else None,
        "proxy_core_pct": (100 * pcpu / wall) if pcpu is not None else None,
        "proxy_rss_mb": rss / PAGE_KB if rss is not None else None,
        "proxy_hwm_mb": hwm / PAGE_KB if (hwm is not None and hwm_reset) else None,
        "loadgen_core_pct": 100 * (res.cpu + fcpu) / wall,
        # CPU used by processes that are not ours (other work on a shared machine)
        "others_cpu_pct": max(0.0, 100 * others / wall),
        # the hypervisor's time away from this machine's cores (steal), summed over them and on
        # the most stolen one, as % of a core: the host's other guests, no process here
        "steal_pct": 100 * sum(stolen) / wall if stolen else None,
        "steal_core_max_pct": 100 * max(stolen) / wall if stolen else None,
        # connections the fake upstream accepted per request it answered: ~0 when the
        # caller (load generator or proxy) keeps its upstream connections alive
        # (less the /stats connection itself, and the load generator's own when direct)
        "upstream_conns_per_req": (
            (st1["connections"] - st0["connections"] - 1 - (s.concurrency if side == "direct" else 0))
            / max(1, st1["requests"] - st0["requests"])
        )
        if (st0 and st1)
        else None,
        "problems": res.problems[:5],
        "error_samples": res.errors[:3],
    }
    if s.pacing == "pt":  # the paced scenarios: each stream's TTFT, in the order the streams were sent
        row["ttft_ms_in_send_order"] = [
            None if r[2] is None else round(r[2] * 1000, 3) for r in sorted(recs, key=lambda r: r[0])
        ]
    return row


def warmups(scs: list[Scenario]) -> list[Scenario]:
    """One short, unpaced scenario per path (client, upstream, stream) in the run."""
    seen: dict[tuple[str, str, bool], Scenario] = {}
    for s in scs:
        key = (s.client, s.upstream, s.stream)
        if key not in seen:
            seen[key] = Scenario(
                f"warm-{SHORT[s.client]}-{SHORT[s.upstream]}-{int(s.stream)}",
                "warm-up",
                "warm",
                s.client,
                s.upstream,
                s.stream,
                20,
                0,
                4,
                None,
                5,
            )
    return list(seen.values())


async def warm_up(w: Scenario, port: int) -> LoadResult:
    spec = LoadSpec(
        host=HOST,
        port=port,
        path=client_path(w),
        proto=w.client,
        body=request_body(w),
        stream=w.stream,
        concurrency=w.concurrency,
        per_worker=w.per_worker,
        n=w.n,
        same_ids=not w.bridged,
        validate=True,
        timeout=30.0,
    )
    return await run_load(spec)


# -------------------------------------------------------------------------- report
METRICS = (
    "req_s",
    "lat_p50_ms",
    "lat_p99_ms",
    "lat_mean_ms",
    "ttfb_p50_ms",
    "ttfb_p99_ms",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "events_s",
    "proxy_cpu_ms_per_req",
    "proxy_events_per_cpu_s",
    "proxy_core_pct",
    "proxy_rss_mb",
    "proxy_hwm_mb",
    "loadgen_core_pct",
    "others_cpu_pct",
    "steal_pct",
    "steal_core_max_pct",
    "upstream_conns_per_req",
    "requests",
    "errors",
)


def summarize(samples: list[dict]) -> list[dict]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in samples:
        groups.setdefault((r["scenario"], r["side"]), []).append(r)
    out = []
    for (sc, side), rows in groups.items():
        summ: dict = {"type": "summary", "scenario": sc, "side": side, "rounds": len(rows)}
        for m in METRICS:
            vals = [r[m] for r in rows if r.get(m) is not None]
            if not vals:
                summ[m] = None
                continue
            if m in ("errors", "requests"):
                summ[m] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "sum": sum(vals)}
            else:
                summ[m] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
        summ["problems"] = sorted({p for r in rows for p in r.get("problems", [])})[:5]
        out.append(summ)
    return out


def _get(summ: dict | None, m: str, k: str = "median") -> float | None:
    if not summ or not summ.get(m):
        return None
    return summ[m][k]


def targets(summ: dict[tuple[str, str], dict], meta: dict) -> list[dict]:
    """The issue's targets, each from this run's figures (ratios of the same run)."""
    T: list[dict] = []

    def add(name: str, scenario: str, value: float | None, limit: float | None, op: str, unit: str, note: str = ""):
        if value is None or limit is None:
            ok = None
        else:
            ok = value <= limit if op == "<=" else value >= limit
        T.append(
            {
                "type": "target",
                "target": name,
                "scenario": scenario,
                "value": value,
                "limit": limit,
                "op": op,
                "unit": unit,
                "pass": ok,
                "note": note,
            }
        )

    def pair(sc: str) -> tuple[dict | None, dict | None]:
        return summ.get((sc, "direct")), summ.get((sc, "switchboard"))

    def added(sc: str, m: str) -> float | None:
        d, p = pair(sc)
        dv, pv = _get(d, m), _get(p, m)
        return None if dv is None or pv is None else pv - dv

    def ratio(sc: str, m: str) -> float | None:
        d, p = pair(sc)
        dv, pv = _get(d, m), _get(p, m)
        return None if not dv or pv is None else pv / dv

    _, p = pair("ns-chat-c1")
    add("non-streaming, c=1: proxy CPU per request", "ns-chat-c1", _get(p, "proxy_cpu_ms_per_req"), 0.5, "<=", "ms")
    add("non-streaming, c=1: added latency p50", "ns-chat-c1", added("ns-chat-c1", "lat_p50_ms"), 0.5, "<=", "ms")
    add("non-streaming, c=1: added latency p99", "ns-chat-c1", added("ns-chat-c1", "lat_p99_ms"), 1.5, "<=", "ms")
    _, p = pair("ns-chat-c64")
    add("non-streaming, c=64: proxy CPU per request", "ns-chat-c64", _get(p, "proxy_cpu_ms_per_req"), 1.0, "<=", "ms")
    # Gemini's whole answers: ns-chat-c1's targets
    for tag in GEM_TAGS:
        sc = f"ns-{tag}-c1"
        _, p = pair(sc)
        add(f"non-streaming, c=1: proxy CPU per request ({tag})", sc, _get(p, "proxy_cpu_ms_per_req"), 0.5, "<=", "ms")
        add(f"non-streaming, c=1: added latency p50 ({tag})", sc, added(sc, "lat_p50_ms"), 0.5, "<=", "ms")
        add(f"non-streaming, c=1: added latency p99 ({tag})", sc, added(sc, "lat_p99_ms"), 1.5, "<=", "ms")
    for tag in ("chat", "resp", "resp2chat", "chat2resp", "msg", "msg2chat", "resp2msg", "chat2msg", *GEM_TAGS):
        sc = f"st-{tag}-c1"
        add(f"stream, c=1: added TTFB p50 ({tag})", sc, added(sc, "ttfb_p50_ms"), 0.5, "<=", "ms")
        add(f"stream, c=1: added TTFB p99 ({tag})", sc, added(sc, "ttfb_p99_ms"), 1.5, "<=", "ms")
    for tag, lim, what in (
        ("chat", 100000, "same-protocol"),
        ("resp", 100000, "same-protocol"),
        ("resp2chat", 60000, "bridged"),
    ):
        sc = f"ev218-{tag}-c1"
        _, p = pair(sc)
        add(f"218 events, c=1: events/s ({tag}, {what})", sc, _get(p, "events_s"), lim, ">=", "events/s")
        add(f"218 events, c=1: events/s vs direct ({tag})", sc, ratio(sc, "events_s"), None, "", "×")
    _, p = pair("ev218-chatv-c1")
    note = "not the encoder's layout: no passthrough"
    add(
        "218 events, c=1: events/s (chat, vLLM's chunk layout)",
        "ev218-chatv-c1",
        _get(p, "events_s"),
        None,
        "",
        "events/s",
        note,
    )
    add(
        "218 events, c=1: events/s vs direct (chat, vLLM's chunk layout)",
        "ev218-chatv-c1",
        ratio("ev218-chatv-c1", "events_s"),
        None,
        "",
        "×",
    )
    # the reasoning models' and the long tool calls' streams: events/s, and the ratio to direct
    for kind, title, short in (
        ("think", "reasoning model's stream (half reasoning)", "reasoning model's stream (half reasoning)"),
        ("args", "long tool call stream (182 argument deltas)", "long tool call stream"),
    ):
        for what, tag in (("chat", "chatv"), ("resp2chat", "resp2chatv"), ("resp", "resp")):
            name = f"{kind}-{tag}-c1"
            _, p = pair(name)
            layout = "" if what == "resp" else ", vLLM's chunk layout"
            add(f"{title}, c=1: events/s ({what}{layout})", name, _get(p, "events_s"), None, "", "events/s")
            add(f"{short}, c=1: events/s vs direct ({what})", name, ratio(name, "events_s"), None, "", "×")
    for tag, lim, what in (
        ("chat", 50000, "same-protocol"),
        ("resp", 50000, "same-protocol"),
        ("resp2chat", 25000, "bridged"),
        ("chat2resp", 25000, "bridged"),
        ("msg", 50000, "same-protocol"),
        ("msg2chat", 25000, "bridged"),
        ("resp2msg", 25000, "bridged"),
        ("chat2msg", 25000, "bridged"),
        ("gem", 50000, "same-protocol"),
        ("gem2chat", 25000, "bridged"),
        ("chat2gem", 25000, "bridged"),
    ):
        _, p = pair(f"st-{tag}-c8")
        add(
            f"{what}: events/s per proxy core ({tag})",
            f"st-{tag}-c8",
            _get(p, "proxy_events_per_cpu_s"),
            lim,
            ">=",
            "events/s",
            "client events / proxy CPU-second",
        )
    for tag in ("resp", "resp2chat"):
        sc = f"big-{tag}-c1"
        _, p = pair(sc)
        note = "Codex body of 30 turns (~370 KB)"
        add(f"Codex-sized request, c=1: added TTFB p50 ({tag})", sc, added(sc, "ttfb_p50_ms"), None, "", "ms", note)
        add(
            f"Codex-sized request, c=1: proxy CPU per request ({tag})",
            sc,
            _get(p, "proxy_cpu_ms_per_req"),
            None,
            "",
            "ms",
        )
    add(
        "paced 4 streams, 206 steps × 5 ms: total time vs direct",
        "pace-resp2chat",
        ratio("pace-resp2chat", "lat_p50_ms"),
        1.005,
        "<=",
        "×",
    )
    add(
        "paced 4 streams, 206 steps × 5 ms: added TTFT p50",
        "pace-resp2chat",
        added("pace-resp2chat", "ttft_p50_ms"),
        1.0,
        "<=",
        "ms",
    )
    add(
        "one paced stream at a time, 206 steps × 5 ms: added TTFT p50",
        "pace1-resp2chat",
        added("pace1-resp2chat", "ttft_p50_ms"),
        None,
        "",
        "ms",
        "the floor under the 4 streams' figure",
    )
    for tag in ("chat", "resp", "resp2chat", "chat2resp", "msg2chat", "resp2msg", "gem2chat", "chat2gem"):
        add(
            f"realistic (5 ms/chunk): stream time vs direct ({tag})",
            f"rt-{tag}",
            ratio(f"rt-{tag}", "lat_p50_ms"),
            1.01,
            "<=",
            "×",
        )
    add(
        "paced 4 streams (chat), 206 steps × 5 ms: added TTFT p50",
        "pace-chat",
        added("pace-chat", "ttft_p50_ms"),
        None,
        "",
        "ms",
    )
    add(
        "reference forwarder, paced 4 streams (chat): added TTFT p50",
        "ref-pace-chat",
        added("ref-pace-chat", "ttft_p50_ms"),
        None,
        "",
        "ms",
        "uvicorn + httpx alone",
    )
    add(
        "byte relay, paced 4 streams (chat): added TTFT p50",
        "relay-pace-chat",
        added("relay-pace-chat", "ttft_p50_ms"),
        None,
        "",
        "ms",
        "one more process on the path, no HTTP",
    )
    add(
        "byte relay, non-streaming c=1: added latency p50",
        "relay-ns-chat-c1",
        added("relay-ns-chat-c1", "lat_p50_ms"),
        None,
        "",
        "ms",
        "one more process on the path, no HTTP",
    )
    for sc, m in (("ns-chat-c1", "proxy_cpu_ms_per_req"), ("st-chat-c1", "proxy_cpu_ms_per_req")):
        _, sw = pair(sc)
        _, rf = pair(f"ref-{sc}")
        v_sw, v_rf = _get(sw, m), _get(rf, m)
        add(
            f"reference forwarder: proxy CPU per request ({sc})",
            f"ref-{sc}",
            v_rf,
            None,
            "",
            "ms",
            "uvicorn + httpx alone",
        )
        add(
            f"Switchboard ÷ reference forwarder: CPU per request ({sc})",
            f"ref-{sc}",
            None if not v_rf or v_sw is None else v_sw / v_rf,
            None,
            "",
            "×",
        )
    for sc in ("ns-chat-c32", "st-chat-c8"):
        m = "req_s" if sc.startswith("ns") else "events_s"
        _, p1 = summ.get((f"wk1-{sc}", "direct")), summ.get((f"wk1-{sc}", "switchboard"))
        p2 = summ.get((f"wk2-{sc}", "switchboard"))
        v1, v2 = _get(p1, m), _get(p2, m)
        add(
            f"--workers 2 vs 1: {m} ({sc})",
            f"wk-{sc}",
            None if not v1 or v2 is None else v2 / v1,
            None,
            "",
            "×",
            "unpinned; the load generator shares a core",
        )
        # near-linear means each worker's core does as much as the one worker's: the same
        # CPU per request, and throughput in step with the proxy cores the machine could give
        c1, c2 = _get(p1, "proxy_core_pct"), _get(p2, "proxy_core_pct")
        add(
            f"--workers 2 vs 1: proxy cores busy ({sc})",
            f"wk-{sc}",
            None if c1 is None or c2 is None else c2 / 100,
            None,
            "",
            "",
            "with 1 worker: " + ("–" if c1 is None else f"{c1 / 100:.2f}"),
        )
        u1, u2 = _get(p1, "proxy_cpu_ms_per_req"), _get(p2, "proxy_cpu_ms_per_req")
        add(
            f"--workers 2 vs 1: proxy CPU per request ({sc})",
            f"wk-{sc}",
            None if not u1 or u2 is None else u2 / u1,
            None,
            "",
            "×",
            "1.0: a second worker costs nothing per request",
        )
    add("memory: idle RSS", "idle", meta.get("proxy_idle_rss_mb"), 60, "<=", "MB", "after warm-up")
    _, p = pair("mem-512")
    add("memory: 512 slow streams, peak RSS", "mem-512", _get(p, "proxy_hwm_mb", "max"), 120, "<=", "MB")
    add(
        "memory: 512 slow streams, errors",
        "mem-512",
        None if not p else (p["errors"]["sum"] if p.get("errors") else 0),
        0,
        "<=",
        "",
    )
    add("start to ready", "startup", meta.get("start_to_ready_s_median"), 1.5, "<=", "s", "median of starts")
    return T


def _fmt(v: float | None, ratio: bool = False) -> str:
    if v is None:
        return "–"
    if ratio:
        return f"{v:.3f}"
    if isinstance(v, int):
        return f"{int(v):,}"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def _cell(summ: dict | None, m: str, rng: bool = True) -> str:
    if not summ or not summ.get(m):
        return "–"
    s = summ[m]
    if not rng or s["min"] == s["max"]:
        return _fmt(s["median"])
    return f"{_fmt(s['median'])} ({_fmt(s['min'])}–{_fmt(s['max'])})"


def _side_name(s: Scenario, side: str) -> str:
    if side == "direct":
        return side
    return "reference" if s.reference else "relay" if s.relay else side


# what else used the machine's cores during the rounds, as the report names it: (metric, its
# line's start, the median that makes a run perturbed, % of a core, what to do then)
_SHARERS = (
    (
        "others_cpu_pct",
        "Other processes on this machine used %s%% of a core (",
        10,
        "figures are perturbed; rerun on a quiet machine.",
    ),
    (
        "steal_core_max_pct",
        "The hypervisor took %s%% of this machine's most stolen core (steal; ",
        5,
        "the host is shared and busy: figures are perturbed; rerun later.",
    ),
)


def markdown(scs: list[Scenario], summ: dict[tuple[str, str], dict], T: list[dict], meta: dict) -> str:
    L = []
    L.append(
        f"Switchboard bench — {meta['mode']} mode, {meta['rounds']} rounds, {meta['date']}, "
        f"commit {meta['commit']}, {meta['cpu']} ({meta['cpus']} cores), Python {meta['python']}."
    )
    L.append("")
    L.append(
        f"Proxy pinned to core {meta['proxy_core']}, fake upstream + load generator to core "
        f'{meta["loadgen_core"]}. Medians over rounds, (min–max). "direct" = the client\'s protocol '
        "served by the fake upstream itself. Latencies in ms; CPU from /proc (utime+stime); "
        "events = SSE events received by the client; "
        "upstream conns/req = new connections the fake upstream accepted per request (0 = kept alive)."
    )
    L.append("")
    L.append(
        f"Start to ready: {_fmt(meta.get('start_to_ready_s_median'))} s "
        f"(runs: {', '.join(_fmt(x) for x in meta.get('start_to_ready_s', []))}); "
        f"RSS at ready {_fmt(meta.get('proxy_ready_rss_mb'))} MB, idle after warm-up "
        f"{_fmt(meta.get('proxy_idle_rss_mb'))} MB, at the end {_fmt(meta.get('proxy_end_rss_mb'))} MB."
    )
    L.append("")
    head = (
        "| scenario | side | req/s | latency p50 | latency p99 | TTFB p50 | TTFB p99 | TTFT p50 | TTFT p99 "
        "| events/s | proxy CPU ms/req | proxy events/CPU-s | proxy peak RSS MB | upstream conns/req | errors |"
    )
    L.append(head)
    L.append("|" + "---|" * 15)
    for s in scs:
        for side in ("direct", "switchboard"):
            x = summ.get((s.name, side))
            if x is None:
                continue
            err = x["errors"]["sum"] if x.get("errors") else 0
            if x.get("problems"):
                err = f"{err} ⚠ {x['problems'][0][:60]}"
            L.append(
                f"| {s.name if side == 'direct' else ''} | {_side_name(s, side)} "
                f"| {_cell(x, 'req_s')} | {_cell(x, 'lat_p50_ms')} "
                f"| {_cell(x, 'lat_p99_ms', False)} | {_cell(x, 'ttfb_p50_ms')} | {_cell(x, 'ttfb_p99_ms', False)} "
                f"| {_cell(x, 'ttft_p50_ms') if s.stream else '–'} | {_cell(x, 'ttft_p99_ms', False) if s.stream else '–'} "
                f"| {_cell(x, 'events_s') if s.stream else '–'} | {_cell(x, 'proxy_cpu_ms_per_req')} "
                f"| {_cell(x, 'proxy_events_per_cpu_s')} | {_cell(x, 'proxy_hwm_mb')} "
                f"| {_cell(x, 'upstream_conns_per_req', False) if side == 'switchboard' else '–'} | {err} |"
            )
    L.append("")
    L.append("Scenarios: " + "; ".join(f"`{s.name}` {s.title}" for s in scs) + ".")
    L.append("")
    if T:
        L.append("| target | measured | limit | result |")
        L.append("|---|---|---|---|")
        for t in T:
            if t["limit"] is None:
                L.append(f"| {t['target']} | {_fmt(t['value'], t['unit'] == '×')}{t['unit']} | – | reported |")
                continue
            res = "n/a" if t["pass"] is None else ("pass" if t["pass"] else "**MISS**")
            stolen = (summ.get((t["scenario"], "switchboard")) or {}).get("steal_core_max_pct")
            if t["pass"] is False and stolen and stolen["max"] >= 5:
                res += f" (steal up to {_fmt(stolen['max'])}% of a core in its rounds)"
            unit = f" {t['unit']}" if t["unit"] and t["unit"] != "×" else t["unit"]
            r = t["unit"] == "×"
            L.append(
                f"| {t['target']} | {_fmt(t['value'], r)}{unit if t['value'] is not None else ''} "
                f"| {t['op']} {_fmt(t['limit'], r)}{unit} | {res} |"
            )
        L.append("")
    busy = [
        k
        for k, v in summ.items()
        if k[1] == "switchboard" and v.get("loadgen_core_pct") and v["loadgen_core_pct"]["median"] >= 90
    ]
    if busy:
        L.append(
            "Note: the load-generator core was ≥90% busy in "
            + ", ".join(sorted(k[0] for k in busy))
            + " through Switchboard; there the proxy may not be the only limit."
        )
        L.append("")
    for metric, lead, perturbed_from, advice in _SHARERS:
        vals = [v[metric]["median"] for v in summ.values() if v.get(metric)]
        if vals:
            worst = max(vals)
            L.append(
                lead % _fmt(statistics.median(vals))
                + f"median over scenarios; worst {_fmt(worst)}%)"
                + (f" — {advice}" if worst >= perturbed_from else ".")
            )
            L.append("")
    if meta.get("proxy_error"):
        L.append(f"Through Switchboard: not measured ({meta['proxy_error']}).")
        L.append("")
    return "\n".join(L)


# ------------------------------------------------------------------------ profile
def find_py_spy() -> str | None:
    for cand in (os.environ.get("PY_SPY"), shutil.which("py-spy"), str(ROOT / ".venv" / "bin" / "py-spy")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def top_of_profile(collapsed: str, n: int = 25) -> str:
    """Self and inclusive sample shares per function from py-spy's raw (collapsed) output."""
    self_c: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    for line in collapsed.splitlines():
        stack, _, cnt = line.rpartition(" ")
        if not stack or not cnt.isdigit():
            continue
        c = int(cnt)
        total += c
        frames = stack.split(";")
        frames = [f for f in frames if not f.startswith("process ") and not f.startswith("thread ")]
        if not frames:
            continue
        self_c[frames[-1]] = self_c.get(frames[-1], 0) + c
        for f in set(frames):
            incl[f] = incl.get(f, 0) + c
    if not total:
        return "(no samples)"
    out = [f"{total} samples", "", "self %  function"]
    for f, c in sorted(self_c.items(), key=lambda kv: -kv[1])[:n]:
        out.append(f"{100 * c / total:5.1f}  {f}")
    out += ["", "incl %  function"]
    for f, c in sorted(incl.items(), key=lambda kv: -kv[1])[:n]:
        out.append(f"{100 * c / total:5.1f}  {f}")
    return "\n".join(out)


# ---------------------------------------------------------------------------- main
def _git_commit() -> str:
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=5
            ).stdout.strip()
            or "?"
        )
    except (OSError, subprocess.SubprocessError):
        return "?"


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


async def main_async(args: argparse.Namespace) -> int:
    t_all = time.perf_counter()
    quick = args.quick
    rounds = args.rounds or (2 if quick else 5)
    scs = scenarios(quick, args.duration)
    if args.only:
        rx = re.compile(args.only)
        scs = [s for s in scs if rx.search(s.name)]
    ncpu = len(os.sched_getaffinity(0))
    pin = (not args.no_pin) and ncpu >= 2
    cores = sorted(os.sched_getaffinity(0))
    proxy_core = cores[0] if pin else None
    lg_core = cores[1] if pin else None
    if pin:
        os.sched_setaffinity(0, {lg_core})
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="switchboard-bench-"))
    mode = "quick" if quick else "full"
    meta: dict = {
        "type": "meta",
        "mode": mode,
        "rounds": rounds,
        "commit": _git_commit(),
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cpus": ncpu,
        "python": platform.python_version(),
        "proxy_core": proxy_core,
        "loadgen_core": lg_core,
        "workdir": str(workdir),
        "loadgen": "bench.loadgen (asyncio+httptools on uvloop)",
    }
    children: list[Child] = []
    samples: list[dict] = []
    proxy: Child | None = None
    try:
        fake, fport = await start_fake(workdir, lg_core)
        children.append(fake)
        print(f"fake upstream on {HOST}:{fport} (pid {fake.pid})", file=sys.stderr)
        cfg_path = workdir / "switchboard.yaml"
        # JSON is YAML: no quoting questions
        warm = warmups(scs)
        cfg = proxy_config(fport, scs + warm)
        # the default store (SQLite), in the work folder rather than the user's state directory
        cfg["store"] = {"path": str(workdir / "responses.db")}
        cfg_path.write_text(json.dumps(cfg, indent=2))
        pport = None
        if not args.direct_only:
            cmd_base = args.proxy_cmd.split() if args.proxy_cmd else [str(ROOT / ".venv" / "bin" / "switchboard")]
            try:
                starts = []
                for i in range(args.startup_rounds):
                    child, pport, dt = await start_proxy(cmd_base, cfg_path, workdir, proxy_core)
                    children.append(child)
                    starts.append(dt)
                    meta["proxy_ready_rss_mb"] = mem_kb(proc_children(child.pid))[0] / PAGE_KB
                    if i < args.startup_rounds - 1:
                        child.stop()
                        children.remove(child)
                    else:
                        proxy = child
                meta["start_to_ready_s"] = starts
                meta["start_to_ready_s_median"] = statistics.median(starts)
                print(
                    f"switchboard on {HOST}:{pport} (pid {proxy.pid}), ready in "
                    + ", ".join(f"{x:.2f}" for x in starts)
                    + " s",
                    file=sys.stderr,
                )
            except (RuntimeError, OSError) as e:
                meta["proxy_error"] = str(e).splitlines()[0][:300]
                meta["proxy_log_tail"] = str(e)[-2000:]
                print(f"switchboard unavailable, measuring direct only: {e}", file=sys.stderr)
                proxy = None
        sides = [("direct", fport)] + ([("switchboard", pport)] if proxy else [])
        # warm-up: every path once per side, then the idle RSS
        for s in warm:
            for side, port in sides:
                w = await warm_up(s, port)
                if w.problems or w.errors:
                    print(f"warm-up {s.name} {side}: problems {w.problems[:3]} errors {w.errors[:3]}", file=sys.stderr)
        if proxy:
            await asyncio.sleep(0.5)
            meta["proxy_idle_rss_mb"] = mem_kb(proc_children(proxy.pid))[0] / PAGE_KB
        main_proxy, main_sides = proxy, sides
        wk: dict[int, tuple[Child, int]] = {}  # proxies started with --workers N
        ref: tuple[Child, int] | None = None  # bench/reference.py, once a ref-* scenario needs it
        relay: tuple[Child, int] | None = None  # bench/relay.py, once a relay-* scenario needs it
        for s in scs:
            proxy, sides = main_proxy, main_sides
            if s.reference and main_proxy:
                if ref is None:
                    rchild, rport = await start_reference(fport, workdir, proxy_core)
                    children.append(rchild)
                    ref = (rchild, rport)
                    for w in warm:
                        if w.client == w.upstream:
                            await warm_up(w, rport)
                proxy = ref[0]
                sides = [("direct", fport), ("switchboard", ref[1])]
            if s.relay and main_proxy:
                if relay is None:
                    lchild, lport = await start_relay(fport, workdir, proxy_core)
                    children.append(lchild)
                    relay = (lchild, lport)
                    for w in warm:  # its code warm, as the proxies' (its connections are new each time)
                        if w.client == w.upstream:
                            await warm_up(w, lport)
                proxy = relay[0]
                sides = [("direct", fport), ("switchboard", relay[1])]
            if s.workers and main_proxy:
                if s.workers not in wk:
                    for c, _ in wk.values():  # one extra proxy at a time
                        c.stop()
                        children.remove(c)
                    wk.clear()
                    every = ",".join(str(c) for c in cores)  # not the runner's own core only
                    wchild, wport, _ = await start_proxy(cmd_base, cfg_path, workdir, every, workers=s.workers)
                    children.append(wchild)
                    wk[s.workers] = (wchild, wport)
                    await asyncio.sleep(0.3 * s.workers)  # every worker listening
                    for w in warm:
                        for _ in range(2 * s.workers):
                            await warm_up(w, wport)
                proxy = wk[s.workers][0]
                sides = [("direct", fport), ("switchboard", wk[s.workers][1])]
            for r in range(rounds):
                order = sides if r % 2 == 0 else list(reversed(sides))
                for side, port in order:
                    if side == "switchboard" and not proxy.alive():
                        raise RuntimeError(f"switchboard died:\n{proxy.log_tail()}")
                    spy = None
                    if args.profile and side == "switchboard" and r == 0:
                        spy_out = out_dir / f"profile-{s.name}.collapsed"
                        spy = Child(
                            "py-spy",
                            pinned(
                                [
                                    args.profile,
                                    "record",
                                    "--nonblocking",
                                    "-r",
                                    "250",
                                    "-f",
                                    "raw",
                                    "-o",
                                    str(spy_out),
                                    "-p",
                                    str(proxy.pid),
                                ],
                                lg_core,
                            ),
                            workdir / "py-spy.log",
                            stdout=subprocess.DEVNULL,
                        )
                        children.append(spy)
                        await asyncio.sleep(0.5)
                    row = await measure(s, side, port, proxy, fake, r, fport)
                    if spy is not None:
                        try:
                            os.kill(spy.pid, signal.SIGINT)
                            await asyncio.get_running_loop().run_in_executor(None, spy.proc.wait, 20)
                        except (ProcessLookupError, subprocess.TimeoutExpired):
                            pass
                        spy.stop()
                        children.remove(spy)
                        if spy_out.exists():
                            top = top_of_profile(spy_out.read_text())
                            (out_dir / f"profile-{s.name}.txt").write_text(top + "\n")
                            print(f"profile of {s.name}: {out_dir / f'profile-{s.name}.txt'}", file=sys.stderr)
                    samples.append(row)
                    await asyncio.sleep(0.05)
            last = [x for x in samples if x["scenario"] == s.name]
            print(
                f"{s.name:18s} "
                + "  ".join(
                    f"{x['side'][:6]} {_fmt(x['req_s'])} req/s p50 {_fmt(x['lat_p50_ms'])} ms"
                    + (f" {_fmt(x['events_s'])} ev/s" if x["events_s"] else "")
                    + (f" cpu/req {_fmt(x['proxy_cpu_ms_per_req'])}" if x["proxy_cpu_ms_per_req"] else "")
                    + (f" err {x['errors']}" if x["errors"] else "")
                    for x in last[-len(sides) :]
                ),
                file=sys.stderr,
            )
        proxy = main_proxy
        if proxy:
            meta["proxy_end_rss_mb"] = mem_kb(proc_children(proxy.pid))[0] / PAGE_KB
    finally:
        for c in reversed(children):
            c.stop()
        if not args.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    meta["elapsed_s"] = round(time.perf_counter() - t_all, 1)
    summaries = summarize(samples)
    sm = {(x["scenario"], x["side"]): x for x in summaries}
    T = targets(sm, meta) if proxy else []
    md = markdown(scs, sm, T, meta)
    md += f"\nRun time {meta['elapsed_s']} s. Command: `python -m bench.run{' --quick' if quick else ''}`.\n"
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    jsonl = out_dir / f"{stamp}-{mode}.jsonl"
    with open(jsonl, "wb") as f:
        for row in [meta, *samples, *summaries, *T]:
            f.write(orjson.dumps(row) + b"\n")
    shutil.copyfile(jsonl, out_dir / f"latest-{mode}.jsonl")
    (out_dir / f"latest-{mode}.md").write_text(md)
    print(md)
    print(f"JSON lines: {jsonl}", file=sys.stderr)
    problems = [x for x in summaries if x.get("problems")]
    return 1 if (problems or (not args.direct_only and not proxy)) else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.run", description="Switchboard vs direct, same run (loopback only)."
    )
    ap.add_argument("--quick", action="store_true", help="2 rounds × 1 s per scenario (about 4 minutes)")
    ap.add_argument("--rounds", type=int, help="rounds per scenario (default 2 quick, 5 full)")
    ap.add_argument("--duration", type=float, help="seconds per timed measurement (default 1 quick, 2 full)")
    ap.add_argument("--only", help="regex on scenario names, e.g. '^st-|^ns-chat-c1$'")
    ap.add_argument("--direct-only", action="store_true", help="do not start the proxy")
    ap.add_argument("--proxy-cmd", help="proxy executable (default <repo>/.venv/bin/switchboard)")
    ap.add_argument("--startup-rounds", type=int, default=3, help="proxy starts timed (default 3)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"), help="where results go")
    ap.add_argument(
        "--profile",
        nargs="?",
        const="auto",
        metavar="PY_SPY",
        help="py-spy the proxy during round 0 of each scenario (path to py-spy, or found on PATH)",
    )
    ap.add_argument("--keep-workdir", action="store_true", help="keep config and logs (temp dir)")
    args = ap.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        ap.error("--rounds must be ≥ 1")
    if args.startup_rounds < 1:
        ap.error("--startup-rounds must be ≥ 1")
    if args.profile == "auto":
        args.profile = find_py_spy()
        if not args.profile:
            ap.error("--profile: py-spy not found (pip install py-spy, or PY_SPY=/path/to/py-spy)")

    def _term(signum, frame):  # SIGTERM → the finally blocks stop our children
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _term)
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    try:
        return runner(main_async(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
