"""Responses request → Chat Completions request (Codex → Kimi, MiMo, DeepSeek, GLM, vLLM),
docs/rules.md §7.1.

Theory of operation
-------------------
``responses_to_chat(body, ctx)`` is a pure function of the request (plus the quirk names
and the envelope key in ``ctx``): it builds the Chat ``messages`` from ``instructions`` and
``input`` in one walk, maps the tools and the top-level fields by the tables below, and
fills ``ctx.tools`` so the stream stages can map calls back (custom tools, namespaces,
dropped hosted tools).  The request-side quirks (MiMo, Kimi…) run afterwards in
``request_quirks.prepare_chat(..., translated=True)``.

Input items → messages:

==============================  ==========================================================
Responses                       Chat
==============================  ==========================================================
``instructions``                first ``system`` message
``message`` developer/system    ``system`` (in place, in order)
``message`` user                ``user``; text-only parts joined with ``"\\n"`` into one
                                string, else parts ``text``/``image_url``/``file``
``message`` assistant           ``assistant`` with the ``output_text`` (and ``refusal``)
                                text joined into one string
consecutive ``function_call``/  ONE ``assistant{content:null,tool_calls:[…]}``; when they
``custom_tool_call`` items      directly follow an assistant ``message`` item they join it
                                (one Chat answer = text + calls, as the model produced it)
``function_call``               ``{id, type:function, function:{name, arguments}}``; name =
                                ``flatten_name(namespace, name)`` when namespaced; empty
                                arguments → ``"{}"``
``custom_tool_call``            arguments = ``{"input": <raw>}`` (orjson, byte-exact after
                                decoding)
``function_call_output`` /      ``tool{tool_call_id, content}`` placed right after its
``custom_tool_call_output``     call's assistant message (out-of-place outputs are moved
                                there, ``tool_output_reordered``); an array output is
                                joined from its text parts with ``"\\n"``; its
                                ``input_image``/``input_file`` parts move to a ``user``
                                message after the block of tool messages
``reasoning``                   ``reasoning_content`` (``reasoning`` with the
                                ``reasoning_key_reasoning`` quirk) on the NEXT assistant
                                message; reasoning left over at a user turn or at the end
                                attaches back to the previous assistant message of the same
                                turn, never across a user turn (else dropped,
                                ``reasoning_unattached_dropped``).  Text: the proxy envelope
                                opened with ``ctx.envelope_key``, else the ``summary_text``
                                parts, else the ``reasoning_text`` content, parts and
                                consecutive items joined with ``"\\n\\n"``.  OpenAI
                                ``encrypted_content`` is dropped.  Gemini thought
                                signatures in the envelope go to
                                ``ctx.thought_signatures`` (thought_signatures.py)
any other item                  ``transformers/items.py`` handled it before (translated,
                                resolved, dropped as a named repair or refused); one that
                                still gets here is dropped (``input_item_dropped``) and
                                named in ``ctx.dropped_items``
==============================  ==========================================================

With ``reasoning_replay``, the request quirks' pass of that name then gives every
assistant tool-call message still without reasoning the placeholder ``"tool call"`` (after
the trailing reasoning was attached here).

Tool-call ids: docs/rules.md §1 Chat policy (canonical ``functions.<name>:<idx>`` verbatim at any
length; others sanitised and cut to 64), or the strict policy with ``strict_tool_ids``,
through the uniqueness pass over every call id of the request.

Transcript rules (docs/rules.md F17, F18):

* every assistant ``tool_calls`` message is immediately followed by one ``tool`` message
  per call; a call without any output is a 400 with ``param: "input[<i>]"`` (the call's
  index): Chat upstreams reject such a transcript and an invented output would lie to the
  model;
* **orphan policy**: an output whose ``call_id`` matches no call (or a second output for
  an already answered call) is kept as a ``user`` message
  ``"[tool output for <call_id>]: <text>"`` and counted as
  ``orphan_tool_output_to_user``; nothing is dropped, no id is invented, and the session
  never wedges.

Tools:

=========================  ================================================================
``function``               ``{type:function,function:{name,description,parameters,strict}}``,
                           ``parameters.type`` forced to ``object`` (docs/rules.md F16); one
                           required string parameter → ``ctx.tools.single_string_param``
                           (the R3-a′ wrap, as for Chat clients)
``custom``                 a function with one required string ``input``; the description
                           embeds the original description and the grammar/format
``namespace``              each child flattened with ``flatten_name``; recorded in
                           ``ctx.tools.namespaces``
anything else (hosted:     dropped, named in ``ctx.tools.dropped``
``web_search``,            (``hosted_tool_dropped``); the app reports them to the client.
``image_generation``, …)   When they are the request's only tools (and ``tool_choice`` is
                           not ``none``) the request is refused, 400 ``tools[0]``: the model
                           could not do what it was asked
=========================  ================================================================

A function, custom or namespace tool without a string name, or with a description that is
not a string, is a 400 naming it (``tools[<i>].name``, ``tools[<i>].tools[<j>].name``…): a
tool is never dropped silently.  So is an input item whose ``type`` or ``role`` is not a
string (``app.pipeline.check_body`` refuses all of these first, with the same params).

Top level:

==========================  ===============================================================
``model``                   ``ctx.upstream_model``
``tool_choice``             strings as is; ``{type:function|custom,name[,namespace]}`` →
                            ``{type:function,function:{name:<flat>}}``;
                            ``allowed_tools{mode,tools}`` → ``mode`` with the tool list
                            filtered; ``namespace`` or a hosted tool → ``auto``
(no tools left)             ``tools``, ``tool_choice``, ``parallel_tool_calls`` omitted
``parallel_tool_calls``     kept
``reasoning.effort``        ``reasoning_effort``, or ``thinking:{type:enabled|disabled}``
                            with ``thinking_param`` (``none``/``minimal`` → disabled)
``text.format``             ``response_format`` (``json_schema`` nested; ``text`` omitted)
``max_output_tokens``       (or ``ctx.max_output_tokens``) → ``max_completion_tokens`` with
                            ``max_completion_tokens``/``mimo_request``/``kimi_request``,
                            else ``max_tokens``
``stream``                  ``stream`` + ``stream_options:{include_usage:true}``
``prompt_cache_key``        kept with ``moonshot_fields``, ``kimi_request`` or
                            ``prompt_cache_key`` (OpenAI, Azure)
``temperature``, ``top_p``  kept
dropped                     ``store``, ``include``, ``service_tier``, ``client_metadata``,
                            ``truncation``, ``metadata``, ``user``, ``safety_identifier``,
                            ``text.verbosity``, ``reasoning.summary``, ``top_logprobs``,
                            ``max_tool_calls``, ``background``, ``conversation``,
                            ``prompt``, ``prompt_cache_retention``, ``stream_options``,
                            ``previous_response_id`` (the app expands it from its store
                            before translation), any other unknown field
==========================  ===============================================================
"""

from __future__ import annotations

from typing import Any

import orjson

from .context import Ctx, ToolInfo, flatten_name, one_string_param
from .envelope import is_envelope, open_sealed
from .errors import RequestError
from .ids import MAX_CALL_ID, chat_policy, strict_policy, unique_map
from .request_c2m import SIGNED, take_signed
from .request_c2r import force_object_schema
from .request_quirks import reasoning_key

__all__ = ["responses_to_chat", "HOSTED_TOOLS", "CUSTOM_INPUT_PARAM"]

HOSTED_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "image_generation",
        "file_search",
        "tool_search",
        "local_shell",
        "code_interpreter",
        "computer_use",
        "computer_use_preview",
        "mcp",
    }
)
CUSTOM_INPUT_PARAM = "input"
CALL_TYPES = frozenset({"function_call", "custom_tool_call"})
OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})
_CALL_OR_OUTPUT = CALL_TYPES | OUTPUT_TYPES
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


def _is_text_part(p: dict[str, Any]) -> bool:
    kind = p.get("type", "text")
    return isinstance(kind, str) and kind in _TEXT_PARTS


_KEEP = ("temperature", "top_p")


# -- tools -----------------------------------------------------------------------------------


def _function_tool(name: str, tool: dict[str, Any], ctx: Ctx) -> dict[str, Any]:
    params, forced = force_object_schema(tool.get("parameters"))
    if forced:
        ctx.repaired("tool_schema_type_object")
    fn: dict[str, Any] = {"name": name}
    if tool.get("description") is not None:
        fn["description"] = tool["description"]
    fn["parameters"] = params
    if tool.get("strict") is not None:
        fn["strict"] = tool["strict"]
    return {"type": "function", "function": fn}


def _custom_description(tool: dict[str, Any]) -> str:
    desc = tool.get("description")
    parts = [desc] if isinstance(desc, str) and desc else []
    parts.append(
        f'Call this tool with a JSON object {{"{CUSTOM_INPUT_PARAM}": "<text>"}}: the string is '
        "passed to the tool verbatim as its raw freeform input."
    )
    fmt = tool.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "grammar":
        parts.append(
            f"The input must match this {fmt.get('syntax') or 'grammar'} grammar:\n{fmt.get('definition') or ''}"
        )
    elif isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        parts.append("Input format: " + orjson.dumps(fmt, option=orjson.OPT_SORT_KEYS).decode())
    return "\n\n".join(parts)


def _custom_tool(name: str, tool: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": _custom_description(tool),
            "parameters": {
                "type": "object",
                "properties": {CUSTOM_INPUT_PARAM: {"type": "string", "description": "The raw freeform input."}},
                "required": [CUSTOM_INPUT_PARAM],
            },
        },
    }


def _tools(tools: Any, ctx: Ctx) -> list[dict[str, Any]]:
    info = ctx.tools
    out: list[dict[str, Any]] = []
    if not isinstance(tools, list):
        return out

    def add(name: Any, tool: dict[str, Any], namespace: str | None, where: str) -> None:
        if not isinstance(name, str) or not name:
            raise RequestError(f"{where} has no name", param=f"{where}.name")
        if tool.get("description") is not None and not isinstance(tool["description"], str):
            raise RequestError(f"{where}.description must be a string", param=f"{where}.description")
        flat = flatten_name(namespace, name) if namespace else name
        if namespace:
            info.namespaces[flat] = (namespace, name)
        if tool.get("type") == "custom":
            info.custom[flat] = tool
            out.append(_custom_tool(flat, tool))
        else:
            info.functions.add(flat)
            param = one_string_param(tool.get("parameters"))
            if param is not None:  # the R3-a′ shape (kosong's and Kimi Code's Responses apply_patch)
                info.single_string_param[flat] = param
            out.append(_function_tool(flat, tool, ctx))

    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            continue
        kind = tool.get("type")
        if kind in ("function", "custom"):
            add(tool.get("name"), tool, None, f"tools[{i}]")
        elif kind == "namespace" and isinstance(tool.get("tools"), list):
            ns = tool.get("name")
            if not isinstance(ns, str) or not ns:
                raise RequestError(f"tools[{i}] (namespace) has no name", param=f"tools[{i}].name")
            for j, child in enumerate(tool["tools"]):
                if isinstance(child, dict) and child.get("type", "function") in ("function", "custom"):
                    add(child.get("name"), child, ns, f"tools[{i}].tools[{j}]")
        else:
            info.dropped.append(kind if isinstance(kind, str) else str(kind))
            ctx.repaired("hosted_tool_dropped")
    return out


def _flat(choice: dict[str, Any]) -> str | None:
    name, ns = choice.get("name"), choice.get("namespace")
    if not isinstance(name, str):
        return None
    return flatten_name(ns, name) if isinstance(ns, str) and ns else name


def _tool_choice(choice: Any, tools: list[dict[str, Any]], ctx: Ctx) -> tuple[Any, list[dict[str, Any]]]:
    if not isinstance(choice, dict):
        return choice, tools
    kind = choice.get("type")
    if kind in ("function", "custom") and _flat(choice):
        return {"type": "function", "function": {"name": _flat(choice)}}, tools
    if kind == "allowed_tools":
        allowed: set[str] = set()
        entries = choice.get("tools")
        for entry in entries if isinstance(entries, list) else ():
            if not isinstance(entry, dict):
                continue
            if entry.get("type") == "namespace":
                allowed.update(f for f, (ns, _) in ctx.tools.namespaces.items() if ns == entry.get("name"))
            elif _flat(entry):
                allowed.add(_flat(entry))  # type: ignore[arg-type]
        kept = [t for t in tools if t["function"]["name"] in allowed]
        return choice.get("mode") or "auto", kept
    return "auto", tools  # namespace, hosted tool, unknown


# -- input items -----------------------------------------------------------------------------


def _text(content: Any, sep: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    out = []
    for p in content:
        if isinstance(p, dict):
            if p.get("type") == "refusal" and isinstance(p.get("refusal"), str):
                out.append(p["refusal"])
            elif isinstance(p.get("text"), str) and _is_text_part(p):
                out.append(p["text"])
    return sep.join(out)


def _media_part(p: dict[str, Any], ctx: Ctx) -> dict[str, Any] | None:
    kind = p.get("type")
    if kind == "input_image" and isinstance(p.get("image_url"), str):
        img: dict[str, Any] = {"url": p["image_url"]}
        if p.get("detail") is not None:
            img["detail"] = p["detail"]
        return {"type": "image_url", "image_url": img}
    if kind == "input_file":
        f = {k: p[k] for k in ("file_id", "file_data", "filename") if p.get(k) is not None}
        return {"type": "file", "file": f}
    ctx.repaired("content_part_dropped")  # file_id-only images, audio, unknown parts
    return None


def _split_parts(content: Any, ctx: Ctx) -> tuple[list[str], list[dict[str, Any]]]:
    """(text parts, media parts in Chat form) of a Responses content list."""
    texts: list[str] = []
    media: list[dict[str, Any]] = []
    for p in content:
        if not isinstance(p, dict):
            continue
        if _is_text_part(p) and isinstance(p.get("text"), str):
            texts.append(p["text"])
        else:
            part = _media_part(p, ctx)
            if part is not None:
                media.append(part)
    return texts, media


def _user_content(content: Any, ctx: Ctx) -> Any:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    has_media = any(isinstance(p, dict) and not _is_text_part(p) for p in content)
    if not has_media:
        return "\n".join(_split_parts(content, ctx)[0])
    parts: list[dict[str, Any]] = []
    for p in content:
        if not isinstance(p, dict):
            continue
        if _is_text_part(p) and isinstance(p.get("text"), str):
            parts.append({"type": "text", "text": p["text"]})
        else:
            part = _media_part(p, ctx)
            if part is not None:
                parts.append(part)
    return parts


def _tool_output(output: Any, ctx: Ctx) -> tuple[str, list[dict[str, Any]]]:
    """(tool message text, media parts to move into a following user message)."""
    if isinstance(output, str):
        return output, []
    if isinstance(output, list):
        texts, media = _split_parts(output, ctx)
        return "\n".join(texts), media
    if output is None:
        return "", []
    return orjson.dumps(output).decode(), []


def _reasoning_text(item: dict[str, Any], ctx: Ctx) -> str:
    status, opened, signatures = open_sealed(item.get("encrypted_content"), ctx.envelope_key)
    if signatures:  # Gemini's thought signatures, by call id (transformers/thought_signatures.py)
        ctx.thought_signatures.update(signatures)
    if opened is not None:
        return opened
    if status != "foreign":  # ours but it does not open: the summary stands in, the app reports it
        ctx.envelope_rejected.append(("reasoning", status))
    for field, kind in (("summary", "summary_text"), ("content", "reasoning_text")):
        parts = item.get(field)
        if isinstance(parts, list):
            texts = [
                p["text"]
                for p in parts
                if isinstance(p, dict) and p.get("type", kind) == kind and isinstance(p.get("text"), str) and p["text"]
            ]
            if texts:
                return "\n\n".join(texts)
    return ""


def _item_kind(item: dict[str, Any]) -> str | None:
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return kind


class _Transcript:
    """Builds the Chat messages in one walk over the input items."""

    __slots__ = ("ctx", "items", "kinds", "ids", "key", "messages", "pending", "turn_assistant", "prev_assistant",
                 "group", "group_calls", "answer", "claimed", "signed")  # fmt: skip

    def __init__(
        self,
        items: list[dict[str, Any]],
        kinds: list[Any],
        ids: dict[str, str],
        answer: dict[int, int],
        ctx: Ctx,
        signed: bool = False,
    ):
        self.ctx = ctx
        # toward a Messages upstream: Anthropic-signed thinking blocks waiting, as pending
        # (None: not collected)
        self.signed: list[dict[str, Any]] | None = [] if signed else None
        self.items = items
        self.kinds = kinds  # _item_kind of each item
        self.ids = ids
        self.answer = answer  # call item index → its output item index
        self.claimed = frozenset(answer.values())
        self.key = reasoning_key(ctx)
        self.messages: list[dict[str, Any]] = []
        self.pending: list[str] = []  # reasoning waiting for the next assistant message
        self.turn_assistant: dict[str, Any] | None = None  # last assistant message of this turn
        self.prev_assistant: dict[str, Any] | None = None  # assistant message of the item just before
        self.group: dict[str, Any] | None = None  # assistant message collecting tool calls
        self.group_calls: list[int] = []

    # reasoning
    def _attach_pending(self, msg: dict[str, Any]) -> None:
        if self.signed:
            msg.setdefault(SIGNED, []).extend(self.signed)
            self.signed = []
        if self.pending:
            text = "\n\n".join(self.pending)
            self.pending = []
            old = msg.get(self.key)
            msg[self.key] = f"{old}\n\n{text}" if old else text

    def _settle_pending(self) -> None:
        """End of a turn (user message or end of input): leftover reasoning attaches back."""
        if self.pending:
            if self.turn_assistant is not None:
                self._attach_pending(self.turn_assistant)
            else:
                self.pending = []
                if self.signed:
                    self.signed = []
                self.ctx.repaired("reasoning_unattached_dropped")

    def _assistant(self, content: Any) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        self._attach_pending(msg)
        self.messages.append(msg)
        self.turn_assistant = msg
        return msg

    # tool calls
    def _call(self, i: int, item: dict[str, Any], kind: str) -> None:
        call_id, name = item.get("call_id"), item.get("name")
        if not isinstance(call_id, str) or not call_id:
            raise RequestError(f"input[{i}] ({kind}) has no call_id", param=f"input[{i}].call_id")
        if not isinstance(name, str) or not name:
            raise RequestError(f"input[{i}] ({kind}) has no name", param=f"input[{i}].name")
        ns = item.get("namespace")
        flat = flatten_name(ns, name) if isinstance(ns, str) and ns else name
        if kind == "custom_tool_call":
            raw = item.get("input")
            args = orjson.dumps({CUSTOM_INPUT_PARAM: raw if isinstance(raw, str) else ""}).decode()
        else:
            given = item.get("arguments")
            if isinstance(given, str):
                args = given
            else:
                args = "{}" if given is None else orjson.dumps(given).decode()
            if args == "":
                args = "{}"
                self.ctx.repaired("empty_arguments")
        if self.group is None:
            prev = self.prev_assistant
            if prev is not None and "tool_calls" not in prev:
                self.group = prev
                if not prev.get("content"):
                    prev["content"] = None
            else:
                self.group = self._assistant(None)
            self.group["tool_calls"] = []
            self.group_calls = []
        self.group["tool_calls"].append(
            {"id": self.ids[call_id], "type": "function", "function": {"name": flat, "arguments": args}}
        )
        self.group_calls.append(i)

    def _flush(self) -> None:
        if self.group is None:
            return
        media_msgs: list[dict[str, Any]] = []
        outs: list[int] = []
        for i in self.group_calls:
            j = self.answer.get(i)
            if j is None:
                call_id = self.items[i].get("call_id")
                raise RequestError(
                    f"No tool output found for {self.items[i].get('type')} call_id {call_id!r} (input[{i}]): "
                    "every tool call must be followed by its output",
                    param=f"input[{i}]",
                )
            outs.append(j)
            out = self.items[j]
            text, media = _tool_output(out.get("output"), self.ctx)
            self.messages.append({"role": "tool", "tool_call_id": self.ids[out["call_id"]], "content": text})
            if media:
                media_msgs.append({"role": "user", "content": media})
        last = self.group_calls[-1]
        if sorted(outs) != list(range(last + 1, last + 1 + len(outs))):
            self.ctx.repaired("tool_output_reordered")
        self.messages.extend(media_msgs)
        self.group = None
        self.group_calls = []

    # the walk
    def walk(self) -> list[dict[str, Any]]:
        for i, (item, kind) in enumerate(zip(self.items, self.kinds)):
            if kind in CALL_TYPES:
                self._call(i, item, kind)
                self.prev_assistant = None
                continue
            if self.group is not None:
                self._flush()
            self.prev_assistant = None  # only an assistant message item sets it again
            if kind == "message":
                self._message(i, item)
            elif kind in OUTPUT_TYPES:
                if i not in self.claimed:  # claimed outputs are placed after their call
                    self._orphan(item)
            elif kind == "reasoning":
                text = _reasoning_text(item, self.ctx)
                blob = item.get("encrypted_content")
                if self.signed is not None and isinstance(blob, str) and blob and not is_envelope(blob):
                    # an Anthropic upstream's: its signature (a thinking block), or the data of a
                    # redacted_thinking block (no text)
                    self.signed.append(
                        {"type": "thinking", "thinking": text, "signature": blob}
                        if text
                        else {"type": "redacted_thinking", "data": blob}
                    )
                if text:
                    self.pending.append(text)
            else:  # items.prepare handles every type first: only a direct call gets here
                self.ctx.dropped_items.append(f"input[{i}]:{kind}")
                self.ctx.repaired("input_item_dropped")
        self._flush()
        self._settle_pending()
        return self.messages

    def _message(self, i: int, item: dict[str, Any]) -> None:
        role = item.get("role")
        content = item.get("content")
        if role == "user":
            self._settle_pending()
            self.turn_assistant = None
            self.messages.append({"role": "user", "content": _user_content(content, self.ctx)})
        elif role in ("system", "developer"):
            self.messages.append({"role": "system", "content": _text(content, "\n")})
        elif role == "assistant":
            self.prev_assistant = self._assistant(_text(content, ""))
        else:
            raise RequestError(f"input[{i}] has unsupported role {role!r}", param=f"input[{i}].role")

    def _orphan(self, item: dict[str, Any]) -> None:
        text, media = _tool_output(item.get("output"), self.ctx)
        call_id = item.get("call_id") if isinstance(item.get("call_id"), str) else "(no call_id)"
        content: Any = f"[tool output for {call_id}]: {text}"
        if media:
            content = [{"type": "text", "text": content}, *media]
        self.messages.append({"role": "user", "content": content})
        self.ctx.repaired("orphan_tool_output_to_user")


def _pair_outputs(items: list[dict[str, Any]], kinds: list[Any]) -> dict[int, int]:
    """call item index → index of its output: each call takes the first unclaimed output with
    the same call_id, wherever it is in the input.  Outputs nobody claims are orphans."""
    free: dict[str, list[int]] = {}
    calls: list[int] = []
    for j, (it, kind) in enumerate(zip(items, kinds)):
        if kind in OUTPUT_TYPES:
            if isinstance(it.get("call_id"), str):
                free.setdefault(it["call_id"], []).append(j)
        elif kind in CALL_TYPES:
            calls.append(j)
    answer: dict[int, int] = {}
    for i in calls:
        call_id = items[i].get("call_id")
        if isinstance(call_id, str):
            queue = free.get(call_id)
            if queue:
                answer[i] = queue.pop(0)
    return answer


def _input(body: dict[str, Any]) -> list[dict[str, Any]]:
    raw = body.get("input")
    if raw is None:
        return []
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    if not isinstance(raw, list):
        raise RequestError("'input' must be a string or an array of items", param="input")
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise RequestError(f"input[{i}] must be an object", param=f"input[{i}]")
        for key in ("type", "role"):
            if item.get(key) is not None and not isinstance(item[key], str):
                raise RequestError(f"input[{i}].{key} must be a string", param=f"input[{i}].{key}")
    return raw


# -- entry point -----------------------------------------------------------------------------


def responses_to_chat(body: dict[str, Any], ctx: Ctx, *, signed: bool = False) -> dict[str, Any]:
    """``signed``: toward a Messages upstream, keep Anthropic-signed reasoning as thinking
    blocks on the assistant messages (``Ctx.signed``, by message index)."""
    items = _input(body)
    ctx.tools = ToolInfo()

    kinds = [_item_kind(it) for it in items]
    raw_ids = [
        it["call_id"]
        for it, kind in zip(items, kinds)
        if kind in _CALL_OR_OUTPUT and isinstance(it.get("call_id"), str)
    ]
    policy = strict_policy if ctx.on("strict_tool_ids") else chat_policy
    ids = unique_map(raw_ids, policy, MAX_CALL_ID)
    if any(k != v for k, v in ids.items()):
        ctx.repaired("tool_call_ids_normalized")

    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    elif instructions is not None and not isinstance(instructions, str):
        raise RequestError("'instructions' must be a string", param="instructions")
    messages.extend(_Transcript(items, kinds, ids, _pair_outputs(items, kinds), ctx, signed).walk())
    if signed:
        take_signed(messages, ctx)
    if ctx.thought_signatures:  # by the ids the calls go upstream with
        ctx.thought_signatures = {ids.get(k, k): v for k, v in ctx.thought_signatures.items()}

    out: dict[str, Any] = {"model": ctx.upstream_model or body.get("model"), "messages": messages}

    tools = _tools(body.get("tools"), ctx)
    if not tools and ctx.tools.dropped and body.get("tool_choice") != "none":
        # every tool offered is hosted: without them the model could not do what it was asked
        raise RequestError(
            f"tools[0] ({ctx.tools.dropped[0]}) is a hosted tool, which this model's upstream (a Chat Completions "
            f"API) cannot run, and the request offers no other tool: {', '.join(ctx.tools.dropped)}. Offer function "
            "tools, or use a model on an OpenAI upstream.",
            param="tools[0]",
            code="unsupported_tool",
        )
    choice, tools = _tool_choice(body.get("tool_choice"), tools, ctx)
    if tools:
        out["tools"] = tools
        if choice is not None:
            out["tool_choice"] = choice
        if body.get("parallel_tool_calls") is not None:
            out["parallel_tool_calls"] = body["parallel_tool_calls"]

    reasoning = body.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    if effort is not None:
        if ctx.on("thinking_param"):
            out["thinking"] = {"type": "disabled" if effort in ("none", "minimal") else "enabled"}
        else:
            out["reasoning_effort"] = effort

    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if isinstance(fmt, dict):
        if fmt.get("type") == "json_schema":
            js = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
            out["response_format"] = {"type": "json_schema", "json_schema": js}
        elif fmt.get("type") not in (None, "text"):
            out["response_format"] = {"type": fmt["type"]}

    limit = body.get("max_output_tokens")
    if limit is None:
        limit = ctx.max_output_tokens
    if limit is not None:
        use_mct = ctx.on("max_completion_tokens") or ctx.on("mimo_request") or ctx.on("kimi_request")
        out["max_completion_tokens" if use_mct else "max_tokens"] = limit

    for key in _KEEP:
        if body.get(key) is not None:
            out[key] = body[key]
    keyed = ctx.on("moonshot_fields") or ctx.on("kimi_request") or ctx.on("prompt_cache_key")
    if body.get("prompt_cache_key") is not None and keyed:
        out["prompt_cache_key"] = body["prompt_cache_key"]
    if body.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out
