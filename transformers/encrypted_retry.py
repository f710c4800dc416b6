"""Retry without foreign reasoning blobs (quirk ``encrypted_content_retry``).

Theory of operation
-------------------
OpenAI (and Azure) answer ``400 invalid_encrypted_content`` when a replayed reasoning item
carries an ``encrypted_content`` blob they did not issue — a turn that started on another
provider or another organisation.  The conversation is still valid without those items, so
the proxy retries once with every reasoning item that carries ``encrypted_content``
removed (AxonHub does the same, ``encrypted_retry.go``).  Only the request is edited; the
client's history is untouched, and the next turn repeats the dance only if the client
replays the same foreign blobs.
"""

from __future__ import annotations

from typing import Any

MARKER = b"invalid_encrypted_content"


def is_invalid_encrypted_content(status: int, body: bytes) -> bool:
    return status == 400 and MARKER in body


def strip_encrypted_reasoning(body: dict[str, Any]) -> dict[str, Any] | None:
    """The request without reasoning items that carry a blob, or None if it had none."""
    items = body.get("input")
    if not isinstance(items, list):
        return None
    kept = [
        it
        for it in items
        if not (isinstance(it, dict) and it.get("type") == "reasoning" and it.get("encrypted_content"))
    ]
    if len(kept) == len(items):
        return None
    return {**body, "input": kept}
