"""Stable prefixes: through the Bridge, turn k+1's upstream body extends turn k's.

An upstream's prompt cache serves the longest prefix a request shares with an earlier one
(OpenAI, Kimi, DeepSeek: in blocks; Anthropic: up to a breakpoint).  A coding agent's turn
k+1 is its turn k plus the answer and the next input, so every upstream body the proxy
writes for turn k+1 must start with the one it wrote for turn k: the same system prompt and
tools, and every earlier message or item byte for byte (key order included), whatever the
repairs did to them: ids, reasoning replay, sealed envelopes, thinking signatures, and a
compaction item the proxy sealed (expanded into its summary on every turn).

One conversation is drawn (system prompt, tools, rounds of answers with reasoning, text and
tool calls with ids of every shape seen), written as each client protocol writes it, cut at
each user input, and sent through ``open_bridge`` toward each upstream protocol under the
quirks of the profiles that speak it.  What may differ between turns is what no cache reads
as part of the prefix: the ``cache_control`` of the breakpoint that moves forward each turn,
and a string content that carries that breakpoint as one text block.

The exception: two tool-call ids of one conversation that an id policy writes alike
(``call.a`` and ``call_a``; Kimi Code's ``functions_Bash_0`` and Kimi's ``functions.Bash:0``;
an id and itself with a ``_2``).  The uniqueness rules of ``transformers/ids.py`` (`docs/rules.md` §1
T0: an id the policy leaves unchanged keeps itself; ``kimi_restore_map``: colliding ids stay
as sent) decide over the whole request, so the later id can move the earlier one.  The
conversations drawn here have no such pair; ``test_the_exception_is_real`` shows the case.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from providers.profiles import PROFILES
from transformers.bridge import DIRECTIONS, open_bridge
from transformers.context import Ctx
from transformers.envelope import seal, seal_compaction
from transformers.ids import MAX_CALL_ID, sanitize, to_anthropic_id

KEY = b"k" * 32
BILLING = "x-anthropic-billing-header: cc_version=2.1.332.bc4; cc_entrypoint=sdk-cli;"

# the quirk sets of the profiles that speak each upstream protocol
UPSTREAMS: list[tuple[str, str]] = [
    (protocol, name) for name, p in PROFILES.items() if name != "demo" for protocol in p.protocols
]


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    args: dict[str, Any]
    output: str


@dataclass(frozen=True)
class Answer:
    reasoning: str | None
    signed: bool  # reasoning Anthropic signed (else the proxy sealed another upstream's)
    text: str | None
    calls: tuple[Call, ...]


@dataclass(frozen=True)
class Conversation:
    system: str
    tools: tuple[str, ...]
    first: str
    rounds: tuple[tuple[Answer, str], ...]  # an answer, then the user's next text when it calls nothing
    compacted: str | None = None  # the summary of an earlier compaction, at the head


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
_ids = st.one_of(
    st.builds(lambda n: f"call_{n}", st.text("abcXYZ019", min_size=1, max_size=8)),
    st.builds(lambda name, n: f"functions.{name}:{n}", st.sampled_from(["Bash", "Read"]), st.integers(0, 3)),
    st.builds(lambda n: f"toolu_{n}", st.text("abc01", min_size=1, max_size=6)),
    st.builds(lambda n: f"fc|{n}", st.text("ab_", min_size=1, max_size=4)),
    st.builds(lambda n: f"functions_Bash_{n}", st.integers(0, 3)),
    # shapes that collide once sanitised or cut: a later id must not change an earlier one
    st.sampled_from(["fc", "fc_a", "fc|a", "call_a", "call.a", "functions_Bash_0_2", "x" * 70, "x" * 64 + "_2"]),
)


def _forms(id: str) -> set[str]:
    """What the id policies can make of an id (transformers/ids.py)."""
    return {sanitize(id, MAX_CALL_ID), sanitize(id.split("|", 1)[0], MAX_CALL_ID)}


def collide(a: str, b: str) -> bool:
    """Two ids of one conversation that one id policy would write alike, or one of which is
    the other with a uniqueness suffix (``_2``…): see "The exception" in the module docstring."""
    fa, fb = _forms(a), _forms(b)
    if fa & fb:
        return True
    return any(re.fullmatch(re.escape(x) + r"_[2-9][0-9]*", y) for x in fa for y in fb) or any(
        re.fullmatch(re.escape(y) + r"_[2-9][0-9]*", x) for x in fa for y in fb
    )


@st.composite
def conversations(draw: st.DrawFn) -> Conversation:
    tools = tuple(draw(st.lists(st.sampled_from(["Bash", "Read", "Grep"]), min_size=1, max_size=3, unique=True)))
    used: set[str] = set()
    rounds = []
    for _ in range(draw(st.integers(1, 4))):
        calls = []
        for _ in range(draw(st.integers(0, 2))):
            cid = draw(_ids.filter(lambda i: not any(collide(i, u) or i == u for u in used)))
            used.add(cid)
            calls.append(Call(cid, draw(st.sampled_from(tools)), {"q": draw(_text)}, draw(_text)))
        text = draw(st.none() | _text) if calls else draw(_text)
        answer = Answer(draw(st.none() | _text), draw(st.booleans()), text, tuple(calls))
        rounds.append((answer, "" if calls else draw(_text)))
    return Conversation(draw(_text), tools, draw(_text), tuple(rounds), draw(st.none() | _text))


# -- each client protocol writes the conversation, cut after round ``n`` ------------------------


def _schema() -> dict[str, Any]:
    return {"type": "object", "properties": {"q": {"type": "string"}}}


def chat_body(c: Conversation, n: int) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": c.system}, {"role": "user", "content": c.first}]
    for answer, nxt in c.rounds[:n]:
        m: dict[str, Any] = {"role": "assistant", "content": answer.text}
        if answer.reasoning:
            m["reasoning_content"] = answer.reasoning
        if answer.calls:
            m["tool_calls"] = [
                {
                    "id": k.id,
                    "type": "function",
                    "function": {"name": k.name, "arguments": orjson.dumps(k.args).decode()},
                }
                for k in answer.calls
            ]
        msgs.append(m)
        msgs += [{"role": "tool", "tool_call_id": k.id, "content": k.output} for k in answer.calls]
        if not answer.calls:
            msgs.append({"role": "user", "content": nxt})
    tools = [{"type": "function", "function": {"name": t, "parameters": _schema()}} for t in c.tools]
    return {"model": "m", "messages": msgs, "tools": tools, "stream": True}


def responses_body(c: Conversation, n: int) -> dict[str, Any]:
    def user(text: str) -> dict[str, Any]:
        return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}

    items: list[dict[str, Any]] = [user(c.first)]
    if c.compacted is not None:  # Codex after a remote compaction: the proxy's sealed item first
        items.insert(0, {"type": "compaction", "id": "cmp_0", "encrypted_content": seal_compaction(c.compacted, KEY)})
    for i, (answer, nxt) in enumerate(c.rounds[:n]):
        if answer.reasoning:
            items.append({"type": "reasoning", "id": f"rs_{i}", "summary": [{"type": "summary_text", "text": answer.reasoning}],
                          "encrypted_content": seal(answer.reasoning, KEY)})  # fmt: skip
        if answer.text:
            items.append({"type": "message", "role": "assistant", "id": f"msg_{i}",
                          "content": [{"type": "output_text", "text": answer.text}]})  # fmt: skip
        for k in answer.calls:
            items.append(
                {"type": "function_call", "call_id": k.id, "name": k.name, "arguments": orjson.dumps(k.args).decode()}
            )
        items += [{"type": "function_call_output", "call_id": k.id, "output": k.output} for k in answer.calls]
        if not answer.calls:
            items.append(user(nxt))
    tools = [{"type": "function", "name": t, "parameters": _schema()} for t in c.tools]
    return {"model": "m", "instructions": c.system, "input": items, "tools": tools, "store": False, "stream": True,
            "include": ["reasoning.encrypted_content"]}  # fmt: skip


def messages_body(c: Conversation, n: int) -> dict[str, Any]:
    # as Claude Code: its billing line first, the ids as the proxy's encoder gave them
    msgs: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": c.first}]}]
    for answer, nxt in c.rounds[:n]:
        blocks: list[dict[str, Any]] = []
        if answer.reasoning:
            sig = "sig-" + str(len(answer.reasoning)) if answer.signed else seal(answer.reasoning, KEY)
            blocks.append({"type": "thinking", "thinking": answer.reasoning, "signature": sig})
        if answer.text:
            blocks.append({"type": "text", "text": answer.text})
        blocks += [
            {"type": "tool_use", "id": to_anthropic_id(k.id), "name": k.name, "input": k.args} for k in answer.calls
        ]
        msgs.append({"role": "assistant", "content": blocks})
        results = [
            {"type": "tool_result", "tool_use_id": to_anthropic_id(k.id), "content": k.output} for k in answer.calls
        ]
        msgs.append({"role": "user", "content": results or [{"type": "text", "text": nxt}]})
    msgs[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}  # Claude Code's moving breakpoint
    tools = [{"name": t, "input_schema": _schema()} for t in c.tools]
    system = [
        {"type": "text", "text": BILLING},
        {"type": "text", "text": c.system, "cache_control": {"type": "ephemeral"}},
    ]
    return {"model": "m", "max_tokens": 4096, "system": system, "messages": msgs, "tools": tools, "stream": True,
            "thinking": {"type": "enabled", "budget_tokens": 2048}}  # fmt: skip


def gemini_body(c: Conversation, n: int) -> dict[str, Any]:
    # as Gemini CLI: each step a model content of its text and calls, the results in a user
    # content, the reasoning as the proxy sealed it into the first call's thoughtSignature
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": c.first}]}]
    for answer, nxt in c.rounds[:n]:
        parts: list[dict[str, Any]] = []
        if answer.text:
            parts.append({"text": answer.text})
        for j, k in enumerate(answer.calls):
            part: dict[str, Any] = {"functionCall": {"id": k.id, "name": k.name, "args": k.args}}
            if j == 0 and answer.reasoning:
                part["thoughtSignature"] = seal(answer.reasoning, KEY)
            parts.append(part)
        if parts:
            contents.append({"role": "model", "parts": parts})
        results = [
            {"functionResponse": {"id": k.id, "name": k.name, "response": {"output": k.output}}} for k in answer.calls
        ]
        contents.append({"role": "user", "parts": results or [{"text": nxt}]})
    tools = [{"functionDeclarations": [{"name": t, "parameters": _schema()} for t in c.tools]}]
    return {"model": "m", "systemInstruction": {"parts": [{"text": c.system}]}, "contents": contents, "tools": tools,
            "stream": True}  # fmt: skip


BODIES = {"chat": chat_body, "responses": responses_body, "messages": messages_body, "gemini": gemini_body}


# -- the check -------------------------------------------------------------------------------------


def _uncached(x: Any) -> Any:
    """``x`` as a cache reads it: no ``cache_control``, a string content as one text block."""
    if isinstance(x, dict):
        out = {k: _uncached(v) for k, v in x.items() if k != "cache_control"}
        if isinstance(out.get("content"), str) and out.get("role") in ("user", "assistant"):
            out["content"] = [{"type": "text", "text": out["content"]}]
        return out
    if isinstance(x, list):
        return [_uncached(v) for v in x]
    return x


def _parts(body: dict[str, Any], upstream: str) -> tuple[bytes, list[bytes]]:
    """(the fixed head: system prompt and tools, the conversation's entries), each canonical JSON."""
    if upstream == "chat":
        head: Any = [body.get("tools"), body.get("prompt_cache_key")]
        entries = body["messages"]
    elif upstream == "responses":
        head = [body.get("instructions"), body.get("tools"), body.get("prompt_cache_key")]
        entries = body["input"]
    elif upstream == "gemini":
        head = [body.get("systemInstruction"), body.get("tools"), body.get("toolConfig")]
        entries = body["contents"]
    else:
        body = _uncached(body)
        system = body.get("system")
        head = [[{"type": "text", "text": system}] if isinstance(system, str) else system, body.get("tools")]
        entries = body["messages"]
    return orjson.dumps(head), [orjson.dumps(e) for e in entries]


def _send(body: dict[str, Any], client: str, upstream: str, quirks: frozenset[str]) -> dict[str, Any]:
    ctx = Ctx(quirks=quirks, upstream_model="up", public_model="m", envelope_key=KEY, compaction_key=KEY,
              max_output_tokens=4096)  # fmt: skip
    before = copy.deepcopy(body)
    out, _ = open_bridge(body, client, upstream, ctx)
    assert body == before
    return out


def _marked_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every block of a Messages body that carries ``cache_control``."""
    found: list[dict[str, Any]] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            if "cache_control" in x:
                found.append(x)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk([body.get("tools"), body.get("system"), body.get("messages")])
    return found


def check_extends(c: Conversation, client: str, upstream: str, profile: str) -> None:
    quirks = PROFILES[profile].quirks
    sent = [_send(BODIES[client](c, n), client, upstream, quirks) for n in range(len(c.rounds) + 1)]
    if upstream == "messages":  # Anthropic's limits on breakpoints, whoever placed them
        for body in sent:
            marks = _marked_blocks(body)
            assert len(marks) <= 4, marks
            assert all(b.get("type") not in ("thinking", "redacted_thinking") for b in marks), marks
            assert all(b.get("type") != "text" or b.get("text") for b in marks), marks
            if "cache_breakpoints" in quirks:  # the newest block always carries one
                assert "cache_control" in body["messages"][-1]["content"][-1], body["messages"][-1]
    for k, (prev, nxt) in enumerate(zip(sent, sent[1:])):
        head0, entries0 = _parts(prev, upstream)
        head1, entries1 = _parts(nxt, upstream)
        where = f"{client} → {upstream} ({profile}), turn {k} → {k + 1}"
        assert head1 == head0, where
        assert len(entries1) > len(entries0), where
        for i, (a, b) in enumerate(zip(entries0, entries1)):
            assert b == a, f"{where}: entry {i} changed\n{a!r}\n{b!r}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=conversations(), pick=st.sampled_from([(cl, up, p) for cl in BODIES for up, p in UPSTREAMS]))
def test_every_turn_extends_the_one_before(c: Conversation, pick: tuple[str, str, str]) -> None:
    client, upstream, profile = pick
    check_extends(c, client, upstream, profile)


def test_every_direction_is_drawn() -> None:
    assert {(cl, up) for cl in BODIES for up, _ in UPSTREAMS} == set(DIRECTIONS)


def test_the_check_sees_a_changed_earlier_entry() -> None:
    """The check is not vacuous: an id rewritten differently in a later turn is caught."""
    c = Conversation("sys", ("Bash",), "hi", ((Answer(None, False, None, (Call("call_1", "Bash", {}, "ok"),)), ""),
                                             (Answer(None, False, "done", ()), "thanks")))  # fmt: skip
    first = chat_body(c, 1)
    second = chat_body(c, 2)
    second["messages"][2]["tool_calls"][0]["id"] = "call_2"
    a = _parts(_send(first, "chat", "chat", frozenset()), "chat")[1]
    b = _parts(_send(second, "chat", "chat", frozenset()), "chat")[1]
    assert a[2] != b[2]


def test_the_exception_is_real() -> None:
    """A later id that an earlier one is sanitised to moves the earlier one (`docs/rules.md` §1)."""
    c = Conversation("sys", ("Bash",), "hi", ((Answer(None, False, None, (Call("call.a", "Bash", {}, "1"),)), ""),
                                             (Answer(None, False, None, (Call("call_a", "Bash", {}, "2"),)), ""),
                                             (Answer(None, False, "done", ()), "ok")))  # fmt: skip
    assert collide("call.a", "call_a") and collide("functions_Bash_0", "functions.Bash:0")
    assert collide("x" * 64 + "_2", "x" * 70) and not collide("call_a", "call_b")
    with pytest.raises(AssertionError, match="entry 2 changed"):
        check_extends(c, "responses", "chat", "openai-compatible")
