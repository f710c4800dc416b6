"""WSSession: the table of client frames (transformers/ws_session.py) and the transcript."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from transformers.ws_session import Ignore, Reply, Turn, Warmup, WSSession, error_frame

U1 = {"type": "message", "role": "user", "content": "one"}
U2 = {"type": "message", "role": "user", "content": "two"}
OUT = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "id": "fc_1"}
FCO = {"type": "function_call_output", "call_id": "c1", "output": "ok"}


def create(**kw: Any) -> str:
    return orjson.dumps({"type": "response.create", "model": "m", **kw}).decode()


def test_first_create_is_a_turn_with_its_own_items_and_frame_only_fields_removed() -> None:
    s = WSSession(1 << 20)
    a = s.frame(create(input=[U1], stream=False, client_metadata={"k": "v"}))
    assert isinstance(a, Turn)
    assert a.body == {"model": "m", "input": [U1], "stream": True, "client_metadata": {"k": "v"}}


def test_string_input_is_one_user_message() -> None:
    a = WSSession(1 << 20).frame(create(input="hi"))
    assert isinstance(a, Turn) and a.body["input"] == [{"type": "message", "role": "user", "content": "hi"}]


def test_continuation_rebuilds_input_plus_output_plus_new_items() -> None:
    s = WSSession(1 << 20)
    a = s.frame(create(input=[U1]))
    assert isinstance(a, Turn)
    s.completed("resp_1", [OUT])
    b = s.frame(create(input=[FCO], previous_response_id="resp_1"))
    assert isinstance(b, Turn)
    assert b.body["input"] == [U1, OUT, FCO]
    assert "previous_response_id" not in b.body
    s.completed("resp_2", [])
    c = s.frame(create(input=[U2], previous_response_id="resp_2"))
    assert isinstance(c, Turn) and c.body["input"] == [U1, OUT, FCO, U2]


@pytest.mark.parametrize("prev", ["", 7, None])
def test_invalid_previous_response_id(prev: Any) -> None:
    s = WSSession(1 << 20)
    s.frame(create(input=[U1]))
    s.completed("resp_1", [])
    if prev is None:  # an explicit null is "no previous response"
        assert isinstance(s.frame(create(input=[U1], previous_response_id=None)), Turn)
        return
    a = s.frame(create(input=[U1], previous_response_id=prev))
    assert isinstance(a, Reply)
    assert a.frame["status"] == 400 and a.frame["error"]["code"] == "previous_response_not_found"
    assert a.frame["error"]["param"] == "previous_response_id"


def test_a_continuation_of_another_sockets_response_is_foreign_and_can_be_rebased() -> None:
    s = WSSession(1 << 20)
    s.frame(create(input=[U1]))
    s.completed("resp_1", [OUT])
    a = s.frame(create(input=[FCO], previous_response_id="resp_elsewhere"))
    assert isinstance(a, Turn) and a.foreign and a.previous == "resp_elsewhere"
    assert a.body["input"] == [FCO] and a.new == [FCO] and "previous_response_id" not in a.body
    s.rebase(a, [U2, OUT])
    assert a.body["input"] == [U2, OUT, FCO]
    s.completed("resp_2", [])
    b = s.frame(create(input=[U1], previous_response_id="resp_2"))
    assert isinstance(b, Turn) and not b.foreign and b.body["input"] == [U2, OUT, FCO, U1]
    assert s.not_found("resp_x")["error"]["code"] == "previous_response_not_found"


def test_warmup_then_continuation_with_no_new_items() -> None:
    s = WSSession(1 << 20)
    w = s.frame(create(input=[U1], generate=False, instructions="x"))
    assert isinstance(w, Warmup) and "generate" not in w.body
    s.warmed("resp_w", w.body)
    t = s.frame(create(input=[], previous_response_id="resp_w", instructions="x"))
    assert isinstance(t, Turn) and t.body["input"] == [U1]


def test_a_failed_turn_forgets_the_transcript() -> None:
    s = WSSession(1 << 20)
    s.frame(create(input=[U1]))
    s.completed("resp_1", [OUT])
    s.frame(create(input=[FCO], previous_response_id="resp_1"))
    s.failed()
    assert s.last_id is None and s.transcript_items == 0
    again = s.frame(create(input=[FCO], previous_response_id="resp_1"))
    assert isinstance(again, Turn) and again.foreign


def test_transcript_over_the_cap_is_dropped() -> None:
    s = WSSession(2048)
    s.frame(create(input=[{"type": "message", "role": "user", "content": "x" * 4096}]))
    s.completed("resp_big", [])
    assert s.last_id is None
    a = s.frame(create(input=[U2], previous_response_id="resp_big"))
    assert isinstance(a, Turn) and a.foreign


def test_append_continues_with_the_last_request_fields() -> None:
    s = WSSession(1 << 20)
    assert isinstance(s.frame('{"type":"response.append","input":[]}'), Reply)
    s.frame(create(input=[U1], tools=[{"type": "function", "name": "f"}]))
    s.completed("resp_1", [OUT])
    a = s.frame(orjson.dumps({"type": "response.append", "input": [FCO]}))
    assert isinstance(a, Turn)
    assert a.body["input"] == [U1, OUT, FCO] and a.body["tools"] == [{"type": "function", "name": "f"}]


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (None, "invalid_frame"),
        ("{", "invalid_json"),
        ("[1]", "invalid_json"),
        ('{"type":"response.bogus"}', "unsupported_frame_type"),
        ('{"type":5}', "unsupported_frame_type"),
    ],
)
def test_bad_frames_are_error_replies(data: Any, code: str) -> None:
    a = WSSession(1 << 20).frame(data)
    assert isinstance(a, Reply) and a.frame["type"] == "error" and a.frame["error"]["code"] == code


@pytest.mark.parametrize(
    ("number", "code"),
    [
        (b"18446744073709551616", "integer_above_max_value"),
        (b"-9223372036854775809", "integer_below_min_value"),
        (b"9" * 400, "integer_above_max_value"),  # too long even for a double: orjson refuses the frame
    ],
)
def test_an_integer_beyond_64_bits_is_refused_with_its_path(number: bytes, code: str) -> None:
    """orjson reads it as a float and the request is written again from the parsed frame, so
    the frame's own text is checked (as an HTTP body is)."""
    frame = b'{"type":"response.create","model":"m","input":"hi","metadata":{"n":' + number + b"}}"
    for data in (frame, frame.decode()):
        a = WSSession(1 << 20).frame(data)
        assert isinstance(a, Reply) and a.frame["status"] == 400
        assert (a.frame["error"]["code"], a.frame["error"]["param"]) == (code, "metadata.n")
    ok = WSSession(1 << 20).frame(b'{"type":"response.create","model":"m","input":"hi","metadata":{"n":1.5e19}}')
    assert isinstance(ok, Turn)  # a float the client wrote as one goes on as it is


def test_processed_is_ignored() -> None:
    assert isinstance(WSSession(1 << 20).frame('{"type":"response.processed","response_id":"r"}'), Ignore)


def test_error_frame_shape() -> None:
    f = error_frame(429, "slow", "rate_limit_exceeded", type="rate_limit_error", headers={"retry-after": "3"})
    assert f == {
        "type": "error",
        "status": 429,
        "error": {"type": "rate_limit_error", "code": "rate_limit_exceeded", "message": "slow", "param": None},
        "headers": {"retry-after": "3"},
    }


def test_ws_framing_is_one_event_per_line_and_empty_is_a_whole_response() -> None:
    from transformers.bridge import WSFraming, open_bridge
    from transformers.context import Ctx

    f = WSFraming()
    assert f.frame({"type": "x", "text": "a\nb"}) == b'{"type":"x","text":"a\\nb"}\n'  # JSON escapes newlines
    assert f.done() == b"" and f.comment() == b""
    ctx = Ctx(quirks=frozenset(), upstream_model="m", public_model="m", max_output_tokens=None, envelope_key=b"")
    _, bridge = open_bridge({"model": "m", "input": [U1], "stream": True}, "responses", "chat", ctx, websocket=True)
    lines = bridge.empty().splitlines()
    events = [orjson.loads(line) for line in lines]
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "response.completed"]
    assert [e["sequence_number"] for e in events] == [0, 1, 2]
    assert events[-1]["response"]["output"] == [] and bridge.terminal == "completed" and bridge.finished
    assert bridge.heartbeat() == b""  # nothing after the terminal
