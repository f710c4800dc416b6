"""A Responses upstream's runs of plain text deltas read off their bytes, against the stream's own template.

Theory of operation
-------------------
Most events of a Responses stream are ``response.output_text.delta`` events that differ from
one another only in their text and their ``sequence_number`` (OpenAI adds ``obfuscation``,
another string that changes every event).  The full path parses each one's JSON, asks the
decoder for its text (``ResponsesStreamDecoder.text``) and has the encoder write the client's
own delta (``ResponsesStreamEncoder.text_delta``: the text's JSON and a number of its own put
into a cached head).  The upstream's number, its ``obfuscation`` and every field but
``type``, ``item_id``, ``delta`` (and the absence of ``item``) are read by nobody.

``ResponsesTextRuns`` learns a template from a delta the full path read off its bytes (the
Bridge's ``_blocks``: the block as it came, ``data:`` line and any ``event:`` line before it):
the block with holes where the varying values are, each found as its key, a colon and its
value, the key exactly once in the block:

=====================  ====================================================================
hole                   matches (the template does not learn when the block's value is not
                       already such)
=====================  ====================================================================
``delta``              a non-empty JSON string written exactly as orjson writes one (UTF-8
                       as it is, the escapes orjson uses and no other), quotes included:
                       captured; then it is the very ``orjson.dumps`` of its own value
``item_id``            a non-empty string with no escape and no control character: captured
``sequence_number``    an integer of at most 18 digits, no sign, no leading zero (if present)
``obfuscation``        a string with no escape and no control character (if present)
=====================  ====================================================================

Every other byte of the block is constant.  A block that matches is therefore the same JSON
object as the learnt one but for those values: a ``type`` of ``response.output_text.delta``,
no ``item``, a non-empty ``item_id`` string and a non-empty ``delta`` string, which is all
that ``decoder.text`` asks of an event; and it is one of ``_blocks``' fast shapes (one
``data:`` line, or an ``event:`` line and one ``data:`` line), ends at its first blank line
and holds no CR.  ``take(data, pos)`` finds, with one regular expression, the longest run
of whole such events of one item at ``pos`` (the first event's item id a backreference for
the others), and reads each event's text JSON with one more; a read that is not valid UTF-8
up to its last blank line (``valid``, once a read) is left to the full path whole.  The
Bridge hands the run's texts to the decoder and the encoder at once
(``ResponsesStreamDecoder.texts``, ``ResponsesStreamEncoder.text_deltas``), which leave
every machine where the full path would and write the same bytes.

The template's expressions are compiled once per template in the process (~0.4 ms each):
the holes keep a template the same from one stream to the next (the item id and the numbers
are holes), and at most ``_KEEP`` templates are kept; beyond that a stream does not learn,
so an upstream whose deltas vary in another field per stream costs no compiling.  A stream
learns at most ``_LEARN`` times (again when a new part's deltas no longer match), then
keeps what it has; one that learnt nothing by then is ``spent`` and the Bridge drops it.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

__all__ = ["ResponsesTextRuns"]

# a non-empty JSON string exactly as orjson writes it, quotes included: UTF-8 as it is but
# '"', '\' and the controls, which are escaped (\b \t \n \f \r, the others \u00xx in lower
# case); possessive, so a miss never backtracks into the text
_TEXT = rb'"(?:[^"\\\x00-\x1f]++|\\["\\bfnrt]|\\u00(?:0[0-7bef]|1[0-9a-f]))++"'
_IID = rb'[^"\\\x00-\x1f]++'  # an item id's inside: no escape, no control
_INT = rb"(?:0|[1-9][0-9]{0,17})"  # what orjson reads as an int of 64 bits
_PLAIN = rb'[^"\\\x00-\x1f]*+'  # a string's inside: no escape, no control
_WS = rb"[ \t]*"  # JSON's blanks in a fast-shape block: no line ending
# key → its value (group 1) in a block; the hole's expression in the template
_HOLES: tuple[tuple[bytes, re.Pattern[bytes], bytes], ...] = (
    (b'"delta"', re.compile(rb'"delta"' + _WS + b":" + _WS + rb'("(?:[^"\\]|\\.)*+")'), _TEXT),
    (b'"item_id"', re.compile(rb'"item_id"' + _WS + b":" + _WS + b'"(' + _IID + b')"'), _IID),
    (b'"sequence_number"', re.compile(rb'"sequence_number"' + _WS + b":" + _WS + rb"([0-9]++)"), _INT),
    (b'"obfuscation"', re.compile(rb'"obfuscation"' + _WS + b":" + _WS + rb'"(' + _PLAIN + rb')"'), _PLAIN),
)
_OPTIONAL = frozenset({b'"sequence_number"', b'"obfuscation"'})
_LEARN = 8  # templates a stream may learn
_KEEP = 64  # templates compiled in the process


class _Template:
    """What a run is read with, made once per template in the process."""

    __slots__ = ("run", "texts", "lead")

    def __init__(self, consts: tuple[bytes, ...], holes: tuple[bytes, ...], text_lead: bytes) -> None:
        # the first event captures its item id; the next ones must repeat it
        first: list[bytes] = []
        more: list[bytes] = []
        for const, hole in zip(consts, holes, strict=False):
            const = re.escape(const)
            first += (const, b"(?P<iid>" + hole + b")" if hole is _IID else hole)
            more += (const, b"(?P=iid)" if hole is _IID else hole)
        end = re.escape(consts[-1]) + b"\n\n"
        # the longest run of whole events of one item
        self.run = re.compile(b"".join(first) + end + b"(?:" + b"".join(more) + end + b")*+").match
        # within a run, the text's key and colon are at its hole only: the key is once in
        # the template, and a hole holds no unescaped quote
        self.texts = re.compile(re.escape(text_lead) + b"(" + _TEXT + b")").findall
        self.lead = consts[0]  # where an event that may start a run starts


_COMPILED: dict[tuple[tuple[bytes, ...], tuple[bytes, ...]], _Template] = {}  # template → what reads it


def _template(block: bytes, text: str, iid: str) -> _Template | None:
    """The block's template (``None``: none can be made of it)."""
    holes: list[tuple[int, int, bytes]] = []
    text_lead = b""
    for key, value, hole in _HOLES:
        n = block.count(key)
        if n == 0 and key in _OPTIONAL:
            continue
        if n != 1:
            return None
        m = value.search(block)
        if m is None:
            return None
        holes.append((m.start(1), m.end(1), hole))
        if hole is _TEXT:
            text_lead = block[m.start() : m.start(1)]
    # the values the decoder read are the ones found: the text exactly as orjson writes it
    (d0, d1, _), (i0, i1, _) = holes[0], holes[1]
    if block[d0:d1] != orjson.dumps(text) or block[i0:i1] != iid.encode():
        return None
    holes.sort()
    consts: list[bytes] = []
    at = 0
    for start, end, _ in holes:
        consts.append(block[at:start])
        at = end
    consts.append(block[at:])
    shape = (tuple(consts), tuple(h for _, _, h in holes))
    got = _COMPILED.get(shape)
    if got is None and len(_COMPILED) < _KEEP:
        got = _COMPILED[shape] = _Template(shape[0], shape[1], text_lead)
    return got


class ResponsesTextRuns:
    """One stream's template, and the runs of events read against it."""

    __slots__ = ("armed", "_tpl", "_learnt")

    def __init__(self) -> None:
        self.armed = False
        self._tpl: _Template | None = None
        self._learnt = 0

    @property
    def spent(self) -> bool:
        """Nothing learnt and no learning left: the Bridge drops this stream's runs."""
        return not self.armed and self._learnt >= _LEARN

    def learn(self, block: bytes, obj: dict[str, Any], text: str) -> None:
        """A plain text delta the full path read off its block (``decoder.text`` gave ``text``):
        its template becomes the stream's, when one can be made of it."""
        if self._learnt >= _LEARN:
            return
        self._learnt += 1
        tpl = _template(block, text, obj["item_id"])
        if tpl is not None:
            self._tpl = tpl
            self.armed = True

    def take(self, data: bytes, pos: int) -> tuple[int, bytes, list[bytes]]:
        """The end of the longest run of whole template events of one item in ``data`` from
        ``pos``, that item's id and each event's text JSON, in order (``pos``, ``b""`` and
        ``[]`` when there is none).  ``data`` from ``pos`` to its last blank line must be
        valid UTF-8, as the parser would find it (``valid``): a run ends at a blank line."""
        tpl: _Template = self._tpl  # type: ignore[assignment]
        m = tpl.run(data, pos)
        if m is None:
            return pos, b"", []
        end = m.end()
        return end, m.group("iid"), tpl.texts(data, pos, end)

    @staticmethod
    def valid(data: bytes, pos: int) -> bool:
        """Are ``data``'s bytes from ``pos`` to its last blank line valid UTF-8?  (No event that
        ends there is cut inside a character.)  A read that is not is left to the full path
        whole, which reads invalid bytes as the parser decodes them."""
        if data.isascii():
            return True
        try:
            data[pos : data.rfind(b"\n\n") + 2].decode()
        except UnicodeDecodeError:
            return False
        return True

    def next_start(self, data: bytes, pos: int) -> int:
        """Where, after ``pos``, the next event that may start a run starts (-1: nowhere): its
        bytes begin as the template's, right after a blank line."""
        lead = self._tpl.lead  # type: ignore[union-attr]
        j = data.find(lead, pos + 1)
        while j >= 0 and data[j - 2 : j] != b"\n\n":
            j = data.find(lead, j + 1)
        return j
