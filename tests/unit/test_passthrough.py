"""transformers/passthrough.py: a Chat → Chat stream gives the same bytes, repairs and
terminal with passthrough as through the full path, whatever the upstream sends and however
its bytes are cut; and text chunks of the encoder's own shape do take it."""

from __future__ import annotations

import re

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.cuts import pieces
from transformers.bridge import Bridge, open_bridge
from transformers.context import Ctx
from transformers.passthrough import ChatPassthrough

BODY = {
    "model": "pub",
    "messages": [{"role": "user", "content": "hi"}],
    "tools": [{"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}],
    "stream": True,
    "stream_options": {"include_usage": True},
}


def chunk(delta: dict | None = None, *, finish=None, model="pub", cid="chatcmpl-1", usage=None, extra=None) -> dict:
    c = {"id": cid, "object": "chat.completion.chunk", "created": 7, "model": model}
    c["choices"] = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    if usage is not None:
        c["usage"] = usage
    if extra:
        c.update(extra)
    return c


def run(events: list[bytes], cuts: list[int], *, passthrough: bool, quirks=frozenset(), model="pub"):
    ctx = Ctx(quirks=quirks, upstream_model=model, public_model="pub")
    _, b = open_bridge(BODY, "chat", "chat", ctx)
    if not passthrough:
        b.passthrough = None
    out = [b.receive_data(piece) for piece in pieces(b"".join(events), cuts)]
    out.append(b.end())
    return _MINTED.sub(b"<minted>", b"".join(out)), sorted(ctx.repairs), b.terminal, b.error_code


# ids the encoder mints (random) and a created it takes from the clock
_MINTED = re.compile(rb"chatcmpl-[0-9a-f]{32}|call_[0-9a-f]{8,}|\"created\":\d{6,}")


_text = st.one_of(
    st.sampled_from(
        ["hi", " the", "", "a\nb", 'say "x"', "back\\slash", "\x00", "\u2028", "é東京", "🧑‍💻", "<think>", "</think>"]
    ),
    st.text(max_size=8),
)
_event = st.one_of(
    _text.map(lambda t: chunk({"content": t})),
    _text.map(lambda t: chunk({"role": "assistant", "content": t})),
    _text.map(lambda t: chunk({"reasoning_content": t})),
    _text.map(lambda t: chunk({"content": t}, model="other")),
    _text.map(lambda t: chunk({"content": t}, cid="chatcmpl-2")),
    _text.map(lambda t: chunk({"content": t}, extra={"system_fingerprint": "fp"})),
    st.just(
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "call_1", "type": "function", "function": {"name": "shell", "arguments": ""}}
                ]
            }
        )
    ),
    _text.map(lambda t: chunk({"tool_calls": [{"index": 0, "function": {"arguments": t}}]})),
    st.just(chunk({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]})),
    st.just(chunk({}, finish="stop")),
    st.just(chunk({}, finish="tool_calls")),
    st.just(chunk(None, usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3})),
    st.just({"error": {"message": "boom sk-secret", "type": "server_error"}}),
)


def sse(ev: dict) -> bytes:
    return b"data: " + orjson.dumps(ev) + b"\n\n"


_stream = st.lists(_event, max_size=14).map(lambda evs: [sse(e) for e in evs]) | st.lists(_event, max_size=14).map(
    lambda evs: [sse(e) for e in evs] + [b"data: [DONE]\n\n"]
)


@settings(max_examples=400)
@given(_stream, st.lists(st.integers(1, 80), max_size=12), st.booleans(), st.sampled_from(["pub", "up"]))
def test_same_as_the_full_path(events, cuts, think, model):
    quirks = frozenset({"inline_think"}) if think else frozenset()
    assert run(events, cuts, passthrough=True, quirks=quirks, model=model) == run(
        events, cuts, passthrough=False, quirks=quirks, model=model
    )


def test_text_chunks_of_the_encoders_shape_take_it(monkeypatch):
    events = [sse(chunk({"role": "assistant", "content": ""}))]
    events += [sse(chunk({"content": t})) for t in ("one", " two", "a\nb", "é")]
    events += [sse(chunk({}, finish="stop")), b"data: [DONE]\n\n"]
    ctx = Ctx(upstream_model="pub", public_model="pub")
    _, b = open_bridge(BODY, "chat", "chat", ctx)
    seen: list[bool] = []
    passes = Bridge._passes

    def spy(self, data, pt, dec):
        seen.append(passes(self, data, pt, dec))
        return seen[-1]

    monkeypatch.setattr(Bridge, "_passes", spy)
    out = b.receive_data(b"".join(events)) + b.end()
    assert seen == [False, True, True, True, True, False, False]  # role chunk arms it; finish and [DONE] do not pass
    for e in events[1:5]:
        assert e in out


def test_template_check():
    pt = ChatPassthrough()
    assert not pt.armed
    pt.arm('{"a":1,"t":', "}")
    assert pt.text('{"a":1,"t":"x"}') and pt.text('{"a":1,"t":"a\\nb"}')
    assert not pt.text('{"a":1,"t":""}')  # empty text: the decoder makes nothing
    assert not pt.text('{"a":1,"t":"\\u00e9"}')  # orjson writes é, not its escape
    assert not pt.text('{"a":1,"t":"x","u":"y"}')  # another field
    assert not pt.text('{"a":1,"t":1}')
    assert not pt.text('{"a":2,"t":"x"}')
