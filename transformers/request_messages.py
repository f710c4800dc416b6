"""The request rows for a Messages upstream (Anthropic and the Anthropic-compatible endpoints).

Theory of operation
-------------------
``prepare_messages(body, ctx)`` takes a Messages body (a Messages client's, or what the
Chat → Messages translator made) and returns the body to send: a copy, the client's body
is never mutated.  Each row is one concern, applied in this order; a row named by a quirk
runs as the quirk says (``providers/profiles.py``: the ``anthropic`` profile has all four,
``anthropic_signatures``, ``anthropic_tool_ids``, ``messages_server_tools`` and
``anthropic_beta``; an
Anthropic-compatible endpoint none: it checks no signature, wants its reasoning back as
DeepSeek's and Kimi's Chat APIs do, runs no server tool and has none of Anthropic's betas).

=========================  =================  ===================================================
row                        when               what
=========================  =================  ===================================================
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
=========================  =================  ===================================================

``cache_control`` on system, tools and blocks is never touched: every Messages upstream gets
it as the client wrote it.
"""

from __future__ import annotations

from typing import Any

from . import envelope
from .context import Ctx
from .errors import RequestError
from .ids import from_anthropic_id, is_anthropic_id, to_anthropic_id
from .request_c2m import DEFAULT_MAX_TOKENS

__all__ = ["BETA_FIELDS", "prepare_messages"]

BETA_FIELDS = ("context_management", "container", "mcp_servers")


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


def prepare_messages(body: dict[str, Any], ctx: Ctx) -> dict[str, Any]:
    out = dict(body)
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
    return out
