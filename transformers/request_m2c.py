"""Anthropic Messages request → Chat Completions request (Claude Code, Kimi Code's
``anthropic`` provider → Kimi, DeepSeek, GLM, vLLM).

Theory of operation
-------------------
``messages_to_chat(body, ctx)`` is a pure function of the request: one walk over
``messages``, the tools and the top-level fields by the tables below.  It fills
``ctx.tools`` (``toolinfo_from_chat``) as the Chat translator does, so the stream stages
know the client's functions.  The Bridge's ``("messages", "chat")`` row uses it, and its
``("messages", "responses")`` row too, followed by the Chat → Responses translator.

Messages and content blocks:

==================================  =====================================================
Messages                            Chat
==================================  =====================================================
``system`` (string or text blocks)  the first ``system`` message (blocks joined with
                                    ``"\\n"``; ``cache_control`` has no Chat form)
a ``system`` role inside            a ``system`` message in place (Claude Code appends
``messages``                        its environment block after the last user turn)
``user`` text / image blocks        ``user`` content: a string when it is text only,
                                    else ``text`` / ``image_url`` parts (base64 as a
                                    ``data:`` URL, a URL as is)
``user`` ``tool_result`` blocks     ``tool`` messages, right after the assistant message
                                    with their calls, in the order of the blocks; their
                                    text blocks joined with ``"\\n"``; images move to a
                                    ``user`` message after them; ``is_error`` prefixes
                                    ``"[error] "``
``assistant`` text blocks           ``assistant`` content (joined)
``assistant`` ``tool_use``          ``tool_calls[]`` ``{id, type:function, function:
                                    {name, arguments: JSON of input}}``
``assistant`` ``thinking``          ``reasoning_content`` of that assistant message (the
                                    text; our sealed signature opens to the same text,
                                    and its thought signatures go to
                                    ``ctx.thought_signatures``)
``assistant`` ``redacted_thinking`` dropped: only Anthropic reads it
                                    (``redacted_thinking_dropped``)
empty text blocks                   never sent
==================================  =====================================================

Top level:

========================  ===================================================================
``model``                 ``ctx.upstream_model``
``max_tokens``            ``max_tokens`` (``max_completion_tokens`` with the quirks that say
                          so: the request quirks run afterwards)
``stop_sequences``        ``stop``
``temperature``,          kept
``top_p``
``stream``                ``stream`` + ``stream_options.include_usage``
``tools[]``               ``{type:function, function:{name, description, parameters:
                          input_schema}}``; a server tool (``type`` other than ``custom`` or
                          absent: ``web_search_…``, ``bash_…``) is dropped and named in
                          ``ctx.tools.dropped`` (``hosted_tool_dropped``)
``tool_choice``           ``auto`` → ``auto``, ``any`` → ``required``, ``tool`` →
                          ``{type:function, function:{name}}``, ``none`` → ``none``;
                          ``disable_parallel_tool_use`` → ``parallel_tool_calls: false``
``thinking``              ``enabled`` / ``adaptive`` → ``reasoning_effort: medium``
                          (``thinking:{type:enabled}`` with ``thinking_param``);
                          ``disabled`` → ``thinking:{type:disabled}`` with that quirk
dropped                   ``metadata``, ``top_k``, ``service_tier``, ``container``,
                          ``mcp_servers``, ``context_management``, any other field
========================  ===================================================================

Tool ids: an id the Messages encoder mapped for the client (``ids.to_anthropic_id``: Kimi's
``functions.Bash:0`` is not a valid Anthropic id) goes back to the upstream as it was.

A ``tool_use`` without ``id`` or ``name``, or a ``tool_result`` without ``tool_use_id``, is a
400 naming it (``messages[i].content[j].id``): ids are never invented.
"""

from __future__ import annotations

from typing import Any

import orjson

from .context import Ctx
from .envelope import is_envelope, open_sealed
from .errors import RequestError
from .ids import from_anthropic_id
from .request_c2r import force_object_schema, toolinfo_from_chat
from .request_quirks import reasoning_key

__all__ = ["messages_to_chat"]

_KEEP = ("temperature", "top_p")


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _texts(blocks: list[dict[str, Any]]) -> list[str]:
    return [b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str) and b["text"]]


def _image(block: dict[str, Any]) -> dict[str, Any] | None:
    src = block.get("source")
    if not isinstance(src, dict):
        return None
    if src.get("type") == "base64" and isinstance(src.get("data"), str):
        url = f"data:{src.get('media_type') or 'image/png'};base64,{src['data']}"
    elif src.get("type") == "url" and isinstance(src.get("url"), str):
        url = src["url"]
    else:
        return None
    return {"type": "image_url", "image_url": {"url": url}}


def _user_content(blocks: list[dict[str, Any]], ctx: Ctx) -> Any:
    parts: list[dict[str, Any]] = []
    for b in blocks:
        if b.get("type") == "text":
            if isinstance(b.get("text"), str) and b["text"]:  # (an empty one is never sent)
                parts.append({"type": "text", "text": b["text"]})
        elif b.get("type") == "image":
            img = _image(b)
            if img is not None:
                parts.append(img)
            else:
                ctx.repaired("content_part_dropped")
        elif b.get("type") not in ("tool_result",):
            ctx.repaired("content_part_dropped")  # documents, search results… no Chat form
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _tool_result(i: int, j: int, b: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    call_id = b.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise RequestError(f"messages[{i}].content[{j}] (tool_result) has no tool_use_id",
                           param=f"messages[{i}].content[{j}].tool_use_id")  # fmt: skip
    blocks = _blocks(b.get("content"))
    text = "\n".join(_texts(blocks))
    if b.get("is_error"):
        text = "[error] " + text
    images = [img for img in (_image(x) for x in blocks if x.get("type") == "image") if img is not None]
    return {"role": "tool", "tool_call_id": from_anthropic_id(call_id), "content": text}, images


def _assistant(i: int, blocks: list[dict[str, Any]], ctx: Ctx) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(_texts(blocks)) or None}
    calls = []
    reasoning: list[str] = []
    for j, b in enumerate(blocks):
        kind = b.get("type")
        if kind == "tool_use":
            call_id, name = b.get("id"), b.get("name")
            if not isinstance(call_id, str) or not call_id:
                raise RequestError(f"messages[{i}].content[{j}] (tool_use) has no id",
                                   param=f"messages[{i}].content[{j}].id")  # fmt: skip
            if not isinstance(name, str) or not name:
                raise RequestError(f"messages[{i}].content[{j}] (tool_use) has no name",
                                   param=f"messages[{i}].content[{j}].name")  # fmt: skip
            args = b.get("input")
            calls.append(
                {
                    "id": from_anthropic_id(call_id),
                    "type": "function",
                    "function": {"name": name, "arguments": orjson.dumps(args if args is not None else {}).decode()},
                }
            )
        elif kind == "thinking":
            if is_envelope(b.get("signature")):
                # Gemini's thought signatures, by call id (transformers/thought_signatures.py)
                status, _, signatures = open_sealed(b["signature"], ctx.envelope_key)
                ctx.thought_signatures.update(signatures)
                if status != "ok":  # ours, but it does not open: the app reports it
                    ctx.envelope_rejected.append(("reasoning", status))
            if isinstance(b.get("thinking"), str) and b["thinking"]:
                reasoning.append(b["thinking"])
        elif kind == "redacted_thinking":
            ctx.repaired("redacted_thinking_dropped")
    if calls:
        msg["tool_calls"] = calls
    if reasoning:
        msg[reasoning_key(ctx)] = "\n\n".join(reasoning)
    return msg


def _messages(body: dict[str, Any], ctx: Ctx) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, str) and system:
        out.append({"role": "system", "content": system})
    elif isinstance(system, list):
        text = "\n".join(_texts(_blocks(system)))
        if text:
            out.append({"role": "system", "content": text})
    elif system is not None and not isinstance(system, (str, list)):
        raise RequestError("'system' must be a string or an array of text blocks", param="system")
    msgs = body.get("messages")
    if not isinstance(msgs, list):
        raise RequestError("'messages' must be an array", param="messages")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise RequestError(f"messages[{i}] must be an object", param=f"messages[{i}]")
        role, blocks = m.get("role"), _blocks(m.get("content"))
        if role == "assistant":
            msg = _assistant(i, blocks, ctx)
            if msg["content"] is not None or "tool_calls" in msg:
                out.append(msg)
        elif role == "user":
            results = [(j, b) for j, b in enumerate(blocks) if b.get("type") == "tool_result"]
            images: list[dict[str, Any]] = []
            for j, b in results:
                tool, imgs = _tool_result(i, j, b)
                out.append(tool)
                images += imgs
            if images:
                out.append({"role": "user", "content": images})
            rest = [b for b in blocks if b.get("type") != "tool_result"]
            content = _user_content(rest, ctx)
            if content:
                out.append({"role": "user", "content": content})
        elif role == "system":
            text = "\n".join(_texts(blocks))
            if text:
                out.append({"role": "system", "content": text})
        else:
            raise RequestError(f"messages[{i}] has unsupported role {role!r}", param=f"messages[{i}].role")
    return out


def _tools(tools: Any, ctx: Ctx) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, t in enumerate(tools if isinstance(tools, list) else ()):
        if not isinstance(t, dict):
            continue
        kind = t.get("type")
        if kind not in (None, "custom"):  # a server tool: web_search_…, bash_…, text_editor_…
            ctx.tools.dropped.append(kind if isinstance(kind, str) else str(kind))
            ctx.repaired("hosted_tool_dropped")
            continue
        name = t.get("name")
        if not isinstance(name, str) or not name:
            raise RequestError(f"tools[{i}] has no name", param=f"tools[{i}].name")
        params, forced = force_object_schema(t.get("input_schema"))
        if forced:
            ctx.repaired("tool_schema_type_object")
        fn: dict[str, Any] = {"name": name, "parameters": params}
        if isinstance(t.get("description"), str):
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: Any) -> tuple[Any, bool | None]:
    if not isinstance(choice, dict):
        return None, None
    parallel = False if choice.get("disable_parallel_tool_use") else None
    kind = choice.get("type")
    if kind == "any":
        return "required", parallel
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    if kind == "none":
        return "none", parallel
    return "auto", parallel


def messages_to_chat(body: dict[str, Any], ctx: Ctx) -> dict[str, Any]:
    out: dict[str, Any] = {"model": ctx.upstream_model or body.get("model"), "messages": _messages(body, ctx)}
    tools = _tools(body.get("tools"), ctx)
    if tools:
        out["tools"] = tools
        choice, parallel = _tool_choice(body.get("tool_choice"))
        if choice is not None:
            out["tool_choice"] = choice
        if parallel is not None:
            out["parallel_tool_calls"] = parallel
    dropped = list(ctx.tools.dropped)  # the server tools _tools named
    ctx.tools = toolinfo_from_chat(out.get("tools"))
    ctx.tools.dropped = dropped
    thinking = body.get("thinking")
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind in ("enabled", "adaptive"):
        if ctx.on("thinking_param"):
            out["thinking"] = {"type": "enabled"}
        else:
            out["reasoning_effort"] = "medium"
    elif kind == "disabled" and ctx.on("thinking_param"):
        out["thinking"] = {"type": "disabled"}
    if isinstance(body.get("max_tokens"), int):
        out["max_tokens"] = body["max_tokens"]
    elif ctx.max_output_tokens is not None:
        out["max_tokens"] = ctx.max_output_tokens
    stops = body.get("stop_sequences")
    if isinstance(stops, list) and stops:
        out["stop"] = stops
    for key in _KEEP:
        if body.get(key) is not None:
            out[key] = body[key]
    if body.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out
