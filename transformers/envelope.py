"""Proxy-sealed envelopes: reasoning text and compaction summaries, carried by the client.

Theory of operation
-------------------
The proxy keeps no conversation state (docs/rules.md, "Stateless"), yet two things it produces must come
back to it intact on a later turn, through any instance: the reasoning text of a Chat
upstream (Kimi, DeepSeek and MiMo answer 400 without it, docs/rules.md §4 R3-d; Codex drops raw
reasoning ``content`` from replayed items) and the summary of a synthesised compaction
(``transformers/compaction.py``).  Both travel in the ``encrypted_content`` field of the
item the client replays, sealed with the server's secret (``server.secret_key``): an HMAC
-SHA256 tag over the payload, so any instance holding the key opens it and nobody without
the key can forge or alter one.  Sealed, not encrypted: the payload is the client's own
conversation, readable by whoever holds the blob.

=========  ===============================================  ======================================
kind       format                                           MAC input
=========  ===============================================  ======================================
reasoning  ``pxy1.<b64url(json {"r": text[, "g": sigs]})>.  the JSON bytes
           <b64url(mac)>``
compaction ``pxc1.<b64url(json {"v":1,"s":summary,"m":model})>.<b64url(mac)>``
                                                            ``pxc1.`` + the JSON bytes (so a blob
                                                            of one kind never opens as the other)
=========  ===============================================  ======================================

A reasoning envelope may also carry the thought signatures a Gemini upstream put on its tool
calls (``"g"``: upstream call id → the signature, as Gemini wrote it): the client replays
the item, and the next request puts each signature back on its call
(``transformers/thought_signatures.py``).  Sealed with the request's key, so a signature
only comes back through the client key it was given to, unaltered.

Opening says why a blob did not open, so the caller can tell a foreign blob (someone
else's format: not ours to judge) from one of ours that fails:

===================  ===================================================================
status               meaning
===================  ===================================================================
``ok``               opened: the tag matches under the key
``foreign``          not our prefix at all (an OpenAI blob, another gateway's)
``unknown_version``  our family prefix (``pxc``) with a version this build does not know
``malformed``        our prefix, but cut or garbled (no tag, bad base64, bad JSON)
``bad_mac``          well formed, but the tag does not match: forged, altered, or sealed
                     with another key (another deployment, a rotated secret)
``no_key``           no key configured to open it with
===================  ===================================================================
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Any, Literal

import orjson

PREFIX = "pxy1."  # reasoning, version 1
COMPACTION_FAMILY = "pxc"
COMPACTION_VERSION = 1
COMPACTION_PREFIX = f"{COMPACTION_FAMILY}{COMPACTION_VERSION}."

Status = Literal["ok", "foreign", "unknown_version", "malformed", "bad_mac", "no_key"]


def _b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def _unb64(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def _split(rest: str) -> tuple[bytes, bytes] | None:
    try:
        body_s, mac_s = rest.split(".", 1)
        body, mac = _unb64(body_s), _unb64(mac_s)
    except (ValueError, binascii.Error):
        return None
    if not body or len(mac) != hashlib.sha256().digest_size:
        return None
    return body, mac


# -- reasoning ---------------------------------------------------------------------------


def seal(text: str, key: bytes, signatures: dict[str, str] | None = None) -> str:
    body = orjson.dumps({"r": text, "g": signatures} if signatures else {"r": text})
    mac = hmac.new(key, body, hashlib.sha256).digest()
    return PREFIX + _b64(body) + "." + _b64(mac)


def is_envelope(blob: object) -> bool:
    return isinstance(blob, str) and blob.startswith(PREFIX)


def open_reasoning(blob: object, key: bytes) -> tuple[Status, str | None]:
    """``(status, text)``: the sealed reasoning text when ``status == "ok"``."""
    status, text, _ = open_sealed(blob, key)
    return status, text


def open_sealed(blob: object, key: bytes) -> tuple[Status, str | None, dict[str, str]]:
    """``(status, text, signatures)``: the sealed reasoning text and the thought signatures
    it carries (upstream call id → signature; empty when none) when ``status == "ok"``."""
    if not is_envelope(blob):
        return "foreign", None, {}
    if not key:
        return "no_key", None, {}
    parts = _split(blob[len(PREFIX) :])  # type: ignore[index]
    if parts is None:
        return "malformed", None, {}
    body, mac = parts
    if not hmac.compare_digest(mac, hmac.new(key, body, hashlib.sha256).digest()):
        return "bad_mac", None, {}
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "malformed", None, {}
    text = obj.get("r") if isinstance(obj, dict) else None
    if not isinstance(text, str):
        return "malformed", None, {}
    sigs = obj.get("g")
    if sigs is None:
        return "ok", text, {}
    if not (isinstance(sigs, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in sigs.items())):
        return "malformed", None, {}
    return "ok", text, sigs


def unseal(blob: object, key: bytes) -> str | None:
    """The sealed reasoning text, or None whatever the reason (``open_reasoning`` says why)."""
    return open_reasoning(blob, key)[1]


# -- compaction --------------------------------------------------------------------------


def seal_compaction(summary: str, key: bytes, *, model: str = "") -> str:
    if not key:
        raise ValueError("a compaction envelope needs a key")
    body = orjson.dumps({"v": COMPACTION_VERSION, "s": summary, "m": model})
    mac = hmac.new(key, COMPACTION_PREFIX.encode() + body, hashlib.sha256).digest()
    return COMPACTION_PREFIX + _b64(body) + "." + _b64(mac)


def is_compaction_envelope(blob: object) -> bool:
    """Our compaction family, whatever the version."""
    return isinstance(blob, str) and blob.startswith(COMPACTION_FAMILY)


def _version(blob: str) -> int | None:
    head, dot, _ = blob[len(COMPACTION_FAMILY) :].partition(".")
    return int(head) if dot and head.isdigit() and len(head) <= 4 else None


def open_compaction(blob: object, key: bytes) -> tuple[Status, dict[str, Any] | None]:
    """``(status, payload)``; ``payload`` (``{"v","s","m"}``, ``s`` the summary) when ``ok``."""
    if not is_compaction_envelope(blob):
        return "foreign", None
    assert isinstance(blob, str)
    version = _version(blob)
    if version is None:
        return "malformed", None
    if version != COMPACTION_VERSION:
        return "unknown_version", None
    if not key:
        return "no_key", None
    parts = _split(blob[len(COMPACTION_PREFIX) :])
    if parts is None:
        return "malformed", None
    body, mac = parts
    if not hmac.compare_digest(mac, hmac.new(key, COMPACTION_PREFIX.encode() + body, hashlib.sha256).digest()):
        return "bad_mac", None
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "malformed", None
    if not (isinstance(obj, dict) and obj.get("v") == COMPACTION_VERSION and isinstance(obj.get("s"), str)):
        return "malformed", None
    return "ok", obj
