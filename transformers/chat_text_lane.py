"""A Chat upstream's plain text chunks read off their bytes, against the stream's own template.

Theory of operation
-------------------
A Chat upstream writes every text chunk of a stream the same way: the same id, created,
model, keys and key order, only the ``content`` string differs (vLLM, SGLang, DeepSeek,
Kimi, GLM).  The Bridge parses each chunk's JSON and asks the decoder for its text
(``ChatStreamDecoder.text``: a chunk that is one ``Text`` and nothing else, no state
change); for a Responses client, that parse is most of an event's cost.

``ChatTextLane`` learns the template from the first chunk the decoder read as plain text:
its bytes cut around that text's JSON string (found as ``"content":`` + the string as
orjson writes it, exactly once; otherwise it does not learn, and tries again on the next
such chunk, ``_TRIES`` times).  A later chunk whose bytes are the template's prefix, a JSON
string's inside, and the template's suffix is then that same object with another text, so
what ``orjson.loads`` + ``decoder.text`` would give is that string decoded:

=========================================  ===================================================
the chunk's bytes                          the text
=========================================  ===================================================
prefix + inside + suffix, the inside made  the inside decoded as UTF-8 (strictly: a chunk
of characters JSON allows unescaped, no    with invalid bytes takes the full path, which
backslash                                  reads them as the SSE parser decodes them)
the same with escapes                      ``orjson.loads`` of the quoted inside (a lone
                                           surrogate or a bad escape: the full path)
anything else, an empty string             ``None``: the full path
=========================================  ===================================================

The prefix holds every other field, so the decoder's checks on them (no error, usage,
finish_reason, reasoning, refusal or tool call) hold as they did for the template; its
state check (``plain_text``) is the caller's, per chunk.  Duplicate ``content`` keys: the
learnt one is the value orjson kept (the last), the others are constant bytes.  An upstream
that varies a field per chunk (OpenAI's ``obfuscation``) never matches: every chunk takes
the full path; a lane whose template missed ``_MISSES`` text chunks gives up (the template
was one chunk's only), so such a stream pays for neither the learning nor the look.
"""

from __future__ import annotations

import re

import orjson

__all__ = ["ChatTextLane"]

# a JSON string's inside with no escape: any character but '"', '\' and the controls
_PLAIN = re.compile(rb'[^"\\\x00-\x1f]++').fullmatch
_KEY = b'"content":'
_TRIES = 4  # text chunks offered before the lane gives up learning for this stream
_MISSES = 8  # text chunks a learnt template may miss before the lane gives up


class ChatTextLane:
    __slots__ = ("armed", "_prefix", "_suffix", "_np", "_ns", "_tries")

    def __init__(self) -> None:
        self.armed = False
        self._prefix = b""  # the template's bytes through the text's opening quote
        self._suffix = b""  # from its closing quote to the end
        self._np = 0
        self._ns = 0
        self._tries = _TRIES

    def learn(self, data: bytes, text: str) -> None:
        """``data``: a chunk's JSON bytes that the decoder read as the plain ``text`` (and the
        lane, when armed, did not)."""
        if not self._tries:
            return
        self._tries -= 1
        if self.armed:  # a text chunk the template missed
            if not self._tries:
                self.armed = False  # the upstream varies its chunks: give up
            return
        key = _KEY + orjson.dumps(text)
        i = data.find(key)
        if i < 0 or data.find(key, i + 1) >= 0:
            return  # the text written otherwise than orjson writes it, or twice
        self._prefix = data[: i + len(_KEY) + 1]
        self._suffix = data[i + len(key) - 1 :]
        self._np = len(self._prefix)
        self._ns = len(self._suffix)
        self.armed = True
        self._tries = _MISSES  # now: the text chunks it may miss before it gives up

    def text(self, data: bytes) -> str | None:
        """The text of a chunk made on the template (see the table), else ``None``."""
        np, ns = self._np, self._ns
        n = len(data)
        if n <= np + ns or data[:np] != self._prefix or data[n - ns :] != self._suffix:
            return None
        inside = data[np : n - ns]
        if _PLAIN(inside) is not None:
            try:
                return inside.decode()
            except UnicodeDecodeError:
                return None
        try:
            value = orjson.loads(data[np - 1 : n - ns + 1])
        except orjson.JSONDecodeError:
            return None
        return value if value.__class__ is str and value else None
