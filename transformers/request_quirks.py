"""Request-side quirks: the last pass over a request body before it goes upstream.

Theory of operation
-------------------
Translation (``request_r2c`` / ``request_c2r``) produces a request in the upstream's
protocol; a same-protocol request arrives as the client sent it.  Either way the body then
goes through ONE table of small named passes, applied in order.  Each row is
``(rule, protocol, gate, pass)``: the gate says when it runs (a quirk switched on, a quirk
switched off, same-protocol only, or always) and the pass edits the body in place (the
entry points work on a shallow copy, and every pass copies a nested dict or list before it
changes it, so the client's parsed body is never mutated).  A pass that changes something
records ``ctx.repaired(<rule>)``.  A gate reads the quirk set and whether the body was
translated, never the body: ``plan`` decides once per (protocol, quirk set, translated)
which passes run, and remembers it.

Chat upstreams (``prepare_chat``):

==========================  ==================  ==========================================
rule                        runs when           does
==========================  ==================  ==========================================
same_protocol_model         same protocol       ``model`` := ``ctx.upstream_model``
same_protocol_toolinfo      same protocol       ``ctx.tools`` := ``toolinfo_from_chat``
stream_include_usage        same protocol       ``stream`` → ``stream_options.include_usage``
                                                true; no ``stream`` → no ``stream_options``
tool_choice_without_tools   same protocol       no tools → drop ``tool_choice`` and
                                                ``parallel_tool_calls``
strip_moonshot_fields       quirk OFF           ``partial``, ``extras``, tool-call
                            ``moonshot_fields`` ``namespace``, ``video_url`` parts,
                            on the same         ``builtin_function`` tools removed (a
                            protocol            translated body holds none of them)
mimo_request                ``mimo_request``    R3-c: ``max_completion_tokens`` (from
                                                ``max_tokens``/``max_output_tokens``/the
                                                catalogue), ``tool_choice`` auto (``none``
                                                → no tools), no ``parallel_tool_calls``,
                                                custom-tool functions strict with
                                                ``additionalProperties:false``,
                                                ``json_schema`` → ``json_object``
kimi_request                ``kimi_request``    forced ``tool_choice`` (required/named) →
                                                auto; ``max_tokens`` →
                                                ``max_completion_tokens``
max_completion_tokens       that quirk          ``max_tokens`` → ``max_completion_tokens``
kimi_tool_ids               that quirk          a client-sanitised native id
                            (skipped with       ``functions_Read_0`` back to
                            strict_tool_ids)    ``functions.Read:0`` on assistant calls
                                                and their tool messages, where
                                                unambiguous (``ids.kimi_restore_map``)
reasoning_keys              reasoning_replay    assistant reasoning under any of
                            or reasoning_key_   ``reasoning_content``/``reasoning``/
                            reasoning           ``reasoning_details`` → the upstream's
                                                key only (``reasoning_keys.py``)
reasoning_replay            that quirk          placeholder reasoning ``"tool call"`` on
                                                assistant tool-call messages without any
developer_to_system         that quirk          ``developer`` messages → ``system``
system_at_head              that quirk          every ``system`` message merged (text
                                                joined with a blank line, in order) into
                                                ONE system message at the head
gemini_request              that quirk          fields Gemini's OpenAI-compatible
                                                endpoint refuses (``store``,
                                                ``metadata``, ``prompt_cache_key``…)
                                                removed; ``reasoning_effort`` on the
                                                levels the model takes
                                                (``_GEMINI_EFFORT``); assistant
                                                reasoning keys removed
gemini_thought_signatures   that quirk          every assistant call's thought signature
                                                back where Gemini put it, the escape
                                                value where none came back
                                                (``thought_signatures.restore``)
thought_signature_stripped  that quirk OFF      the proxy's sealed signatures removed
                                                from ``extra_content``
                                                (``thought_signatures.strip``)
tool_schemas                always              ``schema.sanitize_tools``: the tool
                                                JSON-schema rules of ``schema.RULES``
                                                (some gated by ``schema_*`` quirks)
prompt_cache_key            that quirk          no ``prompt_cache_key`` from the client:
                                                one derived from the conversation's head
                                                (``cache_key.derive_chat``, ``derive_responses``)
==========================  ==================  ==========================================

Tool-call ids are never touched on Chat→Chat (docs/rules.md §1: pass ids byte for byte), except that
``kimi_tool_ids`` puts back the native ids a client's sanitiser rewrote (issue 11, docs/rules.md §1).

Responses upstreams (``prepare_responses``):

==========================  ==================  ==========================================
same_protocol_model         same protocol       ``model`` := ``ctx.upstream_model``
strip_reasoning_envelope    that quirk (on in   reasoning items whose ``encrypted_content``
                            every profile that  is a proxy envelope (``pxy1.``): removed
                            speaks Responses)   WHOLE toward OpenAI (``responses_native``);
                                                elsewhere the blob goes and the item stays,
                                                its text as the summary when it has none
mantle_request              ``mantle_request``  assistant ``output_text`` content → a
                                                string; ``tool_choice:none`` → neither
                                                ``tools`` nor ``tool_choice``; any other
                                                forced choice → ``auto`` (T1-6)
responses_call_ids          always              docs/rules.md §1 Responses policy + uniqueness pass
                                                over every ``call_id`` of the request
store_false_item_ids        always              ``store:false`` → input items lose ``id``
tool_schemas                always              as for Chat (flat and namespace tools)
prompt_cache_key            that quirk          as for Chat
==========================  ==================  ==========================================

Decisions:

* ``strip_reasoning_envelope``: no provider can open our envelope (OpenAI answers
  ``invalid_encrypted_content``), so every profile that can speak Responses switches the
  quirk on (``providers/profiles.py``; a unit test holds every such profile to it).
  Switched off, the envelope goes upstream as the client sent it: for an upstream that
  opens it itself, another Switchboard tier whose own reasoning items these are.  Toward
  OpenAI the whole item goes, summary included: a reasoning item without
  ``encrypted_content`` and without a stored id is rejected or useless to a real OpenAI
  model, and the text is another model's reasoning anyway.  Toward any other Responses
  upstream (vLLM, xAI, Mantle, a gateway) only the blob goes: the item's summary is that
  model's own reasoning of the turn, which it reads back (the envelope's text fills an
  empty summary).  Only ``reasoning`` items are looked at; a foreign blob (not ``pxy1.``)
  is left for ``encrypted_content_retry``.
* ``store_false_item_ids``: with ``store:false`` nothing is stored upstream, so an item
  ``id`` can only be wrong (another provider's id, or ``rs_…`` "not found", docs/rules.md F8, F9); the
  ``call_id`` is always kept (T1-5).  ``item_reference`` items keep their id (it is their
  only content).  With ``store`` true or absent the ids are left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from fnmatch import fnmatchcase
from typing import Any

from .cache_key import derive_chat, derive_responses
from .context import Ctx
from .envelope import is_envelope, open_reasoning
from .ids import MAX_CALL_ID, kimi_restore_map, responses_policy, unique_map
from .reasoning_keys import KEYS, normalize_history, upstream_key
from .request_c2r import text_of, toolinfo_from_chat
from .schema import sanitize_tools
from .thought_signatures import restore as restore_signatures
from .thought_signatures import strip as strip_signatures
from .vocab import ProtocolName

__all__ = [
    "REASONING_PLACEHOLDER",
    "REASONING_KEYS",
    "QUIRK_TABLE",
    "prepare_chat",
    "prepare_responses",
    "reasoning_key",
    "with_reasoning_placeholders",
]

REASONING_PLACEHOLDER = "tool call"
REASONING_KEYS = KEYS
_REASONING_KEY_SET = frozenset(KEYS)

Body = dict[str, Any]
Gate = Callable[[Ctx, bool], bool]
Pass = Callable[[Body, Ctx], None]


# -- shared helpers --------------------------------------------------------------------------


def reasoning_key(ctx: Ctx) -> str:
    """The message key replayed reasoning travels under on a Chat upstream."""
    return upstream_key(ctx)


def _has_reasoning(msg: dict[str, Any]) -> bool:
    # most messages carry no reasoning key at all: one C-level set test says so
    return not _REASONING_KEY_SET.isdisjoint(msg) and any(msg.get(k) for k in REASONING_KEYS)


def with_reasoning_placeholders(messages: list[Any], ctx: Ctx) -> list[Any] | None:
    """New message list where every assistant tool-call message without reasoning carries the
    placeholder; ``None`` when nothing needed it.  Records one repair per message."""
    key = reasoning_key(ctx)
    out: list[Any] | None = None
    for i, msg in enumerate(messages):
        if (
            isinstance(msg, dict)
            and msg.get("role") == "assistant"
            and msg.get("tool_calls")
            and not _has_reasoning(msg)
        ):
            if out is None:
                out = list(messages)
            out[i] = {**msg, key: REASONING_PLACEHOLDER}
            ctx.repaired("reasoning_placeholder")
    return out


def _tool_name(tool: Any) -> str | None:
    if not isinstance(tool, dict):
        return None
    fn = tool.get("function")
    name = fn.get("name") if isinstance(fn, dict) else tool.get("name")
    return name if isinstance(name, str) else None


def _drop_tools(body: Body) -> None:
    body.pop("tools", None)
    body.pop("tool_choice", None)
    body.pop("parallel_tool_calls", None)


def _to_max_completion_tokens(body: Body, ctx: Ctx, extra_sources: tuple[str, ...] = ()) -> bool:
    """Move ``max_tokens`` (and ``extra_sources``) to ``max_completion_tokens``."""
    changed = False
    if body.get("max_completion_tokens") is None:
        for key in ("max_tokens", *extra_sources):
            if body.get(key) is not None:
                body["max_completion_tokens"] = body.pop(key)
                changed = True
                break
    for key in ("max_tokens", *extra_sources):
        if key in body:
            del body[key]
            changed = True
    return changed


# -- gates -----------------------------------------------------------------------------------


def _on(quirk: str) -> Gate:
    def gate(ctx: Ctx, translated: bool) -> bool:
        return quirk in ctx.quirks

    gate.__name__ = f"on_{quirk}"
    return gate


def _off(quirk: str) -> Gate:
    def gate(ctx: Ctx, translated: bool) -> bool:
        return quirk not in ctx.quirks

    gate.__name__ = f"off_{quirk}"
    return gate


def _same_protocol(ctx: Ctx, translated: bool) -> bool:
    return not translated


def _off_same_protocol(quirk: str) -> Gate:
    def gate(ctx: Ctx, translated: bool) -> bool:
        return not translated and quirk not in ctx.quirks

    gate.__name__ = f"off_{quirk}_same_protocol"
    return gate


def _always(ctx: Ctx, translated: bool) -> bool:
    return True


def _replays_reasoning(ctx: Ctx, translated: bool) -> bool:
    """The profile says which key its upstream reads replayed reasoning under."""
    return ctx.on("reasoning_replay") or ctx.on("reasoning_key_reasoning")


# -- Chat passes -----------------------------------------------------------------------------


def _set_model(body: Body, ctx: Ctx) -> None:
    if ctx.upstream_model:
        body["model"] = ctx.upstream_model


def _chat_toolinfo(body: Body, ctx: Ctx) -> None:
    ctx.tools = toolinfo_from_chat(body.get("tools"))


def _stream_include_usage(body: Body, ctx: Ctx) -> None:
    if body.get("stream"):
        opts = body.get("stream_options")
        if not isinstance(opts, dict) or opts.get("include_usage") is not True:
            body["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
            ctx.repaired("stream_include_usage")
    elif "stream_options" in body:
        del body["stream_options"]
        ctx.repaired("stream_include_usage")


def _tool_choice_without_tools(body: Body, ctx: Ctx) -> None:
    if not body.get("tools") and ("tool_choice" in body or "parallel_tool_calls" in body):
        _drop_tools(body)
        ctx.repaired("tool_choice_without_tools")


_MOONSHOT_MESSAGE_KEYS = ("partial", "extras")
_MOONSHOT_TOOL_CALL_KEYS = ("extras", "namespace")


def _strip_message(msg: Any) -> Any:
    """The message without Moonshot-only fields, or the same object when it has none."""
    if not isinstance(msg, dict):
        return msg
    new: dict[str, Any] | None = None
    for key in _MOONSHOT_MESSAGE_KEYS:
        if key in msg:
            new = new if new is not None else dict(msg)
            del new[key]
    calls = msg.get("tool_calls")
    if isinstance(calls, list) and any(
        isinstance(c, dict) and any(k in c for k in _MOONSHOT_TOOL_CALL_KEYS) for c in calls
    ):
        new = new if new is not None else dict(msg)
        new["tool_calls"] = [
            {k: v for k, v in c.items() if k not in _MOONSHOT_TOOL_CALL_KEYS} if isinstance(c, dict) else c
            for c in calls
        ]
    content = msg.get("content")
    if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "video_url" for p in content):
        new = new if new is not None else dict(msg)
        kept = [p for p in content if not (isinstance(p, dict) and p.get("type") == "video_url")]
        new["content"] = kept if kept else ""
    return msg if new is None else new


def _strip_moonshot_fields(body: Body, ctx: Ctx) -> None:
    changed = False
    messages = body.get("messages")
    if isinstance(messages, list):
        stripped = [_strip_message(m) for m in messages]
        if any(a is not b for a, b in zip(stripped, messages)):
            body["messages"] = stripped
            changed = True
    tools = body.get("tools")
    if isinstance(tools, list):
        kept = [t for t in tools if not (isinstance(t, dict) and t.get("type") == "builtin_function")]
        if len(kept) != len(tools):
            for t in tools:
                if isinstance(t, dict) and t.get("type") == "builtin_function":
                    ctx.tools.dropped.append(_tool_name(t) or "builtin_function")
            changed = True
            if kept:
                body["tools"] = kept
            else:
                _drop_tools(body)
    if changed:
        ctx.repaired("strip_moonshot_fields")


def _strict_custom_tools(body: Body, ctx: Ctx) -> bool:
    tools = body.get("tools")
    if not ctx.tools.custom or not isinstance(tools, list):
        return False
    changed = False
    out = []
    for t in tools:
        fn = t.get("function") if isinstance(t, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"] in ctx.tools.custom:
            params = fn.get("parameters")
            if not isinstance(params, dict):
                params = {"type": "object"}
            if fn.get("strict") is not True or params.get("additionalProperties") is not False:
                t = {**t, "function": {**fn, "strict": True, "parameters": {**params, "additionalProperties": False}}}
                changed = True
        out.append(t)
    if changed:
        body["tools"] = out
    return changed


def _mimo_request(body: Body, ctx: Ctx) -> None:
    changed = _to_max_completion_tokens(body, ctx, ("max_output_tokens",))
    if body.get("max_completion_tokens") is None and ctx.max_output_tokens is not None:
        body["max_completion_tokens"] = ctx.max_output_tokens
        changed = True
    if body.get("tools"):
        if body.get("tool_choice") == "none":
            _drop_tools(body)
            changed = True
        elif body.get("tool_choice") != "auto":
            body["tool_choice"] = "auto"
            changed = True
    elif "tool_choice" in body:
        del body["tool_choice"]
        changed = True
    if "parallel_tool_calls" in body:
        del body["parallel_tool_calls"]
        changed = True
    changed |= _strict_custom_tools(body, ctx)
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        body["response_format"] = {"type": "json_object"}  # MiMo has JSON mode, not json_schema
        changed = True
    if changed:
        ctx.repaired("mimo_request")


def _kimi_request(body: Body, ctx: Ctx) -> None:
    changed = _to_max_completion_tokens(body, ctx)
    choice = body.get("tool_choice")
    if choice is not None and choice not in ("auto", "none"):
        body["tool_choice"] = "auto"  # forced choice + thinking → 400 on Kimi
        changed = True
    if changed:
        ctx.repaired("kimi_request")


# Gemini's OpenAI-compatible endpoint: fields outside its request schema (it answers 400
# "Invalid JSON payload received. Unknown name \"store\": Cannot find field"), other vendors'
# own, and the assistant message keys that carry another model's reasoning text
_GEMINI_REFUSED = (
    "store", "metadata", "reasoning", "top_k", "prompt_cache_key", "prompt_cache_retention",
    "service_tier", "safety_identifier", "user", "verbosity", "thinking",
)  # fmt: skip
# reasoning_effort: the levels it takes (low, medium, high, none), per model; first match wins
_GEMINI_EFFORT: tuple[tuple[str, dict[str, str]], ...] = (
    # Gemini 3 Pro thinks at low or high only, and cannot stop thinking
    ("gemini-3*pro*", {"minimal": "low", "none": "low", "medium": "high", "xhigh": "high"}),
    ("*", {"minimal": "low", "xhigh": "high"}),
)


def _gemini_request(body: Body, ctx: Ctx) -> None:
    changed = False
    for k in _GEMINI_REFUSED:
        if k in body:
            del body[k]
            changed = True
    effort = body.get("reasoning_effort")
    if isinstance(effort, str):
        model = str(body.get("model") or ctx.upstream_model)
        for glob, levels in _GEMINI_EFFORT:
            if fnmatchcase(model, glob):
                if effort in levels:
                    body["reasoning_effort"] = levels[effort]
                    changed = True
                break
    messages = body.get("messages")
    if isinstance(messages, list) and any(
        isinstance(m, dict) and m.get("role") == "assistant" and any(k in m for k in KEYS) for m in messages
    ):
        body["messages"] = [
            {k: v for k, v in m.items() if k not in KEYS} if isinstance(m, dict) and m.get("role") == "assistant" else m
            for m in messages
        ]
        changed = True
    if changed:
        ctx.repaired("gemini_request")


def _max_completion_tokens(body: Body, ctx: Ctx) -> None:
    if _to_max_completion_tokens(body, ctx):
        ctx.repaired("max_completion_tokens")


def _restore_ids(msg: Any, ids: dict[str, str]) -> Any:
    """The message with its call ids (or its ``tool_call_id``) mapped through ``ids``."""
    if not isinstance(msg, dict):
        return msg
    if msg.get("role") == "tool":
        tid = msg.get("tool_call_id")
        return {**msg, "tool_call_id": ids[tid]} if isinstance(tid, str) and tid in ids else msg
    calls = msg.get("tool_calls")
    if msg.get("role") != "assistant" or not isinstance(calls, list):
        return msg
    if not any(isinstance(c, dict) and isinstance(c.get("id"), str) and c["id"] in ids for c in calls):
        return msg
    return {
        **msg,
        "tool_calls": [
            {**c, "id": ids[c["id"]]} if isinstance(c, dict) and isinstance(c.get("id"), str) and c["id"] in ids else c
            for c in calls
        ],
    }


def _kimi_tool_ids(body: Body, ctx: Ctx) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list) or ctx.on("strict_tool_ids"):
        return
    ids = kimi_restore_map(messages)
    if ids:
        body["messages"] = [_restore_ids(m, ids) for m in messages]
        ctx.repaired("kimi_tool_ids_restored")


def _reasoning_keys(body: Body, ctx: Ctx) -> None:
    messages = body.get("messages")
    if isinstance(messages, list):
        out = normalize_history(messages, ctx)  # records reasoning_key_reasoning / _normalized
        if out is not None:
            body["messages"] = out


def _reasoning_replay(body: Body, ctx: Ctx) -> None:
    messages = body.get("messages")
    if isinstance(messages, list):
        out = with_reasoning_placeholders(messages, ctx)  # records "reasoning_placeholder"
        if out is not None:
            body["messages"] = out


def _developer_to_system(body: Body, ctx: Ctx) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    if any(isinstance(m, dict) and m.get("role") == "developer" for m in messages):
        body["messages"] = [
            {**m, "role": "system"} if isinstance(m, dict) and m.get("role") == "developer" else m for m in messages
        ]
        ctx.repaired("developer_to_system")


def _system_at_head(body: Body, ctx: Ctx) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    systems = [i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "system"]
    if not systems or systems == [0]:
        return
    head = {"role": "system", "content": "\n\n".join(text_of(messages[i].get("content")) for i in systems)}
    drop = set(systems)
    rest = [m for i, m in enumerate(messages) if i not in drop]
    body["messages"] = [head, *rest]
    ctx.repaired("system_at_head")


def _tool_schemas(body: Body, ctx: Ctx) -> None:
    tools = body.get("tools")
    if isinstance(tools, list):
        out = sanitize_tools(tools, ctx.quirks, ctx.repaired)
        if out is not None:
            body["tools"] = out


def _prompt_cache_key(body: Body, ctx: Ctx, derive: Callable[[Body], str | None]) -> None:
    if body.get("prompt_cache_key") is not None:
        return  # the client's own key, untouched
    key = derive(body)
    if key is not None:
        body["prompt_cache_key"] = key
        ctx.repaired("prompt_cache_key_derived")


def _chat_cache_key(body: Body, ctx: Ctx) -> None:
    _prompt_cache_key(body, ctx, derive_chat)


def _responses_cache_key(body: Body, ctx: Ctx) -> None:
    _prompt_cache_key(body, ctx, derive_responses)


# -- Responses passes ------------------------------------------------------------------------


def _input_items(body: Body) -> list[Any] | None:
    items = body.get("input")
    return items if isinstance(items, list) else None


def _strip_reasoning_envelope(body: Body, ctx: Ctx) -> None:
    items = _input_items(body)
    if items is None:
        return
    native = ctx.on("responses_native")
    out: list[Any] = []
    changed = False
    for it in items:
        if not (isinstance(it, dict) and it.get("type") == "reasoning" and is_envelope(it.get("encrypted_content"))):
            out.append(it)
            continue
        changed = True
        if native:
            continue  # OpenAI: the whole item (it would refuse or ignore one without its own blob)
        # any other Responses upstream: the item without the blob, its text as the summary
        kept = {k: v for k, v in it.items() if k != "encrypted_content"}
        if not _summary_texts(kept.get("summary")):
            _, text = open_reasoning(it["encrypted_content"], ctx.envelope_key)
            if text:
                kept["summary"] = [{"type": "summary_text", "text": text}]
        out.append(kept)
    if changed:
        body["input"] = out
        ctx.repaired("strip_reasoning_envelope")


def _summary_texts(summary: Any) -> bool:
    return isinstance(summary, list) and any(isinstance(p, dict) and p.get("text") for p in summary)


def _is_message(item: Any) -> bool:
    return isinstance(item, dict) and (item.get("type") == "message" or ("type" not in item and "role" in item))


def _part_text(p: dict[str, Any]) -> str:
    for key in ("text", "refusal"):
        v = p.get(key)
        if isinstance(v, str) and v:
            return v
    return ""


def _mantle_request(body: Body, ctx: Ctx) -> None:
    changed = False
    items = _input_items(body)
    if items is not None:
        out: list[Any] | None = None
        for i, it in enumerate(items):
            if _is_message(it) and it.get("role") == "assistant" and isinstance(it.get("content"), list):
                text = "".join(_part_text(p) for p in it["content"] if isinstance(p, dict))
                out = out if out is not None else list(items)
                out[i] = {**it, "content": text}
        if out is not None:
            body["input"] = out
            changed = True
    choice = body.get("tool_choice")
    if choice == "none":
        body.pop("tools", None)
        del body["tool_choice"]
        changed = True
    elif choice is not None and choice != "auto":
        body["tool_choice"] = "auto"  # gpt-oss accepts automatic tool selection only
        changed = True
    if changed:
        ctx.repaired("mantle_request")


CALL_ITEM_TYPES = frozenset({"function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output"})


def _is_call_item(it: Any) -> bool:
    """A call or call output item with a string ``call_id``."""
    if not isinstance(it, dict):
        return False
    kind = it.get("type")
    return isinstance(kind, str) and kind in CALL_ITEM_TYPES and isinstance(it.get("call_id"), str)


def _responses_call_ids(body: Body, ctx: Ctx) -> None:
    items = _input_items(body)
    if items is None:
        return
    raw = [it["call_id"] for it in items if _is_call_item(it)]
    if not raw:
        return
    mapping = unique_map(raw, responses_policy, MAX_CALL_ID)
    if all(k == v for k, v in mapping.items()):
        return
    body["input"] = [
        {**it, "call_id": mapping[it["call_id"]]}
        if _is_call_item(it) and mapping[it["call_id"]] != it["call_id"]
        else it
        for it in items
    ]
    ctx.repaired("responses_call_ids")


def _store_false_item_ids(body: Body, ctx: Ctx) -> None:
    items = _input_items(body)
    if body.get("store") is not False or items is None:
        return
    if not any(isinstance(it, dict) and "id" in it and it.get("type") != "item_reference" for it in items):
        return
    body["input"] = [
        {k: v for k, v in it.items() if k != "id"}
        if isinstance(it, dict) and "id" in it and it.get("type") != "item_reference"
        else it
        for it in items
    ]
    ctx.repaired("store_false_item_ids")


# -- the table -------------------------------------------------------------------------------

QUIRK_TABLE: tuple[tuple[str, ProtocolName, Gate, Pass], ...] = (
    # rule                        protocol     gate                              pass
    ("same_protocol_model",       "chat",      _same_protocol,                   _set_model),
    ("same_protocol_toolinfo",    "chat",      _same_protocol,                   _chat_toolinfo),
    ("stream_include_usage",      "chat",      _same_protocol,                   _stream_include_usage),
    ("tool_choice_without_tools", "chat",      _same_protocol,                   _tool_choice_without_tools),
    ("strip_moonshot_fields",     "chat",      _off_same_protocol("moonshot_fields"), _strip_moonshot_fields),
    ("mimo_request",              "chat",      _on("mimo_request"),              _mimo_request),
    ("kimi_request",              "chat",      _on("kimi_request"),              _kimi_request),
    ("max_completion_tokens",     "chat",      _on("max_completion_tokens"),     _max_completion_tokens),
    ("kimi_tool_ids",             "chat",      _on("kimi_tool_ids"),             _kimi_tool_ids),
    ("reasoning_keys",            "chat",      _replays_reasoning,               _reasoning_keys),
    ("reasoning_replay",          "chat",      _on("reasoning_replay"),          _reasoning_replay),
    ("developer_to_system",       "chat",      _on("developer_to_system"),       _developer_to_system),
    ("system_at_head",            "chat",      _on("system_at_head"),            _system_at_head),
    ("gemini_request",            "chat",      _on("gemini_request"),            _gemini_request),
    ("gemini_thought_signatures", "chat",      _on("gemini_thought_signatures"), restore_signatures),
    ("thought_signature_stripped", "chat",     _off("gemini_thought_signatures"), strip_signatures),
    ("tool_schemas",              "chat",      _always,                          _tool_schemas),
    ("prompt_cache_key",          "chat",      _on("prompt_cache_key"),          _chat_cache_key),
    ("same_protocol_model",       "responses", _same_protocol,                   _set_model),
    ("strip_reasoning_envelope",  "responses", _on("strip_reasoning_envelope"),  _strip_reasoning_envelope),
    ("mantle_request",            "responses", _on("mantle_request"),            _mantle_request),
    ("responses_call_ids",        "responses", _always,                          _responses_call_ids),
    ("store_false_item_ids",      "responses", _always,                          _store_false_item_ids),
    ("tool_schemas",              "responses", _always,                          _tool_schemas),
    ("prompt_cache_key",          "responses", _on("prompt_cache_key"),          _responses_cache_key),
)  # fmt: skip

# each upstream protocol's rows, in the table's order (the protocol rows' ``from_hub`` and
# ``same`` run them: ``prepare_chat``, ``prepare_responses``)
_ROWS = {
    protocol: tuple(r for r in QUIRK_TABLE if r[1] == protocol) for protocol in dict.fromkeys(r[1] for r in QUIRK_TABLE)
}

# Which passes run is the gates' decision, and a gate reads the quirk set and ``translated``
# alone: decided once per (protocol, quirk set, translated) and remembered.  Quirk sets
# come from the config's routes, a handful; the bound holds whatever a caller makes up.
_PLANS: dict[tuple[str, frozenset[str], bool], tuple[Pass, ...]] = {}
_PLANS_MAX = 256


def plan(protocol: ProtocolName, ctx: Ctx, translated: bool) -> tuple[Pass, ...]:
    """The passes of ``protocol``'s rows whose gates let them run for ``ctx``, in order."""
    key = (protocol, ctx.quirks, translated)
    passes = _PLANS.get(key)
    if passes is None:
        passes = tuple(fn for _rule, _protocol, gate, fn in _ROWS[protocol] if gate(ctx, translated))
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[key] = passes
    return passes


def _run(protocol: ProtocolName, body: Body, ctx: Ctx, translated: bool) -> Body:
    out = dict(body)
    for fn in plan(protocol, ctx, translated):
        fn(out, ctx)
    return out


def prepare_chat(body: Body, ctx: Ctx, *, translated: bool) -> Body:
    """The Chat request as the upstream must see it (a new dict; ``body`` is not mutated)."""
    return _run("chat", body, ctx, translated)


def prepare_responses(body: Body, ctx: Ctx, *, translated: bool) -> Body:
    """The Responses request as the upstream must see it (a new dict; ``body`` untouched)."""
    return _run("responses", body, ctx, translated)
