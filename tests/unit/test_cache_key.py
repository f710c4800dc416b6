"""A stable prompt_cache_key per conversation (transformers/cache_key.py) and its request row."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from transformers.cache_key import PREFIX, derive_chat, derive_responses
from transformers.context import Ctx
from transformers.request_quirks import prepare_chat, prepare_responses

SYSTEM = {"role": "system", "content": "You are a coding agent."}
ASK = {"role": "user", "content": "fix the bug"}
CALL = {"role": "assistant", "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}  # fmt: skip
OUT = {"role": "tool", "tool_call_id": "c1", "content": "a.py"}


def chat(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages), **extra}


def test_every_turn_of_a_conversation_has_one_key() -> None:
    turns = [
        chat(SYSTEM, ASK),
        chat(SYSTEM, ASK, CALL, OUT),
        chat(SYSTEM, ASK, CALL, OUT, {"role": "user", "content": "go on"}),
    ]
    keys = {derive_chat(t) for t in turns}
    assert len(keys) == 1
    key = keys.pop()
    assert key is not None and key.startswith(PREFIX) and len(key) == len(PREFIX) + 32


@pytest.mark.parametrize(
    "other",
    [
        chat({"role": "system", "content": "You are a poet."}, ASK),
        chat(SYSTEM, {"role": "user", "content": "add tests"}),
    ],
    ids=["another system prompt", "another first question"],
)
def test_another_conversation_has_another_key(other: dict[str, Any]) -> None:
    assert derive_chat(other) != derive_chat(chat(SYSTEM, ASK))


def test_model_and_tools_do_not_change_the_key() -> None:
    base = derive_chat(chat(SYSTEM, ASK))
    assert derive_chat(chat(SYSTEM, ASK, model="other", tools=[{"type": "function"}])) == base


def test_no_user_message_no_key() -> None:
    assert derive_chat(chat(SYSTEM)) is None
    assert derive_responses({"input": []}) is None


def test_responses_head_is_instructions_and_the_first_user_item() -> None:
    first = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    call = {"type": "function_call", "call_id": "c", "name": "ls", "arguments": "{}"}
    a = derive_responses({"instructions": "x", "input": [first]})
    assert a is not None and a == derive_responses({"instructions": "x", "input": [first, call]})
    assert a != derive_responses({"instructions": "y", "input": [first]})
    assert derive_responses({"input": "hi"}) is not None


@pytest.mark.parametrize("protocol", ["chat", "responses"])
@pytest.mark.parametrize("given", [None, "codex-conversation-id"])
@pytest.mark.parametrize("on", [True, False])
def test_the_row(protocol: str, given: str | None, on: bool) -> None:
    if protocol == "chat":
        body = chat(SYSTEM, ASK)
    else:
        body = {"model": "m", "instructions": "x", "input": [{"role": "user", "content": "hi"}]}
    if given:
        body["prompt_cache_key"] = given
    ctx = Ctx(quirks=frozenset({"prompt_cache_key"} if on else ()), upstream_model="m")
    before = copy.deepcopy(body)
    prepare = prepare_chat if protocol == "chat" else prepare_responses
    out = prepare(body, ctx, translated=True)
    assert body == before
    if given:  # never replaced
        assert out["prompt_cache_key"] == given and "prompt_cache_key_derived" not in ctx.repairs
    elif on:
        assert out["prompt_cache_key"] == {"chat": derive_chat, "responses": derive_responses}[protocol](
            body
        ) and ctx.repairs == ["prompt_cache_key_derived"]
    else:  # never invented where the upstream does not route by it
        assert "prompt_cache_key" not in out
