"""transformers/messages_decode.py: Anthropic Messages answers as unified events, streamed
and whole; and a round trip through the Messages encoder gives the same content back."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformers.context import Ctx
from transformers.events import Finish, Reasoning, ReasoningEnd, Start, Text, ToolCall, ToolCallEnd, Usage
from transformers.messages_decode import MessagesStreamDecoder, decode_message
from transformers.messages_encode import MessagesEncoder

STREAM: list[dict[str, Any]] = [
    {"type": "message_start", "message": {"id": "msg_1", "model": "kimi-k2.6", "usage": {"input_tokens": 10, "cache_read_input_tokens": 90}}},
    {"type": "ping"},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "run ls"}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "SIG"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Running."}},
    {"type": "content_block_stop", "index": 1},
    {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"command":'}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '"ls"}'}},
    {"type": "content_block_stop", "index": 2},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}},
    {"type": "message_stop"},
]  # fmt: skip


def feed(objs: list[dict[str, Any]]) -> list[Any]:
    dec = MessagesStreamDecoder(Ctx())
    out: list[Any] = []
    for o in objs:
        out += dec.feed(o)
    return out + dec.end()


def test_a_stream() -> None:
    evs = feed(STREAM)
    start = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 90, "cache_write_tokens": 0},
             "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 100}  # fmt: skip
    assert evs == [
        Start(response_id="msg_1", model="kimi-k2.6", usage=start),  # the input, known at the start
        Reasoning("run ls"),
        ReasoningEnd(encrypted_content="SIG"),
        Text("Running."),
        ToolCall(0, "", "toolu_1", "Bash"),
        ToolCall(0, '{"command":'),
        ToolCall(0, '"ls"}'),
        ToolCallEnd(0, '{"command":"ls"}'),
        Usage({"input_tokens": 100, "input_tokens_details": {"cached_tokens": 90, "cache_write_tokens": 0},
               "output_tokens": 12, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 112}),
        Finish("completed", extra={"stop_reason": "tool_use", "stop_sequence": None}),
    ]  # fmt: skip


def test_stop_reasons_errors_and_a_cut_stream() -> None:
    for reason, want in (("max_tokens", ("incomplete", "max_output_tokens")), ("refusal", ("incomplete", "content_filter")),
                         ("end_turn", ("completed", None)), ("pause_turn", ("completed", None))):  # fmt: skip
        fin = feed([STREAM[0], {"type": "message_delta", "delta": {"stop_reason": reason}}, {"type": "message_stop"}])[
            -1
        ]
        assert (fin.status, fin.reason) == want and fin.extra["stop_reason"] == reason  # and as it came
    err = feed([STREAM[0], {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}])
    assert err[-1].status == "failed" and err[-1].error["message"] == "Overloaded"
    cut = feed(STREAM[:8])
    assert cut[-1].status == "failed" and cut[-1].error["code"] == "upstream_stream_truncated"


def test_a_delta_for_a_block_never_started_starts_it() -> None:
    c = Ctx()
    dec = MessagesStreamDecoder(c)
    out = dec.feed(STREAM[0]) + dec.feed(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}}
    )
    assert out[-1] == Text("hi") and c.repairs == ["sse_junk_line_skipped"]


def test_a_whole_message() -> None:
    msg = {
        "id": "msg_2", "type": "message", "role": "assistant", "model": "glm",
        "content": [{"type": "thinking", "thinking": "hm", "signature": "S"}, {"type": "text", "text": "ok"},
                    {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a"}}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 3, "output_tokens": 4},
    }  # fmt: skip
    evs = decode_message(msg, Ctx())
    assert [type(e).__name__ for e in evs] == [
        "Start", "Reasoning", "ReasoningEnd", "Text", "ToolCall", "ToolCall", "ToolCallEnd", "Usage", "Finish",
    ]  # fmt: skip
    assert evs[6] == ToolCallEnd(0, '{"path":"a"}')
    assert evs[-1] == Finish("completed", extra={"stop_reason": "tool_use", "stop_sequence": None})


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.builds(Text, st.text(max_size=6)),
            st.builds(Reasoning, st.text(min_size=1, max_size=6)),
        ),
        max_size=6,
    ),
    st.lists(st.lists(st.sampled_from(['{"a"', ":", "1", "}"]), max_size=4), max_size=3),
)
def test_a_round_trip_through_the_encoder_keeps_the_content(parts: list[Any], calls: list[list[str]]) -> None:
    events: list[Any] = [Start(), *parts]
    for i, pieces in enumerate(calls):
        events += [ToolCall(i, "", f"c{i}", f"f{i}"), *(ToolCall(i, p) for p in pieces), ToolCallEnd(i)]
    events.append(Finish())
    enc = MessagesEncoder(Ctx(envelope_key=b"k" * 32))
    wire = [e for ev in events for e in enc.feed(ev)]
    back = feed(wire)
    assert "".join(e.text for e in back if isinstance(e, Text)) == "".join(p.text for p in parts if isinstance(p, Text))
    assert "".join(e.text for e in back if isinstance(e, Reasoning)) == "".join(
        p.text for p in parts if isinstance(p, Reasoning)
    )
    ends = [e for e in back if isinstance(e, ToolCallEnd)]
    assert [e.arguments for e in ends] == ["".join(p) or "{}" for p in calls]
    assert back[-1].status == "completed"


def test_a_mapped_tool_id_comes_back_as_it_was() -> None:
    from transformers.ids import to_anthropic_id

    dec = MessagesStreamDecoder(Ctx())
    dec.feed({"type": "message_start", "message": {"id": "m"}})
    out = dec.feed({"type": "content_block_start", "index": 0, "content_block": {
        "type": "tool_use", "id": to_anthropic_id("functions.Bash:0"), "name": "Bash", "input": {}}})  # fmt: skip
    assert out == [ToolCall(0, "", "functions.Bash:0", "Bash")]


def test_redacted_thinking_is_marked() -> None:
    dec = MessagesStreamDecoder(Ctx())
    dec.feed({"type": "message_start", "message": {"id": "m"}})
    dec.feed({"type": "content_block_start", "index": 0, "content_block": {"type": "redacted_thinking", "data": "D"}})
    assert dec.feed({"type": "content_block_stop", "index": 0}) == [ReasoningEnd(encrypted_content="D", redacted=True)]
    enc = MessagesEncoder(Ctx())
    out = [e for ev in (Start(), ReasoningEnd(encrypted_content="D", redacted=True), Text("hi")) for e in enc.feed(ev)]
    starts = [e["content_block"] for e in out if e["type"] == "content_block_start"]
    assert starts == [{"type": "redacted_thinking", "data": "D"}, {"type": "text", "text": ""}]


@pytest.mark.parametrize(
    ("kind", "code"),
    [("overloaded_error", "server_is_overloaded"), ("rate_limit_error", "rate_limit_exceeded"),
     ("api_error", "server_error"), ("something_new", "upstream_error")],
)  # fmt: skip
def test_an_error_event_keeps_its_kind_as_the_code(kind: str, code: str) -> None:
    dec = MessagesStreamDecoder(Ctx())
    dec.feed({"type": "message_start", "message": {"id": "m"}})
    out = dec.feed({"type": "error", "error": {"type": kind, "message": "Overloaded"}})
    assert isinstance(out[-1], Finish) and out[-1].status == "failed"
    assert out[-1].error is not None and out[-1].error["code"] == code and out[-1].error["message"] == "Overloaded"
