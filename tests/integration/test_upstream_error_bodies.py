"""Upstream errors that do not come as an HTTP error status: an HTTP 200 whose body is an
error object, a JSON answer to a stream request, an error inside a started stream.  Each
is answered like the same error with an error status, and no configured secret in its
text reaches the client."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from .conftest import CHAT_URL, RESP_URL, chat_chunk, parse_sse, sse_response

KEY = "sk-upstream-secret"  # the providers' api_key in conftest.BASE_CONFIG
ROUTES = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}
MODELS = {"chat": "chat-model", "responses": "resp-model"}
URLS = {"chat": CHAT_URL, "responses": RESP_URL}


def _body(client: str, upstream: str, stream: bool) -> dict[str, Any]:
    b: dict[str, Any] = {"model": MODELS[upstream], "stream": stream}
    if client == "chat":
        b["messages"] = [{"role": "user", "content": "hi"}]
    else:
        b["input"] = "hi"
    return b


DIRECTIONS = [(c, u) for c in ("chat", "responses") for u in ("chat", "responses")]


async def _check_200_error(
    c: httpx.AsyncClient,
    mock: Any,
    client: str,
    upstream: str,
    stream: bool,
    err: dict[str, Any],
    status: int,
    code: str,
) -> None:
    route = mock.post(URLS[upstream]).mock(return_value=httpx.Response(200, json={"error": err}))
    r = await c.post(ROUTES[client], json=_body(client, upstream, stream))
    assert route.called
    assert r.status_code == status, r.text
    e = r.json()["error"]
    assert e["code"] == code and set(e) >= {"message", "type", "param", "code"}
    assert "answered HTTP 200 with an error" in e["message"]
    assert KEY not in r.text


@pytest.mark.parametrize("client_proto,upstream", DIRECTIONS)
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "err,status,code",
    [
        (
            {"message": f"Rate limit reached for Bearer {KEY}", "type": "requests", "code": "rate_limit_exceeded"},
            429,
            "rate_limit_exceeded",
        ),
        (
            {"message": "This model's maximum context length is 8192 tokens", "code": None},
            400,
            "context_length_exceeded",
        ),
        ({"message": "Something broke", "type": "server_error", "code": "bad_thing"}, 502, "server_error"),
        ({"message": "bad request", "type": "BadRequestError", "code": 400}, 400, "upstream_bad_request"),
    ],
)
async def test_200_with_an_error_body_is_an_error(
    client: httpx.AsyncClient,
    mock: Any,
    client_proto: str,
    upstream: str,
    stream: bool,
    err: dict[str, Any],
    status: int,
    code: str,
) -> None:
    await _check_200_error(client, mock, client_proto, upstream, stream, err, status, code)


CHAT_OBJ = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "up-chat",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "whole answer"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}
RESP_OBJ = {
    "id": "resp_1",
    "object": "response",
    "status": "completed",
    "model": "up-resp",
    "created_at": 1,
    "output": [
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "whole answer", "annotations": []}],
        }
    ],
    "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
}


@pytest.mark.parametrize("client_proto,upstream", DIRECTIONS)
async def test_json_answer_to_a_stream_request_is_streamed(
    client: httpx.AsyncClient, mock: Any, client_proto: str, upstream: str
) -> None:
    """An upstream that ignores `stream: true` and answers with the whole object: the client
    still gets its stream, with every word."""
    mock.post(URLS[upstream]).mock(return_value=httpx.Response(200, json=CHAT_OBJ if upstream == "chat" else RESP_OBJ))
    r = await client.post(ROUTES[client_proto], json=_body(client_proto, upstream, True))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(r.content)
    if client_proto == "chat":
        assert events[-1] == "[DONE]"
        text = "".join((e["choices"][0]["delta"].get("content") or "") for e in events[:-1] if e.get("choices"))
        assert text == "whole answer"
    else:
        assert events[-1]["type"] == "response.completed"
        assert events[-1]["response"]["output"][-1]["content"][0]["text"] == "whole answer"


@pytest.mark.parametrize("client_proto,upstream", DIRECTIONS)
async def test_error_inside_a_stream_is_masked(
    client: httpx.AsyncClient, mock: Any, client_proto: str, upstream: str
) -> None:
    if upstream == "chat":
        events: list[Any] = [
            chat_chunk({"role": "assistant", "content": "Hi"}),
            {
                "error": {
                    "message": f"upstream saw Authorization: Bearer {KEY}",
                    "type": "server_error",
                    "code": "server_error",
                }
            },
        ]
        resp = sse_response(events)
    else:
        r0 = {"id": "resp_up1", "object": "response", "status": "in_progress", "model": "up-resp", "output": []}
        events = [
            {"type": "response.created", "response": r0},
            {
                "type": "response.failed",
                "response": {
                    **r0,
                    "status": "failed",
                    "error": {"code": "server_error", "message": f"upstream saw Authorization: Bearer {KEY}"},
                },
            },
        ]
        resp = sse_response(events, event_names=True)
    mock.post(URLS[upstream]).mock(return_value=resp)
    r = await client.post(ROUTES[client_proto], json=_body(client_proto, upstream, True))
    assert r.status_code == 200
    assert KEY not in r.text and "[redacted]" in r.text
    r = await client.post(ROUTES[client_proto], json=_body(client_proto, upstream, False))
    assert KEY not in r.text


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_5xx_never_carries_the_upstreams_own_code_or_param(
    client: httpx.AsyncClient, mock: Any, status: int
) -> None:
    mock.post(CHAT_URL).mock(
        return_value=httpx.Response(
            status,
            json={
                "error": {
                    "message": "Something went wrong",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "invalid_value",
                }
            },
        )
    )
    r = await client.post("/v1/chat/completions", json=_body("chat", "chat", False))
    e = r.json()["error"]
    assert r.status_code in (502, 503, 504)
    assert e["code"] in ("server_error", "server_is_overloaded", "upstream_timeout") and e["param"] is None
