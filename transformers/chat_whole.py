"""A Chat upstream's plain whole answer to a Chat client, without the stream machines.

Theory of operation
-------------------
A non-streamed answer goes through the same machines as a stream (``bridge.py``): the
upstream's ``chat.completion`` is cut into the chunks it stands for
(``completion_chunks``), decoded, encoded as the client's chunks, and those chunks are
folded back into one object (``completion_from_chunks``).  For the commonest answer, text
and tool calls with their ids and names, a finish reason and the usage, that round trip
changes nothing but the shape, at ~200 Python calls an answer.  ``plain_completion(obj,
ctx)`` writes the object that round trip gives, straight from ``obj``, when ``obj`` is
*plain*; for anything else it returns ``None`` and the caller takes the machines.
``chat_chat`` is its ``Straight``: the answer with what the Bridge keeps of it (terminal,
usage, output characters), the Chat row's writer for a Chat upstream.  The Bridge asks a
row's writer only with no tool stage (it can change the answer); ``read_plain`` declines
under the ``inline_think`` quirk (it can too).  ``read_plain`` is the reading alone, which
``gemini_whole.py`` writes for a Gemini client.  An answer is plain when every row holds:

========================================  ================================================
in ``obj``                                why (what the machines would do otherwise)
========================================  ================================================
no truthy ``error``                       an error object fails the answer
``id`` a string starting ``chatcmpl``     any other id is replaced by a minted one
``created`` an integer (not a bool),      any other type is dropped (a repair) and the
``model`` a string or null                time or the public name stands in
``choices`` a non-empty array whose       anything else is ``upstream_bad_response``, or
first entry is an object with an object   an empty message answered as ``stop``
``message`` and no ``usage`` of its own   (Moonshot's per-choice usage wins: a repair
                                          when it is not an object)
``finish_reason`` null (``stop``) or a    an empty one is a truncated answer, another type
non-empty string                          a repair
``content`` a string or null              content parts are joined (the machines' rule)
no refusal or legacy ``function_call``    each has its own rules (joined content parts,
(each null or absent)                     the legacy call's repair)
``tool_calls`` null or an array of        a call without a name is dropped (a repair), a
objects, each with a non-empty string     numeric id is stringified, two calls with one
``id`` of its own and a ``function``      id are one call, non-string arguments are
object with a non-empty string ``name``   written as JSON (a repair)
and string or null ``arguments``, and    (``extra_content``: a thought signature is
no ``extra_content``                      sealed for the client, thought_signatures.py)
``usage`` null or an object               any other type is dropped (a repair)
========================================  ================================================

The object then is the encoder's: the upstream's ``id`` and ``created``, the public model
name (else the upstream's), one choice whose message has ``content`` (null when empty),
``refusal: null``, ``annotations: []``, the reasoning (``reasoning_keys.reasoning_text``,
the decoder's rule) under ``reasoning_content`` and, with ``reasoning_key_reasoning``,
``reasoning`` too, and the calls in their order (``type: function``),
the finish reason ``finish_reason`` gives (``tool_calls`` when there are calls, ``length``
and ``content_filter`` as they came), ``logprobs: null``, and the usage through
``from_chat`` and ``to_chat`` (their own repairs recorded as the machines record them).
``tests/unit/test_chat_whole.py`` holds it to the machines' answer, bytes and repairs, on
generated answers of every shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .chat_decode import FINISH_REASONS
from .chat_encode import finish_reason
from .context import Ctx
from .reasoning_keys import reasoning_text, upstream_key
from .usage import from_chat, to_chat
from .vocab import FinishStatus

__all__ = ["Plain", "Straight", "chat_chat", "plain_completion", "read_plain"]

_COMPLETED: tuple[FinishStatus, str | None] = ("completed", None)
# message fields with rules of their own: a plain answer has each null or absent
_OTHER = ("refusal", "function_call")
# the message keys reasoning comes under (``reasoning_keys.reasoning_text``)
_REASONING = ("reasoning_content", "reasoning", "reasoning_details")


@dataclass(slots=True)
class Straight:
    """A plain whole answer written straight for the client, and what the Bridge keeps of it."""

    result: dict[str, Any]  # the client's answer object
    terminal: str  # completed | incomplete
    usage: dict[str, Any] | None  # the upstream's usage (Responses shape), when it sent one
    chars: int  # characters of output: text, reasoning, tool call arguments


@dataclass(slots=True)
class Plain:
    """A plain ``chat.completion`` as the decoder reads it."""

    rid: str
    created: int
    model: str | None
    content: str | None
    reasoning: str | None  # ``reasoning_text`` of the message
    calls: list[tuple[str, str, str]]  # (id, name, arguments) in order
    status: FinishStatus
    reason: str | None
    usage: Any  # the object's ``usage``: null or an object


def read_plain(obj: dict[str, Any], ctx: Ctx) -> Plain | None:
    """The upstream's ``obj`` read, when it is plain (the table above); ``None`` otherwise."""
    if obj.get("error") or ctx.on("inline_think"):
        return None
    rid = obj.get("id")
    created = obj.get("created")
    model = obj.get("model")
    if rid.__class__ is not str or not rid.startswith("chatcmpl") or created.__class__ is not int:
        return None
    if model is not None and model.__class__ is not str:
        return None
    choices = obj.get("choices")
    if choices.__class__ is not list or not choices:
        return None
    choice = choices[0]
    if choice.__class__ is not dict or choice.get("usage") is not None:
        return None
    msg = choice.get("message")
    if msg.__class__ is not dict:
        return None
    fr = choice.get("finish_reason")  # null: the object is whole, ``stop``
    if fr is not None and (fr.__class__ is not str or not fr):
        return None
    content = msg.get("content")
    if content is not None and content.__class__ is not str:
        return None
    for k in _OTHER:
        if msg.get(k) is not None:
            return None
    calls: list[tuple[str, str, str]] = []
    tcs = msg.get("tool_calls")
    if tcs is not None:
        if tcs.__class__ is not list:
            return None
        seen: set[str] = set()
        for tc in tcs:
            if tc.__class__ is not dict:
                return None
            cid = tc.get("id")
            fn = tc.get("function")
            if cid.__class__ is not str or not cid or cid in seen or fn.__class__ is not dict or "extra_content" in tc:
                return None
            name = fn.get("name")
            args = fn.get("arguments")
            if name.__class__ is not str or not name:
                return None
            if args is None:
                args = ""
            elif args.__class__ is not str:
                return None
            seen.add(cid)
            calls.append((cid, name, args))
    u = obj.get("usage")
    if u is not None and u.__class__ is not dict:
        return None
    status, reason = FINISH_REASONS.get(fr, _COMPLETED) if fr else _COMPLETED
    reasoning = None
    for k in _REASONING:
        if k in msg:
            reasoning = reasoning_text(msg)
            break
    return Plain(rid, created, model, content, reasoning, calls, status, reason, u)


def plain_completion(obj: dict[str, Any], ctx: Ctx) -> dict[str, Any] | None:
    """The Chat client's ``chat.completion`` for the upstream's ``obj`` when it is plain (the
    table above); ``None`` otherwise."""
    p = read_plain(obj, ctx)
    return None if p is None else _completion(p, from_chat(p.usage, ctx), ctx)


def _completion(p: Plain, usage: dict[str, Any], ctx: Ctx) -> dict[str, Any]:
    """The ``chat.completion`` of ``p``, ``usage`` its usage as ``from_chat`` reads it."""
    calls = p.calls
    message: dict[str, Any] = {
        "role": "assistant",
        "content": p.content or None,
        "refusal": None,
        "annotations": [],
    }
    r = p.reasoning
    if r:
        message["reasoning_content"] = r
        if upstream_key(ctx) == "reasoning":
            message["reasoning"] = r
    if calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}} for cid, name, args in calls
        ]
    return {
        "id": p.rid,
        "object": "chat.completion",
        "created": p.created,
        "model": ctx.public_model or p.model or "",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason(p.status, p.reason, bool(calls)),
                "logprobs": None,
            }
        ],
        "usage": to_chat(usage),  # (null and {} read as no usage: zeros)
    }


def chat_chat(obj: dict[str, Any], ctx: Ctx) -> Straight | None:
    """``plain_completion`` as a ``Straight``: the upstream's usage when it sent one, the
    output characters of the client's message."""
    p = read_plain(obj, ctx)
    if p is None:
        return None
    u = p.usage
    usage = from_chat(u, ctx)
    result = _completion(p, usage, ctx)
    chars = len(p.content or "") + len(p.reasoning or "")
    for call in p.calls:
        chars += len(call[2])
    fr = result["choices"][0]["finish_reason"]
    terminal = "incomplete" if fr == "length" or fr == "content_filter" else "completed"
    return Straight(result, terminal, usage if u.__class__ is dict and u else None, chars)
