"""openai SDK -> Switchboard -> scripted upstream: three SDK releases (2.14, which kosong pins,
in process; the newest 2.x and the newest 3.x from ``.e2e/openai2`` and ``.e2e/openai3`` in a
subprocess) x both client APIs x both upstream protocols x stream/non-stream.  Every chunk,
event and object must pass the SDK's own validation and a strict re-validation with its
types (``sdk_checks``), the release that answered must be the one meant, and the
accumulated text, reasoning and the 2 parallel tool calls must equal the script.  The usage
cases send cache figures upstream and expect them, in each SDK's usage type, at the client.

One proxy process serves the module (``scenarios_messages.stage_fixture``), in front of one
scripted upstream per kind in ``UPSTREAMS``, each its own provider under its own model name;
a case gives its upstream a fresh script and record (``stage.script``). Each case's client
is still a real openai SDK talking to that real proxy process.
"""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
import scenarios as sc
from client_checks import locked_sdk_version, sdk_chat, sdk_responses
from proxy_harness import PROXY_CLIENT_KEY, UPSTREAM_KEY
from scenarios_messages import Route, stage_fixture

pytestmark = pytest.mark.e2e

MODEL = "e2e-sdk"  # the prefix of each upstream kind's client-facing model name
EXPECTED_CALLS = [(t.id, t.name, t.arguments) for t in sc.SDK_CALLS]


UPSTREAMS = {
    # name: (protocol, profile, quirks of the scripted stream)
    "chat": ("chat", "openai-compatible", {}),
    "responses": ("responses", "openai-compatible", {}),
    "responses-mantle": ("responses", "bedrock-mantle", {"mantle": True}),
    "responses-late-identity": ("responses", "openai-compatible", {"late_identity": True}),
}


def model_of(kind: str) -> str:
    return f"{MODEL}-{kind}"


_stage = stage_fixture(
    *(
        Route(model_of(kind), profile=profile, protocol=protocol, kind=protocol)
        for kind, (protocol, profile, _) in UPSTREAMS.items()
    )
)


# the quirky upstreams are stream-only quirks: their non-stream body is the plain one
CASES = [
    pytest.param(client, kind, stream, id=f"{client}-client-{kind}-upstream-{'stream' if stream else 'nonstream'}")
    for client in ("chat", "responses")
    for kind, (_, _, quirks) in UPSTREAMS.items()
    for stream in ((True, False) if not quirks else (True,))
]


# test id: the venv of that SDK release (None: the suite's own interpreter)
SDKS = {"sdk2-in-process": None, "sdk2": "openai2", "sdk3": "openai3"}


@pytest.fixture(params=sorted(SDKS))
def sdk_python(request, openai_sdk) -> Path | None:
    """None: the suite's own interpreter (its openai, kosong's pin); else the python of that SDK's venv."""
    venv = SDKS[request.param]
    return None if venv is None else openai_sdk(venv)


@pytest.fixture
def sdk_version(request, sdk_python) -> str:
    """The openai release the case must run under."""
    venv = SDKS[request.node.callspec.params["sdk_python"]]
    return openai.__version__ if venv is None else locked_sdk_version(venv)


def _drive(client_api: str, px, model: str, python: Path | None, stream: bool) -> dict:
    drive = sdk_chat if client_api == "chat" else sdk_responses
    return drive(px.base_url, PROXY_CLIENT_KEY, model, stream=stream, python=python)


@pytest.mark.parametrize("client_api,upstream_kind,stream", CASES)
def test_sdk_through_proxy(stage, sdk_python, sdk_version, client_api, upstream_kind, stream):
    upstream_protocol, profile, quirks = UPSTREAMS[upstream_kind]
    model = model_of(upstream_kind)
    up, px, mark = (
        stage.script(model, sc.sdk_parallel(upstream_protocol, model=model, **quirks)),
        stage.proxy,
        stage.mark(),
    )
    try:
        got = _drive(client_api, px, model, sdk_python, stream)
    except Exception as exc:  # show the proxy side of the story
        pytest.fail(f"{client_api} client failed: {exc!r}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)}")
    info = f"{got}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)}"
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
    assert got["sdk"] == sdk_version, info
    # every chunk/event (stream) or the object (non-stream) and the final response, strictly
    assert got["validated"] >= (len(got["events"]) if stream else 1), info


# cache figures as each upstream protocol reports them → what each client API shows
CACHE_USAGE = {
    "chat": {
        "prompt_tokens": 40,
        "completion_tokens": 7,
        "total_tokens": 47,
        "prompt_tokens_details": {"cached_tokens": 16, "cache_write_tokens": 20},
        "completion_tokens_details": {"reasoning_tokens": 3},
    },
    "chat-anthropic-style": {
        "prompt_tokens": 40,
        "completion_tokens": 7,
        "total_tokens": 47,
        "cache_read_input_tokens": 16,
        "cache_creation_input_tokens": 20,
        "completion_tokens_details": {"reasoning_tokens": 3},
    },
    "responses": {
        "input_tokens": 40,
        "input_tokens_details": {"cached_tokens": 16, "cache_write_tokens": 20},
        "output_tokens": 7,
        "output_tokens_details": {"reasoning_tokens": 3},
        "total_tokens": 47,
    },
}


# Which usage object an upstream sent is the proxy's business, the same whatever SDK reads
# the answer: every kind through the in-process SDK; each SDK release in its own venv reads
# the kind with the most to map (Anthropic-style cache fields) in both APIs, streamed or not
USAGE_CASES = [
    pytest.param(sdk, kind, api, stream, id=f"{sdk}-{kind}-{api}-{'stream' if stream else 'nonstream'}")
    for sdk in sorted(SDKS)
    for kind in (sorted(CACHE_USAGE) if SDKS[sdk] is None else ["chat-anthropic-style"])
    for api in ("chat", "responses")
    for stream in (True, False)
]


@pytest.mark.parametrize("sdk_python,usage_kind,client_api,stream", USAGE_CASES, indirect=["sdk_python"])
def test_sdk_usage_cache_figures(stage, sdk_python, sdk_version, usage_kind, client_api, stream):
    upstream_protocol = usage_kind.split("-")[0]  # the plain upstream of that protocol
    model = model_of(upstream_protocol)
    turns = sc.sdk_parallel(upstream_protocol, model=model, usage=CACHE_USAGE[usage_kind])
    up, px, mark = stage.script(model, turns), stage.proxy, stage.mark()
    try:
        got = _drive(client_api, px, model, sdk_python, stream)
    except Exception as exc:
        pytest.fail(f"{client_api} client failed: {exc!r}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)}")
    u, info = got["usage"], f"{got['usage']}\n--- proxy log ---\n{stage.log_since(mark)}"
    assert got["sdk"] == sdk_version, info
    if client_api == "chat":
        assert (u["prompt_tokens"], u["completion_tokens"], u["total_tokens"]) == (40, 7, 47), info
        assert u["prompt_tokens_details"]["cached_tokens"] == 16, info
        assert u["prompt_tokens_details"]["cache_write_tokens"] == 20, info
        assert u["completion_tokens_details"]["reasoning_tokens"] == 3, info
    else:
        assert u == {
            "input_tokens": 40,
            "input_tokens_details": {"cached_tokens": 16, "cache_write_tokens": 20, **_ttl(got)},
            "output_tokens": 7,
            "output_tokens_details": {"reasoning_tokens": 3},
            "total_tokens": 47,
        }, info


def _ttl(got: dict) -> dict:
    """3.x's InputTokensDetails has an optional ``cache_write_tokens_details`` (dumped as None)."""
    return {"cache_write_tokens_details": None} if got["sdk"].startswith("3.") else {}
