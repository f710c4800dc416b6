"""The golden cases: every upstream answer the other suites use, in every client direction.

Theory of operation
-------------------
An ``Answer`` is one upstream answer (the raw SSE bytes of its stream and the JSON object of
its non-streamed form) together with the provider and model config it is served under and
the client requests that ask for it.  ``CASES`` expands every answer into one ``Case`` per
client protocol it has a request for and the provider serves it to (a Chat upstream serves
every client; so does a Responses upstream; a provider with ``protocol: [responses, chat]``
serves Chat and Responses clients their own protocol, Messages and Gemini clients Chat).
Every answer has a Chat and a Responses request; ``directions_pair`` and ``hi_pair`` have
the same request in every client protocol.  ``record.py`` turns every case into two
corpus files, streamed (``.stream.txt``) and not (``.json.txt``); a case without a stream
(the source only has a non-streamed object) has the second only.

Where the answers come from (``Answer.source``):

* ``tests/integration``: the ``chat_chunk`` / ``sse_body`` helpers and the event lists of
  ``conftest.py`` (imported), and the streams and objects written inside each test
  (replicated here, with the test's name in ``source``);
* ``tests/fixtures/*.jsonl``: every JSONL event fixture, as SSE (the ones not under version
  control yet are read from their copies in ``tests/golden/fixtures/``);
* ``tests/e2e/scenarios.py``: every scripted-upstream scenario, every turn (and the
  fallback turns that are real answers, e.g. Kimi's reasoning-only turn; the
  ``PREDICATE-MISS`` text turns are left out), framed by ``scripted_upstream.sse`` exactly
  as the scripted upstream writes them.  The builders mint ids with ``uuid4`` and stamp
  ``time.time()``: they run here with a counter and a fixed clock, so the bytes are the
  same on every run;
* this file: cases the other suites lack (tool-call ``arguments`` sent as a JSON object).

The non-streamed upstream object is the source's own object where it has one for the same
answer (``test_directions``), else the aggregate of the stream (``aggregate.py``: Chat
chunks → ``chat.completion``; Responses events → the response object of the terminal
event).  The scripted turns' own ``body`` is not used: it is built by a second call of the
builder (fresh ids) and without the stream quirks (Mantle, late identity), so it is not the
same answer.  A source that only has a non-streamed object gives a case without a stream.

Every server config sets ``keepalive_seconds: 0`` (heartbeats depend on timing).  The
client request gets ``stream`` set per mode; a Chat client's streamed request asks for
usage (``stream_options.include_usage``) unless the case's request says otherwise, and its
non-streamed request carries no ``stream_options``.
"""

from __future__ import annotations

import copy
import json
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson

from tests.golden.aggregate import aggregate_chat, parse_sse, terminal_response
from tests.integration.conftest import (
    USAGE_CHAT,
    chat_chunk,
    chat_stream_two_calls,
    resp_stream_two_calls,
    sse_body,
)
from transformers.protocols import HUB, SPECS

TESTS = Path(__file__).resolve().parent.parent
FIXTURES = TESTS / "fixtures"
E2E = TESTS / "e2e"
if str(E2E) not in sys.path:  # as tests/e2e/conftest.py does: scenarios.py imports scripted_upstream by name
    sys.path.insert(0, str(E2E))

import scenarios as sc  # noqa: E402
import scripted_upstream as su  # noqa: E402

CLIENTS = tuple(SPECS)  # every protocol row; an answer has a request for some of them
MODES = ("stream", "json")


# --------------------------------------------------------------------------- the data types


@dataclass(frozen=True)
class Answer:
    """One upstream answer, the config it is served under, and the requests that ask for it."""

    name: str
    source: str
    provider: dict[str, Any]
    model: dict[str, Any]
    protocol: str  # what the upstream speaks for this answer: chat | responses
    requests: dict[str, dict[str, Any]]  # client protocol → client request body (a Gemini one: its model too)
    stream: bytes | None = None  # SSE body (None: the source has no stream)
    object: Any = None  # non-streamed body: a JSON value, or bytes sent as they are
    status: int = 200  # >= 400: ``object`` is an error answer, served in both modes
    before: tuple[tuple[int, Any], ...] = ()  # answers served first (status, body), in order
    chunk: int = 0  # > 0: the upstream body arrives in writes of this many bytes
    cut: bool = False  # the connection fails (httpx.ReadError) after the body's bytes
    unreachable: bool = False  # the connection fails before any answer (httpx.ConnectError)
    server: dict[str, Any] = field(default_factory=dict)  # extra server config


@dataclass(frozen=True)
class Case:
    """One answer for one client protocol."""

    answer: Answer
    client: str

    @property
    def upstream(self) -> str:
        return self.answer.protocol

    @property
    def name(self) -> str:
        return f"{self.answer.name}__{self.client}-to-{self.upstream}"

    @property
    def request(self) -> dict[str, Any]:
        return self.answer.requests[self.client]

    @property
    def modes(self) -> tuple[str, ...]:
        a = self.answer
        has_stream = a.stream is not None or a.status >= 400 or a.unreachable or a.provider.get("profile") == "demo"
        return MODES if has_stream else ("json",)

    def client_body(self, mode: str) -> dict[str, Any]:
        body = copy.deepcopy(self.request)
        body["stream"] = mode == "stream"
        if self.client == "chat":
            if mode == "stream":
                body.setdefault("stream_options", {"include_usage": True})
            else:
                body.pop("stream_options", None)
        return body

    def config(self) -> dict[str, Any]:
        return {
            "server": {"keepalive_seconds": 0, **self.answer.server},
            "providers": [self.answer.provider],
            "models": [self.answer.model],
        }


def _served_protocol(provider: dict[str, Any], client: str) -> str:
    """The protocol the app speaks to this provider for this client (as app/prepare.py picks it)."""
    p = provider.get("protocol", "chat")
    if not isinstance(p, list):
        return p
    served = client if client in p else p[0]
    if SPECS[client].via_hub and SPECS[served].native_items and HUB in p:
        return HUB
    return served


def expand(answers: list[Answer]) -> list[Case]:
    out: list[Case] = []
    for a in answers:
        for client in CLIENTS:
            if client not in a.requests:
                continue
            if a.provider.get("profile") != "demo" and _served_protocol(a.provider, client) != a.protocol:
                continue  # this provider serves that client another protocol
            out.append(Case(a, client))
    return out


# --------------------------------------------------------------------------- helpers


def sse_events(events: list[Any], *, event_names: bool = False, done: bool = False) -> bytes:
    return sse_body(events, event_names=event_names, done=done)


def derived_object(stream: bytes, protocol: str) -> Any:
    """The non-streamed form of a streamed answer (see the module docstring)."""
    events = [e for e in parse_sse(stream) if e != "[DONE]"]
    if protocol == "chat":
        return aggregate_chat(events)
    r = terminal_response(events)
    if r is None:
        raise ValueError("a Responses stream without a terminal event has no non-streamed form")
    return r


def answer(
    name: str,
    source: str,
    provider: dict[str, Any],
    model: dict[str, Any],
    requests: dict[str, dict[str, Any]],
    *,
    stream: bytes | None = None,
    obj: Any = None,
    protocol: str | None = None,
    **kw: Any,
) -> Answer:
    proto = protocol or (provider["protocol"] if isinstance(provider.get("protocol"), str) else "chat")
    if obj is None and stream is not None:
        obj = derived_object(stream, proto)
    return Answer(
        name=name,
        source=source,
        provider=provider,
        model=model,
        protocol=proto,
        requests=requests,
        stream=stream,
        object=obj,
        **kw,
    )


# --------------------------------------------------------------------------- client requests


CODEX_TOOLS: list[dict[str, Any]] = json.loads((FIXTURES / "codex_tools_0.169.json").read_text())
CODEX_TOOLS_NS: list[dict[str, Any]] = json.loads(
    (E2E / "fixtures" / "codex_tools_0.169_no_tool_search.json").read_text()
)


def codex_request(model: str, *, tools: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    """What Codex 0.169 sends (tests/integration/test_profiles.py ``codex_request``)."""
    body = {
        "model": model,
        "instructions": "You are Codex.",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<env>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "need ls"}]},
            {"type": "function_call", "call_id": "functions.exec_command:0", "name": "exec_command",
             "arguments": "{\"cmd\":\"ls\"}"},
            {"type": "function_call_output", "call_id": "functions.exec_command:0", "output": "a.txt"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "One file."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and now?"}]},
        ],
        "tools": copy.deepcopy(CODEX_TOOLS if tools is None else tools),
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "high", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "thread-1",
    }  # fmt: skip
    body.update(extra)
    return body


def kimi_request(model: str, **extra: Any) -> dict[str, Any]:
    """What kimi-cli sends (tests/integration/test_profiles.py ``kimi_request``)."""
    body = {
        "model": model,
        "messages": [
            {"role": "system", "content": "You are Kimi."},
            {"role": "user", "content": "read a.py"},
            {"role": "assistant", "content": "", "reasoning_content": "need to read",
             "tool_calls": [{"type": "function", "id": "functions.Read:0",
                             "function": {"name": "Read", "arguments": "{\"path\":\"a.py\"}"}}]},
            {"role": "tool", "tool_call_id": "functions.Read:0", "content": "print(1)"},
        ],
        "tools": [
            {"type": "function", "function": {"name": "Read", "description": "Read a file", "parameters": {
                "type": "object", "properties": {"path": {"type": "string"}, "mode": {"enum": ["text", "bytes"]}},
                "required": ["path"]}}},
            {"type": "builtin_function", "function": {"name": "$web_search"}},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 4096,
        "prompt_cache_key": "session-1",
    }  # fmt: skip
    body.update(extra)
    return body


def _flat(namespace: str, name: str) -> str:
    return f"{namespace}{'' if namespace.endswith('_') else '__'}{name}"


def chat_tools_from_codex(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Codex's tool list as a Chat client would offer it: functions as they are, the freeform
    ``apply_patch`` as a function of one string, namespaced functions flattened, hosted tools
    left out."""
    out: list[dict[str, Any]] = []

    def fn(name: str, t: dict[str, Any]) -> dict[str, Any]:
        f = {
            "name": name,
            "description": t.get("description", ""),
            "parameters": t.get("parameters") or {"type": "object", "properties": {}},
        }
        return {"type": "function", "function": f}

    for t in tools:
        kind = t.get("type")
        if kind == "function":
            out.append(fn(t["name"], t))
        elif kind == "custom":
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": t["name"],
                        "description": t.get("description", ""),
                        "parameters": {
                            "type": "object",
                            "properties": {"input": {"type": "string"}},
                            "required": ["input"],
                            "additionalProperties": False,
                        },
                    },
                }
            )
        elif kind == "namespace":
            for inner in t.get("tools") or []:
                if inner.get("type") == "function":
                    out.append(fn(_flat(t["name"], inner["name"]), inner))
    return out


def codex_chat_request(model: str, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A Chat client with Codex's tools and the same conversation as ``codex_request``."""
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": "You are Codex."},
            {"role": "user", "content": "list files"},
            {"role": "assistant", "content": None, "reasoning_content": "need ls",
             "tool_calls": [{"id": "functions.exec_command:0", "type": "function",
                             "function": {"name": "exec_command", "arguments": "{\"cmd\":\"ls\"}"}}]},
            {"role": "tool", "tool_call_id": "functions.exec_command:0", "content": "a.txt"},
            {"role": "assistant", "content": "One file."},
            {"role": "user", "content": "and now?"},
        ],
        "tools": chat_tools_from_codex(CODEX_TOOLS if tools is None else tools),
        "tool_choice": "auto",
        "stream_options": {"include_usage": True},
    }  # fmt: skip


def codex_pair(model: str, tools: list[dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    return {"chat": codex_chat_request(model, tools), "responses": codex_request(model, tools=tools)}


def kimi_pair(model: str) -> dict[str, dict[str, Any]]:
    """kimi-cli's Chat request, and the same conversation from a Responses client (kosong's
    ``responses`` provider)."""
    resp = {
        "model": model,
        "instructions": "You are Kimi.",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "read a.py"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "need to read"}]},
            {"type": "function_call", "call_id": "functions.Read:0", "name": "Read", "arguments": "{\"path\":\"a.py\"}"},
            {"type": "function_call_output", "call_id": "functions.Read:0", "output": "print(1)"},
        ],
        "tools": [{"type": "function", "name": "Read", "description": "Read a file", "strict": False, "parameters": {
            "type": "object", "properties": {"path": {"type": "string"}, "mode": {"enum": ["text", "bytes"]}},
            "required": ["path"]}}],
        "store": False,
    }  # fmt: skip
    return {"chat": kimi_request(model), "responses": resp}


def profiles_pair(model: str) -> dict[str, dict[str, Any]]:
    """test_profiles.py: Codex for a Responses client, kimi-cli for a Chat client."""
    return {"chat": kimi_request(model), "responses": codex_request(model)}


# tests/integration/test_directions.py
CHAT_REQ = {
    "model": "chat-model",
    "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "read a.py and ls"}],
    "tools": [
        {
            "type": "function",
            "function": {"name": "Read", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
        },
        {
            "type": "function",
            "function": {"name": "Bash", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
        },
    ],
}
RESP_REQ = {
    "model": "resp-model",
    "instructions": "be brief",
    "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "read a.py and ls"}]}],
    "tools": [
        {
            "type": "function",
            "name": "Read",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
        {
            "type": "function",
            "name": "Bash",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    ],
}


# CHAT_REQ as a Messages client (Claude Code's shape) and a Gemini client (Gemini CLI's) send it
MESSAGES_REQ = {
    "model": "chat-model",
    "max_tokens": 1024,
    "system": "be brief",
    "messages": [{"role": "user", "content": "read a.py and ls"}],
    "tools": [
        {"name": "Read", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
        {"name": "Bash", "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
    ],
}
GEMINI_REQ = {
    "model": "chat-model",
    "systemInstruction": {"parts": [{"text": "be brief"}]},
    "contents": [{"role": "user", "parts": [{"text": "read a.py and ls"}]}],
    "tools": [
        {
            "functionDeclarations": [
                {
                    "name": "Read",
                    "parametersJsonSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
                },
                {"name": "Bash", "parametersJsonSchema": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
            ]
        }
    ],
}


def directions_pair(model: str) -> dict[str, dict[str, Any]]:
    """The same request in every client protocol."""
    return {
        "chat": {**CHAT_REQ, "model": model},
        "responses": {**RESP_REQ, "model": model},
        "messages": {**MESSAGES_REQ, "model": model},
        "gemini": {**GEMINI_REQ, "model": model},
    }


def hi_pair(model: str) -> dict[str, dict[str, Any]]:
    """tests/integration/test_errors.py ``CHAT`` / ``RESP``, and the same in the other protocols."""
    return {
        "chat": {"model": model, "messages": [{"role": "user", "content": "hi"}]},
        "responses": {"model": model, "input": "hi"},
        "messages": {"model": model, "max_tokens": 1024, "messages": [{"role": "user", "content": "hi"}]},
        "gemini": {"model": model, "contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
    }


# --------------------------------------------------------------------------- providers

# tests/integration/conftest.py BASE_CONFIG
CHATUP = {
    "name": "chatup",
    "profile": "openai-compatible",
    "protocol": "chat",
    "base_url": "http://chat.test/v1",
    "api_key": "sk-upstream-secret",
    "timeouts": {"first_byte": 2, "idle": 2},
}
RESPUP = {
    "name": "respup",
    "profile": "openai-compatible",
    "protocol": "responses",
    "base_url": "http://resp.test/v1",
    "api_key": "sk-upstream-secret",
}
M_CHAT = {"name": "chat-model", "provider": "chatup", "upstream_model": "up-chat"}
M_RESP = {"name": "resp-model", "provider": "respup", "upstream_model": "up-resp"}

# tests/integration/test_profiles.py
P_OPENAI = {
    "name": "oai",
    "profile": "openai",
    "protocol": "responses",
    "base_url": "https://api.openai.com/v1",
    "api_key": "sk-oai",
}
P_OPENAI_CHAT = {**P_OPENAI, "protocol": "chat"}
P_AZURE_DEP = {
    "name": "az",
    "profile": "azure",
    "protocol": "chat",
    "base_url": "https://res.openai.azure.com",
    "deployment": "gpt5-prod",
    "api_key": "az-key",
}
P_XAI = {
    "name": "xai",
    "profile": "xai",
    "protocol": ["responses", "chat"],
    "base_url": "https://api.x.ai/v1",
    "api_key": "xai-key",
}
P_MANTLE = {
    "name": "mantle",
    "profile": "bedrock-mantle",
    "protocol": "responses",
    "base_url": "https://bedrock-mantle.us-east-1.api.aws/v1",
    "api_key": "br-key",
}
P_KIMI_VLLM = {"name": "k2", "profile": "kimi", "protocol": "chat", "base_url": "http://10.0.0.5:8000/v1"}
P_KIMI_MOONSHOT = {
    "name": "moonshot",
    "profile": "kimi",
    "protocol": "chat",
    "base_url": "https://api.moonshot.ai/v1",
    "api_key": "ms-key",
}
P_MIMO = {
    "name": "mimo",
    "profile": "mimo",
    "protocol": "chat",
    "base_url": "https://api.xiaomimimo.com/v1",
    "api_key": "mimo-key",
}
P_GW = {
    "name": "gw",
    "profile": "openai-compatible",
    "protocol": "chat",
    "base_url": "https://opencode.example/v1",
    "api_key": "gw",
}
P_DEEPSEEK = {
    "name": "ds",
    "profile": "deepseek",
    "protocol": "chat",
    "base_url": "https://api.deepseek.com/v1",
    "api_key": "ds-key",
}
P_GLM = {
    "name": "glm",
    "profile": "glm",
    "protocol": "chat",
    "base_url": "https://open.bigmodel.cn/api/paas/v4",
    "api_key": "glm-key",
}
P_VLLM = {"name": "vllm", "profile": "openai-compatible", "protocol": "chat", "base_url": "http://127.0.0.1:8000/v1"}
Q_CHAT = {"name": "q", "profile": "openai-compatible", "protocol": "chat", "base_url": "http://q.test/v1"}
Q_RESP = {**Q_CHAT, "protocol": "responses"}


def scripted_provider(profile: str, protocol: str) -> dict[str, Any]:
    """tests/e2e/proxy_harness.py ``provider_entry`` (the upstream is in process here)."""
    return {
        "name": "scripted",
        "profile": profile,
        "protocol": protocol,
        "base_url": "http://scripted.test/v1",
        "api_key": "sk-scripted-upstream",
        "timeouts": {"connect": 5, "first_byte": 30, "idle": 30},
    }


# --------------------------------------------------------------------------- integration answers


def _integration() -> list[Answer]:
    out: list[Answer] = []
    # test_directions.py: the same answer streamed and as the test's own objects
    resp_final = resp_stream_two_calls()[-1]["response"]
    out += [
        answer(
            "directions-chat-two-calls",
            "tests/integration/test_directions.py (chat_stream_two_calls, CHAT_FINAL)",
            CHATUP,
            M_CHAT,
            directions_pair("chat-model"),
            stream=sse_events(chat_stream_two_calls(), done=True),
            obj={
                "id": "chatcmpl-up1",
                "object": "chat.completion",
                "created": 1,
                "model": "up-chat",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "tool_calls",
                        "message": {
                            "role": "assistant",
                            "content": "Hello",
                            "reasoning_content": "think hard",
                            "tool_calls": [
                                {
                                    "id": "functions.Read:0",
                                    "type": "function",
                                    "function": {"name": "Read", "arguments": '{"path":"a.py"}'},
                                },
                                {
                                    "id": "functions.Bash:1",
                                    "type": "function",
                                    "function": {"name": "Bash", "arguments": '{"cmd":"ls"}'},
                                },
                            ],
                        },
                    }
                ],
                "usage": USAGE_CHAT,
            },
        ),
        answer(
            "directions-responses-two-calls",
            "tests/integration/test_directions.py (resp_stream_two_calls, RESP_FINAL)",
            RESPUP,
            M_RESP,
            directions_pair("resp-model"),
            stream=sse_events(resp_stream_two_calls(), event_names=True),
            obj={
                "id": "resp_up1",
                "object": "response",
                "created_at": 1,
                "status": "completed",
                "model": "up-resp",
                "output": resp_final["output"],
                "usage": resp_final["usage"],
            },
        ),
        # the built-in demo provider is the upstream (in process)
        answer(
            "directions-demo-hello",
            "tests/integration/test_directions.py (demo provider)",
            {"name": "demo", "profile": "demo"},
            {"name": "demo", "provider": "demo"},
            hi_pair("demo"),
            protocol="chat",
        ),
        answer(
            "directions-demo-tool",
            "tests/integration/test_directions.py (demo provider, tool call)",
            {"name": "demo", "profile": "demo"},
            {"name": "demo", "provider": "demo"},
            {
                "chat": {
                    "model": "demo",
                    "messages": [{"role": "user", "content": "please run a tool"}],
                    "tools": [
                        {
                            "type": "function",
                            "function": {
                                "name": "exec_command",
                                "parameters": {
                                    "type": "object",
                                    "properties": {"cmd": {"type": "string"}},
                                    "required": ["cmd"],
                                },
                            },
                        }
                    ],
                },
                "responses": {
                    "model": "demo",
                    "input": "please run a tool",
                    "tools": [
                        {
                            "type": "function",
                            "name": "exec_command",
                            "parameters": {
                                "type": "object",
                                "properties": {"cmd": {"type": "string"}},
                                "required": ["cmd"],
                            },
                        }
                    ],
                },
            },
            protocol="chat",
        ),
    ]

    # test_errors.py
    hi_chat = hi_pair("chat-model")
    out.append(
        answer(
            "errors-auth-ok-object",
            "tests/integration/test_errors.py (test_auth_ok_and_hashed_keys)",
            CHATUP,
            M_CHAT,
            hi_chat,
            obj={
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": "x",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            },
        )
    )
    http_errors = [
        (
            "400-invalid-value",
            400,
            {
                "error": {
                    "message": "bad tools",
                    "type": "invalid_request_error",
                    "code": "invalid_value",
                    "param": "tools",
                }
            },
        ),
        ("400-context-length", 400, {"error": {"message": "This model's maximum context length is 8192 tokens"}}),
        (
            "429-rate-limit",
            429,
            {"error": {"message": "Rate limit reached", "type": "rate_limit_error", "code": "rate_limit_exceeded"}},
        ),
        (
            "429-insufficient-quota",
            429,
            {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}},
        ),
        ("401-upstream-auth", 401, {"error": {"message": "Invalid API key"}}),
        ("500-boom", 500, {"error": {"message": "boom"}}),
        ("503-overloaded", 503, b"overloaded"),
    ]
    for label, status, body in http_errors:
        out.append(
            answer(
                f"errors-http-{label}",
                "tests/integration/test_errors.py (test_upstream_http_errors_mapped)",
                CHATUP,
                M_CHAT,
                hi_chat,
                obj=body,
                status=status,
            )
        )
    out.append(
        answer(
            "errors-upstream-unreachable",
            "tests/integration/test_errors.py (test_upstream_unreachable_502)",
            CHATUP,
            M_CHAT,
            hi_chat,
            unreachable=True,
        )
    )
    broken = [chat_chunk({"role": "assistant", "content": "par"}), chat_chunk({"content": "tial"})]
    out.append(
        answer(
            "errors-broken-stream",
            "tests/integration/test_errors.py (broken_stream: ReadError after two chunks)",
            CHATUP,
            M_CHAT,
            hi_chat,
            stream=sse_events(broken),
            cut=True,
        )
    )
    out.append(
        answer(
            "errors-truncated-stream",
            "tests/integration/test_errors.py (test_truncated_stream_never_silent)",
            CHATUP,
            M_CHAT,
            hi_chat,
            stream=sse_events([chat_chunk({"role": "assistant", "content": "cut"})]),
        )
    )
    err_events = [
        {
            "type": "response.created",
            "response": {"id": "resp_x", "object": "response", "status": "in_progress", "output": []},
        },
        {"type": "error", "code": "context_length_exceeded", "message": "too long", "param": None},
        {
            "type": "response.failed",
            "response": {
                "id": "resp_x",
                "object": "response",
                "status": "failed",
                "output": [],
                "error": {"code": "context_length_exceeded", "message": "too long"},
            },
        },
    ]
    out.append(
        answer(
            "errors-midstream-error-event",
            "tests/integration/test_errors.py (test_midstream_upstream_error_event_responses)",
            RESPUP,
            M_RESP,
            hi_pair("resp-model"),
            stream=sse_events(err_events),
        )
    )
    out.append(
        answer(
            "errors-text-then-stop",
            "tests/integration/test_errors.py, test_logging.py, test_security.py ([content x, stop], [DONE])",
            CHATUP,
            M_CHAT,
            hi_chat,
            stream=sse_events([chat_chunk({"content": "x"}), chat_chunk({}, "stop")], done=True),
        )
    )
    out.append(
        answer(
            "security-stop-only",
            "tests/integration/test_security.py ([stop], [DONE])",
            CHATUP,
            M_CHAT,
            hi_chat,
            stream=sse_events([chat_chunk({}, "stop")], done=True),
        )
    )
    out.append(
        answer(
            "security-dropped-tool-types",
            "tests/integration/test_security.py (test_dropped_tool_type_with_newline_is_escaped)",
            CHATUP,
            M_CHAT,
            {
                "responses": {
                    "model": "chat-model",
                    "input": "hi",
                    "tools": [
                        {"type": "web_search\r\nset-cookie: pwned=1"},
                        {"type": "x" * 4000},
                        {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}},
                    ],
                }
            },
            stream=sse_events([chat_chunk({"content": "x"}), chat_chunk({}, "stop")], done=True),
        )
    )

    # test_keepalive.py (the silence is left out: heartbeats depend on timing)
    out.append(
        answer(
            "keepalive-before",
            "tests/integration/test_keepalive.py (silent_then_done, without the silence)",
            CHATUP,
            M_CHAT,
            hi_chat,
            stream=sse_events(
                [
                    chat_chunk({"role": "assistant", "content": "be"}),
                    chat_chunk({"content": "fore"}),
                    chat_chunk({}, "stop"),
                ],
                done=True,
            ),
        )
    )

    # test_encrypted_retry.py
    oai = {
        "name": "oai",
        "profile": "openai",
        "protocol": "responses",
        "base_url": "http://oai.test/v1",
        "api_key": "k",
    }
    oai_model = {"name": "gpt-5", "provider": "oai"}
    final = {
        "id": "resp_ok",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": "gpt-5",
        "output": [
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "fine", "annotations": []}],
            }
        ],
    }
    enc_req = {
        "model": "gpt-5",
        "store": False,
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA-from-another-org"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "again"}]},
        ],
    }
    invalid = {
        "error": {
            "message": "The encrypted content could not be verified.",
            "type": "invalid_request_error",
            "code": "invalid_encrypted_content",
            "param": None,
        }
    }
    enc_pair = {"responses": enc_req, "chat": {"model": "gpt-5", "messages": [{"role": "user", "content": "again"}]}}
    src = "tests/integration/test_encrypted_retry.py"
    out += [
        answer(
            "encrypted-retry-then-ok",
            f"{src} (test_retry_once_without_foreign_blobs)",
            oai,
            oai_model,
            enc_pair,
            obj=final,
            before=((400, invalid),),
        ),
        answer(
            "encrypted-no-retry-generic",
            f"{src} (test_no_retry_for_generic_profile)",
            {**oai, "profile": "openai-compatible"},
            oai_model,
            enc_pair,
            obj=invalid,
            status=400,
        ),
        answer(
            "encrypted-second-rejection",
            f"{src} (test_second_rejection_is_reported)",
            oai,
            oai_model,
            enc_pair,
            obj=invalid,
            status=400,
            before=((400, invalid),),
        ),
    ]
    return out


# tests/integration/test_profiles.py: its chat answer builder and answers
RAW_PATCH = '*** Begin Patch\n*** Add File: a.txt\n+h\u00e9llo "q" \\ \u2713\n*** End Patch'
BAD_ARGS = '{"cmd":"echo a\x01b"}'  # a raw control character: not JSON (T3-9)
MANTLE_STREAM = [
    json.loads(line) for line in (FIXTURES / "responses_mantle_function_call.jsonl").read_text().splitlines() if line
]


def chat_answer(*, reasoning: str | None = "think", text: str | None = "Hello",
                calls: tuple[tuple[str, str, Any], ...] = (("functions.Bash:1", "exec_command", "{\"cmd\":\"ls\"}"),),
                usage: dict[str, Any] | None = None) -> bytes:  # fmt: skip
    chunks = [chat_chunk({"role": "assistant", "content": ""})]
    if reasoning:
        chunks.append(chat_chunk({"reasoning_content": reasoning}))
    if text:
        chunks.append(chat_chunk({"content": text}))
    for i, (cid, name, args) in enumerate(calls):
        chunks.append(
            chat_chunk(
                {
                    "tool_calls": [
                        {"index": i, "id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                    ]
                }
            )
        )
    chunks.append(chat_chunk({}, "tool_calls" if calls else "stop"))
    chunks.append(chat_chunk(None, None, choices=[], usage=usage or USAGE_CHAT))
    return sse_events(chunks, done=True)


def _profiles() -> list[Answer]:
    src = "tests/integration/test_profiles.py"
    ok = chat_answer()
    two = sse_events(resp_stream_two_calls(), event_names=True)
    patch = chat_answer(reasoning=None, text=None, calls=(("call_1", "apply_patch", RAW_PATCH),))
    ds_usage = {
        "prompt_tokens": 20,
        "completion_tokens": 5,
        "total_tokens": 25,
        "prompt_cache_hit_tokens": 9,
        "prompt_cache_miss_tokens": 11,
    }
    rows: list[tuple[str, dict[str, Any], dict[str, Any], bytes, str]] = [
        # name, provider, model, stream, protocol
        ("openai-responses", P_OPENAI, {"name": "gpt-5.5", "provider": "oai"}, two, "responses"),
        ("openai-chat", P_OPENAI_CHAT, {"name": "gpt-5.5", "provider": "oai"}, ok, "chat"),
        (
            "azure-deployment-chat",
            P_AZURE_DEP,
            {"name": "gpt-5.5", "provider": "az", "upstream_model": "gpt5-prod"},
            ok,
            "chat",
        ),
        (
            "azure-deployment-responses",
            {**P_AZURE_DEP, "protocol": "responses"},
            {"name": "gpt-5.5", "provider": "az", "upstream_model": "gpt5-prod"},
            two,
            "responses",
        ),
        ("xai-responses", P_XAI, {"name": "grok-4", "provider": "xai"}, two, "responses"),
        ("xai-chat", P_XAI, {"name": "grok-4", "provider": "xai"}, ok, "chat"),
        (
            "mantle-fixture",
            P_MANTLE,
            {"name": "gpt-oss-120b", "provider": "mantle", "upstream_model": "openai.gpt-oss-120b"},
            sse_events(MANTLE_STREAM, event_names=True),
            "responses",
        ),
        (
            "mantle-two-calls",
            P_MANTLE,
            {"name": "gpt-oss-120b", "provider": "mantle", "upstream_model": "openai.gpt-oss-120b"},
            two,
            "responses",
        ),
        ("kimi-vllm", P_KIMI_VLLM, {"name": "kimi-k2.6", "provider": "k2"}, ok, "chat"),
        ("kimi-moonshot", P_KIMI_MOONSHOT, {"name": "kimi-k2.6", "provider": "moonshot"}, ok, "chat"),
        ("mimo-raw-patch", P_MIMO, {"name": "mimo-v2.6-pro", "provider": "mimo"}, patch, "chat"),
        ("mimo-model-id-behind-generic-gateway", P_GW, {"name": "mimo-v2.6-pro", "provider": "gw"}, patch, "chat"),
        (
            "deepseek-cache-usage",
            P_DEEPSEEK,
            {"name": "deepseek-chat", "provider": "ds"},
            chat_answer(usage=ds_usage),
            "chat",
        ),
        ("glm", P_GLM, {"name": "glm-4.6", "provider": "glm"}, ok, "chat"),
        ("generic-vllm", P_VLLM, {"name": "qwen3-coder", "provider": "vllm"}, ok, "chat"),
        (
            "generic-responses",
            {**P_VLLM, "protocol": "responses", "api_key": "local"},
            {"name": "gpt-oss-20b", "provider": "vllm", "upstream_model": "openai/gpt-oss-20b"},
            two,
            "responses",
        ),
    ]
    out = [
        answer(
            f"profiles-{name}",
            f"{src} (CASES)",
            prov,
            model,
            profiles_pair(model["name"]),
            stream=stream,
            protocol=proto,
        )
        for name, prov, model, stream, proto in rows
    ]

    # test_profile_nonstream: objects only
    chat_object = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "up",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "Hello",
                    "reasoning_content": "think",
                    "tool_calls": [
                        {
                            "id": "functions.Bash:1",
                            "type": "function",
                            "function": {"name": "exec_command", "arguments": '{"cmd":"ls"}'},
                        }
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25, "prompt_cache_hit_tokens": 9},
    }
    mantle_object = {"id": "resp_m", "object": "response", "created_at": 1, "status": "completed", "model": "openai.gpt-oss-120b",
                     "output": [{"item_id": "fc_A", "output_index": 0, "type": "function_call", "call_id": "c1", "name": "f",
                                 "arguments": "{}"}]}  # fmt: skip
    ns = f"{src} (test_profile_nonstream)"
    out += [
        answer(
            "profiles-object-kimi",
            ns,
            P_KIMI_VLLM,
            {"name": "kimi-k2.6", "provider": "k2"},
            profiles_pair("kimi-k2.6"),
            obj=chat_object,
        ),
        answer(
            "profiles-object-deepseek",
            ns,
            {"name": "ds", "profile": "deepseek", "protocol": "chat", "base_url": "https://api.deepseek.com"},
            {"name": "deepseek-chat", "provider": "ds"},
            profiles_pair("deepseek-chat"),
            obj=chat_object,
        ),
        answer(
            "profiles-object-mantle",
            ns,
            {
                "name": "mantle",
                "profile": "bedrock-mantle",
                "protocol": "responses",
                "base_url": "https://bedrock-mantle.us-east-1.api.aws/v1",
            },
            {"name": "gpt-oss-120b", "provider": "mantle"},
            profiles_pair("gpt-oss-120b"),
            obj=mantle_object,
        ),
    ]

    # test_quirk: the quirks that change what the client gets, on and off (provider switch)
    invalid_enc = {
        "error": {
            "message": "The encrypted content could not be verified.",
            "type": "invalid_request_error",
            "code": "invalid_encrypted_content",
            "param": None,
        }
    }
    qsrc = f"{src} (QCASES)"
    quirk_rows: list[tuple[str, dict[str, Any], bytes, dict[str, Any]]] = [
        ("mimo_raw_patch", Q_CHAT, patch, {}),
        (
            "invalid_json_passthrough",
            Q_CHAT,
            chat_answer(reasoning=None, text=None, calls=(("functions.Bash:1", "exec_command", BAD_ARGS),)),
            {},
        ),
        ("inline_think", Q_CHAT, chat_answer(reasoning=None, text="<think>hmm</think>Hello", calls=()), {}),
        ("encrypted_content_retry", Q_RESP, two, {"before": ((400, invalid_enc),)}),
    ]
    for quirk, prov, stream, extra in quirk_rows:
        for on in (True, False):
            p = {**prov, "quirks": {"enable": [quirk]} if on else []}
            out.append(
                answer(
                    f"quirk-{quirk.replace('_', '-')}-{'on' if on else 'off'}",
                    qsrc,
                    p,
                    {"name": "m", "provider": "q"},
                    profiles_pair("m"),
                    stream=stream,
                    **extra,
                )
            )
    return out


# --------------------------------------------------------------------------- JSONL fixtures

# tests/golden/fixtures/ holds copies of the tests/fixtures/*.jsonl event fixtures that are
# not under version control yet, so the corpus never depends on a file a checkout may lack
GOLDEN_FIXTURES = Path(__file__).resolve().parent / "fixtures"

JSONL = {
    # fixture: (protocol, provider, model)
    "responses_text_minimal.jsonl": ("responses", RESPUP, M_RESP),
    "responses_reasoning_function_call.jsonl": ("responses", RESPUP, M_RESP),
    "responses_mantle_function_call.jsonl": (
        "responses",
        P_MANTLE,
        {"name": "gpt-oss-120b", "provider": "mantle", "upstream_model": "openai.gpt-oss-120b"},
    ),
    "responses_hosted_tool_custom_call.jsonl": ("responses", RESPUP, M_RESP),
    "chat_reasoning_tool_calls.jsonl": ("chat", P_KIMI_VLLM, {"name": "kimi-k2.6", "provider": "k2"}),
    "chat_mimo_apply_patch.jsonl": ("chat", P_MIMO, {"name": "mimo-v2.6-pro", "provider": "mimo"}),
}


def _fixtures() -> list[Answer]:
    out = []
    for fname, (proto, prov, model) in JSONL.items():
        path = GOLDEN_FIXTURES / fname if (GOLDEN_FIXTURES / fname).exists() else FIXTURES / fname
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        stream = sse_events(events, event_names=proto == "responses", done=proto == "chat")
        name = "fixture-" + fname.removesuffix(".jsonl").replace("_", "-")
        out.append(
            answer(
                name, f"tests/fixtures/{fname}", prov, model, codex_pair(model["name"]), stream=stream, protocol=proto
            )
        )
    return out


# --------------------------------------------------------------------------- e2e scenarios


class _Counter:
    def __init__(self) -> None:
        self.n = 0

    def uuid4(self) -> uuid.UUID:
        self.n += 1
        return uuid.UUID(hex=f"{self.n:012x}" + "0" * 20)


@contextmanager
def deterministic_builders() -> Iterator[None]:
    """scripted_upstream's builders with counted ids and a fixed clock."""
    old = su.uuid, su.time
    su.uuid = SimpleNamespace(uuid4=_Counter().uuid4)  # type: ignore[assignment]
    su.time = SimpleNamespace(time=lambda: 1_700_000_000.0)  # type: ignore[assignment]
    try:
        yield
    finally:
        su.uuid, su.time = old


def frames_bytes(frames: list[Any], kind: str) -> bytes:
    """A turn's frames as the scripted upstream writes them (``ScriptedUpstream._stream``)."""
    return b"".join(
        su.sse(f, kind) if isinstance(f, dict) else (f.encode() if isinstance(f, str) else bytes(f))
        for f in frames
        if not isinstance(f, su.Delay)
    )


# scenario → (provider profile, upstream protocol, model, client requests); see tests/e2e/test_*_proxy.py
SDK_REQ = {
    "chat": {
        "model": "e2e-sdk",
        "messages": [{"role": "user", "content": 'Read a.py and dir/b "q".py'}],
        "tools": sc.SDK_TOOLS_CHAT,
    },
    "responses": {"model": "e2e-sdk", "input": 'Read a.py and dir/b "q".py', "tools": sc.SDK_TOOLS_RESPONSES},
}


def _scenario_specs() -> list[tuple[str, Callable[[], list[Any]], str, str, str, dict[str, dict[str, Any]]]]:
    # name, script, profile, protocol, model, requests
    return [
        (
            "codex-chat-exec",
            lambda: sc.codex_chat_exec("e2e-chat"),
            "openai-compatible",
            "chat",
            "e2e-chat",
            codex_pair("e2e-chat"),
        ),
        (
            "codex-responses-exec",
            lambda: sc.codex_responses_exec("e2e-resp"),
            "openai-compatible",
            "responses",
            "e2e-resp",
            codex_pair("e2e-resp"),
        ),
        (
            "codex-mimo-patch",
            lambda: sc.codex_mimo_patch("mimo-v2.6-flash"),
            "mimo",
            "chat",
            "mimo-v2.6-flash",
            codex_pair("mimo-v2.6-flash"),
        ),
        (
            "codex-deepseek-raw-patch",
            lambda: sc.codex_mimo_patch("deepseek-v4"),
            "deepseek",
            "chat",
            "deepseek-v4",
            codex_pair("deepseek-v4"),
        ),
        (
            "codex-mimo-big-patch",
            lambda: sc.codex_mimo_patch("mimo-v2.6-flash", big=True, rechunk=5),
            "mimo",
            "chat",
            "mimo-v2.6-flash",
            codex_pair("mimo-v2.6-flash"),
        ),
        (
            "codex-chat-json-patch",
            lambda: sc.codex_chat_json_patch("e2e-chat"),
            "openai-compatible",
            "chat",
            "e2e-chat",
            codex_pair("e2e-chat"),
        ),
        (
            "codex-responses-patch",
            lambda: sc.codex_responses_patch("e2e-resp"),
            "openai-compatible",
            "responses",
            "e2e-resp",
            codex_pair("e2e-resp"),
        ),
        (
            "codex-kimi-ids",
            lambda: sc.codex_kimi_ids("kimi-k2.6"),
            "kimi",
            "chat",
            "kimi-k2.6",
            codex_pair("kimi-k2.6"),
        ),
        (
            "codex-mantle",
            lambda: sc.codex_mantle("openai.gpt-oss-120b"),
            "bedrock-mantle",
            "responses",
            "openai.gpt-oss-120b",
            codex_pair("openai.gpt-oss-120b"),
        ),
        (
            "codex-late-identity",
            lambda: sc.codex_late_identity("e2e-late"),
            "openai-compatible",
            "responses",
            "e2e-late",
            codex_pair("e2e-late"),
        ),
        (
            "codex-namespace-chat",
            lambda: sc.codex_namespace_call("chat", "e2e-chat"),
            "openai-compatible",
            "chat",
            "e2e-chat",
            codex_pair("e2e-chat", CODEX_TOOLS_NS),
        ),
        (
            "codex-mimo-invalid-json",
            lambda: sc.codex_mimo_invalid_json("chat", "mimo-v2.6-flash"),
            "mimo",
            "chat",
            "mimo-v2.6-flash",
            codex_pair("mimo-v2.6-flash"),
        ),
        (
            "codex-upstream-400",
            lambda: sc.codex_upstream_400("e2e-chat"),
            "openai-compatible",
            "chat",
            "e2e-chat",
            codex_pair("e2e-chat"),
        ),
        (
            "codex-truncated-then-retry",
            lambda: sc.codex_truncated_then_retry("e2e-chat"),
            "openai-compatible",
            "chat",
            "e2e-chat",
            codex_pair("e2e-chat"),
        ),
        ("sdk-chat", lambda: sc.sdk_parallel("chat", model="e2e-sdk"), "openai-compatible", "chat", "e2e-sdk", SDK_REQ),
        (
            "sdk-responses",
            lambda: sc.sdk_parallel("responses", model="e2e-sdk"),
            "openai-compatible",
            "responses",
            "e2e-sdk",
            SDK_REQ,
        ),
        (
            "sdk-responses-mantle",
            lambda: sc.sdk_parallel("responses", model="e2e-sdk", mantle=True),
            "bedrock-mantle",
            "responses",
            "e2e-sdk",
            SDK_REQ,
        ),
        (
            "sdk-responses-late-identity",
            lambda: sc.sdk_parallel("responses", model="e2e-sdk", late_identity=True),
            "openai-compatible",
            "responses",
            "e2e-sdk",
            SDK_REQ,
        ),
        (
            "kosong-kimi-chat",
            lambda: sc.kosong_kimi("chat", model="kimi-k2.6"),
            "kimi",
            "chat",
            "kimi-k2.6",
            kimi_pair("kimi-k2.6"),
        ),
        (
            "kosong-kimi-responses",
            lambda: sc.kosong_kimi("responses", model="kimi-k2.6"),
            "openai-compatible",
            "responses",
            "kimi-k2.6",
            kimi_pair("kimi-k2.6"),
        ),
    ]


# a scripted turn built from the request (codex_namespace_call): the name the proxy offers a
# Chat upstream for multi_agent_v1/close_agent (context.flatten_name's rule, written out)
NAMESPACE_PROBE = {"tools": [{"type": "function", "function": {"name": _flat(sc.NS, sc.NS_TOOL)}}]}


def _turn_answers(turn: Any) -> list[tuple[str, Any]]:
    """(label, turn) for a turn and its fallback, when the fallback is a real answer."""
    out = [("", turn)]
    other = turn.otherwise
    if other is not None and "PREDICATE-MISS" not in (other.label or "") and not _is_miss(other):
        out.append(("-fallback", other))
    return out


def _is_miss(turn: Any) -> bool:
    return any(isinstance(f, dict) and "PREDICATE-MISS" in json.dumps(f) for f in turn.frames or [])


def _scenarios() -> list[Answer]:
    out: list[Answer] = []
    for name, script, profile, proto, model, reqs in _scenario_specs():
        with deterministic_builders():
            turns = script()
            resolved = [t.respond(NAMESPACE_PROBE) if t.respond is not None else t for t in turns]
        prov = scripted_provider(profile, proto)
        m = {"name": model, "provider": "scripted"}
        for i, turn in enumerate(resolved, 1):
            if _is_miss(turn):
                continue  # a scripted "you replayed it wrong" answer, not part of the scenario
            for suffix, t in _turn_answers(turn):
                label = f"scenario-{name}-turn{i}{suffix}"
                src = f"tests/e2e/scenarios.py ({name}, turn {i}{' fallback' if suffix else ''}: {t.label})"
                kind = t.kind or proto
                if t.status >= 400:
                    out.append(answer(label, src, prov, m, reqs, obj=t.body, status=t.status, protocol=kind))
                    continue
                out.append(
                    answer(
                        label, src, prov, m, reqs, stream=frames_bytes(t.frames, kind), protocol=kind, chunk=t.rechunk
                    )
                )
    return out


# --------------------------------------------------------------------------- cases the suites lack


def _extra() -> list[Answer]:
    src = "tests/golden/cases.py (an upstream sending tool-call arguments as a JSON object, not a string)"
    args = {"cmd": "ls", "n": 1}
    chat = sse_events(
        [
            chat_chunk({"role": "assistant", "content": ""}),
            chat_chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_obj1",
                            "type": "function",
                            "function": {"name": "Bash", "arguments": args},
                        }
                    ]
                }
            ),
            chat_chunk({}, "tool_calls"),
            chat_chunk(None, None, choices=[], usage=USAGE_CHAT),
        ],
        done=True,
    )
    item = {
        "id": "fc_obj1",
        "type": "function_call",
        "status": "in_progress",
        "call_id": "call_obj1",
        "name": "Bash",
        "arguments": "",
    }
    done = {**item, "status": "completed", "arguments": args}
    r = {
        "id": "resp_obj1",
        "object": "response",
        "status": "in_progress",
        "model": "up-resp",
        "output": [],
        "created_at": 1,
    }
    usage = {
        "input_tokens": 11,
        "input_tokens_details": {"cached_tokens": 3},
        "output_tokens": 7,
        "output_tokens_details": {"reasoning_tokens": 2},
        "total_tokens": 18,
    }
    seq = [
        {"type": "response.created", "response": r},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.function_call_arguments.done", "item_id": "fc_obj1", "output_index": 0, "arguments": args},
        {"type": "response.output_item.done", "output_index": 0, "item": done},
        {"type": "response.completed", "response": {**r, "status": "completed", "output": [done], "usage": usage}},
    ]
    for i, e in enumerate(seq):
        e["sequence_number"] = i
    return [
        answer("extra-chat-arguments-object", src, CHATUP, M_CHAT, directions_pair("chat-model"), stream=chat),
        answer(
            "extra-responses-arguments-object",
            src,
            RESPUP,
            M_RESP,
            directions_pair("resp-model"),
            stream=sse_events(seq, event_names=True),
        ),
    ]


# --------------------------------------------------------------------------- the list


def _all() -> list[Case]:
    answers = _integration() + _profiles() + _fixtures() + _scenarios() + _extra()
    names = [a.name for a in answers]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise ValueError(f"duplicate answer names: {sorted(dupes)}")
    return expand(answers)


CASES: list[Case] = _all()
CASE_BY_NAME: dict[str, Case] = {c.name: c for c in CASES}


def runs() -> list[tuple[Case, str]]:
    """Every (case, mode) that has a corpus file."""
    return [(c, m) for c in CASES for m in c.modes]


def upstream_body(obj: Any) -> bytes:
    return obj if isinstance(obj, bytes) else orjson.dumps(obj)
