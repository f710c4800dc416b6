"""Gemini (its OpenAI-compatible endpoint) through the app: every client's second and third
tool steps carry the signature Gemini made, bound to the client key it was given to; what
does not come back becomes the escape value, counted; nothing else is sent as Gemini's.
The clients are Chat, Responses, Messages and Gemini's own API (Gemini CLI: its model parts
sent back without the thought parts, the signature riding the functionCall part's
``thoughtSignature``)."""

from __future__ import annotations

import base64
import os
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.conftest import parse_sse

SECRET = "s" * 48
GEMINI_URL = "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions"
ESCAPE = "skip_thought_signature_validator"
KEYS = [{"name": "alice", "key": "key-alice"}, {"name": "bob", "key": "key-bob"}]
PARAMS = {
    "type": "object",
    "properties": {"cmd": {"type": "string"}},
    "required": ["cmd"],
    "additionalProperties": False,
}


def config() -> dict[str, Any]:
    return {
        "providers": [
            {"name": "gm", "profile": "gemini", "base_url": "https://generativelanguage.googleapis.com/v1beta/openai",
             "api_key": "gm-key"},
        ],
        "models": [{"name": "gemini-3-pro-preview", "provider": "gm"}],
        "auth": {"keys": KEYS},
        "server": {"secret_key": SECRET},
    }  # fmt: skip


class Gemini:
    """The upstream: signed answers, and Gemini's 400 for a current-turn step without its
    signature or with one it never made."""

    def __init__(self) -> None:
        self.issued: dict[str, str] = {}
        self.bodies: list[dict[str, Any]] = []
        self.n = 0
        self.tag = os.urandom(4).hex()  # Gemini 3's call ids are opaque and unique
        self.plan: list[int] = []  # calls per answer; 0 = the final text

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content)
        self.bodies.append(body)
        err = self.check(body)
        if err:
            return httpx.Response(400, json=[{"error": {"code": 400, "message": err, "status": "INVALID_ARGUMENT"}}])
        calls = self.plan.pop(0)
        msg: dict[str, Any] = {"role": "assistant", "content": None if calls else "All done."}
        if calls:
            msg["tool_calls"] = []
            for i in range(calls):
                self.n += 1
                tc: dict[str, Any] = {
                    "id": f"function-call-{self.tag}-{self.n}",
                    "type": "function",
                    "function": {"name": "exec_command", "arguments": orjson.dumps({"cmd": f"echo {self.n}"}).decode()},
                }
                if i == 0:
                    sig = self.issued[tc["id"]] = base64.b64encode(os.urandom(200)).decode()
                    tc["extra_content"] = {"google": {"thought_signature": sig}}
                msg["tool_calls"].append(tc)
        head = {"id": f"chatcmpl-{self.n}", "created": 1, "model": "gemini-3-pro-preview"}
        usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
        if not body.get("stream"):
            choice = {"index": 0, "message": msg, "finish_reason": "tool_calls" if calls else "stop"}
            return httpx.Response(200, json={**head, "object": "chat.completion", "choices": [choice], "usage": usage})
        chunks = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
        if msg["content"]:
            chunks.append({**head, "choices": [{"index": 0, "delta": {"content": msg["content"]}}]})
        for i, tc in enumerate(msg.get("tool_calls") or ()):
            chunks.append({**head, "choices": [{"index": 0, "delta": {"tool_calls": [{**tc, "index": i}]}}]})
        chunks.append(
            {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if calls else "stop"}]}
        )
        chunks.append({**head, "choices": [], "usage": usage})
        raw = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=raw)

    def check(self, body: dict[str, Any]) -> str | None:
        for k in ("store", "metadata", "prompt_cache_key"):
            if k in body:
                return f'Invalid JSON payload received. Unknown name "{k}": Cannot find field.'
        if "additionalProperties" in orjson.dumps(body.get("tools") or []).decode():
            return 'Invalid JSON payload received. Unknown name "additionalProperties"'
        msgs = body["messages"]
        last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
        for i, m in enumerate(msgs):
            for j, tc in enumerate(m.get("tool_calls") or ()):
                sig = ((tc.get("extra_content") or {}).get("google") or {}).get("thought_signature")
                if sig not in (None, ESCAPE) and sig not in self.issued.values():
                    return "Corrupted thought signature."
                if i > last_user and j == 0 and sig is None:
                    return "Function call is missing a thought_signature in functionCall parts."
        return None

    def sent_signatures(self, body: dict[str, Any]) -> list[str]:
        return [
            tc["extra_content"]["google"]["thought_signature"]
            for m in body["messages"]
            for tc in m.get("tool_calls") or ()
            if "extra_content" in tc
        ]


def request(client: str, stream: bool) -> dict[str, Any]:
    if client == "chat":
        tools = [{"type": "function", "function": {"name": "exec_command", "parameters": PARAMS}}]
        return {"model": "gemini-3-pro-preview", "messages": [{"role": "user", "content": "go"}], "tools": tools,
                "stream": stream, "store": True, "metadata": {"a": "b"}}  # fmt: skip
    if client == "responses":
        tools = [{"type": "function", "name": "exec_command", "parameters": PARAMS}]
        return {"model": "gemini-3-pro-preview", "input": [{"role": "user", "content": "go"}], "tools": tools,
                "stream": stream, "store": False, "include": ["reasoning.encrypted_content"],
                "prompt_cache_key": "t1", "reasoning": {"effort": "medium"}}  # fmt: skip
    if client == "gemini":  # (the model and the stream are in the path)
        tools = [{"functionDeclarations": [{"name": "exec_command", "parametersJsonSchema": PARAMS}]}]
        return {"contents": [{"role": "user", "parts": [{"text": "go"}]}], "tools": tools,
                "generationConfig": {"thinkingConfig": {"includeThoughts": True, "thinkingLevel": "high"}}}  # fmt: skip
    tools = [{"name": "exec_command", "input_schema": PARAMS}]
    return {"model": "gemini-3-pro-preview", "max_tokens": 2000, "messages": [{"role": "user", "content": "go"}],
            "tools": tools, "stream": stream, "thinking": {"type": "adaptive"}}  # fmt: skip


PATH = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
GEMINI_PATH = {True: "/v1beta/models/gemini-3-pro-preview:streamGenerateContent?alt=sse",
               False: "/v1beta/models/gemini-3-pro-preview:generateContent"}  # fmt: skip


def path(client: str, stream: bool) -> str:
    return GEMINI_PATH[stream] if client == "gemini" else PATH[client]


def answer(client: str, r: httpx.Response, stream: bool) -> Any:
    assert r.status_code == 200, r.text
    if client == "gemini":  # the model's parts, every chunk's in order
        chunks = parse_sse(r.content) if stream else [r.json()]
        return {"parts": [p for e in chunks for p in e["candidates"][0]["content"]["parts"]]}
    if not stream:
        return r.json()
    evs = parse_sse(r.content)
    if client == "chat":
        from transformers.chat_encode import completion_from_chunks

        return completion_from_chunks(e for e in evs if e != "[DONE]")
    if client == "responses":
        return {"output": [e["item"] for e in evs if e["type"] == "response.output_item.done"]}
    blocks: list[dict[str, Any]] = []
    for e in evs:
        if e["type"] == "content_block_start":
            blocks.append(dict(e["content_block"]))
        elif e["type"] == "content_block_delta":
            d, b = e["delta"], blocks[e["index"]]
            if d["type"] == "signature_delta":
                b["signature"] = d["signature"]
            elif d["type"] == "input_json_delta":
                b["_json"] = b.get("_json", "") + d["partial_json"]
            elif d["type"] in ("thinking_delta", "text_delta"):
                b[d["type"][:-6]] += d[d["type"][:-6]]
    for b in blocks:
        if b["type"] == "tool_use":
            b["input"] = orjson.loads(b.pop("_json", "{}"))
    return {"content": blocks}


def follow_up(client: str, body: dict[str, Any], ans: Any) -> dict[str, Any]:
    body = dict(body)
    if client == "chat":
        msg = ans["choices"][0]["message"]
        outs = [{"role": "tool", "tool_call_id": tc["id"], "content": "ok"} for tc in msg.get("tool_calls") or ()]
        body["messages"] = [*body["messages"], msg, *outs]
    elif client == "gemini":  # as Gemini CLI keeps them: thought parts left out
        model = [p for p in ans["parts"] if not p.get("thought") and (p.get("text") or "functionCall" in p)]
        res = [
            {"functionResponse": {"id": p["functionCall"]["id"], "name": p["functionCall"]["name"],
                                  "response": {"output": "ok"}}}
            for p in model
            if "functionCall" in p
        ]  # fmt: skip
        body["contents"] = [*body["contents"], {"role": "model", "parts": model}, {"role": "user", "parts": res}]
    elif client == "responses":
        out = ans["output"]
        outs = [
            {"type": "function_call_output", "call_id": i["call_id"], "output": "ok"}
            for i in out
            if i["type"] == "function_call"
        ]
        body["input"] = [*body["input"], *out, *outs]  # fmt: skip
    else:
        content = ans["content"]
        res = [
            {"type": "tool_result", "tool_use_id": b["id"], "content": "ok"} for b in content if b["type"] == "tool_use"
        ]
        body["messages"] = [*body["messages"], {"role": "assistant", "content": content}, {"role": "user", "content": res}]  # fmt: skip
    return body


def final_text(client: str, ans: Any) -> str:
    if client == "chat":
        return ans["choices"][0]["message"]["content"]
    if client == "responses":
        return "".join(p["text"] for i in ans["output"] if i["type"] == "message" for p in i["content"])
    if client == "gemini":
        return "".join(p.get("text", "") for p in ans["parts"] if not p.get("thought"))
    return "".join(b["text"] for b in ans["content"] if b["type"] == "text")


@pytest.mark.parametrize("plan", [[1, 1, 0], [2, 0], [1, 0]], ids=["two-steps", "parallel", "single"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("client", ["chat", "responses", "messages", "gemini"])
async def test_every_tool_step_reaches_the_final_answer(
    client_factory: Any, mock: Any, client: str, stream: bool, plan: list[int]
) -> None:
    c = await client_factory(**config())
    gemini = Gemini()
    gemini.plan = list(plan)
    mock.route(method="POST", url=GEMINI_URL).mock(side_effect=gemini)
    body = request(client, stream)
    headers = {"authorization": "Bearer key-alice"}
    for _ in plan:
        ans = answer(client, await c.post(path(client, stream), json=body, headers=headers), stream)
        body = follow_up(client, body, ans)
    assert final_text(client, ans) == "All done."
    # every signature Gemini made came back, byte for byte, on every later request
    for k, sent in enumerate(gemini.bodies):
        assert sorted(gemini.sent_signatures(sent)) == sorted(list(gemini.issued.values())[: _signed_before(plan, k)])
    m = (await c.get("/metrics")).text
    assert 'rule="thought_signature_skipped"' not in m and 'rule="thought_signature_rejected"' not in m


def _signed_before(plan: list[int], k: int) -> int:
    return sum(1 for calls in plan[:k] if calls)


@pytest.mark.parametrize("client", ["chat", "responses", "messages", "gemini"])
async def test_a_signature_given_to_one_key_does_not_open_for_another(
    client_factory: Any, mock: Any, client: str
) -> None:
    """Bob replays Alice's history: her sealed signatures do not open under his key, so Gemini
    gets the escape value (the turn goes on), never a signature sealed for someone else."""
    c = await client_factory(**config())
    gemini = Gemini()
    gemini.plan = [1, 0]
    mock.route(method="POST", url=GEMINI_URL).mock(side_effect=gemini)
    body = request(client, False)
    ans = answer(
        client, await c.post(path(client, False), json=body, headers={"authorization": "Bearer key-alice"}), False
    )
    r = await c.post(
        path(client, False), json=follow_up(client, body, ans), headers={"authorization": "Bearer key-bob"}
    )
    assert r.status_code == 200, r.text
    assert gemini.sent_signatures(gemini.bodies[-1]) == [ESCAPE]
    m = (await c.get("/metrics")).text
    assert 'rule="thought_signature_skipped"' in m
    kind = "thought_signature" if client == "chat" else "reasoning"
    assert f'kind="{kind}",reason="bad_mac"' in m.replace(" ", "")


async def test_an_edited_signature_is_not_sent(client_factory: Any, mock: Any) -> None:
    c = await client_factory(**config())
    gemini = Gemini()
    gemini.plan = [1, 0]
    mock.route(method="POST", url=GEMINI_URL).mock(side_effect=gemini)
    body = request("chat", False)
    ans = answer("chat", await c.post(PATH["chat"], json=body, headers={"authorization": "Bearer key-alice"}), False)
    tc = ans["choices"][0]["message"]["tool_calls"][0]
    sealed = tc["extra_content"]["google"]["thought_signature"]
    assert sealed.startswith("pxy1.") and sealed not in gemini.issued.values()
    tc["extra_content"]["google"]["thought_signature"] = sealed[:-6] + "AAAAAA"
    r = await c.post(PATH["chat"], json=follow_up("chat", body, ans), headers={"authorization": "Bearer key-alice"})
    assert r.status_code == 200, r.text
    assert gemini.sent_signatures(gemini.bodies[-1]) == [ESCAPE]
    assert 'rule="thought_signature_rejected"' in (await c.get("/metrics")).text


async def test_gemini_refusal_reaches_each_client_in_its_own_shape(client_factory: Any, mock: Any) -> None:
    c = await client_factory(**config())
    body = [{"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED"}}]  # fmt: skip
    mock.route(method="POST", url=GEMINI_URL).mock(return_value=httpx.Response(429, json=body))
    for client in ("chat", "responses", "messages", "gemini"):
        r = await c.post(
            path(client, False), json=request(client, False), headers={"authorization": "Bearer key-alice"}
        )
        assert r.status_code == 429
        err = r.json()
        if client == "gemini":
            assert err["error"]["status"] == "RESOURCE_EXHAUSTED" and "exhausted" in err["error"]["message"]
        elif client == "messages":
            assert err["type"] == "error" and err["error"]["type"] == "rate_limit_error"
        else:
            assert err["error"]["code"] == "rate_limit_exceeded" and "exhausted" in err["error"]["message"]


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_a_chat_client_that_drops_the_field_gets_the_signature_back_from_the_store(
    client_factory: Any, mock: Any, tmp_path: Any, backend: str, stream: bool
) -> None:
    """Kimi Code sends its calls back with id, type and function only: the proxy kept the
    signature under the client key and the call id, and Gemini gets its own back, not the
    escape value; another key's request with the same call id does not."""
    import uuid

    store = {"backend": backend, "path": str(tmp_path / "s.db"), "key_prefix": f"switchboard-test:{uuid.uuid4().hex}:"}
    c = await client_factory(**{**config(), "store": store})
    gemini = Gemini()
    gemini.plan = [2, 1, 0, 0]
    mock.route(method="POST", url=GEMINI_URL).mock(side_effect=gemini)
    body = request("chat", stream)
    alice = {"authorization": "Bearer key-alice"}
    for _ in range(2):
        ans = answer("chat", await c.post(PATH["chat"], json=body, headers=alice), stream)
        for tc in ans["choices"][0]["message"]["tool_calls"]:
            tc.pop("extra_content", None)  # what Kimi Code keeps: no unknown field
        body = follow_up("chat", body, ans)
    final = answer("chat", await c.post(PATH["chat"], json=body, headers=alice), stream)
    assert final_text("chat", final) == "All done."
    first, third = list(gemini.issued.values())  # (calls 1 and 3: call 2 is the parallel one)
    assert [sorted(gemini.sent_signatures(b)) for b in gemini.bodies] == [[], [first], sorted([first, third])]
    m = (await c.get("/metrics")).text
    assert 'rule="thought_signature_skipped"' not in m
    # bob replays alice's bare history: nothing of hers is his
    r = await c.post(PATH["chat"], json=body, headers={"authorization": "Bearer key-bob"})
    assert r.status_code == 200, r.text
    assert gemini.sent_signatures(gemini.bodies[-1]) == [ESCAPE, ESCAPE]
