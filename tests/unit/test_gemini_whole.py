"""A plain whole answer in a direction that touches Gemini's own API
(``transformers/gemini_whole.py``: Gemini → Gemini, a Chat upstream to a Gemini client, a
Gemini upstream to a Chat client) gives the client the very answer the machines give: the
same bytes or error, terminal, stored object, usage, output characters and repairs, for
generated answers of every shape, plain or not; and the answers real upstreams send, as the
bench's, take it."""

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

from bench.fake_upstream import chat_json, gemini_json
from tests.unit.test_chat_whole import _answer_obj
from transformers import bridge as bridge_mod
from transformers import chat_encode, gemini_whole, ids
from transformers.bridge import AnswerError, open_bridge
from transformers.context import Ctx
from transformers.protocols import SPECS

_BODIES: dict[str, dict[str, Any]] = {
    "gemini": {"model": "pub", "stream": False, "contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
    "chat": {"model": "pub", "stream": False, "messages": [{"role": "user", "content": "hi"}]},
}
_KEY = b"k" * 32


@contextlib.contextmanager
def _fixed() -> Iterator[None]:
    """Minted ids counted and the clock stopped: both runs of an answer mint the same."""
    n = itertools.count()
    clock = types.SimpleNamespace(time=lambda: 1_800_000_000.5)
    with (
        mock.patch.object(ids, "_random", lambda k: next(n).to_bytes(k, "big")),
        mock.patch.object(ids, "_now_ns", lambda: 0),
        mock.patch.object(chat_encode, "time", clock),
        mock.patch.object(gemini_whole, "time", clock),
    ):
        yield


def _answer(client: str, upstream: str, obj: Any, ctx_args: dict[str, Any], shortcut: bool) -> tuple[Any, ...]:
    """What the client gets for the upstream's answer ``obj``, and what the Bridge keeps."""
    ctx = Ctx(upstream_model="up", **ctx_args)
    # without the shortcut: the client's row without its straight writers
    off = (
        contextlib.nullcontext()
        if shortcut
        else mock.patch.dict(bridge_mod.SPECS, {client: dataclasses.replace(SPECS[client], straight=())})
    )
    with _fixed(), off:
        _, bridge = open_bridge(copy.deepcopy(_BODIES[client]), client, upstream, ctx)
        try:
            status, out = bridge.complete(copy.deepcopy(obj))
            got: tuple[Any, ...] = ("ok", status, out)
        except AnswerError as e:
            got = ("error", e.error, e.bad)
    return got, bridge.terminal, list(ctx.repairs), bridge._result, bridge.usage, bridge.chars


def _same(client: str, upstream: str, obj: Any, **ctx_args: Any) -> tuple[Any, ...]:
    got = _answer(client, upstream, obj, ctx_args, True)
    assert got == _answer(client, upstream, obj, ctx_args, False)
    return got


# -- Gemini answers ---------------------------------------------------------------------------

_str = st.sampled_from(["hi", "", "é東京 🧑‍💻", '"\\\n\x00', "%s%%b", " "])
_odd = st.sampled_from([None, 0, 3, 1.5, True, [], {}, ["x"], {"a": 1}, ""])
_value = st.recursive(
    st.one_of(_str, st.integers(-3, 3), st.just(2**64), st.just(-0.0), st.just(1e300), st.none(), st.booleans()),
    lambda inner: st.one_of(st.lists(inner, max_size=2), st.dictionaries(_str, inner, max_size=2)),
    max_leaves=6,
)
_args = st.one_of(st.dictionaries(st.sampled_from(["cmd", "path", "é", ""]), _value, max_size=3), _odd)
_sig = st.one_of(st.sampled_from(["sig-A", "Q2lRQmVu==", "pxy1.x"]), _odd)
_call = st.fixed_dictionaries(
    {},
    optional={
        "id": st.one_of(st.sampled_from(["c1", "c2", "c1", "call_9"]), _odd),
        "name": st.one_of(st.sampled_from(["shell", "read_file", "mcp__gh__get_me"]), _odd),
        "args": _args,
    },
)
_text_part = st.fixed_dictionaries(
    {"text": st.one_of(_str, st.text(max_size=4))},
    optional={"thought": st.sampled_from([True, False, None, 1]), "thoughtSignature": _sig},
)
_call_part = st.fixed_dictionaries({"functionCall": _call}, optional={"thoughtSignature": _sig})
_part = st.one_of(
    _text_part,
    _call_part,
    _odd,
    st.just({"executableCode": {"language": "PYTHON", "code": "1"}}),
    st.fixed_dictionaries({"text": _odd}),
    st.fixed_dictionaries({"functionCall": _odd, "text": _str}),
)
_count = st.one_of(st.integers(0, 5000), _odd, st.just(-1), st.just(7.0), st.just(2**63))
_meta = st.one_of(
    _odd,
    st.fixed_dictionaries(
        {},
        optional={
            k: _count
            for k in (
                "promptTokenCount",
                "candidatesTokenCount",
                "thoughtsTokenCount",
                "cachedContentTokenCount",
                "totalTokenCount",
            )
        },
    ),
)
_reason = st.one_of(
    st.sampled_from(
        [
            "STOP",
            "MAX_TOKENS",
            "SAFETY",
            "RECITATION",
            "SPII",
            "OTHER",
            "MALFORMED_FUNCTION_CALL",
            "",
            "FINISH_REASON_UNSPECIFIED",
        ]
    ),
    _odd,
)
_content = st.fixed_dictionaries(
    {}, optional={"role": st.just("model"), "parts": st.one_of(st.lists(_part, max_size=5), _odd)}
)
_cand = st.fixed_dictionaries(
    {}, optional={"content": st.one_of(_content, _odd), "finishReason": _reason, "index": st.just(0)}
)
_generic = st.fixed_dictionaries(
    {},
    optional={
        "candidates": st.one_of(st.lists(st.one_of(_cand, _odd), max_size=2), st.lists(_cand, min_size=1, max_size=2)),
        "usageMetadata": _meta,
        "modelVersion": st.one_of(st.sampled_from(["gemini-2.5-pro", ""]), _odd),
        "responseId": st.one_of(st.sampled_from(["r-1", "chatcmpl-7", ""]), _odd),
        "error": st.one_of(st.just({"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}), _odd),
        "promptFeedback": st.just({"blockReason": "SAFETY"}),
    },
)


@st.composite
def _plain(draw: st.DrawFn) -> dict[str, Any]:
    """An answer the shortcut takes: one candidate with a finish reason, its parts texts,
    thoughts and named calls (their args, ids and signatures of every kind)."""
    named = st.fixed_dictionaries(
        {"name": st.sampled_from(["shell", "read_file"])},
        optional={"id": st.one_of(st.sampled_from(["c1", "c2", "c1"]), _odd), "args": _args},
    )
    part = st.one_of(
        _text_part, st.fixed_dictionaries({"functionCall": named}, optional={"thoughtSignature": _sig}), _odd
    )
    cand = {
        "content": {"role": "model", "parts": draw(st.lists(part, max_size=6))},
        "finishReason": draw(st.sampled_from(["STOP", "MAX_TOKENS", "SAFETY", "RECITATION", "OTHER"])),
        "index": 0,
    }
    obj: dict[str, Any] = {"candidates": [cand]}
    obj.update(
        draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "usageMetadata": _meta,
                    "modelVersion": st.one_of(st.sampled_from(["gemini-2.5-pro", ""]), _odd),
                    "responseId": st.one_of(st.sampled_from(["r-1", "chatcmpl-7", ""]), _odd),
                },
            )
        )
    )
    return obj


_gem_obj = st.one_of(_plain(), _generic)
_ctx = st.fixed_dictionaries(
    {
        "public_model": st.sampled_from(["pub", ""]),
        "envelope_key": st.sampled_from([b"", _KEY]),
        "quirks": st.sets(st.sampled_from(["reasoning_key_reasoning", "inline_think"])).map(frozenset),
    }
)


@settings(max_examples=500, deadline=None)
@given(obj=_gem_obj, ctx=_ctx)
def test_gemini_to_gemini_same_as_the_machines(obj: dict[str, Any], ctx: dict[str, Any]) -> None:
    _same("gemini", "gemini", obj, **ctx)


@settings(max_examples=500, deadline=None)
@given(obj=_gem_obj, ctx=_ctx)
def test_gemini_upstream_to_chat_same_as_the_machines(obj: dict[str, Any], ctx: dict[str, Any]) -> None:
    _same("chat", "gemini", obj, **ctx)


@settings(max_examples=500, deadline=None)
@given(obj=_answer_obj, ctx=_ctx)
def test_chat_upstream_to_gemini_same_as_the_machines(obj: dict[str, Any], ctx: dict[str, Any]) -> None:
    _same("gemini", "chat", obj, **ctx)


# -- the shortcut is taken where it should be ---------------------------------------------------

_DIRECTIONS = [("gemini", "gemini"), ("chat", "gemini"), ("gemini", "chat")]
_WRITERS = {
    ("gemini", "gemini"): gemini_whole.gemini_gemini,
    ("chat", "gemini"): gemini_whole.gemini_chat,
    ("gemini", "chat"): gemini_whole.chat_gemini,
}


def _bench_answer(upstream: str, model: str) -> dict[str, Any]:
    return gemini_json(model, 20) if upstream == "gemini" else chat_json(model, 20)


@pytest.mark.parametrize(("client", "upstream"), _DIRECTIONS)
@pytest.mark.parametrize("key", [b"", _KEY], ids=["no-key", "key"])
@pytest.mark.parametrize("model", ["bench-gem-n20-d0", "bench-gem-n20-d0-think20"])
def test_the_bench_answers_take_it(client: str, upstream: str, key: bytes, model: str) -> None:
    obj = _bench_answer(upstream, model)
    assert _WRITERS[(client, upstream)](copy.deepcopy(obj), Ctx(public_model="pub", envelope_key=key)) is not None
    _same(client, upstream, obj, public_model="pub", envelope_key=key)


def test_the_rows_name_the_writers() -> None:
    for (client, upstream), write in _WRITERS.items():
        assert (upstream, write) in SPECS[client].straight


def test_a_gemini_answer() -> None:
    obj = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "plan ", "thought": True},
                        {"text": "it", "thought": True},
                        {"text": "Hello"},
                        {"text": " there"},
                        {"functionCall": {"name": "shell", "args": {"cmd": ["ls"]}}, "thoughtSignature": "SIG"},
                        {"functionCall": {"id": "c2", "name": "read", "args": {}}},
                    ],
                },
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 5, "thoughtsTokenCount": 3},
        "modelVersion": "gemini-2.5-pro",
        "responseId": "r-1",
    }
    (_, _, gem), terminal, repairs, _, usage, chars = _same("gemini", "gemini", obj, public_model="pub")
    parts = orjson.loads(gem)["candidates"][0]["content"]["parts"]
    assert parts[:2] == [{"text": "plan it", "thought": True}, {"text": "Hello there"}]
    assert parts[2]["functionCall"]["id"].startswith("gm_") and parts[2]["thoughtSignature"] == "SIG"
    assert parts[3] == {"functionCall": {"id": "c2", "name": "read", "args": {}}}
    assert (terminal, repairs, usage["output_tokens"], chars) == ("completed", [], 8, 34)
    (_, _, chat), terminal, _, _, _, _ = _same("chat", "gemini", obj, public_model="pub")
    msg = orjson.loads(chat)["choices"][0]
    assert msg["finish_reason"] == "tool_calls" and msg["message"]["reasoning_content"] == "plan it"
    assert msg["message"]["tool_calls"][0]["extra_content"] == {"google": {"thought_signature": "SIG"}}


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("error", {"code": 500, "message": "x", "status": "INTERNAL"}),
        ("candidates", []),
        ("finishReason", None),
        ("finishReason", "FINISH_REASON_UNSPECIFIED"),
        ("name", ""),
    ],
)
@pytest.mark.parametrize(("client", "upstream"), [("gemini", "gemini"), ("chat", "gemini")])
def test_what_is_not_plain(where: str, value: Any, client: str, upstream: str) -> None:
    obj = gemini_json("bench-gem-n20-d0", 20)
    if where in ("error", "candidates"):
        obj[where] = value
    elif where == "finishReason":
        obj["candidates"][0][where] = value
    else:
        obj["candidates"][0]["content"]["parts"][-1]["functionCall"][where] = value
    assert _WRITERS[(client, upstream)](copy.deepcopy(obj), Ctx(public_model="pub")) is None
    _same(client, upstream, obj, public_model="pub")


@pytest.mark.parametrize("depth", [240, 249, 250, 253, 260])
@pytest.mark.parametrize(("client", "upstream"), [("gemini", "gemini"), ("chat", "gemini")])
def test_deep_arguments_fail_alike(depth: int, client: str, upstream: str) -> None:
    # arguments nested near the writer's depth limit: written, too deep once wrapped, or too
    # deep to read, the same way with the shortcut as without
    obj = gemini_json("bench-gem-n20-d0", 20)
    deep: Any = 1
    for _ in range(depth):
        deep = {"a": deep}
    obj["candidates"][0]["content"]["parts"][-1]["functionCall"]["args"] = deep
    _same(client, upstream, obj, public_model="pub")
