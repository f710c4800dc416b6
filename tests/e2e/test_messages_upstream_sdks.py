"""SDKs through Switchboard with Anthropic Messages on one side.

* ``test_openai_chat_to_messages_upstream``: the openai SDK (2.14 in process, the newest 2.x
  and 3.x from ``.e2e/openai2`` / ``.e2e/openai3``, as ``test_sdk_proxy.py``; every chunk
  strictly validated by ``sdk_checks``) Chat, stream and not, toward a scripted Messages
  upstream (``profile: anthropic``): signed thinking -> reasoning, the text, two parallel
  tool calls whose arguments parse to the upstream's inputs (one holds an integer above
  2**53), ``finish_reason: tool_calls``; the upstream's ``cache_read_input_tokens`` /
  ``cache_creation_input_tokens`` show as ``cached_tokens`` / ``cache_write_tokens`` (Chat
  counts every input token: 24 fresh + 16 read + 20 written = 60).
* ``test_anthropic_sdk_stream``: the ``anthropic`` SDK (2.14.0, the suite's venv)
  ``client.messages.stream(...)`` + ``get_final_message()`` against the proxy's
  ``/v1/messages``, toward each upstream kind (the scripted Chat upstream, the scripted
  Responses upstream, the scripted Messages upstream).  Every wire event is validated by
  the SDK's own type for it (``RawContentBlockStartEvent``…, pydantic strict mode, from
  its JSON; a rejection is collected and the test ends on it, after everything else was
  checked: the SDK's ``_strict_response_validation`` would stop at the first) and its
  order checked (one ``message_start`` first, blocks opened in index order, deltas only to the open block of
  the matching type, ``message_delta`` after the last block, ``message_stop`` last); the
  accumulator must build a message whose tool_use inputs parse, ``stop_reason`` is
  ``tool_use``, usage is there.  Then the history goes back with both tool_results: the
  upstream must get its own tool ids (a Kimi-style ``functions.read_file:0`` from the Chat
  upstream reaches the SDK as ``sbx_<hex>``, Anthropic's alphabet) and the answer ends with
  ``end_turn``.  From the Messages upstream, the thinking block's signature arrives as sent
  and goes back unchanged.

One proxy process serves the module (``scenarios_messages.stage_fixture``): MODEL -> the
Messages upstream (``profile: anthropic``), CHAT_MODEL / RESP_MODEL -> the scripted Chat /
Responses upstreams (``openai-compatible``).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING

import openai
import pytest
import scenarios as sc
from client_checks import locked_sdk_version, sdk_chat
from messages_upstream import MessageTurn, block_text, text, thinking, tool_results, tool_use
from proxy_harness import PROXY_CLIENT_KEY, UPSTREAM_KEY
from pydantic import ValidationError

if TYPE_CHECKING:
    import anthropic
    from anthropic.types import Message
from scenarios_messages import (
    Route,
    anthropic_valid_id,
    assistant_blocks,
    check_upstream_headers,
    replays_block,
    sbx_id,
    stage_fixture,
    thinking_consistent,
)
from scripted_upstream import ToolCall, chat_history_carries_id, chat_turn, responses_turn

pytestmark = pytest.mark.e2e

MODEL = "e2e-msg-sdk"  # -> the Messages upstream, profile anthropic
CHAT_MODEL = "e2e-msg-sdk-chat"  # -> the Chat upstream, openai-compatible
RESP_MODEL = "e2e-msg-sdk-responses"  # -> the Responses upstream, openai-compatible
# one proxy for the module in front of the three scripted upstreams
_stage = stage_fixture(
    Route(MODEL),
    Route(CHAT_MODEL, profile="openai-compatible", protocol="chat", kind="chat"),
    Route(RESP_MODEL, profile="openai-compatible", protocol="responses", kind="responses"),
)
SIG = "c2RrLXRlc3Qtc2lnbmF0dXJlLWZyb20tdGhlLW1lc3NhZ2VzLXVwc3RyZWFt"
INPUTS = [json.loads(t.arguments) for t in sc.SDK_CALLS]  # {"limit": 9007199254740993}: exact

# --------------------------------------------------------------------------- openai SDK (Chat)

SDKS = {"sdk2-in-process": None, "sdk2": "openai2", "sdk3": "openai3"}
CACHE_USAGE = {"input_tokens": 24, "cache_read_input_tokens": 16, "cache_creation_input_tokens": 20, "output_tokens": 7}


@pytest.fixture(params=sorted(SDKS))
def sdk_python(request, openai_sdk) -> Path | None:
    venv = SDKS[request.param]
    return None if venv is None else openai_sdk(venv)


@pytest.fixture
def sdk_version(request, sdk_python) -> str:
    venv = SDKS[request.node.callspec.params["sdk_python"]]
    return openai.__version__ if venv is None else locked_sdk_version(venv)


def _sdk_turn() -> MessageTurn:
    calls = [tool_use(t.name, i, t.id) for t, i in zip(sc.SDK_CALLS, INPUTS, strict=True)]
    return MessageTurn([thinking(sc.SDK_REASONING, SIG), text(sc.SDK_TEXT), *calls], usage=CACHE_USAGE, chunk=5)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "nonstream"])
def test_openai_chat_to_messages_upstream(stage, sdk_python, sdk_version, stream):
    up, px, mark = stage.script(MODEL, [_sdk_turn()]), stage.proxy, stage.mark()
    try:
        got = sdk_chat(px.base_url, PROXY_CLIENT_KEY, MODEL, stream=stream, python=sdk_python)
    except Exception as exc:
        pytest.fail(f"chat client failed: {exc!r}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)}")
    summary = {k: v for k, v in got.items() if k != "events"}
    info = f"{summary}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)}"
    assert got["sdk"] == sdk_version, info
    assert got["validated"] >= (len(got["events"]) if stream else 1), info
    assert got["text"] == sc.SDK_TEXT, info
    assert got["reasoning"] == sc.SDK_REASONING, info
    assert [(i, n) for i, n, _ in got["tool_calls"]] == [(t.id, t.name) for t in sc.SDK_CALLS], info
    assert [json.loads(a) for _, _, a in got["tool_calls"]] == INPUTS, info
    assert got["finish"] == "tool_calls", info
    u = got["usage"]
    assert (u["prompt_tokens"], u["completion_tokens"], u["total_tokens"]) == (60, 7, 67), info
    assert u["prompt_tokens_details"]["cached_tokens"] == 16, info
    assert u["prompt_tokens_details"].get("cache_write_tokens") == 20, info
    # what the upstream got: one Messages request in Anthropic's own shape
    check_upstream_headers(up, info, beta=None)
    (req,) = up.message_requests
    body = req.json
    assert bool(body.get("stream")) is stream and body["model"] == MODEL, info
    assert [m["role"] for m in body["messages"]] == ["user"], info
    first = body["messages"][0]["content"]
    first_text = first if isinstance(first, str) else "".join(b.get("text", "") for b in first)
    assert first_text == "read a.py and b.py", info
    assert [(t["name"], t["input_schema"]) for t in body["tools"]] == [
        (t["function"]["name"], t["function"]["parameters"]) for t in sc.SDK_TOOLS_CHAT
    ], info
    assert isinstance(body.get("max_tokens"), int) and body["max_tokens"] > 0, info


# --------------------------------------------------------------------------- anthropic SDK

READ_TOOL = {
    "name": "read_file",
    "description": "Read a file.",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["path"],
    },
}
REASONING = "Two files: read both at once."
REPLY = "Reading a.py and b.py — 两个 ✓"
FINAL = "Both files read; done ✓"
OUTPUTS = ["contents of a.py", "contents of b.py"]
KIMI_IDS = ["functions.read_file:0", "functions.read_file:1"]
RESP_IDS = ["call_resp_read_a", "call_resp_read_b"]
MSG_IDS = ["toolu_e2e_sdk_read_a", "toolu_e2e_sdk_read_b"]
ARGS = [t.arguments for t in sc.SDK_CALLS]


def _upstream_case(kind: str):
    """(model, turns, upstream ids): turn 2 answers FINAL only when both calls
    came back under the upstream's own ids with their outputs."""
    if kind == "chat":
        calls = [ToolCall("read_file", a, id=i) for a, i in zip(ARGS, KIMI_IDS, strict=True)]

        def back(req: dict) -> bool:
            outs = sc.tool_outputs(req)
            carried = all(chat_history_carries_id(i)(req) for i in KIMI_IDS)
            return carried and [outs.get(i) for i in KIMI_IDS] == OUTPUTS

        turns = [
            chat_turn(model=CHAT_MODEL, reasoning=REASONING, text=REPLY, tool_calls=calls, label="calls"),
            chat_turn(model=CHAT_MODEL, text=FINAL, when=back, otherwise=sc.miss("chat", "ids/outputs"), label="final"),
        ]
        return CHAT_MODEL, turns, KIMI_IDS
    if kind == "responses":
        calls = [ToolCall("read_file", a, id=i) for a, i in zip(ARGS, RESP_IDS, strict=True)]

        def back(req: dict) -> bool:
            outs = sc.tool_outputs(req)
            return [outs.get(i) for i in RESP_IDS] == OUTPUTS

        turns = [
            responses_turn(model=RESP_MODEL, reasoning=REASONING, text=REPLY, tool_calls=calls, label="calls"),
            responses_turn(
                model=RESP_MODEL, text=FINAL, when=back, otherwise=sc.miss("responses", "ids/outputs"), label="final"
            ),
        ]
        return RESP_MODEL, turns, RESP_IDS
    calls = [tool_use("read_file", i, u) for i, u in zip(INPUTS, MSG_IDS, strict=True)]
    signed = thinking(REASONING, SIG)

    def back(req: dict) -> bool:
        results = {r.get("tool_use_id"): block_text(r) for r in tool_results(req)}
        return replays_block(req, signed) and [results.get(i) for i in MSG_IDS] == OUTPUTS and thinking_consistent(req)

    turns = [
        MessageTurn([signed, text(REPLY), *calls], chunk=4, label="calls"),
        MessageTurn([text(FINAL)], when=back, otherwise=MessageTurn([text("PREDICATE-MISS")]), label="final"),
    ]
    return MODEL, turns, MSG_IDS


@functools.cache
def raw_event() -> dict[str, type]:
    """Each wire event's own SDK type (the union's errors would name every member); the
    ``anthropic`` SDK is imported by the tests that use it, not when pytest collects."""
    from anthropic.types import (
        RawContentBlockDeltaEvent,
        RawContentBlockStartEvent,
        RawContentBlockStopEvent,
        RawMessageDeltaEvent,
        RawMessageStartEvent,
        RawMessageStopEvent,
    )

    return {
        "message_start": RawMessageStartEvent,
        "content_block_start": RawContentBlockStartEvent,
        "content_block_delta": RawContentBlockDeltaEvent,
        "content_block_stop": RawContentBlockStopEvent,
        "message_delta": RawMessageDeltaEvent,
        "message_stop": RawMessageStopEvent,
    }


RAW_TYPES = {"message_start", "content_block_start", "content_block_delta", "content_block_stop"}
RAW_TYPES |= {"message_delta", "message_stop"}
DELTA_FOR = {"text": "text_delta", "thinking": "thinking_delta", "tool_use": "input_json_delta"}


class OrderCheck:
    """The Messages stream grammar, event by event (raises AssertionError with the trail)."""

    def __init__(self) -> None:
        self.trail: list[str] = []
        self.started = self.delta = self.stopped = False
        self.blocks: list[str] = []
        self.open: int | None = None

    def feed(self, ev) -> None:
        t = ev.type
        self.trail.append(t if t != "content_block_delta" else f"{t}:{ev.delta.type}")
        where = f"event {len(self.trail)} ({t}) after {self.trail[-8:-1]}"
        assert not self.stopped, f"{where}: after message_stop"
        if t == "message_start":
            assert not self.started, f"{where}: second message_start"
            self.started = True
            return
        assert self.started, f"{where}: before message_start"
        if t == "content_block_start":
            assert self.open is None and not self.delta, f"{where}: block {self.open} still open"
            assert ev.index == len(self.blocks), f"{where}: index {ev.index}, expected {len(self.blocks)}"
            self.blocks.append(ev.content_block.type)
            self.open = ev.index
        elif t == "content_block_delta":
            assert ev.index == self.open, f"{where}: delta for {ev.index}, open {self.open}"
            kind = self.blocks[ev.index]
            allowed = {DELTA_FOR.get(kind)} | ({"signature_delta"} if kind == "thinking" else set())
            assert ev.delta.type in allowed, f"{where}: {ev.delta.type} in a {kind} block"
        elif t == "content_block_stop":
            assert ev.index == self.open, f"{where}: stop for {ev.index}, open {self.open}"
            self.open = None
        elif t == "message_delta":
            assert self.open is None and not self.delta, f"{where}: message_delta with a block open / twice"
            self.delta = True
        elif t == "message_stop":
            assert self.delta, f"{where}: message_stop without message_delta"
            self.stopped = True


def _stream(client: anthropic.Anthropic, model: str, messages: list[dict]) -> tuple[Message, OrderCheck, list[str]]:
    """One ``messages.stream`` call: every wire event re-validated strictly with the SDK's
    type for it (``raw_event()``; a rejection is collected, so that the rest of the test
    still runs and the test ends on it) and fed to the order check; the final message is
    validated as a ``Message``."""
    from anthropic.types import Message

    order, invalid = OrderCheck(), []
    with client.messages.stream(
        model=model,
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=[READ_TOOL],
        messages=messages,
    ) as s:
        for ev in s:
            if ev.type not in RAW_TYPES:  # the helper's own text/thinking/input_json/signature events
                continue
            raw = ev.model_dump_json(by_alias=True, exclude_unset=True, warnings=False)
            if ev.type == "content_block_stop":  # the helper adds the finished block: not on the wire
                raw = json.dumps({k: v for k, v in json.loads(raw).items() if k != "content_block"})
            elif ev.type == "message_stop":
                raw = json.dumps({k: v for k, v in json.loads(raw).items() if k != "message"})
            try:
                raw_event()[ev.type].model_validate_json(raw, strict=True)
            except ValidationError as exc:
                invalid.append(f"{raw}: {[(e['loc'], e['msg']) for e in exc.errors()][:4]}")
            order.feed(ev)
        final = s.get_final_message()
    try:
        Message.model_validate_json(
            final.model_dump_json(by_alias=True, exclude_unset=True, warnings=False), strict=True
        )
    except ValidationError as exc:
        invalid.append(f"final message: {[(e['loc'], e['msg']) for e in exc.errors()][:4]}")
    assert order.stopped, f"stream ended without message_stop: {order.trail}"
    return final, order, invalid


@pytest.mark.parametrize("kind", ["chat", "responses", "messages"])
def test_anthropic_sdk_stream(stage, kind):
    model, turns, upstream_ids = _upstream_case(kind)
    up, px, mark = stage.script(model, turns), stage.proxy, stage.mark()
    # the SDK's default parsing (construct): its strict mode would stop at the first event it
    # rejects; every event is validated strictly here instead (``_stream``)
    import anthropic

    client = anthropic.Anthropic(base_url=px.url, api_key=PROXY_CLIENT_KEY, max_retries=0, timeout=30)
    history: list[dict] = [{"role": "user", "content": "read a.py and b.py"}]
    try:
        final, order, invalid = _stream(client, model, history)
    except Exception as exc:
        pytest.fail(
            f"anthropic SDK failed on turn 1: {exc!r}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)}"
        )
    info = (
        f"{final.model_dump_json(indent=1)}\n{order.trail}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)}"
    )
    assert order.trail[0] == "message_start", info
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use", "tool_use"], info
    think, said, *uses = final.content
    assert think.thinking == REASONING and think.signature, info
    if kind == "messages":
        assert think.signature == SIG, info  # Anthropic's signature, as it was sent
    assert said.text == REPLY, info
    expected_ids = [sbx_id(i) if kind == "chat" else i for i in upstream_ids]
    assert [(u.id, u.name, u.input) for u in uses] == [
        (i, "read_file", inp) for i, inp in zip(expected_ids, INPUTS, strict=True)
    ], info
    assert all(anthropic_valid_id(u.id) for u in uses), info
    assert final.stop_reason == "tool_use" and final.role == "assistant", info
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0, info

    # turn 2: the history back, with both results
    history += [
        {
            "role": "assistant",
            "content": [b.model_dump(exclude_none=True, exclude={"parsed_output"}) for b in final.content],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": u.id, "content": out}
                for u, out in zip(uses, OUTPUTS, strict=True)
            ],
        },
    ]
    try:
        final2, order2, invalid2 = _stream(client, model, history)
    except Exception as exc:
        pytest.fail(
            f"anthropic SDK failed on turn 2: {exc!r}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)}"
        )
    info = f"{final2.model_dump_json(indent=1)}\n{order2.trail}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)}"
    assert [r.matched for r in up.model_requests] == [None, True] and not up.errors, info
    assert [b.type for b in final2.content] == ["text"] and final2.content[0].text == FINAL, info
    assert final2.stop_reason == "end_turn", info
    for r in up.model_requests:  # the provider's key upstream, never the client's
        assert PROXY_CLIENT_KEY not in json.dumps(r.headers), info
        if kind == "messages":
            assert r.headers.get("x-api-key") == UPSTREAM_KEY, info
        else:
            assert r.headers.get("authorization") == f"Bearer {UPSTREAM_KEY}", info
    if kind == "messages":
        check_upstream_headers(up, info, beta=None)
        second = up.message_requests[1].json
        assert assistant_blocks(second)[0] == thinking(REASONING, SIG), info
    # every event the proxy sent is one the SDK's own types accept
    assert not invalid + invalid2, (
        "PROXY DEFECT: events the anthropic SDK's types reject (transformers/messages_encode.py opens a thinking "
        "block as {'type': 'thinking', 'thinking': ''}: ThinkingBlock requires 'signature', which Anthropic "
        "sends as ''):\n" + "\n".join(invalid + invalid2)
    )
