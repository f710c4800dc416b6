"""openai SDK 2.14 -> Switchboard -> scripted upstream, both client APIs x both upstream
protocols x stream/non-stream.  Every event must parse with the SDK's own models and the
accumulated text, reasoning and the 2 parallel tool calls must equal the script.
"""

from __future__ import annotations

import pytest
import scenarios as sc
from client_checks import sdk_chat, sdk_responses
from proxy_harness import PROXY_CLIENT_KEY, UPSTREAM_KEY

pytestmark = pytest.mark.e2e

MODEL = "e2e-sdk"
EXPECTED_CALLS = [(t.id, t.name, t.arguments) for t in sc.SDK_CALLS]


UPSTREAMS = {
    # name: (protocol, profile, quirks of the scripted stream)
    "chat": ("chat", "openai-compatible", {}),
    "responses": ("responses", "openai-compatible", {}),
    "responses-mantle": ("responses", "bedrock-mantle", {"mantle": True}),
    "responses-late-identity": ("responses", "openai-compatible", {"late_identity": True}),
}


# the quirky upstreams are stream-only quirks: their non-stream body is the plain one
CASES = [
    pytest.param(client, kind, stream, id=f"{client}-client-{kind}-upstream-{'stream' if stream else 'nonstream'}")
    for client in ("chat", "responses")
    for kind, (_, _, quirks) in UPSTREAMS.items()
    for stream in ((True, False) if not quirks else (True,))
]


@pytest.mark.parametrize("client_api,upstream_kind,stream", CASES)
def test_sdk_through_proxy(upstream, proxy_for, client_api, upstream_kind, stream):
    upstream_protocol, profile, quirks = UPSTREAMS[upstream_kind]
    up = upstream(sc.sdk_parallel(upstream_protocol, model=MODEL, **quirks), f"sdk-{upstream_kind}")
    px = proxy_for(up, model=MODEL, profile=profile, protocol=upstream_protocol)
    drive = sdk_chat if client_api == "chat" else sdk_responses
    try:
        got = drive(px.base_url, PROXY_CLIENT_KEY, MODEL, stream=stream)
    except Exception as exc:  # show the proxy side of the story
        pytest.fail(f"{client_api} client failed: {exc!r}\n{up.describe()}\n--- proxy log ---\n{px.log()}")
    info = f"{got}\n{up.describe()}\n--- proxy log ---\n{px.log()}"
    assert len(up.model_requests) == 1 and not up.errors, info
    req = up.model_requests[0]
    assert req.endpoint == upstream_protocol, info
    assert req.headers.get("authorization") == f"Bearer {UPSTREAM_KEY}", info
    assert bool(req.json.get("stream")) is stream, info

    assert got["text"] == sc.SDK_TEXT, info
    assert got["tool_calls"] == EXPECTED_CALLS, info
    assert got["reasoning"] == sc.SDK_REASONING, info
    if client_api == "chat":
        assert got["finish"] == "tool_calls", info
    else:
        assert got["finish"] == "completed", info
        if stream:
            assert got["delta_text"] == sc.SDK_TEXT, info
            assert sorted(got["args_delta"].values()) == sorted(t.arguments for t in sc.SDK_CALLS), info
            assert all(got["output_ids"]), info  # every output item has an id
            assert got["events"][0] == "response.created" and got["events"][-1] == "response.completed", info
    assert got["usage"], info
