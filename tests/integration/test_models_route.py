"""``GET /v1/models`` through the app: OpenAI's list for every client, Codex's catalogue when
Codex asks (``?client_version=``), and only the models the client key may use."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.unit.test_codex_models import assert_codex_decodes

KEYS = {
    "keys": [
        {"name": "alice", "key": "sk-alice"},
        {"name": "bob", "key": "sk-bob", "limits": {"models": ["kimi-*", "resp-model"]}},
    ]
}
MODELS = [
    {"name": "chat-model", "provider": "chatup", "upstream_model": "up-chat"},
    {"name": "resp-model", "provider": "respup", "upstream_model": "up-resp", "codex": {"tool_mode": "code_mode_only"}},
    {"name": "kimi-k2.6", "provider": "kimi", "codex": {"reasoning_levels": ["low", "high"]}},
    {"name": "gpt-6.2-sol", "provider": "chatup"},
    {"name": "local-*", "provider": "chatup"},  # a glob: no one model
]
# what Codex 0.171 sends (measured): a custom provider's model_catalog_url, and the built-in
# provider signed in with ChatGPT (its bearer is a ChatGPT token: an open proxy's case)
CUSTOM = {"originator": "codex_cli_rs", "user-agent": "codex_cli_rs/0.171.0 (Debian 12.0.0; x86_64) xterm"}
BUILT_IN = {**CUSTOM, "version": "0.171.0", "chatgpt-account-id": "acc-1"}


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_codex_gets_an_entry_it_accepts_for_every_model(client_factory: Any) -> None:
    c = await client_factory(auth=KEYS, models=MODELS)
    r = await c.get("/v1/models", params={"client_version": "0.171.0"}, headers={**CUSTOM, **auth("sk-alice")})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [d["id"] for d in body["data"]] == [m["name"] for m in MODELS]
    got = {e["slug"]: e for e in body["models"]}
    assert list(got) == ["chat-model", "resp-model", "kimi-k2.6", "gpt-6.2-sol"]  # not the glob
    for i, e in enumerate(body["models"], 1):
        assert_codex_decodes(e)
        assert e["priority"] == i
    assert got["resp-model"]["tool_mode"] == "code_mode_only" and got["chat-model"]["tool_mode"] is None
    assert got["gpt-6.2-sol"]["tool_mode"] == "code_mode_only" and got["gpt-6.2-sol"]["context_window"] == 500_000
    assert got["kimi-k2.6"]["context_window"] == 262_144
    assert [lvl["effort"] for lvl in got["kimi-k2.6"]["supported_reasoning_levels"]] == ["low", "high"]
    assert all(e["apply_patch_tool_type"] == "freeform" for e in got.values())


async def test_a_key_sees_only_its_models(client_factory: Any) -> None:
    c = await client_factory(auth=KEYS, models=MODELS)
    r = await c.get("/v1/models?client_version=0.171.0", headers=auth("sk-bob"))
    assert [d["id"] for d in r.json()["data"]] == ["resp-model", "kimi-k2.6"]
    assert [e["slug"] for e in r.json()["models"]] == ["resp-model", "kimi-k2.6"]
    assert [d["id"] for d in (await c.get("/v1/models", headers=auth("sk-bob"))).json()["data"]] == [
        "resp-model",
        "kimi-k2.6",
    ]
    assert (await c.get("/v1/models/kimi-k2.6", headers=auth("sk-bob"))).status_code == 200
    hidden = await c.get("/v1/models/chat-model", headers=auth("sk-bob"))
    assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "model_not_found"
    assert (await c.get("/v1/models/chat-model", headers=auth("sk-alice"))).status_code == 200
    assert (await c.get("/v1/models?client_version=0.171.0")).status_code == 401


async def test_the_built_in_provider_signed_in_gets_the_same_catalogue(client_factory: Any) -> None:
    c = await client_factory(models=MODELS)  # open proxy: the bearer is the user's ChatGPT token
    custom = (await c.get("/v1/models?client_version=0.171.0", headers={**CUSTOM, **auth("chatgpt-token")})).json()
    built_in = (await c.get("/v1/models?client_version=0.171.0", headers={**BUILT_IN, **auth("chatgpt-token")})).json()
    assert built_in == custom and len(built_in["models"]) == 4


@pytest.mark.parametrize("headers", [{}, {"user-agent": "OpenAI/Python 2.14.0"}])
async def test_other_clients_get_openais_list(client_factory: Any, headers: dict[str, str]) -> None:
    c = await client_factory(auth=KEYS, models=MODELS)
    r = await c.get("/v1/models", headers={**headers, **auth("sk-alice")})
    assert set(r.json()) == {"object", "data"}
    sdk = openai.AsyncOpenAI(api_key="sk-bob", base_url="http://127.0.0.1:8080/v1", http_client=c)
    listed = [m async for m in sdk.models.list()]
    assert [(m.id, m.object, m.owned_by) for m in listed] == [
        ("resp-model", "model", "respup"),
        ("kimi-k2.6", "model", "kimi"),
    ]
    one = await sdk.models.retrieve("kimi-k2.6")
    assert one.id == "kimi-k2.6"
    with pytest.raises(openai.NotFoundError):
        await sdk.models.retrieve("chat-model")
