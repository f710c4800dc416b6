"""Chat Completions request → Responses request (kimi-cli / openai SDK → OpenAI, Azure, xAI,
Mantle), docs/rules.md §7.3.

Theory of operation
-------------------
One pure function of the request: ``chat_to_responses(body, ctx)`` walks ``messages`` once
and builds the ``input`` items; top-level fields go through the table below.  It also
fills ``ctx.tools`` (``toolinfo_from_chat``) so the stream stages know which functions the
client registered, including the R3-a′ ``apply_patch`` shape (one required string
parameter).

Messages:

=================================  ========================================================
Chat                               Responses
=================================  ========================================================
first message, ``system``          ``instructions`` (exact text; text parts joined)
any other ``system``/``developer`` ``message`` role ``developer`` (``input_text``)
``user``                           ``message`` role ``user``: ``text`` → ``input_text``,
                                   ``image_url`` → ``input_image``, ``file`` →
                                   ``input_file``; ``video_url``/``input_audio`` dropped
``assistant`` text / refusal       ``message`` role ``assistant`` with one ``output_text``
                                   part (and a ``refusal`` part); with ``mantle_request``
                                   the content is a plain string (T1-6)
``assistant.tool_calls[]``         ``function_call{call_id,name,arguments}`` (arguments
                                   verbatim), after the assistant's text
``assistant.reasoning_content``    dropped: no Responses form without ``encrypted_content``
                                   (``reasoning_dropped_for_responses``)
``tool``                           ``function_call_output{call_id,output}`` (text parts
                                   joined; images kept as ``input_image`` parts)
=================================  ========================================================

``call_id``: docs/rules.md §1 Responses policy + uniqueness pass over every ``tool_calls[].id`` and
``tool_call_id`` of the request, so the mapping is stateless and a call and its output stay
paired.  A tool call without ``id`` or a tool message without ``tool_call_id`` is a 400:
ids are never invented.  The legacy ``function`` role is a 400 too (no id to pair with), and
so are ``tool_calls`` that are not an array, a call or a function tool without a string
name.

Top level:

=======================================  ==================================================
``model``                                ``ctx.upstream_model``
``tools[].function``                     flat ``{type:function,name,description,
                                         parameters,strict}``; ``strict`` always explicit
                                         (Responses defaults it to true, Chat to false);
                                         ``parameters.type`` forced to ``object``
``tools[type=custom]``                   ``{type:custom,name,description,format}``
``tools[type=builtin_function]``         dropped (Moonshot-only ``$web_search``…), named in
                                         ``ctx.tools.dropped``
``tool_choice`` string / function form   same / ``{type:function,name}``
``parallel_tool_calls``                  kept (only with tools)
``response_format``                      ``text.format`` (json_schema flattened)
``verbosity``                            ``text.verbosity``
``max_completion_tokens``/``max_tokens`` ``max_output_tokens`` (else ``ctx.max_output_tokens``)
``reasoning_effort``                     ``reasoning:{effort, summary:"auto"}`` (a summary so
                                         the Chat client gets ``reasoning_content`` back)
``n`` > 1                                400 (``param: n``)
``stream``                               kept; ``stream_options`` dropped
``temperature``, ``top_p``, ``user``,    kept
``safety_identifier``,
``prompt_cache_key``, ``service_tier``,
``metadata``
everything else                          dropped: ``stop``, ``seed``, ``logit_bias``,
                                         ``logprobs``, ``top_logprobs``, ``frequency_penalty``,
                                         ``presence_penalty``, ``stream_options``, ``audio``,
                                         ``modalities``, ``prediction``, ``thinking``,
                                         ``functions``/``function_call`` (legacy), ``n`` = 1
``store``                                always ``false`` (nothing is stored upstream)
=======================================  ==================================================

With ``mantle_request``: ``tool_choice:"none"`` → neither ``tools`` nor ``tool_choice`` (T1-6).
"""

from __future__ import annotations

from typing import Any

import orjson

from .context import Ctx, ToolInfo, one_string_param
from .errors import RequestError
from .ids import MAX_CALL_ID, responses_policy, unique_map

__all__ = ["chat_to_responses", "toolinfo_from_chat", "force_object_schema", "text_of"]

_KEEP = ("temperature", "top_p", "user", "safety_identifier", "prompt_cache_key", "service_tier", "metadata")
_REASONING_KEYS = ("reasoning_content", "reasoning", "reasoning_details")


def force_object_schema(params: Any) -> tuple[dict[str, Any], bool]:
    """``(schema, changed)``: the parameters schema with ``type: "object"`` when it lacks one
    (docs/rules.md F16: Kimi "parameters.type is required", Codex's ``type: null``)."""
    if not isinstance(params, dict):
        return {"type": "object", "properties": {}}, True
    if params.get("type") is None:
        return {**params, "type": "object"}, True
    return params, False


def text_of(content: Any) -> str:
    """Text of a content value: the string itself, or the ``text`` of its parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def toolinfo_from_chat(tools: Any) -> ToolInfo:
    info = ToolInfo()
    if not isinstance(tools, list):
        return info
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, dict) and tool.get("type", "function") == "function" else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            continue
        name = fn["name"]
        info.functions.add(name)
        param = one_string_param(fn.get("parameters"))
        if param is not None:
            info.single_string_param[name] = param
    return info


# -- messages --------------------------------------------------------------------------------


def _user_parts(content: Any, ctx: Ctx) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    if not isinstance(content, list):
        return [{"type": "input_text", "text": ""}]
    parts: list[dict[str, Any]] = []
    for p in content:
        if not isinstance(p, dict):
            continue
        kind = p.get("type")
        if kind == "text":
            parts.append({"type": "input_text", "text": p.get("text") or ""})
        elif kind == "image_url":
            img = p.get("image_url")
            url = img.get("url") if isinstance(img, dict) else img
            detail = img.get("detail") if isinstance(img, dict) else None
            parts.append({"type": "input_image", "image_url": url, "detail": detail or "auto"})
        elif kind == "file":
            f = p.get("file")
            if not isinstance(f, dict):
                f = {}
            parts.append(
                {"type": "input_file", **{k: v for k, v in f.items() if k in ("file_id", "file_data", "filename")}}
            )
        else:  # video_url (Moonshot), input_audio, unknown: no Responses input form
            ctx.repaired("content_part_dropped")
    return parts


def _tool_output(content: Any, ctx: Ctx) -> Any:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        if all(isinstance(p, dict) and p.get("type") == "text" for p in content):
            return text_of(content)
        return _user_parts(content, ctx)
    return "" if content is None else orjson.dumps(content).decode()


def _assistant_items(msg: dict[str, Any], ctx: Ctx) -> list[dict[str, Any]]:
    content = msg.get("content")
    text = text_of(content)
    refusal = msg.get("refusal")
    if not isinstance(refusal, str):
        refusal = ""
    if isinstance(content, list):
        refusal += "".join(
            p["refusal"]
            for p in content
            if isinstance(p, dict) and p.get("type") == "refusal" and isinstance(p.get("refusal"), str)
        )
    if not text and not refusal:
        return []
    if ctx.on("mantle_request"):
        return [{"type": "message", "role": "assistant", "content": text + refusal}]
    parts: list[dict[str, Any]] = []
    if text:
        parts.append({"type": "output_text", "text": text})
    if refusal:
        parts.append({"type": "refusal", "refusal": refusal})
    return [{"type": "message", "role": "assistant", "content": parts}]


def _collect_ids(messages: list[Any]) -> list[str]:
    ids: list[str] = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        calls = m.get("tool_calls")
        for tc in calls if isinstance(calls, list) else ():
            if isinstance(tc, dict) and isinstance(tc.get("id"), str):
                ids.append(tc["id"])
        if m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str):
            ids.append(m["tool_call_id"])
    return ids


def _input_items(messages: list[Any], ctx: Ctx) -> tuple[str | None, list[dict[str, Any]]]:
    idmap = unique_map(_collect_ids(messages), responses_policy, MAX_CALL_ID)
    instructions: str | None = None
    items: list[dict[str, Any]] = []
    reasoning_dropped = False
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise RequestError(f"messages[{i}] must be an object", param=f"messages[{i}]")
        role = m.get("role")
        if role in ("system", "developer"):
            text = text_of(m.get("content"))
            if i == 0 and role == "system":
                instructions = text
            else:
                items.append(
                    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": text}]}
                )
        elif role == "user":
            items.append({"type": "message", "role": "user", "content": _user_parts(m.get("content"), ctx)})
        elif role == "assistant":
            reasoning_dropped |= any(m.get(k) for k in _REASONING_KEYS)
            items.extend(_assistant_items(m, ctx))
            calls = m.get("tool_calls")
            if calls is not None and not isinstance(calls, list):
                raise RequestError("tool_calls must be an array", param=f"messages[{i}].tool_calls")
            for j, tc in enumerate(calls or ()):
                if not isinstance(tc, dict):
                    raise RequestError("tool call must be an object", param=f"messages[{i}].tool_calls[{j}]")
                fn = tc.get("function")
                if not isinstance(tc.get("id"), str) or not tc["id"]:
                    raise RequestError("assistant tool call has no id", param=f"messages[{i}].tool_calls[{j}].id")
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
                    raise RequestError(
                        "assistant tool call has no function name",
                        param=f"messages[{i}].tool_calls[{j}].function.name",
                    )
                args = fn.get("arguments")
                items.append(
                    {
                        "type": "function_call",
                        "call_id": idmap[tc["id"]],
                        "name": fn["name"],
                        "arguments": args
                        if isinstance(args, str)
                        else ("{}" if args is None else orjson.dumps(args).decode()),
                    }
                )
        elif role == "tool":
            call_id = m.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise RequestError("tool message has no tool_call_id", param=f"messages[{i}].tool_call_id")
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": idmap[call_id],
                    "output": _tool_output(m.get("content"), ctx),
                }
            )
        else:
            raise RequestError(f"unsupported message role {role!r}", param=f"messages[{i}].role")
    if reasoning_dropped:
        ctx.repaired("reasoning_dropped_for_responses")
    return instructions, items


# -- tools -----------------------------------------------------------------------------------


def _tools(tools: Any, ctx: Ctx) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if not isinstance(tools, list):
        return out
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            continue
        kind = t.get("type", "function")
        if kind == "function" and isinstance(t.get("function"), dict):
            fn = t["function"]
            if not isinstance(fn.get("name"), str):
                raise RequestError("a function tool needs a string name", param=f"tools[{i}].function.name")
            params, forced = force_object_schema(fn.get("parameters"))
            if forced:
                ctx.repaired("tool_schema_type_object")
            tool: dict[str, Any] = {"type": "function", "name": fn.get("name")}
            if fn.get("description") is not None:
                tool["description"] = fn["description"]
            tool["parameters"] = params
            tool["strict"] = fn.get("strict") is True
            out.append(tool)
        elif kind == "custom" and isinstance(t.get("custom"), dict):
            c = t["custom"]
            out.append({"type": "custom", **{k: v for k, v in c.items() if k in ("name", "description", "format")}})
        else:  # builtin_function ($web_search) and anything unknown
            fn = t.get("function")
            name = fn.get("name") if isinstance(fn, dict) else None
            ctx.tools.dropped.append(name if isinstance(name, str) and name else str(kind))
            if kind == "builtin_function":
                ctx.repaired("builtin_function_dropped")
            else:
                ctx.repaired("unknown_tool_dropped")
    return out


def _tool_choice(choice: Any) -> Any:
    if not isinstance(choice, dict):
        return choice
    kind = choice.get("type")
    if kind == "function" and isinstance(choice.get("function"), dict):
        return {"type": "function", "name": choice["function"].get("name")}
    if kind == "custom" and isinstance(choice.get("custom"), dict):
        return {"type": "custom", "name": choice["custom"].get("name")}
    if kind == "allowed_tools" and isinstance(choice.get("allowed_tools"), dict):
        allowed = choice["allowed_tools"]
        entries = allowed.get("tools")
        return {
            "type": "allowed_tools",
            "mode": allowed.get("mode", "auto"),
            "tools": [_tool_choice(t) for t in (entries if isinstance(entries, list) else ()) if isinstance(t, dict)],
        }
    return choice


def _text_format(fmt: Any) -> dict[str, Any] | None:
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_schema" and isinstance(fmt.get("json_schema"), dict):
        js = fmt["json_schema"]
        return {"type": "json_schema", **{k: js[k] for k in ("name", "schema", "strict", "description") if k in js}}
    return {"type": fmt.get("type", "text")}


# -- entry point -----------------------------------------------------------------------------


def chat_to_responses(body: dict[str, Any], ctx: Ctx) -> dict[str, Any]:
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise RequestError("'messages' must be an array", param="messages")
    n = body.get("n")
    if isinstance(n, int) and not isinstance(n, bool) and n > 1:
        raise RequestError("n > 1 is not supported by the Responses upstream", param="n")
    ctx.tools = toolinfo_from_chat(body.get("tools"))

    instructions, items = _input_items(messages, ctx)
    out: dict[str, Any] = {"model": ctx.upstream_model or body.get("model")}
    if instructions is not None:
        out["instructions"] = instructions
    out["input"] = items

    tools = _tools(body.get("tools"), ctx)
    choice = body.get("tool_choice")
    if ctx.on("mantle_request") and choice == "none":
        tools, choice = [], None
        ctx.repaired("mantle_request")
    if tools:
        out["tools"] = tools
        if choice is not None:
            out["tool_choice"] = _tool_choice(choice)
        if body.get("parallel_tool_calls") is not None:
            out["parallel_tool_calls"] = body["parallel_tool_calls"]

    text: dict[str, Any] = {}
    fmt = _text_format(body.get("response_format"))
    if fmt is not None:
        text["format"] = fmt
    if body.get("verbosity") is not None:
        text["verbosity"] = body["verbosity"]
    if text:
        out["text"] = text

    limit = body.get("max_completion_tokens")
    if limit is None:
        limit = body.get("max_tokens")
    if limit is None:
        limit = ctx.max_output_tokens
    if limit is not None:
        out["max_output_tokens"] = limit

    if body.get("reasoning_effort") is not None:
        out["reasoning"] = {"effort": body["reasoning_effort"], "summary": "auto"}
    for key in _KEEP:
        if body.get(key) is not None:
            out[key] = body[key]
    if "stream" in body:
        out["stream"] = bool(body["stream"])
    out["store"] = False
    return out
