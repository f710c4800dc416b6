"""Capture → replay: exchanges of a Mantle, a Kimi and a MiMo upstream captured through the
app, replayed offline to the same client bytes; a repair broken on purpose shows in the
replay; secrets masked; rotation; the CLI."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.cli import main as cli
from app.replay import replay_line
from transformers import tool_stage

from .test_profiles import RAW_PATCH, chat_answer, codex_request, mantle_answer

UPSTREAMS = {
    "mantle": ("http://mantle.test/v1/responses", mantle_answer),
    "kimi": ("http://kimi.test/v1/chat/completions", lambda: chat_answer()),
    "mimo": (
        "http://mimo.test/v1/chat/completions",
        lambda: chat_answer(reasoning=None, text=None, calls=(("call_1", "apply_patch", RAW_PATCH),)),
    ),
}


def config(path: Path, **capture: Any) -> dict[str, Any]:
    return {
        "capture": {"enabled": True, "path": str(path), **capture},
        "auth": {"keys": [{"name": "alice", "key": "sk-alice"}, {"name": "bob", "key": "sk-bob"}]},
        "providers": [
            {"name": "mantle", "profile": "bedrock-mantle", "base_url": "http://mantle.test/v1", "api_key": "sk-mantle-secret"},
            {"name": "kimi", "profile": "kimi", "base_url": "http://kimi.test/v1", "api_key": "sk-kimi-secret"},
            {"name": "mimo", "profile": "mimo", "base_url": "http://mimo.test/v1", "api_key": "sk-mimo-secret"},
        ],
        "models": [
            {"name": "gpt-oss", "provider": "mantle", "upstream_model": "openai.gpt-oss-120b"},
            {"name": "kimi-k2.6", "provider": "kimi"},
            {"name": "mimo-v2.6-pro", "provider": "mimo"},
        ],
    }  # fmt: skip


MODELS = {"mantle": "gpt-oss", "kimi": "kimi-k2.6", "mimo": "mimo-v2.6-pro"}


async def run(
    client_factory: Any, mock: Any, path: Path, which: list[str], key: str = "sk-alice", **capture: Any
) -> None:
    c = await client_factory(**config(path, **capture))
    for name in which:
        url, answer = UPSTREAMS[name]
        mock.post(url).mock(side_effect=lambda req, a=answer: a())
        r = await c.post("/v1/responses", json=codex_request(MODELS[name]), headers={"authorization": f"Bearer {key}"})
        assert r.status_code == 200, r.text


def lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()]


async def test_captured_exchanges_replay_to_the_same_bytes(client_factory: Any, mock: Any, tmp_path: Path) -> None:
    path = tmp_path / "capture.jsonl"
    await run(client_factory, mock, path, ["mantle", "kimi", "mimo"])
    got = lines(path)
    assert [(x["provider"], x["client"], x["upstream"], x["status"], x["terminal"]) for x in got] == [
        ("mantle", "responses", "responses", 200, "completed"),
        ("kimi", "responses", "chat", 200, "completed"),
        ("mimo", "responses", "chat", 200, "completed"),
    ]
    assert "mimo_raw_patch" in got[2]["repairs"] and got[0]["upstream_request"]["url"].endswith("/responses")
    assert got[1]["upstream_events"][-1][1] == "end" and got[1]["key"] == "alice"
    text = path.read_text()
    assert "secret" not in text  # the providers' keys never reach the file
    for i, line in enumerate(got):
        out = replay_line(line, i)
        assert out.same, out.diff()
        assert out.client_now and "response.completed" in out.client_now
    assert cli(["replay", str(path)]) == 0


async def test_a_broken_repair_shows_in_the_replay(
    client_factory: Any, mock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    path = tmp_path / "capture.jsonl"
    await run(client_factory, mock, path, ["mimo"])
    line = lines(path)[0]
    assert replay_line(line).same
    monkeypatch.setattr(tool_stage, "is_raw_patch", lambda text: False)  # R3-a no longer recognises the patch
    out = replay_line(copy.deepcopy(line))
    assert not out.same and "apply_patch" in out.diff()
    assert "client bytes (captured)" in out.diff() and "custom_tool_call" in out.client_then
    assert cli(["replay", str(path)]) == 1
    assert "CHANGED" in capsys.readouterr().out


async def test_only_the_matching_keys_and_models_are_captured(client_factory: Any, mock: Any, tmp_path: Path) -> None:
    path = tmp_path / "capture.jsonl"
    await run(client_factory, mock, path, ["mantle", "mimo"], keys=["alice"], models=["mimo-*"])
    assert [x["model"] for x in lines(path)] == ["mimo-v2.6-pro"]
    path2 = tmp_path / "other.jsonl"
    await run(client_factory, mock, path2, ["mimo"], key="sk-bob", keys=["alice"])
    assert not path2.exists()


async def test_the_file_is_rotated(client_factory: Any, mock: Any, tmp_path: Path) -> None:
    path = tmp_path / "capture.jsonl"
    await run(client_factory, mock, path, ["kimi"] * 4, max_bytes=4096, keep=1)
    assert path.exists() and Path(f"{path}.1").exists() and not Path(f"{path}.2").exists()
    assert path.stat().st_mode & 0o777 == 0o600  # prompts: the owner's only


async def test_golden_writes_the_line(
    client_factory: Any, mock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "capture.jsonl"
    await run(client_factory, mock, path, ["kimi"])
    monkeypatch.chdir(tmp_path)
    assert cli(["replay", str(path), "--index", "0", "--golden", "kimi-case"]) == 0
    written = orjson.loads((tmp_path / "tests" / "golden" / "captured" / "kimi-case.json").read_bytes())
    assert written["provider"] == "kimi" and replay_line(written).same


def test_an_unreadable_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "x.jsonl"
    bad.write_text("{not json\n")
    assert cli(["replay", str(bad)]) == 2


STORE_MODES = {"absent": {}, "true": {"store": True}, "false": {"store": False}}


def stored_config(path: Path, tmp_path: Path) -> dict[str, Any]:
    return {**config(path), "store": {"path": str(tmp_path / "responses.db")}}


@pytest.mark.parametrize("upstream", ["kimi", "mantle"])
@pytest.mark.parametrize("mode", list(STORE_MODES))
async def test_a_fresh_capture_replays_unchanged_in_every_store_mode(
    client_factory: Any, mock: Any, tmp_path: Path, mode: str, upstream: str
) -> None:
    """The store's answer (``store: true`` echoed, an absent store meaning true) is part of
    the capture: the replay, which has no store, echoes what the app honoured then."""
    path = tmp_path / "capture.jsonl"
    c = await client_factory(**stored_config(path, tmp_path))
    url, answer = UPSTREAMS[upstream]
    mock.post(url).mock(side_effect=lambda req: answer())
    body = codex_request(MODELS[upstream])
    body.pop("store")
    body.update(STORE_MODES[mode])
    r = await c.post("/v1/responses", json=body, headers={"authorization": "Bearer sk-alice"})
    assert r.status_code == 200, r.text
    (line,) = lines(path)
    assert line["answered"] == ({} if mode == "false" else {"store": True})  # false: stateless, no store I/O
    assert f'"store":{"false" if mode == "false" else "true"}' in "".join(e[1] for e in line["client_events"])
    out = replay_line(line)
    assert out.same, out.diff()


async def test_a_turn_that_ends_in_the_second_it_began_replays_unchanged(
    client_factory: Any, mock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """created_at == completed_at when captured; the replay's completed_at is later."""
    from transformers import responses_encode

    path = tmp_path / "capture.jsonl"
    c = await client_factory(**config(path))
    then = 1  # the upstream's chunks say created: 1 (tests/integration/conftest.py chat_chunk)
    monkeypatch.setattr(responses_encode, "_now", lambda: then)
    mock.post(UPSTREAMS["kimi"][0]).mock(side_effect=lambda req: chat_answer())
    r = await c.post("/v1/responses", json=codex_request("kimi-k2.6"), headers={"authorization": "Bearer sk-alice"})
    assert r.status_code == 200, r.text
    monkeypatch.undo()
    (line,) = lines(path)
    client = "".join(e[1] for e in line["client_events"])
    assert f'"created_at":{then}' in client and f'"completed_at":{then}' in client
    out = replay_line(line)
    assert out.same, out.diff()
