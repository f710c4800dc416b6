"""Chat Completions request → Anthropic Messages request (a Chat client, or a Responses
client by way of the Chat form, toward Anthropic or an Anthropic-compatible endpoint).

Theory of operation
-------------------
``chat_to_messages(body, ctx)`` is a pure function of the request: one walk over
``messages``, then the tools and the top-level fields, by the tables below.  The Bridge's
``("chat", "messages")`` row uses it, and its ``("responses", "messages")`` row after the
Responses → Chat translator.  Messages wants strictly alternating turns, every system text
at the top, tool results as ``tool_result`` blocks of a ``user`` turn and tool ids matching
``^[a-zA-Z0-9_-]+$``; Chat has none of these rules, so the walk builds turns and merges
neighbours of one role.

Messages:

===============================  =============================================================
Chat                             Messages
===============================  =============================================================
``system`` / ``developer``       ``system`` text blocks, in order; one that is not at the
                                 head moves there (``system_at_head_messages``: Messages has
                                 no system turn in place)
``user`` string / ``text`` part  a ``text`` block (an empty one is never sent)
``image_url`` part               an ``image`` block: a ``data:`` URL as ``base64``, another
                                 URL as ``url``
any other part (audio, file)     dropped, named (``content_part_dropped``)
``assistant`` content            ``text`` blocks
``assistant`` reasoning          ``thinking`` blocks first: those with Anthropic's signature
                                 (``Ctx.signed``, set by the Responses → Chat translator from
                                 a reasoning item's ``encrypted_content``) as they came, else
                                 the text with an empty signature (the request rows,
                                 ``request_messages.py``, keep it only for an upstream that
                                 wants its reasoning back and checks no signature)
``assistant`` ``tool_calls``     ``tool_use`` blocks, ``input`` the parsed arguments (text
                                 that is not a JSON object: ``{"input": text}``,
                                 ``tool_input_wrapped``)
``tool``                         a ``tool_result`` block in the next ``user`` turn (results
                                 of one assistant turn share it, before any user text)
two turns of one role in a row   merged into one turn
===============================  =============================================================

Tool ids go as they came; the request rows make them valid where the upstream requires
Anthropic's pattern (``anthropic_tool_ids``: Kimi's ``functions.Bash:0`` becomes a valid
id there, and comes back as it was through the Messages decoder).

Top level:

===========================  ======================================================================
``model``                    ``ctx.upstream_model``
``max_completion_tokens``,   ``max_tokens`` (Messages requires it: else the model's catalogue
``max_tokens``               ``max_output_tokens``, else ``DEFAULT_MAX_TOKENS``)
``stop``                     ``stop_sequences``
``temperature``              kept, at most 1 (``temperature_clamped``: Messages' range is 0-1)
``top_p``, ``top_k``         kept
``tools[]`` (function)       ``{name, description, input_schema}``
``tool_choice``              ``auto`` / ``required`` → ``any`` / ``none`` / a named function →
                             ``{type:tool, name}``; ``parallel_tool_calls: false`` →
                             ``disable_parallel_tool_use``
``reasoning_effort``         ``thinking: {type: enabled, budget_tokens}`` (``BUDGETS``, at most half
                             of ``max_tokens``; ``minimal``/``none``, or a budget under 1024: no
                             thinking); with thinking on, ``temperature``/``top_p``/``top_k`` are not sent
                             (Anthropic refuses them with thinking: ``thinking_sampling_dropped``)
``thinking`` (GLM style)     ``{type: enabled}`` → as ``reasoning_effort: medium``
``response_format``          ``json_schema`` → ``output_config.format``; ``json_object`` refused
                             (400: Messages has no JSON mode without a schema)
``user``                     ``metadata.user_id``
``n`` > 1                    refused (400)
``stream``                   ``stream``
anything else                not sent (``logprobs``, ``seed``, penalties, ``stream_options``…)
===========================  ======================================================================

The request rows for every Messages upstream run afterwards (``request_messages.py``: empty
blocks, unsigned thinking, server tools, fields an endpoint refuses).
"""

from __future__ import annotations

from typing import Any

import orjson

from .context import Ctx
from .errors import RequestError
from .reasoning_keys import KEYS as REASONING_KEYS

__all__ = ["BUDGETS", "DEFAULT_MAX_TOKENS", "SIGNED", "chat_to_messages", "take_signed"]

# the key a translator into the Chat form marks an assistant message's Anthropic-signed
# thinking blocks with while it walks; ``take_signed`` moves them to ``Ctx.signed`` before
# the Chat body leaves it (for a Messages upstream only)
SIGNED = "_anthropic_thinking"


def take_signed(messages: list[dict[str, Any]], ctx: Ctx) -> None:
    """The signed thinking blocks marked on ``messages`` (fresh dicts of the translator's own)
    moved to ``ctx.signed``, by message index."""
    for i, m in enumerate(messages):
        blocks = m.pop(SIGNED, None)
        if blocks:
            ctx.signed[i] = blocks


DEFAULT_MAX_TOKENS = 8192
# reasoning_effort → thinking budget_tokens
BUDGETS = {"low": 2048, "medium": 8192, "high": 16384, "xhigh": 32768}
_MIN_BUDGET = 1024  # Anthropic's smallest budget_tokens


def _text_block(text: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}] if isinstance(text, str) and text else []


def _image(url: str) -> dict[str, Any] | None:
    if url.startswith("data:"):
        head, sep, data = url.partition(",")
        if not sep or ";base64" not in head:
            return None
        media = head[5:].split(";", 1)[0] or "image/png"
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    if url.startswith(("http://", "https://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    return None


def _content(content: Any, ctx: Ctx, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str) or content is None:
        return _text_block(content)
    if not isinstance(content, list):
        raise RequestError(f"{where}.content must be a string or an array of parts", param=f"{where}.content")
    out: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text"):
            out.extend(_text_block(part.get("text")))
        elif kind == "refusal":
            out.extend(_text_block(part.get("refusal")))
        elif kind == "image_url":
            iu = part.get("image_url")
            url = iu.get("url") if isinstance(iu, dict) else iu
            img = _image(url) if isinstance(url, str) else None
            if img is None:
                ctx.repaired("content_part_dropped")
            else:
                out.append(img)
        else:
            ctx.repaired("content_part_dropped")
    return out


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str) and p["text"]
        )
    return ""


def _input(arguments: Any, ctx: Ctx) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        return parsed
    ctx.repaired("tool_input_wrapped")
    return {"input": arguments}


def _thinking(i: int, msg: dict[str, Any], ctx: Ctx) -> list[dict[str, Any]]:
    signed = ctx.signed.get(i)
    if isinstance(signed, list) and signed:
        return [b for b in signed if isinstance(b, dict)]
    text = next((msg[k] for k in REASONING_KEYS if isinstance(msg.get(k), str) and msg[k]), None)
    if text is None:
        return []
    # unsigned: the request rows keep it only for an upstream that wants it back
    # (request_messages.py, anthropic_signatures off)
    return [{"type": "thinking", "thinking": text, "signature": ""}]


def _assistant(i: int, msg: dict[str, Any], ctx: Ctx) -> list[dict[str, Any]]:
    blocks = _thinking(i, msg, ctx)
    blocks += _content(msg.get("content"), ctx, f"messages[{i}]")
    calls = msg.get("tool_calls")
    for j, call in enumerate(calls if isinstance(calls, list) else ()):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RequestError(f"messages[{i}].tool_calls[{j}] has no function name",
                               param=f"messages[{i}].tool_calls[{j}].function.name")  # fmt: skip
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise RequestError(f"messages[{i}].tool_calls[{j}] has no id", param=f"messages[{i}].tool_calls[{j}].id")
        blocks.append(
            {
                "type": "tool_use",
                "id": call_id,
                "name": fn["name"],
                "input": _input(fn.get("arguments"), ctx),
            }
        )
    return blocks


def _tool_result(i: int, msg: dict[str, Any], ctx: Ctx) -> dict[str, Any]:
    call_id = msg.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise RequestError(f"messages[{i}] (tool) has no tool_call_id", param=f"messages[{i}].tool_call_id")
    content = msg.get("content")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
    parts = _content(content, ctx, f"messages[{i}]") if isinstance(content, list) else _text_block(content)
    if parts:
        block["content"] = parts
    return block


def _turns(messages: Any, ctx: Ctx) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system blocks, alternating turns)."""
    if not isinstance(messages, list):
        raise RequestError("'messages' must be an array", param="messages")
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise RequestError(f"messages[{i}] must be an object", param=f"messages[{i}]")
        role = m.get("role")
        if role in ("system", "developer"):
            if turns:
                ctx.repaired("system_at_head_messages")
            system.extend(_text_block(_text_of(m.get("content"))))
            continue
        if role == "assistant":
            blocks, turn_role = _assistant(i, m, ctx), "assistant"
        elif role == "tool":
            blocks, turn_role = [_tool_result(i, m, ctx)], "user"
        elif role == "user":
            blocks, turn_role = _content(m.get("content"), ctx, f"messages[{i}]"), "user"
        else:
            raise RequestError(f"messages[{i}] has unsupported role {role!r}", param=f"messages[{i}].role")
        if not blocks:
            continue
        if turns and turns[-1]["role"] == turn_role:
            prev = turns[-1]["content"]
            if role == "tool" and prev and prev[-1].get("type") != "tool_result":
                # results first: Messages reads a user turn's tool_result blocks before its text
                k = next((n for n, b in enumerate(prev) if b.get("type") != "tool_result"), len(prev))
                prev[k:k] = blocks
            else:
                prev.extend(blocks)
        else:
            turns.append({"role": turn_role, "content": blocks})
    return system, turns


def _tools(tools: Any, ctx: Ctx) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, t in enumerate(tools if isinstance(tools, list) else ()):
        if not isinstance(t, dict):
            continue
        fn = t.get("function")
        if t.get("type") != "function" or not isinstance(fn, dict):
            kind = t.get("type")
            ctx.tools.dropped.append(kind if isinstance(kind, str) else str(kind))
            ctx.repaired("hosted_tool_dropped")
            continue
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise RequestError(f"tools[{i}] has no function name", param=f"tools[{i}].function.name")
        schema = fn.get("parameters")
        tool: dict[str, Any] = {
            "name": name,
            "input_schema": schema if isinstance(schema, dict) else {"type": "object"},
        }
        if isinstance(fn.get("description"), str) and fn["description"]:
            tool["description"] = fn["description"]
        out.append(tool)
    return out


def _tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    out: dict[str, Any] | None
    if choice == "required":
        out = {"type": "any"}
    elif choice == "none":
        out = {"type": "none"}
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        out = {"type": "tool", "name": choice["function"].get("name")}
    elif choice == "auto" or parallel is False:
        out = {"type": "auto"}
    else:
        out = None
    if parallel is False and out is not None and out["type"] != "none":
        out["disable_parallel_tool_use"] = True
    return out


def _effort(body: dict[str, Any]) -> str | None:
    effort = body.get("reasoning_effort")
    if isinstance(effort, str):
        return effort
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        return "medium"
    return None


def chat_to_messages(body: dict[str, Any], ctx: Ctx) -> dict[str, Any]:
    system, turns = _turns(body.get("messages"), ctx)
    out: dict[str, Any] = {"model": ctx.upstream_model or body.get("model")}
    if system:
        out["system"] = system
    out["messages"] = turns
    n = body.get("n")
    if isinstance(n, int) and n > 1:
        raise RequestError("n > 1 is not supported for this model (its upstream speaks Anthropic Messages)", param="n")
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        limit = ctx.max_output_tokens or DEFAULT_MAX_TOKENS
    out["max_tokens"] = limit
    tools = _tools(body.get("tools"), ctx)
    if tools:
        out["tools"] = tools
        choice = _tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))
        if choice is not None:
            out["tool_choice"] = choice
    stop = body.get("stop")
    if isinstance(stop, str) and stop:
        out["stop_sequences"] = [stop]
    elif isinstance(stop, list) and stop:
        out["stop_sequences"] = [s for s in stop if isinstance(s, str) and s]
    effort = _effort(body)
    budget = min(BUDGETS.get(effort or "", 0), limit // 2)
    thinking = budget >= _MIN_BUDGET
    if thinking:
        out["thinking"] = {"type": "enabled", "budget_tokens": budget}
        if body.get("temperature") is not None or body.get("top_p") is not None or body.get("top_k") is not None:
            ctx.repaired("thinking_sampling_dropped")
    else:
        temp = body.get("temperature")
        if isinstance(temp, (int, float)) and not isinstance(temp, bool):
            if temp > 1:
                ctx.repaired("temperature_clamped")
                temp = 1
            out["temperature"] = temp
        if body.get("top_p") is not None:
            out["top_p"] = body["top_p"]
        top_k = body.get("top_k")
        if isinstance(top_k, int) and not isinstance(top_k, bool):
            out["top_k"] = top_k
    fmt = body.get("response_format")
    if isinstance(fmt, dict):
        if fmt.get("type") == "json_schema":
            js = fmt.get("json_schema")
            schema = js.get("schema") if isinstance(js, dict) else None
            out["output_config"] = {"format": {"type": "json_schema", "schema": schema or {"type": "object"}}}
        elif fmt.get("type") == "json_object":
            raise RequestError(
                "response_format json_object is not supported for this model (its upstream speaks Anthropic "
                "Messages, which takes a JSON schema): send response_format json_schema",
                param="response_format",
                code="unsupported_parameter",
            )
    if isinstance(body.get("user"), str) and body["user"]:
        out["metadata"] = {"user_id": body["user"]}
    if body.get("stream"):
        out["stream"] = True
    return out
