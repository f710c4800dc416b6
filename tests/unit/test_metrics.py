"""app.metrics on prometheus_client: what ``answered`` and ``turn`` record, the closed label
sets (``other``), the series bound, the exported names and buckets, and the multiprocess
mode (several processes, one scrape)."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app import metrics
from app.metrics import Metrics

CALLS = [
    ("/v1/chat/completions", "chat", "p", 200, 0.5, 0.1, "completed"),
    ("/v1/chat/completions", "chat", "p", 200, 0.25, 0.2, "completed"),
    ("/v1/responses", "responses", "p", 502, 0.125, None, "failed"),
    ("/v1/responses", "responses", "p", 200, 1.0, 0.5, None),  # not a stream
    # values outside the closed sets: counted under "other"
    ("/v1/secret/path", "nope", "unknown-provider", 200, 2.0, 1.0, "made-up"),
]


def samples(text: str) -> dict[str, float]:
    """Every sample line of an exposition: ``name{labels}`` → value."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_answered_counts_requests_durations_and_outcomes() -> None:
    m = Metrics(providers=["p"])
    for call in CALLS * 3:
        m.answered(*call)
    chat = {"route": "/v1/chat/completions", "client": "chat", "provider": "p", "status": "200"}
    assert m.get("switchboard_requests_total", **chat) == 6
    assert m.get("switchboard_requests_total", route="other", client="other", provider="other", status="200") == 3
    assert m.get("switchboard_request_duration_seconds_sum", route="/v1/chat/completions") == 3 * 0.75
    assert m.get("switchboard_request_duration_seconds_count", route="/v1/chat/completions") == 6
    assert m.get("switchboard_ttfb_seconds_sum", route="/v1/chat/completions") == pytest.approx(3 * 0.3)
    # a request with no first byte adds to the duration, not to the time to first byte
    assert m.get("switchboard_request_duration_seconds_count", route="/v1/responses") == 6
    assert m.get("switchboard_ttfb_seconds_count", route="/v1/responses") == 3
    assert m.get("switchboard_stream_outcomes_total", outcome="completed", client="chat") == 6
    assert m.get("switchboard_stream_outcomes_total", outcome="failed", client="responses") == 3
    assert m.get("switchboard_stream_outcomes_total", outcome="other", client="other") == 3
    # the names /metrics has always exported, with the same labels
    got = samples(m.render().decode())
    assert got['switchboard_requests_total{client="chat",provider="p",route="/v1/chat/completions",status="200"}'] == 6
    assert got['switchboard_request_duration_seconds_sum{route="/v1/chat/completions"}'] == 2.25
    assert got['switchboard_ttfb_seconds_sum{route="/v1/responses"}'] == 1.5
    assert got['switchboard_stream_outcomes_total{client="responses",outcome="failed"}'] == 3
    assert not [k for k in got if "_created" in k]  # no creation-time series beside each one


def test_answered_keeps_the_series_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "MAX_SERIES", 2)
    m = Metrics()
    for status in (200, 400, 404, 500):
        m.answered("/v1/responses", "responses", "-", status, 0.5, 0.1, "completed")
    # two label sets, then the all-"other" one for the rest
    lines = [ln for ln in m.render().decode().splitlines() if ln.startswith("switchboard_requests_total{")]
    assert len(lines) == 3, lines
    assert m.get("switchboard_requests_total", route="other", client="other", provider="other", status="other") == 2


def test_inc_and_gauges_use_the_closed_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    m = Metrics(["p"], ["server_error"], models=["up-1"])
    m.inc("switchboard_upstream_errors_total", provider="evil\nprovider", code="sk-echoed")
    m.inc("switchboard_upstream_errors_total", 2, provider="p", code="server_error")
    assert m.get("switchboard_upstream_errors_total", provider="other", code="other") == 1
    assert m.get("switchboard_upstream_errors_total", provider="p", code="server_error") == 2
    m.set_gauge("switchboard_breaker_state", 2, provider="p", model="up-1")
    m.set_gauge("switchboard_breaker_state", 1, provider="p", model="made-up")
    assert m.get("switchboard_breaker_state", provider="p", model="up-1") == 2
    assert m.get("switchboard_breaker_state", provider="p", model="other") == 1
    text = m.render().decode()
    assert "sk-echoed" not in text and "made-up" not in text and "evil" not in text
    # a gauge past the bound sets nothing new (a state shown under "other" would be wrong)
    monkeypatch.setattr(metrics, "MAX_SERIES", 2)
    m.set_gauge("switchboard_breaker_state", 2, provider="p", model="-")
    assert m.get("switchboard_breaker_state", provider="p", model="-") == 0
    assert m.get("switchboard_breaker_state", provider="other", model="other") == 0


GENAI = {"gen_ai_operation_name": "chat", "gen_ai_provider_name": "p", "gen_ai_request_model": "m", "key_name": "k"}


def genai() -> Metrics:
    return Metrics(["p"], ["upstream_timeout"], public_models=["m"], keys=["k"])


def test_turn_records_duration_first_token_per_token_and_usage() -> None:
    m = genai()
    # a stream: 2 s, first token at 0.5 s, 100 in (80 from the cache), 31 out (10 reasoning)
    m.turn("chat", "p", "m", "k", "", 2.0, 0.5, (100, 31, 80, 0, 10), False)
    # a whole answer: no time to first token
    m.turn("chat", "p", "m", "k", "", 1.0, None, (10, 5, 0, 0, 0), False)
    dur = {**GENAI, "error_type": ""}
    assert m.get("gen_ai_server_request_duration_seconds_count", **dur) == 2
    assert m.get("gen_ai_server_request_duration_seconds_sum", **dur) == 3.0
    assert m.get("gen_ai_server_request_duration_seconds_bucket", **dur, le="1.28") == 1
    assert m.get("gen_ai_server_request_duration_seconds_bucket", **dur, le="2.56") == 2
    assert m.get("gen_ai_server_time_to_first_token_seconds_count", **GENAI) == 1
    assert m.get("gen_ai_server_time_to_first_token_seconds_sum", **GENAI) == 0.5
    # (2.0 - 0.5) / (31 - 1)
    assert m.get("gen_ai_server_time_per_output_token_seconds_sum", **GENAI) == pytest.approx(0.05)
    assert m.get("gen_ai_server_time_per_output_token_seconds_bucket", **GENAI, le="0.05") == 1
    assert m.get("gen_ai_server_time_per_output_token_seconds_bucket", **GENAI, le="0.025") == 0

    def tokens(kind: str, what: str = "sum") -> float:
        return m.get(
            f"gen_ai_client_token_usage_{what}", **GENAI, gen_ai_token_type=kind, gen_ai_token_estimated="false"
        )

    assert (tokens("input"), tokens("output"), tokens("cache_read"), tokens("reasoning")) == (110, 36, 80, 10)
    assert (tokens("input", "count"), tokens("output", "count")) == (2, 2)
    # the parts are recorded when not zero: the whole answer had none
    assert (tokens("cache_read", "count"), tokens("reasoning", "count")) == (1, 1)
    assert 'gen_ai_token_type="cache_write"' not in m.render().decode()


def test_a_failed_request_has_its_error_type_and_no_first_token_time() -> None:
    m = genai()
    m.turn("chat", "p", "m", "k", "upstream_timeout", 30.0, None, None, False)
    m.turn("chat", "p", "m", "k", "client_cancel", 3.0, 0.4, (None, 25, None, None, None), True)
    assert m.get("gen_ai_server_request_duration_seconds_count", **GENAI, error_type="upstream_timeout") == 1
    assert m.get("gen_ai_server_request_duration_seconds_count", **GENAI, error_type="client_cancel") == 1
    assert m.get("gen_ai_server_time_to_first_token_seconds_count", **GENAI) == 0
    # the estimate is counted, and marked: only the output, the input is unknown
    est = {**GENAI, "gen_ai_token_estimated": "true"}
    assert m.get("gen_ai_client_token_usage_sum", **est, gen_ai_token_type="output") == 25
    assert m.get("gen_ai_client_token_usage_count", **est, gen_ai_token_type="input") == 0
    assert "gen_ai_server_time_per_output_token_seconds" not in m.render().decode()


def test_genai_labels_outside_their_sets_are_other() -> None:
    m = genai()
    rng = random.Random(53)
    for i in range(2000):
        junk = "".join(rng.choice("abc/\n\"'{}é日 ") for _ in range(rng.randint(1, 40))) + str(i)
        m.turn(junk, junk, junk, junk, junk, 1.0, 0.1, (1, 2, 3, 4, 5), False)
        m.turn("responses", "p", junk, "k", "", 1.0, 0.1, (1, 2, 3, 4, 5), rng.random() < 0.5)
    text = m.render().decode()
    values = {v for k, v in re.findall(r'(\w+)="([^"]*)"', text) if k != "le"}
    assert values <= {"other", "responses", "p", "k", "", "true", "false", *metrics.TOKEN_TYPES}, values
    # the junk: a duration and 5 token types (a failure: no first token); the configured
    # names: a duration, a first token, a per-token time and 5 token types, estimated or not
    assert m.series_count() == (1 + 5) + (3 + 5 * 2)
    junk = dict.fromkeys(("gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "key_name"), "other")
    assert (
        m.get("gen_ai_client_token_usage_count", **junk, gen_ai_token_type="input", gen_ai_token_estimated="false")
        == 2000
    )


def test_genai_series_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "MAX_SERIES", 3)
    m = Metrics(["p0", "p1", "p2", "p3", "p4"], public_models=["m"])
    for i in range(5):
        m.turn("chat", f"p{i}", "m", "-", "", 1.0, None, None, False)
    assert len(m._series["gen_ai_server_request_duration_seconds"]) == 4  # three, then all-"other"
    other = dict.fromkeys(
        ("gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "key_name"), "other"
    )
    assert m.get("gen_ai_server_request_duration_seconds_count", **other, error_type="other") == 2


def test_the_exported_buckets_are_the_genai_conventions() -> None:
    m = genai()
    m.turn("chat", "p", "m", "k", "", 2.0, 0.5, (100, 31, 80, 1, 10), False)
    text = m.render().decode()

    def bounds(name: str) -> list[float]:
        found = re.findall(rf'^{name}_bucket{{[^}}]*gen_ai_operation_name="chat"[^}}]*le="([^"]+)"', text, re.M)
        seen = list(dict.fromkeys(found))
        assert seen[-1] == "+Inf"
        return [float(b) for b in seen[:-1]]

    duration = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
    assert bounds("gen_ai_server_request_duration_seconds") == duration
    assert bounds("gen_ai_server_time_to_first_token_seconds") == duration
    assert bounds("gen_ai_server_time_per_output_token_seconds") == [
        0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
    ]  # fmt: skip
    assert bounds("gen_ai_client_token_usage") == [4.0**i for i in range(14)]
    assert "# TYPE gen_ai_client_token_usage histogram" in text


# -- multiprocess mode: what --workers N runs (app/workers.py) --------------------------------

WORKER = """
import sys
from app.metrics import Metrics, MULTIPROC_DIR
assert MULTIPROC_DIR == sys.argv[1], MULTIPROC_DIR
m = Metrics(["p"], public_models=["m"], keys=["k"])
n = int(sys.argv[2])
for _ in range(n):
    m.answered("/v1/chat/completions", "chat", "p", 200, 0.5, 0.1, "completed")
    m.turn("chat", "p", "m", "k", "", 1.0, 0.25, (100, 20, 0, 0, 0), False)
m.set_gauge("switchboard_breaker_state", float(sys.argv[3]), provider="p", model="-")
print(m.get("switchboard_requests_total", route="/v1/chat/completions", client="chat", provider="p", status="200"))
"""

SCRAPE = """
import sys
from app.metrics import Metrics
sys.stdout.write(Metrics().render().decode())
"""


def scrape_here(d: Path) -> str:
    """What a worker's scrape reads (its values live in the directory, not in memory)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(metrics, "MULTIPROC_DIR", str(d))
        return Metrics().render().decode()


def _python(code: str, d: Path, *args: str) -> str:
    env = {**os.environ, metrics.MULTIPROC_ENV: str(d)}
    r = subprocess.run([sys.executable, "-c", code, str(d), *args], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_multiprocess_mode_one_scrape_sums_every_process(tmp_path: Path) -> None:
    """Two processes record into one directory; a third one's scrape (what any worker's
    /metrics does) is their sum; a dead process's gauge leaves it, its counts stay."""
    from prometheus_client.multiprocess import mark_process_dead

    assert _python(WORKER, tmp_path, "3", "2").strip() == "3.0"  # each process reads its own count
    assert _python(WORKER, tmp_path, "4", "1").strip() == "4.0"
    got = samples(_python(SCRAPE, tmp_path))
    route = 'route="/v1/chat/completions"'
    assert got[f'switchboard_requests_total{{client="chat",provider="p",{route},status="200"}}'] == 7
    assert got[f"switchboard_request_duration_seconds_sum{{{route}}}"] == 3.5
    assert got[f"switchboard_request_duration_seconds_count{{{route}}}"] == 7
    assert got['switchboard_stream_outcomes_total{client="chat",outcome="completed"}'] == 7
    labels = 'gen_ai_operation_name="chat",gen_ai_provider_name="p",gen_ai_request_model="m",key_name="k"'
    assert got[f'gen_ai_server_request_duration_seconds_count{{error_type="",{labels}}}'] == 7
    assert got[f'gen_ai_server_request_duration_seconds_bucket{{error_type="",{labels},le="1.28"}}'] == 7
    assert got[f"gen_ai_server_time_to_first_token_seconds_sum{{{labels}}}"] == 1.75
    tokens = labels.replace(',key_name="k"', ',gen_ai_token_estimated="false",gen_ai_token_type="input",key_name="k"')
    assert got[f"gen_ai_client_token_usage_sum{{{tokens}}}"] == 700
    assert got['switchboard_breaker_state{model="-",provider="p"}'] == 2  # the worst live one
    assert got == samples(scrape_here(tmp_path))  # the same, read by this process
    # the processes are gone: marked dead, their gauges leave the scrape, their counts stay
    for f in tmp_path.glob("gauge_livemax_*.db"):
        mark_process_dead(int(f.stem.rsplit("_", 1)[1]), str(tmp_path))
    got = samples(_python(SCRAPE, tmp_path))
    assert 'switchboard_breaker_state{model="-",provider="p"}' not in got
    assert got[f'switchboard_requests_total{{client="chat",provider="p",{route},status="200"}}'] == 7
