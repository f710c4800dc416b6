"""app.guard: a request's Content-Type decided once per value, as ``_is_json`` decides it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from app import guard

VALUES = [
    b"application/json",
    b"application/json; charset=utf-8",
    b" Application/JSON ",
    b"application/vnd.api+json",
    b"application/merge-patch+json;x=1",
    b"text/plain",
    b"text/json",
    b"application/jsonx",
    b"",
    b"caf\xe9/json",
]


def test_a_content_type_is_decided_as_is_json_decides_it_and_remembered() -> None:
    for _ in range(2):  # the second time from the memo
        for v in VALUES:
            assert guard._is_json_header(v) is guard._is_json(v.decode("latin-1")), v
    assert set(VALUES) <= guard._JSON_TYPES.keys()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40) | st.sampled_from(VALUES))
def test_any_value(value: bytes) -> None:
    assert guard._is_json_header(value) is guard._is_json(value.decode("latin-1"))
    assert guard._is_json_header(value) is guard._is_json(value.decode("latin-1"))


def test_the_memo_is_bounded() -> None:
    for i in range(guard._JSON_TYPES_MAX + 10):
        guard._is_json_header(b"application/x%d+json" % i)
    assert 0 < len(guard._JSON_TYPES) <= guard._JSON_TYPES_MAX
    assert guard._is_json_header(b"application/json") and not guard._is_json_header(b"text/plain")
