"""The bench's Anthropic Messages side: the fake upstream's Messages answers (on the wire and
as built), the load generator's Messages client (SSE counting, TTFT mark, stream end, full
checks) and the Messages scenarios, targets and config of ``bench.run``.

Correctness only (no timing assertion).
"""

from __future__ import annotations

import httpx
import orjson
import pytest

from bench import run as benchrun
from bench.fake_upstream import (
    PROMPT_TOKENS,
    TOOL_ARG_PARTS,
    TOOL_ARGS,
    TOOL_CALL_ID,
    TOOL_NAME,
    answer_for,
    expected_text,
    messages_json,
    messages_steps,
    serve,
    tool_arg_parts,
    usage_for,
)
from bench.loadgen import LoadSpec, StreamScan, build_request, is_text_event, run_load, validate_json, validate_stream
from transformers.sse import SSEEvent, SSEParser


def parse_all(data: bytes) -> list[SSEEvent]:
    p = SSEParser()
    return p.feed(data) + p.end()


def objs(events: list[SSEEvent]) -> list[dict]:
    return [orjson.loads(e.data) for e in events]


# ------------------------------------------------------------- the fake's answers
@pytest.mark.parametrize("n", [0, 1, 5, 200])
def test_messages_stream_shape(n):
    steps = messages_steps("m", n)
    assert len(steps) == n + 2  # the opening, N text steps, the tail: Chat's and Responses' timeline
    events = parse_all(b"".join(steps))
    # message_start, text start | N text deltas | text stop, tool start, 3 argument deltas,
    # tool stop, message_delta, message_stop
    assert len(events) == 2 + n + 2 + len(TOOL_ARG_PARTS) + 3
    o = objs(events)
    assert [e.event for e in events] == [x["type"] for x in o]
    assert o[0]["message"]["usage"]["input_tokens"] == PROMPT_TOKENS
    assert o[1] == {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    assert "".join(x["delta"]["text"] for x in o[2 : 2 + n]) == expected_text(n)
    assert all(x["delta"]["type"] == "text_delta" and x["index"] == 0 for x in o[2 : 2 + n])
    tool = o[2 + n + 1]["content_block"]
    assert tool == {"type": "tool_use", "id": TOOL_CALL_ID, "name": TOOL_NAME, "input": {}}
    parts = [x["delta"]["partial_json"] for x in o if x["type"] == "content_block_delta" and x["index"] == 1]
    assert parts == list(TOOL_ARG_PARTS)
    assert o[-2]["delta"]["stop_reason"] == "tool_use" and o[-2]["usage"]["output_tokens"] == usage_for(n)[1]
    assert o[-1] == {"type": "message_stop"}
    assert validate_stream("messages", events, n) == []


def test_messages_json_validates():
    obj = messages_json("m", 9)
    assert obj["content"][1]["input"] == orjson.loads(TOOL_ARGS)
    assert validate_json("messages", orjson.dumps(obj), 9) == []
    wrong = {**obj, "content": [obj["content"][0], {**obj["content"][1], "id": "toolu_other"}]}
    assert any("tool_use id" in p for p in validate_json("messages", orjson.dumps(wrong), 9))
    assert validate_json("messages", orjson.dumps(wrong), 9, same_ids=False) == []
    assert validate_json("messages", orjson.dumps({**obj, "stop_reason": "end_turn"}), 9) == ["stop_reason 'end_turn'"]
    assert validate_json("messages", b'{"type":"error"}', 9)[0].startswith("not a message")


def test_messages_think_sends_a_signed_thinking_block_first():
    plain, think = messages_steps("m-n3", 3), messages_steps("m-n3-think4", 3)
    assert len(think) == len(plain) + 4
    events = parse_all(b"".join(think))
    assert validate_stream("messages", events, 3, True, 4) == []
    assert validate_stream("messages", parse_all(b"".join(plain)), 3, True, 4) != []  # no thinking came
    o = objs(events)
    starts = [x["content_block"]["type"] for x in o if x["type"] == "content_block_start"]
    assert starts == ["thinking", "text", "tool_use"]
    deltas = [x["delta"] for x in o if x["type"] == "content_block_delta" and x["index"] == 0]
    assert [d["type"] for d in deltas] == ["thinking_delta"] * 4 + ["signature_delta"]
    assert "".join(d["thinking"] for d in deltas[:4]) == expected_text(4)
    # a bridge signs with its own key: only a same-protocol answer must keep the upstream's
    resigned = [SSEEvent(e.event, e.data.replace("sig_bench_0", "sig_other")) for e in events]
    assert any("signatures" in p for p in validate_stream("messages", resigned, 3, True, 4))
    assert validate_stream("messages", resigned, 3, False, 4) == []


def test_messages_args_streams_a_long_command_a_delta_a_step():
    plain, args = messages_steps("m-n3", 3), messages_steps("m-n3-args4", 3)
    assert len(args) == len(plain) + 4 + 2 + 1
    events = parse_all(b"".join(args))
    assert validate_stream("messages", events, 3, True, 0, 4) == []
    assert validate_stream("messages", events, 3) != []
    assert all(s.count(b"\n\n") == 1 for s in args[-7:-1])  # each argument delta a step of its own
    deltas = [x["delta"] for x in objs(events) if x["type"] == "content_block_delta"]
    got = [d["partial_json"] for d in deltas if d["type"] == "input_json_delta"]
    assert got == list(tool_arg_parts(4))


def test_messages_paced_tail_same_bytes_more_steps():
    plain = answer_for("messages", "bench-msg-n7-d5", True)
    paced = answer_for("messages", "bench-msg-n7-d5-pt", True)
    assert len(plain.steps) == 7 + 2 and len(paced.steps) == 7 + 6

    def payload(step: bytes) -> bytes:
        step = step.split(b"\r\n\r\n", 1)[1] if step.startswith(b"HTTP/") else step
        size, _, rest = step.removesuffix(b"0\r\n\r\n").partition(b"\r\n")
        assert len(rest) == int(size, 16) + 2
        return rest[:-2]

    def same(b: bytes) -> bytes:
        return b.replace(b"-n7-d5-pt", b"-n7-d5")

    assert [same(payload(s)) for s in paced.steps[:8]] == [payload(s) for s in plain.steps[:8]]
    assert same(b"".join(payload(s) for s in paced.steps[8:])) == payload(plain.steps[-1])
    # the text's end with the call's start, its 3 argument deltas, then its stop and the end
    kinds = [[e.event for e in parse_all(payload(s))] for s in paced.steps[8:]]
    assert kinds[0] == ["content_block_stop", "content_block_start"]
    assert kinds[1:4] == [["content_block_delta"]] * 3
    assert kinds[4] == ["content_block_stop", "message_delta", "message_stop"]


# ------------------------------------------------------------------ the checks
def test_is_text_event_for_messages():
    def ev(obj: dict) -> SSEEvent:
        return SSEEvent(obj["type"], orjson.dumps(obj).decode())

    delta = {"type": "content_block_delta", "index": 0}
    assert is_text_event("messages", ev({**delta, "delta": {"type": "text_delta", "text": "Hi"}}))
    assert not is_text_event("messages", ev({**delta, "delta": {"type": "text_delta", "text": ""}}))
    assert not is_text_event("messages", ev({**delta, "delta": {"type": "thinking_delta", "thinking": "x"}}))
    assert not is_text_event("messages", ev({**delta, "delta": {"type": "input_json_delta", "partial_json": "{"}}))
    assert not is_text_event("messages", ev({"type": "content_block_start", "index": 0, "content_block": {}}))
    assert not is_text_event("messages", ev({"type": "message_start", "message": {"text_delta": 1}}))


@pytest.mark.parametrize("n", [0, 3, 40])
def test_scan_counts_messages_at_every_split(n):
    data = b"".join(messages_steps("m", n))
    want = len(parse_all(data))
    for cut in range(0, len(data), max(1, len(data) // 97)):
        s = StreamScan("messages", t0=0.0, keep=True)
        s.feed(data[:cut], 1.0)
        s.feed(data[cut:], 2.0)
        s.end(3.0)
        assert s.events == want and s.complete and s.error is None
        assert (s.ttft is not None) == bool(n)
        assert validate_stream("messages", s.kept, n) == []


@pytest.mark.parametrize(
    "data, why",
    [
        (b"".join(messages_steps("m", 2)).rsplit(b"event: message_stop", 1)[0], "no message_stop"),
        (
            b"".join(messages_steps("m", 2))
            + b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"x"}}\n\n',
            "error last",
        ),
        (b'event: error\ndata: {"type":"error","error":{"type":"api_error"}}\n\n', "error only"),
        (b"", "empty"),
    ],
)
def test_scan_incomplete_messages_streams(data, why):
    s = StreamScan("messages")
    s.feed(data, 0.0)
    s.end(0.0)
    assert not s.complete, why


def _drop_type(events, kind, nth=0):
    seen = [i for i, e in enumerate(events) if e.event == kind]
    return events[: seen[nth]] + events[seen[nth] + 1 :]


@pytest.mark.parametrize(
    "mutate, expect",
    [
        (lambda evs: evs[:-1], "message_stop is not the last event"),
        (lambda evs: evs[:3] + evs[4:], "text differs"),
        (lambda evs: [SSEEvent(e.event, e.data.replace(TOOL_CALL_ID, "toolu_other")) for e in evs], "tool call id"),
        (lambda evs: [SSEEvent(e.event, e.data.replace('"shell"', '"bash"')) for e in evs], "tool name"),
        (lambda evs: [e for e in evs if "input_json_delta" not in e.data], "tool arguments"),
        (lambda evs: [e for e in evs if e.event != "message_delta"], "stop_reason None"),
        (
            lambda evs: [SSEEvent(e.event, e.data.replace('"output_tokens":8', '"output_tokens":1')) for e in evs],
            "usage",
        ),
        (lambda evs: _drop_type(evs, "content_block_stop"), "started while block 0 is open"),
        (lambda evs: _drop_type(evs, "content_block_stop", 1), "never stopped"),
        (lambda evs: evs[1:], "message_start"),
        (
            lambda evs: (
                evs[:2] + [SSEEvent("content_block_delta", evs[2].data.replace('"index":0', '"index":1'))] + evs[3:]
            ),
            "delta for block 1",
        ),
        (lambda evs: evs[:2] + [SSEEvent("ping", evs[2].data)] + evs[3:], "event line 'ping'"),
        (
            lambda evs: evs[:-1] + [SSEEvent("error", '{"type":"error","error":{"type":"api_error"}}'), evs[-1]],
            "error event",
        ),
    ],
)
def test_validate_messages_stream_catches(mutate, expect):
    events = parse_all(b"".join(messages_steps("m", 5)))
    assert usage_for(5)[1] == 8
    assert validate_stream("messages", events, 5) == []
    problems = validate_stream("messages", mutate(events), 5)
    assert any(expect in p for p in problems), problems


def test_validate_messages_stream_bridged_ids():
    events = parse_all(b"".join(messages_steps("m", 5)))
    minted = [SSEEvent(e.event, e.data.replace(TOOL_CALL_ID, "toolu_minted")) for e in events]
    assert validate_stream("messages", minted, 5, same_ids=False) == []


def test_build_request_carries_extra_head_lines():
    req = build_request("127.0.0.1", 9, "/v1/messages", b"{}", True, b"anthropic-version: 2023-06-01\r\n")
    head, body = req.split(b"\r\n\r\n", 1)
    assert b"\r\nanthropic-version: 2023-06-01\r\n" in head and b"content-length: 2" in head and body == b"{}"


# ----------------------------------------------------------------- on the wire
@pytest.fixture
async def fake_port():
    server = await serve("127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


@pytest.mark.parametrize("model, n", [("bench-msg-n3", 3), ("bench-msg-n40-d1", 40), ("bench-msg-n0", 0)])
async def test_messages_over_http(fake_port, model, n):
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{fake_port}") as c:
        async with c.stream("POST", "/v1/messages", json={"model": model, "max_tokens": 9, "stream": True}) as r:
            assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
            body = b"".join([b async for b in r.aiter_raw()])
        assert body == b"".join(messages_steps(model, n))
        assert validate_stream("messages", parse_all(body), n) == []
        for _ in range(2):  # the same connection, cached
            r = await c.post("/v1/messages", json={"model": model, "max_tokens": 9})
            assert r.headers["content-length"] == str(len(r.content))
            assert validate_json("messages", r.content, n) == []


async def test_run_load_messages_client(fake_port):
    spec = LoadSpec(
        "127.0.0.1",
        fake_port,
        "/v1/messages",
        "messages",
        orjson.dumps({"model": "b-n30-d0", "max_tokens": 9, "stream": True}),
        True,
        concurrency=3,
        per_worker=4,
        n=30,
    )
    res = await run_load(spec)
    assert res.errors == [] and res.problems == []
    per_stream = len(parse_all(b"".join(messages_steps("m", 30))))
    assert res.ok == 12 and all(r[4] == per_stream and 0 <= r[1] <= r[2] <= r[3] for r in res.records)
    spec.n = 31  # a wrong answer shows up
    assert any("text differs" in p for p in (await run_load(spec)).problems)


# ---------------------------------------------------------------- bench.run
def test_messages_scenarios_config_and_bodies():
    scs = {s.name: s for s in benchrun.scenarios(quick=True)}
    want = {
        "st-msg": ("messages", "messages"),
        "st-msg2chat": ("messages", "chat"),
        "st-resp2msg": ("responses", "messages"),
        "st-chat2msg": ("chat", "messages"),
    }
    for tag, (cl, up) in want.items():
        for c in (1, 8):
            s = scs[f"{tag}-c{c}"]
            assert (s.client, s.upstream, s.n, s.delay_ms, s.concurrency, s.stream) == (cl, up, 200, 0, c, True)
    for tag in ("msg2chat", "resp2msg"):  # paced as the other rt- rows
        rt, plain = scs[f"rt-{tag}"], scs["rt-resp2chat"]
        assert (rt.kind, rt.delay_ms, rt.concurrency, rt.per_worker) == ("rt", 5, 4, plain.per_worker)
    assert "rt-msg" not in scs and "rt-chat2msg" not in scs
    cfg = benchrun.proxy_config(4321, list(scs.values()))
    provs = {p["name"]: p for p in cfg["providers"]}
    assert provs["fake-msg"]["protocol"] == "messages" and provs["fake-msg"]["base_url"].endswith("/v1")
    by_name = {m["name"]: m["provider"] for m in cfg["models"]}
    assert by_name[scs["st-msg-c1"].model] == by_name[scs["st-chat2msg-c1"].model] == "fake-msg"
    assert by_name[scs["st-msg2chat-c1"].model] == "fake-chat"
    body = orjson.loads(benchrun.request_body(scs["st-msg-c1"]))
    assert body["max_tokens"] > 0 and body["stream"] is True and body["messages"][0]["role"] == "user"
    assert body["tools"][0]["name"] == TOOL_NAME and "input_schema" in body["tools"][0]
    assert benchrun.PATHS["messages"] == "/v1/messages"


def _row(sc, side, **kw):
    row = {m: None for m in benchrun.METRICS}
    row.update({"type": "sample", "scenario": sc, "side": side, "round": 0, "errors": 0, "requests": 9, "problems": []})
    row.update(kw)
    return row


def test_messages_targets():
    samples = [
        _row("st-msg-c8", "switchboard", proxy_events_per_cpu_s=40000.0),
        _row("st-msg2chat-c8", "switchboard", proxy_events_per_cpu_s=40000.0),
        _row("st-resp2msg-c1", "direct", ttfb_p50_ms=0.1, ttfb_p99_ms=0.2),
        _row("st-resp2msg-c1", "switchboard", ttfb_p50_ms=0.4, ttfb_p99_ms=2.0),
        _row("rt-msg2chat", "direct", lat_p50_ms=1000.0),
        _row("rt-msg2chat", "switchboard", lat_p50_ms=1005.0),
    ]
    summ = {(x["scenario"], x["side"]): x for x in benchrun.summarize(samples)}
    T = {t["target"]: t for t in benchrun.targets(summ, {})}
    assert T["same-protocol: events/s per proxy core (msg)"]["pass"] is False  # ≥ 50,000
    assert T["bridged: events/s per proxy core (msg2chat)"]["pass"] is True  # ≥ 25,000
    assert T["bridged: events/s per proxy core (chat2msg)"]["pass"] is None  # not measured
    assert T["stream, c=1: added TTFB p50 (resp2msg)"]["value"] == pytest.approx(0.3)
    assert T["stream, c=1: added TTFB p50 (resp2msg)"]["pass"] is True
    assert T["stream, c=1: added TTFB p99 (resp2msg)"]["pass"] is False
    assert T["realistic (5 ms/chunk): stream time vs direct (msg2chat)"]["value"] == pytest.approx(1.005)
    assert T["realistic (5 ms/chunk): stream time vs direct (msg2chat)"]["pass"] is True
    for tag in ("msg", "msg2chat", "chat2msg"):
        assert f"stream, c=1: added TTFB p50 ({tag})" in T
    assert "realistic (5 ms/chunk): stream time vs direct (resp2msg)" in T
