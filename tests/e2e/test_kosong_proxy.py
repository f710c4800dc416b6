"""kosong 0.56 (kimi-cli's LLM layer) -> Switchboard -> scripted upstream.

Two turns each: the model calls ``Read`` twice in parallel with Kimi-native ids
(``functions.Read:0``, ``functions.Read:1``) and reasoning; kosong must get both calls
whole with the ids verbatim and the reasoning; then the history goes back and the upstream
answers only if both ids come back verbatim on the assistant tool_calls and the tool
messages (else a reasoning-only turn, which kosong raises as APIEmptyResponseError).
"""

from __future__ import annotations

import pytest
import scenarios as sc
from client_checks import kosong_two_turns
from proxy_harness import PROXY_CLIENT_KEY

pytestmark = pytest.mark.e2e

EXPECTED = [(t.id, t.name, t.arguments) for t in sc.KOSONG_CALLS]

CASES = [
    # (kosong provider, upstream protocol, profile, stream)
    pytest.param("kimi", "chat", "kimi", True, id="kimi-provider-chat-upstream-kimi"),
    pytest.param("kimi", "chat", "kimi", False, id="kimi-provider-chat-upstream-kimi-nonstream"),
    pytest.param("openai_legacy", "chat", "kimi", True, id="openai_legacy-chat-upstream-kimi"),
    pytest.param("responses", "chat", "kimi", True, id="responses-provider-chat-upstream-kimi"),
    pytest.param("kimi", "responses", "openai-compatible", True, id="kimi-provider-responses-upstream"),
]


@pytest.mark.parametrize("provider_kind,upstream_protocol,profile,stream", CASES)
def test_kosong_through_proxy(upstream, proxy_for, provider_kind, upstream_protocol, profile, stream):
    model = "kimi-k2.6"
    up = upstream(sc.kosong_kimi(upstream_protocol, model=model), f"kosong-{provider_kind}")
    px = proxy_for(up, model=model, profile=profile, protocol=upstream_protocol)
    try:
        got = kosong_two_turns(provider_kind, px.base_url, PROXY_CLIENT_KEY, model, stream=stream)
    except Exception as exc:
        pytest.fail(f"kosong/{provider_kind} failed: {exc!r}\n{up.describe()}\n--- proxy log ---\n{px.log()}")
    info = f"{got}\n{up.describe()}\n--- proxy log ---\n{px.log()}"
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
