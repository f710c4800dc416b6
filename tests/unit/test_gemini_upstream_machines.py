"""Toward a Gemini upstream in its own API: the Chat → Gemini request translator
(transformers/request_c2g.py) and the decoder of Gemini's chunks
(transformers/gemini_decode.py), as tables of cases."""

from __future__ import annotations

from typing import Any

import pytest

from transformers.context import Ctx
from transformers.events import Finish, Reasoning, Start, Text, ToolCall, ToolCallEnd, Usage
from transformers.gemini_decode import GeminiStreamDecoder, decode_gemini
from transformers.request_c2g import chat_to_gemini


def ctx(model: str = "gemini-2.5-pro") -> Ctx:
    return Ctx(upstream_model=model, public_model="pub")


SIGNED = {"google": {"thought_signature": "GSIG"}}
CALL = {
    "id": "c1",
    "type": "function",
    "function": {"name": "sh", "arguments": '{"cmd":"ls"}'},
    "extra_content": SIGNED,
}

# (name, Chat messages, Gemini systemInstruction text or None, Gemini contents)
CONTENTS: list[tuple[str, list[dict[str, Any]], str | None, list[dict[str, Any]]]] = [
    ("text", [{"role": "user", "content": "hi"}], None, [{"role": "user", "parts": [{"text": "hi"}]}]),
    ("system and developer, wherever they stand",
     [{"role": "system", "content": "a"}, {"role": "user", "content": "hi"}, {"role": "developer", "content": "b"}],
     "a\n\nb", [{"role": "user", "parts": [{"text": "hi"}]}]),
    ("an inline image; one by URL dropped",
     [{"role": "user", "content": [{"type": "text", "text": "see"},
                                   {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
                                   {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}],
     None, [{"role": "user", "parts": [{"text": "see"}, {"inlineData": {"mimeType": "image/png", "data": "AAA"}}]}]),
    ("a signed call, its result, the reasoning left out",
     [{"role": "user", "content": "hi"},
      {"role": "assistant", "content": "ok", "reasoning_content": "hm", "tool_calls": [CALL]},
      {"role": "tool", "tool_call_id": "c1", "content": "a.py"}],
     None,
     [{"role": "user", "parts": [{"text": "hi"}]},
      {"role": "model", "parts": [{"text": "ok"}, {"functionCall": {"name": "sh", "args": {"cmd": "ls"}, "id": "c1"},
                                                   "thoughtSignature": "GSIG"}]},
      {"role": "user", "parts": [{"functionResponse": {"name": "sh", "response": {"output": "a.py"}, "id": "c1"}}]}]),
    ("a minted id is not sent; results and text of one role merged",
     [{"role": "user", "content": "hi"},
      {"role": "assistant", "content": None, "tool_calls": [
          {"id": "gm_1", "type": "function", "function": {"name": "sh", "arguments": "not json"}}]},
      {"role": "tool", "tool_call_id": "gm_1", "content": "x"}, {"role": "user", "content": "next"}],
     None,
     [{"role": "user", "parts": [{"text": "hi"}]},
      {"role": "model", "parts": [{"functionCall": {"name": "sh", "args": {"_raw": "not json"}}}]},
      {"role": "user", "parts": [{"functionResponse": {"name": "sh", "response": {"output": "x"}}}, {"text": "next"}]}]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "messages", "system", "contents"), CONTENTS, ids=[c[0] for c in CONTENTS])
def test_contents(name: str, messages: list[dict[str, Any]], system: str | None, contents: list[Any]) -> None:
    out = chat_to_gemini({"model": "m", "messages": messages}, ctx())
    assert out["contents"] == contents
    assert out.get("systemInstruction") == ({"parts": [{"text": system}]} if system else None)
    assert "model" not in out and "messages" not in out


TOP: list[tuple[str, dict[str, Any], str, dict[str, Any]]] = [
    ("sampling and limits", {"max_tokens": 9, "temperature": 0.2, "top_p": 0.9, "stop": "x"}, "gemini-2.5-pro",
     {"generationConfig": {"maxOutputTokens": 9, "temperature": 0.2, "topP": 0.9, "stopSequences": ["x"],
                           "thinkingConfig": {"includeThoughts": True}}}),
    ("effort on Gemini 2.5: a budget", {"reasoning_effort": "medium"}, "gemini-2.5-pro",
     {"generationConfig": {"thinkingConfig": {"includeThoughts": True, "thinkingBudget": 8192}}}),
    ("effort on Gemini 3: a level", {"reasoning_effort": "low"}, "gemini-3-pro-preview",
     {"generationConfig": {"thinkingConfig": {"includeThoughts": True, "thinkingLevel": "low"}}}),
    ("json schema", {"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}}},
     "gemini-2.5-pro",
     {"generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": {"type": "object"},
                           "thinkingConfig": {"includeThoughts": True}}}),
    ("tools and a forced function",
     {"tools": [{"type": "function", "function": {"name": "f", "description": "F", "parameters": {"type": "object"}}}],
      "tool_choice": {"type": "function", "function": {"name": "f"}}},
     "gemini-2.5-pro",
     {"tools": [{"functionDeclarations": [{"name": "f", "description": "F", "parametersJsonSchema": {"type": "object"}}]}],
      "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}},
      "generationConfig": {"thinkingConfig": {"includeThoughts": True}}}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "body", "model", "want"), TOP, ids=[t[0] for t in TOP])
def test_top_level(name: str, body: dict[str, Any], model: str, want: dict[str, Any]) -> None:
    out = chat_to_gemini({"model": "m", "messages": [], **body}, ctx(model))
    assert {k: v for k, v in out.items() if k != "contents"} == want


def chunk(*parts: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    cand: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    if finish:
        cand["finishReason"] = finish
    return {"candidates": [cand], **extra}


def test_a_stream_decoded() -> None:
    dec = GeminiStreamDecoder(ctx())
    out = dec.feed(chunk({"text": "hm", "thought": True}, responseId="r1", modelVersion="gemini-x"))
    out += dec.feed(chunk({"text": "Hi"}))
    out += dec.feed(chunk({"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "SIG"}))
    out += dec.feed(chunk({"functionCall": {"id": "own", "name": "g", "args": {}}}))
    usage = {"promptTokenCount": 10, "candidatesTokenCount": 3, "thoughtsTokenCount": 2, "cachedContentTokenCount": 4}
    out += dec.feed(chunk(finish="STOP", usageMetadata=usage))
    assert out[0] == Start(response_id="r1", model="gemini-x")
    assert out[1:3] == [Reasoning("hm"), Text("Hi")]
    call = out[3]
    assert isinstance(call, ToolCall) and call.signature == "SIG" and call.arguments == '{"a":1}'
    assert call.call_id.startswith("gm_") and out[4] == ToolCallEnd(0, '{"a":1}', call_id=call.call_id, name="f")
    assert out[5] == ToolCall(1, "{}", call_id="own", name="g") and isinstance(out[6], ToolCallEnd)
    assert out[7] == Usage(
        {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 2},
            "total_tokens": 15,
        }
    )
    assert out[8] == Finish("completed") and dec.end() == []


@pytest.mark.parametrize(
    ("reason", "want"),
    [
        ("STOP", Finish("completed")),
        ("MAX_TOKENS", Finish("incomplete", reason="max_output_tokens")),
        ("SAFETY", Finish("incomplete", reason="content_filter")),
        ("RECITATION", Finish("incomplete", reason="content_filter")),
        ("MALFORMED_FUNCTION_CALL", Finish("completed")),
    ],
)
def test_finish_reasons(reason: str, want: Finish) -> None:
    assert decode_gemini(chunk({"text": "x"}, finish=reason), ctx())[-1] == want


def test_a_blocked_prompt_an_error_and_a_cut_stream() -> None:
    out = decode_gemini({"promptFeedback": {"blockReason": "SAFETY"}}, ctx())
    assert out[-1] == Finish("incomplete", reason="content_filter")
    out = decode_gemini({"error": {"code": 429, "message": "slow", "status": "RESOURCE_EXHAUSTED"}}, ctx())
    assert out[-1].status == "failed" and out[-1].error["code"] == "rate_limit_exceeded"  # type: ignore[union-attr]
    dec = GeminiStreamDecoder(ctx())
    dec.feed(chunk({"text": "x"}))
    end = dec.end()
    assert end[-1].status == "failed" and end[-1].error["code"] == "upstream_stream_truncated"  # type: ignore[union-attr]


def test_chats_sampling_settings_in_gemini_names() -> None:
    body = {"top_k": 40, "seed": 7, "presence_penalty": 0.5, "frequency_penalty": 0.25, "temperature": 0}
    gc = chat_to_gemini({"model": "m", "messages": [], **body}, ctx())["generationConfig"]
    assert {k: gc[k] for k in ("topK", "seed", "presencePenalty", "frequencyPenalty", "temperature")} == {
        "topK": 40, "seed": 7, "presencePenalty": 0.5, "frequencyPenalty": 0.25, "temperature": 0,
    }  # fmt: skip
