"""The built-in ``demo`` provider: a deterministic Chat Completions model, in process.

It is an httpx transport, so demo traffic takes exactly the path real traffic takes (SSE
bytes, parser, decoders, encoders).  Behaviour, by the last message of the request:

============================================  ===========================================
last message / request                          answer
============================================  ===========================================
a ``tool`` message                              text: "The tool returned: …"
tools offered and (``tool_choice`` is           one tool call to the named (or first) tool,
``required``/named, or the user asks for a      arguments built from the schema's required
tool: "tool", "call", "run", "use")             properties, id ``functions.<name>:<n>``
anything else                                   text: "Hello from Switchboard's demo …"
============================================  ===========================================

With ``reasoning_effort`` (other than ``none``) or ``thinking: {type: enabled}`` in the
request a short ``reasoning_content`` comes first.  Streams word by word (a 5 ms pause
between words so a terminal shows it), usage last when ``stream_options.include_usage`` is
set.  Usage counts one token per word: prompt = words of every message + 1, completion =
answer words (1 for a tool call) + reasoning words, ``reasoning_tokens`` = reasoning words.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson

WORD_DELAY = 0.005
_ASK_TOOL = ("tool", "call", "run ", "use ", "execute", "list files")


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _obj(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


_VALUES = {"integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}


def _value_for(schema: Any) -> Any:
    schema = _obj(schema)
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), "string")
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    if not isinstance(t, str):
        return "demo"
    return _VALUES.get(t, "echo hello from switchboard" if t == "string" else "demo")


def _arguments(tool: dict[str, Any]) -> str:
    params = _obj(_obj(tool.get("function")).get("parameters"))
    props = _obj(params.get("properties"))
    required = params.get("required")
    if not isinstance(required, list) or not required:
        required = list(props)[:1]
    args = {k: _value_for(props[k]) for k in required if isinstance(k, str) and k in props}
    return orjson.dumps(args).decode()


def _tool_name(tool: dict[str, Any]) -> str | None:
    name = _obj(tool.get("function")).get("name")
    return name if isinstance(name, str) and name else None


def plan(body: dict[str, Any]) -> dict[str, Any]:
    """What the demo model answers: {"reasoning", "text"} or {"reasoning", "tool_call"}."""
    messages = _messages(body)
    last = messages[-1] if messages else {}
    tools = [
        t for t in _list(body.get("tools")) if isinstance(t, dict) and t.get("type") == "function" and _tool_name(t)
    ]
    thinking = body.get("thinking")
    wants_reasoning = body.get("reasoning_effort") not in (None, "none") or (
        isinstance(thinking, dict) and thinking.get("type") == "enabled"
    )
    reasoning = "The user wants a reply; keep it short." if wants_reasoning else ""
    if last.get("role") == "tool":
        out = _text_of(last.get("content"))[:200]
        return {"reasoning": reasoning, "text": f"The tool returned: {out}"}
    user = _text_of(last.get("content"))
    choice = body.get("tool_choice")
    named = _obj(choice.get("function")).get("name") if isinstance(choice, dict) else None
    if tools and choice != "none" and (named or choice == "required" or any(w in user.lower() for w in _ASK_TOOL)):
        tool = next((t for t in tools if _tool_name(t) == named), tools[0])
        name = _tool_name(tool)
        n = sum(len(_list(m.get("tool_calls"))) for m in messages if m.get("role") == "assistant")
        return {
            "reasoning": reasoning,
            "tool_call": {"id": f"functions.{name}:{n}", "name": name, "arguments": _arguments(tool)},
        }
    said = " ".join(user.split())[:80]
    text = "Hello from Switchboard's demo provider." + (f" You said: {said}" if said else "")
    return {"reasoning": reasoning, "text": text}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's messages that are objects (anything else is not a message)."""
    return [m for m in _list(body.get("messages")) if isinstance(m, dict)]


def _usage(body: dict[str, Any], out_words: int, reasoning: str = "") -> dict[str, Any]:
    prompt = sum(len(_text_of(m.get("content")).split()) for m in _messages(body)) + 1
    thought = len(reasoning.split())
    completion = out_words + thought
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": thought},
    }


def completion(body: dict[str, Any], cid: str, created: int) -> dict[str, Any]:
    p = plan(body)
    msg: dict[str, Any] = {"role": "assistant", "content": p.get("text")}
    if p["reasoning"]:
        msg["reasoning_content"] = p["reasoning"]
    finish = "stop"
    if "tool_call" in p:
        tc = p["tool_call"]
        msg["tool_calls"] = [
            {"id": tc["id"], "type": "function", "function": {"name": tc["name"], "arguments": tc["arguments"]}}
        ]
        finish = "tool_calls"
    words = len((p.get("text") or "").split()) or 1
    return {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": body.get("model", "demo"),
        "choices": [{"index": 0, "message": msg, "finish_reason": finish, "logprobs": None}],
        "usage": _usage(body, words, p["reasoning"]),
    }


async def stream(body: dict[str, Any], cid: str, created: int) -> AsyncIterator[bytes]:
    p = plan(body)
    model = body.get("model", "demo")

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        obj = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    yield chunk({"role": "assistant", "content": ""})
    if p["reasoning"]:
        yield chunk({"reasoning_content": p["reasoning"]})
    words = 1
    if "tool_call" in p:
        tc = p["tool_call"]
        head = {"index": 0, "id": tc["id"], "type": "function", "function": {"name": tc["name"], "arguments": ""}}
        yield chunk({"tool_calls": [head]})
        yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": tc["arguments"]}}]})
        finish = "tool_calls"
    else:
        parts = p["text"].split(" ")
        words = len(parts)
        for i, w in enumerate(parts):
            await asyncio.sleep(WORD_DELAY)
            yield chunk({"content": w if i == 0 else " " + w})
        finish = "stop"
    yield chunk({}, finish)
    if _obj(body.get("stream_options")).get("include_usage"):
        u = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": _usage(body, words, p["reasoning"]),
        }
        yield b"data: " + orjson.dumps(u) + b"\n\n"
    yield b"data: [DONE]\n\n"


class DemoTransport(httpx.AsyncBaseTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            err = {
                "error": {
                    "message": "the demo provider speaks Chat Completions only",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "unsupported_protocol",
                }
            }
            return httpx.Response(404, json=err)
        try:
            body = orjson.loads(await request.aread())
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            return httpx.Response(
                400,
                json={
                    "error": {
                        "message": "the body is not a JSON object",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": None,
                    }
                },
            )
        cid = f"chatcmpl-demo{zlib.crc32(orjson.dumps(body.get('messages'))):08x}"
        created = int(time.time())
        if body.get("stream"):
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=stream(body, cid, created)
            )
        return httpx.Response(
            200, headers={"content-type": "application/json"}, content=orjson.dumps(completion(body, cid, created))
        )
