"""The sans-IO parts of the Responses WebSocket's lanes, cancel, steering and inject
(transformers/ws_lanes.py, WSSession's lanes, ResponsesStreamEncoder.interrupt)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from transformers.context import Ctx
from transformers.events import Start, Text, ToolCall
from transformers.responses_encode import ResponsesStreamEncoder
from transformers.ws_lanes import Steering, Track, lane_of, required_input, steer_input_error, tag
from transformers.ws_session import Control, Create, Reply, Turn, WSSession

U1 = {"type": "message", "role": "user", "content": "one"}
OUT = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}


def create(**kw: Any) -> str:
    return orjson.dumps({"type": "response.create", "model": "m", **kw}).decode()


def ctx() -> Ctx:
    return Ctx(quirks=frozenset(), upstream_model="m", public_model="m", max_output_tokens=None, envelope_key=b"")


@pytest.mark.parametrize(
    ("msg", "want"),
    [
        ({}, (True, None)),
        ({"stream_id": None}, (True, None)),
        ({"stream_id": "a.b-c_1"}, (True, "a.b-c_1")),
        ({"stream_id": "x" * 256}, (True, "x" * 256)),
        ({"stream_id": "x" * 257}, (False, None)),
        ({"stream_id": "has space"}, (False, None)),
        ({"stream_id": ""}, (False, None)),
        ({"stream_id": 7}, (False, None)),
    ],
)
def test_lane_of(msg: dict[str, Any], want: tuple[bool, str | None]) -> None:
    assert lane_of(msg) == want


def test_tag_adds_stream_id_to_the_event_json() -> None:
    assert tag('{"type":"x","n":1}', "a") == '{"type":"x","n":1,"stream_id":"a"}'
    assert orjson.loads(tag('{"type":"x"}', 'q"uote')) == {"type": "x", "stream_id": 'q"uote'}
    assert tag('{"type":"x"}', None) == '{"type":"x"}'


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("more tests", True),
        ("", False),
        ([], False),
        ([{"role": "user", "content": "x"}], True),
        ([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}], True),
        ([{"role": "assistant", "content": "x"}], False),
        ([{"role": "user", "content": "x", "id": "msg_1"}], False),
        ([{"type": "function_call_output", "call_id": "c", "output": "o"}], False),
        ([{"role": "user", "content": [{"type": "output_text", "text": "x"}]}], False),
        (5, False),
    ],
)
def test_steer_input(value: Any, ok: bool) -> None:
    assert (steer_input_error(value) is None) == ok


def test_required_input_stubs() -> None:
    out = [
        OUT,
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": ""},
        {"type": "mcp_approval_request", "id": "apr_1"},
    ]
    assert required_input(out) == [
        {"type": "function_call_output", "call_id": "c1", "name": "f"},
        {"type": "custom_tool_call_output", "call_id": "c2"},
        {"type": "mcp_approval_response", "approval_request_id": "apr_1"},
    ]


def test_track_sees_the_id_and_tool_items() -> None:
    t = Track()
    assert t.safe and not t.started
    t.see('{"type":"response.created","response":{"id":"resp_1"},"sequence_number":0}')
    assert t.response_id == "resp_1" and t.started
    for line in (
        '{"type":"response.created","response":{"object":"response","id":"resp_2"}}',
        '{"type":"response.created","response":{"id":"resp_\\"2"}}',
    ):
        other = Track()
        other.see(line)
        assert other.response_id == orjson.loads(line)["response"]["id"]
    t.see('{"type":"response.output_item.added","output_index":0,"item":{"type":"message"},"sequence_number":1}')
    assert t.safe  # a message is closed where it stands
    t.see('{"type":"response.output_item.added","output_index":1,"item":{"type":"function_call"},"sequence_number":2}')
    assert not t.safe


def test_steering_accept_cut_pending_take_and_the_refusals() -> None:
    s = Steering(max_steers=2)
    steer, refusal = s.submit({"type": "response.steer", "previous_response_id": "resp_x", "input": "a"})
    assert steer is None and refusal is not None and refusal["error"]["code"] == "response_not_found"
    assert "id" not in refusal["steer"] and refusal["steer"]["input"] == "a"
    s.started("resp_1", "lane", True)
    assert s.lane("resp_1") == "lane"
    a, _ = s.submit({"type": "response.steer", "previous_response_id": "resp_1", "input": "a"})
    b, _ = s.submit({"type": "response.steer", "previous_response_id": "resp_1", "input": [U1]})
    assert a is not None and b is not None and a.id != b.id
    _, too_many = s.submit({"type": "response.steer", "previous_response_id": "resp_1", "input": "c"})
    assert too_many is not None and too_many["error"]["code"] == "too_many_pending_steers"
    _, extra = s.submit({"type": "response.steer", "previous_response_id": "resp_1", "input": "c", "stream_id": "x"})
    assert extra is not None and extra["error"]["code"] == "invalid_input"
    assert [x.items for x in s.cut("resp_1")] == [[{"type": "message", "role": "user", "content": "a"}], [U1]]
    _, late = s.submit({"type": "response.steer", "previous_response_id": "resp_1", "input": "d"})
    assert late is not None and late["error"]["code"] == "response_already_completed"
    # a response that stops for tool output keeps the input queued for its continuation
    s.started("resp_2", None, True)
    c, _ = s.submit({"type": "response.steer", "previous_response_id": "resp_2", "input": "e"})
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    what, steers, stubs = s.ended("resp_2", True, [call])
    assert what == "pending" and steers == [c] and stubs[0]["call_id"] == "c1"
    assert s.take("resp_2") == [c] and s.take("resp_2") == []
    # completed without tools: a successor; failed: the input is handed back
    s.started("resp_3", None, True)
    s.submit({"type": "response.steer", "previous_response_id": "resp_3", "input": "f"})
    assert s.ended("resp_3", True, [OUT])[0] == "successor"
    s.started("resp_4", None, True)
    s.submit({"type": "response.steer", "previous_response_id": "resp_4", "input": "g"})
    assert s.ended("resp_4", False, [])[0] == "failed"
    s.started("resp_5", None, False)
    _, no = s.submit({"type": "response.steer", "previous_response_id": "resp_5", "input": "h"})
    assert no is not None and no["error"]["code"] == "steering_not_supported"


def test_interrupt_closes_the_open_message_and_ends_cancelled_or_steered() -> None:
    for how, etype, status in (
        ("cancelled", "response.failed", "cancelled"),
        ("steered", "response.incomplete", "incomplete"),
    ):
        enc = ResponsesStreamEncoder(ctx())
        evs = enc.feed(Start(response_id="resp_1")) + enc.feed(Text("par"))
        n = len(evs)
        assert enc.take_sequence() == n  # a number for an event the transport adds
        end = enc.interrupt(how)
        kinds = [e["type"] for e in end]
        assert kinds == [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            etype,
        ]
        final = end[-1]["response"]
        assert final["status"] == status and final["error"] is None
        assert final["output"][0]["status"] == "incomplete" and final["output"][0]["content"][0]["text"] == "par"
        assert final["incomplete_details"] == (None if how == "cancelled" else {"reason": "steered"})
        assert [e["sequence_number"] for e in end] == list(range(n + 1, n + 5))
        assert enc.interrupt(how) == []  # once only


def test_interrupt_before_anything_and_drops_an_unfinished_call() -> None:
    enc = ResponsesStreamEncoder(ctx())
    assert [e["type"] for e in enc.interrupt("cancelled")] == [
        "response.created",
        "response.in_progress",
        "response.failed",
    ]
    enc = ResponsesStreamEncoder(ctx())
    enc.feed(ToolCall(index=0, call_id="c1", name=None, arguments='{"a"'))
    end = enc.interrupt("steered")
    assert end[-1]["response"]["output"] == []


def test_session_lanes_keep_a_transcript_each_and_may_fork() -> None:
    s = WSSession(1 << 20)
    a = s.create(Create(orjson.loads(create(input=[U1], stream_id="a")), "a"))
    b = s.create(Create(orjson.loads(create(input=[U1], stream_id="b")), "b"))
    assert isinstance(a, Turn) and isinstance(b, Turn) and "stream_id" not in a.body
    s.completed("resp_a", [OUT], a)
    s.completed("resp_b", [], b)
    fork = s.create(Create(orjson.loads(create(input=[], previous_response_id="resp_a")), "c"))
    assert isinstance(fork, Turn) and not fork.foreign and fork.body["input"] == [U1, OUT]
    nxt = s.successor(fork, "resp_c", [OUT], [U1])
    assert nxt.previous == "resp_c" and nxt.body["input"] == [U1, OUT, OUT, U1] and nxt.lane == "c"
    # a failed continuation on lane a forgets lane a's response, not lane b's
    again = s.create(Create(orjson.loads(create(input=[], previous_response_id="resp_a")), "a"))
    assert isinstance(again, Turn)
    s.failed(again)
    assert s.create(Create(orjson.loads(create(input=[], previous_response_id="resp_a")), "a")).foreign  # type: ignore[union-attr]
    kept = s.create(Create(orjson.loads(create(input=[], previous_response_id="resp_b")), "b"))
    assert isinstance(kept, Turn) and not kept.foreign


def test_session_transcripts_share_one_byte_cap_oldest_first() -> None:
    big = {"type": "message", "role": "user", "content": "x" * 700}
    s = WSSession(2048)
    for lane in ("a", "b", "c"):
        t = s.create(Create(orjson.loads(create(input=[big])), lane))
        s.completed(f"resp_{lane}", [], t)  # type: ignore[arg-type]
    gone = s.create(Create(orjson.loads(create(input=[], previous_response_id="resp_a")), "a"))
    kept = s.create(Create(orjson.loads(create(input=[], previous_response_id="resp_c")), "c"))
    assert isinstance(gone, Turn) and gone.foreign
    assert isinstance(kept, Turn) and not kept.foreign


def test_classify() -> None:
    s = WSSession(1 << 20)
    assert isinstance(s.classify('{"type":"response.steer","previous_response_id":"r","input":"x"}'), Control)
    assert isinstance(s.classify('{"type":"response.cancel"}'), Control)
    assert isinstance(s.classify('{"type":"response.inject","response_id":"r","input":[]}'), Control)
    c = s.classify(create(input="x", stream_id="lane"))
    assert isinstance(c, Create) and c.lane == "lane"
    bad = s.classify(create(input="x", stream_id="no spaces"))
    assert isinstance(bad, Reply) and bad.frame["error"]["code"] == "invalid_stream_id"
    unknown = s.classify('{"type":"response.bogus"}')
    assert isinstance(unknown, Reply) and "response.bogus" in unknown.frame["error"]["message"]
    assert "response.steer" in unknown.frame["error"]["message"]
