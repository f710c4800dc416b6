"""Reasoning keys on Chat history (issue 11 item 2): accepted under any key, sent under the
upstream's key; read from an upstream under any key."""

from __future__ import annotations

import copy

import pytest

from transformers.context import Ctx
from transformers.reasoning_keys import KEYS, normalize_history, reasoning_text, upstream_key
from transformers.request_quirks import prepare_chat

CALL = [{"id": "functions.Read:0", "type": "function", "function": {"name": "Read", "arguments": "{}"}}]
DETAILS_OR = [{"type": "reasoning.text", "text": "a"}, {"type": "reasoning.text", "text": "b"}]  # OpenRouter
DETAILS_KC = [{"type": "summary", "summary": "s"}, {"type": "encrypted", "encrypted": "blob"}]  # Kimi Code
ENCRYPTED_ONLY = [{"type": "encrypted", "encrypted": "blob"}]


def ctx(*quirks: str) -> Ctx:
    return Ctx(quirks=frozenset(quirks), upstream_model="up")


# (case id, reasoning keys on the client's assistant message, upstream key, sent keys, repair)
HISTORY = [
    ("content-as-is", {"reasoning_content": "r"}, "reasoning_content", {"reasoning_content": "r"}, None),
    ("reasoning-to-content", {"reasoning": "r"}, "reasoning_content", {"reasoning_content": "r"},
     "reasoning_key_normalized"),
    ("details-openrouter-to-content", {"reasoning_details": DETAILS_OR}, "reasoning_content",
     {"reasoning_content": "ab"}, "reasoning_key_normalized"),
    ("kimi-code-details-plus-content", {"reasoning_details": DETAILS_KC, "reasoning_content": "s"},
     "reasoning_content", {"reasoning_content": "s"}, "reasoning_key_normalized"),
    ("two-string-keys-first-wins", {"reasoning": "x", "reasoning_content": "y"}, "reasoning_content",
     {"reasoning_content": "y"}, "reasoning_key_normalized"),
    ("empty-first-key-skipped", {"reasoning_content": "", "reasoning": "x"}, "reasoning_content",
     {"reasoning_content": "x"}, "reasoning_key_normalized"),
    ("encrypted-only-details-dropped", {"reasoning_details": ENCRYPTED_ONLY}, "reasoning_content", {},
     "reasoning_key_normalized"),
    ("reasoning-as-is", {"reasoning": "r"}, "reasoning", {"reasoning": "r"}, None),
    ("content-to-reasoning", {"reasoning_content": "r"}, "reasoning", {"reasoning": "r"}, "reasoning_key_reasoning"),
    ("details-to-reasoning", {"reasoning_details": DETAILS_KC}, "reasoning", {"reasoning": "s"},
     "reasoning_key_reasoning"),
    ("none", {}, "reasoning_content", {}, None),
]  # fmt: skip


@pytest.mark.parametrize("keys, target, sent, repair", [r[1:] for r in HISTORY], ids=[r[0] for r in HISTORY])
def test_normalize_history(keys, target, sent, repair):
    msg = {"role": "assistant", "content": "", "tool_calls": CALL, **keys}
    messages = [{"role": "user", "content": "u"}, msg, {"role": "tool", "tool_call_id": "functions.Read:0"}]
    before = copy.deepcopy(messages)
    c = ctx("reasoning_key_reasoning") if target == "reasoning" else ctx()
    assert upstream_key(c) == target
    out = normalize_history(messages, c)
    assert messages == before  # the client's messages are not mutated
    if repair is None:
        assert out is None and c.repairs == []
        return
    assert out is not None and out[0] is messages[0] and out[2] is messages[2]
    assert {k: v for k, v in out[1].items() if k in KEYS} == sent
    assert {k: v for k, v in out[1].items() if k not in KEYS} == {
        "role": "assistant",
        "content": "",
        "tool_calls": CALL,
    }
    assert c.repairs == [repair]


def test_only_assistant_messages_are_touched():
    messages = [{"role": "user", "content": "u", "reasoning": "not mine"}, "junk", {"role": "tool", "reasoning": "x"}]
    assert normalize_history(messages, ctx()) is None


@pytest.mark.parametrize(
    "quirks, sent",
    [
        (("reasoning_replay",), {"reasoning_content": "r"}),
        (("reasoning_key_reasoning",), {"reasoning": "r"}),
        (("reasoning_replay", "reasoning_key_reasoning"), {"reasoning": "r"}),
        ((), {"reasoning_details": [{"type": "reasoning.text", "text": "r"}]}),  # as sent
    ],
    ids=["replay", "key-reasoning", "both", "no-replay-rule-passes-as-sent"],
)
def test_prepare_chat_sends_the_upstream_key(quirks, sent):
    """Kimi Code echoes the key its endpoint used; the upstream gets the key its profile reads
    (with reasoning_replay the text is kept, no placeholder replaces it)."""
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "", "tool_calls": CALL,
             "reasoning_details": [{"type": "reasoning.text", "text": "r"}]},
            {"role": "tool", "tool_call_id": "functions.Read:0", "content": "ok"},
        ],
    }  # fmt: skip
    c = ctx(*quirks)
    out = prepare_chat(body, c, translated=False)
    assert {k: v for k, v in out["messages"][1].items() if k in KEYS} == sent
    assert "reasoning_placeholder" not in c.repairs


def test_encrypted_only_gets_the_placeholder_under_the_upstream_key():
    body = {
        "messages": [{"role": "assistant", "content": None, "tool_calls": CALL, "reasoning_details": ENCRYPTED_ONLY}]
    }
    c = ctx("reasoning_replay")
    out = prepare_chat(body, c, translated=False)
    assert {k: v for k, v in out["messages"][0].items() if k in KEYS} == {"reasoning_content": "tool call"}
    assert c.repairs == ["reasoning_key_normalized", "reasoning_placeholder"]


# -- reading an upstream's answer (the decoders) ----------------------------------------------

READ = [
    ("content", {"reasoning_content": "a"}, "a"),
    ("reasoning", {"reasoning": "a"}, "a"),
    ("details-text", {"reasoning_details": DETAILS_OR}, "ab"),
    ("details-summary", {"reasoning_details": DETAILS_KC}, "s"),
    ("duplicated-not-doubled", {"reasoning_content": "a", "reasoning": "a", "reasoning_details": DETAILS_OR}, "a"),
    ("empty-falls-through", {"reasoning_content": "", "reasoning": "b"}, "b"),
    ("wrong-types", {"reasoning_content": 1, "reasoning": ["x"], "reasoning_details": "x"}, None),
    ("encrypted-only", {"reasoning_details": ENCRYPTED_ONLY}, None),
    ("nothing", {"content": "x"}, None),
]


@pytest.mark.parametrize("d, want", [r[1:] for r in READ], ids=[r[0] for r in READ])
def test_reasoning_text(d, want):
    assert reasoning_text(d) == want


# -- answering a Chat client (the encoder) ----------------------------------------------------


@pytest.mark.parametrize(
    "quirks, want",
    [
        (("reasoning_replay",), {"reasoning_content": "think"}),
        (("reasoning_replay", "reasoning_key_reasoning"), {"reasoning_content": "think", "reasoning": "think"}),
        ((), {"reasoning_content": "think"}),
    ],
    ids=["content", "upstream-speaks-reasoning", "no-quirks"],
)
def test_chat_client_answered_with_reasoning_content_and_the_upstream_key(quirks, want):
    from transformers.chat_encode import ChatStreamEncoder, encode_chat_completion
    from transformers.events import Finish, Reasoning, Start, Text, Usage

    events = [Start("chatcmpl-1", "m", 1), Reasoning("thi"), Reasoning("nk"), Text("hi"), Usage({}), Finish()]
    enc = ChatStreamEncoder(ctx(*quirks))
    chunks = [c for ev in events for c in enc.feed(ev)]
    deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
    got: dict[str, str] = {}
    for d in deltas:
        for k in KEYS:
            if k in d:
                got[k] = got.get(k, "") + d[k]
    assert got == want
    message = encode_chat_completion(events, ctx(*quirks))["choices"][0]["message"]
    assert {k: v for k, v in message.items() if k in KEYS} == want
