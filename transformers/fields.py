"""What becomes of each top-level field a client sends, per upstream: a registry, as for items.

Theory of operation
-------------------
Every field a client sends has a row here: the upstream protocols it reaches (as itself on
the client's own protocol, translated on the others), or that it is the proxy's own to
honour, or that it belongs to the client's own vendor only.  ``screen(body, client,
upstream, ctx)`` runs before translation (``bridge.open_bridge``):

=====================================  ================================================
the field                              what happens
=====================================  ================================================
``proxy``: the proxy honours it        nothing here (``stream``, ``store``,
(stream, store, include…)              ``previous_response_id``: the app's and the
                                       translators' business)
``vendor``: private to the client's    removed unless the upstream is that vendor
own vendor (Codex's ``client_metadata``  (OpenAI: the ``responses_native`` quirk;
with the local workspace path, Claude    Anthropic: ``anthropic_beta``); named
Code's ``safeguards`` with home and
working directory, end-user ids)
an upstream protocol not in ``forms``  the translator has no form for it: named
a field this table does not know       same protocol: passed on (the upstream speaks
                                       the protocol; it may know it); translated:
                                       named (no translator carries it)
=====================================  ================================================

Every named field goes to ``ctx.dropped_fields``: the app answers it in
``x-switchboard-dropped-fields``, counts it in ``switchboard_fields_dropped_total{field}``
(a field this table does not know counts as ``other``) and logs it.  Nothing the client
sent disappears without a name.  ``docs/fields.md`` is this table for people;
``tests/unit/test_fields.py`` fails on a field a pinned client sends that is not here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .context import Ctx

__all__ = ["FIELDS", "Field", "screen", "vendor_of"]

_ALL = frozenset({"chat", "responses", "messages", "gemini"})
_C, _R, _M, _G = frozenset({"chat"}), frozenset({"responses"}), frozenset({"messages"}), frozenset({"gemini"})


@dataclass(frozen=True, slots=True)
class Field:
    # upstream protocols the field reaches (as itself, or translated)
    forms: frozenset[str] = _ALL
    # the proxy honours it itself: never named
    proxy: bool = False
    # only this vendor's upstream gets it ("openai", "anthropic")
    vendor: str | None = None


P = Field(proxy=True)
OPENAI = Field(forms=_C | _R, vendor="openai")
ANTHROPIC = Field(forms=_M, vendor="anthropic")

# fmt: off
FIELDS: dict[str, dict[str, Field]] = {
    "chat": {
        "model": P, "messages": Field(), "stream": P, "stream_options": P, "n": P,
        "tools": Field(), "tool_choice": Field(), "parallel_tool_calls": Field(),
        "functions": Field(_C), "function_call": Field(_C),
        "max_tokens": Field(), "max_completion_tokens": Field(),
        "temperature": Field(), "top_p": Field(), "stop": Field(_C | _M | _G),
        "response_format": Field(), "reasoning_effort": Field(), "verbosity": Field(_C | _R),
        "thinking": Field(_C | _M),  # Moonshot, GLM, DeepSeek; Messages' budget from it
        "prompt_cache_key": Field(_C | _R),
        "seed": Field(_C | _G), "presence_penalty": Field(_C | _G), "frequency_penalty": Field(_C | _G),
        "top_k": Field(_C | _M | _G),  # vLLM's and others' Chat extension; Messages' and Gemini's own
        "logit_bias": Field(_C), "logprobs": Field(_C), "top_logprobs": Field(_C),
        "modalities": Field(_C), "audio": Field(_C), "prediction": Field(_C),
        # OpenAI's own: stored completions, end-user ids, its tiers and tools
        "store": OPENAI, "metadata": OPENAI, "user": OPENAI, "safety_identifier": OPENAI,
        "service_tier": OPENAI, "prompt_cache_retention": OPENAI, "web_search_options": OPENAI,
    },
    "responses": {
        "model": P, "input": Field(), "instructions": Field(), "stream": P, "stream_options": P,
        "store": P, "include": P, "previous_response_id": P, "background": P,
        "tools": Field(), "tool_choice": Field(), "parallel_tool_calls": Field(),
        "reasoning": Field(), "text": Field(), "max_output_tokens": Field(),
        "temperature": Field(), "top_p": Field(), "prompt_cache_key": Field(_C | _R),
        "truncation": Field(_R), "max_tool_calls": Field(_R), "top_logprobs": Field(_R),
        "conversation": Field(_R), "prompt": Field(_R),
        # OpenAI's own: Codex's install id and workspace path, end-user ids, tiers
        "client_metadata": OPENAI, "metadata": OPENAI, "user": OPENAI, "safety_identifier": OPENAI,
        "service_tier": OPENAI, "prompt_cache_retention": OPENAI,
    },
    "messages": {
        "model": P, "messages": Field(), "system": Field(), "stream": P,
        "max_tokens": Field(), "tools": Field(), "tool_choice": Field(), "thinking": Field(),
        "temperature": Field(), "top_p": Field(), "top_k": Field(_M), "stop_sequences": Field(),
        "output_config": Field(_M),  # its effort and format: Anthropic's and the compatible endpoints'
        # beta fields: the request rows keep them for an upstream with Anthropic's betas
        "context_management": Field(_M), "container": Field(_M), "mcp_servers": Field(_M),
        "service_tier": Field(_M),
        # Anthropic's own: Claude Code's user id, and its auto mode's home and working paths
        "metadata": ANTHROPIC, "safeguards": ANTHROPIC,
    },
    "gemini": {
        # the model and the stream flag come from the URL: the app puts them in the body
        "model": P, "stream": P, "contents": Field(), "systemInstruction": Field(),
        "tools": Field(), "toolConfig": Field(), "generationConfig": Field(),
        # Google's own: its content filters, its context cache, billing labels
        "safetySettings": Field(frozenset()), "cachedContent": Field(frozenset()), "labels": Field(frozenset()),
    },
}
# fmt: on


def vendor_of(ctx: Ctx) -> str | None:
    """The vendor whose own API the upstream is: ``openai`` (OpenAI, Azure), ``anthropic``, or
    None (anyone else: a vendor's fields are not theirs to see)."""
    if ctx.on("responses_native"):
        return "openai"
    if ctx.on("anthropic_beta"):
        return "anthropic"
    return None


def _plan(client: str, upstream: str, vendor: str | None) -> tuple[dict[str, bool], bool]:
    """For one (client, upstream, vendor): each row's fate, ``name → removed`` for the fields
    named (True: removed from the body too), and whether unknown fields are named."""
    fate: dict[str, bool] = {}
    for name, f in FIELDS[client].items():
        if f.proxy:
            continue
        if f.vendor is not None and f.vendor != vendor:
            fate[name] = True
        elif upstream not in f.forms:
            fate[name] = False
    return fate, client != upstream


_PLANS: dict[tuple[str, str, str | None], tuple[dict[str, bool], bool]] = {
    (c, u, v): _plan(c, u, v) for c in FIELDS for u in _ALL for v in (None, "openai", "anthropic")
}


def screen(body: dict[str, Any], client: str, upstream: str, ctx: Ctx) -> dict[str, Any]:
    """``body`` without the fields this upstream must not get (a copy when one goes); every
    field it will not get by the table, named in ``ctx.dropped_fields``."""
    plan = _PLANS.get((client, upstream, vendor_of(ctx)))
    if plan is None:
        return body
    fate, unknown_named = plan
    table = FIELDS[client]
    remove = False
    for name in body:
        gone = fate.get(name)
        if gone is not None:
            ctx.dropped_fields.append(name)
            remove = remove or gone
        elif unknown_named and name not in table:
            ctx.dropped_fields.append(name)
    if not remove:
        return body
    return {k: v for k, v in body.items() if not fate.get(k)}
