"""openai SDK drivers that run under any SDK major, in process or in another interpreter.

Theory of operation
-------------------
``chat(...)`` and ``responses(...)`` talk to ``base_url`` with the openai SDK that is
importable here, consume the whole answer and return plain data:
``{"text", "reasoning", "tool_calls": [[id, name, arguments]], "finish", "usage", "events",
"validated", "sdk"}``.  The SDK checks every object twice:

* the client is built with ``_strict_response_validation=True``, so the SDK validates each
  body and each streamed event with its own pydantic types while it parses them (its
  default only *constructs* them, which lets a missing required field through);
* every chunk, event and final object is then validated again from its JSON with the SDK's
  type in pydantic strict mode (``model_validate_json(..., strict=True)``; events through the
  SDK's ``ResponseStreamEvent`` union), so a field of the wrong type or a missing required
  field fails the check, whichever SDK major is installed.

``validated`` counts the strict validations done.  The module imports nothing but the
standard library and ``openai``, so the e2e suite runs it in ``.e2e/openai3`` (the newest
SDK major) as ``python sdk_checks.py < request.json`` and reads one JSON object from stdout,
or, as the suite does, as ``python sdk_checks.py --serve``: one request per stdin line, one
answer per stdout line, the interpreter kept for the next request (``procs.JobServer``);
the suite's own interpreter (the pinned 2.x SDK) imports it directly.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import BaseModel, TypeAdapter

TIMEOUT = 30.0
_EVENT = TypeAdapter(ResponseStreamEvent)


class _Strict:
    """Re-validates SDK objects from their JSON, strictly, and counts them."""

    def __init__(self) -> None:
        self.n = 0

    def model(self, cls: type[BaseModel], obj: BaseModel) -> None:
        cls.model_validate_json(obj.model_dump_json(by_alias=True, exclude_unset=True, warnings=False), strict=True)
        self.n += 1

    def event(self, ev: BaseModel) -> None:
        _EVENT.validate_json(ev.model_dump_json(by_alias=True, exclude_unset=True, warnings=False), strict=True)
        self.n += 1


def client(base_url: str, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=base_url, api_key=api_key, timeout=TIMEOUT, max_retries=0, _strict_response_validation=True
    )


def _usage(u: BaseModel | None) -> dict[str, Any] | None:
    return u.model_dump(mode="json") if u is not None else None


# --------------------------------------------------------------------------- Chat


def chat(base_url: str, api_key: str, model: str, *, stream: bool, tools: list, prompt: str) -> dict[str, Any]:
    c, strict = client(base_url, api_key), _Strict()
    kw: dict[str, Any] = dict(model=model, messages=[{"role": "user", "content": prompt}], tools=tools)
    if not stream:
        r = c.chat.completions.create(**kw)
        strict.model(ChatCompletion, r)
        msg = r.choices[0].message
        extra = msg.model_extra or {}
        return {
            "text": msg.content or "",
            "reasoning": extra.get("reasoning_content") or extra.get("reasoning") or "",
            "tool_calls": [[tc.id, tc.function.name, tc.function.arguments] for tc in msg.tool_calls or []],
            "finish": r.choices[0].finish_reason,
            "usage": _usage(r.usage),
            "events": [],
            "validated": strict.n,
            "sdk": openai.__version__,
        }
    text, reasoning, finish, usage = [], [], None, None
    calls: dict[int, dict] = {}
    order: list[int] = []
    events = []
    with c.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw) as s:
        for chunk in s:
            strict.model(ChatCompletionChunk, chunk)
            events.append(chunk.model_dump(mode="json"))
            if chunk.usage:
                usage = _usage(chunk.usage)
            for ch in chunk.choices:
                d = ch.delta
                extra = d.model_extra or {}
                if d.content:
                    text.append(d.content)
                rc = extra.get("reasoning_content") or extra.get("reasoning")
                if rc:
                    reasoning.append(rc)
                for tc in d.tool_calls or []:
                    slot = calls.get(tc.index)
                    if slot is None:
                        slot = calls[tc.index] = {"id": None, "name": "", "arguments": ""}
                        order.append(tc.index)
                    if tc.id:
                        assert slot["id"] in (None, tc.id), f"tool call {tc.index} id changed {slot['id']} -> {tc.id}"
                        slot["id"] = tc.id
                    if tc.function and tc.function.name:
                        assert not slot["name"], (
                            f"tool call {tc.index}: name repeated ({slot['name']!r}, {tc.function.name!r})"
                        )
                        slot["name"] = tc.function.name
                    if tc.function and tc.function.arguments:
                        slot["arguments"] += tc.function.arguments
                if ch.finish_reason:
                    finish = ch.finish_reason
    return {
        "text": "".join(text),
        "reasoning": "".join(reasoning),
        "tool_calls": [[calls[i]["id"], calls[i]["name"], calls[i]["arguments"]] for i in order],
        "finish": finish,
        "usage": usage,
        "events": events,
        "validated": strict.n,
        "sdk": openai.__version__,
    }


# --------------------------------------------------------------------------- Responses


def _resp_output(resp: Response) -> tuple[str, str, list]:
    text, reasoning, calls = [], [], []
    for item in resp.output:
        if item.type == "message":
            for part in item.content:
                if part.type == "output_text":
                    text.append(part.text)
        elif item.type == "reasoning":
            for s in item.summary or []:
                reasoning.append(s.text)
            for c in getattr(item, "content", None) or []:
                reasoning.append(getattr(c, "text", ""))
        elif item.type == "function_call":
            calls.append([item.call_id, item.name, item.arguments])
    return "".join(text), "".join(reasoning), calls


def responses(base_url: str, api_key: str, model: str, *, stream: bool, tools: list, prompt: str) -> dict[str, Any]:
    c, strict = client(base_url, api_key), _Strict()
    kw: dict[str, Any] = dict(model=model, input=prompt, tools=tools)
    if not stream:
        r = c.responses.create(**kw)
        strict.model(Response, r)
        text, reasoning, calls = _resp_output(r)
        return {
            "text": text,
            "reasoning": reasoning,
            "tool_calls": calls,
            "finish": r.status,
            "usage": _usage(r.usage),
            "events": [],
            "validated": strict.n,
            "sdk": openai.__version__,
        }
    events = []
    delta_text, delta_reasoning = [], []
    args_delta: dict[str, str] = {}
    with c.responses.stream(**kw) as s:
        for ev in s:
            strict.event(ev)
            events.append(ev.type)
            if ev.type == "response.output_text.delta":
                delta_text.append(ev.delta)
            elif ev.type in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
                delta_reasoning.append(ev.delta)
            elif ev.type == "response.function_call_arguments.delta":
                args_delta[ev.item_id] = args_delta.get(ev.item_id, "") + ev.delta
        final = s.get_final_response()
    strict.model(Response, final)
    text, reasoning, calls = _resp_output(final)
    return {
        "text": text,
        "reasoning": reasoning,
        "tool_calls": calls,
        "finish": final.status,
        "usage": _usage(final.usage),
        "events": events,
        "delta_text": "".join(delta_text),
        "delta_reasoning": "".join(delta_reasoning),
        "args_delta": args_delta,
        "output_ids": [getattr(it, "id", None) for it in final.output],
        "validated": strict.n,
        "sdk": openai.__version__,
    }


DRIVERS = {"chat": chat, "responses": responses}


def answer(req: dict[str, Any]) -> dict[str, Any]:
    drive = DRIVERS[req.pop("api")]
    try:
        return drive(**req)
    except Exception as exc:  # the caller shows it with the proxy's side of the story
        cause = f" (caused by {exc.__cause__!r})" if exc.__cause__ is not None else ""
        return {"exception": f"{type(exc).__name__}: {exc}{cause}"}


def main() -> int:
    if sys.argv[1:] == ["--serve"]:  # one request per line, one answer per line (procs.JobServer)
        from procs import answer_jobs

        return answer_jobs(answer)
    json.dump(answer(json.load(sys.stdin)), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
