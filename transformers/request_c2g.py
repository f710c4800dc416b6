"""Chat Completions request → Gemini ``generateContent`` request (any client → a Gemini
upstream spoken in its own API, ``protocol: gemini``).

Theory of operation
-------------------
``chat_to_gemini(body, ctx)`` is a pure function of a Chat request (the hub: every client's
request reaches it through its translator into Chat).  The model and the stream flag go in
the URL (``providers/profiles.upstream_url``), not the body.  Before it, the Bridge runs
``thought_signatures.restore``: every assistant call carries Gemini's own signature (or the
escape value) in ``extra_content``, and it goes on the ``functionCall`` part as
``thoughtSignature``, byte for byte.

=====================================  ==================================================
Chat                                   Gemini
=====================================  ==================================================
``system`` / ``developer`` messages    ``systemInstruction`` (their text joined with
                                       ``"\\n\\n"``, wherever they stand)
``user`` text / ``image_url`` parts    a ``user`` content: ``text`` parts, ``inlineData``
                                       for a ``data:`` URL; an image by URL is dropped
                                       (``content_part_dropped``)
``assistant`` content                  a ``model`` content's ``text`` part
``assistant`` ``tool_calls``           ``functionCall`` parts (``args`` parsed; arguments
                                       that are not a JSON object go as ``{"_raw"}``);
                                       the call's id only when it is Gemini's own (not
                                       a ``gm_`` id the proxy minted); its signature as
                                       ``thoughtSignature``
``assistant`` reasoning                not sent (Gemini reads its own signatures, not
                                       thought text)
``tool`` messages                      ``functionResponse`` parts of one ``user``
                                       content: the call's name, ``response: {"output":
                                       text}``
consecutive contents of one role       merged into one
``tools[]`` functions                  ``functionDeclarations`` with
                                       ``parametersJsonSchema`` (JSON Schema as it came)
``tool_choice``                        ``toolConfig.functionCallingConfig``: ``auto`` →
                                       ``AUTO``, ``required`` → ``ANY``, ``none`` →
                                       ``NONE``, one function → ``ANY`` with its name
``max_tokens`` /                       ``generationConfig.maxOutputTokens``
``max_completion_tokens``
``temperature``, ``top_p``, ``stop``   ``temperature``, ``topP``, ``stopSequences``
``top_k``, ``seed``, penalties         ``topK``, ``seed``, ``presencePenalty``,
                                       ``frequencyPenalty``
``response_format``                    ``responseMimeType: application/json`` (and
                                       ``responseJsonSchema`` for ``json_schema``)
``reasoning_effort``                   ``thinkingConfig``: Gemini 3 models
                                       ``thinkingLevel`` (``low`` for minimal and low,
                                       else ``high``), others ``thinkingBudget`` (1024,
                                       8192, 24576); ``includeThoughts`` always, so the
                                       reasoning streams
=====================================  ==================================================
"""

from __future__ import annotations

from typing import Any

import orjson

from .context import Ctx
from .thought_signatures import signature_in

__all__ = ["chat_to_gemini"]

_BUDGETS = {"minimal": 1024, "low": 1024, "medium": 8192, "high": 24576}


# Chat's sampling settings and their generationConfig names
_SAMPLING = (
    ("temperature", "temperature"),
    ("top_p", "topP"),
    ("top_k", "topK"),
    ("seed", "seed"),
    ("presence_penalty", "presencePenalty"),
    ("frequency_penalty", "frequencyPenalty"),
)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p["text"]
            for p in content
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        )
    return ""


def _user_parts(content: Any, ctx: Ctx) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for p in content if isinstance(content, list) else ():
        if not isinstance(p, dict):
            continue
        if p.get("type") == "text" and isinstance(p.get("text"), str):
            if p["text"]:
                parts.append({"text": p["text"]})
        elif p.get("type") == "image_url":
            img = p.get("image_url")
            url = img.get("url") if isinstance(img, dict) else img
            if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
                head, data = url[5:].split(";base64,", 1)
                parts.append({"inlineData": {"mimeType": head or "image/png", "data": data}})
            else:
                ctx.repaired("content_part_dropped")
        else:
            ctx.repaired("content_part_dropped")
    return parts


def _args(text: Any) -> dict[str, Any]:
    try:
        v = orjson.loads(text) if isinstance(text, str) and text.strip() else {}
    except orjson.JSONDecodeError:
        return {"_raw": text}
    return v if isinstance(v, dict) else {"_raw": text}


def _model_parts(m: dict[str, Any], names: dict[str, str]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    text = _text(m.get("content"))
    if text:
        parts.append({"text": text})
    calls = m.get("tool_calls")
    for tc in calls if isinstance(calls, list) else ():
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            continue
        call: dict[str, Any] = {"name": fn["name"], "args": _args(fn.get("arguments"))}
        call_id = tc.get("id")
        if isinstance(call_id, str) and call_id:
            names[call_id] = fn["name"]
            if not call_id.startswith("gm_"):
                call["id"] = call_id
        part: dict[str, Any] = {"functionCall": call}
        sig = signature_in(tc.get("extra_content"))
        if sig is not None:
            part["thoughtSignature"] = sig
        parts.append(part)
    return parts


def _contents(messages: list[Any], ctx: Ctx) -> tuple[list[str], list[dict[str, Any]]]:
    system: list[str] = []
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # call id → function name (a functionResponse names its call)

    def add(role: str, parts: list[dict[str, Any]]) -> None:
        if not parts:
            return
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})

    for m in messages:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role in ("system", "developer"):
            text = _text(m.get("content"))
            if text:
                system.append(text)
        elif role == "assistant":
            add("model", _model_parts(m, names))
        elif role == "tool":
            call_id = m.get("tool_call_id")
            resp: dict[str, Any] = {
                "name": names.get(call_id, "") if isinstance(call_id, str) else "",
                "response": {"output": _text(m.get("content"))},
            }
            if isinstance(call_id, str) and call_id and not call_id.startswith("gm_"):
                resp["id"] = call_id
            add("user", [{"functionResponse": resp}])
        else:
            add("user", _user_parts(m.get("content"), ctx))
    return system, contents


def _tool_config(choice: Any) -> dict[str, Any] | None:
    if choice == "auto":
        return {"functionCallingConfig": {"mode": "AUTO"}}
    if choice == "required":
        return {"functionCallingConfig": {"mode": "ANY"}}
    if choice == "none":
        return {"functionCallingConfig": {"mode": "NONE"}}
    fn = choice.get("function") if isinstance(choice, dict) else None
    if isinstance(fn, dict) and isinstance(fn.get("name"), str):
        return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [fn["name"]]}}
    return None


def chat_to_gemini(body: dict[str, Any], ctx: Ctx) -> dict[str, Any]:
    messages = body.get("messages")
    system, contents = _contents(messages if isinstance(messages, list) else [], ctx)
    out: dict[str, Any] = {"contents": contents}
    if system:
        out["systemInstruction"] = {"parts": [{"text": "\n\n".join(system)}]}
    decls = []
    tools = body.get("tools")
    for t in tools if isinstance(tools, list) else ():
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            continue
        d: dict[str, Any] = {"name": fn["name"]}
        if isinstance(fn.get("description"), str):
            d["description"] = fn["description"]
        if isinstance(fn.get("parameters"), dict):
            d["parametersJsonSchema"] = fn["parameters"]
        decls.append(d)
    if decls:
        out["tools"] = [{"functionDeclarations": decls}]
        config = _tool_config(body.get("tool_choice"))
        if config is not None:
            out["toolConfig"] = config
    gc: dict[str, Any] = {}
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if isinstance(limit, int) and not isinstance(limit, bool):
        gc["maxOutputTokens"] = limit
    for src, dst in _SAMPLING:
        v = body.get(src)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            gc[dst] = v
    stop = body.get("stop")
    if isinstance(stop, str):
        gc["stopSequences"] = [stop]
    elif isinstance(stop, list) and stop:
        gc["stopSequences"] = stop
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema"):
        gc["responseMimeType"] = "application/json"
        schema = fmt.get("json_schema")
        if isinstance(schema, dict) and isinstance(schema.get("schema"), dict):
            gc["responseJsonSchema"] = schema["schema"]
    thinking: dict[str, Any] = {"includeThoughts": True}
    effort = body.get("reasoning_effort")
    if isinstance(effort, str) and effort in _BUDGETS:
        if "gemini-3" in (ctx.upstream_model or ""):
            thinking["thinkingLevel"] = "low" if effort in ("minimal", "low") else "high"
        else:
            thinking["thinkingBudget"] = _BUDGETS[effort]
    gc["thinkingConfig"] = thinking
    out["generationConfig"] = gc
    return out
