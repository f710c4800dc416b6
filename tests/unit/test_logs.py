"""app.logs: the one processor writes what structlog's chain of six wrote, and the logger
follows structlog's configuration wherever it changes."""

from __future__ import annotations

import io
import json
import logging
import re
import time
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
import structlog

from app import logs
from transformers.masking import NO_SECRETS, SecretMask

ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


@pytest.fixture(autouse=True)
def _restore() -> Any:
    yield
    structlog.reset_defaults()
    logs.set_mask(NO_SECRETS)


def _chain() -> list[Any]:
    """The processors ``render`` replaces, as they were configured."""
    return [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        logs.redact,
        structlog.processors.JSONRenderer(serializer=logs._dumps),
    ]


def _through_chain(method: str, event: dict[str, Any]) -> dict[str, Any]:
    out: Any = event
    for proc in _chain():
        out = proc(None, method, out)
    return dict(orjson.loads(out))


def _boom() -> BaseException:
    try:
        raise ValueError("key sk-live-abc and Bearer tok123 in a message")
    except ValueError as e:
        return e


EVENTS: list[tuple[str, dict[str, Any]]] = [
    ("info", {"event": "request", "request_id": "req_1", "status": 200, "duration_ms": 1.5, "ttfb_ms": None}),
    ("debug", {"event": "repairs", "rules": ["a", "b"], "stream": True}),
    ("warning", {"event": "x", "note": "sent Bearer sk-live-xyz upstream", "api_key": "k", "input_tokens": 3}),
    ("warn", {"event": "old alias"}),
    ("error", {"event": "broke", "exc_info": _boom()}),
    ("exception", {"event": "broke", "exc_info": True}),
    ("info", {"event": "no traceback", "exc_info": False, "authorization": "Bearer abc"}),
    ("info", {"event": "odd values", "when": datetime(2020, 1, 2, tzinfo=UTC), "obj": object}),
]


@pytest.mark.parametrize(("method", "event"), EVENTS, ids=[f"{m}-{e['event']}" for m, e in EVENTS])
@pytest.mark.parametrize("masked", [False, True])
def test_render_writes_what_the_chain_wrote(method: str, event: dict[str, Any], masked: bool) -> None:
    if masked:
        logs.set_mask(SecretMask(["sk-live-abc", "sk-live-xyz"]))
    try:
        raise KeyError("in flight")  # exc_info=True renders the exception being handled
    except KeyError:
        old = _through_chain(method, dict(event))
        new = dict(orjson.loads(logs.render(None, method, dict(event))))
    t_old, t_new = old.pop("timestamp"), new.pop("timestamp")
    assert ISO_UTC.fullmatch(t_new) and ISO_UTC.fullmatch(t_old)
    assert abs(datetime.fromisoformat(t_new) - datetime.fromisoformat(t_old)).total_seconds() < 1
    assert new == old
    assert list(new) == list(old)  # the same key order too
    text = json.dumps(new)
    assert "tok123" not in text and "sk-live-xyz" not in text
    if masked:
        assert "sk-live-abc" not in text


def test_timestamp_is_now_in_utc_to_the_microsecond() -> None:
    for _ in range(3):
        before = time.time_ns() // 1000 / 1e6
        stamp = logs.timestamp()
        after = time.time_ns() // 1000 / 1e6
        assert ISO_UTC.fullmatch(stamp), stamp
        t = datetime.fromisoformat(stamp).timestamp()
        assert before - 1e-6 <= t <= after + 1e-6, (before, stamp, after)
        time.sleep(0.3)  # across a second's edge now and then: the cached date must follow


def test_timestamp_follows_the_clock_across_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(
        [1_700_000_000_250_000_000, 1_700_000_000_999_999_999, 1_700_000_001_000_002_000, 1_800_000_000_500_000_000]
    )
    monkeypatch.setattr(logs.time, "time_ns", lambda: next(clock))
    assert logs.timestamp() == "2023-11-14T22:13:20.250000Z"
    assert logs.timestamp() == "2023-11-14T22:13:20.999999Z"
    assert logs.timestamp() == "2023-11-14T22:13:21.000002Z"
    assert logs.timestamp() == "2027-01-15T08:00:00.500000Z"


def test_the_logger_follows_each_new_configuration() -> None:
    """``log`` is imported by every module once; setup() (a new stream, a new level) and any
    structlog.configure() afterwards must still reach it."""
    first, second = io.StringIO(), io.StringIO()
    structlog.configure(
        processors=[logs.render],
        wrapper_class=structlog.make_filtering_bound_logger(20),
        logger_factory=structlog.WriteLoggerFactory(file=first),
    )
    logs.log.info("one", n=1)
    logs.log.debug("hidden")
    structlog.configure(logger_factory=structlog.WriteLoggerFactory(file=second))
    logs.log.info("two", n=2)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(10))
    logs.log.debug("three")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(50))
    logs.log.error("muted")
    logs.log.warning("muted too")
    assert [json.loads(x)["event"] for x in first.getvalue().splitlines()] == ["one"]
    assert [json.loads(x)["event"] for x in second.getvalue().splitlines()] == ["two", "three"]
    structlog.configure(processors=[structlog.processors.KeyValueRenderer(key_order=["event"])])
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(10))
    logs.log.exception("kv")
    assert second.getvalue().splitlines()[-1].startswith("event='kv'")


def test_setup_binds_the_stream_and_level_of_its_time(capsys: pytest.CaptureFixture[str]) -> None:
    logs.setup("warning")
    logs.log.info("not at warning")
    logs.log.warning("shown", token="t0k", model="m")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    line = json.loads(err[0])
    assert line["event"] == "shown" and line["level"] == "warning" and line["token"] == "[redacted]"
    assert ISO_UTC.fullmatch(line["timestamp"])


def _lines(text: str) -> list[dict[str, Any]]:
    out = []
    for x in text.splitlines():
        d = json.loads(x)
        assert ISO_UTC.fullmatch(d.pop("timestamp"))
        out.append(d)
    return out


@pytest.mark.parametrize("level", ["debug", "info", "warning", "error"])
def test_setups_own_configuration_writes_the_lines_structlog_writes(
    level: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under setup()'s configuration a line is written by ``log`` itself; the same calls
    through structlog (the same processor and level, a configuration not setup()'s) write
    the same lines, key order included, and drop the same levels."""

    def calls() -> None:
        logs.log.debug("d", request_id="r1", rules=["a"])
        logs.log.info("request", request_id="r1", status=200, ttfb_ms=None, api_key="sk-1")
        logs.log.warning("w", note="sent Bearer sk-live-xyz upstream", n=3)
        logs.log.error("e", error="ValueError")

    own, other = io.StringIO(), io.StringIO()
    monkeypatch.setattr("sys.stderr", own)
    logs.setup(level)
    calls()
    assert logs.log._sink is not None  # written by log itself
    structlog.configure(
        processors=[logs.render],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.WriteLoggerFactory(file=other),
    )
    calls()
    assert logs.log._sink is None  # through structlog
    assert [json.dumps(d) for d in _lines(own.getvalue())] == [json.dumps(d) for d in _lines(other.getvalue())]
    want = ["d", "request", "w", "e"][["debug", "info", "warning", "error"].index(level) :]
    assert [d["event"] for d in _lines(own.getvalue())] == want
    if "request" in want:
        line = _lines(own.getvalue())[want.index("request")]
        assert list(line) == ["request_id", "status", "ttfb_ms", "api_key", "event", "level"]
        assert line["api_key"] == "[redacted]"


def test_exception_goes_through_structlog_with_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    logs.setup("info")
    try:
        raise ValueError("boom")
    except ValueError:
        logs.log.exception("failed", request_id="r1")
    (line,) = _lines(err.getvalue())
    assert line["event"] == "failed" and line["level"] == "error"
    assert "ValueError: boom" in line["exception"]


def test_values_as_long_as_the_shortest_secret_are_masked_and_shorter_ones_kept() -> None:
    logs.set_mask(SecretMask(["abcdef", "longer-secret-1"]))
    event = {"a": "abcdef", "b": "xabcdefx", "c": "abcde", "d": "the longer-secret-1 here", "e": 7}
    line = orjson.loads(logs.render(None, "info", event))
    assert (line["a"], line["b"], line["c"], line["d"], line["e"]) == (
        "[redacted]",
        "x[redacted]x",
        "abcde",
        "the [redacted] here",
        7,
    )
    logs.set_mask(NO_SECRETS)  # no secrets: values as they are
    assert orjson.loads(logs.render(None, "info", {"a": "abcdef"}))["a"] == "abcdef"
