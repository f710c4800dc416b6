"""The bench's Gemini side: the fake upstream's answers in Gemini's own API (on the wire and
as built), the load generator's Gemini client (SSE counting, TTFT mark, stream end, full
checks) and the Gemini scenarios, targets and config of ``bench.run``.

Correctness only (no timing assertion).
"""

from __future__ import annotations

import httpx
import orjson
import pytest

from bench import run as benchrun
from bench.fake_upstream import (
    GEMINI_SIGNATURE,
    KEY,
    PROMPT_TOKENS,
    TOOL_ARGS,
    TOOL_NAME,
    answer_for,
    expected_text,
    gemini_json,
    gemini_steps,
    serve,
    tool_args,
    usage_for,
)
from bench.loadgen import LoadSpec, StreamScan, is_text_event, run_load, validate_json, validate_stream
from transformers.sse import SSEEvent, SSEParser


def parse_all(data: bytes) -> list[SSEEvent]:
    p = SSEParser()
    return p.feed(data) + p.end()


def objs(events: list[SSEEvent]) -> list[dict]:
    return [orjson.loads(e.data) for e in events]


def parts(obj: dict) -> list[dict]:
    return obj["candidates"][0]["content"]["parts"]


# ------------------------------------------------------------- the fake's answers
@pytest.mark.parametrize("n", [0, 1, 5, 200])
def test_gemini_stream_shape(n):
    steps = gemini_steps("m", n)
    # the head alone, a chunk per text part, the call's with the finish: the others' timeline
    assert len(steps) == n + 2 and steps[0] == b""
    events = parse_all(b"".join(steps))
    assert len(events) == n + 1 and all(e.event is None for e in events)  # bare data: lines
    o = objs(events)
    assert "".join(parts(x)[0]["text"] for x in o[:n]) == expected_text(n)
    assert all(
        x["usageMetadata"] == {"promptTokenCount": PROMPT_TOKENS, "totalTokenCount": PROMPT_TOKENS} for x in o[:n]
    )
    assert all("finishReason" not in x["candidates"][0] for x in o[:n])
    last = o[-1]
    assert parts(last) == [
        {"functionCall": {"name": TOOL_NAME, "args": orjson.loads(TOOL_ARGS)}, "thoughtSignature": GEMINI_SIGNATURE}
    ]
    assert last["candidates"][0]["finishReason"] == "STOP"
    inp, out, total = usage_for(n)
    assert last["usageMetadata"] == {"promptTokenCount": inp, "candidatesTokenCount": out, "totalTokenCount": total}
    assert {x["modelVersion"] for x in o} == {"m"} and len({x["responseId"] for x in o}) == 1
    assert validate_stream("gemini", events, n) == []


def test_gemini_json_validates():
    obj = gemini_json("m", 9)
    assert [list(p) for p in parts(obj)] == [["text"], ["functionCall", "thoughtSignature"]]
    assert validate_json("gemini", orjson.dumps(obj), 9) == []
    unsigned = orjson.loads(orjson.dumps(obj))
    del parts(unsigned)[1]["thoughtSignature"]
    assert any("thoughtSignature" in p for p in validate_json("gemini", orjson.dumps(unsigned), 9))
    assert validate_json("gemini", orjson.dumps(unsigned), 9, same_ids=False) == []
    sealed = orjson.loads(orjson.dumps(obj))
    parts(sealed)[1]["thoughtSignature"] = "pxy1.sealed-by-the-proxy"
    assert validate_json("gemini", orjson.dumps(sealed), 9) == []
    assert any("text differs" in p for p in validate_json("gemini", orjson.dumps(obj), 8))
    err = orjson.dumps({"error": {"code": 500, "message": "x", "status": "INTERNAL"}})
    assert any("error chunk" in p for p in validate_json("gemini", err, 9))


def test_gemini_think_and_args():
    events = parse_all(b"".join(gemini_steps("m-n3-think4", 3)))
    assert len(events) == 4 + 3 + 1
    o = objs(events)
    assert all(parts(x)[0]["thought"] is True for x in o[:4])
    assert "".join(parts(x)[0]["text"] for x in o[:4]) == expected_text(4)
    assert validate_stream("gemini", events, 3, reasoning=4) == []
    assert any("reasoning differs" in p for p in validate_stream("gemini", events, 3, reasoning=3))
    events = parse_all(b"".join(gemini_steps("m-n3-args9", 3)))
    assert parts(objs(events)[-1])[0]["functionCall"]["args"] == orjson.loads(tool_args(9))
    assert validate_stream("gemini", events, 3, args=9) == []
    whole = gemini_json("m-n3-think4", 3)
    assert parts(whole)[0] == {"text": expected_text(4), "thought": True}


def test_gemini_paced_answer_steps():
    # step 0 is the head alone (no empty chunk: it would end the body), the text from step 1
    a = answer_for("gemini", "m-n3-d5", True)
    assert a.steps is not None and len(a.steps) == 5 and a.delay == 0.005
    assert a.steps[0].startswith(b"HTTP/1.1 200 OK\r\n") and a.steps[0].endswith(b"\r\n\r\n")
    assert b"data: " not in a.steps[0] and a.steps[1].startswith(b"%x\r\ndata: " % (len(gemini_steps("m-n3-d5", 3)[1])))
    assert a.whole == b"".join(a.steps) and a.whole.endswith(b"\r\n0\r\n\r\n")
    # ``pt`` paces the other protocols' tail; Gemini's is one chunk, left as it is
    assert len(answer_for("gemini", "m-n3-d5-pt", True).steps) == len(a.steps)


def test_is_text_event_for_gemini():
    def ev(p: list[dict]) -> SSEEvent:
        return SSEEvent(None, orjson.dumps({"candidates": [{"content": {"parts": p, "role": "model"}}]}).decode())

    assert is_text_event("gemini", ev([{"text": "a"}]))
    assert not is_text_event("gemini", ev([{"text": ""}]))
    assert not is_text_event("gemini", ev([{"text": "a", "thought": True}]))
    assert is_text_event("gemini", ev([{"text": "a", "thought": True}, {"text": "b"}]))
    assert not is_text_event("gemini", ev([{"functionCall": {"name": "text"}}]))
    assert not is_text_event("gemini", SSEEvent(None, '{"text": not json'))
    assert not is_text_event("gemini", SSEEvent(None, '{"candidates": "text"}'))


@pytest.mark.parametrize("n", [0, 3, 40])
def test_scan_counts_gemini_at_every_split(n):
    data = b"".join(gemini_steps("m", n))
    want = len(parse_all(data))
    for cut in range(0, len(data), max(1, len(data) // 97)):
        s = StreamScan("gemini", t0=0.0, keep=True)
        s.feed(data[:cut], 1.0)
        s.feed(data[cut:], 2.0)
        s.end(3.0)
        assert s.events == want and s.complete and s.error is None
        assert (s.ttft is not None) == bool(n)
        assert validate_stream("gemini", s.kept, n) == []


@pytest.mark.parametrize(
    "data, why",
    [
        (b"".join(gemini_steps("m", 2)[:-1]), "no finishReason"),
        (
            b"".join(gemini_steps("m", 2)) + b'data: {"error":{"code":500,"message":"x","status":"INTERNAL"}}\n\n',
            "error last",
        ),
        (b'data: {"error":{"code":429,"message":"x","status":"RESOURCE_EXHAUSTED"}}\n\n', "error only"),
        (b"", "empty"),
    ],
)
def test_scan_incomplete_gemini_streams(data, why):
    s = StreamScan("gemini")
    s.feed(data, 0.0)
    s.end(0.0)
    assert not s.complete, why


@pytest.mark.parametrize(
    "mutate, expect",
    [
        (lambda evs: evs[:-1], "functionCall parts"),
        (lambda evs: evs[:2] + evs[3:], "text differs"),
        (lambda evs: [SSEEvent(e.event, e.data.replace('"shell"', '"bash"')) for e in evs], "functionCall"),
        (lambda evs: [SSEEvent(e.event, e.data.replace('"-la"', '"-l"')) for e in evs], "functionCall"),
        (lambda evs: [SSEEvent(e.event, e.data.replace(GEMINI_SIGNATURE, "other")) for e in evs], "thoughtSignature"),
        (lambda evs: [SSEEvent(e.event, e.data.replace('"STOP"', '"MAX_TOKENS"')) for e in evs], "finishReason"),
        (lambda evs: evs[:1] + evs, "text differs"),
        (lambda evs: evs + evs[-1:], "2 chunks with one"),
        (
            lambda evs: [
                SSEEvent(e.event, e.data.replace('"candidatesTokenCount":8', '"candidatesTokenCount":1')) for e in evs
            ],
            "usageMetadata",
        ),
        (lambda evs: evs[:-1] + [SSEEvent(None, '{"error":{"code":500}}'), evs[-1]], "error chunk"),
        (lambda evs: evs[:1] + [SSEEvent(None, "[DONE]")] + evs[1:], "not JSON"),
    ],
)
def test_validate_gemini_stream_catches(mutate, expect):
    events = parse_all(b"".join(gemini_steps("m", 5)))
    assert usage_for(5)[1] == 8
    assert validate_stream("gemini", events, 5) == []
    problems = validate_stream("gemini", mutate(events), 5)
    assert any(expect in p for p in problems), problems


def test_validate_gemini_stream_bridged_and_sealed_signatures():
    events = parse_all(b"".join(gemini_steps("m", 5)))
    gone = [SSEEvent(e.event, e.data.replace(f',"thoughtSignature":"{GEMINI_SIGNATURE}"', "")) for e in events]
    assert gone != events
    assert any("thoughtSignature None" in p for p in validate_stream("gemini", gone, 5))
    assert validate_stream("gemini", gone, 5, same_ids=False) == []  # a bridge has none to give
    sealed = [SSEEvent(e.event, e.data.replace(GEMINI_SIGNATURE, "pxy1.abc")) for e in events]
    assert validate_stream("gemini", sealed, 5) == []  # the proxy's envelope, the upstream's inside


# ----------------------------------------------------------------- on the wire
@pytest.fixture
async def fake_port():
    server = await serve("127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


@pytest.mark.parametrize("model, n", [("bench-gem-n3", 3), ("bench-gem-n40-d1", 40), ("bench-chat-n0", 0)])
async def test_gemini_over_http(fake_port, model, n):
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    head = {"x-goog-api-key": "anything"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{fake_port}", headers=head) as c:
        for prefix in ("/v1beta", "/v1"):  # Gemini's own, and the proxy's base_url + /models/…
            url = f"{prefix}/models/{model}:streamGenerateContent?alt=sse"
            async with c.stream("POST", url, json=body) as r:
                assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
                raw = b"".join([b async for b in r.aiter_raw()])
            assert raw == b"".join(gemini_steps(model, n))
            assert validate_stream("gemini", parse_all(raw), n) == []
        for _ in range(2):  # the same connection, cached
            r = await c.post(f"/v1beta/models/{model}:generateContent", json=body)
            assert r.headers["content-length"] == str(len(r.content))
            assert validate_json("gemini", r.content, n) == []
        r = await c.post(f"/v1beta/models/{model}:generateContent", content=b"[1]")
        assert r.status_code == 400
        r = await c.post(f"/v1beta/models/{model}:embedContent", json=body)
        assert r.status_code == 404


async def test_run_load_gemini_client(fake_port):
    spec = LoadSpec(
        "127.0.0.1",
        fake_port,
        "/v1beta/models/b-n30-d0:streamGenerateContent?alt=sse",
        "gemini",
        orjson.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
        True,
        concurrency=3,
        per_worker=4,
        n=30,
    )
    res = await run_load(spec)
    assert res.errors == [] and res.problems == []
    assert res.ok == 12 and all(r[4] == 31 and 0 <= r[1] <= r[2] <= r[3] for r in res.records)
    spec.n = 31  # a wrong answer shows up
    assert any("text differs" in p for p in (await run_load(spec)).problems)
    spec.n, spec.stream, spec.path = 30, False, "/v1beta/models/b-n30-d0:generateContent"
    res = await run_load(spec)
    assert res.errors == [] and res.problems == [] and res.ok == 12


def test_gemini_request_carries_its_key():
    from bench.loadgen import EXTRA_HEAD, build_request

    req = build_request("127.0.0.1", 9, "/v1beta/models/m:generateContent", b"{}", False, EXTRA_HEAD["gemini"])
    assert f"\r\nx-goog-api-key: {KEY}\r\n".encode() in req.split(b"\r\n\r\n", 1)[0]


# ---------------------------------------------------------------- bench.run
def test_gemini_scenarios_config_and_bodies():
    scs = {s.name: s for s in benchrun.scenarios(quick=True)}
    want = {"gem": ("gemini", "gemini"), "gem2chat": ("gemini", "chat"), "chat2gem": ("chat", "gemini")}
    for tag, (cl, up) in want.items():
        for c in (1, 8):
            s = scs[f"st-{tag}-c{c}"]
            assert (s.client, s.upstream, s.n, s.delay_ms, s.concurrency, s.stream) == (cl, up, 200, 0, c, True)
        s = scs[f"ns-{tag}-c1"]
        assert (s.client, s.upstream, s.n, s.concurrency, s.stream) == (cl, up, 20, 1, False)
    for tag in ("gem2chat", "chat2gem"):  # paced as the other rt- rows
        rt, plain = scs[f"rt-{tag}"], scs["rt-resp2chat"]
        assert (rt.kind, rt.delay_ms, rt.concurrency, rt.per_worker) == ("rt", 5, 4, plain.per_worker)
    assert "rt-gem" not in scs
    # a Gemini client names the model and the stream in the path, direct and through the proxy
    assert benchrun.client_path(scs["st-gem-c1"]) == "/v1beta/models/bench-gem-n200-d0:streamGenerateContent?alt=sse"
    assert benchrun.client_path(scs["ns-gem2chat-c1"]) == "/v1beta/models/bench-chat-n20-d0:generateContent"
    assert benchrun.client_path(scs["st-chat2gem-c1"]) == "/v1/chat/completions"
    cfg = benchrun.proxy_config(4321, list(scs.values()))
    provs = {p["name"]: p for p in cfg["providers"]}
    assert provs["fake-gem"]["protocol"] == "gemini" and provs["fake-gem"]["profile"] == "gemini"
    by_name = {m["name"]: m["provider"] for m in cfg["models"]}
    assert by_name[scs["st-gem-c1"].model] == by_name[scs["st-chat2gem-c1"].model] == "fake-gem"
    assert by_name[scs["st-gem2chat-c1"].model] == "fake-chat"
    body = orjson.loads(benchrun.request_body(scs["st-gem-c1"]))
    assert "model" not in body and "stream" not in body and body["contents"][0]["role"] == "user"
    assert body["tools"][0]["functionDeclarations"][0]["name"] == TOOL_NAME


def _row(sc, side, **kw):
    row = {m: None for m in benchrun.METRICS}
    row.update({"type": "sample", "scenario": sc, "side": side, "round": 0, "errors": 0, "requests": 9, "problems": []})
    row.update(kw)
    return row


def test_gemini_targets():
    samples = [
        _row("st-gem-c8", "switchboard", proxy_events_per_cpu_s=40000.0),
        _row("st-gem2chat-c8", "switchboard", proxy_events_per_cpu_s=40000.0),
        _row("st-chat2gem-c1", "direct", ttfb_p50_ms=0.1, ttfb_p99_ms=0.2),
        _row("st-chat2gem-c1", "switchboard", ttfb_p50_ms=0.4, ttfb_p99_ms=2.0),
        _row("rt-gem2chat", "direct", lat_p50_ms=1000.0),
        _row("rt-gem2chat", "switchboard", lat_p50_ms=1005.0),
        _row("ns-gem-c1", "direct", lat_p50_ms=0.05, lat_p99_ms=0.2),
        _row("ns-gem-c1", "switchboard", lat_p50_ms=0.5, lat_p99_ms=1.0, proxy_cpu_ms_per_req=0.6),
    ]
    summ = {(x["scenario"], x["side"]): x for x in benchrun.summarize(samples)}
    T = {t["target"]: t for t in benchrun.targets(summ, {})}
    assert T["same-protocol: events/s per proxy core (gem)"]["pass"] is False  # ≥ 50,000
    assert T["bridged: events/s per proxy core (gem2chat)"]["pass"] is True  # ≥ 25,000
    assert T["bridged: events/s per proxy core (chat2gem)"]["pass"] is None  # not measured
    assert T["stream, c=1: added TTFB p50 (chat2gem)"]["value"] == pytest.approx(0.3)
    assert T["stream, c=1: added TTFB p50 (chat2gem)"]["pass"] is True
    assert T["stream, c=1: added TTFB p99 (chat2gem)"]["pass"] is False
    assert T["realistic (5 ms/chunk): stream time vs direct (gem2chat)"]["pass"] is True
    assert T["non-streaming, c=1: added latency p50 (gem)"]["value"] == pytest.approx(0.45)
    assert T["non-streaming, c=1: added latency p50 (gem)"]["pass"] is True
    assert T["non-streaming, c=1: added latency p99 (gem)"]["pass"] is True
    assert T["non-streaming, c=1: proxy CPU per request (gem)"]["pass"] is False  # ≤ 0.5 ms
    for tag in ("gem", "gem2chat", "chat2gem"):
        assert f"stream, c=1: added TTFB p50 ({tag})" in T
        assert f"non-streaming, c=1: added latency p99 ({tag})" in T
    assert "realistic (5 ms/chunk): stream time vs direct (chat2gem)" in T
