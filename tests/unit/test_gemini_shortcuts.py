"""The Gemini side's two shortcuts on the Bridge's way: the decoder's ``text`` (a plain text
chunk's text without ``feed``'s walk) and the encoder's ``text_delta`` (a text chunk already
serialized and framed).  Each gives what the full way gives, byte for byte, or declines; a
whole stream through the Bridge writes the same bytes with them as without."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from transformers.bridge import JSONArrayFraming, SSEFraming, WSFraming, open_bridge
from transformers.context import Ctx
from transformers.events import Finish, Start, Text
from transformers.gemini_decode import GeminiStreamDecoder
from transformers.gemini_encode import GeminiEncoder
from transformers.whole_events import WholeEvents

SSE = SSEFraming("gemini")


def _encoder(model: str = "pub") -> GeminiEncoder:
    enc = GeminiEncoder(Ctx(public_model=model))
    enc.frame_deltas(SSE.delta_frame)
    return enc


@given(st.text(min_size=1), st.sampled_from(["pub", "m%s-100%", 'q"uo\\te', "東京"]))
def test_text_delta_is_the_framed_chunk_feed_gives(text: str, model: str) -> None:
    enc, full = _encoder(model), GeminiEncoder(Ctx(public_model=model))
    full.id = enc.id
    written = enc.text_delta(text)
    assert written == b"".join(SSE.frame(c) for c in full.feed(Text(text)))
    assert enc.parts == full.parts == [{"text": text}]


def test_text_delta_declines_where_feed_differs() -> None:
    enc = _encoder()
    assert enc.text_delta("") is None  # feed writes no chunk for it
    enc.feed(Start(model="other"))  # a model set at the start is the chunk's
    assert orjson.loads(enc.text_delta("a")[6:])["modelVersion"] == "pub"  # type: ignore[index]
    late = GeminiEncoder(Ctx())
    late.frame_deltas(SSE.delta_frame)
    late.feed(Start(model="up"))
    assert orjson.loads(late.text_delta("a")[6:])["modelVersion"] == "up"  # type: ignore[index]
    enc.feed(Finish())
    assert enc.text_delta("a") is None  # finished: feed writes nothing either
    assert GeminiEncoder(Ctx()).text_delta("a") is None  # unframed: no shortcut


@pytest.mark.parametrize("framing", [JSONArrayFraming(), WSFraming()])
def test_text_delta_only_under_sse(framing: Any) -> None:
    # a JSON array frames its first element apart ('[' rather than '\n,'): feed and the framing
    enc = GeminiEncoder(Ctx(public_model="pub"))
    enc.frame_deltas(framing.delta_frame)
    assert enc.text_delta("a") is None
    enc.frame_deltas(SSE.delta_frame)  # and back
    assert enc.text_delta("a") is not None


def test_whole_events_has_no_text_shortcut() -> None:
    assert WholeEvents().text_delta("a") is None


def _chunk(parts: list[Any], **cand: Any) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"parts": parts, "role": "model"}, "index": 0, **cand}],
        "usageMetadata": {"promptTokenCount": 3, "totalTokenCount": 3},
        "modelVersion": "g",
        "responseId": "r",
    }


PLAIN = _chunk([{"text": "hi"}])


@pytest.mark.parametrize(
    "obj",
    [
        _chunk([{"text": "hi", "thought": True}]),
        _chunk([{"text": "hi", "thoughtSignature": "s"}]),
        _chunk([{"text": "a"}, {"text": "b"}]),
        _chunk([{"text": ""}]),
        _chunk([{"functionCall": {"name": "f", "args": {}}}]),
        _chunk([{"text": "hi"}], finishReason="STOP"),
        _chunk([{"text": "hi"}], finishReason="FINISH_REASON_UNSPECIFIED"),
        _chunk([]),
        _chunk(["hi"]),
        {**PLAIN, "error": {"code": 500, "message": "x", "status": "INTERNAL"}},
        {"candidates": []},
        {"candidates": "x"},
        {"candidates": [{"content": "x"}]},
        {"candidates": [{"content": {"parts": {"text": "hi"}}}]},
        {"promptFeedback": {"blockReason": "SAFETY"}},
    ],
)
def test_decoder_text_declines_every_other_chunk(obj: dict[str, Any]) -> None:
    dec = GeminiStreamDecoder(Ctx())
    dec.feed(PLAIN)
    assert dec.text(obj) is None


def test_decoder_text_is_feeds_text_and_keeps_the_usage() -> None:
    dec, full = GeminiStreamDecoder(Ctx()), GeminiStreamDecoder(Ctx())
    assert dec.text(PLAIN) is None  # not started: feed gives the Start first
    dec.feed(PLAIN)
    full.feed(PLAIN)
    obj = {**_chunk([{"text": "more"}]), "usageMetadata": {"promptTokenCount": 5, "totalTokenCount": 5}}
    assert dec.text(obj) == "more" and full.feed(obj) == [Text("more")]
    assert dec.usage == full.usage == {"promptTokenCount": 5, "totalTokenCount": 5}
    dec.feed(_chunk([{"text": "x"}], finishReason="STOP"))
    assert dec.text(PLAIN) is None  # finished


def _sse(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)


STREAM = [_chunk([{"text": f"w{i}%"}]) for i in range(30)] + [
    _chunk([{"text": "t", "thought": True}]),
    _chunk([{"text": "after"}]),
    _chunk(
        [{"functionCall": {"name": "shell", "args": {"command": ["ls"]}}, "thoughtSignature": "sig"}],
        finishReason="STOP",
    )
    | {"usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 9, "totalTokenCount": 12}},
]


def _through(client: str, upstream: str, shortcuts: bool, monkeypatch: pytest.MonkeyPatch, cut: int) -> bytes:
    with monkeypatch.context() as m:
        if not shortcuts:
            m.setattr(GeminiStreamDecoder, "text", lambda self, obj: None)
            m.setattr(GeminiEncoder, "text_delta", lambda self, text: None)
        body: dict[str, Any] = {"model": "pub", "stream": True}
        if client == "gemini":
            body["contents"] = [{"role": "user", "parts": [{"text": "hi"}]}]
        else:
            body["messages"] = [{"role": "user", "content": "hi"}]
        ctx = Ctx(upstream_model="up", public_model="pub")
        bridge = open_bridge(body, client, upstream, ctx)[1]
        if client == "gemini":
            bridge.encoder.id = "fixed-id"
        data = _sse(STREAM) if upstream == "gemini" else _chat_stream()
        out = bridge.receive_data(data[:cut]) + bridge.receive_data(data[cut:]) + bridge.end()
    return out


def _chat_stream() -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "up",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": f"w{i}%"}) for i in range(30)]
    chunks.append(chunk({}, "stop"))
    return _sse(chunks) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("client, upstream", [("gemini", "gemini"), ("gemini", "chat"), ("chat", "gemini")])
@pytest.mark.parametrize("cut", [0, 1, 777, 10_000])
def test_a_stream_writes_the_same_bytes_with_the_shortcuts(client, upstream, cut, monkeypatch) -> None:
    fast = _through(client, upstream, True, monkeypatch, cut)
    slow = _through(client, upstream, False, monkeypatch, cut)
    assert b"w29%" in fast and b'"error"' not in fast
    assert _ids_out(fast) == _ids_out(slow)


def _ids_out(data: bytes) -> list[Any]:
    """The chunks written, each JSON one parsed, a Chat client's minted id and created time
    left out (minted per answer)."""
    out: list[Any] = []
    for block in data.split(b"\n\n"):
        if not block.startswith(b"data: {"):
            out.append(block)
            continue
        obj = orjson.loads(block[6:])
        obj.pop("id", None)
        obj.pop("created", None)
        out.append(obj)
    return out
