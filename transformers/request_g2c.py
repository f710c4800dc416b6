"""Gemini ``generateContent`` request → Chat Completions request (Gemini CLI → any upstream).

Theory of operation
-------------------
``gemini_to_chat(body, ctx)`` is a pure function of the request, as ``request_m2c`` is for
Messages: one walk over ``contents``, then the tools and the generation settings by the
tables below.  The Bridge's ``gemini`` rows use it, toward Chat directly and toward
Responses and Messages by way of the Chat form.  The app puts the model and the stream flag,
which Gemini sends in the URL, into the body first (``model``, ``stream``).

Contents and parts:

==========================================  ===============================================
Gemini                                      Chat
==========================================  ===============================================
``systemInstruction`` (its text parts, or   the first ``system`` message (parts joined with
a string)                                   ``"\\n"``)
``user`` ``text`` / ``inlineData`` parts    ``user`` content: a string when it is text
                                            only, else ``text`` / ``image_url`` parts (an
                                            image as a ``data:`` URL); other inline data
                                            and ``fileData`` are dropped
                                            (``content_part_dropped``)
``user`` ``functionResponse`` parts         ``tool`` messages first, in part order; the
                                            content is ``response.output`` when that is
                                            the one string in it, else the JSON of
                                            ``response``; its id is the part's ``id``, else
                                            the id of the earliest unanswered call of that
                                            name in the model content before it; one that
                                            matches no call is user text
                                            (``orphan_tool_output_to_user``)
``model`` ``text`` parts                    ``assistant`` content (joined)
``model`` ``thought: true`` parts           the assistant message's reasoning (its text)
``model`` ``functionCall``                  ``tool_calls[]`` ``{id, type: function,
                                            function: {name, arguments: JSON of args}}``;
                                            the id is the part's ``id``, else one minted
                                            from its place (``gm_`` and a hash of the
                                            content and part index and the name: the same
                                            in every request of the conversation)
``thoughtSignature`` on any model part      the proxy's envelope (``envelope.seal``) opens
                                            to the step's reasoning text (it replaces the
                                            thought parts), Gemini's signatures by call
                                            id (``ctx.thought_signatures``) and, toward a
                                            Messages upstream, its signed thinking blocks
                                            (``Ctx.signed``); on a
                                            ``functionCall`` it also rides the call's
                                            ``extra_content.google.thought_signature``, so
                                            a Gemini upstream's row
                                            (``thought_signatures.restore``) decides it as
                                            for any client; Gemini CLI's stand-in
                                            ``skip_thought_signature_validator`` is left
                                            to that row; any other value is dropped
                                            (``thought_signature_rejected``), or without a
                                            key carried as it came
==========================================  ===============================================

Tools and settings:

=============================================  ==========================================
``tools[].functionDeclarations[]``             ``{type: function, function: {name,
                                               description, parameters}}`` from
                                               ``parametersJsonSchema``, else
                                               ``parameters`` (OpenAPI types such as
                                               ``STRING`` lowercased); any other tool
                                               (``googleSearch``, ``codeExecution``…) is
                                               dropped and named (``hosted_tool_dropped``)
``toolConfig.functionCallingConfig.mode``      ``AUTO``/``VALIDATED`` → ``auto``, ``ANY``
                                               → ``required`` (one allowed name: that
                                               function), ``NONE`` → ``none``
``generationConfig.maxOutputTokens``           ``max_tokens``
``temperature``, ``topP``                      ``temperature``, ``top_p``
``stopSequences``, ``topK``, ``seed``,         ``stop``, ``top_k``, ``seed``,
``presencePenalty``, ``frequencyPenalty``      ``presence_penalty``, ``frequency_penalty``:
                                               toward an upstream protocol that has the
                                               setting (``SETTINGS``), else named in
                                               ``ctx.dropped_fields``
                                               (``generationConfig.topK``)
``candidateCount``                             1: the one answer the proxy gives; more: 400
any other key (``responseLogprobs``,           named in ``ctx.dropped_fields``
``mediaResolution``, ``speechConfig``…)
``thinkingConfig.thinkingLevel``               ``reasoning_effort`` (``minimal``/``low`` →
                                               ``low``, ``medium``, ``high``)
``thinkingConfig.thinkingBudget``              0 → no reasoning (``thinking: disabled``
                                               with ``thinking_param``); ≤ 4096 → ``low``,
                                               ≤ 16384 → ``medium``, more → ``high``; -1
                                               (dynamic) → ``medium``
``responseMimeType: application/json``         ``response_format``: ``json_schema`` with
(+ ``responseJsonSchema``/``responseSchema``)  the schema, else ``json_object``
=============================================  ==========================================

A ``functionCall`` without a name, or a content that is not an object, is a 400 naming it
(``contents[i].parts[j].functionCall.name``).
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from .context import Ctx
from .envelope import is_envelope, open_sealed
from .errors import RequestError
from .gemini_encode import ANTHROPIC
from .request_c2m import SIGNED, take_signed
from .request_c2r import force_object_schema, toolinfo_from_chat
from .request_quirks import reasoning_key
from .thought_signatures import ESCAPE

__all__ = ["gemini_to_chat", "minted_id", "schema_from_openapi"]

_EFFORT_OF_LEVEL = {"minimal": "low", "low": "low", "medium": "medium", "high": "high"}

_ALL = frozenset({"chat", "responses", "messages", "gemini"})
# generationConfig settings that become a Chat-form field: (that field, the upstream
# protocols whose own form has the setting; toward another, the setting is named dropped)
SETTINGS: dict[str, tuple[str, frozenset[str]]] = {
    "maxOutputTokens": ("max_tokens", _ALL),
    "temperature": ("temperature", _ALL),
    "topP": ("top_p", _ALL),
    "stopSequences": ("stop", frozenset({"chat", "messages", "gemini"})),
    "topK": ("top_k", frozenset({"messages", "gemini"})),
    "seed": ("seed", frozenset({"chat", "gemini"})),
    "presencePenalty": ("presence_penalty", frozenset({"chat", "gemini"})),
    "frequencyPenalty": ("frequency_penalty", frozenset({"chat", "gemini"})),
}
# generationConfig keys read elsewhere in this module (reasoning, the answer's format, the count)
_READ = frozenset({"thinkingConfig", "responseMimeType", "responseSchema", "responseJsonSchema", "candidateCount"})


def minted_id(i: int, j: int, name: str) -> str:
    """The id of a ``functionCall`` sent without one: the same for the same place and name in
    every request of a conversation (the upstream's prompt cache sees the same history)."""
    return "gm_" + hashlib.sha256(f"{i}:{j}:{name}".encode()).hexdigest()[:24]


def schema_from_openapi(s: Any) -> Any:
    """Gemini's ``parameters`` (an OpenAPI schema: ``type: "STRING"``, ``nullable``) as JSON
    Schema: types lowercased, ``nullable: true`` as a ``null`` type, everything else kept."""
    if isinstance(s, list):
        return [schema_from_openapi(x) for x in s]
    if not isinstance(s, dict):
        return s
    out: dict[str, Any] = {}
    for k, v in s.items():
        if k == "type" and isinstance(v, str):
            out[k] = v.lower()
        elif k == "nullable":
            continue
        elif k in ("properties", "$defs", "definitions") and isinstance(v, dict):
            out[k] = {n: schema_from_openapi(x) for n, x in v.items()}
        elif k in ("items", "anyOf", "oneOf", "allOf", "not", "additionalProperties"):
            out[k] = schema_from_openapi(v)
        else:
            out[k] = v
    if s.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def _parts(content: Any, i: int) -> list[dict[str, Any]]:
    if not isinstance(content, dict):
        raise RequestError(f"contents[{i}] must be an object", param=f"contents[{i}]")
    parts = content.get("parts")
    if parts is None:
        return []
    if not isinstance(parts, list):
        raise RequestError(f"contents[{i}].parts must be an array", param=f"contents[{i}].parts")
    return [p for p in parts if isinstance(p, dict)]


def _text(p: dict[str, Any]) -> str | None:
    t = p.get("text")
    return t if isinstance(t, str) else None


def _image(p: dict[str, Any]) -> dict[str, Any] | None:
    data = p.get("inlineData")
    if not isinstance(data, dict):
        return None
    mime, b64 = data.get("mimeType"), data.get("data")
    if not (isinstance(mime, str) and mime.startswith("image/") and isinstance(b64, str)):
        return None
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{b64}"}}


def _result_text(response: Any) -> str:
    if isinstance(response, dict) and len(response) == 1 and isinstance(response.get("output"), str):
        return response["output"]
    return orjson.dumps(response if response is not None else {}).decode()


class _Walk:
    """One walk over ``contents``: the Chat messages, the calls still waiting for their
    response (name → ids, in order)."""

    def __init__(self, ctx: Ctx, signed: bool) -> None:
        self.ctx = ctx
        self.signed = signed
        self.out: list[dict[str, Any]] = []
        self.waiting: dict[str, list[str]] = {}

    def model(self, i: int, parts: list[dict[str, Any]]) -> None:
        ctx = self.ctx
        texts: list[str] = []
        thoughts: list[str] = []
        sealed: list[str] = []
        calls: list[dict[str, Any]] = []
        blocks: list[dict[str, Any]] = []  # an Anthropic upstream's signed thinking blocks
        self.waiting = {}
        for j, p in enumerate(parts):
            sig = p.get("thoughtSignature")
            carry: str | None = None  # what rides the call's extra_content
            if is_envelope(sig):
                status, text, signatures = open_sealed(sig, ctx.envelope_key)
                if status == "ok":
                    carry = sig
                    anthropic = signatures.pop(ANTHROPIC, None)
                    if anthropic is not None and self.signed:
                        got = orjson.loads(anthropic)
                        blocks += [b for b in got if isinstance(b, dict)] if isinstance(got, list) else []
                    ctx.thought_signatures.update(signatures)
                    if text:
                        sealed.append(text)
                else:  # ours, but it does not open: the app reports it
                    ctx.envelope_rejected.append(("reasoning", status))
            elif sig == ESCAPE:
                pass  # Gemini CLI's own stand-in: the Gemini row puts it where it is due
            elif isinstance(sig, str) and sig:
                if ctx.envelope_key:
                    ctx.repaired("thought_signature_rejected")  # not the proxy's: never sent on
                else:
                    carry = sig  # nothing to check it against: as Gemini wrote it (a Chat client's too)
            fc = p.get("functionCall")
            if isinstance(fc, dict):
                name = fc.get("name")
                if not isinstance(name, str) or not name:
                    raise RequestError(f"contents[{i}].parts[{j}].functionCall has no name",
                                       param=f"contents[{i}].parts[{j}].functionCall.name")  # fmt: skip
                call_id = fc.get("id")
                if not isinstance(call_id, str) or not call_id:
                    call_id = minted_id(i, j, name)
                args = fc.get("args")
                call: dict[str, Any] = {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": orjson.dumps(args if args is not None else {}).decode()},
                }
                if carry is not None:  # Gemini's signature for it, as any client's Chat call carries it
                    call["extra_content"] = {"google": {"thought_signature": carry}}
                calls.append(call)
                self.waiting.setdefault(name, []).append(call_id)
                continue
            text = _text(p)
            if text:
                (thoughts if p.get("thought") is True else texts).append(text)
            elif "text" not in p and sig is None:
                ctx.repaired("content_part_dropped")  # executable code, inline data… no Chat form
        msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
        if calls:
            msg["tool_calls"] = calls
        reasoning = sealed or thoughts
        if reasoning:
            msg[reasoning_key(ctx)] = "\n\n".join(reasoning)
        if blocks:  # toward a Messages upstream: its own thinking blocks, as it signed them
            msg[SIGNED] = blocks
        if msg["content"] is not None or calls:
            self.out.append(msg)

    def user(self, i: int, parts: list[dict[str, Any]]) -> None:
        content: list[dict[str, Any]] = []
        for j, p in enumerate(parts):
            fr = p.get("functionResponse")
            if isinstance(fr, dict):
                self._response(i, j, fr)
                continue
            text = _text(p)
            if text:
                content.append({"type": "text", "text": text})
            elif text is None:
                img = _image(p)
                if img is not None:
                    content.append(img)
                else:
                    self.ctx.repaired("content_part_dropped")
        if not content:
            return
        if all(c["type"] == "text" for c in content):
            self.out.append({"role": "user", "content": "\n".join(c["text"] for c in content)})
        else:
            self.out.append({"role": "user", "content": content})

    def _response(self, i: int, j: int, fr: dict[str, Any]) -> None:
        given = fr.get("name")
        name = given if isinstance(given, str) else ""
        call_id = fr.get("id")
        waiting = self.waiting.get(name) or []
        if isinstance(call_id, str) and call_id:
            if call_id in waiting:
                waiting.remove(call_id)
        elif waiting:
            call_id = waiting.pop(0)
        else:
            call_id = None
        text = _result_text(fr.get("response"))
        if call_id is None:
            self.ctx.repaired("orphan_tool_output_to_user")
            self.out.append({"role": "user", "content": f"[{name} result]\n{text}"})
            return
        self.out.append({"role": "tool", "tool_call_id": call_id, "content": text})


def _system(body: dict[str, Any]) -> str | None:
    si = body.get("systemInstruction")
    if si is None:
        return None
    if isinstance(si, str):
        return si or None
    if isinstance(si, dict):
        parts = si.get("parts")
        if isinstance(parts, list):
            text = "\n".join(t for p in parts if isinstance(p, dict) and (t := _text(p)))
            return text or None
        return None
    raise RequestError("'systemInstruction' must be a content object", param="systemInstruction")


def _tools(tools: Any, ctx: Ctx) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, t in enumerate(tools if isinstance(tools, list) else ()):
        if not isinstance(t, dict):
            continue
        for kind in t:
            if kind != "functionDeclarations":  # googleSearch, codeExecution, urlContext…
                ctx.tools.dropped.append(kind)
                ctx.repaired("hosted_tool_dropped")
        decls = t.get("functionDeclarations")
        for j, d in enumerate(decls if isinstance(decls, list) else ()):
            if not isinstance(d, dict):
                continue
            name = d.get("name")
            if not isinstance(name, str) or not name:
                raise RequestError(f"tools[{i}].functionDeclarations[{j}] has no name",
                                   param=f"tools[{i}].functionDeclarations[{j}].name")  # fmt: skip
            schema = d.get("parametersJsonSchema")
            if schema is None and d.get("parameters") is not None:
                schema = schema_from_openapi(d["parameters"])
            params, forced = force_object_schema(schema)
            if forced and schema is not None:
                ctx.repaired("tool_schema_type_object")
            fn: dict[str, Any] = {"name": name, "parameters": params}
            if isinstance(d.get("description"), str):
                fn["description"] = d["description"]
            out.append({"type": "function", "function": fn})
    return out


def _tool_choice(config: Any) -> Any:
    fcc = config.get("functionCallingConfig") if isinstance(config, dict) else None
    if not isinstance(fcc, dict):
        return None
    mode = fcc.get("mode")
    if mode == "NONE":
        return "none"
    if mode == "ANY":
        names = fcc.get("allowedFunctionNames")
        if isinstance(names, list) and len(names) == 1 and isinstance(names[0], str):
            return {"type": "function", "function": {"name": names[0]}}
        return "required"
    if mode in ("AUTO", "VALIDATED"):
        return "auto"
    return None


def _thinking(gc: dict[str, Any], out: dict[str, Any], ctx: Ctx) -> None:
    tc = gc.get("thinkingConfig")
    if not isinstance(tc, dict):
        return
    effort: str | None = None
    level = tc.get("thinkingLevel")
    budget = tc.get("thinkingBudget")
    if isinstance(level, str):
        effort = _EFFORT_OF_LEVEL.get(level.lower())
    elif isinstance(budget, int) and not isinstance(budget, bool):
        if budget == 0:
            if ctx.on("thinking_param"):
                out["thinking"] = {"type": "disabled"}
            return
        effort = "medium" if budget < 0 else "low" if budget <= 4096 else "medium" if budget <= 16384 else "high"
    if effort is None:
        return
    if ctx.on("thinking_param"):
        out["thinking"] = {"type": "enabled"}
    else:
        out["reasoning_effort"] = effort


def _format(gc: dict[str, Any]) -> dict[str, Any] | None:
    if gc.get("responseMimeType") != "application/json":
        return None
    schema = gc.get("responseJsonSchema")
    if schema is None and gc.get("responseSchema") is not None:
        schema = schema_from_openapi(gc["responseSchema"])
    if isinstance(schema, dict):
        return {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}
    return {"type": "json_object"}


_INTEGERS = frozenset({"maxOutputTokens", "topK", "seed"})


def _bad_setting(key: str, want: str) -> RequestError:
    return RequestError(f"generationConfig.{key} must be {want}", param=f"generationConfig.{key}", code="invalid_type")


def _settings(gc: dict[str, Any], out: dict[str, Any], ctx: Ctx, toward: str) -> None:
    """The generationConfig settings ``SETTINGS`` maps, toward the upstream protocol
    ``toward``; every other key, and a setting that upstream lacks, named dropped."""
    for key, v in gc.items():
        setting = SETTINGS.get(key)
        if setting is None:
            if key not in _READ:
                ctx.dropped_fields.append(f"generationConfig.{key[:64]}")
            continue
        field, forms = setting
        if v is None:
            continue
        if toward not in forms:
            ctx.dropped_fields.append(f"generationConfig.{key}")
            continue
        if key == "stopSequences":
            if not isinstance(v, list):
                raise _bad_setting(key, "an array of strings")
            if v:
                out["stop"] = v
        elif not isinstance(v, int | float) or isinstance(v, bool):
            raise _bad_setting(key, "a number")
        elif key in _INTEGERS:
            if v != int(v):
                raise _bad_setting(key, "an integer")
            out[field] = int(v)
        else:
            out[field] = v
    count = gc.get("candidateCount")
    if count is not None and count != 1:
        raise RequestError(
            "generationConfig.candidateCount: this proxy answers one candidate; send 1, or leave it out",
            param="generationConfig.candidateCount",
            code="invalid_value",
        )


def gemini_to_chat(body: dict[str, Any], ctx: Ctx, *, signed: bool = False, toward: str = "chat") -> dict[str, Any]:
    """``signed``: toward a Messages upstream, its signed thinking blocks sealed in a call's
    ``thoughtSignature`` go to ``ctx.signed``, by their assistant message's index;
    ``toward``: the upstream's protocol (which settings it has: ``SETTINGS``)."""
    walk = _Walk(ctx, signed)
    system = _system(body)
    if system:
        walk.out.append({"role": "system", "content": system})
    contents = body.get("contents")
    if not isinstance(contents, list):
        raise RequestError("'contents' must be an array", param="contents")
    for i, c in enumerate(contents):
        parts = _parts(c, i)
        role = c.get("role")
        if role == "model":
            walk.model(i, parts)
        elif role in ("user", None, "function"):
            walk.user(i, parts)
        else:
            raise RequestError(f"contents[{i}] has unsupported role {role!r}", param=f"contents[{i}].role")
    if signed:
        take_signed(walk.out, ctx)
    out: dict[str, Any] = {"model": ctx.upstream_model or body.get("model"), "messages": walk.out}
    tools = _tools(body.get("tools"), ctx)
    if tools:
        out["tools"] = tools
        choice = _tool_choice(body.get("toolConfig"))
        if choice is not None:
            out["tool_choice"] = choice
    dropped = list(ctx.tools.dropped)
    ctx.tools = toolinfo_from_chat(out.get("tools"))
    ctx.tools.dropped = dropped
    gc = body.get("generationConfig")
    if isinstance(gc, dict):
        _thinking(gc, out, ctx)
        _settings(gc, out, ctx, toward)
        fmt = _format(gc)
        if fmt is not None:
            out["response_format"] = fmt
    if "max_tokens" not in out and ctx.max_output_tokens is not None:
        out["max_tokens"] = ctx.max_output_tokens
    if body.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out
