"""Gemini's thought signatures through the Bridge, every client protocol, streamed and not:
the signature Gemini put on a call comes back on that call, byte for byte, on every later
step of the turn; what the proxy did not see Gemini make never goes (the table of
``transformers/thought_signatures.py``)."""

from __future__ import annotations

import base64
import os
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformers import envelope
from transformers.bridge import open_bridge
from transformers.chat_encode import completion_from_chunks
from transformers.context import Ctx
from transformers.request_quirks import prepare_chat
from transformers.sse import SSEParser
from transformers.thought_signatures import ESCAPE, restore, strip

GEMINI = frozenset({"gemini_thought_signatures", "gemini_request", "developer_to_system"})
KEY = b"k" * 32
TOOLS_CHAT = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        },
    }
]
TOOLS_RESPONSES = [{"type": "function", **TOOLS_CHAT[0]["function"]}]
TOOLS_MESSAGES = [{"name": "run", "input_schema": TOOLS_CHAT[0]["function"]["parameters"]}]


def ctx(key: bytes = KEY, quirks: frozenset[str] = GEMINI) -> Ctx:
    return Ctx(quirks=quirks, upstream_model="gemini-3-pro-preview", public_model="g", envelope_key=key)


def new_sig() -> str:
    return base64.b64encode(os.urandom(96)).decode()


# -- a scripted Gemini: its answers, and its rule on the requests ------------------------------


class Gemini:
    """Issues signed calls and checks each request as Gemini does: every assistant step of
    the current turn must carry, on its first call, the signature issued for that call (or
    the escape value); a signature it never issued is refused."""

    def __init__(self) -> None:
        self.issued: dict[str, str] = {}
        self.n = 0

    def answer(self, calls: int) -> list[dict[str, Any]]:
        out = []
        for i in range(calls):
            self.n += 1
            cid = f"function-call-{self.n}"
            tc: dict[str, Any] = {
                "id": cid,
                "type": "function",
                "function": {"name": "run", "arguments": orjson.dumps({"cmd": f"echo {self.n}"}).decode()},
            }
            if i == 0:
                sig = self.issued[cid] = new_sig()
                tc["extra_content"] = {"google": {"thought_signature": sig}}
            out.append(tc)
        return out

    def check(self, body: dict[str, Any]) -> list[str]:
        msgs = body["messages"]
        last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
        errors = []
        for i, m in enumerate(msgs):
            for j, tc in enumerate(m.get("tool_calls") or []):
                sig = ((tc.get("extra_content") or {}).get("google") or {}).get("thought_signature")
                if sig is not None and sig != ESCAPE and sig not in self.issued.values():
                    errors.append(f"messages[{i}].tool_calls[{j}]: a signature Gemini never issued")
                if i > last_user and j == 0 and sig is None:
                    errors.append(f"messages[{i}]: Function call is missing a thought_signature")
                if i > last_user and j == 0 and sig not in (ESCAPE, self.issued.get(tc["id"])):
                    errors.append(f"messages[{i}]: not the signature issued for {tc['id']}")
        return errors


def stream_bytes(calls: list[dict[str, Any]]) -> bytes:
    """Gemini's stream: each call whole in one delta (as it sends them), then the finish."""
    head = {"id": "chatcmpl-g", "created": 1, "model": "gemini-3-pro-preview", "object": "chat.completion.chunk"}
    chunks = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
    for i, tc in enumerate(calls):
        chunks.append({**head, "choices": [{"index": 0, "delta": {"tool_calls": [{**tc, "index": i}]}}]})
    chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    chunks.append({**head, "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def whole(calls: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-g",
        "object": "chat.completion",
        "created": 1,
        "model": "gemini-3-pro-preview",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": calls},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def events(raw: bytes) -> list[str]:
    p = SSEParser()
    return [e.data for e in p.feed(raw) + p.end()]


# -- each client: its request, and what it sends back after an answer ---------------------------


def first_request(client: str) -> dict[str, Any]:
    if client == "chat":
        return {"model": "g", "messages": [{"role": "user", "content": "go"}], "tools": TOOLS_CHAT}
    if client == "responses":
        return {"model": "g", "input": [{"role": "user", "content": "go"}], "tools": TOOLS_RESPONSES, "store": False}
    return {"model": "g", "max_tokens": 1000, "messages": [{"role": "user", "content": "go"}], "tools": TOOLS_MESSAGES}


def answer_of(client: str, stream: bool, body: dict[str, Any], calls: list[dict[str, Any]], c: Ctx) -> Any:
    """What the client receives for Gemini's answer ``calls``: its answer object (a stream
    folded the way the client folds it)."""
    _, bridge = open_bridge({**body, "stream": stream}, client, "chat", c)
    if not stream:
        status, out = bridge.complete(whole(calls))
        assert status == 200
        return orjson.loads(out)
    data = events(bridge.receive_data(stream_bytes(calls)) + bridge.end())
    if client == "chat":
        return completion_from_chunks(orjson.loads(d) for d in data if d != "[DONE]")
    objs = [orjson.loads(d) for d in data]
    if client == "responses":
        return {"output": [o["item"] for o in objs if o["type"] == "response.output_item.done"]}
    blocks: list[dict[str, Any]] = []
    for o in objs:
        if o["type"] == "content_block_start":
            blocks.append(dict(o["content_block"]))
        elif o["type"] == "content_block_delta":
            d, b = o["delta"], blocks[o["index"]]
            if d["type"] == "signature_delta":
                b["signature"] = d["signature"]
            elif d["type"] == "input_json_delta":
                b["_json"] = b.get("_json", "") + d["partial_json"]
            elif d["type"] == "thinking_delta":
                b["thinking"] += d["thinking"]
    for b in blocks:
        if b["type"] == "tool_use":
            b["input"] = orjson.loads(b.pop("_json", "{}"))
    return {"content": blocks}


def echo(client: str, body: dict[str, Any], answer: Any) -> dict[str, Any]:
    """The client's next request: its history, the answer as it keeps it, the tool results."""
    body = dict(body)
    if client == "chat":
        msg = answer["choices"][0]["message"]
        body["messages"] = [*body["messages"], msg] + [
            {"role": "tool", "tool_call_id": tc["id"], "content": "ok"} for tc in msg["tool_calls"]
        ]
    elif client == "responses":
        out = answer["output"]
        body["input"] = [*body["input"], *out] + [
            {"type": "function_call_output", "call_id": it["call_id"], "output": "ok"}
            for it in out
            if it["type"] == "function_call"
        ]
    else:
        content = answer["content"]
        results = [
            {"type": "tool_result", "tool_use_id": b["id"], "content": "ok"} for b in content if b["type"] == "tool_use"
        ]
        body["messages"] = [
            *body["messages"],
            {"role": "assistant", "content": content},
            {"role": "user", "content": results},
        ]
    return body


def upstream_body(client: str, body: dict[str, Any], c: Ctx) -> dict[str, Any]:
    out, _ = open_bridge({**body, "stream": False}, client, "chat", c)
    return out


CLIENTS = ("chat", "responses", "messages")
SHAPES = {"single": [1, 1], "parallel": [2, 1], "two_steps": [1, 2, 1]}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("client", CLIENTS)
def test_every_step_of_the_turn_goes_back_signed(client: str, stream: bool, shape: str) -> None:
    gemini = Gemini()
    body = first_request(client)
    for step, calls in enumerate(SHAPES[shape][:-1]):
        c = ctx()
        sent = upstream_body(client, body, c)
        assert gemini.check(sent) == [], f"step {step}"
        assert "thought_signature_skipped" not in c.repairs
        answer = answer_of(client, stream, body, gemini.answer(calls), ctx())
        wire = orjson.dumps(answer).decode()
        assert not any(s in wire for s in gemini.issued.values()), "a raw signature reached the client"
        body = echo(client, body, answer)
    c = ctx()
    sent = upstream_body(client, body, c)
    assert gemini.check(sent) == []
    signed = [tc for m in sent["messages"] for tc in m.get("tool_calls") or () if "extra_content" in tc]
    assert len(signed) == len(gemini.issued) and all(
        tc["extra_content"]["google"]["thought_signature"] == gemini.issued[tc["id"]] for tc in signed
    )
    assert not {"thought_signature_skipped", "thought_signature_rejected"} & set(c.repairs)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_signature_does_not_open_under_another_key(client: str) -> None:
    gemini = Gemini()
    body = first_request(client)
    body = echo(client, body, answer_of(client, False, body, gemini.answer(1), ctx(key=b"other" * 8)))
    c = ctx()
    sent = upstream_body(client, body, c)
    first = next(m for m in sent["messages"] if m.get("tool_calls"))["tool_calls"][0]
    assert first["extra_content"]["google"]["thought_signature"] == ESCAPE
    assert "thought_signature_skipped" in c.repairs
    if client == "chat":  # the envelope came on the call itself: refused, and counted
        assert "thought_signature_rejected" in c.repairs
        assert c.envelope_rejected == [("thought_signature", "bad_mac")]


def test_a_client_that_drops_the_carrier_gets_the_escape_value() -> None:
    """Kimi Code keeps no unknown field: its call comes back bare."""
    gemini = Gemini()
    body = first_request("chat")
    answer = answer_of("chat", True, body, gemini.answer(2), ctx())
    for tc in answer["choices"][0]["message"]["tool_calls"]:
        tc.pop("extra_content", None)
    c = ctx()
    sent = upstream_body("chat", echo("chat", body, answer), c)
    calls = next(m for m in sent["messages"] if m.get("tool_calls"))["tool_calls"]
    assert calls[0]["extra_content"] == {"google": {"thought_signature": ESCAPE}}
    assert "extra_content" not in calls[1]  # only the first call of a step is signed
    assert c.repairs.count("thought_signature_skipped") == 1
    assert gemini.check(sent) == []


# -- the restore table, case by case ------------------------------------------------------------


def chat_body(*calls: dict[str, Any], earlier_turn: bool = False) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    msgs.append({"role": "assistant", "content": None, "tool_calls": list(calls)})
    msgs += [{"role": "tool", "tool_call_id": tc["id"], "content": "ok"} for tc in calls]
    if earlier_turn:
        msgs.append({"role": "user", "content": "and now?"})
    return {"model": "m", "messages": msgs}


def call(cid: str, sig: str | None = None, **extra: Any) -> dict[str, Any]:
    tc: dict[str, Any] = {"id": cid, "type": "function", "function": {"name": "run", "arguments": "{}"}}
    if sig is not None or extra:
        tc["extra_content"] = {**extra, **({"google": {"thought_signature": sig}} if sig is not None else {})}
    return tc


def sealed(cid: str, sig: str, key: bytes = KEY) -> str:
    return envelope.seal("", key, {cid: sig})


def first_sig(body: dict[str, Any], j: int = 0) -> Any:
    tc = body["messages"][1]["tool_calls"][j]
    return ((tc.get("extra_content") or {}).get("google") or {}).get("thought_signature")


RESTORE_CASES = [
    # (case, the call as sent, expected signature to Gemini, repairs)
    ("sealed for this call", call("a", sealed("a", "SIG")), "SIG", []),
    ("escape value as sent", call("a", ESCAPE), ESCAPE, []),
    (
        "sealed for another call",
        call("a", sealed("b", "SIG")),
        ESCAPE,
        ["thought_signature_rejected", "thought_signature_skipped"],
    ),
    (
        "sealed under another key",
        call("a", sealed("a", "SIG", b"x" * 32)),
        ESCAPE,
        ["thought_signature_rejected", "thought_signature_skipped"],
    ),
    (
        "edited envelope",
        call("a", sealed("a", "SIG")[:-4] + "AAAA"),
        ESCAPE,
        ["thought_signature_rejected", "thought_signature_skipped"],
    ),
    (
        "raw value the proxy never saw",
        call("a", "Zm9yZ2Vk"),
        ESCAPE,
        ["thought_signature_rejected", "thought_signature_skipped"],
    ),
    ("nothing", call("a"), ESCAPE, ["thought_signature_skipped"]),
]


@pytest.mark.parametrize(("case", "tc", "want", "repairs"), RESTORE_CASES, ids=[c[0] for c in RESTORE_CASES])
def test_restore_table(case: str, tc: dict[str, Any], want: str, repairs: list[str]) -> None:
    c = ctx()
    body = chat_body(tc)
    before = orjson.dumps(body)
    restore(body, c)
    assert first_sig(body) == want
    assert c.repairs == repairs
    assert orjson.dumps(chat_body(tc)) == before  # the client's objects are not mutated


def test_restore_keeps_the_rest_of_extra_content() -> None:
    body = chat_body(call("a", sealed("a", "SIG"), vendor={"x": 1}))
    restore(body, ctx())
    assert body["messages"][1]["tool_calls"][0]["extra_content"] == {
        "vendor": {"x": 1},
        "google": {"thought_signature": "SIG"},
    }


def test_restore_from_the_reasoning_envelopes_of_the_request() -> None:
    c = ctx()
    c.thought_signatures = {"a": "SIG"}
    body = chat_body(call("a"), call("b"))
    restore(body, c)
    assert first_sig(body) == "SIG" and first_sig(body, 1) is None and c.repairs == []


def test_an_earlier_turn_gets_the_escape_value_uncounted() -> None:
    """Gemini checks only the current turn, but a turn's bytes must not change once it is
    over (the prefix cache): the value stays, counted only while Gemini checks it."""
    c = ctx()
    body = chat_body(call("a"), earlier_turn=True)
    restore(body, c)
    assert first_sig(body) == ESCAPE and c.repairs == []


def test_without_a_key_a_chat_client_gets_and_returns_the_raw_signature() -> None:
    gemini = Gemini()
    body = first_request("chat")
    answer = answer_of("chat", True, body, gemini.answer(1), ctx(key=b""))
    assert answer["choices"][0]["message"]["tool_calls"][0]["extra_content"]["google"]["thought_signature"] in (
        gemini.issued.values()
    )
    sent = upstream_body("chat", echo("chat", body, answer), ctx(key=b""))
    assert gemini.check(sent) == []


def test_toward_another_upstream_the_envelope_is_stripped() -> None:
    c = ctx(quirks=frozenset())
    body = chat_body(call("a", sealed("a", "SIG"), vendor={"x": 1}), call("b"))
    out = prepare_chat(body, c, translated=False)
    assert out["messages"][1]["tool_calls"][0]["extra_content"] == {"vendor": {"x": 1}}
    assert c.repairs.count("thought_signature_stripped") == 1
    raw = chat_body(call("a", "RAW"))
    c2 = ctx(quirks=frozenset())
    assert prepare_chat(raw, c2, translated=False)["messages"] == raw["messages"]  # the client's own value
    assert "thought_signature_stripped" not in c2.repairs
    strip(raw, c2)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=300), st.text(min_size=1, max_size=64))
def test_any_signature_survives_byte_for_byte(sig: str, cid: str) -> None:
    body = chat_body(call(cid, sealed(cid, sig)))
    c = ctx()
    restore(body, c)
    assert first_sig(body) == sig and c.repairs == []


def test_the_signature_comes_back_late_in_a_stream() -> None:
    """A signature on a later delta than the call's identity still reaches every client."""
    head = {"id": "chatcmpl-g", "created": 1, "model": "g"}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "a", "type": "function", "function": {"name": "run", "arguments": "{}"}}]}}]},
        {**head, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "extra_content": {"google": {"thought_signature": "LATE"}}}]}}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]  # fmt: skip
    raw = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    for client in CLIENTS:
        body = first_request(client)
        _, bridge = open_bridge({**body, "stream": True}, client, "chat", ctx())
        out = events(bridge.receive_data(raw) + bridge.end())
        opened = [
            envelope.open_sealed(v, KEY)[2]
            for d in out
            if d != "[DONE]"
            for v in _strings(orjson.loads(d))
            if envelope.is_envelope(v)
        ]
        assert {"a": "LATE"} in opened, client


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


def test_the_decoder_tells_the_app_every_signature_it_saw_by_call_id() -> None:
    """What app/signatures.py keeps for the Chat clients that drop the field."""
    gemini = Gemini()
    calls = gemini.answer(2) + gemini.answer(1)
    for stream in (True, False):
        c = ctx()
        _, bridge = open_bridge({**first_request("chat"), "stream": stream}, "chat", "chat", c)
        if stream:
            bridge.receive_data(stream_bytes(calls))
            bridge.end()
        else:
            bridge.complete(whole(calls))
        assert c.signatures_seen == {cid: ("run", sig) for cid, sig in gemini.issued.items()}
