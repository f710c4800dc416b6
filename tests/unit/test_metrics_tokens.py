"""Where the GenAI metrics' tokens come from: the Bridge keeps the upstream's usage
(``usage``, ``tokens()``) and counts the output characters it writes for the client
(``chars``: text, reasoning, tool call arguments), in every direction, streamed (whole, event
by event, cut anywhere: every lane of the Bridge) or whole, and after a stream cut short."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from bench.fake_upstream import (
    PROMPT_TOKENS,
    chat_json,
    chat_steps,
    expected_text,
    responses_json,
    responses_steps,
    tool_args,
    usage_for,
)
from providers.profiles import QuirkSet
from tests.unit.cuts import pieces
from transformers.bridge import Bridge, open_bridge
from transformers.context import Ctx

DIRECTIONS = [
    ("chat", "chat"),
    ("chat", "responses"),
    ("responses", "chat"),
    ("responses", "responses"),
    ("messages", "chat"),
    ("messages", "responses"),
]
N = 60  # text chunks
THINK = 7  # reasoning chunks before the text (a Chat upstream's)


def body(client: str, stream: bool, model: str) -> dict[str, Any]:
    tool = {"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {}}}
    if client == "chat":
        return {
            "model": model,
            "stream": stream,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}],
        }
    if client == "messages":
        return {
            "model": model,
            "stream": stream,
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"name": "shell", "input_schema": {"type": "object", "properties": {}}}],
        }
    return {"model": model, "stream": stream, "input": "hi", "tools": [tool]}


def model_name(think: int = 0) -> str:
    """The fake upstream's model name for N text chunks after ``think`` reasoning ones (the
    client's too: a Chat → Chat text chunk passes through only under the client's name)."""
    return f"bench-n{N}" + (f"-think{think}" if think else "")


def bridge(client: str, upstream: str, stream: bool = True, think: int = 0) -> Bridge:
    m = model_name(think)
    quirks = QuirkSet("openai-compatible", (), "").resolve(m, m, None)
    _, b = open_bridge(body(client, stream, m), client, upstream, Ctx(quirks=quirks, upstream_model=m, public_model=m))
    return b


def wire(upstream: str, think: int = 0) -> list[bytes]:
    m = model_name(think)
    return chat_steps(m, N) if upstream == "chat" else responses_steps(m, N)


def output_chars(think: int = 0) -> int:
    return len(expected_text(N)) + len(tool_args()) + len(expected_text(think))


@pytest.mark.parametrize("feed", ["steps", "whole", "cuts"])
@pytest.mark.parametrize(("client", "upstream"), DIRECTIONS)
def test_a_stream_keeps_the_usage_and_counts_what_it_wrote(client: str, upstream: str, feed: str) -> None:
    think = THINK if upstream == "chat" else 0
    steps = wire(upstream, think)
    if feed == "whole":
        steps = [b"".join(steps)]
    elif feed == "cuts":
        rng = random.Random(f"{client}{upstream}")
        raw = b"".join(steps)
        steps = pieces(raw, [rng.randint(1, 400) for _ in range(len(raw))])
    b = bridge(client, upstream, think=think)
    out = b"".join(b.receive_data(s) for s in steps) + b.end()
    assert b.terminal == "completed", out[-300:]
    inp, total_out, _ = usage_for(N)
    assert b.tokens() == (PROMPT_TOKENS, total_out, 0, 0, 0)
    assert b.usage is not None and b.usage["input_tokens"] == inp
    want = output_chars(think)
    if (client, upstream) == ("chat", "chat"):
        # the passthrough's text chunks are counted by their bytes: UTF-8 and JSON escapes
        # count more (here: 1 to 5 bytes more in each of about N / 20 chunks)
        text = expected_text(N)
        assert want <= b.chars <= want + len(orjson.dumps(text).decode("latin-1")) - 2 - len(text)
    else:
        assert b.chars == want


@pytest.mark.parametrize(("client", "upstream"), DIRECTIONS)
def test_a_stream_cut_short_has_no_usage_and_the_characters_so_far(client: str, upstream: str) -> None:
    """A client that leaves mid-stream: the upstream's usage never came, the characters
    written so far are the estimate's base (text chunks only: the first 20)."""
    steps = wire(upstream)
    b = bridge(client, upstream)
    first = 1 if upstream == "chat" else 3  # the role chunk; created, in_progress, item added
    for s in steps[: first + 21]:
        b.receive_data(s)
    assert b.tokens() is None and b.usage is None
    assert b.chars >= len(expected_text(20))  # (a Responses item's opening may hold its first delta)
    assert b.chars <= len(expected_text(21)) * 2  # bytes of the passthrough's runs at most


@pytest.mark.parametrize(("client", "upstream"), DIRECTIONS)
def test_a_whole_answer_keeps_the_usage_and_its_output(client: str, upstream: str) -> None:
    b = bridge(client, upstream, stream=False)
    obj = chat_json(model_name(), N) if upstream == "chat" else responses_json(model_name(), N)
    status, _ = b.complete(obj)
    assert status == 200
    assert b.tokens() == (PROMPT_TOKENS, usage_for(N)[1], 0, 0, 0)
    assert b.chars == output_chars()


def test_cache_and_reasoning_counts_come_through() -> None:
    b = bridge("responses", "chat")
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 300,
        "prompt_tokens_details": {"cached_tokens": 600, "cache_write_tokens": 50},
        "completion_tokens_details": {"reasoning_tokens": 120},
    }
    chunk = {"id": "c", "created": 1, "model": "m", "choices": [], "usage": usage}
    done = {"id": "c", "created": 1, "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    b.receive_data(b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in (done, chunk)) + b"data: [DONE]\n\n")
    b.end()
    assert b.tokens() == (1000, 300, 600, 50, 120)


def test_a_whole_chat_answer_without_usage_has_none() -> None:
    b = bridge("chat", "chat", stream=False)
    obj = chat_json(model_name(), N)
    del obj["usage"]
    b.complete(obj)
    assert b.tokens() is None and b.chars == output_chars()
