"""The ids a stored turn gives its input items (``app/stored.py``, ``_with_ids``)."""

from __future__ import annotations

import hashlib

from app.stored import _with_ids
from transformers.ids import ordered_hex


def test_a_minted_response_ids_items_are_its_digits_then_their_place() -> None:
    rid = "resp_" + ordered_hex()
    items = [
        {"type": "message", "role": "user", "content": "one"},
        {"id": "msg_client_given", "type": "message", "role": "user", "content": "two"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        "not an item",
    ]
    got = _with_ids(items, rid)
    assert [i["id"] if isinstance(i, dict) else i for i in got] == [
        f"msg_{rid[5:]}00000000",
        "msg_client_given",
        f"fco_{rid[5:]}00000002",
        "not an item",
    ]
    assert got[0]["content"] == "one" and "id" not in items[0]  # (a copy: the turn's own stay)
    assert _with_ids(items, rid) == got  # the same ids each time
    other = _with_ids(items, "resp_" + ordered_hex())
    assert other[0]["id"] != got[0]["id"] and len(other[0]["id"]) == len(got[0]["id"]) == 44


def test_another_response_id_gives_a_hash_after_its_time_digits() -> None:
    for rid, stem in (("resp_67abcdef0123xyz", "67abcdef0123"), ("chatcmpl-1", ""), ("resp_0123456789ABCDEF", "")):
        (item,) = _with_ids([{"type": "reasoning"}], rid)
        digest = hashlib.sha256(f"{rid}:0".encode()).hexdigest()
        assert item["id"] == f"rs_{stem}{digest[: 40 - len(stem)]}", rid
