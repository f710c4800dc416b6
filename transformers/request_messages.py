"""The request rows for a Messages upstream (Anthropic and the Anthropic-compatible endpoints).

Theory of operation
-------------------
``prepare_messages(body, ctx)`` takes a Messages body (a Messages client's, or what the
Chat → Messages translator made) and returns the body to send: a copy, the client's body
is never mutated.  Each row is one concern, applied in this order; a row named by a quirk
runs as the quirk says (``providers/profiles.py``: the ``anthropic`` profile has
``anthropic_signatures``, ``anthropic_tool_ids``, ``messages_server_tools``,
``anthropic_beta``, ``billing_header``, ``cache_ttl`` and ``cache_breakpoints``; an
Anthropic-compatible endpoint none of them but ``cache_breakpoints`` where its docs say it
caches at breakpoints (``minimax``, ``qwen``): it checks no signature, wants its reasoning back as
DeepSeek's and Kimi's Chat APIs do, runs no server tool and has none of Anthropic's betas).

=========================  =================  ===================================================
row                        when               what
=========================  =================  ===================================================
billing header             not ``billing_     Claude Code's first system block, the billing line
                           header``           ``x-anthropic-billing-header: cc_version=…;``
                                              removed (``billing_header_dropped``; see below)
model                      always             ``model`` → the upstream model
max_tokens                 always             absent (or not a positive integer): the catalogue's
                                              ``max_output_tokens``, else ``DEFAULT_MAX_TOKENS``
empty text                 always             empty ``text`` blocks removed from ``system``,
                                              ``messages`` and ``tool_result`` contents, and a
                                              turn left empty removed
                                              (``empty_text_block_dropped``: Anthropic answers
                                              400 "text content blocks must be non-empty")
tool ids                   always             a ``tool_use.id`` / ``tool_result.tool_use_id``
                                              as the upstream issued it (a ``sbx_…`` id the
                                              Messages encoder mapped for the client turned
                                              back: Kimi's endpoint gets its
                                              ``functions.Bash:0``); with
                                              ``anthropic_tool_ids``, one outside
                                              ``^[a-zA-Z0-9_-]+$`` mapped
                                              (``ids.to_anthropic_id``)
unsigned thinking          ``anthropic_       a ``thinking`` block whose signature Anthropic did
                           signatures``       not issue (the proxy's sealed ``pxy1.`` envelope, or
                                              none) removed (``thinking_unsigned_dropped``); then,
                                              with thinking on, a last assistant turn that calls
                                              tools without a signed thinking block first makes
                                              the request go without thinking
                                              (``thinking_disabled_unsigned_turn``)
server tools               not ``messages_    a tool whose ``type`` is a server tool's
                           server_tools``     (``web_search_…``, ``code_execution_…``, any type
                                              other than ``custom`` or none) removed, named in
                                              ``ctx.tools.dropped`` (``hosted_tool_dropped``);
                                              when they are all the tools: 400 ``tools[0]``
beta fields                not ``anthropic_   ``context_management``, ``container``,
                           beta``             ``mcp_servers`` removed
                                              (``messages_beta_fields_dropped``: they need
                                              Anthropic betas the endpoint does not have)
cache ttl                  not ``cache_ttl``  ``ttl`` removed from every ``cache_control``
                                              (``cache_ttl_dropped``): only Anthropic documents it
cache breakpoints          ``cache_           Claude Code's placement where the client set none
                           breakpoints``      (``cache_breakpoint_added``, one per breakpoint;
                                              table below)
=========================  =================  ===================================================

Prompt caching.  Anthropic (and MiniMax and Qwen, by the same rules) caches only a prefix
that ends at a ``cache_control`` breakpoint, in the order tools → system → messages; a
request may carry at most ``CACHE_MAX`` breakpoints, and a breakpoint finds the previous
request's write up to 20 blocks back.  A Chat or Responses client has no way to say where,
so without breakpoints every turn pays the whole input again.  The row places them as Claude
Code does, region by region, and only in a region where the client set none:

========================================  ==============================================
request                                   breakpoints added
========================================  ==============================================
no ``cache_control`` anywhere             the last system block (else the last tool), and
                                          the last block of the conversation
the client marked tools or system only    the last block of the conversation
the client marked messages only           the last system block (else the last tool)
the client marked both regions, or has    none
``CACHE_MAX`` already
one breakpoint left                       the conversation one (it covers the prefix too)
the last block is ``thinking`` or         the last block before it that can carry one
``redacted_thinking``
a string ``system`` or message content    that text as one ``text`` block carrying it
========================================  ==============================================

The conversation breakpoint moves forward each turn, onto the newest block; the prefix
breakpoint stays.  A client's own ``cache_control`` is never moved or removed, and its
``ttl`` goes to Anthropic as written.  An added breakpoint is ``{"type": "ephemeral"}`` (five
minutes); the prefix one takes ``ttl: "1h"`` when a client breakpoint after it has it, since
Anthropic wants longer lives first.

Claude Code's billing line changes with the prompt (and, in some releases, with every
request: a ``cch=`` field), so any prefix cache that reads it misses from its first block.
Only Anthropic reads it; every other upstream gets the request without it: this row for a
Messages upstream, ``drop_billing_header`` in the Bridge before a Chat or Responses upstream;
the token estimate of ``app/tokens.py`` does not count it either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import envelope
from .context import Ctx
from .errors import RequestError
from .ids import from_anthropic_id, is_anthropic_id, to_anthropic_id
from .request_c2m import DEFAULT_MAX_TOKENS

__all__ = [
    "BETA_FIELDS",
    "BILLING_PREFIX",
    "CACHE_MAX",
    "drop_billing_header",
    "prepare_messages",
    "without_billing_header",
]

BETA_FIELDS = ("context_management", "container", "mcp_servers")
# Anthropic's limit on the cache_control breakpoints of one request
CACHE_MAX = 4
# the first line of Claude Code's first system block (its billing line)
BILLING_PREFIX = "x-anthropic-billing-header:"
_NO_BREAKPOINT = frozenset({"thinking", "redacted_thinking"})


def _id(id: str, strict: bool) -> str:
    """An id as the upstream issued it (a ``sbx_…`` the Messages encoder made for the client
    turned back), made valid where the upstream requires Anthropic's pattern (``strict``)."""
    id = from_anthropic_id(id)
    return to_anthropic_id(id) if strict and not is_anthropic_id(id) else id


def _keep(block: Any) -> bool:
    return not (isinstance(block, dict) and block.get("type") == "text" and not block.get("text"))


def _signed(block: dict[str, Any]) -> bool:
    sig = block.get("signature")
    return isinstance(sig, str) and bool(sig) and not envelope.is_envelope(sig)


def _blocks(blocks: list[Any], ctx: Ctx, replay: bool, strict: bool) -> list[Any]:
    out: list[Any] = []
    for b in blocks:
        if not _keep(b):
            ctx.repaired("empty_text_block_dropped")
            continue
        if isinstance(b, dict):
            kind = b.get("type")
            if kind == "thinking" and not replay and not _signed(b):
                ctx.repaired("thinking_unsigned_dropped")
                continue
            if kind == "tool_use" and isinstance(b.get("id"), str):
                b = {**b, "id": _id(b["id"], strict)}
            elif kind == "tool_result":
                b = dict(b)
                if isinstance(b.get("tool_use_id"), str):
                    b["tool_use_id"] = _id(b["tool_use_id"], strict)
                if isinstance(b.get("content"), list):
                    b["content"] = _blocks(b["content"], ctx, replay, strict)
                    if not b["content"]:
                        del b["content"]
        out.append(b)
    return out


def _unsigned_tool_turn(messages: list[Any]) -> bool:
    for m in reversed(messages):
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        blocks = content if isinstance(content, list) else []
        if m.get("role") == "assistant":
            if not any(isinstance(b, dict) and b.get("type") == "tool_use" for b in blocks):
                return False
            first = blocks[0] if blocks and isinstance(blocks[0], dict) else {}
            return first.get("type") not in ("thinking", "redacted_thinking")
        if not blocks or any(not isinstance(b, dict) or b.get("type") != "tool_result" for b in blocks):
            return False
    return False


def _tools(body: dict[str, Any], ctx: Ctx) -> None:
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools:
        return
    kept = []
    for t in tools:
        kind = t.get("type") if isinstance(t, dict) else None
        if kind in (None, "custom"):
            kept.append(t)
        else:
            ctx.tools.dropped.append(str(kind))
            ctx.repaired("hosted_tool_dropped")
    if kept:
        body["tools"] = kept
        return
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "none":
        del body["tools"]
        return
    raise RequestError(
        f"tools[0] ({ctx.tools.dropped[0]}) is an Anthropic server tool, which this model's upstream (an "
        f"Anthropic-compatible endpoint) cannot run, and the request offers no other tool: "
        f"{', '.join(ctx.tools.dropped)}. Offer client tools, or use a model on an Anthropic upstream.",
        param="tools[0]",
        code="unsupported_tool",
    )


# -- Claude Code's billing line ----------------------------------------------------------------


def _unbilled(text: str) -> str | None:
    """``text`` without a leading billing line, or None when it has none."""
    if not text.startswith(BILLING_PREFIX):
        return None
    _, _, rest = text.partition("\n")
    return rest


def without_billing_header(body: dict[str, Any]) -> dict[str, Any] | None:
    """A Messages body without Claude Code's billing line (a new dict), or None when it has none.

    The line is the whole first system block (Claude Code), or the first line of a string
    ``system`` or of the first block: only that line goes, the rest of the text stays."""
    system = body.get("system")
    if isinstance(system, str):
        rest = _unbilled(system)
        if rest is None:
            return None
        out = dict(body)
        if rest:
            out["system"] = rest
        else:
            del out["system"]
        return out
    if not isinstance(system, list) or not system:
        return None
    first = system[0]
    text = first.get("text") if isinstance(first, dict) and first.get("type") == "text" else None
    rest = _unbilled(text) if isinstance(text, str) else None
    if rest is None:
        return None
    blocks = ([{**first, "text": rest}] if rest else []) + system[1:]
    out = dict(body)
    if blocks:
        out["system"] = blocks
    else:
        del out["system"]
    return out


def drop_billing_header(body: dict[str, Any], ctx: Ctx) -> dict[str, Any]:
    """The body without the billing line unless the upstream is Anthropic (``billing_header``)."""
    if ctx.on("billing_header"):
        return body
    out = without_billing_header(body)
    if out is None:
        return body
    ctx.repaired("billing_header_dropped")
    return out


# -- prompt caching ------------------------------------------------------------------------------


def _mark(block: Any) -> dict[str, Any] | None:
    cc = block.get("cache_control") if isinstance(block, dict) else None
    return cc if isinstance(cc, dict) else None


def _walk(blocks: list[Any], fn: Callable[[dict[str, Any]], dict[str, Any]]) -> list[Any]:
    """``blocks`` with ``fn`` applied to each block and to the blocks of a ``tool_result``'s
    content; the very same list when ``fn`` changed nothing."""
    out: list[Any] | None = None
    for i, b in enumerate(blocks):
        if not isinstance(b, dict):
            continue
        nb = fn(b)
        inner = nb.get("content")
        if nb.get("type") == "tool_result" and isinstance(inner, list):
            walked = _walk(inner, fn)
            if walked is not inner:
                nb = {**nb, "content": walked}
        if nb is not b:
            out = out if out is not None else list(blocks)
            out[i] = nb
    return blocks if out is None else out


def _regions(out: dict[str, Any], fn: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """``fn`` over every block that may carry ``cache_control``: tools, system, messages."""
    for key in ("tools", "system"):
        if isinstance(out.get(key), list):
            walked = _walk(out[key], fn)
            if walked is not out[key]:
                out[key] = walked
    msgs = out.get("messages")
    if isinstance(msgs, list):
        turns = None
        for i, m in enumerate(msgs):
            if isinstance(m, dict) and isinstance(m.get("content"), list):
                walked = _walk(m["content"], fn)
                if walked is not m["content"]:
                    turns = turns if turns is not None else list(msgs)
                    turns[i] = {**m, "content": walked}
        if turns is not None:
            out["messages"] = turns


def _cache_ttl(out: dict[str, Any], ctx: Ctx) -> None:
    def fn(b: dict[str, Any]) -> dict[str, Any]:
        cc = _mark(b)
        if cc is None or "ttl" not in cc:
            return b
        ctx.repaired("cache_ttl_dropped")
        return {**b, "cache_control": {k: v for k, v in cc.items() if k != "ttl"}}

    _regions(out, fn)


def _marks(blocks: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def fn(b: dict[str, Any]) -> dict[str, Any]:
        cc = _mark(b)
        if cc is not None:
            found.append(cc)
        return b

    if isinstance(blocks, list):
        _walk(blocks, fn)
    return found


def _marked(block: dict[str, Any], cc: dict[str, Any]) -> dict[str, Any]:
    return {**block, "cache_control": cc}


def _prefix_breakpoint(out: dict[str, Any], cc: dict[str, Any]) -> bool:
    """The breakpoint at the end of the system prompt, else of the tools."""
    system = out.get("system")
    if isinstance(system, str) and system:
        out["system"] = [{"type": "text", "text": system, "cache_control": cc}]
        return True
    if isinstance(system, list) and system and isinstance(system[-1], dict) and system[-1].get("type") == "text":
        out["system"] = [*system[:-1], _marked(system[-1], cc)]
        return True
    tools = out.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[-1], dict):
        out["tools"] = [*tools[:-1], _marked(tools[-1], cc)]
        return True
    return False


def _conversation_breakpoint(out: dict[str, Any], cc: dict[str, Any]) -> bool:
    """The breakpoint on the newest block that can carry one."""
    msgs = out.get("messages")
    if not isinstance(msgs, list):
        return False
    for i in range(len(msgs) - 1, -1, -1):
        m = msgs[i]
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        if isinstance(content, str) and content:
            blocks: list[Any] = [{"type": "text", "text": content, "cache_control": cc}]
        elif isinstance(content, list):
            j = next(
                (
                    j
                    for j in range(len(content) - 1, -1, -1)
                    if isinstance(content[j], dict)
                    and content[j].get("type") not in _NO_BREAKPOINT
                    and _keep(content[j])
                ),
                None,
            )
            if j is None:
                continue
            blocks = [*content[:j], _marked(content[j], cc), *content[j + 1 :]]
        else:
            continue
        out["messages"] = [*msgs[:i], {**m, "content": blocks}, *msgs[i + 1 :]]
        return True
    return False


def _cache_breakpoints(out: dict[str, Any], ctx: Ctx) -> None:
    prefix = _marks(out.get("tools")) + _marks(out.get("system"))
    msgs = out.get("messages")
    conversation = (
        [cc for m in msgs if isinstance(m, dict) for cc in _marks(m.get("content"))] if isinstance(msgs, list) else []
    )
    room = CACHE_MAX - len(prefix) - len(conversation)
    if room > 0 and not conversation and _conversation_breakpoint(out, {"type": "ephemeral"}):
        ctx.repaired("cache_breakpoint_added")
        room -= 1
    if room > 0 and not prefix:
        long = ctx.on("cache_ttl") and any(cc.get("ttl") == "1h" for cc in conversation)
        if _prefix_breakpoint(out, {"type": "ephemeral", "ttl": "1h"} if long else {"type": "ephemeral"}):
            ctx.repaired("cache_breakpoint_added")


def prepare_messages(body: dict[str, Any], ctx: Ctx) -> dict[str, Any]:
    out = dict(drop_billing_header(body, ctx))
    if ctx.upstream_model:
        out["model"] = ctx.upstream_model
    limit = out.get("max_tokens")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        out["max_tokens"] = ctx.max_output_tokens or DEFAULT_MAX_TOKENS
    replay = not ctx.on("anthropic_signatures")
    strict = ctx.on("anthropic_tool_ids")
    system = out.get("system")
    if isinstance(system, list):
        out["system"] = _blocks(system, ctx, replay, strict)
        if not out["system"]:
            del out["system"]
    elif system == "":
        del out["system"]
    msgs = out.get("messages")
    if isinstance(msgs, list):
        turns = []
        for m in msgs:
            if isinstance(m, dict) and isinstance(m.get("content"), list):
                m = {**m, "content": _blocks(m["content"], ctx, replay, strict)}
                if not m["content"]:
                    continue
            elif isinstance(m, dict) and m.get("content") == "":
                ctx.repaired("empty_text_block_dropped")
                continue
            turns.append(m)
        out["messages"] = turns
        thinking = out.get("thinking")
        on = isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")
        if on and not replay and _unsigned_tool_turn(turns):
            ctx.repaired("thinking_disabled_unsigned_turn")
            del out["thinking"]
    if not ctx.on("messages_server_tools"):
        _tools(out, ctx)
    if not ctx.on("anthropic_beta"):
        for k in BETA_FIELDS:
            if k in out:
                del out[k]
                ctx.repaired("messages_beta_fields_dropped")
                ctx.dropped_fields.append(k)
    if not ctx.on("cache_ttl"):
        _cache_ttl(out, ctx)
    if ctx.on("cache_breakpoints"):
        _cache_breakpoints(out, ctx)
    return out
