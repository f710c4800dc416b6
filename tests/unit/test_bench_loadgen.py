"""The bench's load generator and report code: SSE counting, TTFT mark, stream endings,
full-answer checks, percentiles, HTTP client against the fake upstream, /proc readers,
target arithmetic.  Correctness only: no timing assertion."""

from __future__ import annotations

import os

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import run as benchrun
from bench.fake_upstream import TOOL_CALL_ID, chat_steps, responses_steps, serve
from bench.loadgen import (
    LoadSpec,
    StreamScan,
    build_request,
    event_type,
    is_text_event,
    percentile,
    run_load,
    validate_json,
    validate_stream,
)
from transformers.sse import SSEEvent, SSEParser


def body_for(proto: str, n: int) -> bytes:
    return b"".join(chat_steps("m", n) if proto == "chat" else responses_steps("m", n))


def parse_all(data: bytes):
    p = SSEParser()
    return p.feed(data) + p.end()


# ---------------------------------------------------------------- text-event mark
@pytest.mark.parametrize(
    "proto, ev, want",
    [
        ("chat", SSEEvent(None, '{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'), False),
        ("chat", SSEEvent(None, '{"choices":[{"index":0,"delta":{"content":"Hi"}}]}'), True),
        ("chat", SSEEvent(None, '{"choices":[{"index":0,"delta":{"reasoning_content":"x"}}]}'), False),
        ("chat", SSEEvent(None, '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]}}]}'), False),
        ("chat", SSEEvent(None, '{"choices":[],"usage":{"total_tokens":3}}'), False),
        ("chat", SSEEvent(None, "[DONE]"), False),
        (
            "responses",
            SSEEvent("response.output_text.delta", '{"type":"response.output_text.delta","delta":"a"}'),
            True,
        ),
        ("responses", SSEEvent(None, '{"type":"response.output_text.delta","delta":"a"}'), True),
        ("responses", SSEEvent("response.created", '{"type":"response.created"}'), False),
        ("responses", SSEEvent(None, '{"type":"response.reasoning_summary_text.delta","delta":"a"}'), False),
        ("responses", SSEEvent(None, "[DONE]"), False),
    ],
)
def test_is_text_event(proto, ev, want):
    assert is_text_event(proto, ev) is want


def test_event_type_prefers_event_line_then_json():
    assert event_type(SSEEvent("a", '{"type":"b"}')) == "a"
    assert event_type(SSEEvent(None, '{"type":"b"}')) == "b"
    assert event_type(SSEEvent(None, "[DONE]")) is None
    assert event_type(SSEEvent(None, '{"type": 3}')) is None


# ------------------------------------------------------------------- StreamScan
@pytest.mark.parametrize("proto", ["chat", "responses"])
@pytest.mark.parametrize("n", [0, 3, 40])
def test_scan_counts_like_sseparser_at_every_split(proto, n):
    data = body_for(proto, n)
    want = len(parse_all(data))
    for cut in range(0, len(data), max(1, len(data) // 97)):
        s = StreamScan(proto)
        s.feed(data[:cut], 1.0)
        s.feed(data[cut:], 2.0)
        s.end(3.0)
        assert s.events == want
        assert s.complete
        assert s.error is None
        if n:
            assert s.ttft is not None
        else:
            assert s.ttft is None  # no text at all: no TTFT


@settings(max_examples=60, deadline=None)
@given(proto=st.sampled_from(["chat", "responses"]), cuts=st.lists(st.integers(0, 10_000), max_size=30))
def test_scan_any_chunking(proto, cuts):
    data = body_for(proto, 12)
    points = sorted({c % (len(data) + 1) for c in cuts})
    parts, prev = [], 0
    for p in points:
        parts.append(data[prev:p])
        prev = p
    parts.append(data[prev:])
    s = StreamScan(proto, keep=True)
    for i, part in enumerate(parts):
        s.feed(part, float(i))
    s.end(99.0)
    assert s.events == len(parse_all(data))
    assert s.complete
    assert validate_stream(proto, s.kept, 12) == []


def test_scan_ttft_is_time_of_first_text_event():
    data = body_for("chat", 3)
    first_text = data.index(b'"content":" The"')
    s = StreamScan("chat", t0=10.0)
    s.feed(data[:first_text], 11.0)  # role chunk only
    assert s.ttft is None
    s.feed(data[first_text:], 12.5)
    assert s.ttft == pytest.approx(2.5)


@pytest.mark.parametrize(
    "proto, data, why",
    [
        ("chat", b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n', "no [DONE]"),
        ("chat", b'data: {"error":{"message":"boom","type":"server_error"}}\n\ndata: [DONE]\n\n', "error chunk"),
        ("responses", b'event: response.created\ndata: {"type":"response.created"}\n\n', "no completed"),
        (
            "responses",
            b'event: response.failed\ndata: {"type":"response.failed"}\n\n'
            b'event: response.completed\ndata: {"type":"response.completed"}\n\n',
            "failed seen",
        ),
        ("responses", b"", "empty"),
    ],
)
def test_scan_incomplete_streams(proto, data, why):
    s = StreamScan(proto)
    s.feed(data, 0.0)
    s.end(0.0)
    assert not s.complete, why


def test_scan_ignores_keepalive_comments():
    s = StreamScan("chat")
    s.feed(b": keep-alive\n\n" + body_for("chat", 2) + b": ping\n\n", 0.0)
    s.end(0.0)
    assert s.events == len(parse_all(body_for("chat", 2)))


# ------------------------------------------------------------- answer checks
def _drop(events, pred):
    return [e for e in events if not pred(e)]


@pytest.mark.parametrize(
    "proto, mutate, expect",
    [
        ("chat", lambda evs: evs[:-1], "no final [DONE]"),
        ("chat", lambda evs: evs[:2] + evs[3:], "text differs"),
        (
            "chat",
            lambda evs: [SSEEvent(e.event, e.data.replace(TOOL_CALL_ID, "call_other")) for e in evs],
            "tool call id",
        ),
        ("chat", lambda evs: _drop(evs, lambda e: '"usage"' in e.data), "usage"),
        ("chat", lambda evs: _drop(evs, lambda e: '"finish_reason":"tool_calls"' in e.data), "finish_reason"),
        ("responses", lambda evs: evs[:-1], "no response.completed"),
        (
            "responses",
            lambda evs: _drop(evs, lambda e: e.event == "response.function_call_arguments.delta"),
            "argument deltas",
        ),
        (
            "responses",
            lambda evs: [SSEEvent(e.event, e.data.replace(TOOL_CALL_ID, "call_other")) for e in evs],
            "call_id",
        ),
        ("responses", lambda evs: evs[:5] + evs[6:], "text differs"),
    ],
)
def test_validate_stream_catches(proto, mutate, expect):
    events = parse_all(body_for(proto, 5))
    assert validate_stream(proto, events, 5) == []
    problems = validate_stream(proto, mutate(events), 5)
    assert any(expect in p for p in problems), problems


@pytest.mark.parametrize("proto", ["chat", "responses"])
def test_validate_stream_bridged_ids(proto):
    events = [SSEEvent(e.event, e.data.replace(TOOL_CALL_ID, "call_minted")) for e in parse_all(body_for(proto, 5))]
    assert validate_stream(proto, events, 5, same_ids=False) == []


def test_validate_json_catches():
    good = {"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]}
    problems = validate_json("chat", orjson.dumps(good), 1)
    assert "content differs" in problems
    assert validate_json("chat", b"<html>", 1)[0].startswith("body is not JSON")


# ------------------------------------------------------------------ percentiles
@pytest.mark.parametrize(
    "values, p, want",
    [
        ([], 50, None),
        ([7.0], 50, 7.0),
        ([7.0], 99, 7.0),
        (list(range(1, 101)), 50, 50),
        (list(range(1, 101)), 99, 99),
        (list(range(1, 101)), 100, 100),
        (list(range(1, 101)), 0, 1),
        ([3, 1, 2], 50, 2),
        ([1, 2, 3, 4], 50, 2),
        ([1, 2, 3, 4], 99, 4),
    ],
)
def test_percentile(values, p, want):
    assert percentile(values, p) == want


def test_build_request():
    req = build_request("127.0.0.1", 9, "/v1/responses", b'{"a":1}', True)
    head, body = req.split(b"\r\n\r\n", 1)
    assert head.startswith(b"POST /v1/responses HTTP/1.1\r\n")
    assert b"content-length: 7" in head
    assert b"accept: text/event-stream" in head
    assert body == b'{"a":1}'


# ----------------------------------------------------- client against the fake
@pytest.fixture
async def fake_port():
    server = await serve("127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


@pytest.mark.parametrize("proto, path", [("chat", "/v1/chat/completions"), ("responses", "/v1/responses")])
async def test_run_load_streams(fake_port, proto, path):
    n = 30
    spec = LoadSpec(
        "127.0.0.1",
        fake_port,
        path,
        proto,
        orjson.dumps({"model": f"b-n{n}-d0", "stream": True}),
        True,
        concurrency=3,
        per_worker=4,
        n=n,
    )
    res = await run_load(spec)
    assert res.errors == [] and res.problems == []
    assert len(res.records) == 12 and res.ok == 12
    per_stream = len(parse_all(body_for(proto, n)))
    for _sent, ttfb, ttft, total, events, ok in res.records:
        assert ok and events == per_stream
        assert 0 <= ttfb <= ttft <= total
    assert res.events == 12 * per_stream


class _ThisProcess:
    pid = os.getpid()  # the fake upstream runs in the test's process here


@pytest.mark.parametrize("pacing", ["pt", ""])
async def test_a_paced_sample_keeps_each_stream_s_ttft_in_send_order(fake_port, pacing):
    sc = benchrun.Scenario("t", "t", "rt", "chat", "chat", True, 3, 2, 2, None, 2, pacing=pacing)
    row = await benchrun.measure(sc, "direct", fake_port, None, _ThisProcess(), 0, fake_port)  # type: ignore[arg-type]
    assert row["requests"] == 4 and row["errors"] == 0
    if not pacing:
        assert "ttft_ms_in_send_order" not in row
        return
    ttfts = row["ttft_ms_in_send_order"]
    # every stream's, in ms: the first text waits for the fake upstream's first 2 ms step
    assert len(ttfts) == 4 and all(2.0 <= t < 1000 for t in ttfts)
    # kept to the microsecond; the p50 of four falls between the middle two
    assert sorted(ttfts)[1] - 0.001 <= row["ttft_p50_ms"] <= sorted(ttfts)[2] + 0.001


async def test_run_load_json_and_duration(fake_port):
    spec = LoadSpec(
        "127.0.0.1",
        fake_port,
        "/v1/chat/completions",
        "chat",
        orjson.dumps({"model": "b-n5", "stream": False}),
        False,
        concurrency=2,
        duration=0.05,
        n=5,
    )
    res = await run_load(spec)
    assert res.errors == [] and res.problems == []
    assert res.ok == len(res.records) >= 2
    assert all(r[2] is None and r[4] == 0 for r in res.records)


async def test_run_load_reports_http_errors(fake_port):
    spec = LoadSpec(
        "127.0.0.1", fake_port, "/v1/nothing", "chat", b"{}", True, concurrency=1, per_worker=2, validate=False
    )
    res = await run_load(spec)
    assert res.ok == 0 and len(res.records) == 2
    assert res.errors[0].startswith("HTTP 404")


async def test_run_load_wrong_answer_is_reported(fake_port):
    # the fake sends 7 chunks, the check expects 8: a wrong proxy answer must show up
    spec = LoadSpec(
        "127.0.0.1",
        fake_port,
        "/v1/responses",
        "responses",
        orjson.dumps({"model": "b-n7", "stream": True}),
        True,
        concurrency=1,
        per_worker=1,
        n=8,
    )
    res = await run_load(spec)
    assert res.ok == 1
    assert any("text differs" in p for p in res.problems)


# ------------------------------------------------------------- run.py pieces
def test_proc_readers_on_self():
    pid = os.getpid()
    assert pid in benchrun.proc_children(pid)
    assert benchrun.cpu_seconds([pid]) >= 0
    rss, hwm = benchrun.mem_kb([pid])
    assert 0 < rss <= hwm


def test_cpu_stat_keeps_steal_apart_from_busy(tmp_path):
    # user nice system idle iowait irq softirq steal guest guest_nice, in ticks
    stat = tmp_path / "stat"
    stat.write_bytes(
        b"cpu  300 0 100 900 50 0 20 70 0 0\n"
        b"cpu0 100 0 40 500 20 0 10 60 0 0\n"
        b"cpu1 200 0 60 400 30 0 10 10 0 0\n"
        b"intr 12345 0 0\n"
    )
    busy, steal = benchrun.cpu_stat(str(stat))
    # busy: user + system + softirq, neither idle, iowait nor steal
    assert busy == pytest.approx(420 / benchrun.CLK_TCK)
    assert steal == [pytest.approx(60 / benchrun.CLK_TCK), pytest.approx(10 / benchrun.CLK_TCK)]
    assert benchrun.cpu_stat(str(tmp_path / "absent")) == (0.0, [])
    busy, steal = benchrun.cpu_stat()  # this machine's own
    assert busy > 0 and len(steal) == os.cpu_count() and all(x >= 0 for x in steal)


def test_proxy_config_routes_models_to_protocols():
    scs = benchrun.scenarios(quick=True)
    cfg = benchrun.proxy_config(4321, scs)
    provs = {p["name"]: p for p in cfg["providers"]}
    assert {p["protocol"] for p in provs.values()} == {"chat", "responses", "messages", "gemini"}
    assert all(
        p["profile"] == ("gemini" if p["protocol"] == "gemini" else "openai-compatible")
        and p["base_url"] == "http://127.0.0.1:4321/v1"
        for p in provs.values()
    )
    by_name = {m["name"]: m["provider"] for m in cfg["models"]}
    for s in scs:
        assert provs[by_name[s.model]]["protocol"] == s.upstream
    assert "auth" not in cfg


def test_scenarios_cover_the_issue():
    names = {s.name for s in benchrun.scenarios(quick=True)}
    assert {"ns-chat-c1", "ns-chat-c16", "ns-chat-c64", "mem-512"} <= names
    for tag in ("chat", "resp", "resp2chat", "chat2resp"):
        assert {f"st-{tag}-c1", f"st-{tag}-c8", f"rt-{tag}"} <= names
    mem = next(s for s in benchrun.scenarios(quick=True) if s.name == "mem-512")
    assert mem.concurrency == 512 and mem.delay_ms > 0
    # the floor: the same requests as ns-chat-c1 and st-chat-c1 through the reference forwarder
    scs = {s.name: s for s in benchrun.scenarios(quick=True)}
    for name in ("ns-chat-c1", "st-chat-c1", "pace-chat"):
        ref = scs[f"ref-{name}"]
        assert ref.reference and ref.model == scs[name].model and ref.concurrency == scs[name].concurrency
    assert scs["pace-chat"].pacing == scs["pace-resp2chat"].pacing == "pt" and not scs["pace-chat"].reference
    # the 4 paced streams' requests, one stream at a time, twice as many in a row as each of their clients sends
    one, four = scs["pace1-resp2chat"], scs["pace-resp2chat"]
    assert (one.model, one.client, one.concurrency) == (four.model, four.client, 1)
    assert one.per_worker == 2 * four.per_worker and not (one.reference or one.relay)


def _sample(sc, side, rnd, **kw):
    row = {m: None for m in benchrun.METRICS}
    row.update(
        {"type": "sample", "scenario": sc, "side": side, "round": rnd, "errors": 0, "requests": 10, "problems": []}
    )
    row.update(kw)
    return row


def test_summary_and_targets():
    samples = [
        _sample("ns-chat-c1", "direct", 0, lat_p50_ms=0.10),
        _sample("ns-chat-c1", "switchboard", 0, lat_p50_ms=0.60),
        _sample("ns-chat-c1", "direct", 1, lat_p50_ms=0.30),
        _sample("ns-chat-c1", "switchboard", 1, lat_p50_ms=0.90),
        _sample("ns-chat-c1", "direct", 2, lat_p50_ms=0.20),
        _sample("ns-chat-c1", "switchboard", 2, lat_p50_ms=2.00),
        _sample("st-chat-c8", "switchboard", 0, proxy_events_per_cpu_s=40000.0),
        _sample("rt-chat", "direct", 0, lat_p50_ms=1000.0),
        _sample("rt-chat", "switchboard", 0, lat_p50_ms=1020.0),
        _sample("mem-512", "switchboard", 0, proxy_hwm_mb=150.0, errors=1),
        _sample("pace-resp2chat", "direct", 0, lat_p50_ms=1030.0, ttft_p50_ms=5.0),
        _sample("pace-resp2chat", "switchboard", 0, lat_p50_ms=1035.0, ttft_p50_ms=6.5),
        _sample("wk1-ns-chat-c32", "switchboard", 0, req_s=1000.0, proxy_core_pct=98.0, proxy_cpu_ms_per_req=0.5),
        _sample("wk2-ns-chat-c32", "switchboard", 0, req_s=1800.0, proxy_core_pct=176.0, proxy_cpu_ms_per_req=0.55),
        _sample("ns-chat-c1", "switchboard", 3, proxy_cpu_ms_per_req=0.4),
        _sample("ref-ns-chat-c1", "direct", 0),
        _sample("ref-ns-chat-c1", "switchboard", 0, proxy_cpu_ms_per_req=0.5),
        _sample("ref-pace-chat", "direct", 0, ttft_p50_ms=5.0),
        _sample("ref-pace-chat", "switchboard", 0, ttft_p50_ms=7.0),
        _sample("pace1-resp2chat", "direct", 0, ttft_p50_ms=5.25),
        _sample("pace1-resp2chat", "switchboard", 0, ttft_p50_ms=6.0),
    ]
    summ = {(x["scenario"], x["side"]): x for x in benchrun.summarize(samples)}
    s = summ[("ns-chat-c1", "switchboard")]["lat_p50_ms"]
    assert (s["median"], s["min"], s["max"]) == (0.90, 0.60, 2.00)
    T = {t["target"]: t for t in benchrun.targets(summ, {"proxy_idle_rss_mb": 70.0, "start_to_ready_s_median": 2.0})}
    added = T["non-streaming, c=1: added latency p50"]
    assert added["value"] == pytest.approx(0.70) and added["pass"] is False
    paced = T["paced 4 streams, 206 steps × 5 ms: total time vs direct"]
    assert paced["value"] == pytest.approx(1035 / 1030) and paced["pass"] is True
    assert T["paced 4 streams, 206 steps × 5 ms: added TTFT p50"]["value"] == pytest.approx(1.5)
    assert T["paced 4 streams, 206 steps × 5 ms: added TTFT p50"]["pass"] is False
    one = T["one paced stream at a time, 206 steps × 5 ms: added TTFT p50"]
    assert one["value"] == pytest.approx(0.75) and one["pass"] is None  # reported beside the target
    wk = T["--workers 2 vs 1: req_s (ns-chat-c32)"]
    assert wk["value"] == pytest.approx(1.8) and wk["pass"] is None  # reported, no limit
    cores = T["--workers 2 vs 1: proxy cores busy (ns-chat-c32)"]
    assert cores["value"] == pytest.approx(1.76) and cores["note"] == "with 1 worker: 0.98"
    assert T["--workers 2 vs 1: proxy CPU per request (ns-chat-c32)"]["value"] == pytest.approx(1.1)
    assert T["--workers 2 vs 1: proxy CPU per request (st-chat-c8)"]["value"] is None  # not measured
    assert T["same-protocol: events/s per proxy core (chat)"]["pass"] is False
    assert T["realistic (5 ms/chunk): stream time vs direct (chat)"]["value"] == pytest.approx(1.02)
    assert T["realistic (5 ms/chunk): stream time vs direct (chat)"]["pass"] is False
    assert T["memory: 512 slow streams, peak RSS"]["pass"] is False
    assert T["memory: 512 slow streams, errors"]["pass"] is False
    assert T["memory: idle RSS"]["pass"] is False
    assert T["start to ready"]["pass"] is False
    assert T["stream, c=1: added TTFB p50 (resp)"]["pass"] is None  # not measured: n/a
    assert T["reference forwarder: proxy CPU per request (ns-chat-c1)"]["value"] == pytest.approx(0.5)
    floor = T["Switchboard ÷ reference forwarder: CPU per request (ns-chat-c1)"]
    assert floor["value"] == pytest.approx(0.8) and floor["pass"] is None
    assert T["reference forwarder, paced 4 streams (chat): added TTFT p50"]["value"] == pytest.approx(2.0)
    meta = {
        "mode": "quick",
        "rounds": 3,
        "date": "d",
        "commit": "c",
        "cpu": "x",
        "cpus": 2,
        "python": "3",
        "proxy_core": 0,
        "loadgen_core": 1,
    }
    md = benchrun.markdown(benchrun.scenarios(quick=True), summ, list(T.values()), meta)
    assert "| ns-chat-c1 | direct |" in md and "**MISS**" in md and "0.900 (0.600–2.00)" in md
    assert "|  | reference |" in md  # the forwarder's row is named for what it is

    # steal (the host's other guests) is its own note, apart from other processes
    assert "The hypervisor took" not in md
    assert "steal up to" not in md
    summ[("ns-chat-c1", "direct")] = benchrun.summarize(
        [_sample("ns-chat-c1", "direct", 0, steal_pct=40.0, steal_core_max_pct=30.0, others_cpu_pct=2.0)]
    )[0]
    md = benchrun.markdown(benchrun.scenarios(quick=True), summ, list(T.values()), meta)
    assert "The hypervisor took 30.0% of this machine's most stolen core" in md and "perturbed" in md
    assert "Other processes on this machine used 2.00% of a core" in md
    assert "steal up to" not in md  # direct's rounds: not the proxy's
    # a missed target says how much of a core was stolen in its scenario's rounds through the proxy
    summ[("ns-chat-c1", "switchboard")] = benchrun.summarize(
        [
            _sample("ns-chat-c1", "switchboard", r, lat_p50_ms=0.9, steal_core_max_pct=st)
            for r, st in enumerate((1.0, 17.0, 3.0))
        ]
    )[0]
    md = benchrun.markdown(benchrun.scenarios(quick=True), summ, list(T.values()), meta)
    row = next(x for x in md.splitlines() if x.startswith("| non-streaming, c=1: added latency p50 |"))
    assert row.endswith("| **MISS** (steal up to 17.0% of a core in its rounds) |")
    row = next(x for x in md.splitlines() if x.startswith("| start to ready |"))
    assert "steal" not in row
