"""Input items through the app (transformers/items.py, app/stored.py): ``item_reference``
resolved from the store per client key, unknown ids answered as OpenAI does, dropped items
named and never logged ``completed``, and Codex's code mode on a Chat upstream with the call
coming back namespaced, streamed and not."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
import structlog

from tests.integration.conftest import CHAT_URL, chat_chunk, parse_sse, sse_response
from tests.integration.test_stored_responses import ALICE, BOB, OAI_URL, RESP_URL, Upstream, cfg


@pytest.fixture
def up(mock: Any) -> Upstream:
    return Upstream(mock)


async def post(c: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str] = ALICE) -> httpx.Response:
    return await c.post("/v1/responses", json=body, headers=headers)


def refs(resp: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "item_reference", "id": item["id"]} for item in resp["output"]]


@pytest.mark.parametrize("model,upstream", [("chat-model", "chat"), ("resp-model", "resp")])
async def test_references_to_stored_items_are_resolved(client_factory, up, tmp_path, model, upstream):
    c = await client_factory(**cfg(tmp_path))
    r1 = (await post(c, {"model": model, "input": "one"})).json()  # store unset: stored
    assert r1["store"] is True
    second = [{"type": "message", "role": "user", "content": "one"}, *refs(r1), {"role": "user", "content": "two"}]
    r2 = await post(c, {"model": model, "input": second})
    assert r2.status_code == 200, r2.text
    sent = up.bodies[upstream][1]
    if upstream == "chat":
        assert [m["content"] for m in sent["messages"]] == ["one", "answer 1", "two"]
    else:
        assert [i.get("type", "message") for i in sent["input"]] == ["message", "message", "message"]
        assert sent["input"][1]["content"][0]["text"] == "answer 1"
        assert "id" not in sent["input"][1]  # an id the upstream never issued is not sent
    # the second turn is stored resolved: a reference to its own input works on the next one
    stored = (await c.get(f"/v1/responses/{r2.json()['id']}/input_items?order=asc", headers=ALICE)).json()
    assert stored["data"][1]["type"] == "message" and stored["data"][1]["role"] == "assistant"
    # and with store=false too (the references name stored items, the new turn is not stored)
    r3 = await post(c, {"model": model, "input": [*refs(r1), {"role": "user", "content": "3"}], "store": False})
    assert r3.status_code == 200 and r3.json()["store"] is False


async def test_another_keys_item_and_an_unknown_id_are_404_naming_the_item(client_factory, up, tmp_path):
    c = await client_factory(**cfg(tmp_path))
    r1 = (await post(c, {"model": "chat-model", "input": "one"})).json()
    for headers, rid in ((BOB, r1["output"][0]["id"]), (ALICE, "msg_nobody")):
        r = await post(
            c,
            {"model": "chat-model", "input": [{"role": "user", "content": "x"}, {"type": "item_reference", "id": rid}]},
            headers,
        )
        assert r.status_code == 404, r.text
        err = r.json()["error"]
        assert err["param"] == "input[1]" and err["type"] == "invalid_request_error"
        assert err["message"] == f"Item with id '{rid}' not found."
    assert len(up.bodies["chat"]) == 1  # nothing went upstream


async def test_store_off_says_so(client_factory, up, tmp_path):
    c = await client_factory(**cfg(tmp_path, enabled=False))
    r = await post(c, {"model": "chat-model", "input": [{"type": "item_reference", "id": "msg_1"}]})
    assert r.status_code == 404 and "store.enabled: false" in r.json()["error"]["message"]
    # toward OpenAI an unknown reference may be its own: it passes
    r = await post(c, {"model": "oai-model", "input": [{"type": "item_reference", "id": "msg_theirs"}], "store": False})
    assert r.status_code == 200, r.text
    assert up.bodies["oai"][0]["input"] == [{"type": "item_reference", "id": "msg_theirs"}]


async def test_openai_gets_the_items_too(client_factory, up, tmp_path):
    """The ids of stored items are the proxy's (it gives every output item its own id), so
    even OpenAI, which keeps its responses, could not resolve a reference to one."""
    c = await client_factory(**cfg(tmp_path))
    r1 = (await post(c, {"model": "oai-model", "input": "one"})).json()
    r = await post(c, {"model": "oai-model", "input": [*refs(r1), {"role": "user", "content": "two"}]})
    assert r.status_code == 200, r.text
    first = up.bodies["oai"][1]["input"][0]
    assert first["type"] == "message" and first["content"][0]["text"] == "answer 1" and "id" not in first
    r = await post(c, {"model": "chat-model", "input": [*refs(r1), {"role": "user", "content": "two"}]})
    assert r.status_code == 200, r.text
    assert [m["content"] for m in up.bodies["chat"][0]["messages"]] == ["answer 1", "two"]


async def test_a_dropped_item_is_named_warned_and_not_logged_completed(client_factory, up, tmp_path):
    c = await client_factory(**cfg(tmp_path))
    body = {
        "model": "chat-model",
        "store": False,
        "stream": True,
        "input": [
            {"role": "user", "content": "search"},
            {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"query": "q"}},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "found"}]},
            {"role": "user", "content": "thanks"},
        ],
    }
    with structlog.testing.capture_logs() as logs:
        r = await post(c, body)
    assert r.status_code == 200
    assert r.headers["x-switchboard-dropped-items"] == "input[1]:web_search_call"
    warn = [e for e in logs if e["event"] == "input_items_dropped"]
    assert warn and warn[0]["items"] == ["input[1]:web_search_call"] and warn[0]["request_id"]
    line = [e for e in logs if e["event"] == "request"][-1]
    assert line["terminal"] == "completed_items_dropped"
    metrics = (await c.get("/metrics")).text
    assert 'switchboard_repairs_total{provider="chatup",rule="hosted_call_dropped"} 1' in metrics, [
        m for m in metrics.splitlines() if "hosted_call" in m
    ]
    # a call whose output is kept, for a tool only OpenAI runs: refused, nothing sent
    body["input"][1] = {"type": "computer_call", "call_id": "cc", "action": {"type": "click"}}
    r = await post(c, body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "input[1]"
    assert r.json()["error"]["code"] == "unsupported_input_item"


# -- Codex code mode on a Chat upstream -----------------------------------------------------

SCRIPT = 'const r = await tools.exec_command({cmd: "echo hi"}); text(JSON.stringify(r));'
CODE_MODE = {
    "model": "chat-model",
    "store": False,
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "input": [
        {
            "type": "additional_tools",
            "role": "developer",
            "tools": [
                {
                    "type": "namespace",
                    "name": "functions",
                    "description": "",
                    "tools": [{"type": "custom", "name": "exec", "description": "Run JavaScript code"}],
                },
                {
                    "type": "namespace",
                    "name": "clock",
                    "tools": [{"type": "function", "name": "sleep", "parameters": {}}],
                },
            ],
        },
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "say hi"}]},
    ],
}


def _chat_call_stream() -> list[Any]:
    args = orjson.dumps({"input": SCRIPT}).decode()
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "functions__exec", "arguments": ""}}
    return [
        chat_chunk({"role": "assistant", "tool_calls": [call]}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[:20]}}]}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[20:]}}]}),
        chat_chunk(finish="tool_calls"),
        "[DONE]",
    ]


@pytest.mark.parametrize("stream", [True, False])
async def test_code_mode_on_a_chat_upstream(client_factory, mock, stream):
    sent: list[dict[str, Any]] = []

    def answer(req: httpx.Request) -> httpx.Response:
        sent.append(orjson.loads(req.content))
        if stream:
            return sse_response(_chat_call_stream())
        args = orjson.dumps({"input": SCRIPT}).decode()
        msg = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "functions__exec", "arguments": args}}
            ],
        }
        return httpx.Response(
            200,
            json={
                "id": "c",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls"}],
            },  # fmt: skip
        )

    mock.post(CHAT_URL).mock(side_effect=answer)
    c = await client_factory()
    r = await c.post("/v1/responses", json={**CODE_MODE, "stream": stream})
    assert r.status_code == 200, r.text
    assert [t["function"]["name"] for t in sent[0]["tools"]] == ["functions__exec", "clock__sleep"]
    assert sent[0]["messages"] == [{"role": "user", "content": "say hi"}]
    if stream:
        events = parse_sse(r.content)
        done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
        final = events[-1]["response"]
    else:
        final = r.json()
        done = final["output"]
    calls = [i for i in done if i["type"] == "custom_tool_call"]
    assert len(calls) == 1
    assert calls[0]["name"] == "exec" and calls[0]["namespace"] == "functions" and calls[0]["input"] == SCRIPT
    assert calls[0]["call_id"] == "call_1"
    assert final["status"] == "completed"
    # the next request carries its output; the history goes back flattened, the call id kept
    follow = {
        **CODE_MODE,
        "input": [
            *CODE_MODE["input"],
            {k: calls[0][k] for k in ("type", "call_id", "name", "namespace", "input")},
            {"type": "custom_tool_call_output", "call_id": "call_1", "output": '{"output":"hi\\n"}'},
        ],
    }
    mock.post(CHAT_URL).mock(
        return_value=sse_response(
            [chat_chunk({"role": "assistant", "content": "hi"}), chat_chunk(finish="stop"), "[DONE]"]
        )
    )
    r = await c.post("/v1/responses", json={**follow, "stream": True})
    assert r.status_code == 200
    assert "response.completed" in r.text


async def test_code_mode_toward_openai_passes_and_toward_other_responses_hoists(client_factory, mock, tmp_path):
    got: dict[str, list[dict[str, Any]]] = {"oai": [], "resp": []}
    for name, url in (("oai", OAI_URL), ("resp", RESP_URL)):
        mock.post(url).mock(
            side_effect=lambda req, name=name: (got[name].append(orjson.loads(req.content)), httpx.Response(500))[1]
        )
    c = await client_factory(**cfg(tmp_path))
    await post(c, {**CODE_MODE, "model": "oai-model"})
    await post(c, {**CODE_MODE, "model": "resp-model"})
    assert got["oai"][0]["input"][0]["type"] == "additional_tools" and "tools" not in got["oai"][0]
    other = got["resp"][0]
    assert [i["type"] for i in other["input"]] == ["message"]
    assert [t["name"] for t in other["tools"]] == ["functions", "clock"]


# -- request ids on every answer ---------------------------------------------------------------


async def test_every_answer_carries_a_request_id_and_a_plain_incoming_one_is_adopted(client_factory, up, tmp_path):
    c = await client_factory(**cfg(tmp_path))
    r1 = await post(c, {"model": "chat-model", "input": "one"}, {**ALICE, "x-request-id": "trace-42.a:b"})
    assert r1.headers["x-request-id"] == "trace-42.a:b"
    rid = r1.json()["id"]
    for method, path in (
        ("GET", f"/v1/responses/{rid}"),
        ("GET", f"/v1/responses/{rid}?stream=true"),
        ("GET", f"/v1/responses/{rid}/input_items"),
        ("GET", "/v1/models"),
        ("GET", "/v1/models/chat-model"),
        ("GET", "/v1/responses/resp_unknown"),
        ("DELETE", f"/v1/responses/{rid}"),
    ):
        r = await c.request(method, path, headers=ALICE)
        assert r.headers["x-request-id"].startswith("req_"), (method, path, r.status_code)
        r = await c.request(method, path, headers={**ALICE, "x-request-id": "mine-1"})
        assert r.headers["x-request-id"] == "mine-1", (method, path)
    # one that is not a plain token (or too long) is not taken
    for bad in ("a b", "x" * 129, "a/b"):
        r = await post(c, {"model": "chat-model", "input": "two", "store": False}, {**ALICE, "x-request-id": bad})
        assert r.headers["x-request-id"].startswith("req_") and r.headers["x-request-id"] != bad
