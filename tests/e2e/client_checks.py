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
from typing import Any

import httpx
import openai
from scenarios import SDK_TOOLS_CHAT, SDK_TOOLS_RESPONSES

TIMEOUT = httpx.Timeout(30.0, connect=5.0)


def sdk_client(base_url: str, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=api_key, timeout=TIMEOUT, max_retries=0)


# --------------------------------------------------------------------------- openai SDK, Chat


def sdk_chat(base_url: str, api_key: str, model: str, *, stream: bool) -> dict[str, Any]:
    client = sdk_client(base_url, api_key)
    kw = dict(model=model, messages=[{"role": "user", "content": "read a.py and b.py"}], tools=SDK_TOOLS_CHAT)
    if not stream:
        r = client.chat.completions.create(**kw)
        msg = r.choices[0].message
        extra = msg.model_extra or {}
        return {
            "text": msg.content or "",
            "reasoning": extra.get("reasoning_content") or extra.get("reasoning") or "",
            "tool_calls": [(tc.id, tc.function.name, tc.function.arguments) for tc in msg.tool_calls or []],
            "finish": r.choices[0].finish_reason,
            "usage": r.usage.model_dump() if r.usage else None,
            "events": [],
        }
    text, reasoning, finish, usage = [], [], None, None
    calls: dict[int, dict] = {}
    order: list[int] = []
    events = []
    with client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw) as s:
        for chunk in s:
            events.append(chunk.model_dump())
            if chunk.usage:
                usage = chunk.usage.model_dump()
            for ch in chunk.choices:
                d = ch.delta
                extra = d.model_extra or {}
                if d.content:
                    text.append(d.content)
                rc = extra.get("reasoning_content") or extra.get("reasoning")
                if rc:
                    reasoning.append(rc)
                for tc in d.tool_calls or []:
                    slot = calls.get(tc.index)
                    if slot is None:
                        slot = calls[tc.index] = {"id": None, "name": "", "arguments": ""}
                        order.append(tc.index)
                    if tc.id:
                        assert slot["id"] in (None, tc.id), f"tool call {tc.index} id changed {slot['id']} -> {tc.id}"
                        slot["id"] = tc.id
                    if tc.function and tc.function.name:
                        assert not slot["name"], (
                            f"tool call {tc.index}: name repeated ({slot['name']!r}, {tc.function.name!r})"
                        )
                        slot["name"] = tc.function.name
                    if tc.function and tc.function.arguments:
                        slot["arguments"] += tc.function.arguments
                if ch.finish_reason:
                    finish = ch.finish_reason
    return {
        "text": "".join(text),
        "reasoning": "".join(reasoning),
        "tool_calls": [(calls[i]["id"], calls[i]["name"], calls[i]["arguments"]) for i in order],
        "finish": finish,
        "usage": usage,
        "events": events,
    }


# --------------------------------------------------------------------------- openai SDK, Responses


def _resp_output(resp) -> tuple[str, str, list]:
    text, reasoning, calls = [], [], []
    for item in resp.output:
        if item.type == "message":
            for part in item.content:
                if part.type == "output_text":
                    text.append(part.text)
        elif item.type == "reasoning":
            for s in item.summary or []:
                reasoning.append(s.text)
            for c in getattr(item, "content", None) or []:
                reasoning.append(getattr(c, "text", ""))
        elif item.type == "function_call":
            calls.append((item.call_id, item.name, item.arguments))
    return "".join(text), "".join(reasoning), calls


def sdk_responses(base_url: str, api_key: str, model: str, *, stream: bool) -> dict[str, Any]:
    client = sdk_client(base_url, api_key)
    kw = dict(model=model, input="read a.py and b.py", tools=SDK_TOOLS_RESPONSES)
    if not stream:
        r = client.responses.create(**kw)
        text, reasoning, calls = _resp_output(r)
        return {
            "text": text,
            "reasoning": reasoning,
            "tool_calls": calls,
            "finish": r.status,
            "usage": r.usage.model_dump() if r.usage else None,
            "events": [],
        }
    events = []
    delta_text, delta_reasoning = [], []
    args_delta: dict[str, str] = {}
    with client.responses.stream(**kw) as s:
        for ev in s:
            events.append(ev.type)
            if ev.type == "response.output_text.delta":
                delta_text.append(ev.delta)
            elif ev.type in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
                delta_reasoning.append(ev.delta)
            elif ev.type == "response.function_call_arguments.delta":
                args_delta[ev.item_id] = args_delta.get(ev.item_id, "") + ev.delta
        final = s.get_final_response()
    text, reasoning, calls = _resp_output(final)
    return {
        "text": text,
        "reasoning": reasoning,
        "tool_calls": calls,
        "finish": final.status,
        "usage": final.usage.model_dump() if final.usage else None,
        "events": events,
        "delta_text": "".join(delta_text),
        "delta_reasoning": "".join(delta_reasoning),
        "args_delta": args_delta,
        "output_ids": [getattr(it, "id", None) for it in final.output],
    }


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
