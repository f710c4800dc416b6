"""httpcore's header check, without two calls per header of headers already bytes.

Theory of operation
-------------------
httpcore builds a ``Request`` or ``Response`` through ``enforce_headers``, which makes a new
list of ``(enforce_bytes(name), enforce_bytes(value))``: two calls per header, each two
``isinstance`` tests, to turn ``str`` into ASCII bytes and refuse anything else.  An
upstream answer's head goes through it twice (the connection's ``Response``, then the
pool's, wrapping it), a request's once; a hosted API's answer has 20-odd lines.

The headers httpcore is given here are already bytes: httpx's ``Headers.raw`` for a request,
h11's ``raw_items()`` for a response.  ``enforce_headers`` below looks at each pair once:

=========================================  ===========================================
headers                                    result
=========================================  ===========================================
a list of 2-tuples of ``bytes``            a new list of the same pairs (what httpcore
                                           would build: equal tuples of the same bytes)
anything else (``None``, a mapping, str,   httpcore's own function: its conversion,
other item types)                          its ``TypeError`` and message
=========================================  ===========================================

``install()`` points ``httpcore._models.enforce_headers`` (what its ``Request`` and
``Response`` call) at it; idempotent.  ``tests/unit/test_upstream_heads.py`` checks it
against httpcore's on every kind of input.
"""

from __future__ import annotations

from typing import Any

import httpcore._models

__all__ = ["enforce_headers", "install"]

_httpcore_enforce_headers = httpcore._models.enforce_headers


def enforce_headers(value: Any = None, *, name: str) -> list[tuple[bytes, bytes]]:
    if type(value) is list:
        for item in value:
            if type(item) is not tuple or len(item) != 2 or type(item[0]) is not bytes or type(item[1]) is not bytes:
                break
        else:
            return value.copy()
    return _httpcore_enforce_headers(value, name=name)


def install() -> None:
    """Make httpcore's ``Request`` and ``Response`` check headers with ``enforce_headers``."""
    httpcore._models.enforce_headers = enforce_headers
