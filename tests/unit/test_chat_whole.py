"""A Chat upstream's plain whole answer to a Chat client (``transformers/chat_whole.py``)
gives the client the very answer the machines give: the same bytes, status or error,
terminal, stored object, usage, output characters and repairs, for generated answers of
every shape (plain or not, well-formed or not), with and without the quirks and the tool
stage that keep the Bridge from asking; and the answers real upstreams send take it."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import types
from collections.abc import Iterator
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformers import bridge as bridge_mod
from transformers import chat_encode, ids
from transformers.bridge import AnswerError, open_bridge
from transformers.chat_whole import plain_completion
from transformers.context import Ctx


@contextlib.contextmanager
def _fixed() -> Iterator[None]:
    """Minted ids counted and the clock stopped: both runs of an answer mint the same."""
    n = itertools.count()
    with (
        mock.patch.object(ids, "_random", lambda k: next(n).to_bytes(k, "big")),
        mock.patch.object(ids, "_now_ns", lambda: 0),
        mock.patch.object(chat_encode, "time", types.SimpleNamespace(time=lambda: 1_800_000_000.5)),
    ):
        yield


def _body(tools: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "pub", "stream": False, "messages": [{"role": "user", "content": "hi"}]}
    if tools:  # a one-string-parameter apply_patch: the stage's wrap with mimo_raw_patch
        one = {"type": "object", "properties": {"patch": {"type": "string"}}, "required": ["patch"]}
        body["tools"] = [
            {"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "apply_patch", "parameters": one}},
        ]
    return body


def _answer(obj: Any, quirks: frozenset[str], public: str, tools: bool, shortcut: bool) -> tuple[Any, ...]:
    """What the client gets for the upstream's answer ``obj``, and what the Bridge keeps."""
    ctx = Ctx(quirks=quirks, upstream_model="up", public_model=public)
    # without the shortcut: the Chat row without its straight writers
    off = (
        contextlib.nullcontext()
        if shortcut
        else mock.patch.dict(bridge_mod.SPECS, {"chat": dataclasses.replace(bridge_mod.SPECS["chat"], straight=())})
    )
    with _fixed(), off:
        _, bridge = open_bridge(_body(tools), "chat", "chat", ctx)
        try:
            status, out = bridge.complete(copy.deepcopy(obj))
            got: tuple[Any, ...] = ("ok", status, out)
        except AnswerError as e:
            got = ("error", e.error, e.bad)
    return got, bridge.terminal, list(ctx.repairs), bridge._result, bridge.usage, bridge.chars


def _same(obj: Any, quirks: frozenset[str] = frozenset(), public: str = "pub", tools: bool = False) -> None:
    assert _answer(obj, quirks, public, tools, True) == _answer(obj, quirks, public, tools, False)


_str = st.sampled_from(["hi", "", "é東京 🧑‍💻", '"\\\n\x00</think>', "<think>a</think>b"])
_odd = st.sampled_from([None, 0, 3, 1.5, True, [], {}, ["x"], {"a": 1}])
_content = st.one_of(
    _str, _odd, st.text(max_size=4), st.lists(st.sampled_from([{"type": "text", "text": "a"}, "x"]), max_size=2)
)
_function = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.sampled_from(["shell", "apply_patch", "mcp__gh__get_me", ""]), _odd),
        "arguments": st.one_of(st.sampled_from(['{"cmd":"ls"}', "", "{", '{"patch":"*** Begin"}']), _odd),
    },
)
_call = st.fixed_dictionaries(
    {},
    optional={
        "id": st.one_of(st.sampled_from(["call_1", "call_2", "call_1", "", "x y"]), _odd),
        "type": st.sampled_from(["function", "custom"]),
        "function": st.one_of(_function, _odd),
        "index": st.one_of(st.integers(0, 2), _odd),
    },
)
_count = st.one_of(st.integers(0, 5000), _odd, st.just(2**64), st.just(-1), st.just(7.0))
_usage = st.one_of(
    _odd,
    st.fixed_dictionaries(
        {},
        optional={
            "prompt_tokens": _count,
            "completion_tokens": _count,
            "total_tokens": _count,
            "prompt_tokens_details": st.one_of(_odd, st.fixed_dictionaries({}, optional={"cached_tokens": _count})),
            "completion_tokens_details": st.one_of(
                _odd, st.fixed_dictionaries({}, optional={"reasoning_tokens": _count})
            ),
            "prompt_cache_hit_tokens": _count,
        },
    ),
)
_message = st.fixed_dictionaries(
    {"role": st.just("assistant")},
    optional={
        "content": _content,
        "tool_calls": st.one_of(_odd, st.lists(st.one_of(_call, _odd), max_size=3), st.lists(_call, max_size=3)),
        "reasoning_content": st.one_of(_str, _odd),
        "reasoning": st.one_of(_str, _odd),
        "reasoning_details": st.one_of(_odd, st.just([{"type": "reasoning.text", "text": "r"}])),
        "refusal": st.one_of(_str, _odd),
        "function_call": st.one_of(_odd, st.just({"name": "shell", "arguments": "{}"})),
        "annotations": st.just([]),
    },
)
_finish = st.one_of(
    st.sampled_from(["stop", "tool_calls", "length", "content_filter", "function_call", "eos", ""]), _odd
)
_choice = st.fixed_dictionaries(
    {"index": st.just(0)},
    optional={
        "message": st.one_of(_message, _odd),
        "finish_reason": _finish,
        "usage": st.one_of(st.none(), _usage),
        "logprobs": st.none(),
    },
)
_generic = st.fixed_dictionaries(
    {"object": st.just("chat.completion")},
    optional={
        "id": st.one_of(st.sampled_from(["chatcmpl-abc", "chatcmpl", "cmpl-1", ""]), _odd),
        "created": st.one_of(st.sampled_from([1_700_000_000, 0]), _odd),
        "model": st.one_of(st.sampled_from(["up-model", ""]), _odd),
        "choices": st.one_of(st.lists(st.one_of(_choice, _odd), max_size=2), st.lists(_choice, min_size=1, max_size=2)),
        "usage": _usage,
        "error": st.sampled_from([None, "", {}, {"message": "boom", "code": "x"}, "bad"]),
        "system_fingerprint": st.just("fp_1"),
    },
)


@st.composite
def _plain(draw: st.DrawFn) -> dict[str, Any]:
    """An answer the shortcut takes: its every field of a plain kind (the counts inside the
    usage may still be odd: ``from_chat``'s own rule, in both ways)."""
    n = draw(st.integers(0, 3))
    calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {
                "name": draw(st.sampled_from(["shell", "apply_patch", "mcp__gh__get_me"])),
                **draw(
                    st.fixed_dictionaries({}, optional={"arguments": st.one_of(st.none(), _str, st.text(max_size=4))})
                ),
            },
            **draw(st.fixed_dictionaries({}, optional={"index": st.integers(0, 2)})),
        }
        for i in range(n)
    ]
    message = draw(
        st.fixed_dictionaries(
            {"role": st.just("assistant")},
            optional={
                "content": st.one_of(st.none(), _str, st.text(max_size=4)),
                "tool_calls": st.just(calls) if calls else st.sampled_from([None, []]),
                "reasoning_content": st.one_of(st.none(), _str, _odd),
                "reasoning": st.one_of(st.none(), _str, _odd),
                "reasoning_details": st.one_of(_odd, st.just([{"type": "reasoning.text", "text": "r"}])),
                "refusal": st.none(),
                "function_call": st.none(),
                "annotations": st.just([]),
            },
        )
    )
    choice = draw(
        st.fixed_dictionaries(
            {"index": st.just(0), "message": st.just(message)},
            optional={
                "finish_reason": st.one_of(
                    st.none(),
                    st.sampled_from(["stop", "tool_calls", "length", "content_filter", "function_call", "eos"]),
                ),
                "usage": st.none(),
                "logprobs": st.none(),
            },
        )
    )
    return draw(
        st.fixed_dictionaries(
            {
                "id": st.sampled_from(["chatcmpl-abc", "chatcmpl"]),
                "object": st.just("chat.completion"),
                "created": st.sampled_from([1_700_000_000, 0, 2**64]),
                "choices": st.just([choice]) | st.just([choice, choice]),
            },
            optional={
                "model": st.sampled_from(["up-model", "", None]),
                "usage": st.one_of(st.none(), st.just({}), _usage.filter(lambda u: u.__class__ is dict)),
                "error": st.sampled_from([None, "", {}]),
                "system_fingerprint": st.just("fp_1"),
            },
        )
    )


# where a plain answer can be made not plain (or kept plain): a path into it, and a value
_PATHS = [
    ("error",),
    ("id",),
    ("created",),
    ("model",),
    ("usage",),
    ("choices",),
    ("choices", 0),
    ("choices", 0, "finish_reason"),
    ("choices", 0, "usage"),
    ("choices", 0, "message"),
    ("choices", 0, "message", "content"),
    ("choices", 0, "message", "refusal"),
    ("choices", 0, "message", "function_call"),
    ("choices", 0, "message", "tool_calls"),
    ("choices", 0, "message", "tool_calls", 0),
    ("choices", 0, "message", "tool_calls", 0, "id"),
    ("choices", 0, "message", "tool_calls", 0, "function"),
    ("choices", 0, "message", "tool_calls", 0, "function", "name"),
    ("choices", 0, "message", "tool_calls", 0, "function", "arguments"),
    ("choices", 0, "message", "tool_calls", 1, "id"),
]


@st.composite
def _changed(draw: st.DrawFn) -> dict[str, Any]:
    """A plain answer with one or two of its fields changed to anything."""
    obj = draw(_plain())
    for _ in range(draw(st.integers(1, 2))):
        path = draw(st.sampled_from(_PATHS))
        value = draw(st.one_of(_odd, _str, st.sampled_from(["call_0", "call_1", "stop", "length", "chatcmpl-x"])))
        at: Any = obj
        try:
            for k in path[:-1]:
                at = at[k]
            at[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            pass
    return obj


_answer_obj = st.one_of(_plain(), _changed(), _generic)
_quirks = st.sets(st.sampled_from(["reasoning_key_reasoning", "inline_think", "mimo_raw_patch"])).map(frozenset)


@settings(max_examples=600, deadline=None)
@given(obj=_answer_obj, quirks=_quirks, public=st.sampled_from(["pub", ""]), tools=st.booleans())
def test_any_answer_same_as_the_machines(obj: dict[str, Any], quirks: frozenset[str], public: str, tools: bool) -> None:
    _same(obj, quirks, public, tools)


_OPENAI: dict[str, Any] = {
    "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    "object": "chat.completion",
    "created": 1741570283,
    "model": "gpt-4o-2024-08-06",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello!", "refusal": None, "annotations": []},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 1117,
        "completion_tokens": 46,
        "total_tokens": 1163,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    },
    "service_tier": "default",
    "system_fingerprint": "fp_fc9f1d7035",
}
_CALLS: list[dict[str, Any]] = [
    {"id": "call_abc", "type": "function", "function": {"name": "shell", "arguments": '{"command":["ls"]}'}},
    {"id": "call_def", "type": "function", "function": {"name": "read", "arguments": ""}},
]
_VLLM: dict[str, Any] = {
    "id": "chatcmpl-9f1e",
    "object": "chat.completion",
    "created": 1752000000,
    "model": "moonshotai/Kimi-K2-Instruct",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "reasoning_content": None, "content": None, "tool_calls": _CALLS},
            "logprobs": None,
            "finish_reason": "tool_calls",
            "stop_reason": None,
        }
    ],
    "usage": {"prompt_tokens": 10, "total_tokens": 30, "completion_tokens": 20, "prompt_tokens_details": None},
    "prompt_logprobs": None,
}
_DEEPSEEK: dict[str, Any] = {
    "id": "chatcmpl-5d2",
    "object": "chat.completion",
    "created": 1752000001,
    "model": "deepseek-reasoner",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "4", "reasoning_content": "2+2 is 4"},
            "logprobs": None,
            "finish_reason": "length",
        }
    ],
    "usage": {
        "prompt_tokens": 9,
        "completion_tokens": 90,
        "total_tokens": 99,
        "prompt_cache_hit_tokens": 0,
        "prompt_cache_miss_tokens": 9,
        "completion_tokens_details": {"reasoning_tokens": 80},
    },
}


@pytest.mark.parametrize("obj", [_OPENAI, _VLLM, _DEEPSEEK], ids=["openai", "vllm-calls", "deepseek-reasoning"])
@pytest.mark.parametrize("quirks", [frozenset(), frozenset({"reasoning_key_reasoning"})], ids=["", "reasoning-key"])
def test_real_answers_take_it(obj: dict[str, Any], quirks: frozenset[str]) -> None:
    ctx = Ctx(quirks=quirks, public_model="pub")
    assert plain_completion(copy.deepcopy(obj), ctx) is not None
    _same(obj, quirks)
    got = orjson.loads(_answer(obj, quirks, "pub", False, True)[0][2])
    assert got["id"] == obj["id"] and got["model"] == "pub"


def test_the_answer() -> None:
    """What the shortcut writes, spelled out once (the property above holds it to the
    machines everywhere else)."""
    obj = copy.deepcopy(_VLLM)
    obj["choices"][0]["message"]["reasoning_content"] = "think"
    obj["choices"][0]["message"]["content"] = ""
    got = plain_completion(obj, Ctx(quirks=frozenset({"reasoning_key_reasoning"}), public_model=""))
    assert got == {
        "id": "chatcmpl-9f1e",
        "object": "chat.completion",
        "created": 1752000000,
        "model": "moonshotai/Kimi-K2-Instruct",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "refusal": None,
                    "annotations": [],
                    "reasoning_content": "think",
                    "reasoning": "think",
                    "tool_calls": _CALLS,
                },
                "finish_reason": "tool_calls",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 20,
            "total_tokens": 30,
            "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    }


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("error", {"message": "boom"}),
        ("id", "cmpl-1"),
        ("id", None),
        ("created", None),
        ("created", True),
        ("model", 3),
        ("choices", []),
        ("choice.usage", {"prompt_tokens": 1}),
        ("message", None),
        ("finish_reason", ""),
        ("finish_reason", 3),
        ("content", [{"type": "text", "text": "a"}]),
        ("refusal", "no"),
        ("function_call", {"name": "shell", "arguments": "{}"}),
        ("tool_calls", "x"),
        ("call.id", None),
        ("call.id", ""),
        ("call.id", 7),
        ("call.id", "call_abc"),  # the first call's: one call
        ("call.name", ""),
        ("call.arguments", {"a": 1}),
        ("usage", "x"),
    ],
)
def test_what_is_not_plain(where: str, value: Any) -> None:
    """Each row of the module's table: the machines answer (and the answer is the same)."""
    obj = copy.deepcopy(_VLLM)
    choice = obj["choices"][0]
    msg = choice["message"]
    call = msg["tool_calls"][1]
    if where == "choice.usage":
        choice["usage"] = value
    elif where in ("finish_reason", "message"):
        choice[where] = value
    elif where in ("content", "refusal", "function_call", "tool_calls"):
        msg[where] = value
    elif where.startswith("call."):
        key = where[5:]
        (call if key == "id" else call["function"])[key] = value
    else:
        obj[where] = value
    assert plain_completion(copy.deepcopy(obj), Ctx(public_model="pub")) is None
    _same(obj)
