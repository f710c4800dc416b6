"""The GenAI metrics through the app: a streamed and a whole answer give their request
duration, time to first token, time per output token and token usage histograms, by
operation, provider, configured model and key name; a failure has its error type; a client
that leaves mid-stream still counts the output it was sent (an estimate, marked); names
outside the configured sets are ``other``."""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
import structlog

from app import logs
from tests.integration.conftest import (
    CHAT_URL,
    RESP_URL,
    USAGE_CHAT,
    chat_chunk,
    resp_stream_two_calls,
    sse_response,
)
from tests.integration.test_disconnect import SlowUpstream, _serve, _stop
from tests.integration.test_logging import lines

KEY = "sk-genai-client"
AUTH = {"keys": [{"name": "alice", "key": KEY}]}
H = {"authorization": f"Bearer {KEY}"}


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{name}{{(.*)}} (\S+)$", line)
        if m and all(f'{k}="{v}"' in m.group(1) for k, v in labels.items()):
            total += float(m.group(2))
    return total


def genai(op: str, provider: str, model: str, key: str = "alice") -> dict[str, str]:
    return {
        "gen_ai_operation_name": op,
        "gen_ai_provider_name": provider,
        "gen_ai_request_model": model,
        "key_name": key,
    }


def chat_answer() -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "up-chat",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there"}, "finish_reason": "stop"}],
        "usage": USAGE_CHAT,
    }


async def test_a_streamed_and_a_whole_answer_fill_the_histograms(client_factory: Any, mock: Any) -> None:
    c = await client_factory(auth=AUTH)
    mock.post(RESP_URL).mock(return_value=sse_response(resp_stream_two_calls(), event_names=True))
    mock.post(CHAT_URL).mock(return_value=httpx.Response(200, json=chat_answer()))
    r = await c.post("/v1/responses", headers=H, json={"model": "resp-model", "stream": True, "input": "hi"})
    assert r.status_code == 200 and '"response.completed"' in r.text
    msgs = [{"role": "user", "content": "hi"}]
    r = await c.post("/v1/chat/completions", headers=H, json={"model": "chat-model", "messages": msgs})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "Hello there"
    text = (await c.get("/metrics")).text

    stream = genai("responses", "respup", "resp-model")
    whole = genai("chat", "chatup", "chat-model")
    for labels in (stream, whole):
        assert metric(text, "gen_ai_server_request_duration_seconds_count", **labels, error_type="") == 1
        assert metric(text, "gen_ai_server_request_duration_seconds_bucket", **labels, le="+Inf") == 1
        assert metric(text, "gen_ai_server_request_duration_seconds_sum", **labels) > 0
        # the upstream's usage (both answers: 11 in, 3 from the cache; 7 out, 2 of reasoning)
        for kind, n in (("input", 11), ("output", 7), ("cache_read", 3), ("reasoning", 2)):
            got = metric(text, "gen_ai_client_token_usage_sum", **labels, gen_ai_token_type=kind)
            assert got == n, (labels, kind, got)
            assert metric(text, "gen_ai_client_token_usage_count", **labels, gen_ai_token_estimated="false") == 4
        assert metric(text, "gen_ai_client_token_usage_bucket", **labels, gen_ai_token_type="input", le="4.0") == 0
        assert metric(text, "gen_ai_client_token_usage_bucket", **labels, gen_ai_token_type="input", le="16.0") == 1
        assert metric(text, "gen_ai_client_token_usage_count", **labels, gen_ai_token_estimated="true") == 0
    # the time to first token and per output token: the stream's only
    assert metric(text, "gen_ai_server_time_to_first_token_seconds_count", **stream) == 1
    assert metric(text, "gen_ai_server_time_per_output_token_seconds_count", **stream) == 1
    assert metric(text, "gen_ai_server_time_to_first_token_seconds_count", **whole) == 0
    assert metric(text, "gen_ai_server_time_per_output_token_seconds_count", **whole) == 0
    # every switchboard series is still there beside them
    assert metric(text, "switchboard_requests_total", provider="respup", status="200") == 1
    assert metric(text, "switchboard_requests_total", provider="chatup", status="200") == 1
    assert metric(text, "switchboard_stream_outcomes_total", client="responses", outcome="completed") == 1
    assert metric(text, "switchboard_request_duration_seconds_count", route="/v1/responses") == 1
    assert metric(text, "switchboard_ttfb_seconds_sum", route="/v1/chat/completions") > 0


async def test_a_streamed_chat_answer_from_a_chat_upstream(client_factory: Any, mock: Any) -> None:
    """The Chat → Chat stream (its text through the passthrough), with the usage chunk last."""
    c = await client_factory(auth=AUTH)
    chunks = [chat_chunk({"role": "assistant", "content": ""})]
    chunks += [chat_chunk({"content": f"word{i} "}) for i in range(30)]
    chunks += [chat_chunk({}, "stop"), chat_chunk(None, None, choices=[], usage=USAGE_CHAT)]
    mock.post(CHAT_URL).mock(return_value=sse_response(chunks, done=True))
    body = {"model": "chat-model", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    r = await c.post("/v1/chat/completions", headers=H, json=body)
    assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
    text = (await c.get("/metrics")).text
    labels = genai("chat", "chatup", "chat-model")
    assert metric(text, "gen_ai_server_time_to_first_token_seconds_count", **labels) == 1
    assert metric(text, "gen_ai_client_token_usage_sum", **labels, gen_ai_token_type="output") == 7
    assert metric(text, "gen_ai_client_token_usage_sum", **labels, gen_ai_token_estimated="true") == 0


async def test_a_failure_has_its_error_type(client_factory: Any, mock: Any) -> None:
    c = await client_factory(auth=AUTH)
    mock.post(CHAT_URL).mock(return_value=httpx.Response(500, json={"error": {"message": "down"}}))
    body = {"model": "chat-model", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    r = await c.post("/v1/chat/completions", headers=H, json=body)
    assert r.status_code == 502, r.text
    code = r.json()["error"]["code"]
    text = (await c.get("/metrics")).text
    labels = genai("chat", "chatup", "chat-model")
    assert metric(text, "gen_ai_server_request_duration_seconds_count", **labels, error_type=code) == 1
    assert metric(text, "gen_ai_server_request_duration_seconds_count", **labels, error_type="") == 0
    assert metric(text, "gen_ai_server_time_to_first_token_seconds_count") == 0
    assert metric(text, "gen_ai_client_token_usage_count") == 0  # nothing was generated


async def test_names_outside_the_configured_sets_are_other(client_factory: Any, mock: Any) -> None:
    """A glob model entry forwards the client's names: the model label is ``other``; an open
    proxy's key name is ``-``."""
    c = await client_factory(
        models=[{"name": "made-*", "provider": "chatup"}],
    )
    mock.post(CHAT_URL).mock(return_value=httpx.Response(200, json=chat_answer()))
    for i in range(20):
        msgs = [{"role": "user", "content": "hi"}]
        r = await c.post("/v1/chat/completions", json={"model": f"made-up-{i}\u00e9", "messages": msgs})
        assert r.status_code == 200
    text = (await c.get("/metrics")).text
    labels = genai("chat", "chatup", "other", key="-")
    assert metric(text, "gen_ai_server_request_duration_seconds_count", **labels) == 20
    assert "made-up" not in text


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """logs.setup binds the logger to this test's captured stderr: undone afterwards."""
    yield
    structlog.reset_defaults()


async def test_a_client_that_leaves_mid_stream_still_counts_its_tokens(capsys: Any, restore_logging: None) -> None:
    """The upstream never sent its usage: the output the client was sent is counted, 4
    characters a token, marked ``gen_ai_token_estimated="true"``; the request's error type
    is ``client_cancel``."""
    logs.setup("info")
    upstream = SlowUpstream()
    up, srv, port = await _serve(upstream)
    try:
        async with httpx.AsyncClient() as c:
            body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
            got = b""
            async with c.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", json=body) as r:
                assert r.status_code == 200
                async for part in r.aiter_bytes():
                    got += part
                    if got.count(b"data:") >= 6:
                        break
            for _ in range(200):  # the proxy notices, closes the upstream, logs and counts
                text = (await c.get(f"http://127.0.0.1:{port}/metrics")).text
                if 'error_type="client_cancel"' in text:
                    break
                await asyncio.sleep(0.05)
    finally:
        await _stop(up, srv)
    line = next(x for x in lines(capsys.readouterr().err) if x.get("event") == "request")
    assert line["terminal"] == "client_cancel" and line["code"] == "client_cancel" and line["status"] == 499
    assert line["tokens_estimated"] is True and line["input_tokens"] is None and line["output_tokens"] > 0
    assert line["ttft_ms"] > 0 and line["key_name"] == "-"
    received = "".join(
        orjson.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in got.decode().split("\n\n")
        if line.startswith("data: {")
    )
    labels = genai("chat", "slow", "m", key="-")
    assert metric(text, "gen_ai_server_request_duration_seconds_count", **labels, error_type="client_cancel") == 1
    estimated = metric(
        text, "gen_ai_client_token_usage_sum", **labels, gen_ai_token_type="output", gen_ai_token_estimated="true"
    )
    # at least what the client read, at most what the upstream had sent when it was closed
    assert math.ceil(len(received) / 4) <= estimated <= math.ceil(len("w199 " * 200) / 4), (received, estimated)
    assert metric(text, "gen_ai_client_token_usage_count", gen_ai_token_estimated="false") == 0
    assert metric(text, "gen_ai_server_time_to_first_token_seconds_count") == 0  # not a success
    assert metric(text, "switchboard_stream_outcomes_total", outcome="client_cancel") == 1
    assert line["output_tokens"] == estimated
