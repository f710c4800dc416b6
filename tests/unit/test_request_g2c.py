"""Gemini ``generateContent`` request → Chat request (transformers/request_g2c.py): a table of
cases, then the thought signature rows."""

from __future__ import annotations

from typing import Any

import pytest

from transformers import envelope
from transformers.context import Ctx
from transformers.errors import RequestError
from transformers.request_g2c import gemini_to_chat, minted_id, schema_from_openapi

KEY = b"k" * 32
USER = {"role": "user", "parts": [{"text": "hi"}]}


def ctx(**kw: Any) -> Ctx:
    return Ctx(upstream_model="up", public_model="pub", **kw)


def run(body: dict[str, Any], c: Ctx | None = None) -> dict[str, Any]:
    return gemini_to_chat({"model": "pub", **body}, c or ctx())


CALL = {"functionCall": {"id": "c1", "name": "sh", "args": {"cmd": "ls"}}}
RESULT = {"functionResponse": {"id": "c1", "name": "sh", "response": {"output": "a.py"}}}
TOOL_CALL = {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": '{"cmd":"ls"}'}}

# (name, body, the messages the upstream gets)
MESSAGES: list[tuple[str, dict[str, Any], list[dict[str, Any]]]] = [
    ("text", {"contents": [USER]}, [{"role": "user", "content": "hi"}]),
    (
        "system instruction",
        {"contents": [USER], "systemInstruction": {"parts": [{"text": "a"}, {"text": "b"}]}},
        [{"role": "system", "content": "a\nb"}, {"role": "user", "content": "hi"}],
    ),
    ("system as a string", {"contents": [USER], "systemInstruction": "s"},
     [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]),
    (
        "an image",
        {"contents": [{"role": "user", "parts": [{"text": "see"}, {"inlineData": {"mimeType": "image/png",
                                                                                   "data": "AAA"}}]}]},
        [{"role": "user", "content": [{"type": "text", "text": "see"},
                                      {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}}]}],
    ),
    (
        "a call and its result",
        {"contents": [USER, {"role": "model", "parts": [{"text": "ok"}, CALL]}, {"role": "user", "parts": [RESULT]}]},
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok", "tool_calls": [TOOL_CALL]},
         {"role": "tool", "tool_call_id": "c1", "content": "a.py"}],
    ),
    (
        "a result that is not one output string: its JSON",
        {"contents": [USER, {"role": "model", "parts": [CALL]},
                      {"role": "user", "parts": [{"functionResponse": {"id": "c1", "name": "sh",
                                                                       "response": {"error": "boom"}}}]}]},
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
         {"role": "tool", "tool_call_id": "c1", "content": '{"error":"boom"}'}],
    ),
    (
        "results first, then the user's text",
        {"contents": [USER, {"role": "model", "parts": [CALL]}, {"role": "user", "parts": [{"text": "next"}, RESULT]}]},
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
         {"role": "tool", "tool_call_id": "c1", "content": "a.py"}, {"role": "user", "content": "next"}],
    ),
    (
        "thought parts are the reasoning",
        {"contents": [USER, {"role": "model", "parts": [{"text": "hmm", "thought": True}, {"text": "ok"}]}]},
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok", "reasoning_content": "hmm"}],
    ),
    (
        "a result with no call: user text",
        {"contents": [USER, {"role": "user", "parts": [{"functionResponse": {"name": "sh", "response": {}}}]}]},
        [{"role": "user", "content": "hi"}, {"role": "user", "content": "[sh result]\n{}"}],
    ),
    ("an empty model content is left out", {"contents": [USER, {"role": "model", "parts": []}]},
     [{"role": "user", "content": "hi"}]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "body", "want"), MESSAGES, ids=[m[0] for m in MESSAGES])
def test_messages(name: str, body: dict[str, Any], want: list[dict[str, Any]]) -> None:
    assert run(body)["messages"] == want


def test_calls_without_ids_get_minted_ones_and_results_pair_by_name_in_order() -> None:
    model = {"role": "model", "parts": [{"functionCall": {"name": "sh", "args": {"n": 1}}},
                                        {"functionCall": {"name": "sh", "args": {"n": 2}}}]}  # fmt: skip
    results = {"role": "user", "parts": [{"functionResponse": {"name": "sh", "response": {"output": str(n)}}}
                                         for n in (1, 2)]}  # fmt: skip
    out = run({"contents": [USER, model, results]})["messages"]
    ids = [tc["id"] for tc in out[1]["tool_calls"]]
    assert ids == [minted_id(1, 0, "sh"), minted_id(1, 1, "sh")] and len(set(ids)) == 2
    assert [(m["tool_call_id"], m["content"]) for m in out[2:]] == [(ids[0], "1"), (ids[1], "2")]
    assert run({"contents": [USER, model, results]})["messages"] == out  # the same every time


TOP: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("max tokens, temperature, top p, stops",
     {"generationConfig": {"maxOutputTokens": 9, "temperature": 0.5, "topP": 0.9, "stopSequences": ["x"]}},
     {"max_tokens": 9, "temperature": 0.5, "top_p": 0.9, "stop": ["x"]}),
    ("a budget", {"generationConfig": {"thinkingConfig": {"thinkingBudget": 8192}}}, {"reasoning_effort": "medium"}),
    ("a small budget", {"generationConfig": {"thinkingConfig": {"thinkingBudget": 1024}}}, {"reasoning_effort": "low"}),
    ("a large budget", {"generationConfig": {"thinkingConfig": {"thinkingBudget": 32768}}},
     {"reasoning_effort": "high"}),
    ("a dynamic budget", {"generationConfig": {"thinkingConfig": {"thinkingBudget": -1}}},
     {"reasoning_effort": "medium"}),
    ("no budget: no reasoning", {"generationConfig": {"thinkingConfig": {"thinkingBudget": 0}}}, {}),
    ("a level", {"generationConfig": {"thinkingConfig": {"thinkingLevel": "HIGH"}}}, {"reasoning_effort": "high"}),
    ("json with a schema",
     {"generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": {"type": "object"}}},
     {"response_format": {"type": "json_schema", "json_schema": {"name": "response", "schema": {"type": "object"}}}}),
    ("json without one", {"generationConfig": {"responseMimeType": "application/json"}},
     {"response_format": {"type": "json_object"}}),
    ("stream", {"stream": True}, {"stream": True, "stream_options": {"include_usage": True}}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "body", "want"), TOP, ids=[t[0] for t in TOP])
def test_top_level(name: str, body: dict[str, Any], want: dict[str, Any]) -> None:
    out = run({"contents": [USER], **body})
    assert {k: v for k, v in out.items() if k not in ("model", "messages")} == want
    assert out["model"] == "up"


def test_thinking_param_quirk() -> None:
    c = ctx(quirks=frozenset({"thinking_param"}))
    out = run({"contents": [USER], "generationConfig": {"thinkingConfig": {"thinkingBudget": 0}}}, c)
    assert out["thinking"] == {"type": "disabled"}
    out = run({"contents": [USER], "generationConfig": {"thinkingConfig": {"thinkingLevel": "low"}}}, c)
    assert out["thinking"] == {"type": "enabled"} and "reasoning_effort" not in out


def test_tools_and_tool_config() -> None:
    c = ctx()
    tools = [
        {"functionDeclarations": [
            {"name": "a", "description": "A", "parametersJsonSchema": {"type": "object", "properties": {}}},
            {"name": "b", "parameters": {"type": "OBJECT", "properties": {"x": {"type": "STRING", "nullable": True},
                                                                          "l": {"type": "ARRAY",
                                                                                "items": {"type": "INTEGER"}}}}},
            {"name": "c"},
        ]},
        {"googleSearch": {}},
    ]  # fmt: skip
    out = run({"contents": [USER], "tools": tools, "toolConfig": {"functionCallingConfig": {"mode": "ANY"}}}, c)
    fns = [t["function"] for t in out["tools"]]
    assert fns[0] == {"name": "a", "description": "A", "parameters": {"type": "object", "properties": {}}}
    assert fns[1]["parameters"] == {"type": "object", "properties": {"x": {"type": ["string", "null"]},
                                                                     "l": {"type": "array",
                                                                           "items": {"type": "integer"}}}}  # fmt: skip
    assert fns[2]["parameters"] == {"type": "object", "properties": {}}
    assert out["tool_choice"] == "required"
    assert c.tools.dropped == ["googleSearch"] and "hosted_tool_dropped" in c.repairs
    assert c.tools.functions == {"a", "b", "c"}


@pytest.mark.parametrize(
    ("fcc", "want"),
    [
        ({"mode": "AUTO"}, "auto"),
        ({"mode": "NONE"}, "none"),
        ({"mode": "ANY", "allowedFunctionNames": ["a"]}, {"type": "function", "function": {"name": "a"}}),
        ({"mode": "VALIDATED"}, "auto"),
    ],
)
def test_tool_choice(fcc: dict[str, Any], want: Any) -> None:
    tools = [{"functionDeclarations": [{"name": "a"}]}]
    out = run({"contents": [USER], "tools": tools, "toolConfig": {"functionCallingConfig": fcc}})
    assert out["tool_choice"] == want


def test_schema_from_openapi_keeps_what_it_does_not_know() -> None:
    assert schema_from_openapi({"type": "STRING", "enum": ["A"], "format": "x"}) == {
        "type": "string",
        "enum": ["A"],
        "format": "x",
    }


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"contents": "x"}, "contents"),
        ({"contents": [1]}, "contents[0]"),
        ({"contents": [{"role": "model", "parts": [{"functionCall": {"args": {}}}]}]},
         "contents[0].parts[0].functionCall.name"),
        ({"contents": [{"role": "tool", "parts": []}]}, "contents[0].role"),
        ({"contents": [USER], "tools": [{"functionDeclarations": [{"description": "x"}]}]},
         "tools[0].functionDeclarations[0].name"),
    ],
)  # fmt: skip
def test_refusals_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(RequestError) as e:
        run(body)
    assert e.value.param == param


# -- thought signatures ------------------------------------------------------------------------


def _model(sig: str) -> dict[str, Any]:
    return {"role": "model", "parts": [{**CALL, "thoughtSignature": sig}]}


def test_our_envelope_gives_back_the_reasoning_and_gemini_signatures() -> None:
    c = ctx(envelope_key=KEY)
    sealed = envelope.seal("I think", KEY, {"c1": "GEMINI-SIG"})
    out = run({"contents": [USER, _model(sealed), {"role": "user", "parts": [RESULT]}]}, c)
    call = out["messages"][1]["tool_calls"][0]
    assert out["messages"][1]["reasoning_content"] == "I think"
    assert call["extra_content"] == {"google": {"thought_signature": sealed}}  # (restore decides it)
    assert c.thought_signatures == {"c1": "GEMINI-SIG"}


@pytest.mark.parametrize(
    ("sig", "key", "carried", "rule"),
    [
        ("skip_thought_signature_validator", KEY, None, None),  # Gemini CLI's own stand-in
        ("FORGED", KEY, None, "thought_signature_rejected"),
        ("AS-GEMINI-WROTE-IT", b"", "AS-GEMINI-WROTE-IT", None),  # no key: nothing to check it against
    ],
)
def test_other_signatures(sig: str, key: bytes, carried: str | None, rule: str | None) -> None:
    c = ctx(envelope_key=key)
    out = run({"contents": [USER, _model(sig)]}, c)
    call = out["messages"][1]["tool_calls"][0]
    assert (call.get("extra_content") or {}).get("google", {}).get("thought_signature") == carried
    assert (rule in c.repairs) if rule else not c.repairs


def test_an_envelope_of_another_key_is_reported() -> None:
    c = ctx(envelope_key=KEY)
    out = run({"contents": [USER, _model(envelope.seal("x", b"o" * 32, {"c1": "S"}))]}, c)
    assert "extra_content" not in out["messages"][1]["tool_calls"][0]
    assert c.envelope_rejected == [("reasoning", "bad_mac")] and not c.thought_signatures


GC = {
    "topK": 40,
    "seed": 7,
    "presencePenalty": 0.5,
    "frequencyPenalty": 0.25,
    "stopSequences": ["END"],
    "candidateCount": 1,
    "responseLogprobs": True,
}


@pytest.mark.parametrize(
    ("toward", "carried", "named"),
    [
        ("chat", {"seed": 7, "presence_penalty": 0.5, "frequency_penalty": 0.25, "stop": ["END"]}, ["topK"]),
        ("responses", {}, ["topK", "seed", "presencePenalty", "frequencyPenalty", "stopSequences"]),
        ("messages", {"top_k": 40, "stop": ["END"]}, ["seed", "presencePenalty", "frequencyPenalty"]),
        (
            "gemini",
            {"top_k": 40, "seed": 7, "presence_penalty": 0.5, "frequency_penalty": 0.25, "stop": ["END"]},
            [],
        ),
    ],
)
def test_generation_settings_go_where_the_upstream_has_them_and_are_named_elsewhere(toward, carried, named) -> None:
    c = ctx()
    body = {"model": "m", "contents": [{"role": "user", "parts": [{"text": "hi"}]}], "generationConfig": GC}
    out = gemini_to_chat(body, c, toward=toward)
    keys = ("top_k", "seed", "presence_penalty", "frequency_penalty", "stop")
    assert {k: out[k] for k in keys if k in out} == carried
    assert sorted(c.dropped_fields) == sorted(f"generationConfig.{k}" for k in [*named, "responseLogprobs"])


@pytest.mark.parametrize(
    ("gc", "param"),
    [
        ({"candidateCount": 2}, "generationConfig.candidateCount"),
        ({"topK": 1.5}, "generationConfig.topK"),
        ({"seed": "7"}, "generationConfig.seed"),
        ({"temperature": True}, "generationConfig.temperature"),
        ({"stopSequences": "END"}, "generationConfig.stopSequences"),
    ],
)
def test_a_setting_that_cannot_be_honoured_is_refused_by_name(gc, param) -> None:
    body = {"model": "m", "contents": [{"role": "user", "parts": [{"text": "hi"}]}], "generationConfig": gc}
    with pytest.raises(RequestError) as e:
        gemini_to_chat(body, ctx(), toward="gemini")
    assert e.value.param == param


def test_integral_floats_are_integers_and_nulls_are_absent() -> None:
    body = {"model": "m", "contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    out = gemini_to_chat({**body, "generationConfig": {"topK": 40.0, "seed": None}}, ctx(), toward="messages")
    assert out["top_k"] == 40 and isinstance(out["top_k"], int) and "seed" not in out
