"""Proxy-sealed reasoning envelope, for stateless reasoning replay through Codex.

Theory of operation
-------------------
A Chat upstream's ``reasoning_content`` must come back on the next turn (Kimi, DeepSeek
and MiMo answer 400 without it, SPEC R3-d), but the proxy keeps no conversation state and
Codex drops raw reasoning ``content`` from replayed items.  So the reasoning item we send
Codex carries the text twice: as ``summary_text`` (what Codex shows and replays) and, when
a key is configured, sealed in ``encrypted_content`` as ``pxy1.<b64url(json)>.<b64url(mac)>``
where the MAC is HMAC-SHA256 over the JSON with the operator's key.  On the way back the
envelope is opened (the exact bytes, including whitespace the summary may have lost) and
always stripped before a real OpenAI/Azure upstream sees it: it is ours, not theirs.
Opening with the wrong key, or a foreign blob, returns ``None`` (the summary is used).
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import orjson

PREFIX = "pxy1."


def _b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def _unb64(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def seal(text: str, key: bytes) -> str:
    body = orjson.dumps({"r": text})
    mac = hmac.new(key, body, hashlib.sha256).digest()
    return PREFIX + _b64(body) + "." + _b64(mac)


def is_envelope(blob: object) -> bool:
    return isinstance(blob, str) and blob.startswith(PREFIX)


def unseal(blob: object, key: bytes) -> str | None:
    if not key or not is_envelope(blob):
        return None
    try:
        body_s, mac_s = blob[len(PREFIX) :].split(".", 1)  # type: ignore[index]
        body, mac = _unb64(body_s), _unb64(mac_s)
    except ValueError:
        return None
    if not hmac.compare_digest(mac, hmac.new(key, body, hashlib.sha256).digest()):
        return None
    try:
        text = orjson.loads(body).get("r")
    except orjson.JSONDecodeError:
        return None
    return text if isinstance(text, str) else None
