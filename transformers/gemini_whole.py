"""Plain whole answers to and from Gemini's own API, without the stream machines.

Theory of operation
-------------------
A non-streamed answer goes through the machines of a stream (``bridge.py``): the upstream's
whole object is decoded into the events it stands for, the client's encoder writes them,
and its answer object is what they add up to.  For the commonest answer, text, thoughts and
function calls with a finish reason and the usage, that changes only the shape.  Like
``chat_whole.py`` for Chat → Chat, three writers here give the machines' answer straight
from the upstream's object, in each direction that touches Gemini:

==================  ===============================  =====================================
writer              upstream's object                client's answer
==================  ===============================  =====================================
``gemini_gemini``   ``GenerateContentResponse``      ``GenerateContentResponse``
``chat_gemini``     ``chat.completion``              ``GenerateContentResponse``
``gemini_chat``     ``GenerateContentResponse``      ``chat.completion``
==================  ===============================  =====================================

Each returns a ``Straight`` (the answer, its terminal, the usage and the output characters
the Bridge keeps) or ``None``, and the caller takes the machines.  The rows name them
(``protocols.py``: a client row's ``straight``), and the Bridge asks with no tool stage.  A Chat upstream's object
is read by ``chat_whole.read_plain`` (its table says when it is plain).  A Gemini upstream's
object is read as ``gemini_decode`` reads it, and is plain when:

========================================  ================================================
in the object                             why (what the machines would do otherwise)
========================================  ================================================
no ``error`` key                          an error object fails the answer
``candidates[0]`` an object               else the answer is empty, blocked or truncated
its ``finishReason`` a non-empty string,  else the answer is truncated
not ``FINISH_REASON_UNSPECIFIED``
every ``functionCall`` object has a       a call without one is dropped (a repair)
non-empty string ``name``
========================================  ================================================

Everything else is read as the decoder reads it: parts that are not objects are skipped, a
text part's non-empty string ``text`` is a text or, with ``thought: true``, a thought; a
call's missing id is the decoder's (``minted_id``), its ``args`` JSON (``{}`` when not an
object), its ``thoughtSignature`` kept; a ``usageMetadata`` object is the usage.

The Gemini client's answer is the encoder's (``gemini_encode.py``): parts in order, adjacent
texts of one kind merged, each call's ``thoughtSignature`` as the encoder seals it (the
step's thoughts and the upstream's signature, ``envelope.seal``), the finish reason mapped
back, the usage, the model and a minted response id.  The Chat client's is
``encode_chat_completion``'s (``chat_encode.py``): the id (minted unless the upstream's is a
``chatcmpl`` one), the clock's ``created``, texts and thoughts joined, the calls with their
signatures sealed (``thought_signatures.for_client``), the finish reason and the usage.
``tests/unit/test_gemini_whole.py`` holds each writer to the machines' bytes.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from . import envelope
from .chat_encode import finish_reason
from .chat_whole import Straight, read_plain
from .context import Ctx
from .gemini_decode import FILTERED, minted_id, usage_of
from .gemini_encode import FINISH_REASONS as GEMINI_FINISH
from .gemini_encode import usage_metadata
from .ids import random_hex
from .reasoning_keys import upstream_key
from .thought_signatures import for_client
from .usage import from_chat, normalize_responses, to_chat
from .vocab import FinishStatus

__all__ = ["chat_gemini", "gemini_chat", "gemini_gemini"]

_COMPLETED: tuple[FinishStatus, str | None] = ("completed", None)
_MAX: tuple[FinishStatus, str | None] = ("incomplete", "max_output_tokens")
_FILTER: tuple[FinishStatus, str | None] = ("incomplete", "content_filter")
_ZERO_USAGE = normalize_responses(None)  # (a Chat client's usage when none came)

# a part read off an answer: ("text", text), ("thought", text) or
# ("call", id, name, args object or None, args text, signature or None)
Part = tuple[Any, ...]


class _Read:
    """A plain Gemini answer as the decoder reads it."""

    __slots__ = ("parts", "model", "rid", "usage", "finish", "chars")

    def __init__(
        self,
        parts: list[Part],
        model: str | None,
        rid: str,
        usage: dict[str, Any] | None,
        finish: tuple[FinishStatus, str | None],
        chars: int,
    ) -> None:
        self.parts = parts
        self.model = model
        self.rid = rid
        self.usage = usage
        self.finish = finish
        self.chars = chars


def _read_gemini(obj: dict[str, Any]) -> _Read | None:
    """The upstream's ``GenerateContentResponse`` when it is plain (the table above)."""
    if "error" in obj:
        return None
    cands = obj.get("candidates")
    if cands.__class__ is not list or not cands:
        return None
    cand = cands[0]
    if cand.__class__ is not dict:
        return None
    reason = cand.get("finishReason")
    if reason.__class__ is not str or not reason or reason == "FINISH_REASON_UNSPECIFIED":
        return None
    rid = obj.get("responseId")
    rid = rid if rid.__class__ is str else ""
    model = obj.get("modelVersion")
    parts: list[Part] = []
    chars = calls = 0
    content = cand.get("content")
    got = content.get("parts") if content.__class__ is dict else None
    for p in got if got.__class__ is list else ():
        if p.__class__ is not dict:
            continue
        fc = p.get("functionCall")
        if fc.__class__ is dict:
            name = fc.get("name")
            if name.__class__ is not str or not name:
                return None
            cid = fc.get("id")
            if cid.__class__ is not str or not cid:
                cid = minted_id(rid, calls, name)
            calls += 1
            args = fc.get("args")
            if args.__class__ is not dict:
                args = {}
            text = orjson.dumps(args).decode()
            sig = p.get("thoughtSignature")
            parts.append(("call", cid, name, args, text, sig if sig.__class__ is str and sig else None))
            chars += len(text)
            continue
        t = p.get("text")
        if t.__class__ is str and t:
            parts.append(("thought" if p.get("thought") is True else "text", t))
            chars += len(t)
    meta = obj.get("usageMetadata")
    if reason == "MAX_TOKENS":
        finish = _MAX
    elif reason in FILTERED:
        finish = _FILTER
    else:
        finish = _COMPLETED
    return _Read(
        parts,
        model if model.__class__ is str else None,
        rid,
        usage_of(meta) if meta.__class__ is dict else None,
        finish,
        chars,
    )


def _gemini_answer(
    parts: list[Part],
    model: str | None,
    usage: dict[str, Any] | None,
    finish: tuple[FinishStatus, str | None],
    ctx: Ctx,
) -> tuple[dict[str, Any], str]:
    """``GeminiEncoder.answer()`` after the events of ``parts``, the usage and the finish;
    and the terminal."""
    key = ctx.envelope_key
    out: list[dict[str, Any]] = []
    thought: list[str] = []  # the step's thoughts, sealed on its next call
    last = ""  # the kind of the text part ``out`` ends with ('' when it ends with a call)
    for p in parts:
        kind = p[0]
        if kind == "call":
            _, cid, name, args, text, sig = p
            if args is None:  # a Chat upstream's arguments: the encoder's reading of them
                try:
                    args = orjson.loads(text) if text.strip() else {}
                except orjson.JSONDecodeError:
                    args = None
                if args.__class__ is not dict:
                    args = {"_raw": text}
            part: dict[str, Any] = {"functionCall": {"id": cid, "name": name, "args": args}}
            if key:
                sigs = {cid: sig} if sig is not None else None
                if thought or sigs:
                    part["thoughtSignature"] = envelope.seal("".join(thought), key, sigs)
                thought = []
            elif sig is not None:
                part["thoughtSignature"] = sig
            out.append(part)
            last = ""
            continue
        text = p[1]
        if kind == "thought":
            thought.append(text)
        if kind == last:
            prev = out[-1]
            out[-1] = {**prev, "text": prev["text"] + text}
        else:
            out.append({"text": text, "thought": True} if kind == "thought" else {"text": text})
            last = kind
    reason = GEMINI_FINISH.get(finish, "MAX_TOKENS" if finish[0] == "incomplete" else "STOP")
    answer: dict[str, Any] = {
        "candidates": [{"content": {"role": "model", "parts": out}, "index": 0, "finishReason": reason}]
    }
    if usage is not None:
        answer["usageMetadata"] = usage_metadata(usage)
    answer["modelVersion"] = ctx.public_model or model or ""
    answer["responseId"] = random_hex()[:22]
    return answer, "completed" if reason == "STOP" else "incomplete"


def gemini_gemini(obj: dict[str, Any], ctx: Ctx) -> Straight | None:
    """A Gemini client's answer to a plain Gemini upstream's ``obj``; ``None`` when not plain."""
    r = _read_gemini(obj)
    if r is None:
        return None
    result, terminal = _gemini_answer(r.parts, r.model, r.usage, r.finish, ctx)
    return Straight(result, terminal, r.usage, r.chars)


def chat_gemini(obj: dict[str, Any], ctx: Ctx) -> Straight | None:
    """A Gemini client's answer to a plain Chat upstream's ``obj``; ``None`` when not plain."""
    c = read_plain(obj, ctx)
    if c is None:
        return None
    parts: list[Part] = []
    chars = 0
    if c.reasoning:
        parts.append(("thought", c.reasoning))
        chars += len(c.reasoning)
    if c.content:
        parts.append(("text", c.content))
        chars += len(c.content)
    for cid, name, args in c.calls:
        parts.append(("call", cid, name, None, args, None))
        chars += len(args)
    u = c.usage
    usage = from_chat(u, ctx) if u.__class__ is dict and u else None
    result, terminal = _gemini_answer(parts, c.model, usage, (c.status, c.reason), ctx)
    return Straight(result, terminal, usage, chars)


def gemini_chat(obj: dict[str, Any], ctx: Ctx) -> Straight | None:
    """A Chat client's ``chat.completion`` for a plain Gemini upstream's ``obj``; ``None``
    when not plain."""
    r = _read_gemini(obj)
    if r is None:
        return None
    rid = r.rid
    cid = rid if rid.startswith("chatcmpl") else "chatcmpl-" + random_hex()
    created = int(time.time())
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for p in r.parts:
        kind = p[0]
        if kind == "text":
            texts.append(p[1])
        elif kind == "thought":
            thoughts.append(p[1])
        else:
            _, call_id, name, _, text, sig = p
            tc: dict[str, Any] = {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}
            if sig is not None:
                tc["extra_content"] = {"google": {"thought_signature": for_client(sig, call_id, ctx)}}
            calls.append(tc)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts else None,
        "refusal": None,
        "annotations": [],
    }
    if thoughts:
        message["reasoning_content"] = reasoning = "".join(thoughts)
        if upstream_key(ctx) == "reasoning":
            message["reasoning"] = reasoning
    if calls:
        message["tool_calls"] = calls
    status, reason = r.finish
    fr = finish_reason(status, reason, bool(calls))
    result = {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": ctx.public_model or r.model or "",
        "choices": [{"index": 0, "message": message, "finish_reason": fr, "logprobs": None}],
        "usage": to_chat(r.usage or _ZERO_USAGE),
    }
    return Straight(result, "incomplete" if fr in ("length", "content_filter") else "completed", r.usage, r.chars)
