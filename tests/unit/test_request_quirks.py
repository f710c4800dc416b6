"""Request-side quirk table (docs/rules.md §4 R3-c, T3-14, T1-5, T1-6, §1 "never rewrite ids Chat→Chat",
§5.5 envelope stripping, §7.5 Moonshot-only fields, Kimi tool_choice)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from transformers.context import QUIRKS, Ctx
from transformers.envelope import seal
from transformers.request_quirks import QUIRK_TABLE, prepare_chat, prepare_responses
from transformers.request_r2c import responses_to_chat

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def ctx(*quirks: str, **kw) -> Ctx:
    return Ctx(quirks=frozenset(quirks), upstream_model=kw.pop("upstream_model", "up"), **kw)


def test_table_shape():
    for _rule, protocol, gate, fn in QUIRK_TABLE:
        assert protocol in ("chat", "responses")
        assert callable(gate) and callable(fn)
    gated = {
        g.__name__.split("_", 1)[1].removesuffix("_same_protocol")
        for _, _, g, _ in QUIRK_TABLE
        if g.__name__.startswith(("on_", "off_"))
    }
    assert gated <= QUIRKS


# -- T3-14 / R3-c ----------------------------------------------------------------------------

T314_BODY = {
    "model": "mimo-v2.6-flash",
    "input": [{"type": "message", "role": "user", "content": "patch it"}],
    "max_output_tokens": 4096,
    "tool_choice": "required",
    "parallel_tool_calls": True,
    "tools": [
        {
            "type": "custom",
            "name": "apply_patch",
            "description": "FREEFORM tool.",
            "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch hunk+ end_patch"},
        },
        {
            "type": "function",
            "name": "shell",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    ],
}


def test_T3_14_mimo_request_normalization():
    c = ctx("mimo_request", "mimo_raw_patch", upstream_model="mimo-v2.6-flash")
    out = prepare_chat(responses_to_chat(copy.deepcopy(T314_BODY), c), c, translated=True)
    assert out["max_completion_tokens"] == 4096 and "max_tokens" not in out
    assert out["tool_choice"] == "auto"
    assert "parallel_tool_calls" not in out
    fn = out["tools"][0]["function"]
    assert fn["name"] == "apply_patch"
    assert fn["strict"] is True
    assert fn["parameters"]["additionalProperties"] is False
    assert fn["parameters"]["required"] == ["input"]
    # an ordinary function is not made strict
    assert "strict" not in out["tools"][1]["function"]
    assert "additionalProperties" not in out["tools"][1]["function"]["parameters"]
    assert c.repairs == ["mimo_request"]


def test_T3_14_non_mimo_model_gets_none_of_these_rewrites():
    c = ctx(upstream_model="deepseek-v4")
    out = prepare_chat(responses_to_chat(copy.deepcopy(T314_BODY), c), c, translated=True)
    assert out["max_tokens"] == 4096 and "max_completion_tokens" not in out
    assert out["tool_choice"] == "required"
    assert out["parallel_tool_calls"] is True
    fn = out["tools"][0]["function"]
    assert "strict" not in fn and "additionalProperties" not in fn["parameters"]
    assert c.repairs == []


def chat_body(**kw) -> dict:
    body = {
        "model": "client-model",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    }
    body.update(kw)
    return body


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"tool_choice": "none"}, {}),
        ({"tool_choice": {"type": "function", "function": {"name": "f"}}}, {"tool_choice": "auto"}),
        ({"tool_choice": "required", "parallel_tool_calls": False}, {"tool_choice": "auto"}),
        ({}, {"tool_choice": "auto"}),
        ({"max_tokens": 10}, {"tool_choice": "auto", "max_completion_tokens": 10}),
        ({"max_tokens": 10, "max_completion_tokens": 20}, {"tool_choice": "auto", "max_completion_tokens": 20}),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}},
            {"tool_choice": "auto", "response_format": {"type": "json_object"}},
        ),
    ],
    ids=["none-drops-tools", "named", "required", "absent", "max_tokens", "both-limits", "json_schema"],
)
def test_mimo_request_same_protocol(kw, expected):
    c = ctx("mimo_request")
    out = prepare_chat(chat_body(**kw), c, translated=False)
    rest = {k: v for k, v in out.items() if k not in ("model", "messages", "tools")}
    assert rest == expected
    assert ("tools" in out) is (kw.get("tool_choice") != "none")
    assert c.repairs == ["mimo_request"]


def test_mimo_catalogue_max_output_tokens():
    c = ctx("mimo_request", max_output_tokens=131072)
    out = prepare_chat({"messages": [{"role": "user", "content": "hi"}]}, c, translated=False)
    assert out["max_completion_tokens"] == 131072


# -- Kimi ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("required", "auto"),
        ({"type": "function", "function": {"name": "f"}}, "auto"),
        ("auto", "auto"),
        ("none", "none"),
    ],
)
def test_kimi_request_tool_choice(choice, expected):
    c = ctx("kimi_request")
    out = prepare_chat(chat_body(tool_choice=choice, max_tokens=100), c, translated=False)
    assert out["tool_choice"] == expected
    assert out["max_completion_tokens"] == 100 and "max_tokens" not in out
    assert c.repairs == ["kimi_request"]


def test_max_completion_tokens_quirk():
    c = ctx("max_completion_tokens")
    out = prepare_chat(chat_body(max_tokens=5), c, translated=False)
    assert out["max_completion_tokens"] == 5 and "max_tokens" not in out
    assert c.repairs == ["max_completion_tokens"]


# -- Chat → Chat: ids never touched, same-protocol basics --------------------------------------

KOSONG_HISTORY = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "read"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "id": "functions.Read:0", "function": {"name": "Read", "arguments": "{}"}},
            {"type": "function", "id": "Write:6", "function": {"name": "Write", "arguments": "{}"}},
            {"type": "function", "id": "functions.Read:0|fc_1", "function": {"name": "Read", "arguments": "{}"}},
        ],
    },
    {"role": "tool", "tool_call_id": "functions.Read:0", "content": "a"},
    {"role": "tool", "tool_call_id": "Write:6", "content": "b"},
    {"role": "tool", "tool_call_id": "functions.Read:0|fc_1", "content": "c"},
]


@pytest.mark.parametrize("quirks", [(), tuple(sorted(QUIRKS))], ids=["no-quirks", "all-quirks"])
def test_chat_to_chat_never_rewrites_ids(quirks):
    body = {"model": "kimi", "messages": copy.deepcopy(KOSONG_HISTORY)}
    out = prepare_chat(body, ctx(*quirks), translated=False)
    assert [tc["id"] for tc in out["messages"][2]["tool_calls"]] == [
        "functions.Read:0",
        "Write:6",
        "functions.Read:0|fc_1",
    ]
    assert [m["tool_call_id"] for m in out["messages"][3:]] == ["functions.Read:0", "Write:6", "functions.Read:0|fc_1"]
    assert body["messages"] == KOSONG_HISTORY  # client body not mutated


def test_same_protocol_basics():
    c = ctx(upstream_model="kimi-k2.6")
    body = {
        "model": "alias",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": False},
        "tool_choice": "auto",
        "parallel_tool_calls": True,
    }
    out = prepare_chat(body, c, translated=False)
    assert out == {
        "model": "kimi-k2.6",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert c.repairs == ["stream_include_usage", "tool_choice_without_tools"]


def test_same_protocol_fills_toolinfo():
    c = ctx()
    prepare_chat(
        chat_body(
            tools=[
                {
                    "type": "function",
                    "function": {
                        "name": "apply_patch",
                        "parameters": {
                            "type": "object",
                            "properties": {"patch": {"type": "string"}},
                            "required": ["patch"],
                        },
                    },
                }
            ]
        ),
        c,
        translated=False,
    )
    assert c.tools.functions == {"apply_patch"}
    assert c.tools.single_string_param == {"apply_patch": "patch"}


def test_translated_request_keeps_model_and_stream_options():
    c = ctx(upstream_model="other")
    body = {"model": "already-set", "messages": [], "stream": True}
    assert prepare_chat(body, c, translated=True) == body


# -- Moonshot-only fields --------------------------------------------------------------------

MOONSHOT_BODY = {
    "model": "kimi",
    "messages": [
        {
            "role": "user",
            "content": [{"type": "text", "text": "look"}, {"type": "video_url", "video_url": {"url": "v"}}],
        },
        {
            "role": "assistant",
            "content": None,
            "extras": {"x": 1},
            "tool_calls": [
                {"type": "function", "id": "functions.f:0", "function": {"name": "f", "arguments": "{}"}, "extras": {}}
            ],
        },
        {"role": "tool", "tool_call_id": "functions.f:0", "content": "ok"},
        {"role": "assistant", "content": "Prefix", "partial": True},
    ],
    "tools": [
        {"type": "builtin_function", "function": {"name": "$web_search"}},
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
    ],
}


def test_moonshot_fields_stripped_for_other_upstreams():
    c = ctx()
    out = prepare_chat(copy.deepcopy(MOONSHOT_BODY), c, translated=False)
    assert out["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "look"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"type": "function", "id": "functions.f:0", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "functions.f:0", "content": "ok"},
        {"role": "assistant", "content": "Prefix"},
    ]
    assert out["tools"] == [MOONSHOT_BODY["tools"][1]]
    assert c.tools.dropped == ["$web_search"]
    assert c.repairs == ["strip_moonshot_fields"]


def test_moonshot_fields_kept_for_moonshot():
    c = ctx("moonshot_fields", upstream_model="kimi")
    out = prepare_chat(copy.deepcopy(MOONSHOT_BODY), c, translated=False)
    assert out == MOONSHOT_BODY
    assert c.repairs == []


def test_only_builtin_tools_leaves_no_tools():
    body = {"messages": [], "tools": [MOONSHOT_BODY["tools"][0]], "tool_choice": "auto"}
    out = prepare_chat(body, ctx(), translated=False)
    assert out == {"model": "up", "messages": []}


def test_a_translated_body_holds_no_moonshot_field():
    """strip_moonshot_fields runs on same-protocol bodies only: what responses_to_chat writes
    (from items, parts and tools of every kind, hosted ones and video included) is left
    unchanged by it."""
    body = json.loads((FIXTURES / "codex_request.json").read_text())
    body["tools"] = [*json.loads((FIXTURES / "codex_tools_0.169.json").read_text()), {"type": "web_search"}]
    body["input"].append(
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_video", "video_url": "v"}, {"type": "video_url", "video_url": {"url": "v"}}],
        }
    )
    body["input"].append({"type": "message", "role": "assistant", "content": "x", "partial": True, "extras": {}})
    c = ctx()
    out = responses_to_chat(body, c)
    stripped = prepare_chat(out, Ctx(quirks=frozenset()), translated=False)
    assert stripped["messages"] == out["messages"] and stripped["tools"] == out["tools"]


# -- kimi_tool_ids: Kimi Code's sanitised native ids restored (issue 11, docs/rules.md §1) ------------

KIMI_CODE_HISTORY = [
    {"role": "user", "content": "read a and run ls"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "r",
        "tool_calls": [
            {"type": "function", "id": "functions_Read_0", "function": {"name": "Read", "arguments": "{}"}},
            {"type": "function", "id": "functions_Bash_1", "function": {"name": "Bash", "arguments": "{}"}},
        ],
    },
    {"role": "tool", "tool_call_id": "functions_Read_0", "content": "a"},
    {"role": "tool", "tool_call_id": "functions_Bash_1", "content": "b"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "r",
        "tool_calls": [
            {"type": "function", "id": "call_x", "function": {"name": "Read", "arguments": "{}"}},
            {"type": "function", "id": "functions_Bash_9", "function": {"name": "Read", "arguments": "{}"}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_x", "content": "c"},
    {"role": "tool", "tool_call_id": "functions_Bash_9", "content": "d"},
]


def _ids(messages: list) -> list[str]:
    return [
        tc["id"] if m["role"] == "assistant" else m["tool_call_id"]
        for m in messages
        if m["role"] in ("assistant", "tool")
        for tc in (m.get("tool_calls") or [m])
    ]


@pytest.mark.parametrize("translated", [False, True])
def test_kimi_tool_ids_restores_calls_and_their_tool_messages(translated):
    body = {"model": "k", "messages": copy.deepcopy(KIMI_CODE_HISTORY)}
    c = ctx("kimi_tool_ids")
    out = prepare_chat(body, c, translated=translated)
    assert _ids(out["messages"]) == [
        "functions.Read:0",
        "functions.Bash:1",
        "functions.Read:0",
        "functions.Bash:1",
        "call_x",
        "functions_Bash_9",  # names Bash on a Read call: not provable, left alone
        "call_x",
        "functions_Bash_9",
    ]
    assert c.repairs.count("kimi_tool_ids_restored") == 1
    assert body["messages"] == KIMI_CODE_HISTORY  # the client's body is not mutated
    assert out["messages"][4] is body["messages"][4]  # untouched messages are the same objects


@pytest.mark.parametrize(
    "quirks",
    [(), ("reasoning_replay", "developer_to_system"), ("kimi_tool_ids", "strict_tool_ids")],
    ids=["no-quirks", "other-profile", "strict-wins"],
)
def test_kimi_tool_ids_off_leaves_ids_alone(quirks):
    c = ctx(*quirks)
    out = prepare_chat({"messages": copy.deepcopy(KIMI_CODE_HISTORY)}, c, translated=False)
    assert _ids(out["messages"]) == _ids(KIMI_CODE_HISTORY)
    assert "kimi_tool_ids_restored" not in c.repairs


def test_kimi_tool_ids_nothing_to_restore_records_nothing():
    c = ctx("kimi_tool_ids")
    out = prepare_chat({"messages": copy.deepcopy(KOSONG_HISTORY)}, c, translated=False)
    assert out["messages"] == KOSONG_HISTORY and c.repairs == []


def test_kimi_tool_ids_through_a_responses_client():
    """Kimi Code's openai_responses provider: function_call/function_call_output call_ids
    sanitised; translated to Chat for a Kimi upstream, the upstream gets its native ids."""
    body = {
        "model": "k",
        "input": [
            {"type": "message", "role": "user", "content": "read"},
            {"type": "function_call", "call_id": "functions_Read_0", "name": "Read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "functions_Read_0", "output": "a"},
            {"type": "function_call", "call_id": "functions_Read_1_2", "name": "Read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "functions_Read_1_2", "output": "b"},
        ],
        "tools": [{"type": "function", "name": "Read", "parameters": {"type": "object"}}],
    }
    c = ctx("kimi_tool_ids", "reasoning_replay")
    out = prepare_chat(responses_to_chat(body, c), c, translated=True)
    assert _ids(out["messages"]) == ["functions.Read:0", "functions.Read:0", "functions.Read:1", "functions.Read:1"]
    assert "kimi_tool_ids_restored" in c.repairs


# -- reasoning replay on Chat → Chat ---------------------------------------------------------


def test_reasoning_replay_placeholder_same_protocol():
    body = {
        "messages": [
            {"role": "user", "content": "u"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "a", "content": "ok"},
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "known",
                "tool_calls": [{"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "b", "content": "ok"},
            {"role": "assistant", "content": "done"},
        ]
    }
    c = ctx("reasoning_replay")
    out = prepare_chat(copy.deepcopy(body), c, translated=False)
    assert out["messages"][1]["reasoning_content"] == "tool call"
    assert out["messages"][3]["reasoning_content"] == "known"
    assert "reasoning_content" not in out["messages"][5]
    assert c.repairs == ["reasoning_placeholder"]
    assert "reasoning_content" not in body["messages"][1]


def test_reasoning_key_reasoning_renames_and_placeholder_uses_it():
    body = {
        "messages": [
            {"role": "assistant", "content": "x", "reasoning_content": "r"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
        ]
    }
    c = ctx("reasoning_key_reasoning", "reasoning_replay")
    out = prepare_chat(body, c, translated=True)
    assert out["messages"][0] == {"role": "assistant", "content": "x", "reasoning": "r"}
    assert out["messages"][1]["reasoning"] == "tool call"
    assert c.repairs == ["reasoning_key_reasoning", "reasoning_placeholder"]


# -- Responses upstreams ----------------------------------------------------------------------


def test_T1_5_mantle_item_replayed_to_openai():
    """Items that came from Mantle (id resolved at the stream boundary) go to OpenAI with
    store:false: call_id kept, item ids dropped; everything else unchanged."""
    body = {
        "model": "gpt-5.2",
        "store": False,
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
            {"id": "rs_M1", "type": "reasoning", "summary": [], "encrypted_content": "gAAAAmantle"},
            {"id": "fc_A", "type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            {"id": "msg_B", "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "OK"}]},
        ],
    }
    c = ctx(upstream_model="gpt-5.2")
    out = prepare_responses(copy.deepcopy(body), c, translated=False)
    assert out["input"] == [
        body["input"][0],
        {"type": "reasoning", "summary": [], "encrypted_content": "gAAAAmantle"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        body["input"][3],
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "OK"}]},
    ]
    assert c.repairs == ["store_false_item_ids"]


def test_T1_5_ids_kept_when_store_is_not_false():
    body = {
        "input": [
            {"id": "fc_A", "type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        ]
    }
    c = ctx()
    out = prepare_responses(body, c, translated=False)
    assert out["input"] == body["input"]
    assert out["model"] == "up"


def test_T1_6_mantle_request_on_responses():
    body = {
        "model": "openai.gpt-oss-120b",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "OK"}]},
            {
                "role": "assistant",
                "content": [{"type": "output_text", "text": "O"}, {"type": "output_text", "text": "K"}],
            },
        ],
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "tool_choice": "none",
    }
    c = ctx("mantle_request", upstream_model="openai.gpt-oss-120b")
    out = prepare_responses(copy.deepcopy(body), c, translated=False)
    assert out == {
        "model": "openai.gpt-oss-120b",
        "input": [
            body["input"][0],
            {"type": "message", "role": "assistant", "content": "OK"},
            {"role": "assistant", "content": "OK"},
        ],
    }
    assert c.repairs == ["mantle_request"]


def test_mantle_forced_choice_becomes_auto():
    c = ctx("mantle_request")
    out = prepare_responses(
        {"input": "hi", "tools": [{"type": "function", "name": "f"}], "tool_choice": "required"}, c, translated=True
    )
    assert out["tool_choice"] == "auto" and out["tools"]


SEALED = seal("our reasoning", b"k")
USER = {"type": "message", "role": "user", "content": "u"}
R_SEALED = {
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "our reasoning"}],
    "encrypted_content": SEALED,
}
R_FOREIGN = {"type": "reasoning", "summary": [], "encrypted_content": "gAAAAopenai"}
R_PLAIN = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}]}
CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "ok"}

# id, input, what is left with the quirk on toward OpenAI (off: the input as sent, always)
ENVELOPE_CASES = [
    ("sealed-item-goes-whole", [USER, R_SEALED, R_FOREIGN, CALL, OUTPUT], [USER, R_FOREIGN, CALL, OUTPUT]),
    ("every-sealed-item", [R_SEALED, USER, {**R_SEALED, "id": "rs_2"}, CALL, OUTPUT], [USER, CALL, OUTPUT]),
    ("bad-mac-still-ours", [{**R_SEALED, "encrypted_content": "pxy1.not-base64!.x"}, USER], [USER]),
    ("foreign-blob-kept", [USER, R_FOREIGN], None),  # encrypted_content_retry's business
    ("summary-only-kept", [USER, R_PLAIN], None),
    ("non-string-blob-kept", [USER, {**R_PLAIN, "encrypted_content": 5}, {**R_PLAIN, "encrypted_content": None}], None),
    ("prefix-elsewhere-kept", [{**USER, "content": SEALED}, {**OUTPUT, "output": SEALED}, CALL], None),
    ("not-a-reasoning-item", [{"type": "compaction", "encrypted_content": SEALED}, USER], None),
    ("odd-items-kept", [USER, "pxy1.x", None, R_SEALED], [USER, "pxy1.x", None]),
    ("no-input", None, None),
    ("string-input", "pxy1.text", None),
]  # fmt: skip


@pytest.mark.parametrize("on", [True, False], ids=["on", "off"])
@pytest.mark.parametrize(("items", "want"), [c[1:] for c in ENVELOPE_CASES], ids=[c[0] for c in ENVELOPE_CASES])
def test_strip_reasoning_envelope(items, want, on):
    body = {"model": "m", "store": True} if items is None else {"model": "m", "store": True, "input": items}
    sent = copy.deepcopy(body)
    c = ctx("strip_reasoning_envelope", "responses_native") if on else ctx()
    out = prepare_responses(sent, c, translated=True)
    assert sent == body  # the client's body is never mutated
    changed = on and want is not None
    assert out.get("input") == (want if changed else items)
    assert c.repairs == (["strip_reasoning_envelope"] if changed else [])
    if not changed and items is not None:
        assert out["input"] is sent["input"]  # nothing to strip: the very same list


def test_strip_reasoning_envelope_elsewhere_keeps_the_item_without_its_blob():
    """Toward a Responses upstream other than OpenAI the item stays, without the blob; an
    empty summary gets the envelope's text (opened with the request's key)."""
    key = b"k" * 32
    bare = {"type": "reasoning", "summary": [], "encrypted_content": seal("thought it through", key)}
    body = {"model": "m", "input": [USER, R_SEALED, bare, R_FOREIGN, CALL, OUTPUT]}
    c = ctx("strip_reasoning_envelope", envelope_key=key)
    out = prepare_responses(copy.deepcopy(body), c, translated=True)
    assert out["input"] == [
        USER,
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "our reasoning"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thought it through"}]},
        R_FOREIGN,
        CALL,
        OUTPUT,
    ]
    assert c.repairs == ["strip_reasoning_envelope"]


@pytest.mark.parametrize(
    ("raw", "wire"),
    [
        pytest.param(["functions.Read:0|fc_abc"], ["functions.Read:0"], id="T0-3-responses"),
        pytest.param(
            ["functions.Read:0|fc_1", "functions.Read:0|fc_2"],
            ["functions.Read:0", "functions.Read:0_2"],
            id="T0-4-responses",
        ),
        pytest.param(["Write:6"], ["Write_6"], id="T0-2-responses"),
        pytest.param(
            ["functions.Read:0", "call_abc123"], ["functions.Read:0", "call_abc123"], id="T0-1-T0-10-responses"
        ),
    ],
)
def test_responses_call_ids_same_protocol(raw, wire):
    items = []
    for r in raw:
        items.append({"type": "custom_tool_call", "call_id": r, "name": "apply_patch", "input": "x"})
        items.append({"type": "custom_tool_call_output", "call_id": r, "output": "ok"})
    c = ctx()
    out = prepare_responses({"input": items}, c, translated=False)
    assert [it["call_id"] for it in out["input"]] == [w for w in wire for _ in (0, 1)]
    assert ("responses_call_ids" in c.repairs) is (raw != wire)


def test_prepare_responses_leaves_string_input_alone():
    assert prepare_responses({"model": "m", "input": "hi"}, ctx(), translated=True) == {"model": "m", "input": "hi"}


def test_plan_is_the_gates_decision_for_every_quirk_set():
    """``plan`` remembers which passes run per (protocol, quirk set, translated): for any
    quirk set, the passes whose gates say so, in the table's order; two quirk sets that the
    gates tell apart get their own plans."""
    import random

    from transformers import request_quirks as rq

    rng = random.Random(7)
    names = sorted(QUIRKS)
    sets = [frozenset(), frozenset(names)] + [frozenset(rng.sample(names, rng.randint(1, 8))) for _ in range(60)]
    for quirks in sets:
        c = ctx(*quirks)
        for protocol in ("chat", "responses"):
            for translated in (False, True):
                want = tuple(
                    fn for _r, p, gate, fn in QUIRK_TABLE if p == protocol and gate(Ctx(quirks=quirks), translated)
                )
                assert rq.plan(protocol, c, translated) == want
                assert rq.plan(protocol, c, translated) == want  # remembered: the same answer
    assert len(rq._PLANS) <= rq._PLANS_MAX


def test_plans_stay_bounded():
    from transformers import request_quirks as rq

    names = sorted(QUIRKS)
    for i in range(rq._PLANS_MAX + 10):
        rq.plan("chat", ctx(*(n for b, n in enumerate(names) if i >> b & 1)), False)
    assert 0 < len(rq._PLANS) <= rq._PLANS_MAX
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    out = prepare_chat(body, ctx(), translated=False)  # still right after the plans were dropped
    assert out["stream_options"] == {"include_usage": True} and out["model"] == "up"
