"""The built-in ``demo`` provider: a deterministic Chat Completions model, in process.

It is an httpx transport, so demo traffic takes exactly the path real traffic takes (SSE
bytes, parser, decoders, encoders).  Behaviour, by the last message of the request:

============================================  ===========================================
last message / request                          answer
============================================  ===========================================
a ``tool`` message                              text: "The tool returned: …"
function tools offered and ``tool_choice``      one tool call, id ``functions.<name>:<n>``:
not ``none``                                    the forced tool (a named ``tool_choice``,
                                                within ``allowed_tools`` when given), else the
                                                tool the prompt names (the longest name found
                                                in the last user text), else the first;
                                                arguments satisfy its JSON Schema
                                                (``demo_args``: required fields, enums,
                                                nested objects/arrays, formats, bounds)
anything else                                   text: "Hello from Switchboard's demo …"
============================================  ===========================================

So a client that offers tools gets the agent loop a model gives it: a call, the client runs
the tool, the result comes back, the demo answers in text.  The demo speaks Chat Completions
only; Responses clients reach it through the proxy's Responses→Chat translation.

With ``reasoning_effort`` (other than ``none``) or ``thinking: {type: enabled}`` in the
request a short ``reasoning_content`` comes first.  Streams word by word (a 5 ms pause
between words so a terminal shows it), usage last when ``stream_options.include_usage`` is
set.  Usage counts one token per word: prompt = words of every message + 1, completion =
answer words (1 for a tool call) + reasoning words, ``reasoning_tokens`` = reasoning words.
"""

from __future__ import annotations

import asyncio
import re
import time
import zlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson

from .demo_args import arguments

WORD_DELAY = 0.005


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _obj(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _arguments(tool: dict[str, Any]) -> str:
    return orjson.dumps(arguments(_obj(tool.get("function")).get("parameters"))).decode()


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
    prompt = next((_text_of(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
    tool = _pick_tool(tools, choice, prompt) if tools and choice != "none" else None
    if tool is not None:
        name = _tool_name(tool)
        n = sum(len(_list(m.get("tool_calls"))) for m in messages if m.get("role") == "assistant")
        return {
            "reasoning": reasoning,
            "tool_call": {"id": f"functions.{name}:{n}", "name": name, "arguments": _arguments(tool)},
        }
    said = " ".join(user.split())[:80]
    text = "Hello from Switchboard's demo provider." + (f" You said: {said}" if said else "")
    return {"reasoning": reasoning, "text": text}


def _choice_names(choice: Any) -> tuple[str | None, set[str] | None]:
    """(the forced tool's name, the allowed names) a Chat or Responses ``tool_choice`` sets."""
    if not isinstance(choice, dict):
        return None, None
    if choice.get("type") == "allowed_tools":
        spec = _obj(choice.get("allowed_tools")) or choice
        names = {_tool_name(t) or _obj(t).get("name") for t in _list(spec.get("tools")) if isinstance(t, dict)}
        return None, {n for n in names if isinstance(n, str)}
    named = _obj(choice.get("function")).get("name") or choice.get("name")
    return (named if isinstance(named, str) and named else None), None


def _pick_tool(tools: list[dict[str, Any]], choice: Any, user: str) -> dict[str, Any] | None:
    named, allowed = _choice_names(choice)
    if allowed is not None:
        tools = [t for t in tools if _tool_name(t) in allowed] or tools
    forced = next((t for t in tools if _tool_name(t) == named), None)
    if forced is not None:
        return forced
    text = user.lower()
    mentioned = [
        t
        for t in tools
        if re.search(r"(?<![\w.-])" + re.escape((_tool_name(t) or "").lower()) + r"(?![\w-])", text) is not None
    ]
    return max(mentioned, key=lambda t: len(_tool_name(t) or "")) if mentioned else tools[0]


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's messages that are objects (anything else is not a message)."""
    return [m for m in _list(body.get("messages")) if isinstance(m, dict)]


def _usage(body: dict[str, Any], out_words: int, reasoning: str = "") -> dict[str, Any]:
    words = [len(_text_of(m.get("content")).split()) for m in _messages(body)]
    prompt = sum(words) + 1
    # a prefix cache, as the providers keep one: a conversation sent again reads every
    # message but the newest from cache
    cached = sum(words[:-1])
    thought = len(reasoning.split())
    completion = out_words + thought
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
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
