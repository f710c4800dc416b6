"""Passthrough: a same-protocol Chat text chunk forwarded as it came, when the full path
would write exactly the same bytes.

Theory of operation
-------------------
On a Chat → Chat stream most events are text chunks the full path (parse, decode, tool
stage, encode, serialize) gives back unchanged: the encoder keeps the upstream's
``chatcmpl`` id and ``created``, and writes the same keys in the same order.  For such an
event the work is wasted, so ``ChatPassthrough`` decides with string comparisons whether the
upstream's ``data`` is *the very text the encoder would write* for it, and if so the Bridge
frames that text as it is.  Nothing is guessed: the template is the encoder's own output
for a sentinel text (``ChatStreamEncoder.text_template``), and an event passes only when

=========================================  ===================================================
condition                                  why
=========================================  ===================================================
the client speaks Chat, over SSE, and so   a Responses client's events are renumbered
does the upstream                          (``sequence_number``), carry ids the encoder mints
                                           (``msg_…``) and ``logprobs`` it adds: no upstream
                                           Responses event is ever what the client gets
the data is the template with a plain      the id, ``created``, ``model`` (the public name),
string in the text's place                 the key order and the absence of any other field
                                           (usage, finish_reason, role, tool_calls, reasoning,
                                           refusal, error) are then the encoder's own
that string is what orjson writes for its  then the bytes are the full path's, and the
value, a non-empty string                  decoder would make a ``Text`` of it (an empty one
                                           makes nothing); checked by a scan when it holds
                                           no quote, backslash or unprintable character,
                                           else by parsing and writing the string again
the decoder holds nothing (started, not    ``inline_think`` still probing or inside a think
done, not probing an inline think tag)     block (a repair) takes the full path
the tool stage, if any, holds nothing      a held invalid call: text waits behind it
the encoder has begun, has not finished,   queued content or calls (the kosong FIFO) would
and queues nothing                         put this text behind them
the Bridge is not broken and not closed    after the terminal nothing goes out
=========================================  ===================================================

In that state a ``Text`` event changes nothing in the decoder, the tool stage or the encoder
(each just hands it on), so skipping them leaves every machine where the full path would:
the terminal, usage, tool calls and secret masking (errors never match the template) are the
full path's.  Every other event, and every event in any other state, takes the full path.

Runs of such events are not even cut into events: ``run(chunk, pos)`` finds, on the
upstream's bytes, the longest run of whole events at ``pos`` that are each ``data: `` + the
template (compared as bytes) + a blank line, with a text written exactly as orjson writes
one (``_TEXT``, one regular expression compiled once: UTF-8 as it is, the escapes orjson
uses and no other), and the Bridge forwards that slice of bytes as it came.  The slice is
what the per-event check would have passed and framed, event by event:

=========================================  ===================================================
in the run                                 why it is the same
=========================================  ===================================================
only ``data: `` lines ending ``\\n\\n``    one event per blank line, one data line each, no
                                           CR to normalise: the parser's fast shape exactly
valid UTF-8 (checked on the slice when it  the parser decodes with ``replace``: invalid bytes
is not ASCII)                              would have become U+FFFD, so such a run is not one
starts where no unfinished event waits     the parser holds nothing that joins it (the Bridge
                                           first lets the parser finish the waiting event)
=========================================  ===================================================
"""

from __future__ import annotations

import re

import orjson

__all__ = ["ChatPassthrough"]

# a non-empty JSON string's inside exactly as orjson writes it: UTF-8 as it is except ``"``,
# ``\`` and the control characters, which are escaped (``\b \t \n \f \r``, the others
# ``\u00xx`` in lower case); possessive, so a miss never backtracks into a run of text
_TEXT = re.compile(rb'(?:[^"\\\x00-\x1f]++|\\["\\bfnrt]|\\u00(?:0[0-7bef]|1[0-9a-f]))++')


class ChatPassthrough:
    """The encoder's text chunk template for one stream, and the check against it."""

    __slots__ = ("prefix", "suffix", "_np", "_ns", "_head", "_tail", "around", "ran")

    def __init__(self) -> None:
        self.prefix = ""  # the chunk's JSON up to the text's opening quote ('' until armed)
        self.suffix = ""  # from the text's closing quote to the end
        self._np = 0
        self._ns = 0
        self._head = b""  # an event's bytes up to its text's first byte
        self._tail = b""  # from its text's closing quote to its end
        self.around = 0  # characters of a chunk's JSON around its text's inside
        self.ran = 0  # bytes of the texts' insides in the last run (run)

    @property
    def armed(self) -> bool:
        return bool(self.prefix)

    def arm(self, prefix: str, suffix: str) -> None:
        """The template: ``prefix + '"' + text + '"' + suffix`` is the encoder's chunk."""
        self.prefix = prefix
        self.suffix = suffix
        self._np = len(prefix) + 1
        self._ns = len(suffix) + 1
        self._head = b"data: " + prefix.encode() + b'"'
        self._tail = b'"' + suffix.encode() + b"\n\n"
        self.around = self._np + self._ns

    def run(self, chunk: bytes, pos: int) -> int:
        """The end of the longest run of whole template events in ``chunk`` from ``pos``
        (``pos`` itself when there is none): bytes the Bridge forwards as they are; ``ran``:
        the bytes of their texts (as JSON string insides)."""
        head, tail = self._head, self._tail
        nh, nt = len(head), len(tail)
        text = _TEXT.match
        start = pos
        frames = 0  # the bytes around the texts
        while chunk.startswith(head, pos):
            m = text(chunk, pos + nh)
            if m is None:
                break
            end = m.end()
            if not chunk.startswith(tail, end):
                break
            pos = end + nt
            frames += nh + nt
        if pos > start and not chunk.isascii():
            try:
                chunk[start:pos].decode()
            except UnicodeDecodeError:
                self.ran = 0
                return start
        self.ran = pos - start - frames
        return pos

    def text(self, data: str) -> bool:
        """Is ``data`` the encoder's chunk for a plain, non-empty text?"""
        np, ns = self._np, self._ns
        if len(data) <= np + ns or not data.startswith(self.prefix) or not data.endswith(self.suffix):
            return False
        if data[np - 1] != '"' or data[-ns] != '"':
            return False
        inner = data[np:-ns]
        if '"' not in inner and "\\" not in inner and inner.isprintable():
            return True
        quoted = data[np - 1 : 1 - ns]  # escapes (a newline is "\n"), or unprintable characters
        try:
            value = orjson.loads(quoted)
        except orjson.JSONDecodeError:
            return False
        return value.__class__ is str and value != "" and orjson.dumps(value) == quoted.encode()
