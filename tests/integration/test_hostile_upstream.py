"""A hostile or broken upstream never crashes a request: through the ASGI app, Chat and
Responses clients × Chat and Responses upstreams, stream and non-stream, and every client
row's stream (``EVERY_CLIENT``) from both (upstreams mocked by respx).

Malformed fields are skipped where they are read and the answer completes; what cannot be
answered is a protocol-correct failure (in a stream: one terminal with ``upstream_bad_event``;
non-stream: a 502 ``upstream_bad_response`` OpenAI error object), never a cut stream or a 500.
"""

from __future__ import annotations

import copy
from typing import Any
from urllib.parse import urlencode

import httpx
import orjson
import pytest

from tests.protocol_samples import hello
from transformers.chat_decode import ChatStreamDecoder
from transformers.protocols import SPECS
from transformers.responses_decode import ResponsesStreamDecoder
from transformers.sse import SSEParser

from .conftest import (
    CHAT_URL,
    RESP_URL,
    chat_chunk,
    chat_stream_two_calls,
    parse_sse,
    resp_stream_two_calls,
    sse_response,
)

CHAT_REQ = {"messages": [{"role": "user", "content": "read a.py and ls"}], "stream_options": {"include_usage": True}}
RESP_REQ = {"input": "read a.py and ls"}
MODEL = {"chat": "chat-model", "responses": "resp-model"}
PATH = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}
DIRECTIONS = [(c, u) for c in ("chat", "responses") for u in ("chat", "responses")]
# every client row toward the two upstreams whose hostile streams are written here
EVERY_CLIENT = [(c, u) for c in SPECS for u in ("chat", "responses")]
# the failure a client of each protocol sees when a stage fails: the error's code (Chat,
# Responses), Anthropic's error type, Google's status
STAGE_FAILURE = {"chat": "upstream_bad_event", "responses": "upstream_bad_event", "messages": "api_error",
                 "gemini": "INTERNAL"}  # fmt: skip
TERMINALS = ("response.completed", "response.incomplete", "response.failed")
MESSAGES_COMPLETED = ("end_turn", "tool_use", "stop_sequence", "pause_turn")


def request(client: str, upstream: str, stream: bool) -> dict[str, Any]:
    if client in ("messages", "gemini"):  # (the model and the stream of a Gemini one are its path's)
        return hello(client, model=MODEL[upstream]) | {"stream": stream}
    base = CHAT_REQ if client == "chat" else RESP_REQ
    return {**base, "model": MODEL[upstream], "stream": stream}


def path(client: str, upstream: str, stream: bool) -> str:
    spec = SPECS[client]
    if "{model}" not in spec.route:
        return spec.route
    return (
        (spec.stream_route if stream else spec.route).format(model=MODEL[upstream]) + "?" + urlencode(spec.stream_query)
    )


def hostile_chat_stream() -> list[Any]:
    """The two-call stream with malformed chunks in between, a numeric id on the second call
    and usage details of the wrong type."""
    s = chat_stream_two_calls()
    s[8]["choices"][0]["delta"]["tool_calls"][0]["id"] = 42
    s[-1]["usage"] = {**s[-1]["usage"], "prompt_tokens_details": 5, "completion_tokens_details": [1]}
    bad = [
        chat_chunk(None, None, choices=1),
        chat_chunk(None, None, choices=[None]),
        chat_chunk("oops"),  # delta is a string
        chat_chunk({"tool_calls": {"index": 0}}),
        chat_chunk({"tool_calls": [7, {"index": 0, "function": "Read"}]}),
        chat_chunk({"content": "!"}, None, id={"x": 1}, model=5),
    ]
    return s[:5] + bad + s[5:9] + [chat_chunk({}, ["tool_calls"])] + s[9:]


def hostile_resp_stream() -> list[Any]:
    """The two-call stream with events whose type/item_id/item have the wrong type, a numeric
    call_id on the second call and usage details of the wrong type."""
    s = copy.deepcopy(resp_stream_two_calls())
    for e in (s[13]["item"], s[15]["item"], s[16]["response"]["output"][3]):
        e["call_id"] = 42
    s[16]["response"]["usage"]["input_tokens_details"] = 5
    bad: list[Any] = [
        orjson.dumps({"type": 5, "delta": "x"}),  # raw: no ``event:`` line can name it
        orjson.dumps({"type": ["response.completed"]}),
        {"type": "response.output_text.delta", "item_id": {"id": "msg_0"}, "output_index": 1, "delta": "!"},
        {"type": "response.output_item.added", "output_index": 9, "item": "x"},
        {"type": "response.output_item.done", "output_index": 9, "item": {"id": "z", "type": ["message"]}},
        {
            "type": "response.output_item.done",
            "output_index": 9,
            "item": {"id": "msg_9", "type": "message", "content": [1, None]},
        },
    ]
    return s[:8] + bad + s[8:]


def client_view(client: str, raw: bytes) -> dict[str, Any]:
    """What the client got: terminal, error code, text, call ids; checks the protocol shape."""
    if client == "messages":
        return messages_view(raw)
    if client == "gemini":
        return gemini_view(raw)
    events = parse_sse(raw)
    assert events
    if client == "chat":
        last = events[-1]
        errors = [e for e in events if e != "[DONE]" and "error" in e]
        assert last == "[DONE]" or (errors and errors[-1] is last and len(errors) == 1)
        assert events.count("[DONE]") <= 1
        chunks = [e for e in events if e != "[DONE]" and "error" not in e]
        finishes = [c for c in chunks for ch in c["choices"] if ch["finish_reason"]]
        assert len(finishes) == (1 if last == "[DONE]" else 0)
        ids = [t["id"] for c in chunks for ch in c["choices"] for t in ch["delta"].get("tool_calls", ()) if "id" in t]
        text = "".join(ch["delta"].get("content") or "" for c in chunks for ch in c["choices"])
        usage = [c["usage"] for c in chunks if c.get("usage")]
        return {
            "status": "completed" if last == "[DONE]" else "failed",
            "code": None if last == "[DONE]" else last["error"]["code"],
            "ids": ids,
            "text": text,
            "usage": usage,
        }
    types = [e["type"] for e in events]
    assert types[0] == "response.created"
    assert [t for t in types if t in TERMINALS] == [types[-1]]
    seqs = [e["sequence_number"] for e in events]
    assert seqs == sorted(set(seqs))
    final = events[-1]["response"]
    ids = [i["call_id"] for i in final["output"] if i["type"] == "function_call"]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    code = events[-2]["code"] if types[-1] == "response.failed" else None
    return {"status": final["status"], "code": code, "ids": ids, "text": text, "usage": [final["usage"]]}


def gemini_view(raw: bytes) -> dict[str, Any]:
    """``client_view`` for a Gemini client: bare ``data:`` chunks; one ``finishReason``, on
    the last chunk, or one error object, last; ``code`` is the error's status."""
    chunks = [e for e in parse_sse(raw)]
    assert chunks and all(isinstance(c, dict) for c in chunks)
    errors = [i for i, c in enumerate(chunks) if "error" in c]
    finishes = [i for i, c in enumerate(chunks) for cand in c.get("candidates", ()) if cand.get("finishReason")]
    assert len(errors) + len(finishes) == 1 and (errors or finishes) == [len(chunks) - 1], (errors, finishes)
    parts = [p for c in chunks for cand in c.get("candidates", ()) for p in cand["content"]["parts"]]
    last = chunks[-1]
    usage = [c["usageMetadata"] for c in chunks if "usageMetadata" in c]
    return {
        "status": "failed" if errors else "completed",
        "code": last["error"]["status"] if errors else None,
        "ids": [p["functionCall"].get("id") for p in parts if "functionCall" in p],
        "text": "".join(p.get("text", "") for p in parts if not p.get("thought")),
        "usage": usage,
    }


def messages_view(raw: bytes) -> dict[str, Any]:
    """``client_view`` for an Anthropic Messages client.  The shape Claude Code relies on:
    every event's ``event:`` line names its type; ``message_start`` first and once; one
    terminal, last: ``message_delta`` + ``message_stop`` (once), or a single ``error`` event
    with nothing after it; blocks indexed from 0 in start order, one open at a time, never
    reopened, every ``content_block_delta`` for the open block.  Anthropic's error has a
    ``type``, not a code: ``code`` is None, ``error_type`` is that type."""
    p = SSEParser()
    frames = p.feed(raw) + p.end()
    assert frames, "an empty stream"
    events: list[dict[str, Any]] = []
    for f in frames:
        ev = orjson.loads(f.data)
        assert isinstance(ev, dict) and f.event == ev.get("type"), (f.event, f.data[:200])
        events.append(ev)
    types = [e["type"] for e in events]
    terminals = [i for i, t in enumerate(types) if t in ("message_stop", "error")]
    assert terminals == [len(types) - 1], f"not one terminal, last: {types}"
    assert types.count("message_start") <= 1 and (types[0] == "message_start" or types == ["error"]), types
    completed = types[-1] == "message_stop"
    assert types.count("message_delta") == (1 if completed else 0), types
    if completed:
        assert types[-2] == "message_delta", types
    open_: int | None = None
    started: list[dict[str, Any]] = []
    text, ids, args = "", [], {}
    for e in events:
        t = e["type"]
        if t == "content_block_start":
            assert open_ is None, f"block {e['index']} started while {open_} is open"
            assert e["index"] == len(started), f"block index {e['index']} out of order (or reopened)"
            open_ = e["index"]
            started.append(e["content_block"])
            if e["content_block"]["type"] == "tool_use":
                ids.append(e["content_block"]["id"])
                args[e["index"]] = ""
        elif t == "content_block_delta":
            assert e["index"] == open_, f"a delta for block {e['index']} while {open_} is open"
            d = e["delta"]
            if d["type"] == "text_delta":
                text += d["text"]
            elif d["type"] == "input_json_delta":
                args[e["index"]] += d["partial_json"]
        elif t == "content_block_stop":
            assert e["index"] == open_, f"a stop for block {e['index']} while {open_} is open"
            open_ = None
        elif t == "message_delta":
            assert open_ is None, f"message_delta while block {open_} is open"
    if completed:
        reason = events[-2]["delta"]["stop_reason"]
        status = "completed" if reason in MESSAGES_COMPLETED else "incomplete"
        err_type = None
    else:
        err = events[-1]["error"]
        assert set(err) >= {"type", "message"} and isinstance(err["message"], str), err
        status, err_type = "failed", err["type"]
    return {
        "status": status,
        "code": None,
        "error_type": err_type,
        "ids": ids,
        "text": text,
        "usage": [events[-2]["usage"]] if completed else [],
        "blocks": started,
        "args": [args[k] for k in sorted(args)],
    }


def upstream_stream(upstream: str) -> httpx.Response:
    if upstream == "chat":
        return sse_response(hostile_chat_stream(), done=True)
    return sse_response(hostile_resp_stream(), event_names=True)


@pytest.mark.parametrize(("client_proto", "upstream"), EVERY_CLIENT)
async def test_stream_malformed_events_are_skipped(
    client: httpx.AsyncClient, mock: Any, client_proto: str, upstream: str
) -> None:
    mock.post(CHAT_URL if upstream == "chat" else RESP_URL).mock(return_value=upstream_stream(upstream))
    r = await client.post(path(client_proto, upstream, True), json=request(client_proto, upstream, True))
    assert r.status_code == 200, r.text
    got = client_view(client_proto, r.content)
    assert got["status"] == "completed"
    first = "functions.Read:0" if upstream == "chat" else "call_0"
    if client_proto == "messages" and upstream == "chat":  # an id Anthropic's pattern refuses, hex-encoded
        first = "sbx_" + first.encode().hex()
    assert got["ids"] == [first, "42"]  # a numeric upstream id reaches the client as a string
    assert got["text"].startswith("Hel")
    u = got["usage"][0]
    assert all(isinstance(v, int) for v in u.values() if not isinstance(v, dict))


@pytest.mark.parametrize(("client_proto", "upstream"), EVERY_CLIENT)
async def test_stream_guard_one_failure_terminal(
    client: httpx.AsyncClient, mock: Any, monkeypatch: pytest.MonkeyPatch, client_proto: str, upstream: str
) -> None:
    """Whatever a stage raises after the 200 went out: one failure terminal, never a cut stream."""
    cls = ChatStreamDecoder if upstream == "chat" else ResponsesStreamDecoder
    real = cls.feed
    seen = {"n": 0}
    # the feed of an event mid-stream: a Chat upstream's reasoning, text and argument chunks
    # take the decoder's shortcuts, so its third feed is the second call's opening
    fail_at = 3 if upstream == "chat" else 6

    def feed(self: Any, ev: Any) -> Any:
        seen["n"] += 1
        if seen["n"] == fail_at:
            raise RuntimeError("a stage failed")
        return real(self, ev)

    monkeypatch.setattr(cls, "feed", feed)
    events = chat_stream_two_calls() if upstream == "chat" else resp_stream_two_calls()
    mock.post(CHAT_URL if upstream == "chat" else RESP_URL).mock(
        return_value=sse_response(events, done=upstream == "chat", event_names=upstream == "responses")
    )
    r = await client.post(path(client_proto, upstream, True), json=request(client_proto, upstream, True))
    assert r.status_code == 200
    got = client_view(client_proto, r.content)
    assert got["status"] == "failed"
    assert (got["error_type"] if client_proto == "messages" else got["code"]) == STAGE_FAILURE[client_proto]


async def test_stream_item_nested_hundreds_deep(client: httpx.AsyncClient, mock: Any) -> None:
    """A hosted item nested 300 deep: a Responses client gets a failure terminal (the item
    could not be written), a Chat client (which never receives such items) its answer."""
    deep = b'{"a":' * 300 + b"1" + b"}" * 300
    s = resp_stream_two_calls()
    item = (
        b'{"type":"response.output_item.done","output_index":4,"item":{"id":"ws_1","type":"web_search_call","action":'
        + deep
        + b"}}"
    )
    body = sse_response([*s[:-1], item, s[-1]]).content
    mock.post(RESP_URL).mock(
        return_value=httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)
    )
    r = await client.post("/v1/responses", json=request("responses", "responses", True))
    got = client_view("responses", r.content)
    assert (got["status"], got["code"]) == ("failed", "upstream_bad_event")
    r = await client.post("/v1/chat/completions", json=request("chat", "responses", True))
    got = client_view("chat", r.content)
    assert got["status"] == "completed" and got["ids"] == ["call_0", "call_1"]


def chat_body(**kw: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "up-chat",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "Hello",
                    "tool_calls": [
                        {"id": 42, "type": "function", "function": {"name": "Read", "arguments": {"path": "a.py"}}}
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "prompt_tokens_details": 5},
        **kw,
    }


def resp_body(**kw: Any) -> dict[str, Any]:
    final = copy.deepcopy(resp_stream_two_calls()[-1]["response"])
    final["output"][2]["call_id"] = 42
    final["usage"]["output_tokens_details"] = [2]
    return {**final, **kw}


@pytest.mark.parametrize(("client_proto", "upstream"), DIRECTIONS)
async def test_non_stream_bad_optional_fields_are_skipped(
    client: httpx.AsyncClient, mock: Any, client_proto: str, upstream: str
) -> None:
    body = chat_body() if upstream == "chat" else resp_body()
    mock.post(CHAT_URL if upstream == "chat" else RESP_URL).mock(return_value=httpx.Response(200, json=body))
    r = await client.post(PATH[client_proto], json=request(client_proto, upstream, False))
    assert r.status_code == 200, r.text
    out = r.json()
    if client_proto == "chat":
        ids = [t["id"] for t in out["choices"][0]["message"]["tool_calls"]]
        usage = out["usage"]
        dropped = (
            usage["prompt_tokens_details"]["cached_tokens"]
            if upstream == "chat"
            else usage["completion_tokens_details"]["reasoning_tokens"]
        )
    else:
        ids = [i["call_id"] for i in out["output"] if i["type"] == "function_call"]
        usage = out["usage"]
        dropped = (
            usage["input_tokens_details"]["cached_tokens"]
            if upstream == "chat"
            else usage["output_tokens_details"]["reasoning_tokens"]
        )
    assert dropped == 0  # the details object of the wrong type counts as absent
    assert ids[0] == "42"  # a numeric upstream id reaches the client as a string
    assert all(isinstance(v, int) for v in usage.values() if not isinstance(v, dict))


BAD_BODIES = [
    ("chat", {"id": "chatcmpl-1", "object": "chat.completion", "choices": 1}),
    ("chat", {"id": "chatcmpl-1", "object": "chat.completion", "choices": [None]}),
    ("chat", {"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"message": "Hello"}]}),
]


@pytest.mark.parametrize("client_proto", ["chat", "responses"])
@pytest.mark.parametrize(("upstream", "body"), BAD_BODIES, ids=["choices-int", "choices-null", "message-string"])
async def test_non_stream_malformed_body_is_a_502(
    client: httpx.AsyncClient, mock: Any, client_proto: str, upstream: str, body: dict[str, Any]
) -> None:
    mock.post(CHAT_URL).mock(return_value=httpx.Response(200, json=body))
    r = await client.post(PATH[client_proto], json=request(client_proto, upstream, False))
    assert r.status_code == 502, r.text
    err = r.json()["error"]
    assert (err["type"], err["code"]) == ("upstream_error", "upstream_bad_response")
    assert isinstance(err["message"], str) and err["message"]


async def test_non_stream_item_nested_hundreds_deep(client: httpx.AsyncClient, mock: Any) -> None:
    deep = b'{"a":' * 300 + b"1" + b"}" * 300
    body = (
        b'{"id":"resp_1","object":"response","status":"completed","output":[{"id":"ws_1","type":"web_search_call","action":'
        + deep
        + b"}]}"
    )
    mock.post(RESP_URL).mock(
        return_value=httpx.Response(200, content=body, headers={"content-type": "application/json"})
    )
    r = await client.post("/v1/responses", json=request("responses", "responses", False))
    assert r.status_code == 502, r.text
    assert r.json()["error"]["code"] == "upstream_bad_response"
