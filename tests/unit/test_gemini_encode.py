"""Unified events → Gemini chunks and whole answers (transformers/gemini_encode.py)."""

from __future__ import annotations

from typing import Any

import pytest

from transformers import envelope
from transformers.context import Ctx
from transformers.events import (
    Event,
    Finish,
    Reasoning,
    ReasoningEnd,
    Refusal,
    Start,
    Text,
    ToolCall,
    ToolCallEnd,
    Usage,
)
from transformers.gemini_encode import GeminiEncoder, error_object
from transformers.usage import from_chat

KEY = b"k" * 32


def encode(events: list[Event], key: bytes = b"") -> tuple[GeminiEncoder, list[dict[str, Any]]]:
    enc = GeminiEncoder(Ctx(public_model="pub", envelope_key=key))
    out = [c for ev in events for c in enc.feed(ev)]
    return enc, out


def parts(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for c in chunks if "candidates" in c for p in c["candidates"][0]["content"]["parts"]]


def test_text_and_reasoning_stream_as_parts() -> None:
    _, out = encode([Start(), Reasoning("a"), Reasoning("b"), Text("x"), Refusal("no"), Finish()])
    assert parts(out) == [
        {"text": "a", "thought": True},
        {"text": "b", "thought": True},
        {"text": "x"},
        {"text": "no"},
        {"text": ""},
    ]
    assert all(c["modelVersion"] == "pub" and c["responseId"] == out[0]["responseId"] for c in out)
    assert out[-1]["candidates"][0]["finishReason"] == "STOP"


def test_a_call_goes_whole_at_its_end() -> None:
    _, out = encode(
        [
            Start(),
            ToolCall(0, "", call_id="c1", name="sh"),
            ToolCall(0, '{"cmd":'),
            ToolCall(0, '"ls"}'),
            ToolCallEnd(0, '{"cmd":"ls"}'),
            Finish(),
        ]
    )
    assert parts(out) == [{"functionCall": {"id": "c1", "name": "sh", "args": {"cmd": "ls"}}}, {"text": ""}]
    assert len(out) == 2


def test_calls_not_ended_go_in_the_last_chunk_and_bad_arguments_keep_their_text() -> None:
    _, out = encode([ToolCall(0, "not json", call_id="c1", name="a"), ToolCall(1, "", name="b"), Finish()])
    last = out[-1]["candidates"][0]
    got = [p["functionCall"] for p in last["content"]["parts"]]
    assert got[0] == {"id": "c1", "name": "a", "args": {"_raw": "not json"}}
    assert got[1]["name"] == "b" and got[1]["args"] == {} and got[1]["id"].startswith("call_")
    assert last["finishReason"] == "STOP"


def test_an_unnamed_call_is_dropped() -> None:
    enc, out = encode([ToolCall(0, "{}", call_id="c1"), Finish()])
    assert parts(out) == [{"text": ""}] and "tool_call_unnamed_dropped" in enc.ctx.repairs


@pytest.mark.parametrize(
    ("finish", "reason"),
    [
        (Finish("completed"), "STOP"),
        (Finish("incomplete", "max_output_tokens"), "MAX_TOKENS"),
        (Finish("incomplete", "content_filter"), "SAFETY"),
        (Finish("incomplete", "other"), "MAX_TOKENS"),
    ],
)
def test_finish_reasons(finish: Finish, reason: str) -> None:
    _, out = encode([Text("x"), finish])
    assert out[-1]["candidates"][0]["finishReason"] == reason


@pytest.mark.parametrize(
    ("code", "status", "name"),
    [
        ("rate_limit_exceeded", 429, "RESOURCE_EXHAUSTED"),
        ("server_is_overloaded", 503, "UNAVAILABLE"),
        ("context_length_exceeded", 400, "INVALID_ARGUMENT"),
        ("upstream_idle_timeout", 500, "INTERNAL"),
    ],
)
def test_a_failure_ends_with_googles_error_object(code: str, status: int, name: str) -> None:
    enc, out = encode([Text("x"), Finish("failed", error={"code": code, "message": "m"})])
    assert out[-1] == {"error": {"code": status, "message": "m", "status": name}}
    assert enc.failed and enc.done
    assert enc.feed(Text("late")) == []


def test_usage() -> None:
    u = from_chat(
        {
            "prompt_tokens": 10,
            "completion_tokens": 6,
            "prompt_tokens_details": {"cached_tokens": 4},
            "completion_tokens_details": {"reasoning_tokens": 2},
        }
    )
    _, out = encode([Text("x"), Usage(u), Finish()])
    assert out[-1]["usageMetadata"] == {
        "promptTokenCount": 10,
        "candidatesTokenCount": 4,
        "thoughtsTokenCount": 2,
        "cachedContentTokenCount": 4,
        "totalTokenCount": 16,
    }


def test_the_steps_reasoning_and_geminis_signature_are_sealed_on_the_call() -> None:
    _, out = encode(
        [
            Reasoning("think"),
            ReasoningEnd(),
            ToolCall(0, "{}", call_id="c1", name="a", signature="GSIG"),
            ToolCallEnd(0, "{}"),
            ToolCall(1, "{}", call_id="c2", name="b"),
            ToolCallEnd(1, "{}"),
            Finish(),
        ],
        key=KEY,
    )
    calls = [p for p in parts(out) if "functionCall" in p]
    status, text, sigs = envelope.open_sealed(calls[0]["thoughtSignature"], KEY)
    assert (status, text, sigs) == ("ok", "think", {"c1": "GSIG"})
    assert "thoughtSignature" not in calls[1]  # nothing left to carry


def test_without_a_key_geminis_signature_goes_as_it_came() -> None:
    _, out = encode([Reasoning("think"), ToolCall(0, "{}", call_id="c1", name="a", signature="GSIG"), Finish()])
    call = [p for p in parts(out) if "functionCall" in p][0]
    assert call["thoughtSignature"] == "GSIG"


def test_the_whole_answer_merges_text_parts() -> None:
    enc, _ = encode(
        [Start(), Reasoning("a"), Reasoning("b"), Text("x"), Text("y"), ToolCall(0, "{}", call_id="c", name="n"),
         Usage(from_chat({"prompt_tokens": 1, "completion_tokens": 1})), Finish()]
    )  # fmt: skip
    got = enc.answer()
    assert got["candidates"][0]["content"]["parts"] == [
        {"text": "ab", "thought": True},
        {"text": "xy"},
        {"functionCall": {"id": "c", "name": "n", "args": {}}},
    ]
    assert got["candidates"][0]["finishReason"] == "STOP"
    assert got["usageMetadata"]["totalTokenCount"] == 2


def test_abort() -> None:
    enc = GeminiEncoder(Ctx())
    assert enc.abort({"message": "boom"}) == [error_object(500, "boom")]
    assert enc.abort({"message": "again"}) == []


def test_anthropics_signed_blocks_are_sealed_on_the_next_call() -> None:
    _, out = encode(
        [
            Reasoning("a"),
            ReasoningEnd(encrypted_content="ASIG"),
            ReasoningEnd(encrypted_content="DATA", redacted=True),
            ToolCall(0, "{}", call_id="t1", name="n"),
            ToolCallEnd(0, "{}"),
            Finish(),
        ],
        key=KEY,
    )
    call = [p for p in parts(out) if "functionCall" in p][0]
    status, text, sigs = envelope.open_sealed(call["thoughtSignature"], KEY)
    assert (status, text) == ("ok", "a")
    assert sigs == {
        "@anthropic": '[{"type":"thinking","thinking":"a","signature":"ASIG"},{"type":"redacted_thinking","data":"DATA"}]'
    }


def test_the_json_array_framing_opens_separates_and_closes() -> None:
    from transformers.bridge import JSONArrayFraming

    f = JSONArrayFraming()
    assert f.done() == b"[]" and f.comment() == b""
    assert f.frame({"a": 1}) + f.frame({"b": 2}) + f.done() == b'[{"a":1}\n,{"b":2}\n]'
    assert f.delta_frame("text") == (b"\n,", b"")
