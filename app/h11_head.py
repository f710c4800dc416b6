"""Upstream heads, both ways, with one cheap check per header instead of h11's regexes.

Theory of operation
-------------------
httpx talks HTTP/1.1 to an upstream through httpcore, which uses h11.  h11 matches every
header line it reads against its grammar's regular expression (``header_field``: a token,
``:``, optional SP/HTAB, a value of "field vchars" separated by runs of SP/HTAB, optional
SP/HTAB) and builds a dict of the match's groups; every header of a request it is given,
against a regex for the name and one for the value.  ~2 µs a line: a hosted API's answer
head (OpenAI's has ~25 lines: rate limits, cookies, the CDN's own) cost more to parse than
the proxy spends on a short request's routing and checks together, and the request's head
(a long bearer token, the client's user agent) ~20 µs more.

Reading: ``read_response_head`` answers what h11's ``maybe_read_from_SEND_RESPONSE_server``
answers (the same status line handling, the same event) with, per header line: the name is
what comes before the first ``:`` and must match h11's ``token`` (names found to be tokens
are remembered, bounded); the value is the rest with SP and HTAB stripped from both ends.
That is h11's grammar whenever no line holds a byte h11's field vchar refuses besides SP
and HTAB (NUL, CR, VT, FF; LF cannot be there, it ends a line), which one look over the
whole head decides.  The event's headers are built as h11's ``normalize_and_validate``
builds them (name, lower-cased name, value), without its second walk over the lines: the
framing headers alone (Content-Length, Transfer-Encoding: one each) go through that
function, after every line was decoded, as in h11.

=====================================  ==================================================
in the head                            this reader
=====================================  ==================================================
not complete yet                       ``None``, after h11's early check for an
                                       obviously invalid first line
every line ``token:value``, no NUL,    the event, its headers as h11 would give them
CR, VT or FF in any line, no framing
header twice
anything else: a continuation line     h11's own header decoding, on the same lines: its
(obs-fold), no colon, a name that is   event or its ``LocalProtocolError`` and message
not a token, a refused byte, a
framing header twice
=====================================  ==================================================

Writing: ``normalize_and_validate`` takes the place of h11's in ``h11._events`` (what a
``Request`` checks its headers with): bytes names that are tokens and bytes values that
``_valid_value`` accepts (the regex's own language: empty, or no NUL, CR, LF, VT or FF, and
neither end SP or HTAB) go through h11's function as already parsed (lower-cased names, the
Content-Length and Transfer-Encoding rules); anything else through it whole, for its own
errors.

So neither accepts what h11 refuses, and what they accept comes out the same
(``tests/unit/test_h11_head.py`` checks both against h11, on real and generated heads).
``install()`` puts them in place; the app's own server is uvicorn on httptools, so in this
process h11 serves httpcore's upstream connections only.
"""

from __future__ import annotations

import re
from typing import Any

import h11._events
from h11 import InformationalResponse, LocalProtocolError, Response
from h11._abnf import token
from h11._headers import Headers
from h11._headers import normalize_and_validate as _h11_normalize_and_validate
from h11._readers import READERS, _decode_header_lines, status_line_re
from h11._state import SEND_RESPONSE, SERVER
from h11._util import validate

__all__ = ["install", "normalize_and_validate", "read_response_head"]

_token = re.compile(token.encode("ascii")).fullmatch
# names already found to be tokens: an upstream sends the same few dozen on every answer
_NAMES: set[bytes] = set()
_NAMES_MAX = 1024  # bounded, whatever names an upstream makes up


# the framing headers: h11's rules for them (one Content-Length, digits, conflicting
# values; one Transfer-Encoding, chunked only) are applied by its own function
_FRAMING = frozenset((b"content-length", b"transfer-encoding"))


def _header_items(lines: list[bytearray]) -> list[tuple[bytes, bytes, bytes]] | None:
    """(name, lower-cased name, value) per line, what h11's ``Headers`` holds after reading
    them, or None when h11 must decide (a line it may refuse, a framing header twice)."""
    head = b"\n".join(lines)
    # the bytes a line may not hold, other than in h11's SP/HTAB runs (its field vchar is any
    # byte but NUL and ASCII whitespace); LF is not looked for: it ends a line
    # (int operands: `b"\r" in` tries its operand as an int first, a TypeError made and dropped)
    if 13 in head or 0 in head or 11 in head or 12 in head:
        return None
    names = _NAMES
    framing = _FRAMING
    at: list[int] = []  # where the framing headers are
    out: list[tuple[bytes, bytes, bytes]] = []
    for line in head.split(b"\n"):  # the lines again, as bytes
        name, colon, value = line.partition(b":")
        if not colon:
            return None
        if name not in names:
            if _token(name) is None:
                return None  # also a continuation line: it starts with SP or HTAB
            if len(names) < _NAMES_MAX:
                names.add(name)
        lower = name.lower()
        if lower in framing:
            at.append(len(out))
        out.append((name, lower, value.strip(b" \t")))
    if at:
        if len(at) > 2 or (len(at) == 2 and out[at[0]][1] == out[at[1]][1]):
            return None  # a framing header twice: h11 compares the two (or refuses the second)
        # after every line was decoded (h11 decodes them all before it checks any): h11's
        # checks and normal form of each framing line, in order (its errors, as it raises them)
        for i in at:
            name, _, value = out[i]
            out[i] = _h11_normalize_and_validate([(name, value)], _parsed=True)._full_items[0]
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
    items = _header_items(lines) if lines else []
    cls = InformationalResponse if status_code < 200 else Response
    if items is None:  # h11's own decoding and checks
        headers: Any = list(_decode_header_lines(lines))
    else:  # as h11's normalize_and_validate would build them: an event takes them as they are
        headers = Headers(items)
    return cls(headers=headers, _parsed=True, status_code=status_code, reason=reason, http_version=http_version)


# a field value's first and last byte may not be one of these (h11's field vchar is any byte
# but NUL and ASCII whitespace, SP and HTAB only between vchars), nor any byte NUL, CR, LF,
# VT or FF
_NOT_AT_ENDS = frozenset(b"\x00 \t\n\r\x0b\x0c")


def _valid_value(v: bytes) -> bool:
    if not v:
        return True
    if v[0] in _NOT_AT_ENDS or v[-1] in _NOT_AT_ENDS:
        return False
    return not (0 in v or 13 in v or 10 in v or 11 in v or 12 in v)


def normalize_and_validate(headers: Any, _parsed: bool = False) -> Headers:
    """h11's ``normalize_and_validate`` for the events h11 builds (``h11._events``): the
    headers httpcore gives a request are checked by a token match of each name (remembered)
    and ``_valid_value``, which accept what h11's two regexes accept, and then go through
    h11's own function as parsed (lower-cased names, the Content-Length and
    Transfer-Encoding rules); anything else (str, a refused name or value) goes through it
    whole, for its own errors."""
    if not _parsed and type(headers) is list:
        names = _NAMES
        for item in headers:
            name, value = item
            if type(name) is not bytes or type(value) is not bytes or not _valid_value(value):
                break
            if name not in names:
                if _token(name) is None:
                    break
                if len(names) < _NAMES_MAX:
                    names.add(name)
        else:
            return _h11_normalize_and_validate(headers, _parsed=True)
    return _h11_normalize_and_validate(headers, _parsed=_parsed)


def install() -> None:
    """Make h11 read response heads with ``read_response_head``, and check the headers of
    the events it builds with ``normalize_and_validate`` (idempotent)."""
    READERS[(SERVER, SEND_RESPONSE)] = read_response_head
    h11._events.normalize_and_validate = normalize_and_validate
