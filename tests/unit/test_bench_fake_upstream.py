"""The bench's fake upstream: deterministic Chat and Responses answers, on the wire.

Correctness only (no timing assertion): chunk counts, text, tool call, usage, terminators,
HTTP framing (chunked streams, keep-alive, Content-Length JSON), model-name parameters.
"""

from __future__ import annotations

import asyncio

import httpx
import orjson
import pytest

from bench.fake_upstream import (
    PROMPT_TOKENS,
    TOOL_ARG_PARTS,
    TOOL_ARGS,
    TOOL_CALL_ID,
    TOOL_NAME,
    chat_json,
    chat_steps,
    expected_text,
    parse_model,
    responses_json,
    responses_steps,
    serve,
    tool_arg_parts,
    tool_args,
    usage_for,
)
from bench.loadgen import validate_json, validate_stream
from transformers.sse import SSEParser


def parse_all(data: bytes):
    p = SSEParser()
    return p.feed(data) + p.end()


@pytest.mark.parametrize(
    "model, want",
    [
        ("bench-chat-n200-d5", (200, 0.005)),
        ("bench-resp-n0-d0", (0, 0.0)),
        ("bench-chat-n7", (7, 0.0)),
        ("d20-n3", (3, 0.02)),
        ("bench-chat-n10-d2.5", (10, 0.0025)),
        ("gpt-4o", (20, 0.0)),  # nothing recognised: the defaults
        ("kimi-k2.6", (20, 0.0)),
    ],
)
def test_parse_model(model, want):
    n, d = parse_model(model)
    assert n == want[0]
    assert d == pytest.approx(want[1])


def test_usage_counts_text_chunks_and_tool_parts():
    assert usage_for(200) == (PROMPT_TOKENS, 200 + len(TOOL_ARG_PARTS), PROMPT_TOKENS + 200 + len(TOOL_ARG_PARTS))


@pytest.mark.parametrize("n", [0, 1, 5, 200])
def test_chat_stream_shape(n):
    steps = chat_steps("m", n)
    assert len(steps) == n + 2  # preamble, N text steps, tail
    events = parse_all(b"".join(steps))
    # role chunk + N content + (tool start + 3 argument deltas) + finish + usage + [DONE]
    assert len(events) == n + 1 + 1 + len(TOOL_ARG_PARTS) + 1 + 1 + 1
    assert events[-1].data == "[DONE]"
    objs = [orjson.loads(e.data) for e in events[:-1]]
    assert all(e.event is None for e in events)
    assert objs[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = [o["choices"][0]["delta"]["content"] for o in objs[1 : n + 1]]
    assert len(text) == n and all(text)
    assert "".join(text) == expected_text(n)
    tc = [o["choices"][0]["delta"]["tool_calls"][0] for o in objs[n + 1 : n + 1 + 1 + len(TOOL_ARG_PARTS)]]
    assert tc[0] == {
        "index": 0,
        "id": TOOL_CALL_ID,
        "type": "function",
        "function": {"name": TOOL_NAME, "arguments": ""},
    }
    assert "".join(t["function"]["arguments"] for t in tc) == TOOL_ARGS
    assert all("id" not in t and "name" not in t["function"] for t in tc[1:])
    assert objs[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert objs[-1]["choices"] == []
    assert objs[-1]["usage"]["completion_tokens"] == usage_for(n)[1]
    assert objs[-1]["usage"]["total_tokens"] == usage_for(n)[2]
    assert validate_stream("chat", events, n) == []


@pytest.mark.parametrize("n", [0, 1, 5, 200])
def test_responses_stream_shape(n):
    steps = responses_steps("m", n)
    assert len(steps) == n + 2
    events = parse_all(b"".join(steps))
    # created, in_progress, item added, part added | N deltas | text done, part done,
    # item done, fc added, 3 argument deltas, arguments done, item done, completed
    assert len(events) == 4 + n + 4 + len(TOOL_ARG_PARTS) + 3
    objs = [orjson.loads(e.data) for e in events]
    assert [e.event for e in events] == [o["type"] for o in objs]
    assert [o["sequence_number"] for o in objs] == list(range(len(objs)))
    types = [o["type"] for o in objs]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[4 : 4 + n] == ["response.output_text.delta"] * n
    assert "".join(o["delta"] for o in objs[4 : 4 + n]) == expected_text(n)
    assert types[-1] == "response.completed"
    done = objs[-1]["response"]
    assert done["status"] == "completed"
    assert done["usage"]["output_tokens"] == usage_for(n)[1]
    assert done["output"][0]["content"][0]["text"] == expected_text(n)
    fc = done["output"][1]
    assert (fc["type"], fc["call_id"], fc["name"], fc["arguments"]) == (
        "function_call",
        TOOL_CALL_ID,
        TOOL_NAME,
        TOOL_ARGS,
    )
    args = [o["delta"] for o in objs if o["type"] == "response.function_call_arguments.delta"]
    assert args == list(TOOL_ARG_PARTS)
    assert validate_stream("responses", events, n) == []


@pytest.mark.parametrize("proto", ["chat", "responses"])
def test_json_answers_validate(proto):
    obj = chat_json("m", 9) if proto == "chat" else responses_json("m", 9)
    assert validate_json(proto, orjson.dumps(obj), 9) == []


# ------------------------------------------------------------------- on the wire
@pytest.fixture
async def fake():
    server = await serve("127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.close()
    await server.wait_closed()


@pytest.mark.parametrize("proto, path", [("chat", "/v1/chat/completions"), ("responses", "/v1/responses")])
@pytest.mark.parametrize("model, n", [("bench-n3-d0", 3), ("bench-n50-d1", 50), ("bench-n0", 0)])
async def test_stream_over_http(fake, proto, path, model, n):
    async with httpx.AsyncClient(base_url=fake) as c:
        async with c.stream("POST", path, json={"model": model, "stream": True}) as r:
            assert r.status_code == 200
            assert r.headers["content-type"] == "text/event-stream"
            assert r.headers["transfer-encoding"] == "chunked"
            body = b"".join([b async for b in r.aiter_raw()])
    want = b"".join(chat_steps(model, n) if proto == "chat" else responses_steps(model, n))
    assert body == want
    assert validate_stream(proto, parse_all(body), n) == []


@pytest.mark.parametrize("proto, path", [("chat", "/v1/chat/completions"), ("responses", "/v1/responses")])
async def test_json_over_http_keepalive(fake, proto, path):
    async with httpx.AsyncClient(base_url=fake) as c:
        for model, n in (("bench-n4", 4), ("bench-n1", 1), ("bench-n4", 4)):  # one connection, cached
            r = await c.post(path, json={"model": model, "stream": False})
            assert r.status_code == 200
            assert r.headers["content-length"] == str(len(r.content))
            assert validate_json(proto, r.content, n) == []
            assert r.json()["model"] == model


async def test_errors_and_health(fake):
    async with httpx.AsyncClient(base_url=fake) as c:
        assert (await c.get("/healthz")).text == "ok"
        assert (await c.post("/v1/embeddings", json={})).status_code == 404
        r = await c.post("/v1/chat/completions", content=b"{not json")
        assert r.status_code == 400
        assert r.json()["error"]["type"] == "invalid_request_error"


async def test_stats_count_connections_and_requests(fake):
    async with httpx.AsyncClient(base_url=fake) as c:
        s0 = (await c.get("/stats")).json()
        for _ in range(3):  # one keep-alive connection
            await c.post("/v1/chat/completions", json={"model": "bench-n1"})
        s1 = (await c.get("/stats")).json()
    async with httpx.AsyncClient(base_url=fake) as c2:  # a second connection
        await c2.post("/v1/responses", json={"model": "bench-n1"})
        s2 = (await c2.get("/stats")).json()
    assert s1["requests"] - s0["requests"] == 3
    assert s1["connections"] == s0["connections"]
    assert (s2["requests"] - s1["requests"], s2["connections"] - s1["connections"]) == (1, 1)


async def test_concurrent_paced_streams(fake):
    async def one(c, i):
        async with c.stream("POST", "/v1/responses", json={"model": "bench-n5-d1", "stream": True}) as r:
            return b"".join([b async for b in r.aiter_raw()])

    async with httpx.AsyncClient(base_url=fake) as c:
        bodies = await asyncio.gather(*(one(c, i) for i in range(20)))
    for b in bodies:
        assert validate_stream("responses", parse_all(b), 5) == []


def test_serve_refuses_non_loopback():
    with pytest.raises(ValueError):
        asyncio.run(serve("0.0.0.0", 0))


@pytest.mark.parametrize("kind", ["chat", "responses"])
def test_paced_tail_same_bytes_more_steps(kind):
    """``pt``: the tail's events go out as 5 steps (same timeline for both protocols), the
    bytes of the whole stream unchanged; ``rel`` only changes the schedule."""
    from bench.fake_upstream import answer_for, parse_pacing

    assert parse_pacing("bench-chat-n200-d5-pt") == (True, False)
    assert parse_pacing("bench-chat-n200-d5-pt-rel") == (True, True)
    assert parse_pacing("bench-chat-n200-d5") == (False, False)
    up = "chat" if kind == "chat" else "resp"
    plain = answer_for(kind, f"bench-{up}-n7-d5", True)
    paced = answer_for(kind, f"bench-{up}-n7-d5-pt", True)
    assert len(plain.steps) == 7 + 2 and len(paced.steps) == 7 + 6

    def payload(step: bytes) -> bytes:  # one HTTP chunk's data (head and terminator aside)
        step = step.split(b"\r\n\r\n", 1)[1] if step.startswith(b"HTTP/") else step
        step = step.removesuffix(b"0\r\n\r\n")
        size, _, rest = step.partition(b"\r\n")
        assert len(rest) == int(size, 16) + 2
        return rest[:-2]

    def same(b: bytes) -> bytes:  # the model name is in the bytes
        return b.replace(b"-n7-d5-pt", b"-n7-d5")

    assert [same(payload(s)) for s in paced.steps[:8]] == [payload(s) for s in plain.steps[:8]]
    assert same(b"".join(payload(s) for s in paced.steps[8:])) == payload(plain.steps[-1])
    assert paced.steps[-1].endswith(b"0\r\n\r\n")


@pytest.mark.parametrize("proto, path", [("chat", "/v1/chat/completions"), ("responses", "/v1/responses")])
@pytest.mark.parametrize("stream", [True, False])
async def test_hosted_adds_a_hosted_apis_head_lines_and_nothing_else(fake, proto, path, stream):
    from bench.fake_upstream import HOSTED_HEADERS

    async with httpx.AsyncClient(base_url=fake) as c:
        plain = await c.post(path, json={"model": "bench-n3", "stream": stream})
        hosted = await c.post(path, json={"model": "bench-n3-hosted", "stream": stream})
    extra = {k.lower() for k in hosted.headers} - {k.lower() for k in plain.headers}
    assert len(extra) == 20 == HOSTED_HEADERS.count(b"\r\n")
    assert hosted.headers["x-ratelimit-remaining-tokens"] == "29999456"
    assert plain.content.replace(b"bench-n3", b"") == hosted.content.replace(b"bench-n3-hosted", b"")


def test_vllm_lays_chat_chunks_out_as_vllm_does():
    """``vllm``: each choice carries ``logprobs: null`` (not the proxy's encoder's layout); the
    stream is otherwise the same, and still validates."""
    plain = [orjson.loads(e.data) for e in parse_all(b"".join(chat_steps("m", 3)))[:-1]]
    vllm = parse_all(b"".join(chat_steps("m-vllm", 3)))
    objs = [orjson.loads(e.data) for e in vllm[:-1]]
    for p, v in zip(plain, objs, strict=True):
        for c in v["choices"]:
            assert list(c) == ["index", "delta", "logprobs", "finish_reason"] and c.pop("logprobs") is None
        assert {**v, "model": "m"} == p
    assert validate_stream("chat", vllm, 3) == []


@pytest.mark.parametrize("steps, proto", [(chat_steps, "chat"), (responses_steps, "responses")])
def test_think_sends_reasoning_before_the_text(steps, proto):
    """``think<R>``: R reasoning steps between the opening and the text (Chat
    ``reasoning_content`` chunks, a Responses reasoning item's summary deltas), one step each;
    the answer validates with its reasoning, and a stream missing it does not."""
    plain, think = steps("m-n3", 3), steps("m-n3-think4", 3)
    assert len(think) == len(plain) + 4
    events = parse_all(b"".join(think))
    assert validate_stream(proto, events, 3, True, 4) == []
    assert validate_stream(proto, parse_all(b"".join(plain)), 3, True, 4) != []  # no reasoning came
    if proto == "chat":
        deltas = [orjson.loads(e.data)["choices"][0]["delta"] for e in events[1:5]]
        assert all(list(d) == ["reasoning_content"] for d in deltas)
        assert "".join(d["reasoning_content"] for d in deltas) == expected_text(4)
    else:
        items = [orjson.loads(e.data)["item"] for e in events if e.event == "response.output_item.done"]
        assert [i["type"] for i in items] == ["reasoning", "message", "function_call"]
        assert items[0]["summary"][0]["text"] == expected_text(4)


@pytest.mark.parametrize("steps, proto", [(chat_steps, "chat"), (responses_steps, "responses")])
def test_args_streams_a_long_command_a_delta_a_step(steps, proto):
    """``args<A>``: the tool call's command of A words as A + 2 argument deltas, one step
    each after the call's start; the answer validates with those arguments (and the usage
    that counts them), and the default answer does not."""
    plain, args = steps("m-n3", 3), steps("m-n3-args4", 3)
    assert len(args) == len(plain) + 4 + 2 + 1
    assert orjson.loads(tool_args(4)) == {"command": ["printf", expected_text(4)], "workdir": "/tmp"}
    assert len(tool_arg_parts(4)) == 6 and tool_arg_parts(0) == TOOL_ARG_PARTS
    events = parse_all(b"".join(args))
    assert validate_stream(proto, events, 3, True, 0, 4) == []
    assert validate_stream(proto, parse_all(b"".join(plain)), 3, True, 0, 4) != []
    assert validate_stream(proto, events, 3) != []
    if proto == "chat":
        objs = [orjson.loads(e.data) for e in events if e.data != "[DONE]"]
        deltas = [c["delta"] for o in objs for c in o["choices"] if "tool_calls" in c["delta"]]
        assert [d["tool_calls"][0]["function"]["arguments"] for d in deltas[1:]] == list(tool_arg_parts(4))
    else:
        got = [orjson.loads(e.data)["delta"] for e in events if e.event == "response.function_call_arguments.delta"]
        assert got == list(tool_arg_parts(4))
    # each argument delta is a step of its own (the call's start the one before them)
    assert all(s.count(b"\n\n") == 1 for s in args[-7:-1])
