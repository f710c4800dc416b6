"""Streams to objects, written independently of the proxy's own code.

* ``parse_sse``: SSE bytes → the ``data`` of each event (JSON, or ``"[DONE]"``); comments
  and ``event:`` lines are dropped.
* ``aggregate_chat``: Chat Completions chunks → the ``chat.completion`` object the same
  answer has when it is not streamed: the first chunk's ``id``/``created``/``model``; each
  string delta field concatenated (``content`` null when empty, ``reasoning_content`` /
  ``reasoning`` / ``refusal`` only when present); tool calls by ``index`` (``id``, ``type``
  and ``name`` from the deltas that carry them, string ``arguments`` concatenated, a
  non-string ``arguments`` kept as it came); the last ``finish_reason``; the last
  ``usage``; an ``error`` chunk (a failed stream) as the object's ``error``.
* ``terminal_response``: Responses events → the ``response`` of the terminal event
  (``response.completed`` / ``response.incomplete`` / ``response.failed``).
"""

from __future__ import annotations

import json
from typing import Any

TERMINALS = ("response.completed", "response.incomplete", "response.failed")


def sse_data(raw: bytes) -> list[str]:
    text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    out: list[str] = []
    for block in text.split("\n\n"):
        data: list[str] = []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            if name == "data":
                data.append(value[1:] if value.startswith(" ") else value)
        if data:
            out.append("\n".join(data))
    return out


def parse_sse(raw: bytes) -> list[Any]:
    return ["[DONE]" if d == "[DONE]" else json.loads(d) for d in sse_data(raw)]


def aggregate_chat(chunks: list[Any]) -> dict[str, Any]:
    head: dict[str, Any] = {}
    texts: dict[str, Any] = {}
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    usage = None
    error = None
    for c in chunks:
        if not isinstance(c, dict):
            continue
        if "error" in c and not c.get("choices"):
            error = c["error"]
            continue
        for k in ("id", "created", "model"):
            if k in c and k not in head:
                head[k] = c[k]
        if c.get("usage"):
            usage = c["usage"]
        for ch in c.get("choices") or []:
            delta = ch.get("delta") or {}
            for k, v in delta.items():
                if k == "role" or v is None:
                    continue
                if k == "tool_calls":
                    for tc in v:
                        _merge_call(calls, tc)
                elif isinstance(v, str) and isinstance(texts.get(k, ""), str):
                    texts[k] = texts.get(k, "") + v
                else:
                    texts[k] = v
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
    msg: dict[str, Any] = {"role": "assistant", "content": texts.pop("content", "") or None}
    for k, v in texts.items():
        if v != "":
            msg[k] = v
    if calls:
        msg["tool_calls"] = [calls[i] for i in sorted(calls)]
    out: dict[str, Any] = {
        "id": head.get("id"),
        "object": "chat.completion",
        "created": head.get("created"),
        "model": head.get("model"),
        "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
    }
    if usage is not None:
        out["usage"] = usage
    if error is not None:
        out["error"] = error
    return out


def _merge_call(calls: dict[int, dict[str, Any]], tc: dict[str, Any]) -> None:
    i = tc.get("index", 0)
    call = calls.setdefault(i, {"id": None, "type": "function", "function": {"name": None, "arguments": ""}})
    if tc.get("id"):
        call["id"] = tc["id"]
    if tc.get("type"):
        call["type"] = tc["type"]
    fn = tc.get("function") or {}
    if fn.get("name"):
        call["function"]["name"] = fn["name"]
    if "namespace" in fn:
        call["function"]["namespace"] = fn["namespace"]
    args = fn.get("arguments")
    if args is None:
        return
    have = call["function"]["arguments"]
    if isinstance(args, str) and isinstance(have, str):
        call["function"]["arguments"] = have + args
    elif not (isinstance(args, str) and args == ""):
        call["function"]["arguments"] = args


def terminal_response(events: list[Any]) -> dict[str, Any] | None:
    """The response object of the terminal event.  An upstream whose terminal output items
    carry no ids (Mantle) gives them in its non-streamed body: they are taken from the
    stream's own item events, by output index."""
    found = None
    ids: dict[int, str] = {}
    for e in events:
        if not isinstance(e, dict):
            continue
        item = e.get("item")
        if isinstance(item, dict) and isinstance(item.get("id"), str) and isinstance(e.get("output_index"), int):
            ids.setdefault(e["output_index"], item["id"])
        if e.get("type") in TERMINALS and isinstance(e.get("response"), dict):
            found = e["response"]
    if found is not None and isinstance(found.get("output"), list):
        found = {
            **found,
            "output": [
                {**it, "id": ids[i]} if isinstance(it, dict) and "id" not in it and i in ids else it
                for i, it in enumerate(found["output"])
            ],
        }
    return found


def chat_finished(chunks: list[Any]) -> bool:
    """Whether a Chat stream ended (a finish reason or an error): a truncated one has no
    whole-object twin to compare with."""
    for c in chunks:
        if isinstance(c, dict) and (
            "error" in c or any(isinstance(ch, dict) and ch.get("finish_reason") for ch in c.get("choices") or [])
        ):
            return True
    return False


def aggregate_message(events: list[Any]) -> dict[str, Any]:
    """Anthropic Messages events → the message the same answer is when not streamed: the
    ``message_start`` message; each content block from its start, its text, thinking,
    signature and ``partial_json`` deltas added up (the JSON parsed into ``input``); the
    ``message_delta``'s stop reason and usage over the start's; an ``error`` event as the
    object's ``error``."""
    msg: dict[str, Any] = {}
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    for ev in events:
        kind = ev.get("type") if isinstance(ev, dict) else None
        if kind == "message_start":
            msg = dict(ev["message"])
        elif kind == "content_block_start":
            blocks[ev["index"]] = dict(ev["content_block"])
        elif kind == "content_block_delta":
            block, delta = blocks[ev["index"]], ev["delta"]
            for dk, bk in (("text", "text"), ("thinking", "thinking"), ("signature", "signature")):
                if dk in delta:
                    block[bk] = block.get(bk, "") + delta[dk]
            if "partial_json" in delta:
                partial[ev["index"]] = partial.get(ev["index"], "") + delta["partial_json"]
        elif kind == "message_delta":
            msg.update(ev.get("delta") or {})
            msg["usage"] = {**(msg.get("usage") or {}), **(ev.get("usage") or {})}
        elif kind == "error":
            msg["error"] = ev.get("error")
    for i, text in partial.items():
        blocks[i]["input"] = json.loads(text) if text else {}
    msg["content"] = [blocks[i] for i in sorted(blocks)]
    return msg


def aggregate_gemini(chunks: list[Any]) -> dict[str, Any]:
    """Gemini chunks → the answer the same turn is when not streamed: the parts of every
    chunk in order, a text part joined to the one before it when both are text of the same
    kind (thought or not) and neither has a signature; the last ``finishReason`` and
    ``usageMetadata``; an ``error`` chunk as the object's ``error``."""
    parts: list[dict[str, Any]] = []
    out: dict[str, Any] = {}
    for c in chunks:
        if not isinstance(c, dict):
            continue
        if "error" in c:
            out["error"] = c["error"]
            continue
        for k in ("usageMetadata", "modelVersion", "responseId"):
            if k in c:
                out[k] = c[k]
        for cand in c.get("candidates") or []:
            if "finishReason" in cand:
                out["finishReason"] = cand["finishReason"]
            for p in (cand.get("content") or {}).get("parts") or []:
                last = parts[-1] if parts else None
                joins = (
                    last is not None
                    and set(p) <= {"text", "thought"}
                    and set(last) <= {"text", "thought"}
                    and bool(p.get("thought")) == bool(last.get("thought"))
                )
                if joins:
                    assert last is not None
                    last["text"] = last.get("text", "") + p.get("text", "")
                elif p != {"text": ""}:
                    parts.append(dict(p))
    out["parts"] = parts
    return out
