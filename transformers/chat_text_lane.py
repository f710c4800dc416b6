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

A lane reads one kind of chunk (``_KINDS``): the text chunks, the reasoning ones, or a tool
call's argument chunks (the Bridge keeps one lane of each; the decoder's ``reasoning`` and
``args`` say which chunks are plain reasoning or argument text, and what their text is):

=============  ==========================================  ================================
kind           the keys the text may follow, in the order  what the decoder reads of the
               the decoder reads them                      first choice's ``delta``
=============  ==========================================  ================================
text           ``content``                                 ``content``
reasoning      ``reasoning_content``, ``reasoning``        the first of those keys with
                                                           non-empty string text
arguments      ``arguments``                               ``tool_calls[0].function.
                                                           arguments`` (one call)
=============  ==========================================  ================================

An argument chunk's meaning also depends on the stream's state: which call its ``index``
names now, whether its ``id`` and ``name`` are news to that call.  The lane keeps the
template's ``(index, id, named)`` as ``key``, and the caller hands it with each text to
``ChatStreamDecoder.args_to``, which checks that state as ``args`` does.

The template is learnt only once the hole is shown to be the value the decoder reads: when
the chunk holds no other of the names the decoder reads and no ``\\u`` escape outside the
hole, the hole's key is the only one it can read; otherwise the template with a sentinel
text in the hole, parsed, must give that sentinel where the decoder looks (not a nested
object's key of the same name, nor a key the decoder reads after another; a string's inside
never changes the JSON's shape, so what holds for the sentinel holds for every text).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

from .reasoning_keys import reasoning_text

__all__ = ["ChatTextLane"]

# a JSON string's inside with no escape: any character but '"', '\' and the controls
_PLAIN = re.compile(rb'[^"\\\x00-\x1f]++').fullmatch


def _content(delta: dict[str, Any]) -> Any:
    return delta.get("content")


def _call(delta: dict[str, Any]) -> dict[str, Any] | None:
    """The one tool call of a delta (``ChatStreamDecoder.args`` reads no other), else None."""
    tcs = delta.get("tool_calls")
    if tcs.__class__ is not list or len(tcs) != 1 or tcs[0].__class__ is not dict:
        return None
    return tcs[0]


def _arguments(delta: dict[str, Any]) -> Any:
    tc = _call(delta)
    fn = tc.get("function") if tc is not None else None
    return fn.get("arguments") if fn.__class__ is dict else None


# kind → (the keys its text may follow, as bytes before the string; what the decoder reads
# of a delta)
_KINDS: dict[str, tuple[tuple[bytes, ...], Callable[[dict[str, Any]], Any]]] = {
    "text": ((b'"content":',), _content),
    "reasoning": ((b'"reasoning_content":', b'"reasoning":'), reasoning_text),
    "arguments": ((b'"arguments":',), _arguments),
}
# kind → the names the decoder reads, as JSON strings (the hole's key, the others it reads)
_NAMES = {
    "text": (b'"content"',),
    "reasoning": (b'"reasoning_content"', b'"reasoning"', b'"reasoning_details"'),
    "arguments": (b'"arguments"',),
}
_SENTINEL = b"\\u0000"  # the inside of the JSON string "\x00"
_TRIES = 4  # text chunks offered before the lane gives up learning for this stream
_MISSES = 8  # text chunks a learnt template may miss before the lane gives up


class ChatTextLane:
    __slots__ = ("armed", "key", "_kind", "_keys", "_names", "_read", "_prefix", "_suffix", "_np", "_ns", "_tries")

    def __init__(self, kind: str = "text") -> None:
        self.armed = False
        self.key: tuple[int, Any, bool] | None = None  # arguments: the template's call (``args_to``)
        self._kind = kind
        self._keys, self._read = _KINDS[kind]
        self._names = _NAMES[kind]
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
        quoted = orjson.dumps(text)
        for key in self._keys:
            i = data.find(key + quoted)
            if i < 0:
                continue
            if data.find(key + quoted, i + 1) >= 0:
                return  # twice: which one is read is not for bytes to tell
            at = i + len(key) + 1  # the string's inside
            prefix, suffix = data[:at], data[at + len(quoted) - 2 :]
            if not self._alone(data[:i], suffix) and not self._is_read(prefix + _SENTINEL + suffix):
                continue  # not the value read (a nested object's key): perhaps the next key's
            if self._kind == "arguments":
                # the call the template's chunks add to, as ChatStreamDecoder.args reads it
                tc: Any = _call(orjson.loads(data)["choices"][0]["delta"])
                self.key = (tc["index"], tc.get("id"), bool(tc["function"].get("name")))
            self._prefix, self._suffix = prefix, suffix
            self._np = len(prefix)
            self._ns = len(suffix)
            self.armed = True
            self._tries = _MISSES  # now: the chunks of its kind it may miss before it gives up
            return
        # the text written otherwise than orjson writes it

    def _alone(self, before: bytes, after: bytes) -> bool:
        """Is the hole's key the chunk's only key of the kind's names (``before`` the key and
        ``after`` the hole: the rest of the chunk)?  Then it is the one the decoder reads
        (which exists: the decoder read the text): no other place holds one of those names,
        and no ``\\u`` escape could spell one (a key's letters can be written no other way)."""
        if b"\\u" in before or b"\\u" in after:
            return False
        return not any(name in before or name in after for name in self._names)

    def _is_read(self, probe: bytes) -> bool:
        """Does the decoder read the sentinel in ``probe`` (the template with the sentinel in
        its hole) as the chunk's text?"""
        try:
            obj = orjson.loads(probe)
        except orjson.JSONDecodeError:
            return False
        choices = obj.get("choices") if obj.__class__ is dict else None
        choice = choices[0] if choices.__class__ is list and choices else None
        delta = choice.get("delta") if choice.__class__ is dict else None
        return delta.__class__ is dict and self._read(delta) == "\x00"

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
