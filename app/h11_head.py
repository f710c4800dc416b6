"""Upstream response heads read with one cheap check per header line instead of h11's regex.

Theory of operation
-------------------
httpx reads an HTTP/1.1 upstream through httpcore, which parses with h11.  h11 matches every
header line against its grammar's regular expression (``header_field``: a token, ``:``,
optional SP/HTAB, a value of "field vchars" separated by runs of SP/HTAB, optional SP/HTAB)
and builds a dict of the match's groups: ~2 µs a line, so a hosted API's head (OpenAI's
has ~25 lines: rate limits, cookies, the CDN's own) cost more to parse than the proxy spends
on a short request's routing and checks together.

``read_response_head`` answers what h11's ``maybe_read_from_SEND_RESPONSE_server`` answers
(the same status line handling, the same event) with, per header line: the name is what
comes before the first ``:`` and must match h11's ``token``; the value is the rest with SP
and HTAB stripped from both ends.  That is h11's grammar whenever no line holds a byte h11's
field vchar refuses besides SP and HTAB (NUL, CR, VT, FF; LF cannot be there, it ends a
line), which one search over the whole head decides:

=====================================  ==================================================
in the head                            this reader
=====================================  ==================================================
not complete yet                       ``None``, after h11's early check for an
                                       obviously invalid first line
every line ``token:value``, no NUL,    the event, its headers as h11 would give them
CR, VT or FF in any line
anything else: a continuation line     h11's own header decoding, on the same lines: its
(obs-fold), no colon, a name that is   event or its ``LocalProtocolError`` and message
not a token, a refused byte
=====================================  ==================================================

So it never accepts what h11 refuses, and what it accepts reads the same
(``tests/unit/test_h11_head.py`` checks both against h11 on generated heads).  ``install()``
puts it in h11's reader table for the state where a client reads a response head; the
app's own server is uvicorn on httptools, so in this process the table serves httpcore's
upstream connections only.
"""

from __future__ import annotations

import re
from typing import Any

from h11 import InformationalResponse, LocalProtocolError, Response
from h11._abnf import token
from h11._readers import READERS, _decode_header_lines, status_line_re
from h11._state import SEND_RESPONSE, SERVER
from h11._util import validate

__all__ = ["install", "read_response_head"]

_token = re.compile(token.encode("ascii")).fullmatch
# names already found to be tokens: an upstream sends the same few dozen on every answer
_NAMES: set[bytes] = set()
_NAMES_MAX = 1024  # bounded, whatever names an upstream makes up


def _header_pairs(lines: list[bytearray]) -> list[tuple[bytes, bytes]] | None:
    """(name, value) per line as h11 decodes them, or None when h11 must decide."""
    head = b"\n".join(lines)
    # the bytes a line may not hold, other than in h11's SP/HTAB runs (its field vchar is any
    # byte but NUL and ASCII whitespace); LF is not looked for: it ends a line
    if b"\r" in head or b"\x00" in head or b"\x0b" in head or b"\x0c" in head:
        return None
    names = _NAMES
    out = []
    for line in lines:
        name, colon, value = bytes(line).partition(b":")
        if not colon:
            return None
        if name not in names:
            if _token(name) is None:
                return None  # also a continuation line: it starts with SP or HTAB
            if len(names) < _NAMES_MAX:
                names.add(name)
        out.append((name, value.strip(b" \t")))
    return out


def read_response_head(buf: Any) -> InformationalResponse | Response | None:
    lines = buf.maybe_extract_lines()
    if lines is None:
        if buf.is_next_line_obviously_invalid_request_line():
            raise LocalProtocolError("illegal request line")
        return None
    if not lines:
        raise LocalProtocolError("no response line received")
    matches = validate(status_line_re, lines[0], "illegal status line: {!r}", lines[0])
    http_version = b"1.1" if matches["http_version"] is None else matches["http_version"]
    reason = b"" if matches["reason"] is None else matches["reason"]
    status_code = int(matches["status_code"])
    del lines[0]
    headers = _header_pairs(lines) if lines else []
    if headers is None:
        headers = list(_decode_header_lines(lines))
    cls = InformationalResponse if status_code < 200 else Response
    return cls(headers=headers, _parsed=True, status_code=status_code, reason=reason, http_version=http_version)


def install() -> None:
    """Make h11 read response heads with ``read_response_head`` (idempotent)."""
    READERS[(SERVER, SEND_RESPONSE)] = read_response_head
