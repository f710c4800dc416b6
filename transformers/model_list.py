"""A protocol's own model list: the entry of one model in its shape.

Theory of operation
-------------------
OpenAI's ``GET /v1/models`` is every client's but Gemini's (``app/main.py``).  A protocol
with a list of its own names it in its row (``protocols.ModelList``): the route, the list's
field, the message of a model it does not know, and the writer here of one model's entry
from its public name and catalogue facts (``providers/catalog.py``).  Gemini CLI reads
``GET /v1beta/models`` and ``GET /v1beta/models/{model}``:

==============================  ============================================================
field                           value
==============================  ============================================================
``name``                        ``models/`` and the public name
``version``                     ``001``
``displayName``                 the public name
``inputTokenLimit``             the context window (0: unknown)
``outputTokenLimit``            the most output tokens (0: unknown)
``supportedGenerationMethods``  ``generateContent``, ``countTokens``
``thinking``                    true for a reasoning model (else absent)
==============================  ============================================================
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["ModelFacts", "gemini_entry"]


class ModelFacts(Protocol):
    """What an entry reads of a model's catalogue facts (``providers.catalog.ModelInfo``)."""

    @property
    def context_window(self) -> int | None: ...

    @property
    def max_output_tokens(self) -> int | None: ...

    @property
    def reasoning(self) -> bool: ...


def gemini_entry(name: str, info: ModelFacts) -> dict[str, Any]:
    """One model of Gemini's ``models.list`` (the table above)."""
    out: dict[str, Any] = {
        "name": "models/" + name,
        "version": "001",
        "displayName": name,
        "inputTokenLimit": info.context_window or 0,
        "outputTokenLimit": info.max_output_tokens or 0,
        "supportedGenerationMethods": ["generateContent", "countTokens"],
    }
    if info.reasoning:
        out["thinking"] = True
    return out
