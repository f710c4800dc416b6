"""A Gemini client's streamed answer, its chunks' parts merged, equals its whole answer for
the same upstream answer (streamed, and as the upstream's non-streamed object), on every
Chat and Responses fixture of the hostile-upstream corpus; and every read cut of a stream
gives the same bytes as the stream in one read."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.golden.cases import derived_object
from tests.golden.harness import mask
from transformers.bridge import AnswerError, open_bridge
from transformers.context import Ctx

from .test_hostile_upstream import CHAT_FIXTURES, RESP_FIXTURES, load, sse_bytes, tool_info

FIXTURES = [("chat", n) for n in CHAT_FIXTURES] + [("responses", n) for n in RESP_FIXTURES]
BODY = {"model": "pub-model", "contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


def _bridge(upstream: str, stream: bool) -> Any:
    ctx = Ctx(upstream_model="up-model", public_model="pub-model", tools=tool_info("chat"), envelope_key=b"k" * 32)
    return open_bridge({**BODY, "stream": stream}, "gemini", upstream, ctx)[1]


def _merged(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The stream's chunks as one answer, merged as a whole answer is."""
    parts: list[dict[str, Any]] = []
    last: dict[str, Any] = {}
    for c in chunks:
        if "error" in c:
            return {"error": c["error"]["status"]}
        cand = c["candidates"][0]
        for p in cand["content"]["parts"]:
            if p == {"text": ""}:
                continue
            prev = parts[-1] if parts else None
            if (
                prev is not None
                and "text" in p
                and "text" in prev
                and prev.get("thought") == p.get("thought")
                and "thoughtSignature" not in p
            ):
                parts[-1] = {**prev, "text": prev["text"] + p["text"]}
            else:
                parts.append(p)
        last = c
    cand = last["candidates"][0]
    return {"parts": parts, "finish": cand.get("finishReason"), "usage": last.get("usageMetadata")}


def _whole(obj: dict[str, Any]) -> dict[str, Any]:
    cand = obj["candidates"][0]
    return {"parts": cand["content"]["parts"], "finish": cand.get("finishReason"), "usage": obj.get("usageMetadata")}


def _masked(obj: Any) -> Any:
    return orjson.loads(mask(orjson.dumps(obj).decode()))


@pytest.mark.parametrize(("upstream", "name"), FIXTURES, ids=[f"{u}-{n}" for u, n in FIXTURES])
def test_streamed_equals_whole(upstream: str, name: str) -> None:
    raw = sse_bytes(load(name))
    b = _bridge(upstream, True)
    out = b.receive_data(raw) + b.end()
    chunks = [orjson.loads(line[6:]) for line in out.split(b"\n\n") if line.startswith(b"data: ")]
    streamed = _merged(chunks)
    try:
        obj = derived_object(raw, upstream)
    except ValueError:
        return  # a stream with no terminal: no whole form
    try:
        _, body = _bridge(upstream, False).complete(obj)
    except AnswerError:
        assert "error" in streamed
        return
    if "error" in streamed:
        return  # (a chat stream that failed on the way has a whole twin that the proxy answers)
    whole = _whole(orjson.loads(body))
    # (a seal of the same text and signatures under the same key is the same value)
    assert _masked(streamed) == _masked(whole)


@pytest.mark.parametrize(("upstream", "name"), FIXTURES[:6], ids=[f"{u}-{n}" for u, n in FIXTURES[:6]])
def test_every_cut_gives_the_same_bytes(upstream: str, name: str) -> None:
    raw = sse_bytes(load(name))
    b = _bridge(upstream, True)
    once = b.receive_data(raw) + b.end()
    for cut in range(1, len(raw), max(1, len(raw) // 40)):
        b2 = _bridge(upstream, True)
        b2.encoder.id = b.encoder.id  # (the response id is random)
        got = b2.receive_data(raw[:cut]) + b2.receive_data(raw[cut:]) + b2.end()
        assert got == once, cut
