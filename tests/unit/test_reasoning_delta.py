"""A Responses upstream's plain reasoning deltas (``ResponsesStreamDecoder.reasoning``, then
the encoder's ``reasoning_delta``) give the client the very bytes, terminal and repairs that
the decoder's ``feed`` and the encoder's ``feed`` give, whatever the events hold and wherever
the reads cut them, for either client, SSE or WebSocket framing.  (A Chat upstream's:
tests/unit/test_chat_text_lane.py; the encoders' writers alone:
tests/unit/test_chat_text_delta.py and tests/unit/test_responses_text_delta.py.)"""

from __future__ import annotations

import contextlib
import itertools
import re
from unittest import mock

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.protocol_samples import CLIENTS, hello
from tests.unit.cuts import pieces
from tests.unit.test_responses_text_delta import spied
from transformers import ids, responses_encode
from transformers.bridge import WSFraming, open_bridge
from transformers.context import Ctx
from transformers.responses_decode import ResponsesStreamDecoder

_text = st.one_of(
    st.sampled_from(["hm", " so", "a\nb", 'say "x"', "\\", "\x00", "é東京", "🧑‍💻", "%s", ""]),
    st.text(max_size=6),
)
_SUMMARY = "response.reasoning_summary_text.delta"
_RAW = "response.reasoning_text.delta"

# one upstream event: a reasoning delta of either kind (its item id, index and text varied,
# as well-formed and not), a text delta, a reasoning item opened or done, a summary part
_delta = st.fixed_dictionaries(
    {"type": st.sampled_from([_SUMMARY, _SUMMARY, _RAW]), "delta": st.one_of(_text, st.just(None), st.just(7))},
    optional={
        "item_id": st.sampled_from(["rs_up", "rs_up", "rs_2", "", None, 5]),
        "output_index": st.sampled_from([0, 1, 2]),
        "summary_index": st.sampled_from([0, 0, 1, "x"]),
        "content_index": st.sampled_from([0, 1]),
        # (the normalizer reads an event's item: its id, or one minted, for the later deltas
        # of its output index that name none)
        "item": st.sampled_from([{"id": "rs_new", "type": "reasoning"}, {"type": "reasoning"}]),
    },
)
_other = st.one_of(
    st.builds(
        lambda t: {"type": "response.output_text.delta", "item_id": "msg_up", "output_index": 1, "delta": t}, _text
    ),
    st.just({"type": "response.output_item.added", "output_index": 0, "item": {"id": "rs_up", "type": "reasoning"}}),
    st.just(
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {"id": "rs_up", "type": "reasoning", "summary": [{"type": "summary_text", "text": "hm"}]},
        }
    ),
    st.just(
        {
            "type": "response.reasoning_summary_part.added",
            "item_id": "rs_up",
            "output_index": 0,
            "summary_index": 1,
            "part": {"type": "summary_text", "text": ""},
        }
    ),
)
_MINTED = re.compile(rb"(msg|rs|fc|call|resp)_[0-9a-f]{16,}|\"(created_at|completed_at)\":\d{6,}")


def _wire(events: list[dict], terminal: bool) -> bytes:
    resp = {"id": "resp_up", "object": "response", "created_at": 7, "model": "m", "status": "in_progress", "output": []}
    out = [{"type": "response.created", "response": resp}, *events]
    if terminal:
        out.append({"type": "response.completed", "response": dict(resp, status="completed")})
    return b"".join(b"event: " + str(e["type"]).encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in out)


def _none(*_: object) -> None:
    return None


def _bridge(wire: bytes, cuts: list[int], fast: bool, client: str, ws: bool, key: bytes) -> tuple[bytes, str, list]:
    """The client's answer to ``wire`` read in pieces ``cuts``, with the decoder's
    ``reasoning`` (``fast``) or every event through its ``feed``."""
    n = itertools.count()
    body = hello(client)
    hexes = itertools.count()
    with (
        mock.patch.object(ids, "_random", lambda k: next(n).to_bytes(k, "big")),
        mock.patch.object(responses_encode, "_hex", lambda: f"{next(hexes):032x}"),
        contextlib.nullcontext() if fast else mock.patch.object(ResponsesStreamDecoder, "reasoning", _none),
    ):
        _, b = open_bridge(body, client, "responses", Ctx(upstream_model="m", public_model="pub", envelope_key=key))
        if ws and client == "responses":
            b.framing = WSFraming()
        out = [b.receive_data(piece) for piece in pieces(wire, cuts)]
        out.append(b.end())
    return _MINTED.sub(b"<minted>", b"".join(out)), b.terminal, list(b.repairs)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(_delta, _delta, _delta, _other), max_size=14),
    st.booleans(),
    st.lists(st.integers(1, 150), max_size=8),
    st.sampled_from(CLIENTS),
    st.booleans(),
    st.sampled_from([b"", b"k" * 32]),
)
def test_same_as_the_decoders_feed(events, terminal, cuts, client, ws, key):
    wire = _wire(events, terminal)
    assert _bridge(wire, cuts, True, client, ws, key) == _bridge(wire, cuts, False, client, ws, key)


def _summary(text: str, index: int = 0, iid: str = "rs_up") -> dict:
    return {"type": _SUMMARY, "item_id": iid, "output_index": 0, "summary_index": index, "delta": text}


def test_the_encoder_writes_them_once_their_part_is_open():
    """The first delta of a part opens it (the full way); the next ones of that part are the
    writer's; a delta of another part, or another kind, opens that one the full way."""
    raw = {"type": _RAW, "item_id": "rs_up", "output_index": 0, "content_index": 0, "delta": "r"}
    wire = _wire([_summary("a"), _summary("b"), _summary("c", 1), _summary("d", 1), raw, raw], True)
    with spied(responses_encode.ResponsesStreamEncoder, "reasoning_delta") as got:
        fast = _bridge(wire, [], True, "responses", False, b"")
    assert fast == _bridge(wire, [], False, "responses", False, b"")
    assert [(ev.text, r is not None) for ev, r in got] == [
        ("a", False),
        ("b", True),
        ("c", False),
        ("d", True),
        ("r", False),
        ("r", True),
    ]
