"""kosong 0.56 (kimi-cli's LLM layer) -> Switchboard -> scripted upstream.

Two turns each: the model calls ``Read`` twice in parallel with Kimi-native ids
(``functions.Read:0``, ``functions.Read:1``) and reasoning; kosong must get both calls
whole with the ids verbatim and the reasoning; then the history goes back and the upstream
answers only if both ids come back verbatim on the assistant tool_calls and the tool
messages (else a reasoning-only turn, which kosong raises as APIEmptyResponseError).

One proxy process serves the module (``scenarios_messages.stage_fixture``): one scripted
upstream per route below, each its own provider, re-scripted per test; every route sends
the upstream the model name its case had (``kimi-k2.6``'s quirks key on it).
"""

from __future__ import annotations

import pytest
import scenarios as sc
from client_checks import kosong_two_turns
from proxy_harness import PROXY_CLIENT_KEY
from scenarios_messages import Route, stage_fixture

pytestmark = pytest.mark.e2e

EXPECTED = [(t.id, t.name, t.arguments) for t in sc.KOSONG_CALLS]
KIMI = "kimi-k2.6"
ROUTES = {  # (upstream protocol, profile) -> the client-facing model name of that route
    ("chat", "kimi"): KIMI,
    ("responses", "openai-compatible"): "kimi-k2.6-on-responses",
}
REASONING_KEY_MODEL = "kimi-k2.6-reasoning-key"  # kimi profile + reasoning_key_reasoning
MIMO = "mimo-v2.6-flash"

_stage = stage_fixture(
    *(
        Route(name, profile=profile, protocol=protocol, kind=protocol, upstream_model=KIMI)
        for (protocol, profile), name in ROUTES.items()
    ),
    Route(
        REASONING_KEY_MODEL,
        profile="kimi",
        protocol="chat",
        kind="chat",
        provider_extra=(("quirks", {"enable": ["reasoning_key_reasoning"]}),),
        upstream_model=KIMI,
    ),
    Route(MIMO, profile="mimo", protocol="chat", kind="chat"),
)

CASES = [
    # (kosong provider, upstream protocol, profile, stream)
    pytest.param("kimi", "chat", "kimi", True, id="kimi-provider-chat-upstream-kimi"),
    pytest.param("kimi", "chat", "kimi", False, id="kimi-provider-chat-upstream-kimi-nonstream"),
    pytest.param("openai_legacy", "chat", "kimi", True, id="openai_legacy-chat-upstream-kimi"),
    pytest.param("responses", "chat", "kimi", True, id="responses-provider-chat-upstream-kimi"),
    pytest.param("kimi", "responses", "openai-compatible", True, id="kimi-provider-responses-upstream"),
]


@pytest.mark.parametrize("provider_kind,upstream_protocol,profile,stream", CASES)
def test_kosong_through_proxy(stage, provider_kind, upstream_protocol, profile, stream):
    model = ROUTES[(upstream_protocol, profile)]
    up, px, mark = stage.script(model, sc.kosong_kimi(upstream_protocol, model=KIMI)), stage.proxy, stage.mark()
    try:
        got = kosong_two_turns(provider_kind, px.base_url, PROXY_CLIENT_KEY, model, stream=stream)
    except Exception as exc:
        pytest.fail(
            f"kosong/{provider_kind} failed: {exc!r}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)}"
        )
    info = f"{got}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)}"
    assert got["turn1"]["tool_calls"] == EXPECTED, info
    assert got["turn1"]["reasoning"] == sc.KOSONG_REASONING, info
    reqs = up.model_requests
    assert [r.matched for r in reqs] == [None, True], info
    assert got["turn2"]["text"] == sc.KOSONG_FINAL, info
    if upstream_protocol == "chat":
        asst = [m for m in reqs[1].json["messages"] if m.get("tool_calls")]
        assert [tc["id"] for tc in asst[0]["tool_calls"]] == sc.KOSONG_IDS, info
        assert [tc["function"]["arguments"] for tc in asst[0]["tool_calls"]] == [
            t.arguments for t in sc.KOSONG_CALLS
        ], info
        # kimi profile (reasoning_replay): the replayed tool-call message carries reasoning_content
        assert asst[0].get("reasoning_content") == sc.KOSONG_REASONING, info


# --------------------------------------------------------------------------- issue 11


def _kosong_two_turns(provider, tool_name: str, params: dict, prompt: str, result: str) -> dict:
    """kosong: one turn, every tool call answered with ``result``, a second turn."""
    import asyncio

    from kosong import generate
    from kosong.message import Message, TextPart, ThinkPart
    from kosong.tooling import Tool

    tools = [Tool(name=tool_name, description=f"{tool_name} tool", parameters=params)]

    def summarize(msg) -> dict:
        return {
            "text": "".join(p.text for p in msg.content if isinstance(p, TextPart)),
            "reasoning": "".join(p.think for p in msg.content if isinstance(p, ThinkPart)),
            "tool_calls": [(tc.id, tc.function.name, tc.function.arguments) for tc in msg.tool_calls or []],
        }

    async def go() -> dict:
        history = [Message(role="user", content=prompt)]
        r1 = await generate(provider, "You are a test agent.", tools, history)
        history.append(r1.message)
        for tc in r1.message.tool_calls or []:
            history.append(Message(role="tool", tool_call_id=tc.id, content=result))
        r2 = await generate(provider, "You are a test agent.", tools, history)
        return {"turn1": summarize(r1.message), "turn2": summarize(r2.message)}

    return asyncio.run(go())


@pytest.mark.parametrize("reasoning_key", ["reasoning", "reasoning_content"])
def test_kosong_reasoning_key_with_an_upstream_that_speaks_reasoning(stage, reasoning_key):
    """A vLLM that reads and writes ``reasoning`` (kimi profile + reasoning_key_reasoning):
    kosong configured with either key reads the reasoning, and whichever key it echoes, the
    upstream gets its replayed reasoning under ``reasoning`` only."""
    from client_checks import READ_TOOL_PARAMS, TIMEOUT
    from kosong.contrib.chat_provider.openai_legacy import OpenAILegacy
    from scripted_upstream import chat_turn

    model = KIMI
    turns = [
        chat_turn(model=model, reasoning=sc.KOSONG_REASONING, reasoning_key="reasoning",
                  tool_calls=list(sc.KOSONG_CALLS), label="parallel Read"),
        chat_turn(model=model, reasoning="Done.", reasoning_key="reasoning", text=sc.KOSONG_FINAL, label="final"),
    ]  # fmt: skip
    up, px, mark = stage.script(REASONING_KEY_MODEL, turns), stage.proxy, stage.mark()
    provider = OpenAILegacy(model=REASONING_KEY_MODEL, api_key=PROXY_CLIENT_KEY, base_url=px.base_url, reasoning_key=reasoning_key,
                            max_retries=0, timeout=TIMEOUT)  # fmt: skip
    try:
        got = _kosong_two_turns(provider, "Read", READ_TOOL_PARAMS, "read both files", "contents")
    except Exception as exc:
        pytest.fail(f"kosong failed: {exc!r}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)}")
    info = f"{got}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)}"
    assert got["turn1"]["reasoning"] == sc.KOSONG_REASONING, info
    assert got["turn2"]["text"] == sc.KOSONG_FINAL, info
    (asst,) = [m for m in up.model_requests[1].json["messages"] if m.get("tool_calls")]
    assert asst.get("reasoning") == sc.KOSONG_REASONING and "reasoning_content" not in asst, info


def test_kosong_responses_apply_patch_function_gets_the_raw_patch_wrapped(stage):
    """R3-a′ over the Responses API: kosong's OpenAIResponses offers apply_patch as a function
    with one string parameter; MiMo answers with the raw patch; kosong gets {"input": raw}."""
    import json

    from client_checks import TIMEOUT
    from kosong.contrib.chat_provider.openai_responses import OpenAIResponses

    model = MIMO
    up, px, mark = stage.script(model, sc.codex_mimo_patch(model)), stage.proxy, stage.mark()
    provider = OpenAIResponses(model=model, api_key=PROXY_CLIENT_KEY, base_url=px.base_url, max_retries=0,
                               timeout=TIMEOUT)  # fmt: skip
    params = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}
    try:
        got = _kosong_two_turns(provider, "apply_patch", params, "add the notes", f"Success. A {sc.PATCH_FILE}")
    except Exception as exc:
        pytest.fail(f"kosong failed: {exc!r}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)}")
    info = f"{got}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)}"
    ((_, name, args),) = got["turn1"]["tool_calls"]
    assert name == "apply_patch" and json.loads(args) == {"input": sc.RAW_PATCH}, info
    assert [r.matched for r in up.model_requests] == [None, True], info
    assert got["turn2"]["text"] == sc.FINAL_TEXT["patch"], info
