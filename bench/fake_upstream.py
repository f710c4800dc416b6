"""A fast, deterministic fake OpenAI upstream for the benchmark (loopback only).

Theory of operation
-------------------
One process, one asyncio ``Protocol`` per connection, requests parsed by httptools (C),
HTTP/1.1 keep-alive.  It answers

* ``POST …/chat/completions`` — Chat Completions, streaming or not;
* ``POST …/responses``        — Responses, streaming or not;
* ``POST …/messages``         — Anthropic Messages, streaming or not (``x-api-key`` and
  ``anthropic-version`` not checked);
* ``POST …/models/{model}:generateContent`` and ``…:streamGenerateContent`` — Gemini's own
  API, whole or streamed (SSE, with or without ``alt=sse``; ``x-goog-api-key`` not
  checked): the model and the stream are the path's, the body is only parsed;
* ``GET  …/healthz``          — ``ok``;
* ``GET  /stats``             — ``{"connections": …, "requests": …}`` since start.

What it answers is a pure function of the request's ``model`` and ``stream`` and of the
endpoint, so that "direct" and "through the proxy" see the same bytes:

* ``n<N>`` in the model name: N text chunks (default 20);
* ``d<MS>`` in the model name: a delay of MS milliseconds per chunk (default 0);
  e.g. ``bench-chat-n200-d5``;
* ``pt`` in the model name (paced streams): the tail is paced too, as 5 steps on the same
  timeline for every protocol (the call's start — Responses and Messages: with the text's
  end —, its 3 argument deltas, then finish/usage/``[DONE]``, the done events and completed,
  or the call's stop, ``message_delta`` and ``message_stop``), so the stream takes
  (N + 6) × MS instead of (N + 1) × MS;
* ``rel`` in the model name (paced streams): a relative schedule (sleep ``MS`` after each
  write, so the writer's own lateness adds up) instead of the absolute one below;
* ``think<R>`` in the model name (streams): R reasoning chunks before the text, one step
  each: Chat ``delta.reasoning_content`` chunks (as Kimi K2, DeepSeek, GLM and MiMo stream
  their thinking), Responses a reasoning item's summary deltas (the item's done events and
  the message's opening written with the last one), Messages a ``thinking`` block's
  ``thinking_delta`` events (its signature, its stop and the text block's start with the
  last one);
* ``args<A>`` in the model name (streams): the tool call's argument text is a command of A
  words, one argument delta a step (A + 2 of them: its opening, a word each, its close)
  between the call's start and the stream's end (``tool_arg_parts``), as a model writing a
  long shell command or patch streams it (``pt`` is ignored with it);
* ``vllm`` in the model name: Chat chunks laid out as vLLM writes them (``"logprobs": null``
  in each choice), which is not the proxy's own encoder's layout, so its Chat → Chat
  passthrough does not take them (what most real Chat upstreams send);
* ``hosted`` in the model name: the answer's head also carries the 20 lines a hosted API
  sends besides its content headers (OpenAI's, through its CDN: date, request id, rate
  limits, cookies, …), which the proxy's HTTP client must parse; without it the head has
  only its content headers.

A stream is a list of *steps* laid on one timeline that is the same for both protocols:

=========  =====================================================  =============
step       Chat Completions                                       Responses
=========  =====================================================  =============
0          role chunk                                             created, in_progress,
                                                                  item added, part added
1 … N      one ``delta.content`` chunk                            one output_text.delta
N + 1      tool call (id+name, then 3 argument deltas),           text/part/item done,
           finish_reason ``tool_calls``, usage chunk             function_call added,
           (``choices: []``), ``[DONE]``                          3 argument deltas, done
                                                                  events, completed+usage
=========  =====================================================  =============

and for Messages (the events as Anthropic's API writes them, less its ``ping``):
step 0 ``message_start`` (the input tokens in its usage) and the text block's
``content_block_start``; step *i* one ``text_delta``; step N + 1 the text block's
``content_block_stop``, the ``tool_use`` block (``content_block_start`` with the id, the name
and ``input: {}``, 3 ``input_json_delta`` pieces, ``content_block_stop``), ``message_delta``
(``stop_reason: tool_use``, the output tokens) and ``message_stop``.  With ``think<R>`` a
``thinking`` block comes first (R ``thinking_delta`` steps, its ``signature_delta`` and stop
written with the last, with the text block's start).

Gemini has no opening event and sends a call whole: step 0 is the answer's head alone, step
*i* one chunk with a text part, step N + 1 the chunk with the ``functionCall`` part (its
``thoughtSignature``), ``finishReason`` ``STOP`` and the usage: the same timeline as the
other protocols'.  ``think<R>`` puts R chunks of thought parts first, ``args<A>`` makes the
call's arguments longer, ``pt`` is ignored (the tail is one chunk).

Step *i* is written at ``t0 + i × delay`` (an absolute schedule, so per-chunk overheads do
not add up), ``t0`` being when the request was read, on a ``timerfd`` deadline to the
microsecond (``bench/clock.py``: uvloop's own timers count milliseconds, and wrote a step
up to 0.6 ms ahead of its time; a paced answer holds one ``timerfd`` while it lasts); with
no delay the whole body is one ``write``.  Bodies are built once per (endpoint, model,
stream) and cached, which is what keeps this process off the critical path: the proxy, not
the fake, must be the bottleneck.  Streams use chunked transfer encoding (one HTTP chunk
per step); JSON answers use Content-Length.

Run: ``python -m bench.fake_upstream --port 0`` prints ``READY <port>`` when listening.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import sys
import time

import orjson

from bench.clock import Deadlines

try:  # pragma: no cover - both are in the project's dependencies
    import httptools
except ImportError:  # pragma: no cover
    httptools = None

__all__ = [
    "TOOL_NAME",
    "TOOL_CALL_ID",
    "TOOL_ARGS",
    "TOOL_ARG_PARTS",
    "PROMPT_TOKENS",
    "chunk_text",
    "expected_text",
    "parse_reasoning",
    "parse_args",
    "tool_arg_parts",
    "tool_args",
    "parse_model",
    "parse_pacing",
    "chat_steps",
    "responses_steps",
    "chat_json",
    "responses_json",
    "messages_steps",
    "messages_json",
    "gemini_steps",
    "gemini_json",
    "GEMINI_SIGNATURE",
    "PROVIDER_OF",
    "usage_for",
    "FakeUpstream",
    "serve",
]

WORDS = (
    " The",
    " quick",
    " brown",
    " fox",
    " jumps",
    " over",
    " the",
    " lazy",
    " dog",
    ".",
    " Voilà",
    " café",
    " naïve",
    " 東京",
    " —",
    " def",
    " main",
    "()",
    ":",
    "\n",
)
# the proxy's key for this upstream, as every hosted provider has one: its header goes
# upstream and the proxy's log lines are masked for it (this upstream does not check it)
KEY = "sk-bench-" + "0123456789abcdef" * 3


def proxy_providers(base: str) -> list[dict[str, str]]:
    """The proxy's four providers in front of this upstream (``base``: its ``/v1`` URL), as every
    bench config names them: ``fake-chat`` on its Chat side, ``fake-resp`` on its Responses side,
    ``fake-msg`` on its Messages side (the proxy POSTs ``{base}/messages`` with ``x-api-key``),
    ``fake-gem`` on its Gemini side (profile ``gemini``: the proxy POSTs
    ``{base}/models/{model}:streamGenerateContent?alt=sse`` with ``x-goog-api-key``)."""
    common = {"profile": "openai-compatible", "base_url": base, "api_key": KEY}
    return [
        {"name": "fake-chat", "protocol": "chat", **common},
        {"name": "fake-resp", "protocol": "responses", **common},
        {"name": "fake-msg", "protocol": "messages", **common},
        {"name": "fake-gem", "protocol": "gemini", **common, "profile": "gemini"},
    ]


# the provider that serves each upstream protocol (``proxy_providers``)
PROVIDER_OF = {"chat": "fake-chat", "responses": "fake-resp", "messages": "fake-msg", "gemini": "fake-gem"}


TOOL_NAME = "shell"
TOOL_CALL_ID = "call_bench_0"
TOOL_ARG_PARTS = ('{"command":["ls",', '"-la"],', '"workdir":"/tmp"}')
TOOL_ARGS = "".join(TOOL_ARG_PARTS)
PROMPT_TOKENS = 42
CREATED = 1_700_000_000
DEFAULT_CHUNKS = 20

_N = re.compile(r"(?:^|[-_/:.])n(\d+)")
_D = re.compile(r"(?:^|[-_/:.])d(\d+(?:\.\d+)?)")
_PT = re.compile(r"(?:^|[-_/:.])pt(?:$|[-_/:.])")
_HOSTED = re.compile(r"(?:^|[-_/:.])hosted(?:$|[-_/:.])")
_VLLM = re.compile(r"(?:^|[-_/:.])vllm(?:$|[-_/:.])")
_THINK = re.compile(r"(?:^|[-_/:.])think(\d+)(?:$|[-_/:.])")
_ARGS = re.compile(r"(?:^|[-_/:.])args(\d+)(?:$|[-_/:.])")
_REL = re.compile(r"(?:^|[-_/:.])rel(?:$|[-_/:.])")


def parse_model(model: str) -> tuple[int, float]:
    """``(chunks, delay_seconds)`` from a model name such as ``bench-chat-n200-d5``."""
    m = _N.search(model)
    n = int(m.group(1)) if m else DEFAULT_CHUNKS
    m = _D.search(model)
    d = float(m.group(1)) / 1000.0 if m else 0.0
    return n, d


def parse_pacing(model: str) -> tuple[bool, bool]:
    """``(paced_tail, relative)`` from a model name: ``pt`` and ``rel`` (module docstring)."""
    return bool(_PT.search(model)), bool(_REL.search(model))


def parse_reasoning(model: str) -> int:
    """Reasoning chunks before a Chat stream's text: ``think<R>`` in the model name (0: none)."""
    m = _THINK.search(model)
    return int(m.group(1)) if m else 0


def parse_args(model: str) -> int:
    """Words of a stream's tool call command: ``args<A>`` in the model name (0: the default
    three argument deltas)."""
    m = _ARGS.search(model)
    return int(m.group(1)) if m else 0


def tool_arg_parts(a: int = 0) -> tuple[str, ...]:
    """The tool call's argument deltas: ``TOOL_ARG_PARTS``, or for ``args<A>`` the opening of a
    ``printf`` command, its A words (``chunk_text``, as JSON string insides) and its close."""
    if not a:
        return TOOL_ARG_PARTS
    words = tuple(orjson.dumps(chunk_text(i)).decode()[1:-1] for i in range(a))
    return ('{"command":["printf","', *words, '"],"workdir":"/tmp"}')


def tool_args(a: int = 0) -> str:
    """The tool call's whole argument text (``tool_arg_parts`` joined)."""
    return "".join(tool_arg_parts(a))


def chunk_text(i: int) -> str:
    return WORDS[i % len(WORDS)]


def expected_text(n: int) -> str:
    return "".join(chunk_text(i) for i in range(n))


def usage_for(n: int, a: int = 0) -> tuple[int, int, int]:
    """(input, output, total) tokens: one token per text chunk plus the tool call's parts
    (``a``: ``args<A>``)."""
    out = n + len(tool_arg_parts(a))
    return PROMPT_TOKENS, out, PROMPT_TOKENS + out


def _sse(obj: dict, event: str | None = None) -> bytes:
    data = orjson.dumps(obj)
    if event is None:
        return b"data: " + data + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


# ----------------------------------------------------------------------------- Chat
def _chat_chunk(model: str, delta: dict, finish: str | None = None) -> dict:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    if not _VLLM.search(model):
        del choice["logprobs"]
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "choices": [choice],
    }


def chat_steps(model: str, n: int) -> list[bytes]:
    """The streamed Chat answer as N + 2 steps (see the module docstring; with ``args<A>``,
    N + A + 5)."""
    steps = [_sse(_chat_chunk(model, {"role": "assistant", "content": ""}))]
    for i in range(parse_reasoning(model)):
        steps.append(_sse(_chat_chunk(model, {"reasoning_content": chunk_text(i)})))
    for i in range(n):
        steps.append(_sse(_chat_chunk(model, {"content": chunk_text(i)})))
    a = parse_args(model)
    inp, out, tot = usage_for(n, a)
    tail = [
        _sse(
            _chat_chunk(
                model,
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": TOOL_CALL_ID,
                            "type": "function",
                            "function": {"name": TOOL_NAME, "arguments": ""},
                        }
                    ]
                },
            )
        ),
    ]
    for part in tool_arg_parts(a):
        tail.append(_sse(_chat_chunk(model, {"tool_calls": [{"index": 0, "function": {"arguments": part}}]})))
    if a:  # the call's start and each argument delta a step of its own
        steps += tail
        tail = []
    tail.append(_sse(_chat_chunk(model, {}, "tool_calls")))
    tail.append(
        _sse(
            {
                "id": "chatcmpl-bench",
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": model,
                "choices": [],
                "usage": {
                    "prompt_tokens": inp,
                    "completion_tokens": out,
                    "total_tokens": tot,
                    "prompt_tokens_details": {"cached_tokens": 0},
                    "completion_tokens_details": {"reasoning_tokens": 0},
                },
            }
        )
    )
    tail.append(b"data: [DONE]\n\n")
    steps.append(b"".join(tail))
    return steps


def chat_json(model: str, n: int) -> dict:
    inp, out, tot = usage_for(n)
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": expected_text(n),
                    "tool_calls": [
                        {
                            "id": TOOL_CALL_ID,
                            "type": "function",
                            "function": {"name": TOOL_NAME, "arguments": TOOL_ARGS},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {
            "prompt_tokens": inp,
            "completion_tokens": out,
            "total_tokens": tot,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    }


# ------------------------------------------------------------------------ Responses
_RESP_ID = "resp_bench"
_MSG_ID = "msg_bench_0"
_FC_ID = "fc_" + TOOL_CALL_ID
_RS_ID = "rs_bench_0"


def _resp_usage(n: int, a: int = 0) -> dict:
    inp, out, tot = usage_for(n, a)
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": tot,
    }


def _resp_output(n: int, r: int = 0, a: int = 0) -> list[dict]:
    """The answer's output items: a reasoning item when ``r`` reasoning chunks came first
    (``a``: ``args<A>``)."""
    out = [
        {
            "id": _MSG_ID,
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": expected_text(n), "annotations": []}],
        },
        {
            "id": _FC_ID,
            "type": "function_call",
            "status": "completed",
            "call_id": TOOL_CALL_ID,
            "name": TOOL_NAME,
            "arguments": tool_args(a),
        },
    ]
    if r:
        out.insert(0, {"id": _RS_ID, "type": "reasoning", "summary": [_summary(expected_text(r))]})
    return out


def _summary(text: str) -> dict:
    return {"type": "summary_text", "text": text}


def responses_json(model: str, n: int) -> dict:
    return {
        "id": _RESP_ID,
        "object": "response",
        "created_at": CREATED,
        "status": "completed",
        "model": model,
        "output": _resp_output(n),
        "usage": _resp_usage(n),
    }


def responses_steps(model: str, n: int) -> list[bytes]:
    """The streamed Responses answer as N + 2 steps (see the module docstring; with
    ``args<A>``, N + A + 5)."""
    seq = 0

    def ev(obj: dict) -> bytes:
        nonlocal seq
        obj["sequence_number"] = seq
        seq += 1
        return _sse(obj, obj["type"])

    base = {
        "id": _RESP_ID,
        "object": "response",
        "created_at": CREATED,
        "model": model,
        "status": "in_progress",
        "output": [],
    }
    text = expected_text(n)
    msg_open = {"id": _MSG_ID, "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    part_empty = {"type": "output_text", "text": "", "annotations": []}
    part_full = {"type": "output_text", "text": text, "annotations": []}
    r = parse_reasoning(model)
    m = 1 if r else 0  # the message's output index (after the reasoning item)
    a = parse_args(model)
    out = _resp_output(n, r, a)
    head = [ev({"type": "response.created", "response": base}), ev({"type": "response.in_progress", "response": base})]
    opening = [
        ev({"type": "response.output_item.added", "output_index": m, "item": msg_open}),
        ev(
            {
                "type": "response.content_part.added",
                "item_id": _MSG_ID,
                "output_index": m,
                "content_index": 0,
                "part": part_empty,
            }
        ),
    ]
    steps = [b"".join(head + ([] if r else opening))]
    if r:  # the reasoning item's summary, a delta a step, then the message opens
        rs = {"item_id": _RS_ID, "output_index": 0, "summary_index": 0}
        steps[0] += b"".join(
            (
                ev({"type": "response.output_item.added", "output_index": 0, "item": {**out[0], "summary": []}}),
                ev({"type": "response.reasoning_summary_part.added", **rs, "part": _summary("")}),
            )
        )
        for i in range(r):
            steps.append(ev({"type": "response.reasoning_summary_text.delta", **rs, "delta": chunk_text(i)}))
        done = [
            ev({"type": "response.reasoning_summary_text.done", **rs, "text": expected_text(r)}),
            ev({"type": "response.reasoning_summary_part.done", **rs, "part": _summary(expected_text(r))}),
            ev({"type": "response.output_item.done", "output_index": 0, "item": out[0]}),
        ]
        steps[-1] += b"".join(done + opening)  # (written with the last delta: one step, as Chat's)
    for i in range(n):
        steps.append(
            ev(
                {
                    "type": "response.output_text.delta",
                    "item_id": _MSG_ID,
                    "output_index": m,
                    "content_index": 0,
                    "delta": chunk_text(i),
                }
            )
        )
    tail = [
        ev(
            {
                "type": "response.output_text.done",
                "item_id": _MSG_ID,
                "output_index": m,
                "content_index": 0,
                "text": text,
            }
        ),
        ev(
            {
                "type": "response.content_part.done",
                "item_id": _MSG_ID,
                "output_index": m,
                "content_index": 0,
                "part": part_full,
            }
        ),
        ev({"type": "response.output_item.done", "output_index": m, "item": out[m]}),
        ev(
            {
                "type": "response.output_item.added",
                "output_index": m + 1,
                "item": {
                    "id": _FC_ID,
                    "type": "function_call",
                    "status": "in_progress",
                    "call_id": TOOL_CALL_ID,
                    "name": TOOL_NAME,
                    "arguments": "",
                },
            }
        ),
    ]
    for part in tool_arg_parts(a):
        tail.append(
            ev(
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": _FC_ID,
                    "output_index": m + 1,
                    "delta": part,
                }
            )
        )
    if a:  # the message's end with the call's start, then each argument delta a step of its own
        steps.append(b"".join(tail[:4]))
        steps += tail[4:]
        tail = []
    tail += [
        ev(
            {
                "type": "response.function_call_arguments.done",
                "item_id": _FC_ID,
                "output_index": m + 1,
                "arguments": tool_args(a),
            }
        ),
        ev({"type": "response.output_item.done", "output_index": m + 1, "item": out[m + 1]}),
        ev(
            {
                "type": "response.completed",
                "response": {**base, "status": "completed", "output": out, "usage": _resp_usage(n, a)},
            }
        ),
    ]
    steps.append(b"".join(tail))
    return steps


# ------------------------------------------------------------------------- Messages
_MSGS_ID = "msg_bench"
THINK_SIGNATURE = "sig_bench_0"  # the thinking block's signature (``think<R>``)


def _msg_usage_start() -> dict:
    """``message_start``'s usage: the input tokens (an output token so far, as Anthropic's)."""
    return {
        "input_tokens": PROMPT_TOKENS,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 1,
    }


def messages_json(model: str, n: int) -> dict:
    """The whole (non-streamed) Messages answer: the text block, then the ``tool_use`` block."""
    _, out, _ = usage_for(n)
    return {
        "id": _MSGS_ID,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [
            {"type": "text", "text": expected_text(n)},
            {"type": "tool_use", "id": TOOL_CALL_ID, "name": TOOL_NAME, "input": orjson.loads(TOOL_ARGS)},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {**_msg_usage_start(), "output_tokens": out},
    }


def messages_steps(model: str, n: int) -> list[bytes]:
    """The streamed Messages answer as N + 2 steps (see the module docstring; with ``think<R>``
    N + R + 2, with ``args<A>`` N + A + 5)."""

    def ev(obj: dict) -> bytes:
        return _sse(obj, obj["type"])

    def block_start(i: int, block: dict) -> bytes:
        return ev({"type": "content_block_start", "index": i, "content_block": block})

    def delta(i: int, d: dict) -> bytes:
        return ev({"type": "content_block_delta", "index": i, "delta": d})

    def stop(i: int) -> bytes:
        return ev({"type": "content_block_stop", "index": i})

    r = parse_reasoning(model)
    a = parse_args(model)
    t = 1 if r else 0  # the text block's index (after the thinking block)
    msg = {
        "id": _MSGS_ID,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _msg_usage_start(),
    }
    text_open = block_start(t, {"type": "text", "text": ""})
    head = ev({"type": "message_start", "message": msg})
    if r:  # the thinking block, a delta a step; its end and the text's start with the last
        steps = [head + block_start(0, {"type": "thinking", "thinking": ""})]
        for i in range(r):
            steps.append(delta(0, {"type": "thinking_delta", "thinking": chunk_text(i)}))
        steps[-1] += delta(0, {"type": "signature_delta", "signature": THINK_SIGNATURE}) + stop(0) + text_open
    else:
        steps = [head + text_open]
    for i in range(n):
        steps.append(delta(t, {"type": "text_delta", "text": chunk_text(i)}))
    _, out, _ = usage_for(n, a)
    tail = [stop(t), block_start(t + 1, {"type": "tool_use", "id": TOOL_CALL_ID, "name": TOOL_NAME, "input": {}})]
    for part in tool_arg_parts(a):
        tail.append(delta(t + 1, {"type": "input_json_delta", "partial_json": part}))
    if a:  # the text's end with the call's start, then each argument delta a step of its own
        steps.append(b"".join(tail[:2]))
        steps += tail[2:]
        tail = []
    tail += [
        stop(t + 1),
        ev(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": out},
            }
        ),
        ev({"type": "message_stop"}),
    ]
    steps.append(b"".join(tail))
    return steps


# --------------------------------------------------------------------------- Gemini
_GEM_ID = "bench-gem-0"
# the signature Gemini puts on a call's part (base64 of opaque bytes, as Gemini's are)
GEMINI_SIGNATURE = "Q2lRQmVuY2hTaWduYXR1cmVPZlRoZUNhbGxfMDEyMzQ1Njc4OWFiY2RlZg=="


def _gem_chunk(model: str, parts: list[dict], usage: dict, finish: str | None = None) -> dict:
    cand: dict = {"content": {"parts": parts, "role": "model"}}
    if finish is not None:
        cand["finishReason"] = finish
    cand["index"] = 0
    return {"candidates": [cand], "usageMetadata": usage, "modelVersion": model, "responseId": _GEM_ID}


def _gem_call_part(a: int = 0) -> dict:
    call = {"name": TOOL_NAME, "args": orjson.loads(tool_args(a))}
    return {"functionCall": call, "thoughtSignature": GEMINI_SIGNATURE}


def _gem_usage(n: int, a: int = 0) -> dict:
    inp, out, total = usage_for(n, a)
    return {"promptTokenCount": inp, "candidatesTokenCount": out, "totalTokenCount": total}


def gemini_json(model: str, n: int) -> dict:
    """The whole (``:generateContent``) answer: the text part, then the ``functionCall`` part
    with its ``thoughtSignature``; ``finishReason`` ``STOP`` and the usage."""
    r, a = parse_reasoning(model), parse_args(model)
    parts: list[dict] = [{"text": expected_text(r), "thought": True}] if r else []
    parts += [{"text": expected_text(n)}, _gem_call_part(a)]
    return _gem_chunk(model, parts, _gem_usage(n, a), "STOP")


def gemini_steps(model: str, n: int) -> list[bytes]:
    """The streamed (``:streamGenerateContent?alt=sse``) answer as R + N + 2 steps: the answer's
    head alone (an empty step: Gemini has no opening event), one chunk per thought part
    (``think<R>``), one per text part, then the ``functionCall`` part (its
    ``thoughtSignature``, the whole arguments: Gemini sends a call whole) with
    ``finishReason`` ``STOP`` and the whole usage.  Each earlier chunk carries the running
    ``usageMetadata`` (the prompt's tokens), as Gemini's do."""
    r, a = parse_reasoning(model), parse_args(model)
    inp, _, _ = usage_for(n, a)
    running = {"promptTokenCount": inp, "totalTokenCount": inp}
    steps = [b""]
    steps += [_sse(_gem_chunk(model, [{"text": chunk_text(i), "thought": True}], running)) for i in range(r)]
    steps += [_sse(_gem_chunk(model, [{"text": chunk_text(i)}], running)) for i in range(n)]
    steps.append(_sse(_gem_chunk(model, [_gem_call_part(a)], _gem_usage(n, a), "STOP")))
    return steps


# ---------------------------------------------------------------------------- HTTP
def _chunked(step: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(step), step)


_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
)
_CHUNK_END = b"0\r\n\r\n"


# a hosted API's head lines besides its content headers (module docstring, ``hosted``)
HOSTED_HEADERS = b"".join(
    line + b"\r\n"
    for line in (
        b"Date: Mon, 30 Nov 2026 19:00:00 GMT",
        b"Connection: keep-alive",
        b"access-control-expose-headers: X-Request-ID",
        b"openai-organization: user-abcdefghijklmnopqrstuvwx",
        b"openai-processing-ms: 123",
        b"openai-project: proj_abcdefghijklmnopqrstuvwx",
        b"openai-version: 2020-10-01",
        b"x-ratelimit-limit-requests: 10000",
        b"x-ratelimit-limit-tokens: 30000000",
        b"x-ratelimit-remaining-requests: 9999",
        b"x-ratelimit-remaining-tokens: 29999456",
        b"x-ratelimit-reset-requests: 6ms",
        b"x-ratelimit-reset-tokens: 0s",
        b"x-request-id: req_0123456789abcdef0123456789abcdef",
        b"strict-transport-security: max-age=31536000; includeSubDomains; preload",
        b"cf-cache-status: DYNAMIC",
        b"set-cookie: __cf_bm=abcdefghijklmnopqrstuvwxyz0123456789-1732993200-1.0.1.1-abcdefghijklmnop; "
        b"path=/; expires=Mon, 30-Nov-26 19:30:00 GMT; domain=.api.openai.com; HttpOnly; Secure; SameSite=None",
        b"X-Content-Type-Options: nosniff",
        b"Server: cloudflare",
        b"CF-RAY: 8ea1b2c3d4e5f6a7-SJC",
    )
)


def _json_response(status: int, body: bytes, reason: str = "OK", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %d %b\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%b\r\n%b" % (
        status,
        reason.encode(),
        len(body),
        extra,
        body,
    )


class _Answer:
    """Prebuilt bytes for one (endpoint, model, stream)."""

    __slots__ = ("whole", "steps", "delay", "relative")

    def __init__(self, whole: bytes, steps: list[bytes] | None, delay: float, relative: bool = False) -> None:
        self.whole = whole  # the full HTTP response (used when delay == 0)
        self.steps = steps  # [head+chunk0, chunk1, …, last chunk + terminator] if streaming
        self.delay = delay
        self.relative = relative  # sleep `delay` after each write (else an absolute schedule)


_CACHE: dict[tuple[str, str, bool], _Answer] = {}

# ``python -m bench.timeline``'s stamps of this side, when BENCH_UPSTREAM_STAMPS names a
# file: per paced answer, the proxy's port (this side's peer), when the request was read
# and when step 1 (the first text, for the timeline's models) was written, on the clock of
# ``time.monotonic`` (``time.perf_counter``'s on Linux); written to the file at exit
STAMPS_ENV = "BENCH_UPSTREAM_STAMPS"
_STAMPS: list[dict[str, float]] | None = [] if os.environ.get(STAMPS_ENV) else None


_STEPS = {"chat": chat_steps, "responses": responses_steps, "messages": messages_steps, "gemini": gemini_steps}
_WHOLE = {"chat": chat_json, "responses": responses_json, "messages": messages_json, "gemini": gemini_json}


def _build(kind: str, model: str, stream: bool) -> _Answer:
    n, delay = parse_model(model)
    extra = HOSTED_HEADERS if _HOSTED.search(model) else b""
    if stream:
        raw = _STEPS[kind](model, n)
        paced_tail, relative = parse_pacing(model)
        if paced_tail and not parse_args(model) and kind in _TAIL_GROUPS:
            raw = raw[:-1] + _tail_steps(raw[-1], kind)
        steps = [_chunked(s) if s else b"" for s in raw]  # (an empty step: the head alone)
        steps[0] = _STREAM_HEAD[:-2] + extra + b"\r\n" + steps[0]
        steps[-1] = steps[-1] + _CHUNK_END
        return _Answer(b"".join(steps), steps, delay, relative)
    obj = _WHOLE[kind](model, n)
    return _Answer(_json_response(200, orjson.dumps(obj), extra=extra), None, delay)


# events of the tail per paced step (module docstring, ``pt``)
_TAIL_GROUPS = {"chat": (1, 1, 1, 1, 3), "responses": (4, 1, 1, 1, 3), "messages": (2, 1, 1, 1, 3)}


def _tail_steps(tail: bytes, kind: str) -> list[bytes]:
    events = [e + b"\n\n" for e in tail.split(b"\n\n") if e]
    out, i = [], 0
    for k in _TAIL_GROUPS[kind]:
        out.append(b"".join(events[i : i + k]))
        i += k
    return out


def answer_for(kind: str, model: str, stream: bool) -> _Answer:
    key = (kind, model, stream)
    a = _CACHE.get(key)
    if a is None:
        if len(_CACHE) > 4096:
            _CACHE.clear()
        a = _CACHE[key] = _build(kind, model, stream)
    return a


_NOT_FOUND = _json_response(404, b'{"error":{"message":"not found","type":"invalid_request_error"}}', "Not Found")
_BAD = _json_response(400, b'{"error":{"message":"bad request body","type":"invalid_request_error"}}', "Bad Request")
_HEALTH = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok"


class FakeUpstream(asyncio.Protocol):
    """One connection.  Requests on a connection are answered in order (no pipelining).

    ``stats`` counts connections accepted and model requests answered (``GET /stats``), so
    the bench can tell whether a proxy reuses its upstream connections.
    """

    stats = {"connections": 0, "requests": 0}

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.busy: asyncio.Task | None = None
        self.pending: list[tuple[bytes, bytes, bytes]] = []

    # asyncio.Protocol
    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        FakeUpstream.stats["connections"] += 1

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # pragma: no cover
            self.transport.close()
        except httptools.HttpParserError:
            self.transport.write(_BAD)
            self.transport.close()

    def connection_lost(self, exc) -> None:
        if self.busy is not None:
            self.busy.cancel()
        self.transport = None

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.url = b""
        self.body = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        method = self.parser.get_method()
        item = (method, self.url, b"".join(self.body))
        if self.busy is not None:
            self.pending.append(item)
        else:
            self._handle(*item)

    def _handle(self, method: bytes, url: bytes, body: bytes) -> None:
        t = self.transport
        if t is None:
            return
        path = url.split(b"?", 1)[0]
        gemini = b"/models/" in path and path.endswith((b":generateContent", b":streamGenerateContent"))
        if gemini:
            kind = "gemini"
        elif path.endswith(b"/chat/completions"):
            kind = "chat"
        elif path.endswith(b"/responses"):
            kind = "responses"
        elif path.endswith(b"/messages"):
            kind = "messages"
        elif path.endswith((b"/healthz", b"/readyz")):
            t.write(_HEALTH)
            return
        elif path == b"/stats":
            t.write(_json_response(200, orjson.dumps(FakeUpstream.stats)))
            return
        else:
            t.write(_NOT_FOUND)
            return
        if method != b"POST":
            t.write(_NOT_FOUND)
            return
        try:
            req = orjson.loads(body)
            if gemini:  # the model and the stream are the path's
                head, _, method = path.rpartition(b":")
                model = head.rpartition(b"/models/")[2].decode() or "bench"
                stream = method == b"streamGenerateContent"
                if not isinstance(req, dict):
                    raise AttributeError
            else:
                model = str(req.get("model") or "bench")
                stream = bool(req.get("stream"))
        except (orjson.JSONDecodeError, AttributeError, UnicodeDecodeError):
            t.write(_BAD)
            return
        FakeUpstream.stats["requests"] += 1
        a = answer_for(kind, model, stream)
        if a.delay <= 0:
            t.write(a.whole)
            return
        t0 = time.monotonic_ns()
        stamp = None
        if _STAMPS is not None:
            stamp = {"peer": t.get_extra_info("peername")[1], "upstream read": t0 / 1e9}
            _STAMPS.append(stamp)
        self.busy = asyncio.get_running_loop().create_task(self._paced(a, t0, stamp))

    async def _paced(self, a: _Answer, t0: int, stamp: dict[str, float] | None = None) -> None:
        """Write ``a``'s steps on their schedule from ``t0`` (``time.monotonic_ns()`` when the
        request was read), to the microsecond (``bench/clock.py``); ``stamp``: where step 1's
        write time goes (``_STAMPS``)."""
        clock = Deadlines(asyncio.get_running_loop())
        step_ns = round(a.delay * 1e9)
        try:
            if a.steps is None:  # JSON answer after the whole stream's worth of time
                await clock.until(t0 + 2 * step_ns)
                if self.transport is not None:
                    self.transport.write(a.whole)
            else:
                due = t0
                for i, step in enumerate(a.steps):
                    if i:
                        due = (time.monotonic_ns() if a.relative else due) + step_ns
                        await clock.until(due)
                    if self.transport is None:
                        return
                    if i == 1 and stamp is not None:
                        # before the write: once written the proxy, on the other core, may
                        # read it before this process stamps anything after the write
                        stamp["upstream text"] = time.monotonic()
                    self.transport.write(step)
        finally:
            clock.close()
            self.busy = None
        if self.pending and self.transport is not None:
            self._handle(*self.pending.pop(0))


async def serve(host: str = "127.0.0.1", port: int = 0) -> asyncio.AbstractServer:
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError("the fake upstream listens on loopback only")
    loop = asyncio.get_running_loop()
    return await loop.create_server(FakeUpstream, host, port, backlog=4096, reuse_address=True)


async def _main(host: str, port: int) -> None:
    server = await serve(host, port)
    real_port = server.sockets[0].getsockname()[1]
    print(f"READY {real_port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()
    if _STAMPS is not None:
        with open(os.environ[STAMPS_ENV], "w") as f:
            f.writelines(orjson.dumps(r).decode() + "\n" for r in _STAMPS)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        import uvloop

        uvloop.run(_main(args.host, args.port))
    except ImportError:  # pragma: no cover
        asyncio.run(_main(args.host, args.port))


if __name__ == "__main__":
    sys.exit(main())
