"""What happens to each Responses input item type and tool type, per upstream kind.

Theory of operation
-------------------
A Responses client sends items and tools of many types; an upstream knows some of them.
Nothing the client sent is dropped quietly (docs/rules.md, "Nothing dropped quietly"): every type is in one of the two
tables below, and each cell says what ``prepare`` (and, for a Chat upstream, the translator
``request_r2c``) does with it.  The upstream *kind* is:

* ``native``: OpenAI's own Responses API (the ``responses_native`` quirk: the ``openai`` and
  ``azure`` profiles).  It knows every item and tool type OpenAI defines, serves
  responses-lite (Codex's code mode) and keeps its own stored items;
* ``responses``: any other Responses upstream (xAI, Bedrock Mantle, vLLM, a gateway);
* ``chat``: a Chat Completions upstream.

The actions:

==============  ===========================================================================
``pass``        sent as the client sent it
``translate``   rewritten into a form the upstream knows (the row says which)
``resolve``     an ``item_reference``: replaced by the stored item it names (the app does
                it from its response store before ``prepare``: ``app/stored.py``); one
                still here is the upstream's own id (``native``) or refused
``drop``        removed, as a named repair (counted in ``switchboard_repairs_total``, named
                in ``ctx.dropped_items``: the app logs a warning with the request id, sends
                ``x-switchboard-dropped-items`` and never logs the turn ``completed``); only
                where the item cannot change what the model can do
``refuse``      400 ``invalid_request_error`` naming ``input[i]`` / ``tools[i]``: dropping
                it would change what the model can do (a call whose output is kept, the
                history a compaction replaced, tools it must call)
==============  ===========================================================================

``INPUT_ITEMS`` and ``TOOLS`` are the registry: ``docs/items.md`` renders them, and
``tests/unit/test_items.py`` holds the code to every cell and fails when a type a pinned
client sends (the fixtures under ``tests/fixtures/``) is not in them.  A type not in the
table is ``UNKNOWN``: passed to a native upstream, dropped elsewhere.

Translations done here (before the protocol translator, so both non-native kinds share
them):

* ``additional_tools`` (Codex code mode, responses-lite): its ``tools`` are appended to the
  request's top-level ``tools`` and the item is removed (``additional_tools_hoisted``); the
  Chat translator then flattens the namespaces (``functions`` + ``exec`` →
  ``functions__exec``) and the tool stage maps calls back with their namespace;
* ``local_shell_call`` / ``local_shell_call_output`` → ``function_call`` /
  ``function_call_output`` of a function named ``local_shell`` whose arguments are the
  call's ``action`` (``hosted_call_translated``);
* ``mcp_call`` (a hosted MCP call, its output inline) → ``function_call`` named
  ``flatten_name(server_label, name)`` + ``function_call_output`` with its ``output`` (or
  ``error``) (``hosted_call_translated``).

Items dropped (``hosted_call_dropped`` / ``unknown_item_dropped``): hosted calls whose
results the upstream never had and whose effect is in the assistant message after them
(``web_search_call``, ``file_search_call``, ``image_generation_call``,
``code_interpreter_call``), listings (``mcp_list_tools``), Codex's own bookkeeping
(``ghost_snapshot``), and types nobody here knows.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import orjson

from .context import Ctx, flatten_name
from .errors import RequestError

__all__ = [
    "INPUT_ITEMS",
    "KINDS",
    "TOOLS",
    "UNKNOWN",
    "Policy",
    "prepare",
    "upstream_kind",
]

Action = Literal["pass", "translate", "resolve", "drop", "refuse"]
Kind = Literal["native", "responses", "chat"]
KINDS: tuple[Kind, ...] = ("native", "responses", "chat")


class Policy(NamedTuple):
    native: Action
    responses: Action
    chat: Action
    note: str

    def action(self, kind: Kind) -> Action:
        return getattr(self, kind)


# fmt: off
INPUT_ITEMS: dict[str, Policy] = {
    "message":                 Policy("pass", "pass", "translate", "Chat: system/user/assistant messages"),
    "reasoning":               Policy("pass", "pass", "translate", "Chat: reasoning_content on the next assistant message (request_r2c)"),
    "function_call":           Policy("pass", "pass", "translate", "Chat: assistant tool_calls"),
    "function_call_output":    Policy("pass", "pass", "translate", "Chat: tool message after its call"),
    "custom_tool_call":        Policy("pass", "pass", "translate", "Chat: a one-string function call {\"input\": …}"),
    "custom_tool_call_output": Policy("pass", "pass", "translate", "Chat: tool message after its call"),
    "compaction":              Policy("pass", "translate", "translate", "ours: expanded into its summary (compaction.py); another's: 400 (nobody here can read it)"),
    "compaction_trigger":      Policy("pass", "translate", "translate", "the summarisation request (compaction.py)"),
    "item_reference":          Policy("resolve", "resolve", "resolve", "the stored item (app/stored.py); the native upstream's own chain keeps its references"),
    "additional_tools":        Policy("pass", "translate", "translate", "its tools hoisted into top-level tools (code mode)"),
    "local_shell_call":        Policy("pass", "translate", "translate", "a function_call to local_shell, arguments = action"),
    "local_shell_call_output": Policy("pass", "translate", "translate", "its function_call_output"),
    "mcp_call":                Policy("pass", "translate", "translate", "a function_call + function_call_output (output inline)"),
    "tool_search_call":        Policy("pass", "refuse", "refuse", "loads deferred tools only a native upstream serves; its output is kept"),
    "tool_search_output":      Policy("pass", "refuse", "refuse", "the tools it loaded exist only on a native upstream"),
    "computer_call":           Policy("pass", "refuse", "refuse", "a call whose output is kept, for a tool only OpenAI runs"),
    "computer_call_output":    Policy("pass", "refuse", "refuse", "the output of such a call"),
    "mcp_approval_request":    Policy("pass", "refuse", "refuse", "an approval flow only a native upstream runs"),
    "mcp_approval_response":   Policy("pass", "refuse", "refuse", "an approval flow only a native upstream runs"),
    "context_compaction":      Policy("pass", "refuse", "refuse", "replaces history with a blob only its issuer reads"),
    "web_search_call":         Policy("pass", "drop", "drop", "results stayed upstream; the answer after it carries them"),
    "file_search_call":        Policy("pass", "drop", "drop", "results stayed upstream; the answer after it carries them"),
    "image_generation_call":   Policy("pass", "drop", "drop", "the image went to the client; the answer after it stands"),
    "code_interpreter_call":   Policy("pass", "drop", "drop", "ran upstream; the answer after it carries the result"),
    "mcp_list_tools":          Policy("pass", "drop", "drop", "a listing; the mcp tool itself is not offered there"),
    "ghost_snapshot":          Policy("pass", "drop", "drop", "Codex's undo bookkeeping, nothing the model reads"),
}

TOOLS: dict[str, Policy] = {
    "function":                Policy("pass", "pass", "translate", "Chat: a function tool"),
    "custom":                  Policy("pass", "pass", "translate", "Chat: a function with one string parameter input"),
    "namespace":               Policy("pass", "pass", "translate", "Chat: each child flattened (functions__exec), mapped back"),
    "web_search":              Policy("pass", "pass", "drop", "hosted: x-switchboard-dropped-tools; refused when it is the only tool"),
    "web_search_preview":      Policy("pass", "pass", "drop", "hosted, as web_search"),
    "image_generation":        Policy("pass", "pass", "drop", "hosted, as web_search"),
    "file_search":             Policy("pass", "pass", "drop", "hosted, as web_search"),
    "tool_search":             Policy("pass", "pass", "drop", "hosted, as web_search"),
    "local_shell":             Policy("pass", "pass", "drop", "hosted, as web_search"),
    "code_interpreter":        Policy("pass", "pass", "drop", "hosted, as web_search"),
    "computer_use":            Policy("pass", "pass", "drop", "hosted, as web_search"),
    "computer_use_preview":    Policy("pass", "pass", "drop", "hosted, as web_search"),
    "mcp":                     Policy("pass", "pass", "drop", "hosted, as web_search"),
}

UNKNOWN = Policy("pass", "drop", "drop", "a type nobody here knows: the native upstream may")
# fmt: on


# the types whose translation is done here (the others' by the protocol translators)
_HERE = frozenset({"additional_tools", "local_shell_call", "local_shell_call_output", "mcp_call"})


def upstream_kind(native_items: bool, ctx: Ctx) -> Kind:
    """``native_items``: the upstream's row says it reads Responses items (Responses); every
    other upstream gets them by way of the Chat form (``chat``)."""
    if not native_items:
        return "chat"
    return "native" if ctx.on("responses_native") else "responses"


def item_type(item: dict[str, Any]) -> str:
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return kind if isinstance(kind, str) else str(kind)


_WHERE = {"chat": "not a Responses API", "responses": "a Responses API other than OpenAI's"}


def _refuse(i: int, kind: str, upstream: Kind, why: str) -> RequestError:
    where = _WHERE[upstream]
    return RequestError(
        f"input[{i}] is a {kind!r} item, which this model's upstream ({where}) cannot take: {why}. "
        "Send the conversation without it, or use a model on an OpenAI upstream.",
        param=f"input[{i}]",
        code="unsupported_input_item",
    )


def _local_shell(item: dict[str, Any]) -> dict[str, Any]:
    out = {
        "type": "function_call",
        "call_id": item.get("call_id") or item.get("id") or "",
        "name": "local_shell",
        "arguments": orjson.dumps(item.get("action") or {}).decode(),
    }
    return out


def _local_shell_output(item: dict[str, Any]) -> dict[str, Any]:
    output = item.get("output")
    return {
        "type": "function_call_output",
        "call_id": item.get("call_id") or item.get("id") or "",
        "output": output if isinstance(output, (str, list)) else orjson.dumps(output).decode(),
    }


def _mcp_call(item: dict[str, Any]) -> list[dict[str, Any]]:
    label, name = item.get("server_label"), item.get("name")
    flat = flatten_name(label, name) if isinstance(label, str) and label and isinstance(name, str) else name
    call_id = item.get("id") if isinstance(item.get("id"), str) else f"mcp_{flat}"
    args = item.get("arguments")
    call = {
        "type": "function_call",
        "call_id": call_id,
        "name": flat if isinstance(flat, str) and flat else "mcp",
        "arguments": args if isinstance(args, str) else orjson.dumps(args or {}).decode(),
    }
    result = item.get("output") if item.get("error") is None else f"error: {item.get('error')}"
    out = {
        "type": "function_call_output",
        "call_id": call_id,
        "output": result if isinstance(result, str) else orjson.dumps(result).decode(),
    }
    return [call, out]


def prepare(body: dict[str, Any], ctx: Ctx, native_items: bool) -> dict[str, Any]:
    """The body with every input item handled by its row for this upstream (a shallow copy
    when anything changed; the client's body itself is never mutated); ``native_items``:
    the upstream's row reads Responses items (``upstream_kind``)."""
    kind = upstream_kind(native_items, ctx)
    items = body.get("input")
    if kind == "native" or not isinstance(items, list):
        return body
    out: list[Any] | None = None  # built only once an item changes
    hoisted: list[Any] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            if out is not None:
                out.append(item)
            continue
        t = item_type(item)
        policy = INPUT_ITEMS.get(t)
        action = policy.action(kind) if policy is not None else "drop"
        if action in ("pass", "translate") and t not in _HERE:
            if out is not None:
                out.append(item)
            continue
        if out is None:
            out = list(items[:i])
        if t == "additional_tools":
            tools = item.get("tools")
            if not isinstance(tools, list):
                raise RequestError(f"input[{i}].tools must be an array of tools", param=f"input[{i}].tools")
            hoisted.extend(tools)
            ctx.repaired("additional_tools_hoisted")
        elif t == "local_shell_call":
            out.append(_local_shell(item))
            ctx.repaired("hosted_call_translated")
        elif t == "local_shell_call_output":
            out.append(_local_shell_output(item))
        elif t == "mcp_call":
            out.extend(_mcp_call(item))
            ctx.repaired("hosted_call_translated")
        elif action == "resolve":  # an item_reference the app could not resolve
            raise RequestError(
                f"input[{i}] is an item_reference to {str(item.get('id'))[:200]!r}, which is not a stored item "
                "of this proxy: send the item itself.",
                param=f"input[{i}]",
            )
        elif action == "refuse":
            assert policy is not None
            raise _refuse(i, t, kind, policy.note)
        else:  # drop
            ctx.dropped_items.append(f"input[{i}]:{t[:64]}")  # (a client's type: bounded in logs)
            if policy is not None:
                ctx.repaired("hosted_call_dropped")
            else:
                ctx.repaired("unknown_item_dropped")
    if out is None:
        return body
    body = {**body, "input": out}
    if hoisted:
        given = body.get("tools")
        body["tools"] = [*(given if isinstance(given, list) else ()), *hoisted]
    return body
