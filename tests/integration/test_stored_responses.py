"""Stored responses through the app (in process, upstreams mocked): ``store``,
``previous_response_id`` toward every kind of upstream, the ``/v1/responses/{id}`` routes,
scoping per client key, storing turned off, and a store that does not answer."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tests.integration.conftest import BASE_CONFIG, CHAT_URL, RESP_URL, parse_sse, sse_response
from tests.upstream_io import asgi_post

KEYS = [{"name": "alice", "key": "sk-alice"}, "sk-bob"]
ALICE = {"authorization": "Bearer sk-alice"}
BOB = {"authorization": "Bearer sk-bob"}
OAI_URL = "http://oai.test/v1/responses"


def cfg(tmp_path: Any, **store: Any) -> dict[str, Any]:
    providers = [
        *BASE_CONFIG["providers"],
        {"name": "oai", "profile": "openai", "protocol": "responses", "base_url": "http://oai.test/v1", "api_key": "k"},
    ]
    models = [*BASE_CONFIG["models"], {"name": "oai-model", "provider": "oai", "upstream_model": "gpt-up"}]
    return {
        "auth": {"keys": KEYS},
        "store": {"path": str(tmp_path / "store.db"), **store},
        "providers": providers,
        "models": models,
    }


def chat_answer(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "up-chat",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


def resp_answer(rid: str, text: str) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": "up-resp",
        "output": [
            {
                "id": f"msg_{rid}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
    }


class Upstream:
    """Records what each mocked upstream received; answers turn n with 'answer n'."""

    def __init__(self, mock: Any) -> None:
        self.bodies: dict[str, list[dict[str, Any]]] = {"chat": [], "resp": [], "oai": []}
        mock.post(CHAT_URL).mock(side_effect=lambda req: self._chat(req))
        mock.post(RESP_URL).mock(side_effect=lambda req: self._resp(req, "resp"))
        mock.post(OAI_URL).mock(side_effect=lambda req: self._resp(req, "oai"))
        self.deleted = mock.delete(url__startswith=OAI_URL + "/").mock(return_value=httpx.Response(200, json={}))

    def _chat(self, req: httpx.Request) -> httpx.Response:
        body = orjson.loads(req.content)
        self.bodies["chat"].append(body)
        return httpx.Response(200, json=chat_answer(f"answer {len(self.bodies['chat'])}"))

    def _resp(self, req: httpx.Request, name: str) -> httpx.Response:
        body = orjson.loads(req.content)
        self.bodies[name].append(body)
        n = sum(len(v) for v in self.bodies.values())
        rid = f"resp_{name}{n:04d}"
        if body.get("stream"):
            final = resp_answer(rid, f"answer {n}")
            return sse_response(
                [
                    {"type": "response.created", "response": {**final, "status": "in_progress", "output": []}},
                    {"type": "response.output_item.added", "output_index": 0, "item": final["output"][0]},
                    {"type": "response.output_item.done", "output_index": 0, "item": final["output"][0]},
                    {"type": "response.completed", "response": final},
                ],
                event_names=True,
            )
        return httpx.Response(200, json=resp_answer(rid, f"answer {n}"))


@pytest.fixture
def up(mock: Any) -> Upstream:
    return Upstream(mock)


async def turn(c: httpx.AsyncClient, model: str, text: str, prev: str | None = None, **kw: Any) -> dict[str, Any]:
    headers = kw.pop("headers", ALICE)
    body: dict[str, Any] = {"model": model, "input": text, **kw}
    if prev:
        body["previous_response_id"] = prev
    r = await c.post("/v1/responses", json=body, headers=headers)
    assert r.status_code == 200, r.text
    if body.get("stream"):
        events = parse_sse(r.content)
        return events[-1]["response"]
    return r.json()


def texts(messages: list[dict[str, Any]]) -> list[str]:
    out = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, str):
            out.append(c)
        elif isinstance(c, list):
            out.append("".join(p.get("text", "") for p in c))
    return out


@pytest.mark.parametrize("stream", [False, True])
async def test_three_turns_through_a_chat_upstream(client_factory: Any, up: Upstream, tmp_path: Any, stream: bool):
    c = await client_factory(**cfg(tmp_path))
    r1 = await turn(c, "chat-model", "one", stream=stream)
    assert r1["store"] is True and r1["previous_response_id"] is None
    r2 = await turn(c, "chat-model", "two", r1["id"], stream=stream)
    assert r2["previous_response_id"] == r1["id"] and r2["store"] is True
    r3 = await turn(c, "chat-model", "three", r2["id"], stream=stream, instructions="be brief")
    third = up.bodies["chat"][2]["messages"]
    assert texts(third) == ["be brief", "one", "answer 1", "two", "answer 2", "three"]
    assert [m["role"] for m in third] == ["system", "user", "assistant", "user", "assistant", "user"]
    got = await c.get(f"/v1/responses/{r3['id']}", headers=ALICE)
    assert got.status_code == 200 and got.json()["output"] == r3["output"]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_bridged_turns_ids_begin_with_the_time_they_were_made(client_factory, up, tmp_path, stream):
    """The ids a bridged answer mints (the response, its output items, its input items
    given one) begin with the time in milliseconds, in 12 hex digits: a turn's are together
    and later turns' sort after (the store's index appends them); the rest stays random."""
    import time

    c = await client_factory(**cfg(tmp_path))
    before = time.time_ns() // 1_000_000
    r1 = await turn(c, "chat-model", "one", stream=stream)
    r2 = await turn(c, "chat-model", "two", r1["id"], stream=stream)
    after = time.time_ns() // 1_000_000
    ids = []
    for r in (r1, r2):
        items = (await c.get(f"/v1/responses/{r['id']}/input_items", headers=ALICE)).json()["data"]
        ids.append([r["id"], *(o["id"] for o in r["output"]), *(i["id"] for i in items)])
    bodies = [[i.split("_", 1)[1] for i in group] for group in ids]
    for body in [b for group in bodies for b in group]:
        assert len(body) in (32, 40) and before <= int(body[:12], 16) <= after, body
    assert bodies[0][0][:12] <= bodies[1][0][:12]
    assert len({b[12:] for group in bodies for b in group}) == sum(map(len, bodies))  # the rest differs
    assert max(b[:12] for b in bodies[0]) <= min(b[:12] for b in bodies[1])  # the second turn's after
    # an item of the first turn, referenced later by its id, is found
    ref = {"type": "item_reference", "id": ids[0][1]}
    r3 = await c.post("/v1/responses", json={"model": "chat-model", "input": [ref]}, headers=ALICE)
    assert r3.status_code == 200, r3.text
    assert texts(up.bodies["chat"][-1]["messages"]) == ["answer 1"]


async def test_responses_upstream_that_keeps_nothing_gets_the_rebuilt_input(client_factory, up, tmp_path):
    c = await client_factory(**cfg(tmp_path))
    r1 = await turn(c, "resp-model", "one")
    r2 = await turn(c, "resp-model", "two", r1["id"])
    sent = up.bodies["resp"][1]
    assert "previous_response_id" not in sent
    assert texts(sent["input"]) == ["one", "answer 1", "two"]
    assert all("id" not in i for i in sent["input"][:2])  # ids it never stored are not sent
    assert r2["previous_response_id"] == r1["id"]


async def test_responses_upstream_that_stores_continues_itself_until_the_provider_changes(client_factory, up, tmp_path):
    c = await client_factory(**cfg(tmp_path))
    r1 = await turn(c, "oai-model", "one")
    r2 = await turn(c, "oai-model", "two", r1["id"], stream=True)
    assert up.bodies["oai"][1]["previous_response_id"] == r1["id"]
    assert up.bodies["oai"][1]["input"] == "two"  # only the new turn: the upstream has the rest
    assert r2["id"].startswith("resp_oai")  # the upstream's own id, so it can continue it
    await turn(c, "chat-model", "three", r2["id"])  # the conversation moves to a Chat upstream
    assert texts(up.bodies["chat"][0]["messages"]) == ["one", "answer 1", "two", "answer 2", "three"]
    # DELETE of a response the upstream keeps is forwarded to it
    d = await c.delete(f"/v1/responses/{r1['id']}", headers=ALICE)
    assert d.status_code == 200 and d.json() == {"id": r1["id"], "object": "response.deleted", "deleted": True}
    assert up.deleted.call_count == 1 and up.deleted.calls[0].request.url.path.endswith(r1["id"])


async def test_scoping_get_input_items_delete_and_not_found(client_factory, up, tmp_path):
    c = await client_factory(**cfg(tmp_path))
    items = [{"type": "message", "role": "user", "content": f"m{i}"} for i in range(5)]
    r = await c.post("/v1/responses", json={"model": "chat-model", "input": items}, headers=ALICE)
    rid = r.json()["id"]
    for path in (f"/v1/responses/{rid}", f"/v1/responses/{rid}/input_items"):
        other = await c.get(path, headers=BOB)
        assert other.status_code == 404 and other.json()["error"]["type"] == "invalid_request_error"
    cont = await c.post(
        "/v1/responses", json={"model": "chat-model", "input": "x", "previous_response_id": rid}, headers=BOB
    )
    assert cont.status_code == 404 and cont.json()["error"]["code"] == "previous_response_not_found"
    assert (await c.delete(f"/v1/responses/{rid}", headers=BOB)).status_code == 404

    page = (await c.get(f"/v1/responses/{rid}/input_items?order=asc&limit=2", headers=ALICE)).json()
    assert [i["content"] for i in page["data"]] == ["m0", "m1"] and page["has_more"] is True
    assert page["first_id"] == page["data"][0]["id"] and page["last_id"] == page["data"][1]["id"]
    page2 = (
        await c.get(f"/v1/responses/{rid}/input_items?order=asc&limit=2&after={page['last_id']}", headers=ALICE)
    ).json()
    assert [i["content"] for i in page2["data"]] == ["m2", "m3"]
    desc = (await c.get(f"/v1/responses/{rid}/input_items", headers=ALICE)).json()
    assert [i["content"] for i in desc["data"]] == ["m4", "m3", "m2", "m1", "m0"] and desc["has_more"] is False
    assert (await c.get(f"/v1/responses/{rid}/input_items?limit=0", headers=ALICE)).status_code == 400

    replay = await c.get(f"/v1/responses/{rid}?stream=true", headers=ALICE)
    events = parse_sse(replay.content)
    assert [e["type"] for e in events][0] == "response.created"
    assert events[-1]["type"] == "response.completed" and events[-1]["response"]["id"] == rid
    assert [e["sequence_number"] for e in events] == list(range(len(events)))

    assert (await c.delete(f"/v1/responses/{rid}", headers=ALICE)).status_code == 200
    assert (await c.get(f"/v1/responses/{rid}", headers=ALICE)).status_code == 404
    gone = await c.post(
        "/v1/responses", json={"model": "chat-model", "input": "x", "previous_response_id": rid}, headers=ALICE
    )
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "previous_response_not_found"


async def test_store_false_is_not_stored_and_can_still_continue(client_factory, up, tmp_path):
    c = await client_factory(**cfg(tmp_path))
    r1 = await turn(c, "chat-model", "one")
    r2 = await turn(c, "chat-model", "two", r1["id"], store=False)
    assert r2["store"] is False and r2["previous_response_id"] == r1["id"]
    assert texts(up.bodies["chat"][1]["messages"]) == ["one", "answer 1", "two"]
    assert (await c.get(f"/v1/responses/{r2['id']}", headers=ALICE)).status_code == 404


async def test_storing_turned_off(client_factory, up, tmp_path):
    c = await client_factory(**cfg(tmp_path, enabled=False))
    r = await c.post("/v1/responses", json={"model": "chat-model", "input": "x", "store": True}, headers=ALICE)
    assert r.status_code == 400
    e = r.json()["error"]
    assert e["code"] == "store_disabled" and e["param"] == "store"
    r1 = await turn(c, "resp-model", "one")  # absent store = false, upstream included
    assert r1["store"] is False and up.bodies["resp"][0]["store"] is False
    assert (await c.get(f"/v1/responses/{r1['id']}", headers=ALICE)).status_code == 404
    assert not (tmp_path / "store.db").exists()
    assert "store" not in (await c.get("/readyz")).json()


async def test_unreachable_store_degrades_only_stored_requests(client_factory, up, tmp_path):
    c = await client_factory(**cfg(tmp_path, backend="redis", url="redis://127.0.0.1:1/0", timeout_seconds=0.3))
    ok = await c.post("/v1/responses", json={"model": "chat-model", "input": "x", "store": False}, headers=ALICE)
    assert ok.status_code == 200  # stateless: no store I/O at all
    chat = await c.post(
        "/v1/chat/completions",
        json={"model": "chat-model", "messages": [{"role": "user", "content": "x"}]},
        headers=ALICE,
    )
    assert chat.status_code == 200
    metrics = (await c.get("/metrics")).text
    assert "switchboard_store_errors_total" not in metrics
    for body in (
        {"model": "chat-model", "input": "x", "previous_response_id": "resp_1"},
        {"model": "chat-model", "input": "x", "store": False, "previous_response_id": "resp_1"},
    ):
        r = await c.post("/v1/responses", json=body, headers=ALICE)
        assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable", r.text
    # a store:true answer goes out; its put fails, is counted, and the answer says store: false
    stored = await c.post("/v1/responses", json={"model": "chat-model", "input": "x"}, headers=ALICE)
    assert stored.status_code == 200 and stored.json()["store"] is False
    assert (await c.get("/v1/responses/resp_x", headers=ALICE)).status_code == 503
    ready = await c.get("/readyz")
    assert ready.status_code == 200 and ready.json()["store"] == "degraded"
    metrics = (await c.get("/metrics")).text
    assert 'switchboard_store_errors_total{op="put"} 1' in metrics
    assert 'switchboard_store_errors_total{op="chain"}' not in metrics  # the first lookup is a get
    assert 'switchboard_store_errors_total{op="get"} 3' in metrics


async def test_plain_keys_own_their_responses_too(client_factory, up, tmp_path):
    c = await client_factory(**cfg(tmp_path))
    r = await turn(c, "chat-model", "one", headers=BOB)
    assert (await c.get(f"/v1/responses/{r['id']}", headers=BOB)).status_code == 200
    assert (await c.get(f"/v1/responses/{r['id']}", headers=ALICE)).status_code == 404


async def test_a_stored_chain_past_the_body_limit_is_a_context_error(client_factory, up, tmp_path):
    """A conversation continued by previous_response_id is rebuilt by the proxy: it is bounded
    as one request is (server.max_body_bytes), and past it answered as OpenAI answers an
    input too long for the context, before anything goes upstream."""
    c = await client_factory(**cfg(tmp_path), server={"max_body_bytes": 4096})
    prev = None
    for _ in range(3):
        r = await c.post(
            "/v1/responses",
            json={"model": "chat-model", "input": "x" * 1000, **({"previous_response_id": prev} if prev else {})},
            headers=ALICE,
        )
        assert r.status_code == 200, r.text
        prev = r.json()["id"]
    r = await c.post(
        "/v1/responses", json={"model": "chat-model", "input": "y" * 1000, "previous_response_id": prev}, headers=ALICE
    )
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded" and err["param"] == "input"
    assert len(up.bodies["chat"]) == 3  # nothing went upstream for the fourth turn


def body_of(sent: list[dict[str, Any]]) -> bytes:
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


@pytest.mark.parametrize(
    ("model", "stream"),
    [("chat-model", False), ("resp-model", False), ("resp-model", True), ("chat-model", True)],
)
async def test_the_put_is_done_before_the_terminal_leaves(client_factory, up, tmp_path, model, stream):
    """What the client was told is stored is in the store before the bytes that tell it leave:
    a non-streamed answer is sent after the put, a stream sends its events up to the
    terminal one, then waits for the put (an upstream stream, and a Chat upstream that
    answered a stream request whole)."""
    c = await client_factory(**cfg(tmp_path))
    app = c._transport.app  # type: ignore[attr-defined]
    store = app.state.service.store
    sent: list[dict[str, Any]] = []
    at_put: list[list[dict[str, Any]]] = []
    real = store.put

    async def put(rec: Any) -> None:
        at_put.append(list(sent))  # what had gone out when the put began
        await real(rec)

    store.put = put

    async def send(msg: dict[str, Any]) -> None:
        sent.append(msg)

    body = orjson.dumps({"model": model, "input": "one", "stream": stream})
    await asgi_post(app, "/v1/responses", body, send, headers=((b"authorization", b"Bearer sk-alice"),))
    assert len(at_put) == 1
    if stream:
        before = parse_sse(body_of(at_put[0]))
        assert before and before[0]["type"] == "response.created"
        assert not any(e["type"] == "response.completed" for e in before)
        events = parse_sse(body_of(sent))
        assert events[: len(before)] == before and events[-1]["type"] == "response.completed"
        final = events[-1]["response"]
    else:
        assert at_put[0] == []  # not even the head
        final = orjson.loads(body_of(sent))
    assert final["store"] is True
    got = await c.get(f"/v1/responses/{final['id']}", headers=ALICE)
    assert got.status_code == 200 and got.json()["output"] == final["output"]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_failed_put_answers_store_false(client_factory, up, tmp_path, stream, monkeypatch):
    """The store fails the put (the SQLite journal's write: a full disk): the answer still
    goes out, its response object (a stream's terminal event) says store: false, and the
    failure is counted."""
    from app import journal

    c = await client_factory(**cfg(tmp_path))

    def broken(self: Any, frame: bytes) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(journal.Journal, "append", broken)
    r = await c.post("/v1/responses", json={"model": "resp-model", "input": "one", "stream": stream}, headers=ALICE)
    assert r.status_code == 200
    if stream:
        events = parse_sse(r.content)
        assert events[0]["response"]["store"] is True  # (said before the put was tried)
        assert events[-1]["type"] == "response.completed"
        final = events[-1]["response"]
        assert final["output"][0]["content"][0]["text"] == "answer 1"
    else:
        final = r.json()
    assert final["store"] is False
    assert (await c.get(f"/v1/responses/{final['id']}", headers=ALICE)).status_code == 404
    assert 'switchboard_store_errors_total{op="put"} 1' in (await c.get("/metrics")).text
