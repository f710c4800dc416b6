"""Runs of plain text events read off their bytes, against the stream's own template.

Theory of operation
-------------------
Most events of a stream are text events that differ from one another only in their text
and a few values nobody reads: a Responses upstream's ``response.output_text.delta`` (its
``sequence_number``; OpenAI's ``obfuscation``, which changes every event), a Chat
upstream's text chunk (its ``id``, ``created`` and ``model``, the same all through a
stream).  The full
path parses each one's JSON, asks the decoder for its text (``decoder.text``) and has the
encoder write the client's own event (``encoder.text_delta``: the text's JSON, and a
Responses client's own sequence number, put into a cached head).  Of a Responses delta
nobody reads more than ``type``, ``item_id``, ``delta`` and the absence of ``item``; of a
Chat chunk, more than the fields that tell a text chunk (``decoder.text``).

``TextRuns`` learns a template from a text event the full path read off its bytes (the
Bridge's ``_blocks``: the block as it came, ``data:`` line and any ``event:`` line before
it): the block with holes where the varying values are, each found as its key, a colon and
its value, the key exactly once in the block:

=====================  ====================================================================
hole                   matches (the template does not learn when the block's value is not
                       already such)
=====================  ====================================================================
the text: Responses    a non-empty JSON string written exactly as orjson writes one (UTF-8
``delta``, Chat        as it is, the escapes orjson uses and no other), quotes included:
``content``            then it is the very ``orjson.dumps`` of its own value
``item_id``            a non-empty string with no escape and no control character: the first
(Responses, required)  event's, which the others of a run must repeat (a backreference)
``sequence_number``,   an integer of at most 18 digits, no sign, no leading zero
``output_index``,
``content_index``
(Responses), Chat
``created``
``obfuscation``, Chat  a string with no escape and no control character
``id``, ``model``,
``system_fingerprint``
=====================  ====================================================================

Every other byte of the block is constant.  A block that matches is therefore the same JSON
object as the learnt one but for those values, all that ``decoder.text`` asks of an event
holds for it as it held for the learnt one, and it is one of ``_blocks``' fast shapes (one
``data:`` line, or an ``event:`` line and one ``data:`` line), ends at its first blank line
and holds no CR.  ``take(data, pos)`` finds, with one regular expression, the longest run
of whole such events at ``pos`` (of one item), and reads each event's text JSON with one
more; from a run that is not valid UTF-8 on, the read is left to the full path, which reads
invalid bytes as the parser decodes them.  The Bridge hands the run's texts to the decoder and the
encoder at once (``decoder.texts``, ``encoder.text_deltas``), which leave every machine
where the full path would and write the same bytes.  Between runs, ``next_start`` finds the
next event that holds the template's longest constant.

The template's expressions are compiled once per template in the process (~0.4 ms each):
the holes keep a template the same from one stream, model and item to the next (what is
left is the upstream's way of writing its JSON), and at most ``_KEEP`` templates are kept;
beyond that a stream does not learn, so an upstream whose events vary in another field per
stream costs no compiling.  A stream keeps the first template it learns (the holes make it
hold for its later items and parts), and tries at most ``_LEARN`` events; one that learnt
nothing by then is ``spent`` and the Bridge drops it.

The Bridge offers a read to the runs only when it is long enough for a run to pay (its
``_RUN_READ``: a read of an event or two, as an upstream at token rate writes them, is
cheaper the full way) and holds ``mark`` (unlearnt, the name of the event that may teach
the template; learnt, the template's longest constant); the template learns only from the
events such a read offers it, so a stream read at token rate never pays for learning.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

__all__ = ["TextRuns"]

# a non-empty JSON string exactly as orjson writes it, quotes included: UTF-8 as it is but
# '"', '\' and the controls, which are escaped (\b \t \n \f \r, the others \u00xx in lower
# case); possessive, so a miss never backtracks into the text
_TEXT = rb'"(?:[^"\\\x00-\x1f]++|\\["\\bfnrt]|\\u00(?:0[0-7bef]|1[0-9a-f]))++"'
_IID = rb'[^"\\\x00-\x1f]++'  # an item id's inside: no escape, no control
_INT = rb"(?:0|[1-9][0-9]{0,17})"  # what orjson reads as an int of 64 bits
_PLAIN = rb'[^"\\\x00-\x1f]*+'  # a string's inside: no escape, no control
_WS = rb"[ \t]*"  # JSON's blanks in a fast-shape block: no line ending


def _hole(key: bytes, value: bytes) -> tuple[bytes, re.Pattern[bytes]]:
    """A key, and its value in a block (group 1) after the key, a colon and JSON's blanks."""
    return b'"' + key + b'"', re.compile(b'"' + key + b'"' + _WS + b":" + _WS + value)


_STRING = rb'("(?:[^"\\]|\\.)*+")'  # a JSON string, quotes included
# a Responses upstream's text delta (the protocol whose row has ``runs``): (key, its value in
# a block, the hole's expression, required); the text's hole first, then the item id
_HOLES: tuple[tuple[bytes, re.Pattern[bytes], bytes, bool], ...] = (
    (*_hole(b"delta", _STRING), _TEXT, True),
    (*_hole(b"item_id", b'"(' + _IID + b')"'), _IID, True),
    (*_hole(b"sequence_number", rb"([0-9]++)"), _INT, False),
    (*_hole(b"output_index", rb"([0-9]++)"), _INT, False),
    (*_hole(b"content_index", rb"([0-9]++)"), _INT, False),
    (*_hole(b"obfuscation", rb'"(' + _PLAIN + rb')"'), _PLAIN, False),
)
# what an event that may teach the template holds
_MARK = b'"response.output_text.delta"'
_LEARN = 8  # events a stream may learn from
_KEEP = 64  # templates compiled in the process


class _Template:
    """What a run is read with, made once per template in the process."""

    __slots__ = ("run", "texts", "key", "iid")

    def __init__(self, consts: tuple[bytes, ...], holes: tuple[bytes, ...], text_lead: bytes) -> None:
        # the first event captures its item id, if it has one; the next ones must repeat it
        first: list[bytes] = []
        more: list[bytes] = []
        for const, hole in zip(consts, holes, strict=False):
            const = re.escape(const)
            first += (const, b"(?P<iid>" + hole + b")" if hole is _IID else hole)
            more += (const, b"(?P=iid)" if hole is _IID else hole)
        end = re.escape(consts[-1]) + b"\n\n"
        # the longest run of whole events (of one item)
        self.run = re.compile(b"".join(first) + end + b"(?:" + b"".join(more) + end + b")*+").match
        # within a run, the text's key and colon are at its hole only: the key is once in
        # the template, and a hole holds no unescaped quote
        self.texts = re.compile(re.escape(text_lead) + b"(" + _TEXT + b")").findall
        self.key = max(consts, key=len)  # the longest constant: what finds the next candidate
        self.iid = _IID in holes


# (constants, holes) → what reads them
_COMPILED: dict[tuple[tuple[bytes, ...], tuple[bytes, ...]], _Template] = {}


def _template(block: bytes, text: str, iid: str) -> _Template | None:
    """The block's template (``None``: none can be made of it)."""
    holes: list[tuple[int, int, bytes]] = []
    text_lead = b""
    for key, value, hole, required in _HOLES:
        n = block.count(key)
        if n == 0 and not required:
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
    d0, d1, _ = holes[0]
    if block[d0:d1] != orjson.dumps(text):
        return None
    if block[holes[1][0] : holes[1][1]] != iid.encode():
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


class TextRuns:
    """One stream's template, and the runs of events read against it."""

    __slots__ = ("armed", "spent", "mark", "_tpl", "_learnt")

    def __init__(self) -> None:
        self.armed = False
        self.spent = False  # nothing learnt and no learning left: the Bridge drops the runs
        # what a read holds when an event of it may teach the template (unlearnt) or start a
        # run (learnt: the template's longest constant); a read without it goes the full way
        self.mark = _MARK
        self._tpl: _Template | None = None
        self._learnt = 0

    def learn(self, block: bytes, obj: dict[str, Any], text: str) -> None:
        """A plain text event the full path read off its block (``decoder.text`` gave
        ``text``): its template becomes the stream's, when one can be made of it."""
        if self.armed or self._learnt >= _LEARN:
            return
        self._learnt += 1
        tpl = _template(block, text, obj.get("item_id", ""))
        if tpl is not None:
            self._tpl = tpl
            self.armed = True
            self.mark = tpl.key
        else:
            self.spent = self._learnt >= _LEARN

    def take(self, data: bytes, pos: int) -> tuple[int, bytes, list[bytes]]:
        """The end of the longest run of whole template events (of one item) in ``data`` from
        ``pos``, that item's id (``b""`` for a Chat upstream) and each event's text JSON, in
        order (``pos``, ``b""`` and ``[]`` when there is none; -1 when the run is not valid
        UTF-8: the parser would read its bytes otherwise, so the rest of the read is left to
        the full path)."""
        tpl: _Template = self._tpl  # type: ignore[assignment]
        m = tpl.run(data, pos)
        if m is None:
            return pos, b"", []
        end = m.end()
        if not data.isascii():
            try:
                data[pos:end].decode()
            except UnicodeDecodeError:
                return -1, b"", []
        return end, m.group("iid") if tpl.iid else b"", tpl.texts(data, pos, end)

    def candidate(self, data: bytes, pos: int) -> int:
        """Unlearnt: where the next event from ``pos`` that may teach the template starts (it
        names its kind: a Responses text delta, ``mark``), -1: none."""
        j = data.find(self.mark, pos)
        if j < 0:
            return -1
        k = data.rfind(b"\n\n", pos, j)
        return pos if k < 0 else k + 2

    def next_start(self, data: bytes, pos: int) -> int:
        """Where the next event after the one at ``pos`` that may start a run starts (-1:
        none): an event that holds the template's longest constant."""
        key = self.mark
        j = data.find(key, pos + 1)
        while j >= 0:
            start = data.rfind(b"\n\n", pos, j) + 2
            if start > 1:  # a blank line between: the event holding the key starts there
                return start
            j = data.find(key, j + 1)
        return -1
