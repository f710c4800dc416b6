"""All four directions × stream / non-stream, through the ASGI app, upstreams mocked by respx.

Each test asserts what the client gets (text, reasoning, two parallel tool calls with their
ids, usage) and what the upstream got (model name, auth, protocol-specific fields).
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from .conftest import (
    CHAT_URL,
    RESP_URL,
    USAGE_CHAT,
    chat_stream_two_calls,
    parse_sse,
    resp_stream_two_calls,
    sse_response,
)

CHAT_REQ = {
    "model": "chat-model",
    "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "read a.py and ls"}],
    "tools": [
        {
            "type": "function",
            "function": {"name": "Read", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
        },
        {
            "type": "function",
            "function": {"name": "Bash", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
        },
    ],
}
RESP_REQ = {
    "model": "resp-model",
    "instructions": "be brief",
    "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "read a.py and ls"}]}],
    "tools": [
        {
            "type": "function",
            "name": "Read",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
        {
            "type": "function",
            "name": "Bash",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    ],
}

RESP_FINAL = {
    "id": "resp_up1",
    "object": "response",
    "created_at": 1,
    "status": "completed",
    "model": "up-resp",
    "output": [e for e in resp_stream_two_calls()[-1]["response"]["output"]],
    "usage": resp_stream_two_calls()[-1]["response"]["usage"],
}
CHAT_FINAL = {
    "id": "chatcmpl-up1",
    "object": "chat.completion",
    "created": 1,
    "model": "up-chat",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": "Hello",
                "reasoning_content": "think hard",
                "tool_calls": [
                    {
                        "id": "functions.Read:0",
                        "type": "function",
                        "function": {"name": "Read", "arguments": '{"path":"a.py"}'},
                    },
                    {
                        "id": "functions.Bash:1",
                        "type": "function",
                        "function": {"name": "Bash", "arguments": '{"cmd":"ls"}'},
                    },
                ],
            },
        }
    ],
    "usage": USAGE_CHAT,
}


def check_responses_grammar(events: list[dict[str, Any]]) -> dict[str, Any]:
    """docs/rules.md §5.3-5.4 invariants; returns the terminal response."""
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    ids = {e["response"]["id"] for e in events if "response" in e}
    assert len(ids) == 1, ids
    terminals = [e for e in events if e["type"] in ("response.completed", "response.failed", "response.incomplete")]
    assert len(terminals) == 1 and events[-1] is terminals[0]
    added = {e["item"]["id"] for e in events if e["type"] == "response.output_item.added"}
    for e in events:
        if e["type"].endswith(".delta"):
            assert e["item_id"] in added, e
    return terminals[0]["response"]


def accumulate_responses(events: list[dict[str, Any]]) -> dict[str, Any]:
    done_items = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    reasoning = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_summary_text.delta")
    calls = [(i["call_id"], i["name"], i["arguments"]) for i in done_items if i["type"] == "function_call"]
    return {"text": text, "reasoning": reasoning, "calls": calls, "items": done_items}


def accumulate_chat(chunks: list[Any]) -> dict[str, Any]:
    assert chunks[-1] == "[DONE]"
    body = chunks[:-1]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in body if c["choices"])
    reasoning = "".join(c["choices"][0]["delta"].get("reasoning_content") or "" for c in body if c["choices"])
    calls: dict[int, list[str]] = {}
    for c in body:
        for tc in (c["choices"][0]["delta"].get("tool_calls") or []) if c["choices"] else []:
            if "id" in tc and tc.get("function", {}).get("name"):
                calls[tc["index"]] = [tc["id"], tc["function"]["name"], tc["function"].get("arguments") or ""]
            else:
                calls[tc["index"]][2] += tc["function"].get("arguments") or ""
    finish = [c["choices"][0]["finish_reason"] for c in body if c["choices"] and c["choices"][0].get("finish_reason")]
    usage = [c["usage"] for c in body if c.get("usage")]
    return {
        "text": text,
        "reasoning": reasoning,
        "calls": [tuple(v) for _, v in sorted(calls.items())],
        "finish": finish,
        "usage": usage,
        "ids": {c["id"] for c in body},
        "models": {c["model"] for c in body},
    }


async def test_chat_to_chat_stream_preserves_ids(client: httpx.AsyncClient, mock: Any) -> None:
    route = mock.post(CHAT_URL).mock(return_value=sse_response(chat_stream_two_calls(), done=True))
    r = await client.post(
        "/v1/chat/completions",
        json={**CHAT_REQ, "stream": True, "stream_options": {"include_usage": True}},
        headers={"authorization": "Bearer client-key"},
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-request-id"].startswith("req_")
    got = accumulate_chat(parse_sse(r.content))
    assert got["text"] == "Hello" and got["reasoning"] == "think hard"
    assert got["calls"] == [
        ("functions.Read:0", "Read", '{"path":"a.py"}'),
        ("functions.Bash:1", "Bash", '{"cmd":"ls"}'),
    ]
    assert got["finish"] == ["tool_calls"]
    assert got["usage"][0]["prompt_tokens"] == 11 and got["usage"][0]["completion_tokens"] == 7
    assert got["ids"] == {"chatcmpl-up1"} and got["models"] == {"chat-model"}
    sent = route.calls.last.request
    body = orjson.loads(sent.content)
    assert body["model"] == "up-chat" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert sent.headers["authorization"] == "Bearer sk-upstream-secret"


async def test_chat_to_chat_nonstream(client: httpx.AsyncClient, mock: Any) -> None:
    mock.post(CHAT_URL).mock(return_value=httpx.Response(200, json=CHAT_FINAL))
    r = await client.post("/v1/chat/completions", json=CHAT_REQ)
    assert r.status_code == 200, r.text
    out = r.json()
    msg = out["choices"][0]["message"]
    assert out["object"] == "chat.completion" and out["model"] == "chat-model"
    assert msg["content"] == "Hello" and msg["reasoning_content"] == "think hard"
    assert [t["id"] for t in msg["tool_calls"]] == ["functions.Read:0", "functions.Bash:1"]
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert out["usage"]["prompt_tokens"] == 11


async def test_responses_to_chat_stream(client: httpx.AsyncClient, mock: Any) -> None:
    route = mock.post(CHAT_URL).mock(return_value=sse_response(chat_stream_two_calls(), done=True))
    r = await client.post("/v1/responses", json={**RESP_REQ, "model": "chat-model", "stream": True})
    assert r.status_code == 200, r.text
    events = parse_sse(r.content)
    final = check_responses_grammar(events)
    got = accumulate_responses(events)
    assert got["text"] == "Hello" and got["reasoning"] == "think hard"
    assert got["calls"] == [
        ("functions.Read:0", "Read", '{"path":"a.py"}'),
        ("functions.Bash:1", "Bash", '{"cmd":"ls"}'),
    ]
    assert final["status"] == "completed" and final["model"] == "chat-model"
    assert final["usage"] == {
        "input_tokens": 11,
        "input_tokens_details": {"cached_tokens": 3, "cache_write_tokens": 0},
        "output_tokens": 7,
        "output_tokens_details": {"reasoning_tokens": 2},
        "total_tokens": 18,
    }
    assert [i["type"] for i in final["output"]] == ["reasoning", "message", "function_call", "function_call"]
    body = orjson.loads(route.calls.last.request.content)
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert body["stream_options"] == {"include_usage": True}
    assert body["model"] == "up-chat"


async def test_responses_to_chat_nonstream(client: httpx.AsyncClient, mock: Any) -> None:
    mock.post(CHAT_URL).mock(return_value=httpx.Response(200, json=CHAT_FINAL))
    r = await client.post("/v1/responses", json={**RESP_REQ, "model": "chat-model"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["object"] == "response" and out["status"] == "completed"
    calls = [(i["call_id"], i["name"]) for i in out["output"] if i["type"] == "function_call"]
    assert calls == [("functions.Read:0", "Read"), ("functions.Bash:1", "Bash")]
    msg = next(i for i in out["output"] if i["type"] == "message")
    assert msg["content"][0]["text"] == "Hello"
    assert out["usage"]["input_tokens"] == 11


async def test_responses_to_responses_stream(client: httpx.AsyncClient, mock: Any) -> None:
    route = mock.post(RESP_URL).mock(return_value=sse_response(resp_stream_two_calls(), event_names=True))
    r = await client.post("/v1/responses", json={**RESP_REQ, "stream": True})
    assert r.status_code == 200, r.text
    events = parse_sse(r.content)
    final = check_responses_grammar(events)
    got = accumulate_responses(events)
    assert got["text"] == "Hello" and got["reasoning"] == "think hard"
    assert got["calls"] == [("call_0", "Read", '{"path":"a.py"}'), ("call_1", "Bash", '{"cmd":"ls"}')]
    assert final["id"] == "resp_up1"
    rs = next(i for i in got["items"] if i["type"] == "reasoning")
    assert rs["encrypted_content"] == "gAAA-opaque"
    assert [i["id"] for i in final["output"] if i["type"] == "function_call"] == ["fc_0", "fc_1"]
    body = orjson.loads(route.calls.last.request.content)
    assert body["model"] == "up-resp" and body["stream"] is True


async def test_responses_to_responses_nonstream(client: httpx.AsyncClient, mock: Any) -> None:
    mock.post(RESP_URL).mock(return_value=httpx.Response(200, json=RESP_FINAL))
    r = await client.post("/v1/responses", json=RESP_REQ)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["id"] == "resp_up1" and out["status"] == "completed"
    assert [i.get("call_id") for i in out["output"] if i["type"] == "function_call"] == ["call_0", "call_1"]


async def test_chat_to_responses_stream(client: httpx.AsyncClient, mock: Any) -> None:
    route = mock.post(RESP_URL).mock(return_value=sse_response(resp_stream_two_calls(), event_names=True))
    r = await client.post(
        "/v1/chat/completions",
        json={**CHAT_REQ, "model": "resp-model", "stream": True, "stream_options": {"include_usage": True}},
    )
    assert r.status_code == 200, r.text
    got = accumulate_chat(parse_sse(r.content))
    assert got["text"] == "Hello" and got["reasoning"] == "think hard"
    assert got["calls"] == [("call_0", "Read", '{"path":"a.py"}'), ("call_1", "Bash", '{"cmd":"ls"}')]
    assert got["finish"] == ["tool_calls"]
    assert got["usage"][0]["prompt_tokens_details"]["cached_tokens"] == 3
    body = orjson.loads(route.calls.last.request.content)
    assert body["instructions"] == "be brief"
    assert (
        body["tools"][0]
        == {
            "type": "function",
            "name": "Read",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        }
        or body["tools"][0]["name"] == "Read"
    )
    assert "messages" not in body and body["model"] == "up-resp"


async def test_chat_to_responses_nonstream(client: httpx.AsyncClient, mock: Any) -> None:
    mock.post(RESP_URL).mock(return_value=httpx.Response(200, json=RESP_FINAL))
    r = await client.post("/v1/chat/completions", json={**CHAT_REQ, "model": "resp-model"})
    assert r.status_code == 200, r.text
    out = r.json()
    msg = out["choices"][0]["message"]
    assert msg["content"] == "Hello"
    assert [(t["id"], t["function"]["name"]) for t in msg["tool_calls"]] == [("call_0", "Read"), ("call_1", "Bash")]
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert out["usage"]["completion_tokens"] == 7


@pytest.mark.parametrize("stream", [True, False])
async def test_demo_provider_answers_both_protocols(client: httpx.AsyncClient, stream: bool) -> None:
    r = await client.post(
        "/v1/chat/completions",
        json={"model": "demo", "stream": stream, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert r.status_code == 200, r.text
    if stream:
        assert accumulate_chat(parse_sse(r.content))["text"].startswith("Hello from Switchboard's demo provider.")
    else:
        assert r.json()["choices"][0]["message"]["content"].startswith("Hello from Switchboard's demo provider.")
    r = await client.post("/v1/responses", json={"model": "demo", "stream": stream, "input": "hi"})
    assert r.status_code == 200, r.text
    if stream:
        events = parse_sse(r.content)
        check_responses_grammar(events)
        assert accumulate_responses(events)["text"].startswith("Hello from Switchboard's demo provider.")
    else:
        assert r.json()["output"][0]["content"][0]["text"].startswith("Hello from Switchboard's demo provider.")


async def test_demo_tool_call_through_responses(client: httpx.AsyncClient) -> None:
    req = {
        "model": "demo",
        "stream": True,
        "input": "please run a tool",
        "tools": [
            {
                "type": "function",
                "name": "exec_command",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
            }
        ],
    }
    r = await client.post("/v1/responses", json=req)
    events = parse_sse(r.content)
    check_responses_grammar(events)
    assert accumulate_responses(events)["calls"] == [
        ("functions.exec_command:0", "exec_command", '{"cmd":"echo hello from switchboard"}')
    ]
