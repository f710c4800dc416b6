"""For every golden case served both ways: the non-streamed client answer equals the
aggregate of the streamed one (the same upstream answer, streamed and not).

Run on its own with ``.venv/bin/python -m pytest tests/golden/test_differential.py``.

What is compared (``view``), after masking each answer on its own (``harness.mask``):

* Chat client: the streamed chunks aggregated into a ``chat.completion``
  (``aggregate.aggregate_chat``) against the non-streamed object: ``id``, ``model``,
  ``finish_reason``, ``content`` (empty = null), reasoning (``reasoning_content`` /
  ``reasoning``), ``refusal``, tool calls (``id``, ``type``, ``name``, ``namespace``,
  ``arguments``) and ``usage``;
* Responses client: the ``response`` of the terminal event against the non-streamed object:
  ``id``, ``model``, ``status``, ``incomplete_details``, every ``output`` item as a whole, and
  ``usage``;
* Messages client: the streamed events added up into a message (``aggregate.aggregate_message``)
  against the non-streamed message: ``id``, ``model``, the stop reason and sequence, every
  content block, ``usage``;
* Gemini client: the streamed chunks' parts in order, text parts of one kind joined
  (``aggregate.aggregate_gemini``), against the answer's parts: the parts, ``finishReason``,
  ``usageMetadata``, ``modelVersion``;
* a failure on either side (an HTTP error, a Chat error chunk, a failed response, an error
  event) is compared by its error code only (Anthropic's error type, Google's status): a
  stream that failed after its first byte cannot carry the status of an HTTP error.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.golden.aggregate import (
    aggregate_chat,
    aggregate_gemini,
    aggregate_message,
    chat_finished,
    parse_sse,
    terminal_response,
)
from tests.golden.cases import CASES, Case
from tests.golden.harness import Result, body_text, mask, result

BOTH = [c for c in CASES if c.modes == ("stream", "json")]


def _masked(r: Result) -> str:
    return mask(body_text(r.body))


def client_object(case: Case, r: Result, mode: str) -> Any:
    text = _masked(r)
    if r.status != 200:
        return {"http_error": json.loads(text) if text.startswith("{") else text}
    if mode == "json":
        obj = json.loads(text)
        if case.client == "gemini":  # the one answer's parts, as the stream's are aggregated
            cand = (obj.get("candidates") or [{}])[0]
            parts = [p for p in (cand.get("content") or {}).get("parts") or [] if p != {"text": ""}]
            return {**{k: obj[k] for k in ("usageMetadata", "modelVersion", "responseId") if k in obj},
                    "finishReason": cand.get("finishReason"), "parts": parts}  # fmt: skip
        return obj
    events = parse_sse(text.encode())
    if case.client == "chat":
        return aggregate_chat([e for e in events if e != "[DONE]"])
    if case.client == "messages":
        return aggregate_message(events)
    if case.client == "gemini":
        return aggregate_gemini(events)
    return terminal_response(events) or {"missing": "no terminal event"}


def _error_code(err: Any) -> Any:
    if isinstance(err, dict):
        inner = err.get("error", err)
        return inner.get("code") if isinstance(inner, dict) else inner
    return err


def view(case: Case, obj: Any) -> dict[str, Any]:
    if "http_error" in obj:
        err = obj["http_error"]
        if case.client in ("messages", "gemini") and isinstance(err, dict):  # Anthropic's type, Google's status
            return view(case, err)
        return {"error": _error_code(err)}
    if "missing" in obj:
        return obj
    if case.client == "chat":
        if obj.get("error"):
            return {"error": _error_code(obj["error"])}
        choice = (obj.get("choices") or [{}])[0]
        msg = choice.get("message") or {}
        calls = []
        for tc in msg.get("tool_calls") or []:
            fn = tc.get("function") or {}
            call = {
                "id": tc.get("id"),
                "type": tc.get("type"),
                "name": fn.get("name"),
                "arguments": fn.get("arguments"),
            }
            if "namespace" in fn:
                call["namespace"] = fn["namespace"]
            calls.append(call)
        return {
            "id": obj.get("id"),
            "model": obj.get("model"),
            "finish_reason": choice.get("finish_reason"),
            "content": msg.get("content") or None,
            "reasoning": {k: msg[k] for k in ("reasoning_content", "reasoning") if msg.get(k)},
            "refusal": msg.get("refusal") or None,
            "tool_calls": calls,
            "usage": obj.get("usage"),
        }
    if case.client == "messages":
        if obj.get("error"):
            return {"error": (obj["error"] or {}).get("type")}
        return {k: obj.get(k) for k in ("id", "model", "stop_reason", "stop_sequence", "content", "usage")}
    if case.client == "gemini":
        if obj.get("error"):
            return {"error": (obj["error"] or {}).get("status")}
        return {k: obj.get(k) for k in ("finishReason", "parts", "usageMetadata", "modelVersion")}
    if obj.get("status") == "failed":
        return {"error": _error_code(obj.get("error"))}
    return {
        "id": obj.get("id"),
        "model": obj.get("model"),
        "status": obj.get("status"),
        "incomplete_details": obj.get("incomplete_details"),
        "output": obj.get("output"),
        "usage": obj.get("usage"),
    }


def compare(case: Case, streamed: Result, nonstreamed: Result) -> str | None:
    """None when both agree, else a short description of what differs."""
    s = view(case, client_object(case, streamed, "stream"))
    j = view(case, client_object(case, nonstreamed, "json"))
    if s == j:
        return None
    lines: list[str] = []
    for k in sorted(set(s) | set(j)):
        a, b = s.get(k), j.get(k)
        if a == b:
            continue
        if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):  # only the entries that differ
            for i, (x, y) in enumerate(zip(a, b)):
                if x != y:
                    lines.append(_pair(f"{k}[{i}]", x, y))
        else:
            lines.append(_pair(k, a, b))
    return "\n".join(lines)


def _pair(key: str, streamed: Any, nonstreamed: Any) -> str:
    return (
        f"  {key}:\n    streamed     {json.dumps(streamed, ensure_ascii=False)}\n"
        f"    non-streamed {json.dumps(nonstreamed, ensure_ascii=False)}"
    )


# A truncated Chat stream (no finish reason, no error) has no whole-object twin: its
# "non-streamed form" would be an invented complete answer, which the proxy rightly answers
# as complete while the stream rightly fails.
COMPARABLE = [
    c
    for c in BOTH
    if c.answer.protocol != "chat" or c.answer.stream is None or chat_finished(parse_sse(c.answer.stream))
]


@pytest.mark.parametrize("case", COMPARABLE, ids=[c.name for c in COMPARABLE])
async def test_nonstreamed_equals_aggregated_stream(case: Case) -> None:
    problem = compare(case, await result(case, "stream"), await result(case, "json"))
    if problem:
        pytest.fail(
            f"{case.name} ({case.answer.source}): streamed and non-streamed answers differ\n{problem}", pytrace=False
        )
