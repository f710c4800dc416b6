"""transformers.bridge ``Bridge._blocks``: whole events of the parser's two fast shapes read off
the bytes.  Differential: every stream, cut at chosen and at random places, gives the client
the very bytes, terminal, error code and repairs that the parser path alone gives (the same
Bridge with ``_blocks`` handing everything to the parser), for every direction (Chat → Chat's
text runs go first through their own lane, passthrough.py; what it leaves, through these)."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformers import ids
from transformers.bridge import DIRECTIONS, Bridge
from transformers.context import Ctx

from .test_hostile_upstream import CHAT_FIXTURES, RESP_FIXTURES, load, sse_bytes, tool_info

LANE = list(DIRECTIONS)

# blocks the lane must leave to the parser, or hand to ``_event`` as the parser would
ODD = [
    b"data: ping",  # junk: not JSON
    b"data: 42",  # JSON, not an object
    b'data: {"type":"response.output_text.delta","delta":"\xff\xfe"}',  # not UTF-8
    b'data: {"choices":[{"index":0,"delta":{"content":"\xc3"}}]}',  # a cut UTF-8 sequence
    b": keep-alive",  # a comment
    b"data:{}",  # no space after the colon
    b"event:ping\ndata: {}",  # no space after event:
    b'data: {"a":\ndata: 1}',  # two data lines, joined by the parser
    b'event: x\ndata:{"a":\ndata: 1}',  # the same after an event line
    b"id: 7\ndata: {}",  # another field first
    b"event: x\ndata: {}\nretry: 5",  # a field after the data line
    b"event: x\nevent: y\ndata: {}",  # two event lines
    b"event: x",  # no data: no event
    b"",  # an empty block (three newlines in a row)
    b"data: ",  # an empty data line
    b"data: [DONE]",  # Chat's end; on a Responses upstream it ends the decoder too
]


def _streams(upstream: str) -> list[bytes]:
    names = CHAT_FIXTURES if upstream == "chat" else RESP_FIXTURES
    out = []
    for name in names:
        events = load(name)
        for named in (False, True) if upstream == "responses" else (False,):
            plain = sse_bytes(events, names=named)
            out.append(plain)
            # the odd blocks spread between the events, and the stream again with CRLF
            mixed = list(itertools.chain.from_iterable(zip(events, itertools.cycle([[o] for o in ODD]), strict=False)))
            body = b"".join(
                (o[0] + b"\n\n") if isinstance(o, list) else sse_bytes([o], names=named)
                for o in (mixed + [[o] for o in ODD])
            )
            out.append(body)
            out.append(sse_bytes(events, names=named, crlf=True))
    return out


def _ids(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Minted ids from a counter the caller resets, so that two runs mint the same."""
    n = [0]

    def fake(size: int) -> bytes:
        n[0] += 1
        return n[0].to_bytes(size)

    monkeypatch.setattr(ids, "_random", fake)
    monkeypatch.setattr(ids, "_now_ns", lambda: 0)  # (the time part of ordered ids)
    return n


def _run(client: str, upstream: str, cuts: list[bytes], lane: bool) -> tuple[bytes, str, str, list[str]]:
    ctx = Ctx(upstream_model="up-model", public_model="pub-model", tools=tool_info(client))
    b = Bridge(DIRECTIONS[(client, upstream)], ctx)
    blocks = Bridge._blocks
    if not lane:
        Bridge._blocks = lambda self, data, out: data  # type: ignore[method-assign]  # the parser alone
    try:
        out = b"".join(b.receive_data(c) for c in cuts) + b.end()
    finally:
        Bridge._blocks = blocks  # type: ignore[method-assign]
    # the clock may tick between two runs
    out = re.sub(rb'"(created|created_at|completed_at)":\d+', rb'"\1":0', out)
    return out, b.terminal, b.error_code, list(ctx.repairs)


def _same(client: str, upstream: str, cuts: list[bytes], counter: list[int]) -> None:
    counter[0] = 0
    fast = _run(client, upstream, cuts, lane=True)
    counter[0] = 0
    slow = _run(client, upstream, cuts, lane=False)
    assert fast == slow


def _cut(body: bytes, at: list[int]) -> list[bytes]:
    at = sorted({min(max(a, 0), len(body)) for a in at})
    edges = [0, *at, len(body)]
    return [body[i:j] for i, j in itertools.pairwise(edges)]


@pytest.mark.parametrize(("client", "upstream"), LANE)
def test_whole_streams_and_every_split_point_give_the_parsers_answer(
    client: str, upstream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = _ids(monkeypatch)
    for body in _streams(upstream):
        _same(client, upstream, [body], counter)
        # cut at every line end, just before it and right after it (inside a blank line too)
        for m in re.finditer(rb"\n", body):
            for d in (0, 1):
                _same(client, upstream, _cut(body, [m.start() + d]), counter)


@pytest.mark.parametrize(("client", "upstream"), LANE)
def test_one_byte_at_a_time(client: str, upstream: str, monkeypatch: pytest.MonkeyPatch) -> None:
    counter = _ids(monkeypatch)
    body = _streams(upstream)[1]
    _same(client, upstream, [body[i : i + 1] for i in range(len(body))], counter)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_cuts(data: st.DataObject, monkeypatch: pytest.MonkeyPatch) -> None:
    counter = _ids(monkeypatch)
    client, upstream = data.draw(st.sampled_from(LANE))
    streams = _streams(upstream)
    body = streams[data.draw(st.integers(0, len(streams) - 1))]
    at = data.draw(st.lists(st.integers(0, len(body)), max_size=12))
    _same(client, upstream, _cut(body, at), counter)


def test_the_lane_reads_the_commonest_events_off_the_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream of plain events, whole in one read: the parser is handed only the empty rest."""
    from transformers.sse import SSEParser

    fed: list[bytes] = []
    feed = SSEParser.feed
    monkeypatch.setattr(SSEParser, "feed", lambda self, data: fed.append(data) or feed(self, data))
    for upstream, names in (("responses", RESP_FIXTURES), ("chat", CHAT_FIXTURES)):
        body = sse_bytes(load(names[0]), names=upstream == "responses")
        fed.clear()
        _run("responses", upstream, [body], lane=True)
        assert fed == [], fed
