"""A plain streamed request in each client protocol, for the tests that run every row.

``CLIENTS`` and ``UPSTREAMS`` are the rows of ``transformers/protocols.SPECS``: a property
test that draws from them runs a new protocol's directions as soon as its row exists.  Its
sample goes into ``_HELLO`` and ``_tools`` here (``tests/unit/test_protocol_rows.py``
fails on a row without one).
"""

from __future__ import annotations

from typing import Any

from transformers.protocols import SPECS

CLIENTS = tuple(SPECS)
UPSTREAMS = tuple(SPECS)

_HELLO: dict[str, dict[str, Any]] = {
    "chat": {"messages": [{"role": "user", "content": "hi"}]},
    "responses": {"input": "hi"},
    "messages": {"max_tokens": 1024, "messages": [{"role": "user", "content": "hi"}]},
    "gemini": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
}


def _tools(client: str, functions: list[dict[str, Any]]) -> dict[str, Any]:
    """``functions`` (Chat's ``function`` objects: name, parameters) in the client's own form."""
    if client == "chat":
        return {"tools": [{"type": "function", "function": f} for f in functions]}
    if client == "responses":
        return {"tools": [{"type": "function", **f} for f in functions]}
    if client == "messages":
        return {"tools": [{"name": f["name"], "input_schema": f.get("parameters") or {}} for f in functions]}
    return {"tools": [{"functionDeclarations": functions}]}


def hello(client: str, functions: list[dict[str, Any]] | None = None, *, model: str = "pub") -> dict[str, Any]:
    """A streamed request saying hi in ``client``'s protocol, offering ``functions``."""
    body = {"model": model, "stream": True, **_HELLO[client]}
    if functions:
        body.update(_tools(client, functions))
    return body
