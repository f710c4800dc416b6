"""Provider profiles, table-driven, through the ASGI app with respx upstreams.

Per profile: a config, a client request (Codex-style Responses and/or kimi-style Chat),
and what the upstream must receive (URL with query, auth header, body); then an upstream
answer and what the client must get.  Then one test per quirk, on and off, switched by
config only (provider override, model override, model-glob override), and the upstream
error bodies of each provider mapped to OpenAI errors.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import structlog

from transformers.context import QUIRKS
from transformers.envelope import seal
from transformers.ids import to_anthropic_id

from .conftest import USAGE_CHAT, chat_chunk, parse_sse, resp_stream_two_calls, sse_response

FIXTURES = Path(__file__).parent.parent / "fixtures"
CODEX_TOOLS: list[dict[str, Any]] = json.loads((FIXTURES / "codex_tools_0.169.json").read_text())
MANTLE_STREAM = [
    json.loads(line) for line in (FIXTURES / "responses_mantle_function_call.jsonl").read_text().splitlines() if line
]
ENVELOPE = seal("earlier reasoning from a chat upstream", b"k")
RAW_PATCH = '*** Begin Patch\n*** Add File: a.txt\n+h\u00e9llo "q" \\ \u2713\n*** End Patch'


@pytest.fixture(autouse=True)
def _logging_to_live_stream() -> None:
    # test_logging.py binds structlog to a capsys stream that is closed after it; log to the
    # live stdout again (structlog's default) so these tests do not depend on file order
    structlog.reset_defaults()


# -- client requests -------------------------------------------------------------------------


def codex_request(model: str, **extra: Any) -> dict[str, Any]:
    """What Codex 0.169 sends (docs/rules.md §5.2): instructions, a developer message, reasoning,
    a call and its output, its real tool list, store:false, stream:true, no max_output_tokens."""
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
        "tools": copy.deepcopy(CODEX_TOOLS),
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
    """What kimi-cli (kosong, openai_legacy / kimi) sends (docs/rules.md §6)."""
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


# -- upstream answers ------------------------------------------------------------------------


def chat_answer(*, reasoning: str | None = "think", text: str | None = "Hello",
                calls: tuple[tuple[str, str, str], ...] = (("functions.Bash:1", "exec_command", "{\"cmd\":\"ls\"}"),),
                usage: dict[str, Any] | None = None) -> httpx.Response:  # fmt: skip
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
    return sse_response(chunks, done=True)


def responses_answer() -> httpx.Response:
    return sse_response(resp_stream_two_calls(), event_names=True)


def mantle_answer() -> httpx.Response:
    return sse_response(MANTLE_STREAM, event_names=True)


# -- what the client got ---------------------------------------------------------------------


def codex_view(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    events = parse_sse(r.content)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    terminal = [e for e in events if e["type"] in ("response.completed", "response.failed", "response.incomplete")]
    assert len(terminal) == 1 and events[-1] is terminal[0]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    return {
        "status": terminal[0]["response"]["status"],
        "text": "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta"),
        "reasoning": "".join(e["delta"] for e in events if e["type"] == "response.reasoning_summary_text.delta"),
        "calls": [(i["call_id"], i["name"], i.get("arguments", i.get("input"))) for i in done
                  if i["type"] in ("function_call", "custom_tool_call")],
        "kinds": [i["type"] for i in done],
        "items": done,
        "final": terminal[0]["response"],
    }  # fmt: skip


def kimi_view(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    chunks = parse_sse(r.content)
    assert chunks[-1] == "[DONE]"
    body = [c for c in chunks[:-1] if c.get("choices")]
    calls: dict[int, list[str]] = {}
    for c in body:
        for tc in c["choices"][0]["delta"].get("tool_calls") or []:
            if tc.get("function", {}).get("name"):
                calls[tc["index"]] = [tc["id"], tc["function"]["name"], tc["function"].get("arguments") or ""]
            else:
                calls[tc["index"]][2] += tc["function"].get("arguments") or ""
    return {
        "text": "".join(c["choices"][0]["delta"].get("content") or "" for c in body),
        "reasoning": "".join(c["choices"][0]["delta"].get("reasoning_content") or "" for c in body),
        "calls": [tuple(v) for _, v in sorted(calls.items())],
        "usage": [c["usage"] for c in chunks[:-1] if c.get("usage")],
    }


# -- the table -------------------------------------------------------------------------------


@dataclass
class Case:
    id: str
    provider: dict[str, Any]
    model: dict[str, Any]
    client: str  # "responses" (Codex) | "chat" (kimi-cli)
    request: dict[str, Any]
    url: str
    auth: tuple[str, str] | None  # the one credential header the upstream must get
    body: Callable[[dict[str, Any]], None]
    answer: Callable[[], httpx.Response]
    check: Callable[[httpx.Response], None]
    headers: dict[str, str] = field(default_factory=dict)  # other headers the upstream must get


def msgs(body: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == role]


# upstream bodies --------------------------------------------------------------------------


def b_responses_passthrough(model: str) -> Callable[[dict[str, Any]], None]:
    def check(b: dict[str, Any]) -> None:
        assert b["model"] == model
        sent = codex_request(model)
        assert b["input"] == sent["input"]  # nothing to repair in this history
        assert b["tools"] == CODEX_TOOLS  # the sanitiser leaves Codex's real list alone
        assert b["store"] is False and b["stream"] is True and b["include"] == ["reasoning.encrypted_content"]
        assert b["prompt_cache_key"] == "thread-1"

    return check


def b_codex_chat(model: str, *, max_key: str | None, max_value: int | None = None, replay_key: str = "reasoning_content",
                 thinking: bool = False, parallel: bool = True, prompt_cache: bool = False) -> Callable[[dict[str, Any]], None]:  # fmt: skip
    def check(b: dict[str, Any]) -> None:
        assert b["model"] == model
        roles = [m["role"] for m in b["messages"]]
        assert roles == ["system", "system", "user", "assistant", "tool", "assistant", "user"]
        assert b["messages"][1] == {"role": "system", "content": "<env>"}  # developer → system
        call_msg = b["messages"][3]
        assert call_msg["tool_calls"][0]["id"] == "functions.exec_command:0"  # docs/rules.md §1: verbatim
        assert call_msg[replay_key] == "need ls"
        assert b["messages"][4] == {"role": "tool", "tool_call_id": "functions.exec_command:0", "content": "a.txt"}
        names = [t["function"]["name"] for t in b["tools"]]
        assert "apply_patch" in names and "web_search" not in names
        assert b["tool_choice"] == "auto"
        assert ("parallel_tool_calls" in b) is parallel
        assert b["stream"] is True and b["stream_options"] == {"include_usage": True}
        for k in ("store", "include", "max_output_tokens"):
            assert k not in b
        if max_key is None:
            assert "max_tokens" not in b and "max_completion_tokens" not in b
        else:
            assert b[max_key] == max_value
        if thinking:
            assert b["thinking"] == {"type": "enabled"} and "reasoning_effort" not in b
        else:
            assert b["reasoning_effort"] == "high" and "thinking" not in b
        # Codex's key reaches every upstream that reads it, as Codex sent it
        assert b.get("prompt_cache_key") == ("thread-1" if prompt_cache else None)

    return check


def b_gemini_chat(model: str) -> Callable[[dict[str, Any]], None]:
    """Codex → Gemini's OpenAI-compatible endpoint: nothing it refuses goes, effort on its levels."""

    def check(b: dict[str, Any]) -> None:
        assert b["model"] == model
        roles = [m["role"] for m in b["messages"]]
        assert roles == ["system", "system", "user", "assistant", "tool", "assistant", "user"]
        call_msg = b["messages"][3]
        assert call_msg["tool_calls"][0]["id"] == "functions.exec_command:0"
        # an earlier turn: the escape value (a turn's bytes do not change once it is over);
        # no other model's reasoning keys
        assert call_msg["tool_calls"][0]["extra_content"] == {
            "google": {"thought_signature": "skip_thought_signature_validator"}
        }
        assert not {"reasoning_content", "reasoning", "reasoning_details"} & set(call_msg)
        for k in ("store", "include", "metadata", "prompt_cache_key", "reasoning", "thinking"):
            assert k not in b
        assert b["reasoning_effort"] == "high"  # Gemini 3 Pro: low or high
        for t in b["tools"]:
            assert "additionalProperties" not in orjson.dumps(t["function"]["parameters"]).decode()

    return check


def b_kimi_chat(
    model: str, *, moonshot: bool, max_key: str = "max_completion_tokens"
) -> Callable[[dict[str, Any]], None]:
    def check(b: dict[str, Any]) -> None:
        sent = kimi_request(model)
        assert b["model"] == model
        assert b["messages"][3] == sent["messages"][3]  # ids verbatim, reasoning replayed as sent
        assert b["messages"][2]["tool_calls"] == sent["messages"][2]["tool_calls"]
        assert b["messages"][2]["reasoning_content"] == "need to read"
        assert b[max_key] == 4096 and ("max_tokens" not in b or max_key == "max_tokens")
        kinds = [t["type"] for t in b["tools"]]
        mode = b["tools"][0]["function"]["parameters"]["properties"]["mode"]
        if moonshot:  # Moonshot-only fields and schema dialect only to Moonshot itself
            assert kinds == ["function", "builtin_function"]
            assert mode == {"enum": ["text", "bytes"], "type": "string"}
        else:
            assert kinds == ["function"]
            assert mode == {"enum": ["text", "bytes"]}
        assert b["prompt_cache_key"] == "session-1"

    return check


def b_kimi_to_responses(model: str) -> Callable[[dict[str, Any]], None]:
    def check(b: dict[str, Any]) -> None:
        assert b["model"] == model and b["instructions"] == "You are Kimi."
        assert [i["type"] for i in b["input"]] == ["message", "function_call", "function_call_output"]
        assert b["input"][1]["call_id"] == "functions.Read:0"  # ≤ 64, canonical: kept
        assert b["tools"] == [
            {
                "type": "function",
                "name": "Read",
                "description": "Read a file",
                "strict": False,
                "parameters": kimi_request(model)["tools"][0]["function"]["parameters"],
            }
        ]
        assert b["max_output_tokens"] == 4096 and b["store"] is False
        assert "messages" not in b and "stream_options" not in b

    return check


# client answers ---------------------------------------------------------------------------


def c_codex_from_chat(r: httpx.Response) -> None:
    v = codex_view(r)
    assert v["status"] == "completed" and v["text"] == "Hello" and v["reasoning"] == "think"
    assert v["calls"] == [("functions.Bash:1", "exec_command", '{"cmd":"ls"}')]
    assert v["final"]["usage"]["input_tokens"] == 11 and v["final"]["usage"]["output_tokens"] == 7
    assert r.headers["x-switchboard-dropped-tools"] == "tool_search,web_search"


def c_codex_from_responses(r: httpx.Response) -> None:
    v = codex_view(r)
    assert v["status"] == "completed" and v["text"] == "Hello" and v["reasoning"] == "think hard"
    assert v["calls"] == [("call_0", "Read", '{"path":"a.py"}'), ("call_1", "Bash", '{"cmd":"ls"}')]


def c_codex_from_mantle(r: httpx.Response) -> None:
    v = codex_view(r)
    assert v["status"] == "completed"
    assert v["calls"] == [("c1", "f", "{}")]
    assert v["items"][0]["id"] == "fc_A" and "output_index" not in v["items"][0]  # docs/rules.md §2, T1-1
    assert [i["id"] for i in v["final"]["output"]] == ["fc_A"]


def c_kimi_from_chat(r: httpx.Response) -> None:
    v = kimi_view(r)
    assert v["text"] == "Hello" and v["reasoning"] == "think"
    assert v["calls"] == [("functions.Bash:1", "exec_command", '{"cmd":"ls"}')]


def c_kimi_from_responses(r: httpx.Response) -> None:
    v = kimi_view(r)
    assert v["text"] == "Hello" and v["reasoning"] == "think hard"
    assert v["calls"] == [("call_0", "Read", '{"path":"a.py"}'), ("call_1", "Bash", '{"cmd":"ls"}')]


def c_codex_mimo_patch(r: httpx.Response) -> None:
    v = codex_view(r)
    assert v["status"] == "completed"
    assert v["calls"] == [("call_1", "apply_patch", RAW_PATCH)] and v["kinds"][-1] == "custom_tool_call"


def c_codex_deepseek_cache(r: httpx.Response) -> None:
    v = codex_view(r)
    assert v["status"] == "completed" and v["text"] == "Hello" and v["reasoning"] == "think"
    assert v["final"]["usage"] == {
        "input_tokens": 20,
        "input_tokens_details": {"cached_tokens": 9, "cache_write_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 25,
    }  # prompt_cache_hit_tokens → cached_tokens


def b_mimo(b: dict[str, Any]) -> None:
    b_codex_chat("mimo-v2.6-pro", max_key="max_completion_tokens", max_value=131_072, thinking=True,
                 parallel=False)(b)  # fmt: skip
    patch = next(t["function"] for t in b["tools"] if t["function"]["name"] == "apply_patch")
    assert patch["strict"] is True and patch["parameters"]["additionalProperties"] is False  # R3-c


def b_mantle_codex(b: dict[str, Any]) -> None:
    assert b["model"] == "openai.gpt-oss-120b"
    assistant = [i for i in b["input"] if i.get("role") == "assistant"]
    assert assistant[0]["content"] == "One file."  # T1-6: a plain string
    assert b["tool_choice"] == "auto" and b["tools"] == CODEX_TOOLS


def b_openai_strips_envelope(b: dict[str, Any]) -> None:
    assert b["model"] == "gpt-5.5"
    assert not any(i.get("type") == "reasoning" and str(i.get("encrypted_content", "")).startswith("pxy1.")
                   for i in b["input"])  # fmt: skip
    assert [i.get("encrypted_content") for i in b["input"] if i.get("type") == "reasoning"] == [
        None,
        "gAAAA-openai-blob",
    ]


def b_azure_store(b: dict[str, Any]) -> None:
    assert b["model"] == "gpt5-prod"
    assert all("id" not in i for i in b["input"])  # store:false: no item ids (docs/rules.md F9)


def with_envelope(req: dict[str, Any]) -> dict[str, Any]:
    req["input"].insert(5, {"type": "reasoning", "summary": [], "encrypted_content": ENVELOPE})
    req["input"].insert(6, {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA-openai-blob"})
    return req


def with_item_ids(req: dict[str, Any]) -> dict[str, Any]:
    req["input"][2]["id"] = "rs_abc"
    req["input"][3]["id"] = "fc_abc"
    return req


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
P_KIMI_VLLM = {"name": "k2", "profile": "kimi", "protocol": "chat", "base_url": "http://10.0.0.5:8000/v1"}
P_KIMI_MOONSHOT = {
    "name": "moonshot",
    "profile": "kimi",
    "protocol": "chat",
    "base_url": "https://api.moonshot.ai/v1",
    "api_key": "ms-key",
}
P_VLLM = {"name": "vllm", "profile": "openai-compatible", "protocol": "chat", "base_url": "http://127.0.0.1:8000/v1"}
CHAT_OK = lambda: chat_answer()  # noqa: E731
AZ_URL = "https://res.openai.azure.com/openai"
AZ_Q = "?api-version=2025-04-01-preview"


# -- Messages upstreams (Anthropic and the Anthropic-compatible endpoints) ------------------


def messages_answer(*, tool_id: str = "toolu_01", signature: str = "sig-anthropic") -> httpx.Response:
    """An Anthropic Messages stream: signed thinking, text, one tool_use, cache usage."""
    events = [
        {"type": "message_start", "message": {"id": "msg_up", "type": "message", "role": "assistant",
                                              "model": "up", "content": [], "usage": {
                                                  "input_tokens": 5, "cache_read_input_tokens": 30,
                                                  "cache_creation_input_tokens": 7, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "think"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": signature}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hello"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2,
         "content_block": {"type": "tool_use", "id": tool_id, "name": "exec_command", "input": {}}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"cmd":'}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '"ls"}'}},
        {"type": "content_block_stop", "index": 2},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
         "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]  # fmt: skip
    return sse_response(events, event_names=True)


def claude_code_request(model: str) -> dict[str, Any]:
    """The shape Claude Code sends (tests/fixtures/claude_code_messages_request.json, cut
    down): cache_control on system and a tool, a signed thinking block and one sealed by the
    proxy, an empty text block, a tool loop, context_management."""
    return {
        "model": model,
        "max_tokens": 32000,
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "run ls"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "need ls", "signature": "sig-anthropic-0"},
                {"type": "thinking", "thinking": "from a chat upstream", "signature": ENVELOPE},
                {"type": "text", "text": ""},
                {"type": "tool_use", "id": "toolu_00", "name": "Bash", "input": {"command": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_00", "content": "a.py"}]},
        ],
        "tools": [{"name": "Bash", "description": "Run a command", "cache_control": {"type": "ephemeral"},
                   "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}],
        "thinking": {"type": "enabled", "budget_tokens": 4096},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "stream": True,
    }  # fmt: skip


def b_messages_native(model: str, *, anthropic: bool) -> Callable[[dict[str, Any]], None]:
    def check(b: dict[str, Any]) -> None:
        assert b["model"] == model and b["max_tokens"] == 32000 and b["stream"] is True
        assert b["system"][0]["cache_control"] == {"type": "ephemeral"}  # prompt caching kept
        assert b["tools"][0]["cache_control"] == {"type": "ephemeral"}
        blocks = b["messages"][1]["content"]
        assert {"type": "text", "text": ""} not in blocks  # empty text never sent
        thinking = [x for x in blocks if x["type"] == "thinking"]
        if anthropic:  # only the block Anthropic signed goes to Anthropic
            assert thinking == [{"type": "thinking", "thinking": "need ls", "signature": "sig-anthropic-0"}]
            assert "context_management" in b and b["thinking"]["type"] == "enabled"
        else:  # an Anthropic-compatible endpoint gets its reasoning back, and no beta fields
            assert [x["thinking"] for x in thinking] == ["need ls", "from a chat upstream"]
            assert "context_management" not in b

    return check


def c_claude_code_from_messages(r: httpx.Response) -> None:
    assert r.status_code == 200, r.text
    evs = parse_sse(r.content)
    assert evs[0]["type"] == "message_start" and evs[-1]["type"] == "message_stop"
    starts = [e["content_block"] for e in evs if e["type"] == "content_block_start"]
    assert [b["type"] for b in starts] == ["thinking", "text", "tool_use"]
    sigs = [e["delta"]["signature"] for e in evs if e["type"] == "content_block_delta"
            and e["delta"]["type"] == "signature_delta"]  # fmt: skip
    assert sigs == ["sig-anthropic"]  # Anthropic's own signature, unchanged
    assert starts[2]["id"] == "toolu_01"
    delta = [e for e in evs if e["type"] == "message_delta"][0]
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"]["cache_read_input_tokens"] == 30 and delta["usage"]["cache_creation_input_tokens"] == 7
    assert delta["usage"]["input_tokens"] == 5


def b_codex_messages(model: str, *, anthropic: bool = True) -> Callable[[dict[str, Any]], None]:
    def check(b: dict[str, Any]) -> None:
        assert b["model"] == model and b["stream"] is True and b["max_tokens"] > 0
        assert b["system"][0]["text"] == "You are Codex."
        roles = [m["role"] for m in b["messages"]]
        assert all(x != y for x, y in zip(roles, roles[1:], strict=False))  # turns alternate
        call = next(x for m in b["messages"] for x in m["content"] if x["type"] == "tool_use")
        result = next(x for m in b["messages"] for x in m["content"] if x["type"] == "tool_result")
        # Kimi's native id is no Anthropic id: mapped for Anthropic, the same on the call and its
        # result; an Anthropic-compatible endpoint gets it as it is
        assert call["id"] == result["tool_use_id"]
        assert call["id"] == (to_anthropic_id("functions.exec_command:0") if anthropic else "functions.exec_command:0")
        assert call["input"] == {"cmd": "ls"}
        names = [t["name"] for t in b["tools"]]
        assert "exec_command" in names and all("input_schema" in t for t in b["tools"])

    return check


def c_codex_from_messages(r: httpx.Response) -> None:
    v = codex_view(r)
    assert v["status"] == "completed" and v["text"] == "Hello" and v["reasoning"] == "think"
    assert v["calls"] == [("toolu_01", "exec_command", '{"cmd":"ls"}')]
    rs = next(i for i in v["items"] if i["type"] == "reasoning")
    assert rs["encrypted_content"] == "sig-anthropic"  # comes back on the next turn
    usage = v["final"]["usage"]
    assert usage["input_tokens"] == 42 and usage["input_tokens_details"]["cached_tokens"] == 30


def b_kimi_cli_messages(
    model: str, *, anthropic: bool = True, breakpoints: bool | None = None
) -> Callable[[dict[str, Any]], None]:
    marks = anthropic if breakpoints is None else breakpoints

    def check(b: dict[str, Any]) -> None:
        system = {"type": "text", "text": "You are Kimi."}
        if marks:  # breakpoints where a Chat client can set none: Claude Code's placement
            system["cache_control"] = {"type": "ephemeral"}
            assert b["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
        else:
            assert b"cache_control" not in orjson.dumps(b)
        assert b["model"] == model and b["max_tokens"] == 4096 and b["system"] == [system]
        call = b["messages"][1]["content"][-1]
        assert call["type"] == "tool_use"
        assert call["id"] == (to_anthropic_id("functions.Read:0") if anthropic else "functions.Read:0")
        assert b["messages"][2]["content"][0]["tool_use_id"] == call["id"]
        assert [t["name"] for t in b["tools"]] == ["Read"]

    return check


def c_kimi_from_messages(r: httpx.Response) -> None:
    v = kimi_view(r)
    assert v["text"] == "Hello" and v["reasoning"] == "think"
    assert v["calls"] == [("toolu_01", "exec_command", '{"cmd":"ls"}')]


P_ANTHROPIC = {"name": "ant", "profile": "anthropic", "base_url": "https://api.anthropic.com", "api_key": "sk-ant"}

CASES: list[Case] = [
    # -- openai ---------------------------------------------------------------------------------
    Case("openai-responses-codex", P_OPENAI, {"name": "gpt-5.5", "provider": "oai"}, "responses",
         codex_request("gpt-5.5"), "https://api.openai.com/v1/responses", ("authorization", "Bearer sk-oai"),
         b_responses_passthrough("gpt-5.5"), responses_answer, c_codex_from_responses),
    Case("openai-responses-codex-envelope", P_OPENAI, {"name": "gpt-5.5", "provider": "oai"}, "responses",
         with_envelope(codex_request("gpt-5.5")), "https://api.openai.com/v1/responses",
         ("authorization", "Bearer sk-oai"), b_openai_strips_envelope, responses_answer, c_codex_from_responses),
    Case("openai-responses-kimi-cli", P_OPENAI, {"name": "gpt-5.5", "provider": "oai"}, "chat",
         kimi_request("gpt-5.5"), "https://api.openai.com/v1/responses", ("authorization", "Bearer sk-oai"),
         b_kimi_to_responses("gpt-5.5"), responses_answer, c_kimi_from_responses),
    Case("openai-chat-codex", P_OPENAI_CHAT, {"name": "gpt-5.5", "provider": "oai"}, "responses",
         codex_request("gpt-5.5"), "https://api.openai.com/v1/chat/completions", ("authorization", "Bearer sk-oai"),
         b_codex_chat("gpt-5.5", max_key="max_completion_tokens", max_value=128_000, prompt_cache=True), CHAT_OK, c_codex_from_chat),
    Case("openai-chat-kimi-cli", P_OPENAI_CHAT, {"name": "gpt-5.5", "provider": "oai"}, "chat",
         kimi_request("gpt-5.5"), "https://api.openai.com/v1/chat/completions", ("authorization", "Bearer sk-oai"),
         b_kimi_chat("gpt-5.5", moonshot=False), CHAT_OK, c_kimi_from_chat),
    # -- azure ----------------------------------------------------------------------------------
    Case("azure-deployment-chat-codex", P_AZURE_DEP, {"name": "gpt-5.5", "provider": "az", "upstream_model": "gpt5-prod"},
         "responses", codex_request("gpt-5.5"), f"{AZ_URL}/deployments/gpt5-prod/chat/completions{AZ_Q}",
         ("api-key", "az-key"), b_codex_chat("gpt5-prod", max_key="max_completion_tokens", max_value=128_000,
                                                   prompt_cache=True),
         CHAT_OK, c_codex_from_chat),
    Case("azure-deployment-own-api-version", {**P_AZURE_DEP, "query": {"api-version": "2024-10-21"},
                                              "base_url": "https://res.openai.azure.com/openai/"},
         {"name": "gpt-5.5", "provider": "az", "upstream_model": "gpt5-prod"}, "chat", kimi_request("gpt-5.5"),
         f"{AZ_URL}/deployments/gpt5-prod/chat/completions?api-version=2024-10-21", ("api-key", "az-key"),
         b_kimi_chat("gpt5-prod", moonshot=False), CHAT_OK, c_kimi_from_chat),
    Case("azure-deployment-responses", {**P_AZURE_DEP, "protocol": "responses"},
         {"name": "gpt-5.5", "provider": "az", "upstream_model": "gpt5-prod"}, "responses",
         with_item_ids(codex_request("gpt-5.5")), f"{AZ_URL}/responses{AZ_Q}", ("api-key", "az-key"),
         b_azure_store, responses_answer, c_codex_from_responses),
    Case("azure-v1-route", {"name": "az", "profile": "azure", "protocol": "responses",
                            "base_url": "https://res.openai.azure.com/openai/v1", "api_key": "az-key",
                            "headers": {"X-Tenant": "a"}},
         {"name": "gpt-5.5", "provider": "az", "upstream_model": "gpt5-prod"}, "responses", codex_request("gpt-5.5"),
         f"{AZ_URL}/v1/responses", ("api-key", "az-key"), b_responses_passthrough("gpt5-prod"), responses_answer,
         c_codex_from_responses, headers={"x-tenant": "a"}),
    # -- xai ------------------------------------------------------------------------------------
    Case("xai-responses-codex", {"name": "xai", "profile": "xai", "protocol": ["responses", "chat"],
                                 "base_url": "https://api.x.ai/v1", "api_key": "xai-key"},
         {"name": "grok-4", "provider": "xai"}, "responses", codex_request("grok-4"), "https://api.x.ai/v1/responses",
         ("authorization", "Bearer xai-key"), b_responses_passthrough("grok-4"), responses_answer,
         c_codex_from_responses),
    Case("xai-chat-kimi-cli", {"name": "xai", "profile": "xai", "protocol": ["responses", "chat"],
                               "base_url": "https://api.x.ai/v1", "api_key": "xai-key"},
         {"name": "grok-4", "provider": "xai"}, "chat", kimi_request("grok-4"), "https://api.x.ai/v1/chat/completions",
         ("authorization", "Bearer xai-key"), b_kimi_chat("grok-4", moonshot=False, max_key="max_tokens"), CHAT_OK,
         c_kimi_from_chat),
    # -- bedrock-mantle -------------------------------------------------------------------------
    Case("mantle-codex", {"name": "mantle", "profile": "bedrock-mantle", "protocol": "responses",
                          "base_url": "https://bedrock-mantle.us-east-1.api.aws/v1", "api_key": "br-key"},
         {"name": "gpt-oss-120b", "provider": "mantle", "upstream_model": "openai.gpt-oss-120b"}, "responses",
         codex_request("gpt-oss-120b"), "https://bedrock-mantle.us-east-1.api.aws/v1/responses",
         ("authorization", "Bearer br-key"), b_mantle_codex, mantle_answer, c_codex_from_mantle),
    Case("mantle-kimi-cli", {"name": "mantle", "profile": "bedrock-mantle", "protocol": "responses",
                             "base_url": "https://bedrock-mantle.us-east-1.api.aws/v1", "api_key": "br-key"},
         {"name": "gpt-oss-120b", "provider": "mantle", "upstream_model": "openai.gpt-oss-120b"}, "chat",
         kimi_request("gpt-oss-120b"), "https://bedrock-mantle.us-east-1.api.aws/v1/responses",
         ("authorization", "Bearer br-key"), b_kimi_to_responses("openai.gpt-oss-120b"),
         responses_answer, c_kimi_from_responses),
    # -- kimi -----------------------------------------------------------------------------------
    Case("kimi-vllm-codex", P_KIMI_VLLM, {"name": "kimi-k2.6", "provider": "k2"}, "responses",
         codex_request("kimi-k2.6"), "http://10.0.0.5:8000/v1/chat/completions", None,
         b_codex_chat("kimi-k2.6", max_key="max_completion_tokens", max_value=32_768, prompt_cache=True), CHAT_OK,
         c_codex_from_chat),
    Case("kimi-vllm-kimi-cli", P_KIMI_VLLM, {"name": "kimi-k2.6", "provider": "k2"}, "chat",
         kimi_request("kimi-k2.6"), "http://10.0.0.5:8000/v1/chat/completions", None,
         b_kimi_chat("kimi-k2.6", moonshot=False), CHAT_OK, c_kimi_from_chat),
    Case("kimi-moonshot-kimi-cli", P_KIMI_MOONSHOT, {"name": "kimi-k2.6", "provider": "moonshot"}, "chat",
         kimi_request("kimi-k2.6"), "https://api.moonshot.ai/v1/chat/completions", ("authorization", "Bearer ms-key"),
         b_kimi_chat("kimi-k2.6", moonshot=True), CHAT_OK, c_kimi_from_chat),
    Case("kimi-moonshot-codex", P_KIMI_MOONSHOT, {"name": "kimi-k2.6", "provider": "moonshot"}, "responses",
         codex_request("kimi-k2.6"), "https://api.moonshot.ai/v1/chat/completions", ("authorization", "Bearer ms-key"),
         b_codex_chat("kimi-k2.6", max_key="max_completion_tokens", max_value=32_768, prompt_cache=True), CHAT_OK,
         c_codex_from_chat),
    # -- mimo -----------------------------------------------------------------------------------
    Case("mimo-codex", {"name": "mimo", "profile": "mimo", "protocol": "chat", "base_url": "https://api.xiaomimimo.com/v1",
                        "api_key": "mimo-key"},
         {"name": "mimo-v2.6-pro", "provider": "mimo"}, "responses", codex_request("mimo-v2.6-pro"),
         "https://api.xiaomimimo.com/v1/chat/completions", ("authorization", "Bearer mimo-key"), b_mimo,
         lambda: chat_answer(reasoning=None, text=None, calls=(("call_1", "apply_patch", RAW_PATCH),)),
         c_codex_mimo_patch),
    Case("mimo-model-id-behind-generic-gateway", {"name": "gw", "profile": "openai-compatible", "protocol": "chat",
                                                  "base_url": "https://opencode.example/v1", "api_key": "gw"},
         {"name": "mimo-v2.6-pro", "provider": "gw"}, "responses", codex_request("mimo-v2.6-pro"),
         "https://opencode.example/v1/chat/completions", ("authorization", "Bearer gw"),
         b_codex_chat("mimo-v2.6-pro", max_key="max_completion_tokens", max_value=131_072, parallel=False),
         lambda: chat_answer(reasoning=None, text=None, calls=(("call_1", "apply_patch", RAW_PATCH),)),
         c_codex_mimo_patch),
    # -- deepseek -------------------------------------------------------------------------------
    Case("deepseek-codex", {"name": "ds", "profile": "deepseek", "protocol": "chat",
                            "base_url": "https://api.deepseek.com/v1", "api_key": "ds-key"},
         {"name": "deepseek-chat", "provider": "ds"}, "responses", codex_request("deepseek-chat"),
         "https://api.deepseek.com/v1/chat/completions", ("authorization", "Bearer ds-key"),
         b_codex_chat("deepseek-chat", max_key="max_tokens", max_value=8192),
         lambda: chat_answer(usage={"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25,
                                    "prompt_cache_hit_tokens": 9, "prompt_cache_miss_tokens": 11}),
         c_codex_deepseek_cache),
    # -- glm ------------------------------------------------------------------------------------
    Case("glm-codex", {"name": "glm", "profile": "glm", "protocol": "chat",
                       "base_url": "https://open.bigmodel.cn/api/paas/v4", "api_key": "glm-key"},
         {"name": "glm-4.6", "provider": "glm"}, "responses", codex_request("glm-4.6"),
         "https://open.bigmodel.cn/api/paas/v4/chat/completions", ("authorization", "Bearer glm-key"),
         b_codex_chat("glm-4.6", max_key="max_tokens", max_value=32_768, thinking=True), CHAT_OK, c_codex_from_chat),
    # -- openai-compatible ----------------------------------------------------------------------
    Case("generic-vllm-codex", P_VLLM, {"name": "qwen3-coder", "provider": "vllm"}, "responses",
         codex_request("qwen3-coder"), "http://127.0.0.1:8000/v1/chat/completions", None,
         b_codex_chat("qwen3-coder", max_key=None), CHAT_OK, c_codex_from_chat),
    Case("generic-vllm-kimi-cli", P_VLLM, {"name": "qwen3-coder", "provider": "vllm"}, "chat",
         kimi_request("qwen3-coder"), "http://127.0.0.1:8000/v1/chat/completions", None,
         b_kimi_chat("qwen3-coder", moonshot=False, max_key="max_tokens"), CHAT_OK, c_kimi_from_chat),
    Case("generic-responses-codex", {**P_VLLM, "protocol": "responses", "api_key": "local"},
         {"name": "gpt-oss-20b", "provider": "vllm", "upstream_model": "openai/gpt-oss-20b"}, "responses",
         codex_request("gpt-oss-20b"), "http://127.0.0.1:8000/v1/responses", ("authorization", "Bearer local"),
         b_responses_passthrough("openai/gpt-oss-20b"), responses_answer, c_codex_from_responses),
    # -- anthropic ------------------------------------------------------------------------------
    Case("anthropic-claude-code", P_ANTHROPIC, {"name": "claude", "provider": "ant", "upstream_model": "claude-x"},
         "messages", claude_code_request("claude"), "https://api.anthropic.com/v1/messages", ("x-api-key", "sk-ant"),
         b_messages_native("claude-x", anthropic=True), messages_answer, c_claude_code_from_messages,
         headers={"anthropic-version": "2023-06-01", "anthropic-beta": "interleaved-thinking-2025-05-14"}),
    Case("anthropic-codex", {**P_ANTHROPIC, "base_url": "https://api.anthropic.com/v1"},
         {"name": "claude", "provider": "ant"}, "responses", codex_request("claude"),
         "https://api.anthropic.com/v1/messages", ("x-api-key", "sk-ant"), b_codex_messages("claude"),
         messages_answer, c_codex_from_messages, headers={"anthropic-version": "2023-06-01"}),
    Case("anthropic-kimi-cli", P_ANTHROPIC, {"name": "claude", "provider": "ant"}, "chat", kimi_request("claude"),
         "https://api.anthropic.com/v1/messages", ("x-api-key", "sk-ant"), b_kimi_cli_messages("claude"),
         messages_answer, c_kimi_from_messages),
    # -- the Anthropic-compatible endpoints ----------------------------------------------------
    Case("kimi-anthropic-claude-code", {**P_KIMI_MOONSHOT, "protocol": "messages",
                                        "base_url": "https://api.moonshot.ai/anthropic"},
         {"name": "kimi-k2.6", "provider": "moonshot"}, "messages", claude_code_request("kimi-k2.6"),
         "https://api.moonshot.ai/anthropic/v1/messages", ("x-api-key", "ms-key"),
         b_messages_native("kimi-k2.6", anthropic=False), messages_answer, c_claude_code_from_messages,
         headers={"anthropic-version": "2023-06-01"}),
    Case("minimax-codex", {"name": "mm", "profile": "minimax", "base_url": "https://api.minimax.io/anthropic",
                           "api_key": "mm-key"},
         {"name": "minimax-m2", "provider": "mm", "upstream_model": "MiniMax-M2"}, "responses",
         codex_request("minimax-m2"), "https://api.minimax.io/anthropic/v1/messages", ("x-api-key", "mm-key"),
         b_codex_messages("MiniMax-M2", anthropic=False), messages_answer, c_codex_from_messages),
    Case("qwen-anthropic-kimi-cli", {"name": "qw", "profile": "qwen", "protocol": "messages",
                                     "base_url": "https://dashscope-intl.aliyuncs.com/apps/anthropic",
                                     "api_key": "qw-key"},
         {"name": "qwen3-coder-plus", "provider": "qw"}, "chat", kimi_request("qwen3-coder-plus"),
         "https://dashscope-intl.aliyuncs.com/apps/anthropic/v1/messages", ("x-api-key", "qw-key"),
         b_kimi_cli_messages("qwen3-coder-plus", anthropic=False, breakpoints=True), messages_answer, c_kimi_from_messages),
    Case("gemini-codex", {"name": "gm", "profile": "gemini", "base_url": "https://generativelanguage.googleapis.com/v1beta/openai",
                          "api_key": "gm-key"},
         {"name": "gemini-3-pro-preview", "provider": "gm"}, "responses", codex_request("gemini-3-pro-preview"),
         "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions", ("authorization", "Bearer gm-key"),
         b_gemini_chat("gemini-3-pro-preview"), CHAT_OK, c_codex_from_chat),
    Case("qwen-chat-codex", {"name": "qw", "profile": "qwen", "base_url": "https://dashscope-intl.aliyuncs.com/compatible-mode/v1",
                             "api_key": "qw-key"},
         {"name": "qwen3-coder-plus", "provider": "qw"}, "responses", codex_request("qwen3-coder-plus"),
         "https://dashscope-intl.aliyuncs.com/compatible-mode/v1/chat/completions", ("authorization", "Bearer qw-key"),
         b_codex_chat("qwen3-coder-plus", max_key=None), CHAT_OK, c_codex_from_chat),
]  # fmt: skip


def _config(providers: list[dict[str, Any]], models: list[dict[str, Any]]) -> dict[str, Any]:
    return {"providers": providers, "models": models}


async def _send(client: httpx.AsyncClient, kind: str, req: dict[str, Any], **kw: Any) -> httpx.Response:
    path = {"responses": "/v1/responses", "chat": "/v1/chat/completions", "messages": "/v1/messages"}[kind]
    return await client.post(
        path,
        json=req,
        headers={
            "authorization": "Bearer client-secret",
            "user-agent": "codex_cli_rs/0.169.0",
            "anthropic-beta": "interleaved-thinking-2025-05-14",
            **kw.get("headers", {}),
        },
    )


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_profile(client_factory: Any, mock: Any, case: Case) -> None:
    c = await client_factory(**_config([case.provider], [case.model]))
    host = httpx.URL(case.url).host
    route = mock.route(method="POST", host=host).mock(side_effect=lambda req: case.answer())
    request = copy.deepcopy(case.request)
    r = await _send(c, case.client, request)
    assert route.call_count == 1, r.text
    sent = route.calls.last.request
    assert str(sent.url) == case.url
    # the provider's credential, and never the client's
    creds = {k: v for k, v in sent.headers.items() if k in ("authorization", "api-key", "x-api-key")}
    assert creds == (dict([case.auth]) if case.auth else {})
    assert "client-secret" not in str(sent.headers.raw)
    assert sent.headers["user-agent"] == "codex_cli_rs/0.169.0"  # docs/rules.md F6: honest User-Agent
    for k, v in case.headers.items():
        assert sent.headers[k] == v
    if "anthropic-beta" not in case.headers:  # the client's betas reach Anthropic alone
        assert "anthropic-beta" not in sent.headers
    assert request == case.request  # the client's body is never mutated
    case.body(orjson.loads(sent.content))
    case.check(r)


def test_every_profile_has_a_case() -> None:
    from app.config import PROFILES

    covered = {c.provider["profile"] for c in CASES}
    assert covered == set(PROFILES) - {"demo"}


# -- one test per quirk, on and off, switched by config only ----------------------------------

Q_CHAT = {"name": "q", "profile": "openai-compatible", "protocol": "chat", "base_url": "http://q.test/v1"}
Q_RESP = {**Q_CHAT, "protocol": "responses"}
INVALID_ENC = {
    "error": {
        "message": "The encrypted content could not be verified.",
        "type": "invalid_request_error",
        "code": "invalid_encrypted_content",
        "param": None,
    }
}
BAD_ARGS = '{"cmd":"echo a\x01b"}'  # a raw control character: not JSON (T3-9)
ROOT_ONEOF = {
    "type": "function",
    "function": {
        "name": "automation_update",
        "parameters": {
            "oneOf": [
                {"properties": {"id": {"type": "string"}}, "required": ["id"]},
                {"properties": {"id": {"type": "string"}, "rrule": {"type": "string"}}, "required": ["id", "rrule"]},
            ]
        },
    },
}


def _codex_no_reasoning() -> dict[str, Any]:
    req = codex_request("m")
    del req["input"][2]
    return req


def _kimi_plus(**extra: Any) -> Callable[[], dict[str, Any]]:
    def make() -> dict[str, Any]:
        req = kimi_request("m")
        for k, v in extra.items():
            if k == "tool0":
                req["tools"][0]["function"].update(v)
            elif k == "tools":
                req["tools"] = [*req["tools"], *v]
            elif k == "messages_insert":
                req["messages"][1:1] = v
            elif k == "messages_append":
                req["messages"].extend(v)
            else:
                req[k] = v
        return req

    return make


def _mid_developer() -> dict[str, Any]:
    req = codex_request("m")
    req["input"].append({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "mid"}]})
    return req


@dataclass
class QCase:
    quirk: str
    provider: dict[str, Any]
    client: str
    request: Callable[[], dict[str, Any]]
    answers: Callable[[], list[httpx.Response]]
    check: Callable[[bool, list[dict[str, Any]], httpx.Response], None]


def q_mimo_raw_patch(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    v = codex_view(r)
    if on:  # R3-a
        assert v["status"] == "completed" and v["calls"] == [("call_1", "apply_patch", RAW_PATCH)]
    else:  # T3-5: not wrapped, the original validation fails the turn
        assert v["status"] == "failed" and v["calls"] == []


def q_invalid_json(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    v = codex_view(r)
    if on:  # R3-b: the bytes reach Codex, which answers the model with a parse error
        assert v["status"] == "completed" and v["calls"] == [("functions.Bash:1", "exec_command", BAD_ARGS)]
    else:  # a failed turn with a precise code (the pre-R3-b behaviour)
        assert v["status"] == "failed" and v["calls"] == []
        assert v["final"]["error"]["code"] == "invalid_tool_arguments"


def q_mimo_request(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    b = bodies[0]
    patch = next(t["function"] for t in b["tools"] if t["function"]["name"] == "apply_patch")
    if on:
        assert b["max_completion_tokens"] == 4096 and "max_tokens" not in b and "parallel_tool_calls" not in b
        assert patch["strict"] is True and patch["parameters"]["additionalProperties"] is False
    else:
        assert b["max_tokens"] == 4096 and "max_completion_tokens" not in b and b["parallel_tool_calls"] is False
        assert "strict" not in patch


def q_reasoning_replay(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    call = next(m for m in bodies[0]["messages"] if m.get("tool_calls"))
    assert call.get("reasoning_content") == ("tool call" if on else None)


def q_reasoning_key(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    call = next(m for m in bodies[0]["messages"] if m.get("tool_calls"))
    key, other = ("reasoning", "reasoning_content") if on else ("reasoning_content", "reasoning")
    assert call[key] == "need ls" and other not in call


def q_mantle(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    b = bodies[0]
    assistant = next(i for i in b["input"] if i.get("role") == "assistant")
    if on:  # T1-6
        assert assistant["content"] == "One file." and "tools" not in b and "tool_choice" not in b
    else:
        assert assistant["content"] == [{"type": "output_text", "text": "One file."}] and b["tool_choice"] == "none"


def q_kimi_request(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    b = bodies[0]
    assert b["tool_choice"] == ("auto" if on else "required")
    assert (b.get("max_completion_tokens"), b.get("max_tokens")) == ((4096, None) if on else (None, 4096))


def q_strict_ids(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    call = next(m for m in bodies[0]["messages"] if m.get("tool_calls"))
    want = "functions_exec_command_0" if on else "functions.exec_command:0"  # docs/rules.md §1 strict vs Chat policy
    assert call["tool_calls"][0]["id"] == want
    assert next(m for m in bodies[0]["messages"] if m["role"] == "tool")["tool_call_id"] == want


def _kimi_code_history() -> dict[str, Any]:
    """kimi_request as Kimi Code 2.x sends it: its sanitiser turned the native id into functions_Read_0."""
    req = kimi_request("m")
    req["messages"][2]["tool_calls"][0]["id"] = req["messages"][3]["tool_call_id"] = "functions_Read_0"
    return req


def q_kimi_tool_ids(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    want = "functions.Read:0" if on else "functions_Read_0"
    call = next(m for m in bodies[0]["messages"] if m.get("tool_calls"))
    assert call["tool_calls"][0]["id"] == want
    assert next(m for m in bodies[0]["messages"] if m["role"] == "tool")["tool_call_id"] == want
    assert kimi_view(r)["calls"][0][0] == "functions.Bash:1"  # the answer's ids are not rewritten


def q_max_completion_tokens(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    b = bodies[0]
    assert (b.get("max_completion_tokens"), b.get("max_tokens")) == ((4096, None) if on else (None, 4096))


def q_thinking(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    b = bodies[0]
    if on:
        assert b["thinking"] == {"type": "enabled"} and "reasoning_effort" not in b
    else:
        assert b["reasoning_effort"] == "high" and "thinking" not in b


def q_moonshot_fields(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    kinds = [t["type"] for t in bodies[0]["tools"]]
    assert kinds == (["function", "builtin_function"] if on else ["function"])
    assert (r.headers.get("x-switchboard-dropped-tools") == "$web_search") is not on
    assert bodies[0]["messages"][-1].get("partial") is (True if on else None)  # Moonshot prefill


def q_envelope(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    blobs = [i.get("encrypted_content") for i in bodies[0]["input"] if i.get("type") == "reasoning"]
    if on:  # (an openai-compatible upstream) the blob goes, the item stays; a foreign blob is
        # left to encrypted_content_retry
        assert blobs == [None, None, "gAAAA-openai-blob"] and ENVELOPE not in orjson.dumps(bodies[0]).decode()
    else:  # as the client sent it: for an upstream that opens it (another Switchboard tier)
        assert blobs == [None, ENVELOPE, "gAAAA-openai-blob"]
    assert codex_view(r)["status"] == "completed"


def q_inline_think(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    v = codex_view(r)
    if on:
        assert (v["reasoning"], v["text"]) == ("hmm", "Hello")
    else:
        assert (v["reasoning"], v["text"]) == ("", "<think>hmm</think>Hello")


def q_encrypted_retry(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    if on:
        assert len(bodies) == 2 and codex_view(r)["status"] == "completed"
        assert "gAAAA-openai-blob" not in orjson.dumps(bodies[1]).decode()
    else:
        assert len(bodies) == 1 and r.status_code == 400
        assert r.json()["error"]["code"] == "invalid_encrypted_content"


def q_strict_subset(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    mode = bodies[0]["tools"][0]["function"]["parameters"]["properties"]["mode"]
    assert mode == ({"enum": ["text", "bytes"], "type": "string"} if on else {"enum": ["text", "bytes"]})


def q_root_combinators(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    params = bodies[0]["tools"][-1]["function"]["parameters"]
    if on:
        assert params == {
            "type": "object",
            "properties": {"id": {"type": "string"}, "rrule": {"type": "string"}},
            "required": ["id"],
        }
    else:  # the always-on rule still gives the root its type (Kimi: "parameters.type is required")
        assert params == {**ROOT_ONEOF["function"]["parameters"], "type": "object"}


def q_strict_mode(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    params = bodies[0]["tools"][0]["function"]["parameters"]
    if on:
        assert params["required"] == ["path", "mode"] and params["additionalProperties"] is False
    else:
        assert params["required"] == ["path"] and "additionalProperties" not in params


def q_developer(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    assert bodies[0]["messages"][1] == {"role": "system" if on else "developer", "content": "be careful"}


def q_system_head(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    roles = [m["role"] for m in bodies[0]["messages"]]
    if on:
        assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
        assert bodies[0]["messages"][0]["content"] == "You are Codex.\n\n<env>\n\nmid"
    else:
        assert roles == ["system", "system", "user", "assistant", "tool", "assistant", "user", "system"]


def _compaction_request() -> dict[str, Any]:
    req = codex_request("m")
    req["input"].append({"type": "compaction_trigger"})
    return req


def q_native_compaction(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    sent = bodies[0]
    if on:  # an upstream that compacts itself gets the trigger and the tools as they came
        assert sent["input"][-1] == {"type": "compaction_trigger"} and sent.get("tools")
    else:  # the proxy asks the model for a summary: no trigger, no tools
        assert all(i.get("type") != "compaction_trigger" for i in sent["input"]) and not sent.get("tools")
        items = [e["item"] for e in parse_sse(r.content) if e != "[DONE]" and e["type"] == "response.output_item.done"]
        assert [i["type"] for i in items] == ["compaction"]


def _code_mode_request() -> dict[str, Any]:
    req = codex_request("m")
    tools = [{"type": "namespace", "name": "functions", "tools": [{"type": "custom", "name": "exec"}]}]
    req["input"].insert(0, {"type": "additional_tools", "role": "developer", "tools": tools})
    req["input"].append({"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {}})
    return req


def q_responses_native(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    sent = bodies[0]
    kinds = [i.get("type") for i in sent["input"]]
    if on:  # OpenAI serves responses-lite and its hosted items: everything as it came
        assert kinds[0] == "additional_tools" and kinds[-1] == "web_search_call"
        assert "x-switchboard-dropped-items" not in r.headers
    else:  # the tools hoisted, the hosted call dropped and named
        assert "additional_tools" not in kinds and "web_search_call" not in kinds
        assert any(t.get("name") == "functions" for t in sent["tools"])
        assert r.headers["x-switchboard-dropped-items"].endswith(":web_search_call")


Q_MSG = {**Q_CHAT, "protocol": "messages", "base_url": "http://q.test"}
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}


def q_anthropic_signatures(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    c_claude_code_from_messages(r)
    thinking = [x["thinking"] for x in bodies[0]["messages"][1]["content"] if x["type"] == "thinking"]
    # on: Anthropic refuses a signature it did not issue; off: the endpoint wants its reasoning back
    assert thinking == (["need ls"] if on else ["need ls", "from a chat upstream"])


def _claude_code_web_search() -> dict[str, Any]:
    req = claude_code_request("m")
    req["tools"] = [*req["tools"], WEB_SEARCH]
    return req


def q_messages_server_tools(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    c_claude_code_from_messages(r)
    names = [t["name"] for t in bodies[0]["tools"]]
    if on:
        assert names == ["Bash", "web_search"] and "x-switchboard-dropped-tools" not in r.headers
    else:  # dropped as a named repair, never silently
        assert names == ["Bash"] and r.headers["x-switchboard-dropped-tools"] == "web_search_20250305"


def q_anthropic_beta(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    c_claude_code_from_messages(r)
    assert ("context_management" in bodies[0]) is on


def _claude_code_kimi_ids() -> dict[str, Any]:
    req = claude_code_request("m")
    mapped = to_anthropic_id("functions.Bash:0")  # Kimi's id, as the Messages encoder gave it
    req["messages"][1]["content"][3]["id"] = req["messages"][2]["content"][0]["tool_use_id"] = mapped
    return req


def q_anthropic_tool_ids(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    c_claude_code_from_messages(r)
    sent = bodies[0]["messages"][1]["content"][-1]["id"]
    # on: Anthropic's pattern (the mapped id); off: the id as the upstream issued it
    assert sent == (to_anthropic_id("functions.Bash:0") if on else "functions.Bash:0")
    assert bodies[0]["messages"][2]["content"][0]["tool_use_id"] == sent


def _gemini_current_turn() -> dict[str, Any]:
    """A Chat client's second step of a turn, its call back without the signature (Kimi Code
    keeps no unknown field)."""
    req = kimi_request("m")
    req["messages"] = req["messages"][:2] + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "id": "function-call-1", "function": {"name": "Read", "arguments": "{}"}},
            {"type": "function", "id": "function-call-2", "function": {"name": "Read", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "function-call-1", "content": "a"},
        {"role": "tool", "tool_call_id": "function-call-2", "content": "b"},
    ]  # fmt: skip
    return req


def q_gemini_signatures(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    c_kimi_from_chat(r)
    calls = bodies[0]["messages"][2]["tool_calls"]
    # on: the first call of the step gets Gemini's escape value; off: nothing is invented
    want = {"google": {"thought_signature": "skip_thought_signature_validator"}}
    assert calls[0].get("extra_content") == (want if on else None)
    assert "extra_content" not in calls[1]


def q_gemini_request(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    c_kimi_from_chat(r)
    sent = bodies[0]
    # (store and metadata are OpenAI's own: no other upstream gets them, docs/fields.md)
    assert ("top_k" in sent, "reasoning" in sent, "prompt_cache_key" in sent) == (not on, not on, not on)
    assert sent["reasoning_effort"] == ("low" if on else "minimal")
    assert ("reasoning_content" in sent["messages"][2]) is not on


def q_cache_breakpoints(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    c_codex_from_messages(r)
    b = bodies[0]
    marks = [x for x in b["system"] if "cache_control" in x]
    last = b["messages"][-1]["content"][-1]
    if on:  # Claude Code's placement: the system prompt's end and the newest block
        assert marks == [b["system"][-1]] and last["cache_control"] == {"type": "ephemeral"}
    else:
        assert b"cache_control" not in orjson.dumps(b)


def _claude_code_ttl() -> dict[str, Any]:
    req = claude_code_request("m")
    req["system"][0]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    return req


def q_cache_ttl(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    c_claude_code_from_messages(r)
    want = {"type": "ephemeral", "ttl": "1h"} if on else {"type": "ephemeral"}
    assert bodies[0]["system"][0]["cache_control"] == want


BILLING_LINE = "x-anthropic-billing-header: cc_version=2.1.332.bc4; cc_entrypoint=sdk-cli;"


def _claude_code_billing() -> dict[str, Any]:
    req = claude_code_request("m")
    req["system"].insert(0, {"type": "text", "text": BILLING_LINE})
    return req


def q_billing_header(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    c_claude_code_from_messages(r)
    texts = [x["text"] for x in bodies[0]["system"]]
    assert texts == ([BILLING_LINE, "You are Claude Code."] if on else ["You are Claude Code."])


def _codex_no_cache_key() -> dict[str, Any]:
    req = codex_request("m")
    del req["prompt_cache_key"]
    return req


def q_prompt_cache_key(on: bool, bodies: list[dict[str, Any]], r: httpx.Response) -> None:
    c_codex_from_chat(r)
    key = bodies[0].get("prompt_cache_key")
    assert (key is not None and key.startswith("sbx-")) if on else key is None


def _one(resp: Callable[[], httpx.Response]) -> Callable[[], list[httpx.Response]]:
    return lambda: [resp()]


QCASES: list[QCase] = [
    QCase("mimo_raw_patch", Q_CHAT, "responses", lambda: codex_request("m"),
          _one(lambda: chat_answer(reasoning=None, text=None, calls=(("call_1", "apply_patch", RAW_PATCH),))),
          q_mimo_raw_patch),
    QCase("invalid_json_passthrough", Q_CHAT, "responses", lambda: codex_request("m"),
          _one(lambda: chat_answer(reasoning=None, text=None, calls=(("functions.Bash:1", "exec_command", BAD_ARGS),))),
          q_invalid_json),
    QCase("mimo_request", Q_CHAT, "responses", lambda: codex_request("m", max_output_tokens=4096), _one(CHAT_OK),
          q_mimo_request),
    QCase("reasoning_replay", Q_CHAT, "responses", _codex_no_reasoning, _one(CHAT_OK), q_reasoning_replay),
    QCase("reasoning_key_reasoning", Q_CHAT, "responses", lambda: codex_request("m"), _one(CHAT_OK), q_reasoning_key),
    QCase("mantle_request", Q_RESP, "responses", lambda: codex_request("m", tool_choice="none"),
          _one(responses_answer), q_mantle),
    QCase("kimi_request", Q_CHAT, "responses", lambda: codex_request("m", tool_choice="required", max_output_tokens=4096),
          _one(CHAT_OK), q_kimi_request),
    QCase("strict_tool_ids", Q_CHAT, "responses", lambda: codex_request("m"), _one(CHAT_OK), q_strict_ids),
    QCase("kimi_tool_ids", Q_CHAT, "chat", _kimi_code_history, _one(CHAT_OK), q_kimi_tool_ids),
    QCase("max_completion_tokens", Q_CHAT, "chat", lambda: kimi_request("m"), _one(CHAT_OK), q_max_completion_tokens),
    QCase("thinking_param", Q_CHAT, "responses", lambda: codex_request("m"), _one(CHAT_OK), q_thinking),
    QCase("moonshot_fields", Q_CHAT, "chat",
          _kimi_plus(messages_append=[{"role": "assistant", "content": "Sure", "partial": True}]),
          _one(CHAT_OK), q_moonshot_fields),
    QCase("strip_reasoning_envelope", Q_RESP, "responses", lambda: with_envelope(codex_request("m")),
          _one(responses_answer), q_envelope),
    QCase("inline_think", Q_CHAT, "responses", lambda: codex_request("m"),
          _one(lambda: chat_answer(reasoning=None, text="<think>hmm</think>Hello", calls=())), q_inline_think),
    QCase("encrypted_content_retry", Q_RESP, "responses", lambda: with_envelope(codex_request("m")),
          lambda: [httpx.Response(400, json=INVALID_ENC), responses_answer()], q_encrypted_retry),
    QCase("schema_strict_subset", Q_CHAT, "chat", lambda: kimi_request("m"), _one(CHAT_OK), q_strict_subset),
    QCase("schema_no_root_combinators", Q_CHAT, "chat", _kimi_plus(tools=[ROOT_ONEOF]), _one(CHAT_OK),
          q_root_combinators),
    QCase("schema_strict_mode", Q_CHAT, "chat", _kimi_plus(tool0={"strict": True}), _one(CHAT_OK), q_strict_mode),
    QCase("developer_to_system", Q_CHAT, "chat",
          _kimi_plus(messages_insert=[{"role": "developer", "content": "be careful"}]), _one(CHAT_OK), q_developer),
    QCase("system_at_head", Q_CHAT, "responses", _mid_developer, _one(CHAT_OK), q_system_head),
    QCase("native_compaction", Q_RESP, "responses", _compaction_request, _one(responses_answer), q_native_compaction),
    QCase("responses_native", Q_RESP, "responses", _code_mode_request, _one(responses_answer), q_responses_native),
    QCase("anthropic_signatures", Q_MSG, "messages", lambda: claude_code_request("m"), _one(messages_answer),
          q_anthropic_signatures),
    QCase("messages_server_tools", Q_MSG, "messages", _claude_code_web_search, _one(messages_answer),
          q_messages_server_tools),
    QCase("anthropic_tool_ids", Q_MSG, "messages", _claude_code_kimi_ids, _one(messages_answer),
          q_anthropic_tool_ids),
    QCase("anthropic_beta", Q_MSG, "messages", lambda: claude_code_request("m"), _one(messages_answer),
          q_anthropic_beta),
    QCase("gemini_thought_signatures", Q_CHAT, "chat", _gemini_current_turn, _one(CHAT_OK), q_gemini_signatures),
    QCase("gemini_request", Q_CHAT, "chat",
          lambda: kimi_request("m", top_k=5, reasoning={"effort": "low"}, reasoning_effort="minimal"), _one(CHAT_OK),
          q_gemini_request),
    QCase("cache_breakpoints", Q_MSG, "responses", lambda: codex_request("m"), _one(messages_answer),
          q_cache_breakpoints),
    QCase("cache_ttl", Q_MSG, "messages", _claude_code_ttl, _one(messages_answer), q_cache_ttl),
    QCase("billing_header", Q_MSG, "messages", _claude_code_billing, _one(messages_answer), q_billing_header),
    QCase("prompt_cache_key", Q_CHAT, "responses", _codex_no_cache_key, _one(CHAT_OK), q_prompt_cache_key),
]  # fmt: skip

# how the switch is thrown: (provider quirks, model quirks) for on / off
SWITCHES: dict[str, tuple[Callable[[str], Any], Callable[[str], Any], Callable[[str], Any], Callable[[str], Any]]] = {
    # name: provider-on, model-on, provider-off, model-off ("off" disables explicitly: a quirk
    # the profile has on by default, strip_reasoning_envelope, must go off too)
    "provider": (lambda q: {"enable": [q]}, lambda q: {}, lambda q: {"disable": [q]}, lambda q: {}),
    "model": (lambda q: [], lambda q: {"enable": [q]}, lambda q: {"enable": [q]}, lambda q: {"disable": [q]}),
    "model-glob": (lambda q: [{"enable": [q], "models": ["m", "mimo-*"]}], lambda q: {},
                   lambda q: [{"disable": [q], "models": ["m"]}, {"enable": [q], "models": ["mimo-*"]}],
                   lambda q: {}),
}  # fmt: skip


def test_every_quirk_has_a_case() -> None:
    assert {c.quirk for c in QCASES} == QUIRKS


@pytest.mark.parametrize("on", [True, False], ids=["on", "off"])
@pytest.mark.parametrize("how", list(SWITCHES))
@pytest.mark.parametrize("case", QCASES, ids=[c.quirk for c in QCASES])
async def test_quirk(client_factory: Any, mock: Any, case: QCase, how: str, on: bool) -> None:
    p_on, m_on, p_off, m_off = SWITCHES[how]
    pq, mq = (p_on(case.quirk), m_on(case.quirk)) if on else (p_off(case.quirk), m_off(case.quirk))
    c = await client_factory(
        **_config([{**case.provider, "quirks": pq}], [{"name": "m", "provider": "q", "quirks": mq}])
    )
    route = mock.route(method="POST", host="q.test").mock(side_effect=case.answers())
    r = await _send(c, case.client, case.request())
    bodies = [orjson.loads(call.request.content) for call in route.calls]
    case.check(on, bodies, r)


# -- profile defaults and model-id quirks can be switched off; glob model entries -----------


def _kimi_code_responses_history(model: str) -> dict[str, Any]:
    """What Kimi Code's openai_responses provider sends: its sanitiser's call_ids (`|` cut,
    then `[^a-zA-Z0-9_-]` → `_`), two calls of one answer, their outputs."""
    return {
        "model": model,
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "read a.py, run ls"}]},
            {"type": "function_call", "call_id": "functions_Read_0", "name": "Read", "arguments": '{"path":"a.py"}'},
            {"type": "function_call", "call_id": "functions_Bash_1", "name": "Bash", "arguments": '{"cmd":"ls"}'},
            {"type": "function_call_output", "call_id": "functions_Read_0", "output": "print(1)"},
            {"type": "function_call_output", "call_id": "functions_Bash_1", "output": "a.py"},
        ],
        "tools": [
            {"type": "function", "name": n, "parameters": {"type": "object", "properties": {p: {"type": "string"}}}}
            for n, p in (("Read", "path"), ("Bash", "cmd"))
        ],
        "stream": True,
    }


@pytest.mark.parametrize(
    "provider, model",
    [(P_KIMI_VLLM, "kimi-k2.6"), (P_VLLM, "moonshotai/Kimi-K2.6")],
    ids=["kimi-profile", "kimi-k2-model-on-any-provider"],
)
@pytest.mark.parametrize("client", ["chat", "responses"])
async def test_kimi_code_sanitised_ids_reach_the_upstream_native(
    client_factory: Any, mock: Any, provider: dict[str, Any], model: str, client: str
) -> None:
    """Issue 11: Kimi Code 2.x sends functions_Read_0; the upstream gets functions.Read:0 back,
    on the call and on its tool message; the client keeps seeing the ids as they come."""
    c = await client_factory(
        **_config([provider], [{"name": "k", "provider": provider["name"], "upstream_model": model}])
    )
    route = mock.route(method="POST", url=provider["base_url"] + "/chat/completions").mock(return_value=chat_answer())
    if client == "chat":
        req = kimi_request("k")
        req["messages"][2]["tool_calls"][0]["id"] = req["messages"][3]["tool_call_id"] = "functions_Read_0"
        want = ["functions.Read:0", "functions.Read:0"]
    else:
        req = _kimi_code_responses_history("k")
        want = ["functions.Read:0", "functions.Bash:1", "functions.Read:0", "functions.Bash:1"]
    r = await _send(c, client, req, headers={"user-agent": "KimiCode/2.1.0"})
    body = orjson.loads(route.calls.last.request.content)
    ids = [
        tc["id"] if m["role"] == "assistant" else m["tool_call_id"]
        for m in body["messages"]
        if m["role"] in ("assistant", "tool")
        for tc in (m.get("tool_calls") or [m])
    ]
    assert ids == want
    if client == "chat":
        assert kimi_view(r)["calls"] == [("functions.Bash:1", "exec_command", '{"cmd":"ls"}')]
    else:
        assert codex_view(r)["calls"] == [("functions.Bash:1", "exec_command", '{"cmd":"ls"}')]


@pytest.mark.parametrize(
    "client_keys, quirks, sent",
    [
        ({"reasoning": "need to read"}, [], {"reasoning_content": "need to read"}),
        ({"reasoning_details": [{"type": "summary", "summary": "need to read"}], "reasoning_content": "need to read"},
         [], {"reasoning_content": "need to read"}),
        ({"reasoning_content": "need to read"}, ["reasoning_key_reasoning"], {"reasoning": "need to read"}),
    ],
    ids=["reasoning", "kimi-code-reasoning_details", "vllm-reads-reasoning"],
)  # fmt: skip
async def test_reasoning_keys_from_the_client_reach_the_upstream_under_its_key(
    client_factory: Any, mock: Any, client_keys: dict[str, Any], quirks: list[str], sent: dict[str, Any]
) -> None:
    """Issue 11: Kimi Code echoes the key its endpoint used; a kimi upstream gets the key its
    profile reads, and the Chat client is answered with reasoning_content."""
    provider = {**P_KIMI_VLLM, "quirks": {"enable": quirks}}
    c = await client_factory(**_config([provider], [{"name": "k", "provider": "k2", "upstream_model": "kimi-k2.6"}]))
    route = mock.route(method="POST", url=P_KIMI_VLLM["base_url"] + "/chat/completions").mock(
        return_value=chat_answer(reasoning="next step")
    )
    req = kimi_request("k")
    del req["messages"][2]["reasoning_content"]
    req["messages"][2].update(client_keys)
    r = await _send(c, "chat", req)
    call = orjson.loads(route.calls.last.request.content)["messages"][2]
    assert {k: v for k, v in call.items() if k.startswith("reasoning")} == sent
    assert kimi_view(r)["reasoning"] == "next step"
    also = "".join(
        c["choices"][0]["delta"].get("reasoning") or "" for c in parse_sse(r.content)[:-1] if c.get("choices")
    )
    assert also == ("next step" if quirks else "")  # the upstream's own key too, for a client set up for it


APPLY_PATCH_FUNCTION = {  # kosong's / Kimi Code's apply_patch: a function with one string parameter
    "name": "apply_patch",
    "description": "Apply a patch.",
    "parameters": {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]},
}


@pytest.mark.parametrize(
    "client, offered, want_kind, want_args",
    [
        ("responses", {"type": "function", **APPLY_PATCH_FUNCTION}, "function_call", orjson.dumps({"input": RAW_PATCH}).decode()),
        ("chat", {"type": "function", "function": APPLY_PATCH_FUNCTION}, "function", orjson.dumps({"input": RAW_PATCH}).decode()),
        ("responses", {"type": "custom", "name": "apply_patch", "description": "FREEFORM"}, "custom_tool_call", RAW_PATCH),
    ],
    ids=["responses-function", "chat-function", "responses-custom"],
)  # fmt: skip
async def test_R3_a_prime_one_rule_for_both_client_protocols(
    client_factory: Any, mock: Any, client: str, offered: dict[str, Any], want_kind: str, want_args: str
) -> None:
    """MiMo answers with a raw patch: a client that offered apply_patch as a one-string function
    gets {"input": raw} whichever protocol it speaks; only a custom tool gets custom_tool_call."""
    c = await client_factory(**_config([Q_CHAT], [{"name": "mimo-v2.6-flash", "provider": "q"}]))
    mock.route(method="POST", host="q.test").mock(
        return_value=chat_answer(reasoning=None, text=None, calls=(("call_1", "apply_patch", RAW_PATCH),))
    )
    if client == "responses":
        req = {"model": "mimo-v2.6-flash", "input": "patch a.txt", "tools": [offered], "stream": True}
        v = codex_view(await _send(c, client, req))
        assert v["status"] == "completed" and v["kinds"] == [want_kind]
        assert v["calls"] == [("call_1", "apply_patch", want_args)]
    else:
        req = {"model": "mimo-v2.6-flash", "messages": [{"role": "user", "content": "patch a.txt"}],
               "tools": [offered], "stream": True}  # fmt: skip
        assert kimi_view(await _send(c, client, req))["calls"] == [("call_1", "apply_patch", want_args)]


async def test_moonshot_fields_off_by_config_on_moonshot(client_factory: Any, mock: Any) -> None:
    c = await client_factory(
        **_config(
            [{**P_KIMI_MOONSHOT, "quirks": {"disable": ["moonshot_fields"]}}],
            [{"name": "kimi-k2.6", "provider": "moonshot"}],
        )
    )
    route = mock.route(method="POST", host="api.moonshot.ai").mock(return_value=chat_answer())
    r = await _send(c, "chat", kimi_request("kimi-k2.6"))
    body = orjson.loads(route.calls.last.request.content)
    assert [t["type"] for t in body["tools"]] == ["function"]
    assert r.headers["x-switchboard-dropped-tools"] == "$web_search"
    # the other Moonshot-host quirk stays on
    assert body["tools"][0]["function"]["parameters"]["properties"]["mode"]["type"] == "string"


@pytest.mark.parametrize(
    "model_entry, client_model, patched",
    [
        ({"name": "mimo-v2.6-pro", "provider": "gw"}, "mimo-v2.6-pro", True),  # model id switches it on
        (
            {"name": "mimo-v2.6-pro", "provider": "gw", "quirks": {"disable": ["mimo_raw_patch"]}},
            "mimo-v2.6-pro",
            False,
        ),
        ({"name": "mimo-v2.6-*", "provider": "gw"}, "mimo-v2.6-flash", True),  # a glob entry forwards the name
        (
            {"name": "mimo-v2.6-*", "provider": "gw", "quirks": {"disable": ["mimo_raw_patch"]}},
            "mimo-v2.6-flash",
            False,
        ),
        ({"name": "local-*", "provider": "gw", "quirks": {"enable": ["mimo_raw_patch"]}}, "local-patcher", True),
    ],
    ids=["model-id", "model-id-disabled", "glob-entry", "glob-entry-disabled", "glob-entry-enables"],
)
async def test_model_quirks_and_glob_entries(client_factory: Any, mock: Any, model_entry: dict[str, Any],
                                             client_model: str, patched: bool) -> None:  # fmt: skip
    gw = {"name": "gw", "profile": "openai-compatible", "protocol": "chat", "base_url": "https://gw.test/v1"}
    c = await client_factory(**_config([gw], [model_entry]))
    route = mock.route(method="POST", host="gw.test").mock(
        return_value=chat_answer(reasoning=None, text=None, calls=(("call_1", "apply_patch", RAW_PATCH),))
    )
    v = codex_view(await _send(c, "responses", codex_request(client_model)))
    assert orjson.loads(route.calls.last.request.content)["model"] == client_model
    assert (v["calls"] == [("call_1", "apply_patch", RAW_PATCH)]) is patched
    assert v["status"] == ("completed" if patched else "failed")


# -- upstream errors per provider, through the app --------------------------------------------

ERROR_CASES = [
    # id, provider, status, body, headers → client status, code
    ("openai", P_OPENAI, 400, {"error": {"message": "Your input exceeds the context window of this model.",
                                         "type": "invalid_request_error", "code": "context_length_exceeded"}}, {},
     400, "context_length_exceeded"),
    ("azure", {**P_AZURE_DEP, "protocol": "responses"}, 429,
     {"error": {"code": "429", "message": "Requests have exceeded token rate limit."}}, {"retry-after": "6"},
     429, "rate_limit_exceeded"),
    ("xai", {"name": "xai", "profile": "xai", "protocol": "responses", "base_url": "https://api.x.ai/v1"}, 400,
     {"code": "Client specified an invalid argument", "error": "This model's maximum prompt length is 131072"}, {},
     400, "context_length_exceeded"),
    ("bedrock-mantle", {"name": "m", "profile": "bedrock-mantle", "protocol": "responses",
                        "base_url": "https://bedrock-mantle.us-east-1.api.aws/v1"}, 429,
     {"message": "Too many requests"}, {"x-amzn-errortype": "ThrottlingException"}, 429, "rate_limit_exceeded"),
    ("kimi-moonshot", P_KIMI_MOONSHOT, 400, {"error": {"message": "Invalid request: Your request exceeded model token "
                                                       "limit: 262144", "type": "invalid_request_error"}}, {},
     400, "context_length_exceeded"),
    ("kimi-vllm", P_KIMI_VLLM, 400, {"object": "error", "message": "This model's maximum context length is 262144 "
                                     "tokens.", "type": "BadRequestError", "code": 400}, {},
     400, "context_length_exceeded"),
    ("mimo", {"name": "mimo", "profile": "mimo", "protocol": "chat", "base_url": "https://api.xiaomimimo.com/v1"},
     429, {"error": {"message": "rate limit", "type": "rate_limit_error"}}, {}, 429, "rate_limit_exceeded"),
    ("deepseek", {"name": "ds", "profile": "deepseek", "protocol": "chat", "base_url": "https://api.deepseek.com"},
     402, {"error": {"message": "Insufficient Balance", "type": "unknown_error", "code": "invalid_request_error"}},
     {}, 429, "insufficient_quota"),
    ("glm", {"name": "glm", "profile": "glm", "protocol": "chat", "base_url": "https://open.bigmodel.cn/api/paas/v4"},
     400, {"error": {"code": "1261", "message": "Prompt exceeds max length"}}, {}, 400, "context_length_exceeded"),
    ("openai-compatible", P_VLLM, 500, b"Internal Server Error", {}, 502, "server_error"),
]  # fmt: skip


@pytest.mark.parametrize("provider, status, body, headers, want_status, want_code", [e[1:] for e in ERROR_CASES],
                         ids=[e[0] for e in ERROR_CASES])  # fmt: skip
async def test_provider_errors_reach_codex_classified(client_factory: Any, mock: Any, provider: dict[str, Any],
                                                      status: int, body: Any, headers: dict[str, str],
                                                      want_status: int, want_code: str) -> None:  # fmt: skip
    c = await client_factory(**_config([provider], [{"name": "x", "provider": provider["name"]}]))
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    host = httpx.URL(provider["base_url"]).host
    mock.route(method="POST", host=host).mock(return_value=httpx.Response(status, content=content, headers=headers))
    for kind, req in (("responses", codex_request("x")), ("chat", kimi_request("x"))):
        r = await _send(c, kind, req)
        assert r.status_code == want_status, r.text
        err = r.json()["error"]
        assert err["code"] == want_code
        upstream_message = (
            body.decode()
            if isinstance(body, bytes)
            else (
                body.get("message") or (body["error"] if isinstance(body["error"], str) else body["error"]["message"])
            )
        )
        assert upstream_message in err["message"]  # the upstream's own words reach the user
        if "retry-after" in headers:
            assert r.headers["retry-after"] == headers["retry-after"]


# -- non-streaming: upstream object in → client object out ----------------------------------

CHAT_OBJECT = {
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
MANTLE_OBJECT = {"id": "resp_m", "object": "response", "created_at": 1, "status": "completed", "model": "openai.gpt-oss-120b",
                 "output": [{"item_id": "fc_A", "output_index": 0, "type": "function_call", "call_id": "c1", "name": "f",
                             "arguments": "{}"}]}  # fmt: skip


@pytest.mark.parametrize(
    "provider, model, host, answer, client",
    [
        (P_KIMI_VLLM, {"name": "kimi-k2.6", "provider": "k2"}, "10.0.0.5", CHAT_OBJECT, "responses"),
        (P_KIMI_VLLM, {"name": "kimi-k2.6", "provider": "k2"}, "10.0.0.5", CHAT_OBJECT, "chat"),
        ({"name": "ds", "profile": "deepseek", "protocol": "chat", "base_url": "https://api.deepseek.com"},
         {"name": "deepseek-chat", "provider": "ds"}, "api.deepseek.com", CHAT_OBJECT, "responses"),
        ({"name": "mantle", "profile": "bedrock-mantle", "protocol": "responses",
          "base_url": "https://bedrock-mantle.us-east-1.api.aws/v1"}, {"name": "gpt-oss-120b", "provider": "mantle"},
         "bedrock-mantle.us-east-1.api.aws", MANTLE_OBJECT, "responses"),
    ],
    ids=["kimi-codex", "kimi-kimi-cli", "deepseek-codex", "mantle-codex"],
)  # fmt: skip
async def test_profile_nonstream(client_factory: Any, mock: Any, provider: dict[str, Any], model: dict[str, Any],
                                 host: str, answer: dict[str, Any], client: str) -> None:  # fmt: skip
    c = await client_factory(**_config([provider], [model]))
    mock.route(method="POST", host=host).mock(return_value=httpx.Response(200, json=answer))
    req = (codex_request if client == "responses" else kimi_request)(model["name"], stream=False)
    r = await _send(c, client, req)
    assert r.status_code == 200, r.text
    out = r.json()
    if client == "chat":
        msg = out["choices"][0]["message"]
        assert (msg["content"], msg["reasoning_content"]) == ("Hello", "think")
        assert [t["id"] for t in msg["tool_calls"]] == ["functions.Bash:1"]
        return
    calls = [i for i in out["output"] if i["type"] == "function_call"]
    if answer is MANTLE_OBJECT:  # docs/rules.md §2: the id-less item gets its id back, the stray key goes
        assert [(i["id"], i["call_id"]) for i in calls] == [("fc_A", "c1")] and "output_index" not in calls[0]
    else:
        assert [i["call_id"] for i in calls] == ["functions.Bash:1"] and all(i["id"] for i in calls)
        assert out["usage"]["input_tokens_details"]["cached_tokens"] == 9


async def test_the_request_log_line_carries_the_cache_counts(client_factory: Any, mock: Any) -> None:
    """Codex on Anthropic: the breakpoints go up, the upstream's cache counts come back to the
    client and into the request line (read 30 and written 7 of 42 input tokens)."""
    c = await client_factory(**_config([{**P_ANTHROPIC, "base_url": "http://q.test"}],
                                       [{"name": "m", "provider": "ant"}]))  # fmt: skip
    mock.route(method="POST", host="q.test").mock(side_effect=[messages_answer()])
    with structlog.testing.capture_logs() as logs:
        r = await _send(c, "responses", codex_request("m"))
    c_codex_from_messages(r)
    line = [e for e in logs if e["event"] == "request"][-1]
    assert (line["input_tokens"], line["cache_read"], line["cache_write"]) == (42, 30, 7)
