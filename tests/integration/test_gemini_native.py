"""Gemini in its own API (``protocol: gemini``) through the app: every client's tool steps
reach the final answer on a scripted Gemini that signs its calls and refuses a current-turn
call that comes back without its signature; the URL names the model and the method, the
key goes in ``x-goog-api-key``, the body has no model or stream; usage and errors mapped."""

from __future__ import annotations

import base64
import os
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.test_gemini import ESCAPE, KEYS, PARAMS, answer, final_text, follow_up, path, request

SECRET = "s" * 48
BASE = "https://generativelanguage.googleapis.com/v1beta"
STREAM_URL = BASE + "/models/gemini-3-pro-preview:streamGenerateContent"
WHOLE_URL = BASE + "/models/gemini-3-pro-preview:generateContent"


def config() -> dict[str, Any]:
    return {
        "providers": [{"name": "gn", "profile": "gemini", "protocol": "gemini", "base_url": BASE, "api_key": "gm-key"}],
        "models": [{"name": "gemini-3-pro-preview", "provider": "gn"}, {"name": "gemini-3.1-pro-preview",
                                                                         "provider": "gn",
                                                                         "upstream_model": "gemini-3-pro-preview"}],
        "auth": {"keys": KEYS},
        "server": {"secret_key": SECRET},
    }  # fmt: skip


class NativeGemini:
    """The upstream: Gemini's own API, signing the first call of each answer; a 400 for a
    current-turn model content whose first call comes back without a signature it made."""

    def __init__(self, plan: list[int]) -> None:
        self.plan = plan
        self.issued: list[str] = []
        self.requests: list[httpx.Request] = []
        self.n = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        body = orjson.loads(request.content)
        err = self.check(body)
        if err:
            return httpx.Response(400, json={"error": {"code": 400, "message": err, "status": "INVALID_ARGUMENT"}})
        calls = self.plan.pop(0)
        parts: list[dict[str, Any]] = [{"text": "thinking it over", "thought": True}]
        if not calls:
            parts.append({"text": "All done."})
        for i in range(calls):
            self.n += 1
            part: dict[str, Any] = {"functionCall": {"name": "exec_command", "args": {"cmd": f"echo {self.n}"}}}
            if i == 0:
                sig = base64.b64encode(os.urandom(120)).decode()
                self.issued.append(sig)
                part["thoughtSignature"] = sig
            parts.append(part)
        usage = {"promptTokenCount": 100, "candidatesTokenCount": 20, "thoughtsTokenCount": 5, "totalTokenCount": 125}
        done = {"candidates": [{"content": {"role": "model", "parts": []}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": usage, "modelVersion": "gemini-3-pro-preview", "responseId": f"r{self.n}"}  # fmt: skip
        if request.url.path.endswith(":generateContent"):
            done["candidates"][0]["content"]["parts"] = parts
            return httpx.Response(200, json=done)
        chunks = [
            {"candidates": [{"content": {"role": "model", "parts": [p]}, "index": 0}], "responseId": f"r{self.n}"}
            for p in parts
        ]
        raw = b"".join(b"data: " + orjson.dumps(c) + b"\r\n\r\n" for c in [*chunks, done])
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=raw)

    def check(self, body: dict[str, Any]) -> str | None:
        for k in ("model", "stream", "messages"):
            if k in body:
                return f'Invalid JSON payload received. Unknown name "{k}": Cannot find field.'
        contents = body["contents"]
        last_user = max(
            i
            for i, c in enumerate(contents)
            if c["role"] == "user" and not any("functionResponse" in p for p in c["parts"])
        )
        for i, c in enumerate(contents):
            calls = [p for p in c["parts"] if "functionCall" in p]
            for j, p in enumerate(calls):
                sig = p.get("thoughtSignature")
                if sig is not None and sig != ESCAPE and sig not in self.issued:
                    return "Corrupted thought signature."
                if i > last_user and j == 0 and sig is None:
                    return "Function call is missing a thought_signature in functionCall parts."
        return None

    def sent_signatures(self, k: int) -> list[str]:
        body = orjson.loads(self.requests[k].content)
        return [p["thoughtSignature"] for c in body["contents"] for p in c["parts"] if "thoughtSignature" in p]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("client", ["chat", "responses", "messages", "gemini"])
async def test_every_client_reaches_the_final_answer(client_factory: Any, mock: Any, client: str, stream: bool) -> None:
    c = await client_factory(**config())
    gemini = NativeGemini([1, 2, 0])
    mock.route(method="POST", url__startswith=STREAM_URL).mock(side_effect=gemini)
    mock.route(method="POST", url=WHOLE_URL).mock(side_effect=gemini)
    body = request(client, stream)
    headers = {"authorization": "Bearer key-alice"}
    for _ in range(3):
        r = await c.post(path(client, stream), json=body, headers=headers)
        ans = answer(client, r, stream)
        body = follow_up(client, body, ans)
    assert final_text(client, ans) == "All done."
    # Gemini's own signatures came back byte for byte, each on its call
    assert gemini.sent_signatures(1) == gemini.issued[:1]
    assert gemini.sent_signatures(2) == gemini.issued[:2]
    first = gemini.requests[0]
    assert first.headers["x-goog-api-key"] == "gm-key" and "authorization" not in first.headers
    assert (first.url.params.get("alt") == "sse") is stream
    sent = orjson.loads(first.content)
    decl = sent["tools"][0]["functionDeclarations"][0]
    assert decl["name"] == "exec_command" and decl["parametersJsonSchema"] == PARAMS
    assert sent["generationConfig"]["thinkingConfig"]["includeThoughts"] is True
    m = (await c.get("/metrics")).text
    assert 'rule="thought_signature_rejected"' not in m


async def test_usage_and_the_escape_value_for_another_keys_history(client_factory: Any, mock: Any) -> None:
    c = await client_factory(**config())
    gemini = NativeGemini([1, 0])
    mock.route(method="POST", url=WHOLE_URL).mock(side_effect=gemini)
    body = request("chat", False)
    r = await c.post("/v1/chat/completions", json=body, headers={"authorization": "Bearer key-alice"})
    got = r.json()
    assert got["usage"]["prompt_tokens"] == 100 and got["usage"]["completion_tokens"] == 25
    assert got["choices"][0]["message"]["reasoning_content"] == "thinking it over"
    r = await c.post(
        "/v1/chat/completions", json=follow_up("chat", body, got), headers={"authorization": "Bearer key-bob"}
    )
    assert r.status_code == 200, r.text
    assert gemini.sent_signatures(1) == [ESCAPE]


async def test_googles_errors_reach_the_client(client_factory: Any, mock: Any) -> None:
    c = await client_factory(**config())
    err = {"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                     "status": "RESOURCE_EXHAUSTED"}}  # fmt: skip
    mock.route(method="POST", url=WHOLE_URL).mock(return_value=httpx.Response(429, json=err))
    r = await c.post(path("chat", False), json=request("chat", False), headers={"authorization": "Bearer key-alice"})
    assert r.status_code == 429 and "exhausted" in r.json()["error"]["message"]
    r = await c.post(path("gemini", False), json=request("gemini", False), headers={"x-goog-api-key": "key-alice"})
    assert r.status_code == 429 and r.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    # an error in a started stream
    mock.route(method="POST", url__startswith=STREAM_URL).mock(
        return_value=httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            content=b'data: {"candidates":[{"content":{"parts":[{"text":"He"}]}}]}\r\n\r\n'
            b'data: {"error":{"code":503,"message":"overloaded","status":"UNAVAILABLE"}}\r\n\r\n',
        )
    )
    r = await c.post(path("chat", True), json=request("chat", True), headers={"authorization": "Bearer key-alice"})
    assert b'"He"' in r.content and b"server_is_overloaded" in r.content


async def test_count_tokens_is_geminis_own(client_factory: Any, mock: Any) -> None:
    c = await client_factory(**config())
    route = mock.post(BASE + "/models/gemini-3-pro-preview:countTokens").mock(
        return_value=httpx.Response(200, json={"totalTokens": 42})
    )
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    r = await c.post(
        "/v1beta/models/gemini-3.1-pro-preview:countTokens", json=body, headers={"x-goog-api-key": "key-bob"}
    )
    assert r.status_code == 200 and r.json() == {"totalTokens": 42}
    assert r.headers["x-switchboard-token-count"] == "upstream"
    sent = route.calls.last.request
    assert sent.headers["x-goog-api-key"] == "gm-key"
    assert orjson.loads(sent.content) == {"generateContentRequest": {"model": "models/gemini-3-pro-preview", **body}}
    route.mock(return_value=httpx.Response(500, json={"error": {"code": 500, "message": "x", "status": "INTERNAL"}}))
    r = await c.post(
        "/v1beta/models/gemini-3.1-pro-preview:countTokens", json=body, headers={"x-goog-api-key": "key-bob"}
    )
    assert r.status_code == 200 and r.json()["totalTokens"] > 0
    assert r.headers["x-switchboard-token-count"] == "estimate"
