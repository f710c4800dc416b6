"""transformers/fields.py: every field a pinned client sends has a row; what each row does,
per upstream; private fields reach only the client's own vendor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from transformers.context import Ctx
from transformers.fields import FIELDS, screen, vendor_of

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _pinned() -> dict[str, set[str]]:
    """The top-level fields today's clients send, by protocol: the captured bodies (Codex
    0.169 and 0.171 code mode, Claude Code 2.1.332) and what docs/clients.md lists as measured
    for the others (Kimi Code 2.1's three types, the AI SDK 7, openai-agents, opencode, Claude
    Code's auto mode)."""
    codex = json.loads((FIXTURES / "codex_request.json").read_text())
    code_mode = json.loads((FIXTURES / "codex_0.171_code_mode_request.json").read_text())
    claude = json.loads((FIXTURES / "claude_code_messages_request.json").read_text())
    return {
        "responses": set(codex) | set(code_mode)
        # Kimi Code openai_responses; the AI SDK; openai-agents (previous_response_id chains)
        | {"store", "max_output_tokens", "prompt_cache_key", "reasoning", "include", "previous_response_id"},
        "messages": {k for r in claude["requests"] for k in r}
        # Claude Code's auto mode; Kimi Code's anthropic type
        | {"safeguards", "temperature", "stop_sequences", "tool_choice"},
        # Kimi Code kimi and openai types; kosong; opencode's openai-compatible provider
        "chat": {
            "model", "messages", "tools", "stream", "stream_options", "thinking", "prompt_cache_key",
            "max_completion_tokens", "max_tokens", "reasoning_effort", "temperature", "top_p", "tool_choice",
        },
    }  # fmt: skip


@pytest.mark.parametrize("protocol", ["chat", "responses", "messages"])
def test_every_field_a_pinned_client_sends_has_a_row(protocol: str) -> None:
    assert sorted(_pinned()[protocol] - set(FIELDS[protocol])) == []


def ctx(*quirks: str) -> Ctx:
    return Ctx(quirks=frozenset(quirks))


OPENAI, ANTHROPIC, OTHER = ("responses_native",), ("anthropic_beta",), ()

CASES: list[tuple[str, str, str, tuple[str, ...], dict[str, Any], list[str], list[str]]] = [
    # (case, client, upstream, quirks, body, fields the upstream body keeps, named)
    ("codex metadata to OpenAI", "responses", "responses", OPENAI,
     {"model": "m", "input": "x", "client_metadata": {"ws": "/home/u/p"}}, ["model", "input", "client_metadata"], []),
    ("codex metadata to another Responses server", "responses", "responses", OTHER,
     {"model": "m", "input": "x", "client_metadata": {"ws": "/home/u/p"}}, ["model", "input"], ["client_metadata"]),
    ("codex metadata to a Chat upstream", "responses", "chat", OTHER,
     {"model": "m", "input": "x", "client_metadata": {}, "service_tier": "auto"}, ["model", "input"],
     ["client_metadata", "service_tier"]),
    ("safeguards to Anthropic", "messages", "messages", ANTHROPIC,
     {"model": "m", "messages": [], "safeguards": {"home": "/home/u"}, "metadata": {"user_id": "u"}},
     ["model", "messages", "safeguards", "metadata"], []),
    ("safeguards to a compatible endpoint", "messages", "messages", OTHER,
     {"model": "m", "messages": [], "safeguards": {"home": "/home/u"}, "metadata": {"user_id": "u"}},
     ["model", "messages"], ["safeguards", "metadata"]),
    ("Messages fields with no Chat form", "messages", "chat", OTHER,
     {"model": "m", "messages": [], "top_k": 5, "output_config": {}}, ["model", "messages", "top_k", "output_config"],
     ["top_k", "output_config"]),
    ("an unknown field, same protocol: passed", "chat", "chat", OTHER,
     {"model": "m", "messages": [], "vendor_x": 1}, ["model", "messages", "vendor_x"], []),
    ("an unknown field, translated: named", "chat", "responses", OTHER,
     {"model": "m", "messages": [], "vendor_x": 1}, ["model", "messages", "vendor_x"], ["vendor_x"]),
    ("the proxy's own fields are never named", "responses", "chat", OTHER,
     {"model": "m", "input": "x", "store": False, "stream": True, "include": [], "previous_response_id": None},
     ["model", "input", "store", "stream", "include", "previous_response_id"], []),
    ("end-user ids to OpenAI only", "chat", "chat", OTHER,
     {"model": "m", "messages": [], "user": "alice@corp", "safety_identifier": "h"}, ["model", "messages"],
     ["user", "safety_identifier"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "client", "upstream", "quirks", "body", "kept", "named"), CASES, ids=[c[0] for c in CASES]
)
def test_screen(
    case: str,
    client: str,
    upstream: str,
    quirks: tuple[str, ...],
    body: dict[str, Any],
    kept: list[str],
    named: list[str],
) -> None:
    c = ctx(*quirks)
    before = dict(body)
    out = screen(body, client, upstream, c)
    assert list(out) == kept
    assert c.dropped_fields == named
    assert body == before  # the client's body is not mutated


def test_vendor_of() -> None:
    assert (vendor_of(ctx("responses_native")), vendor_of(ctx("anthropic_beta")), vendor_of(ctx())) == (
        "openai",
        "anthropic",
        None,
    )
