"""The Bridge as a unit: every documented failure code is produced through it, in both client
protocols, with exactly one terminal; the directions table is complete."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from transformers.bridge import DIRECTIONS, AnswerError, Bridge, open_bridge
from transformers.context import Ctx
from transformers.sse import SSEParser

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
CLIENTS = ("chat", "responses")


def bridge(client: str, upstream: str) -> Bridge:
    body: dict[str, Any] = {"model": "m", "stream": True}
    body.update({"messages": [{"role": "user", "content": "hi"}]} if client == "chat" else {"input": "hi"})
    _, b = open_bridge(body, client, upstream, Ctx(upstream_model="m", public_model="m"))
    return b


def chat_data(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + orjson.dumps({"id": "c1", "created": 1, "model": "m", **c}) + b"\n\n" for c in chunks)


TEXT = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": None}]}


def failure(client: str, raw: bytes) -> str:
    """The failure code the client received (exactly one terminal, and it is a failure)."""
    p = SSEParser()
    objs = [e.data for e in p.feed(raw) + p.end()]
    if client == "chat":
        assert objs[-1] != "[DONE]"
        last = orjson.loads(objs[-1])
        assert sum(1 for d in objs if d.startswith('{"error"')) == 1
        return last["error"]["code"]
    events = [orjson.loads(d) for d in objs]
    terminals = [e for e in events if e["type"] in ("response.completed", "response.incomplete", "response.failed")]
    assert len(terminals) == 1 and terminals[0] is events[-1] and terminals[0]["type"] == "response.failed"
    return terminals[0]["response"]["error"]["code"]


def truncated(b: Bridge) -> bytes:
    return b.receive_data(chat_data(TEXT)) + b.end()


def idle(b: Bridge) -> bytes:
    return b.receive_data(chat_data(TEXT)) + b.fail("upstream_idle_timeout", "silent for 300s") + b.end()


def transport(b: Bridge) -> bytes:
    return b.receive_data(chat_data(TEXT)) + b.fail("upstream_stream_error", "ReadError") + b.end()


def broken_event(b: Bridge) -> bytes:
    """An event the pieces cannot process (the guard): a decoder that raises."""

    class Raising:
        def feed(self, _: Any) -> Any:
            raise ValueError("no rule foresaw this")

        def end(self) -> list[Any]:
            return []

    b.decoder = Raising()
    return b.receive_data(chat_data(TEXT)) + b.end()


def overflow(b: Bridge) -> bytes:
    b.parser.max_bytes = 1000
    return b.receive_data(chat_data(TEXT) + b"data: " + b"x" * 2000) + b.end()


SCENARIOS = {
    "upstream_stream_truncated": truncated,
    "upstream_idle_timeout": idle,
    "upstream_stream_error": transport,
    "upstream_bad_event": broken_event,
}


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("code", sorted(SCENARIOS))
def test_failure_codes_through_the_bridge(client: str, code: str) -> None:
    b = bridge(client, "chat")
    assert failure(client, SCENARIOS[code](b)) == code
    assert b.terminal == "failed" and b.error_code == code


@pytest.mark.parametrize("client", CLIENTS)
def test_an_event_too_long_is_a_bad_event(client: str) -> None:
    b = bridge(client, "chat")
    assert failure(client, overflow(b)) == "upstream_bad_event"
    assert b.broken and b.receive_data(chat_data(TEXT)) == b"" and b.heartbeat() == b""


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("upstream", CLIENTS)
def test_bad_answer_object_is_upstream_bad_response(client: str, upstream: str) -> None:
    b = bridge(client, upstream)
    obj = (
        {"choices": 1}
        if upstream == "chat"
        else {"output": [{"type": "message", "content": 7}], "status": "completed", "id": "r", "object": "response"}
    )
    if upstream == "chat":
        with pytest.raises(AnswerError) as e:
            b.complete(obj)
        assert e.value.bad and e.value.error["code"] == "upstream_bad_response"
        assert b.terminal == "failed"
    else:  # a bad item is skipped as data: the answer still completes
        status, out = b.complete(obj)
        assert status == 200 and orjson.loads(out)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("junk", [b"data: ping", b'data: {"a":', b"data: <!-- debug -->", b"data: 42", b"data: [1]"])
def test_junk_lines_are_skipped_and_nothing_is_lost(client: str, junk: bytes) -> None:
    b = bridge(client, "chat")
    fin = {"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]}
    raw = b.receive_data(chat_data(TEXT) + junk + b"\n\n" + chat_data(fin) + b"data: [DONE]\n\n") + b.end()
    assert b.terminal == "completed" and "sse_junk_line_skipped" in b.repairs
    p = SSEParser()
    text = "".join(
        (o["choices"][0]["delta"].get("content") or "") if client == "chat" else o.get("delta", "")
        for o in (orjson.loads(e.data) for e in p.feed(raw) + p.end() if e.data != "[DONE]")
        if (client == "chat" and o.get("choices")) or o.get("type") == "response.output_text.delta"
    )
    assert text == "Hello"


@pytest.mark.parametrize("client", CLIENTS)
def test_junk_only_is_a_truncated_stream(client: str) -> None:
    b = bridge(client, "chat")
    assert failure(client, b.receive_data(b"data: ping\n\ndata: pong\n\n") + b.end()) == "upstream_stream_truncated"


def test_a_failure_after_the_terminal_changes_nothing() -> None:
    b = bridge("chat", "chat")
    fin = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    out = b.receive_data(chat_data(TEXT, fin) + b"data: [DONE]\n\n")
    assert b.terminal == "completed"
    assert b.fail("upstream_stream_error", "late") == b""
    out += b.end()
    assert out.endswith(b"data: [DONE]\n\n") and b.terminal == "completed" and not b.error_code


def test_documented_stream_failure_codes_are_all_produced_here() -> None:
    text = DOCS.read_text()
    para = text[text.index("After the first byte") :]
    para = para[: para.index("\n\n")]
    documented = set(re.findall(r"`(upstream_[a-z_]+)`", para))
    assert documented, "docs/operations.md names no stream failure codes"
    assert documented <= set(SCENARIOS), documented - set(SCENARIOS)


def test_directions_table_is_complete() -> None:
    # every pair of the four protocols
    four = ("chat", "responses", "messages", "gemini")
    assert set(DIRECTIONS) == {(c, u) for c in four for u in four}
    for (c, u), d in DIRECTIONS.items():
        assert (d.client, d.upstream) == (c, u)
        # the upstreams whose tools go in the Chat form
        assert d.tool_stage == (u in ("chat", "messages", "gemini"))


def test_a_custom_tool_comes_back_as_itself_from_a_messages_upstream() -> None:
    """Codex's freeform apply_patch goes to a Messages upstream as a one-string client tool
    (the Chat form); the model's tool_use comes back to Codex as a custom_tool_call with the
    raw text, as from a Chat upstream (the tool stage runs on this row too)."""
    from transformers.messages_encode import sse as messages_sse

    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch"
    up = messages_sse([
        {"type": "message_start", "message": {"id": "msg_1", "model": "c", "usage": {"input_tokens": 1}}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "tool_use", "id": "toolu_1", "name": "apply_patch", "input": {}}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "input_json_delta", "partial_json": orjson.dumps({"input": patch}).decode()}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 5}},
        {"type": "message_stop"},
    ])  # fmt: skip
    tool = {"type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "lark", "definition": "s"}}
    sent, bridge = open_bridge(
        {"model": "m", "stream": True, "input": "patch it", "tools": [tool]}, "responses", "messages", Ctx()
    )
    assert sent["tools"][0]["input_schema"]["required"] == ["input"]
    out = (bridge.receive_data(up) + bridge.end()).decode()
    done = [
        orjson.loads(line[6:])["item"]
        for line in out.split("\n")
        if "output_item.done" in line and line[:6] == "data: "
    ]
    assert [(d["type"], d["call_id"], d["input"]) for d in done] == [("custom_tool_call", "toolu_1", patch)]
    assert bridge.terminal == "completed"
