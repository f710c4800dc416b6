"""Each protocol row's token count route and own model list (``count`` and ``models`` in
``transformers/protocols.py``) are served from the row: a new row's come without a change to
``app/main.py``.  The protocols' own tests hold each route's details (``test_messages.py``,
``test_gemini_client.py``, ``test_gemini_native.py``)."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tests.protocol_samples import hello
from transformers.protocols import SPECS

COUNTED = [name for name, spec in SPECS.items() if spec.count is not None]
LISTED = [name for name, spec in SPECS.items() if spec.models is not None]


def test_the_rows_that_count_and_list() -> None:
    assert {"messages", "gemini"} <= set(COUNTED) and "gemini" in LISTED


@pytest.mark.parametrize("name", COUNTED)
async def test_every_count_route_is_served(client: httpx.AsyncClient, name: str) -> None:
    c = SPECS[name].count
    assert c is not None
    body: dict[str, Any] = {k: v for k, v in hello(name, model="chat-model").items() if k != "stream"}
    path = c.route.replace("{model}", "chat-model")
    r = await client.post(path, json=body)
    # a Chat upstream counts nothing of this protocol's: the row's estimate
    assert r.status_code == 200, r.text
    assert r.json() == {c.field: c.estimate(c.read(body))}
    assert r.headers["x-switchboard-token-count"] == "estimate" and r.headers["x-request-id"]
    r = await client.post(path, content=b"{")  # refused in the row's error shape
    said = {"message": "the request body is not valid JSON", "code": "invalid_json"}
    assert r.status_code == 400
    assert r.json() == orjson.loads(SPECS[name].error(400, said, r.headers["x-request-id"]))


@pytest.mark.parametrize("name", LISTED)
async def test_every_model_list_is_served(client: httpx.AsyncClient, name: str) -> None:
    ml = SPECS[name].models
    assert ml is not None
    r = await client.get(ml.route)
    assert r.status_code == 200
    entries = r.json()[ml.field]
    assert entries[0] == (await client.get(ml.route + "/chat-model")).json()
    r = await client.get(ml.route + "/nope")
    assert r.status_code == 404 and ml.missing.format(model="nope") in r.text
