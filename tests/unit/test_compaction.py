"""Synthesised remote compaction (transformers/compaction.py) through the Bridge: the request
built for a Chat and a Responses upstream, the answer turned into exactly one compaction item
(stream and non-stream), the sealed item expanded on the next turn, refusals, and native
upstreams left alone."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from transformers import compaction, envelope
from transformers.bridge import open_bridge
from transformers.context import Ctx
from transformers.sse import SSEParser

KEY = b"s" * 32
TRIGGER = {"type": "compaction_trigger"}
TOOLS = [{"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}}]
HISTORY: list[dict[str, Any]] = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "make the build green"}]},
    {"type": "function_call", "call_id": "call_1", "name": "exec_command", "arguments": '{"cmd":"make"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "error: x.c:3"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Fixing x.c"}]},
]


def ctx(*quirks: str) -> Ctx:
    return Ctx(quirks=frozenset(quirks), upstream_model="up", public_model="pub", compaction_key=KEY)


def body(*items: dict[str, Any], stream: bool = True) -> dict[str, Any]:
    return {
        "model": "pub",
        "instructions": "You are Codex.",
        "input": [*HISTORY, *items],
        "tools": TOOLS,
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "stream": stream,
        "store": False,
    }


def chat_stream(*texts: str, finish: str = "stop", reasoning: str = "", tool: bool = False) -> bytes:
    def data(delta: dict[str, Any], fin: str | None = None) -> bytes:
        c = {"id": "c1", "created": 1, "model": "up", "choices": [{"index": 0, "delta": delta, "finish_reason": fin}]}
        return b"data: " + orjson.dumps(c) + b"\n\n"

    out = data({"role": "assistant", "content": ""})
    if reasoning:
        out += data({"reasoning_content": reasoning})
    for t in texts:
        out += data({"content": t})
    if tool:
        call = {"index": 0, "id": "call_9", "type": "function", "function": {"name": "exec_command", "arguments": "{}"}}
        out += data({"tool_calls": [call]})
    out += data({}, finish)
    usage = {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940}
    out += b"data: " + orjson.dumps({"id": "c1", "created": 1, "model": "up", "choices": [], "usage": usage}) + b"\n\n"
    return out + b"data: [DONE]\n\n"


def events(raw: bytes) -> list[dict[str, Any]]:
    p = SSEParser()
    return [orjson.loads(e.data) for e in p.feed(raw) + p.end()]


def done_items(evs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["item"] for e in evs if e["type"] == "response.output_item.done"]


def summary_of(item: dict[str, Any]) -> str:
    status, payload = envelope.open_compaction(item["encrypted_content"], KEY)
    assert status == "ok" and payload is not None
    return payload["s"]


# -- the request ------------------------------------------------------------------------


def test_chat_upstream_gets_the_summarisation_request():
    c = ctx()
    out, b = open_bridge(body(TRIGGER), "responses", "chat", c)
    assert c.compaction and "compaction_synthesized" in c.repairs
    msgs = out["messages"]
    assert msgs[0] == {"role": "system", "content": "You are Codex."}
    assert msgs[-1] == {"role": "user", "content": compaction.COMPACTION_PROMPT}
    # the history is kept (tool call and output included); no tools are offered
    assert any(m.get("tool_calls") for m in msgs) and any(m["role"] == "tool" for m in msgs)
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(out)
    assert not any("compaction_trigger" in orjson.dumps(m).decode() for m in msgs)


def test_responses_upstream_without_native_compaction_gets_the_prompt_as_input():
    c = ctx("strip_reasoning_envelope")
    out, _ = open_bridge(body(TRIGGER), "responses", "responses", c)
    assert c.compaction
    assert out["input"][-1] == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": compaction.COMPACTION_PROMPT}],
    }
    assert not any(it.get("type") == "compaction_trigger" for it in out["input"])
    assert "tools" not in out and out["instructions"] == "You are Codex."


def test_native_upstream_gets_trigger_and_items_untouched():
    theirs = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAABtheirs"}
    c = ctx("native_compaction")
    out, b = open_bridge(body(theirs, TRIGGER), "responses", "responses", c)
    assert not c.compaction and b.compaction is None and not any("compaction" in r for r in c.repairs)
    # store:false drops the item's id (store_false_item_ids); the blob itself is untouched
    assert out["input"][-2:] == [{"type": "compaction", "encrypted_content": "gAAAAABtheirs"}, TRIGGER]
    assert out["tools"] == TOOLS


def test_native_upstream_gets_our_own_item_expanded():
    ours = {"type": "compaction", "id": "cmp_2", "encrypted_content": envelope.seal_compaction("S1", KEY)}
    c = ctx("native_compaction")
    out, _ = open_bridge(body(ours, TRIGGER), "responses", "responses", c)
    assert out["input"][-2]["content"][0]["text"] == compaction.SUMMARY_PREFACE + "S1"
    assert out["input"][-1] == TRIGGER and c.repairs.count("compaction_expanded") == 1


def test_native_quirk_means_nothing_on_a_chat_upstream():
    c = ctx("native_compaction")
    open_bridge(body(TRIGGER), "responses", "chat", c)
    assert c.compaction


@pytest.mark.parametrize("upstream", ["chat", "responses"])
def test_sealed_item_expanded_in_place_of_the_history(upstream):
    item = {"type": "compaction", "id": "cmp_3", "encrypted_content": envelope.seal_compaction("Goal: green", KEY)}
    b = {"model": "pub", "input": [item, {"role": "user", "content": "go on"}], "stream": True}
    c = ctx()
    out, _ = open_bridge(b, "responses", upstream, c)
    assert c.repairs.count("compaction_expanded") == 1 and not c.compaction
    text = compaction.SUMMARY_PREFACE + "Goal: green"
    if upstream == "chat":
        assert out["messages"][0] == {"role": "user", "content": text}
        assert out["messages"][1] == {"role": "user", "content": "go on"}
    else:
        assert out["input"][0]["content"] == [{"type": "input_text", "text": text}]


@pytest.mark.parametrize(
    "blob,status",
    [
        (envelope.seal_compaction("S", b"x" * 32), "bad_mac"),
        (envelope.seal_compaction("S", KEY)[:-6], "malformed"),
        (envelope.seal_compaction("S", KEY).replace("pxc1.", "pxc7.", 1), "unknown_version"),
        ("gAAAAABforeign", "foreign"),
        (None, "foreign"),
    ],
)
@pytest.mark.parametrize("upstream", ["chat", "responses"])
def test_refused_item_is_a_400_naming_it(blob, status, upstream):
    item = {"type": "compaction", "id": "cmp_4", "encrypted_content": blob}
    c = ctx()
    with pytest.raises(compaction.EnvelopeError) as ei:
        open_bridge(body(item), "responses", upstream, c)
    e = ei.value
    assert (e.status, e.type, e.code) == (400, "invalid_request_error", "invalid_encrypted_content")
    assert e.param == f"input[{len(HISTORY)}].encrypted_content" and (e.kind, e.reason) == ("compaction", status)
    assert c.envelope_rejected == [("compaction", status)]


def test_native_upstream_refuses_a_broken_blob_of_ours():
    item = {"type": "compaction", "encrypted_content": envelope.seal_compaction("S", b"x" * 32)}
    with pytest.raises(compaction.EnvelopeError):
        open_bridge(body(item), "responses", "responses", ctx("native_compaction"))


def test_trigger_not_last_is_refused():
    b = body(TRIGGER, {"role": "user", "content": "more"})
    with pytest.raises(compaction.RequestError) as ei:
        open_bridge(b, "responses", "chat", ctx())
    assert ei.value.param == f"input[{len(HISTORY)}]"


def test_reasoning_envelope_of_another_key_is_recorded():
    blob = envelope.seal("deep thought", b"x" * 32)
    b = {
        "model": "pub",
        "input": [
            {"role": "user", "content": "hi"},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "short"}], "encrypted_content": blob},
            {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        ],
        "tools": TOOLS,
    }
    c = ctx("reasoning_replay")
    c.envelope_key = KEY
    out, _ = open_bridge(b, "responses", "chat", c)
    assert c.envelope_rejected == [("reasoning", "bad_mac")]
    assert [m.get("reasoning_content") for m in out["messages"] if m.get("tool_calls")] == ["short"]


# -- the answer -------------------------------------------------------------------------


def test_streamed_summary_becomes_exactly_one_compaction_item():
    c = ctx()
    _, b = open_bridge(body(TRIGGER), "responses", "chat", c)
    raw = b.receive_data(chat_stream("## Task\n", "make the build ", "green", reasoning="hmm")) + b.end()
    evs = events(raw)
    items = done_items(evs)
    assert [it["type"] for it in items] == ["compaction"]
    item = items[0]
    assert item["id"].startswith("cmp_") and set(item) == {"type", "id", "encrypted_content"}
    assert summary_of(item) == "## Task\nmake the build green"
    added = [e["item"] for e in evs if e["type"] == "response.output_item.added"]
    assert added == [item]
    assert evs[-1]["type"] == "response.completed" and evs[-1]["response"]["output"] == [item]
    assert evs[-1]["response"]["usage"]["input_tokens"] == 900
    assert b.terminal == "completed"


def test_tool_calls_and_reasoning_are_swallowed():
    _, b = open_bridge(body(TRIGGER), "responses", "chat", ctx())
    evs = events(b.receive_data(chat_stream("summary", reasoning="r", tool=True, finish="tool_calls")) + b.end())
    assert [it["type"] for it in done_items(evs)] == ["compaction"]


def test_no_summary_fails_the_response():
    _, b = open_bridge(body(TRIGGER), "responses", "chat", ctx())
    evs = events(b.receive_data(chat_stream(reasoning="only thinking")) + b.end())
    assert done_items(evs) == []
    assert evs[-1]["type"] == "response.failed"
    assert evs[-1]["response"]["error"]["code"] == "compaction_failed"
    assert b.terminal == "failed" and b.error_code == "compaction_failed"


def test_truncated_summary_still_sealed():
    c = ctx()
    _, b = open_bridge(body(TRIGGER), "responses", "chat", c)
    evs = events(b.receive_data(chat_stream("part of it", finish="length")) + b.end())
    assert [it["type"] for it in done_items(evs)] == ["compaction"] and evs[-1]["type"] == "response.completed"
    assert "compaction_summary_truncated" in c.repairs


def test_heartbeat_while_the_summary_is_written():
    _, b = open_bridge(body(TRIGGER), "responses", "chat", ctx())
    first = b.receive_data(chat_stream("x").split(b"\n\n")[0] + b"\n\n")  # the role chunk: response.created
    assert any(e["type"] == "response.created" for e in events(first))
    assert [e["type"] for e in events(b.heartbeat())] == ["response.in_progress"]


def test_non_stream_chat_answer():
    _, b = open_bridge(body(TRIGGER, stream=False), "responses", "chat", ctx())
    answer = {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "up",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "The summary."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }
    status, raw = b.complete(answer)
    obj = orjson.loads(raw)
    assert status == 200 and obj["status"] == "completed"
    assert [it["type"] for it in obj["output"]] == ["compaction"]
    assert summary_of(obj["output"][0]) == "The summary."


def test_non_stream_without_summary_is_a_failed_response():
    _, b = open_bridge(body(TRIGGER, stream=False), "responses", "chat", ctx())
    answer = {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "up",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}],
    }
    status, raw = b.complete(answer)  # a failed answer is a failed response object, as any upstream failure
    obj = orjson.loads(raw)
    assert (status, obj["status"], obj["output"]) == (200, "failed", [])
    assert obj["error"]["code"] == "compaction_failed" and b.terminal == "failed"


def test_responses_upstream_stream_answer():
    _, b = open_bridge(body(TRIGGER), "responses", "responses", ctx("strip_reasoning_envelope"))
    msg = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed"}
    part = {"type": "output_text", "text": "", "annotations": []}
    up = [
        {"type": "response.created", "response": {"id": "resp_u", "status": "in_progress", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": {**msg, "content": []}},
        {
            "type": "response.content_part.added",
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "part": part,
        },
        {
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": "Sum",
        },
        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "!"},
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {**msg, "content": [{**part, "text": "Sum!"}]},
        },
        {"type": "response.completed", "response": {"id": "resp_u", "status": "completed", "output": []}},
    ]
    raw = b"".join(b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in up)
    evs = events(b.receive_data(raw) + b.end())
    items = done_items(evs)
    assert [it["type"] for it in items] == ["compaction"] and summary_of(items[0]) == "Sum!"
    assert evs[-1]["type"] == "response.completed"


def test_compaction_item_round_trips_through_the_next_turn():
    _, b = open_bridge(body(TRIGGER), "responses", "chat", ctx())
    item = done_items(events(b.receive_data(chat_stream("Goal: ship it")) + b.end()))[0]
    nxt = {"model": "pub", "input": [item, {"role": "user", "content": "continue"}], "stream": True}
    out, _ = open_bridge(nxt, "responses", "chat", ctx())
    assert out["messages"][0]["content"] == compaction.SUMMARY_PREFACE + "Goal: ship it"
