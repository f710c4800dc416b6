"""The openai SDK's own Responses WebSocket client (3.x, ``.e2e/openai3``) -> ``switchboard
serve`` -> a scripted Chat, Responses or Messages upstream on loopback: lanes
(``stream_id``), ``response.cancel``, ``response.steer`` and ``response.inject``
(``sdk_ws_checks.py`` drives the SDK; slow upstream streams hold a ``Delay`` after their
first text so a cancel or a steer lands mid-response)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import messages_upstream as mu
import pytest
import scripted_upstream as su
from client_checks import locked_sdk_version
from proxy_harness import PROXY_CLIENT_KEY

pytestmark = pytest.mark.e2e

MODEL = "e2e-ws"
SLOW = 20.0  # seconds the slow stream waits after its first text (a cut must not wait for it)
PROMPTS = {"slow": "write slowly", "a": "lane a", "b": "lane b", "default": "lane default", "steer": "shorter please"}
# prompt -> (answer text, seconds of silence after the first text piece)
SCRIPT = {
    "write slowly": ("part one part two", SLOW),
    "lane a": ("alpha text", 5.0),  # (b and default finish meanwhile, on a loaded host too)
    "lane b": ("bravo text", 0.0),
    "lane default": ("default text", 0.0),
    "shorter please": ("short version", 0.0),
}
UPSTREAMS = {
    # kind: (provider protocol, profile)
    "chat": ("chat", "openai-compatible"),
    "responses": ("responses", "openai-compatible"),
    "messages": ("messages", "anthropic"),
}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def last_user_text(req: dict) -> str:
    items = req.get("messages") or req.get("input") or []
    if isinstance(items, str):
        return items
    for m in reversed(items):
        if isinstance(m, dict) and m.get("role") == "user":
            text = _text_of(m.get("content"))
            if text:
                return text
    return ""


def _held(frames: list, is_first_text: Any, seconds: float) -> list:
    if not seconds:
        return frames
    for i, f in enumerate(frames):
        if isinstance(f, dict) and is_first_text(f):
            return [*frames[: i + 1], su.Delay(seconds), *frames[i + 1 :]]
    raise AssertionError("no text frame to hold after")


def chat_answer(req: dict) -> su.Turn:
    text, hold = SCRIPT[last_user_text(req)]
    frames = su.chat_chunks(text=text, chunk_size=5, finish_reason="stop")
    first = lambda f: bool(f.get("choices") and f["choices"][0].get("delta", {}).get("content"))  # noqa: E731
    return su.Turn(frames=_held(frames, first, hold), body=su.chat_body(text=text), kind="chat")


def responses_answer(req: dict) -> su.Turn:
    text, hold = SCRIPT[last_user_text(req)]
    frames = su.responses_events(text=text, chunk_size=5)
    first = lambda f: f.get("type") == "response.output_text.delta"  # noqa: E731
    return su.Turn(frames=_held(frames, first, hold), body=su.responses_body(text=text), kind="responses")


def messages_answer(req: dict) -> mu.MessageTurn:
    text, hold = SCRIPT[last_user_text(req)]
    turn = mu.MessageTurn(blocks=[mu.text(text)], chunk=5)
    frames = mu.message_events(turn, model=str(req.get("model") or MODEL), msg_id="msg_ws_e2e")
    first = lambda f: f.get("type") == "content_block_delta"  # noqa: E731
    turn.frames = _held(frames, first, hold)
    return turn


def _upstream(kind: str) -> su.ScriptedUpstream:
    n = 16  # more turns than the scenarios make requests; each one answers by the prompt
    if kind == "messages":
        return mu.MessagesUpstream([mu.MessageTurn(respond=messages_answer) for _ in range(n)], name="ws-messages")
    respond = chat_answer if kind == "chat" else responses_answer
    return su.ScriptedUpstream([su.Turn(respond=respond) for _ in range(n)], name=f"ws-{kind}")


def _drive(python: Path, base_url: str) -> dict:
    req = json.dumps({"base_url": base_url, "api_key": PROXY_CLIENT_KEY, "model": MODEL, "prompts": PROMPTS})
    res = subprocess.run(
        [str(python), str(Path(__file__).with_name("sdk_ws_checks.py"))],
        input=req,
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        return json.loads(res.stdout)
    except json.JSONDecodeError:
        return {"exception": f"exited {res.returncode}: {res.stderr[-3000:]}"}


@pytest.mark.parametrize("kind", sorted(UPSTREAMS))
def test_sdk_websocket_lanes_cancel_steer_inject(kind, proxy_for, openai_sdk):
    protocol, profile = UPSTREAMS[kind]
    up = _upstream(kind).start()
    try:
        px = proxy_for(up, model=MODEL, profile=profile, protocol=protocol)
        got = _drive(openai_sdk("openai3"), px.base_url)
        info = f"{json.dumps(got, indent=1)[:6000]}\n{up.describe()}\n--- proxy log ---\n{px.log()}"
        assert "exception" not in got, info
        assert got["sdk"] == locked_sdk_version("openai3"), info

        lanes = got["lanes"]["lanes"]
        assert {k: v["text"] for k, v in lanes.items()} == {
            "a": "alpha text",
            "b": "bravo text",
            "default": "default text",
        }, info
        assert all(v["status"] == "completed" for v in lanes.values()), info
        assert lanes["a"]["stream_ids"] == ["a"] and lanes["b"]["stream_ids"] == ["b"], info
        assert lanes["default"]["stream_ids"] == ["None"], info
        assert got["lanes"]["order"][-1] == "a", info  # b and default did not wait for the slow lane a

        c = got["cancel"]
        assert (c["terminal"], c["status"], c["id_matches"]) == ("response.failed", "cancelled", True), info
        assert c["output"] == [["message", "incomplete"]], info
        assert c["seconds"] < SLOW / 4, info  # at once, not when the upstream's stream would go on
        assert c["after"] == "response_cancel_not_active", info

        s = got["steer"]
        assert s["types"][0] != "response.incomplete" and "response.steer.accepted" in s["types"], info
        assert s["accepted_for"] and s["reason"] == "steered" and s["successor_previous"], info
        assert s["cut_text"] and "part one part two".startswith(s["cut_text"]), info
        assert (s["successor_text"], s["successor_status"]) == ("short version", "completed"), info

        ls = got["lane_steer"]
        assert ls["stream_ids"] == ["s"] and ls["final_previous"], info
        assert ls["final_text"] == "short version", info
        assert "response.steer.accepted" in ls["types"] and "response.incomplete" in ls["types"], info

        r = got["refusals"]
        assert r["unknown"] == ["response.steer.failed", "response_not_found"], info
        assert r["inject"] == ["response.inject.failed", "response_already_completed", "call_x"], info
        assert r["late"] == ["response.steer.failed", "response_already_completed"], info

        # the successor went upstream with the text the client saw, then the steering input
        steered = [r.json for r in up.model_requests if last_user_text(r.json) == "shorter please"]
        assert len(steered) == 2 and s["cut_text"] in json.dumps(steered[0]), info
    finally:
        up.stop()
