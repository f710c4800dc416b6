"""Real clients -> Switchboard -> a scripted Gemini OpenAI-compatible upstream
(``gemini_upstream.py``, ``profile: gemini``): Gemini's thought signatures survive every
client.

The scripted Gemini signs the first tool call of each answer with hundreds of random bytes
of base64 and answers 400 exactly where Gemini does (a current-turn step whose first call
comes back unsigned, a signature it never issued, the fields and schema keywords it does
not know).  One proxy process serves the module (``scenarios_gemini.gemini_stage``, a
``server.secret_key`` set).  Cases (``scenarios_gemini.script``): ``single`` (one call, then
the answer), ``parallel`` (text and two calls in one step, only the first signed),
``steps`` (a call, text and another call, then the answer: the third request carries two
signed steps), and ``turns`` (a second user turn: the first turn's signed step is history;
the SDKs, Codex and Claude Code).

Every case asserts: no request was refused, the tool ran and its output reached Gemini
under Gemini's call id, the final text printed, and every request after the first carried
each step Gemini answered, its first call with the signature Gemini issued for it, byte for
byte (carried through the client sealed: a Chat call's ``extra_content``, a Responses
reasoning item's ``encrypted_content``, a Messages thinking block's ``signature``; for a
Chat client that drops ``extra_content``, as Kimi Code's Chat type does, kept by the proxy
under the client key and the call id), so the escape value
``skip_thought_signature_validator`` is never needed: ``thought_signature_skipped`` in
``switchboard_repairs_total`` (read off ``/metrics``) must not move.  Where nothing came
back and nothing was kept (an edited sealed value, another model's call) the escape value
stands in and is counted.

* ``test_direct_plain_history_is_refused``: the openai SDK straight to the scripted Gemini
  (no proxy): a history rebuilt as plain dicts (no ``extra_content``) gets Gemini's 400, the
  assistant message kept as the SDK returned it (``model_dump``) is accepted; the refused
  fields, schema keywords and a forged signature get their 400s, the escape value passes.
* ``test_openai_sdk``: the openai SDK (2.14, in process), Chat, Responses, and Responses
  chained with ``previous_response_id``, stream and not; the history kept as the SDK returns
  it (Chat: ``message.model_dump(exclude_none=True)``, Responses: the ``output`` items
  dumped the same way).
* ``test_openai_sdk_plain_history``: a Chat client that drops ``extra_content`` (plain-dict
  history): Gemini still gets its own signatures back (the proxy kept them).
* ``test_openai_sdk_edited_signature``: a Chat client edits the sealed value: Gemini gets the
  escape value, never the edited one (``thought_signature_rejected``, the envelope counted
  in ``switchboard_envelope_rejected_total``).
* ``test_openai_sdk_switches_models``: Gemini, another Chat upstream, Gemini again in one
  turn: the other upstream never sees the sealed value, Gemini gets its own signature back
  and the escape value on the other model's call.
* ``test_anthropic_sdk``: the anthropic SDK (``messages.create`` / ``messages.stream``),
  content blocks sent back as returned; the sealed signature rides an empty thinking block
  just before the signed call.
* ``test_codex``: Codex 0.171.0 over HTTP and over the Responses WebSocket.
* ``test_kimi_code``: Kimi Code 2.1.0, its ``openai`` (Chat: drops ``extra_content``),
  ``openai_responses`` and ``anthropic`` provider types.
* ``test_claude_code``: Claude Code 2.1.332.
* ``test_gemini_cli``: Gemini CLI 0.61.0 through the proxy's Gemini API route (it sends
  ``gemini-3-pro-preview`` as ``gemini-3.1-pro-preview``, an alias of the same upstream):
  the sealed signature rides the ``functionCall`` part's ``thoughtSignature``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import TYPE_CHECKING

import codex_harness
import openai
import pytest
from claude_code_harness import ClaudeCode, ClaudeCodeUnavailable, ensure_claude_code, run_claude_code
from codex_harness import CODEX_LATEST
from gemini_cli_harness import GeminiCli, GeminiCliUnavailable, ensure_gemini_cli, run_gemini_cli
from gemini_upstream import ESCAPE, Call, GeminiTurn, GeminiUpstream
from kimi_code_harness import KimiCode, KimiCodeUnavailable, ensure_kimi_code, run_kimi_code
from proxy_harness import PROXY_CLIENT_KEY, REPO
from scenarios import tool_outputs
from scenarios_gemini import (
    CASES,
    FIRST_DONE,
    SDK_CASES,
    SECOND_PROMPT,
    check_headers,
    check_signatures,
    counter,
    expected_requests,
    gemini_stage,
    marker,
    provider_name,
    repairs,
    script,
    sent_signatures,
)
from scripted_upstream import ToolCall, chat_turn
from test_codex_websocket import transports

if TYPE_CHECKING:
    import anthropic

pytestmark = pytest.mark.e2e

MODEL = "gemini-3-pro-preview"
OTHER = "e2e-other-chat"  # a plain Chat upstream (openai-compatible), for a switch of model
_stage = gemini_stage(MODEL, other=(OTHER,), aliases={"gemini-3.1-pro-preview": MODEL})  # (Gemini CLI's name)
SKIPPED = "thought_signature_skipped"
CLI_TIMEOUT = 60
FINAL = "Gemini saw its signatures come back; done ✓"
PROMPT = "Print the markers with the shell tool, then say you are done."


def _finish(stage, up, case: str, info: str, *, skipped_before: float) -> None:
    """What every case must show on Gemini's side (the client's side is checked by the test):
    every signature came back byte for byte, so the escape value was never needed."""
    reqs = up.model_requests
    assert up.errors == [] and up.rejections == [], info
    assert len(reqs) == expected_requests(case) and up.turns_played == len(up.turns), info
    assert all(r.matched is not False for r in reqs), info
    check_headers(up, info)
    check_signatures(up, info)
    skipped = stage.repairs(SKIPPED, MODEL) - skipped_before
    assert skipped == 0, (f"{SKIPPED} moved by {skipped}", info)


# --------------------------------------------------------------------------- SDK tool

GEMINI_PARAMS = {
    "type": "object",
    "properties": {"cmd": {"type": "string", "description": "a shell command"}},
    "required": ["cmd"],
}
# what clients send: the proxy must drop the keywords Gemini refuses
RUN_TOOL_PARAMS = {
    **GEMINI_PARAMS,
    "additionalProperties": False,
    "$schema": "http://json-schema.org/draft-07/schema#",
}
GEMINI_TOOLS = [
    {"type": "function", "function": {"name": "run", "description": "Run a command.", "parameters": GEMINI_PARAMS}}
]
CHAT_TOOLS = [
    {"type": "function", "function": {"name": "run", "description": "Run a command.", "parameters": RUN_TOOL_PARAMS}}
]
RESPONSES_TOOLS = [{"type": "function", "name": "run", "description": "Run a command.", "parameters": RUN_TOOL_PARAMS}]
ANTHROPIC_TOOLS = [{"name": "run", "description": "Run a command.", "input_schema": RUN_TOOL_PARAMS}]


def _sdk_call(case: str) -> Callable[[int], Call]:
    return lambda k: Call("run", {"cmd": f"printf '%s' '{marker(case, k)}'"})


def _run(args: str | dict) -> str:
    """The tool, really run: the command's output."""
    cmd = (json.loads(args) if isinstance(args, str) else args)["cmd"]
    return subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=10).stdout


def _chat_loop(
    client: openai.OpenAI,
    model: str,
    *,
    stream: bool,
    prompts: tuple[str, ...] = (PROMPT,),
    plain: bool = False,
    tools: list = CHAT_TOOLS,
) -> tuple[list[str], int]:
    """The openai SDK's Chat API: each prompt until an answer without calls; the assistant
    message goes back as the SDK returns it (``plain``: rebuilt as a plain dict, without
    extra_content).  The answers' texts and how many calls ran."""
    messages: list[dict] = []
    texts, ran = [], 0
    for prompt in prompts:
        messages.append({"role": "user", "content": prompt})
        for _ in range(5):
            if stream:
                with client.chat.completions.stream(model=model, messages=messages, tools=tools) as s:
                    for _ev in s:
                        pass
                    msg = s.get_final_completion().choices[0].message
            else:
                msg = client.chat.completions.create(model=model, messages=messages, tools=tools).choices[0].message
            if not msg.tool_calls:
                texts.append(msg.content or "")
                messages.append({"role": "assistant", "content": msg.content or ""})
                break
            if plain:
                calls = [
                    {
                        "id": tc.id,
                        "type": "function",
                        "function": {"name": tc.function.name, "arguments": tc.function.arguments},
                    }
                    for tc in msg.tool_calls
                ]
                messages.append({"role": "assistant", "content": msg.content, "tool_calls": calls})
            else:
                messages.append(msg.model_dump(exclude_none=True))
            for tc in msg.tool_calls:
                messages.append({"role": "tool", "tool_call_id": tc.id, "content": _run(tc.function.arguments)})
                ran += 1
        else:
            raise AssertionError("no final answer after 5 requests")
    return texts, ran


def _responses_loop(
    client: openai.OpenAI,
    model: str,
    *,
    stream: bool,
    prompts: tuple[str, ...] = (PROMPT,),
    chained: bool = False,
) -> tuple[list[str], int]:
    """The openai SDK's Responses API, the same way; every output item goes back as the SDK
    returns it (``chained``: only the new items, with ``previous_response_id``: the proxy's
    store holds the rest)."""
    items: list[dict] = []
    texts, ran, prev = [], 0, None
    for prompt in prompts:
        items.append({"role": "user", "content": prompt})
        for _ in range(5):
            kw = dict(model=model, input=items, tools=RESPONSES_TOOLS, include=["reasoning.encrypted_content"])
            if chained and prev is not None:
                kw["previous_response_id"] = prev
            if stream:
                with client.responses.stream(**kw) as s:
                    for _ev in s:
                        pass
                    resp = s.get_final_response()
            else:
                resp = client.responses.create(**kw)
            prev = resp.id
            if chained:
                items = []
            else:
                items += [it.model_dump(exclude_none=True) for it in resp.output]
            calls = [it for it in resp.output if it.type == "function_call"]
            if not calls:
                texts.append(resp.output_text)
                break
            for c in calls:
                items.append({"type": "function_call_output", "call_id": c.call_id, "output": _run(c.arguments)})
                ran += 1
        else:
            raise AssertionError("no final answer after 5 requests")
    return texts, ran


def _anthropic_loop(
    client: anthropic.Anthropic, model: str, *, stream: bool, prompts: tuple[str, ...] = (PROMPT,)
) -> tuple[list[str], int, list[dict]]:
    """The anthropic SDK, the same way; content blocks go back as returned."""
    messages: list[dict] = []
    texts, ran = [], 0
    for prompt in prompts:
        messages.append({"role": "user", "content": prompt})
        for _ in range(5):
            kw = dict(model=model, max_tokens=2048, tools=ANTHROPIC_TOOLS, messages=messages)
            if stream:
                with client.messages.stream(**kw) as s:
                    for _ev in s:
                        pass
                    msg = s.get_final_message()
            else:
                msg = client.messages.create(**kw)
            content = [b.model_dump(exclude_none=True, exclude={"parsed_output"}) for b in msg.content]
            messages.append({"role": "assistant", "content": content})
            uses = [b for b in msg.content if b.type == "tool_use"]
            if not uses:
                texts.append("".join(b.text for b in msg.content if b.type == "text"))
                break
            results = [{"type": "tool_result", "tool_use_id": u.id, "content": _run(u.input)} for u in uses]
            messages.append({"role": "user", "content": results})
            ran += len(uses)
        else:
            raise AssertionError("no final answer after 5 requests")
    return texts, ran, messages


def _prompts(case: str) -> tuple[str, ...]:
    return (PROMPT, SECOND_PROMPT) if case == "turns" else (PROMPT,)


def _answers(case: str) -> list[str]:
    return [FIRST_DONE, FINAL] if case == "turns" else [FINAL]


def _calls(case: str) -> int:
    return 1 if case == "single" else 2


def _message(err: openai.APIStatusError) -> str:
    """Gemini's error message (its body is a JSON array of one error)."""
    body = err.body
    return body[0]["error"]["message"] if isinstance(body, list) and body else repr(body)


def test_direct_plain_history_is_refused():
    """Straight to the scripted Gemini: what a client that drops ``extra_content`` gets."""
    call = Call("run", {"cmd": "printf '%s' 'direct-ok'"})
    up = GeminiUpstream(name="direct").start()
    try:
        client = openai.OpenAI(base_url=up.base_url, api_key="sk-direct", max_retries=0, timeout=30)
        # a history rebuilt from plain dicts: Gemini's 400, as a JSON array
        up.set_script([GeminiTurn(calls=[call]), GeminiTurn(text="unreachable")])
        with pytest.raises(openai.BadRequestError) as err:
            _chat_loop(client, "gemini-3-pro-preview", stream=False, plain=True, tools=GEMINI_TOOLS)
        info = up.describe()
        assert err.value.status_code == 400, info
        body = err.value.body
        assert isinstance(body, list) and body[0]["error"]["status"] == "INVALID_ARGUMENT", (body, info)
        msg = body[0]["error"]["message"]
        assert msg.startswith("Function call is missing a thought_signature in functionCall parts."), msg
        assert "function call `default_api:run` , position 2." in msg, msg
        assert [n for n, _ in up.rejections] == [1] and up.turns_played == 1, info
        # the message as the SDK returned it keeps extra_content: accepted
        up.set_script([GeminiTurn(calls=[call]), GeminiTurn(text=FINAL)])
        texts, ran = _chat_loop(client, "gemini-3-pro-preview", stream=False, tools=GEMINI_TOOLS)
        info = up.describe()
        assert (texts, ran) == ([FINAL], 1) and up.rejections == [], info
        (step,) = [s for s in up.model_requests[1].json["messages"] if s.get("tool_calls")]
        assert step["tool_calls"][0]["extra_content"]["google"]["thought_signature"] == up.issued[0].signature, info
        # the fields and schema keywords Gemini does not know, and a signature it never issued
        for bad, needle in [
            ({"store": True}, 'Unknown name "store": Cannot find field.'),
            ({"metadata": {"a": "b"}}, 'Unknown name "metadata"'),
        ]:
            with pytest.raises(openai.BadRequestError) as err:
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], extra_body=bad)
            assert needle in _message(err.value), err.value.body
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], tools=CHAT_TOOLS)
        assert "Unknown name \"additionalProperties\" at 'tools[0].function.parameters'" in _message(err.value), err
        forged = {"id": "function-call-1", "type": "function", "function": {"name": "run", "arguments": "{}"}}
        forged["extra_content"] = {"google": {"thought_signature": "Zm9yZ2Vk"}}
        history = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [forged]},
            {"role": "tool", "tool_call_id": "function-call-1", "content": "x"},
        ]
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model="m", messages=history)
        assert "Thought signature is not valid." in _message(err.value), err
        forged["extra_content"] = {"google": {"thought_signature": ESCAPE}}  # the escape value passes
        up.set_script([GeminiTurn(text="escape accepted")])
        r = client.chat.completions.create(model="m", messages=history)
        assert r.choices[0].message.content == "escape accepted", up.describe()
    finally:
        up.stop()


@pytest.mark.parametrize("case", SDK_CASES)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "nonstream"])
@pytest.mark.parametrize("api", ["chat", "responses", "responses_chained"])
def test_openai_sdk(stage, api, stream, case):
    up, px, mark = stage.script(MODEL, script(case, _sdk_call(case), FINAL)), stage.proxy, stage.mark()
    before = stage.repairs(SKIPPED, MODEL)
    client = openai.OpenAI(base_url=px.base_url, api_key=PROXY_CLIENT_KEY, max_retries=0, timeout=30)
    try:
        if api == "chat":
            texts, ran = _chat_loop(client, MODEL, stream=stream, prompts=_prompts(case))
        else:
            chained = api == "responses_chained"
            texts, ran = _responses_loop(client, MODEL, stream=stream, prompts=_prompts(case), chained=chained)
    except Exception as exc:
        pytest.fail(f"openai SDK failed: {exc!r}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)[-6000:]}")
    info = f"texts={texts!r} ran={ran}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)[-6000:]}"
    assert texts == _answers(case) and ran == _calls(case), info
    _finish(stage, up, case, info, skipped_before=before)


@pytest.mark.parametrize("case", SDK_CASES)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "nonstream"])
def test_openai_sdk_plain_history(stage, stream, case):
    """A Chat client that drops ``extra_content`` (the history rebuilt from plain dicts, as
    Kimi Code's Chat type does; straight to Gemini it gets the 400 of
    ``test_direct_plain_history_is_refused``): the proxy kept each signature under the client
    key and the call id, and Gemini gets its own back, byte for byte."""
    up, px, mark = stage.script(MODEL, script(case, _sdk_call(case), FINAL)), stage.proxy, stage.mark()
    before = stage.repairs(SKIPPED, MODEL)
    client = openai.OpenAI(base_url=px.base_url, api_key=PROXY_CLIENT_KEY, max_retries=0, timeout=30)
    try:
        texts, ran = _chat_loop(client, MODEL, stream=stream, plain=True, prompts=_prompts(case))
    except Exception as exc:
        pytest.fail(f"openai SDK failed: {exc!r}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)[-6000:]}")
    info = f"texts={texts!r} ran={ran}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)[-6000:]}"
    assert texts == _answers(case) and ran == _calls(case), info
    _finish(stage, up, case, info, skipped_before=before)


def test_openai_sdk_edited_signature(stage):
    """A Chat client that edits the sealed signature it was given: the proxy sends Gemini
    nothing of it (``thought_signature_rejected``, and the envelope counted as rejected), the
    escape value stands in on that first call (``thought_signature_skipped``), and Gemini
    takes the request."""
    up, px, mark = stage.script(MODEL, script("single", _sdk_call("single"), FINAL)), stage.proxy, stage.mark()
    counts = {
        "rejected": lambda: stage.repairs("thought_signature_rejected", MODEL),
        "skipped": lambda: stage.repairs(SKIPPED, MODEL),
        "envelope": lambda: counter(px.url, "switchboard_envelope_rejected_total", kind="thought_signature"),
    }
    before = {k: f() for k, f in counts.items()}
    client = openai.OpenAI(base_url=px.base_url, api_key=PROXY_CLIENT_KEY, max_retries=0, timeout=30)
    messages: list[dict] = [{"role": "user", "content": PROMPT}]
    msg = client.chat.completions.create(model=MODEL, messages=messages, tools=CHAT_TOOLS).choices[0].message
    assistant = msg.model_dump(exclude_none=True)
    google = assistant["tool_calls"][0]["extra_content"]["google"]
    sealed = google["thought_signature"]
    assert sealed.startswith("pxy1.") and up.issued[0].signature not in sealed, sealed  # sealed, not readable
    i = len(sealed) // 2
    google["thought_signature"] = sealed[:i] + ("A" if sealed[i] != "A" else "B") + sealed[i + 1 :]
    messages += [
        assistant,
        {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": _run(msg.tool_calls[0].function.arguments)},
    ]
    try:
        final = client.chat.completions.create(model=MODEL, messages=messages, tools=CHAT_TOOLS).choices[0].message
    except openai.APIStatusError as exc:
        pytest.fail(f"{exc!r}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)[-6000:]}")
    info = f"{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)[-6000:]}"
    assert final.content == FINAL and up.rejections == [] and up.errors == [], info
    assert sent_signatures(up)[1] == [[(up.calls[0][1], ESCAPE)]], info
    moved = {k: f() - before[k] for k, f in counts.items()}
    assert moved == {"rejected": 1, "skipped": 1, "envelope": 1}, (moved, info)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "nonstream"])
def test_openai_sdk_switches_models(stage, stream):
    """One turn, three models' steps: Gemini calls, the next step goes to another Chat
    upstream (the history with Gemini's signed call), which calls too, and Gemini answers.
    The other upstream never sees the proxy's sealed value (``thought_signature_stripped``);
    Gemini gets its own signature back on its call, byte for byte, and the escape value on
    the other model's call (``thought_signature_skipped``): a history it did not make."""
    other_id = "call_other_model_1"
    other_args = json.dumps({"cmd": f"printf '%s' '{marker('switch', 1)}'"})

    def back(req: dict) -> bool:
        outs = tool_outputs(req)
        return marker("switch", 0) in outs.get(up.calls[0][1], "") and marker("switch", 1) in outs.get(other_id, "")

    up = stage.script(
        MODEL,
        lambda up: [GeminiTurn(calls=[_sdk_call("switch")(0)]), GeminiTurn(text=FINAL, when=back, label="outputs")],
    )
    other = stage.others[OTHER]
    other.set_script(
        [chat_turn(model=OTHER, tool_calls=[ToolCall("run", other_args, id=other_id)], label="other call")]
    )
    px, mark = stage.proxy, stage.mark()
    counts = {
        "stripped": lambda: repairs(px.url, "thought_signature_stripped", provider_name(OTHER)),
        "skipped": lambda: stage.repairs(SKIPPED, MODEL),
    }
    before = {k: f() for k, f in counts.items()}
    client = openai.OpenAI(base_url=px.base_url, api_key=PROXY_CLIENT_KEY, max_retries=0, timeout=30)
    messages: list[dict] = [{"role": "user", "content": PROMPT}]
    texts = []
    try:
        for model in (MODEL, OTHER, MODEL):
            if stream:
                with client.chat.completions.stream(model=model, messages=messages, tools=CHAT_TOOLS) as s:
                    for _ev in s:
                        pass
                    msg = s.get_final_completion().choices[0].message
            else:
                msg = (
                    client.chat.completions.create(model=model, messages=messages, tools=CHAT_TOOLS).choices[0].message
                )
            messages.append(msg.model_dump(exclude_none=True))
            texts.append(msg.content)
            for tc in msg.tool_calls or []:
                messages.append({"role": "tool", "tool_call_id": tc.id, "content": _run(tc.function.arguments)})
    except Exception as exc:
        pytest.fail(f"{exc!r}\n{up.describe()}\n{other.describe()}\n--- proxy log ---\n{stage.log_since(mark)[-6000:]}")
    info = f"{up.describe()}\n{other.describe()}\n--- proxy log ---\n{stage.log_since(mark)[-6000:]}"
    assert texts[-1] == FINAL and up.rejections == [] and up.errors == [] and other.errors == [], info
    # the other model got Gemini's call under Gemini's id, without the proxy's sealed value
    (seen,) = other.model_requests
    assert "pxy1." not in seen.raw.decode(), info
    assert [tc["id"] for m in seen.json["messages"] for tc in m.get("tool_calls") or []] == [up.calls[0][1]], info
    # Gemini: its own signature on its call, the escape value on the other model's call
    assert sent_signatures(up)[1] == [[(up.calls[0][1], up.issued[0].signature)], [(other_id, ESCAPE)]], info
    moved = {k: f() - before[k] for k, f in counts.items()}
    assert moved == {"stripped": 1, "skipped": 1}, (moved, info)


@pytest.mark.parametrize("case", SDK_CASES)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "nonstream"])
def test_anthropic_sdk(stage, stream, case):
    up, px, mark = stage.script(MODEL, script(case, _sdk_call(case), FINAL)), stage.proxy, stage.mark()
    before = stage.repairs(SKIPPED, MODEL)
    import anthropic  # here, not at collection: the SDK's import is about 1.5 s of CPU

    client = anthropic.Anthropic(base_url=px.url, api_key=PROXY_CLIENT_KEY, max_retries=0, timeout=30)
    try:
        texts, ran, messages = _anthropic_loop(client, MODEL, stream=stream, prompts=_prompts(case))
    except Exception as exc:
        pytest.fail(
            f"anthropic SDK failed: {exc!r}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)[-6000:]}"
        )
    info = (
        f"texts={texts!r} ran={ran}\n{json.dumps(messages)[-3000:]}\n{up.describe()}\n"
        f"--- proxy log ---\n{stage.log_since(mark)[-6000:]}"
    )
    assert texts == _answers(case) and ran == _calls(case), info
    # the signature rode in a (sealed, empty) thinking block just before the signed call
    for m in messages:
        kinds = [b["type"] for b in m["content"]] if m["role"] == "assistant" else []
        if "tool_use" in kinds:
            first = kinds.index("tool_use")
            assert first > 0 and kinds[first - 1] == "thinking", (kinds, info)
            assert m["content"][first - 1]["signature"].startswith("pxy1."), info
    _finish(stage, up, case, info, skipped_before=before)


# --------------------------------------------------------------------------- CLIs


def _shell_call(case: str, name: str, key: str) -> Callable[[int], Call]:
    def make(k: int) -> Call:
        args = {key: f"printf '%s' '{marker(case, k)}'"}
        if name == "Bash":
            args["description"] = f"Print marker {k}"
        return Call(name, args)

    return make


CODEX_MODES = {
    "http": {"provider": "custom"},
    "websocket": {"provider": "custom", "supports_websockets": True},
}


def _runs(case: str) -> list[tuple[str, str, list[int]]]:
    """(prompt, the answer it ends with, the markers its calls print) per CLI run: ``turns``
    is two runs, the second continuing the first one's session."""
    if case == "turns":
        return [(PROMPT, FIRST_DONE, [0]), (SECOND_PROMPT, FINAL, [1])]
    return [(PROMPT, FINAL, list(range(_calls(case))))]


@pytest.mark.parametrize("case", SDK_CASES)
@pytest.mark.parametrize("mode", list(CODEX_MODES))
def test_codex(stage, codex_at, tmp_path, mode, case):
    up = stage.script(MODEL, script(case, _shell_call(case, "exec_command", "cmd"), FINAL))
    px, mark, before = stage.proxy, stage.mark(), stage.repairs(SKIPPED, MODEL)
    launcher = codex_at(CODEX_LATEST)
    catalog = {"models": [codex_harness.catalog_entry(launcher, MODEL)]}
    runs = []
    for i, (prompt, answer, markers) in enumerate(_runs(case)):
        run = codex_harness.run_codex(
            launcher,
            prompt,
            base_url=px.base_url,
            model=MODEL,
            workspace=tmp_path / "ws",
            home=tmp_path / "codex_home",  # one home: the second run resumes the first one's session
            catalog=catalog,
            api_key=PROXY_CLIENT_KEY,
            timeout=CLI_TIMEOUT,
            extra_args=["resume", "--last"] if i else [],
            **CODEX_MODES[mode],
        )
        runs.append(run)
        info = f"{run.describe()}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)[-6000:]}"
        assert run.returncode == 0 and not run.timed_out and run.turn_completed, info
        outs = sorted(c.get("aggregated_output") for c in run.command_executions)
        assert outs == [marker(case, k) for k in markers], info
        assert run.final_message == answer, info
    log = stage.log_since(mark)
    info = "\n".join(r.describe() for r in runs) + f"\n{up.describe()}\n--- proxy log ---\n{log[-6000:]}"
    _finish(stage, up, case, info, skipped_before=before)
    seen = transports(log)
    if mode == "websocket":
        assert "http" not in seen and seen.count("websocket") >= expected_requests(case), (seen, info)
    else:
        assert seen == ["http"] * expected_requests(case), (seen, info)


@pytest.fixture(scope="session")
def kimi_code() -> KimiCode:
    try:
        return ensure_kimi_code(REPO)
    except KimiCodeUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def claude_code() -> ClaudeCode:
    try:
        return ensure_claude_code(REPO)
    except ClaudeCodeUnavailable as exc:
        pytest.fail(str(exc))


# Every case on its Chat type (the one that drops extra_content: the proxy keeps the
# signature); its other two carry the sealed signature as Codex and Claude Code do, so the
# hardest case (parallel calls, only the first signed) on each.  (Its kimi type is the same
# Chat client as openai.)
KIMI_RUNS = [
    *(("openai", case) for case in CASES),
    ("openai_responses", "parallel"),
    ("anthropic", "parallel"),
]


@pytest.mark.parametrize(("provider_type", "case"), KIMI_RUNS, ids=[f"{t}-{c}" for t, c in KIMI_RUNS])
def test_kimi_code(stage, kimi_code, tmp_path, provider_type, case):
    up = stage.script(MODEL, script(case, _shell_call(case, "Bash", "command"), FINAL))
    px, mark, before = stage.proxy, stage.mark(), stage.repairs(SKIPPED, MODEL)
    run = run_kimi_code(
        kimi_code,
        PROMPT,
        provider_type=provider_type,
        base_url=px.url if provider_type == "anthropic" else px.base_url,
        model=MODEL,
        workspace=tmp_path / "ws",
        home=tmp_path / "kimi_home",
        api_key=PROXY_CLIENT_KEY,
        timeout=CLI_TIMEOUT,
    )
    info = f"{run.describe()}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)[-6000:]}"
    assert not run.timed_out, info
    if run.isolation == "netns":
        assert run.interfaces == ["lo"], info
    n = 1 if case == "single" else 2
    assert [tc["function"]["name"] for tc in run.tool_calls] == ["Bash"] * n, info
    for k in range(n):
        assert any(marker(case, k) in str(r.get("content")) for r in run.tool_results), info
    assert run.returncode == 0 and run.final_text == FINAL, info
    _finish(stage, up, case, info, skipped_before=before)


@pytest.mark.parametrize("case", SDK_CASES)
def test_claude_code(stage, claude_code, tmp_path, case):
    up = stage.script(MODEL, script(case, _shell_call(case, "Bash", "command"), FINAL))
    px, mark, before = stage.proxy, stage.mark(), stage.repairs(SKIPPED, MODEL)
    for i, (prompt, answer, markers) in enumerate(_runs(case)):
        run = run_claude_code(
            claude_code,
            prompt,
            base_url=px.url,
            model=MODEL,
            small_model=MODEL,
            workspace=tmp_path / "ws",
            home=tmp_path / "home",  # one home: --continue picks the first run's session
            api_key=PROXY_CLIENT_KEY,
            timeout=CLI_TIMEOUT,
            extra_args=["--continue"] if i else None,
        )
        info = f"{run.describe()}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)[-6000:]}"
        assert not run.timed_out, info
        if run.isolation == "netns":
            assert run.interfaces == ["lo"], info
        assert [u["name"] for u in run.tool_uses] == ["Bash"] * len(markers), info
        for k in markers:
            assert any(marker(case, k) in str(r.get("content")) for r in run.tool_results), info
        assert run.returncode == 0 and run.final_text == answer, info
    _finish(stage, up, case, info, skipped_before=before)


# --------------------------------------------------------------------------- Gemini CLI


@pytest.fixture(scope="session")
def gemini_cli() -> GeminiCli:
    try:
        return ensure_gemini_cli(REPO)
    except GeminiCliUnavailable as exc:
        pytest.fail(str(exc))


# (its single call is the first step of these; test_gemini_cli_proxy.py runs it on every
# other upstream kind)
@pytest.mark.parametrize("case", ["parallel", "steps"])
def test_gemini_cli(stage, gemini_cli, tmp_path, case):
    """Gemini CLI speaks Gemini's own API: the proxy seals each signature into the
    ``thoughtSignature`` of the ``functionCall`` part, Gemini CLI keeps it in its history,
    and Gemini gets its own signature back on the next step, byte for byte."""
    up = stage.script(MODEL, script(case, _shell_call(case, "run_shell_command", "command"), FINAL))
    px, mark, before = stage.proxy, stage.mark(), stage.repairs(SKIPPED, MODEL)
    run = run_gemini_cli(
        gemini_cli,
        PROMPT,
        base_url=px.url,
        model=MODEL,
        workspace=tmp_path / "ws",
        home=tmp_path / "home",
        api_key=PROXY_CLIENT_KEY,
        timeout=CLI_TIMEOUT * 2,
    )
    info = f"{run.describe()}\n{up.describe()}\n--- proxy log ---\n{stage.log_since(mark)[-6000:]}"
    assert not run.timed_out, info
    if run.isolation == "netns":
        assert run.interfaces == ["lo"], info
    markers = [0, 1] if case != "single" else [0]
    assert [c["tool_name"] for c in run.tool_calls] == ["run_shell_command"] * len(markers), info
    for k in markers:
        assert any(marker(case, k) in str(r.get("output")) for r in run.tool_results), info
    assert run.returncode == 0 and run.final_text.endswith(FINAL), info
    assert '"model":"gemini-3.1-pro-preview"' in stage.log_since(mark), info  # (its name on the wire)
    _finish(stage, up, case, info, skipped_before=before)
