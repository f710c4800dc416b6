"""transformers/messages_encode.py: unified events → Anthropic Messages events, held to the
rules Claude Code depends on (one block open at a time, no delta for a block not started,
tool arguments streamed and never lost, one terminal), case by case and under hypothesis."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from transformers import envelope
from transformers.context import Ctx
from transformers.events import Finish, Reasoning, ReasoningEnd, Start, Text, ToolCall, ToolCallEnd, Usage
from transformers.ids import from_anthropic_id, to_anthropic_id
from transformers.messages_encode import MessagesEncoder, sse

KEY = b"k" * 32


def run(events: list[Any], **kw: Any) -> tuple[list[dict[str, Any]], MessagesEncoder]:
    enc = MessagesEncoder(Ctx(envelope_key=KEY, public_model="claude-on-kimi"), **kw)
    out: list[dict[str, Any]] = []
    for ev in events:
        out += enc.feed(ev)
    return out, enc


def kinds(out: list[dict[str, Any]]) -> list[str]:
    names = []
    for e in out:
        t = e["type"]
        if t == "content_block_start":
            t += ":" + e["content_block"]["type"]
        elif t == "content_block_delta":
            t += ":" + e["delta"]["type"]
        names.append(t)
    return names


USAGE = Usage(
    {
        "input_tokens": 120,
        "input_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 0},
        "output_tokens": 7,
        "output_tokens_details": {"reasoning_tokens": 0},
    }
)


def test_a_text_answer() -> None:
    out, enc = run([Start(), Text("Hel"), Text("lo"), USAGE, Finish()])
    assert kinds(out) == [
        "message_start",
        "content_block_start:text",
        "content_block_delta:text_delta",
        "content_block_delta:text_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert out[0]["message"]["model"] == "claude-on-kimi" and out[0]["message"]["content"] == []
    assert out[-2]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert out[-2]["usage"] == {
        "input_tokens": 20,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 100,
        "output_tokens": 7,
    }
    msg = enc.message()
    assert msg["content"] == [{"type": "text", "text": "Hello"}] and msg["stop_reason"] == "end_turn"
    assert sse(out[:1]).startswith(b"event: message_start\ndata: {")


def test_thinking_text_and_a_tool_call() -> None:
    events = [
        Start(),
        Reasoning("The user wants "),
        Reasoning("ls."),
        ReasoningEnd(),
        Text("Running it."),
        ToolCall(0, "", call_id="functions.Bash:0", name="Bash"),
        ToolCall(0, '{"command":'),
        ToolCall(0, '"ls"}'),
        ToolCallEnd(0, '{"command":"ls"}'),
        Finish(),
    ]
    out, enc = run(events)
    assert kinds(out) == [
        "message_start",
        "content_block_start:thinking",
        "content_block_delta:thinking_delta",
        "content_block_delta:thinking_delta",
        "content_block_delta:signature_delta",
        "content_block_stop",
        "content_block_start:text",
        "content_block_delta:text_delta",
        "content_block_stop",
        "content_block_start:tool_use",
        "content_block_delta:input_json_delta",
        "content_block_delta:input_json_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    sig = out[4]["delta"]["signature"]
    assert envelope.open_reasoning(sig, KEY) == ("ok", "The user wants ls.")  # the proxy's own seal
    start = out[9]["content_block"]
    assert start == {"type": "tool_use", "id": to_anthropic_id("functions.Bash:0"), "name": "Bash", "input": {}}
    assert from_anthropic_id(start["id"]) == "functions.Bash:0"  # and back, exactly
    assert [e["index"] for e in out if "index" in e] == [0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2]
    assert out[-2]["delta"]["stop_reason"] == "tool_use"
    assert enc.message()["content"][2]["input"] == {"command": "ls"}


def test_a_call_named_late_starts_its_block_then_with_what_it_held() -> None:
    out, _ = run([Start(), ToolCall(0, '{"a"'), ToolCall(0, ":1}", call_id="c1", name="f"), ToolCallEnd(0), Finish()])
    assert kinds(out)[1:4] == [
        "content_block_start:tool_use",
        "content_block_delta:input_json_delta",
        "content_block_stop",
    ]
    assert out[2]["delta"]["partial_json"] == '{"a":1}'


def test_interleaved_parallel_calls_come_out_one_block_after_the_other() -> None:
    events = [
        Start(),
        ToolCall(0, '{"x"', call_id="a", name="A"),
        ToolCall(1, '{"y"', call_id="b", name="B"),
        ToolCall(0, ":1}"),
        ToolCall(1, ":2}"),
        ToolCallEnd(0),
        ToolCallEnd(1),
        Finish(),
    ]
    out, enc = run(events)
    assert kinds(out) == [
        "message_start",
        "content_block_start:tool_use",
        "content_block_delta:input_json_delta",
        "content_block_delta:input_json_delta",
        "content_block_stop",
        "content_block_start:tool_use",
        "content_block_delta:input_json_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert [b["input"] for b in enc.message()["content"]] == [{"x": 1}, {"y": 2}]


def test_the_done_suffix_and_an_unnamed_call() -> None:
    ctx = Ctx(envelope_key=KEY)
    enc = MessagesEncoder(ctx)
    out: list[dict[str, Any]] = []
    for ev in [
        Start(),
        ToolCall(0, '{"a":', call_id="c", name="f"),
        ToolCallEnd(0, '{"a":1}'),
        ToolCall(1, "{}"),
        Finish(),
    ]:
        out += enc.feed(ev)
    deltas = [e["delta"]["partial_json"] for e in out if e["type"] == "content_block_delta"]
    assert "".join(deltas) == '{"a":1}'
    assert ctx.repairs == ["tool_call_unnamed_dropped"]  # no name ever: no tool_use block for it


def test_text_during_a_call_waits_for_its_end() -> None:
    out, enc = run(
        [
            Start(),
            ToolCall(0, "{", call_id="c", name="f"),
            Text("meanwhile"),
            ToolCall(0, "}"),
            ToolCallEnd(0),
            Finish(),
        ]
    )
    assert kinds(out)[1:7] == [
        "content_block_start:tool_use",
        "content_block_delta:input_json_delta",
        "content_block_delta:input_json_delta",
        "content_block_stop",
        "content_block_start:text",
        "content_block_delta:text_delta",
    ]
    assert enc.message()["content"][1] == {"type": "text", "text": "meanwhile"}


def test_stop_reasons_and_a_failure() -> None:
    out, _ = run([Start(), Text("cut"), Finish(status="incomplete", reason="max_output_tokens")])
    assert out[-2]["delta"]["stop_reason"] == "max_tokens"
    out, _ = run([Start(), Text("no"), Finish(status="incomplete", reason="content_filter")])
    assert out[-2]["delta"]["stop_reason"] == "refusal"
    err = {"code": "upstream_stream_error", "message": "upstream broke", "type": "server_error"}
    out, _ = run([Start(), Text("half"), Finish(status="failed", error=err)])
    assert out[-1] == {"type": "error", "error": {"type": "api_error", "message": "upstream broke"}}
    assert "message_stop" not in kinds(out)
    out, _ = run([Start(), Finish(), Text("late")])  # nothing after the terminal
    assert kinds(out)[-1] == "message_stop"


# -- the rules under hypothesis ----------------------------------------------------------------


@st.composite
def streams(draw: Any) -> list[Any]:
    n_calls = draw(st.integers(0, 3))
    named_at = {i: draw(st.integers(0, 3)) for i in range(n_calls)}
    pieces = {i: draw(st.lists(st.sampled_from(['{"', "a", '":', "1", "}", ""]), max_size=4)) for i in range(n_calls)}
    events: list[Any] = [Start()]
    steps: list[tuple[str, int]] = []
    for i in range(n_calls):
        steps += [("call", i)] * (len(pieces[i]) + 1)
    steps += [("text", -1)] * draw(st.integers(0, 3)) + [("think", -1)] * draw(st.integers(0, 2))
    order = draw(st.permutations(steps))
    seen = {i: 0 for i in range(n_calls)}
    for kind, i in order:
        if kind == "text":
            events.append(Text(draw(st.sampled_from(["x", "yz", ""]))))
        elif kind == "think":
            events.append(Reasoning("r"))
        else:
            k = seen[i]
            seen[i] += 1
            named = k >= named_at[i]
            arg = pieces[i][k - 1] if 0 < k <= len(pieces[i]) else ""
            events.append(ToolCall(i, arg, call_id=f"c{i}" if named else None, name=f"f{i}" if named else None))
    for i in range(n_calls):
        if draw(st.booleans()):
            events.append(ToolCallEnd(i))
    events.append(draw(st.sampled_from([Finish(), Finish(status="incomplete", reason="max_output_tokens")])))
    return events


@settings(max_examples=300, deadline=None)
@given(streams())
def test_every_stream_keeps_the_rules(events: list[Any]) -> None:
    out, enc = run(events)
    types = [e["type"] for e in out]
    assert types[0] == "message_start" and types.count("message_start") == 1
    assert types[-1] == "message_stop" and types.count("message_stop") == 1 and types[-2] == "message_delta"
    open_index: int | None = None
    started: set[int] = set()
    args: dict[str, list[str]] = {}
    block_ids: dict[int, str] = {}
    for e in out:
        if e["type"] == "content_block_start":
            assert open_index is None, "one block open at a time"
            assert e["index"] not in started and e["index"] == len(started), "blocks start once, in order"
            started.add(e["index"])
            open_index = e["index"]
            if e["content_block"]["type"] == "tool_use":
                block_ids[e["index"]] = e["content_block"]["name"]
                args[e["content_block"]["name"]] = []
        elif e["type"] == "content_block_delta":
            assert e["index"] == open_index, "a delta only for the open block"
            if e["delta"]["type"] == "input_json_delta":
                args[block_ids[e["index"]]].append(e["delta"]["partial_json"])
        elif e["type"] == "content_block_stop":
            assert e["index"] == open_index
            open_index = None
    assert open_index is None
    # every named call's argument text, byte for byte, in its one block
    sent: dict[int, list[str]] = {}
    named: set[int] = set()
    for ev in events:
        if isinstance(ev, ToolCall):
            sent.setdefault(ev.index, []).append(ev.arguments)
            if ev.name:
                named.add(ev.index)
    for i in named:
        assert "".join(args[f"f{i}"]) == "".join(sent[i])
    assert (out[-2]["delta"]["stop_reason"] == "tool_use") is (bool(named) and events[-1].status == "completed")
    texts = "".join(
        e["delta"]["text"] for e in out if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta"
    )
    assert texts == "".join(ev.text for ev in events if isinstance(ev, Text))
    for block in enc.message()["content"]:
        if block["type"] == "tool_use":
            assert isinstance(block["input"], dict)
    assert orjson.loads(orjson.dumps(enc.message()))  # the whole message is JSON
