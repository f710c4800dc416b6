"""Client request checks: what a body must be before the proxy reads it.

Theory of operation
-------------------
``check_body(raw, check)`` runs once per request, right after the body is read, with the
``BodyCheck`` of the client protocol's row (``transformers/protocols.py``: ``CHAT``,
``RESPONSES``, ``MESSAGES``, ``GEMINI`` here), and before any translation or upstream call.  A body
that passes can be translated, re-encoded and sent upstream without an exception; one that
does not gets a ``RequestError`` (HTTP 400 ``invalid_request_error``) whose ``param`` is
the JSON path of the offending value, e.g. ``input[3].content[0].text`` or
``tools[2].name``.  Three checks, cheapest first:

1. **Nesting depth.**  orjson reads 1024 levels but writes only 254, and the schema walk
   recurses: a body nested deeper than ``MAX_DEPTH`` containers (the body itself is level
   1) is refused, so every translation (which adds at most two levels: ``tools[].function``,
   the ``response`` wrapper of an echo) can still be written.  The measure is orjson's own
   write limit, probed once at import: the body wrapped in ``limit - MAX_DEPTH`` lists
   must still serialise (C speed, no Python walk).  Only a refused body is walked
   (iteratively, never past ``MAX_DEPTH + 1``) to name the first container too deep.
2. **Integers beyond 64 bits.**  orjson parses an integer outside
   ``[-2**63, 2**64 - 1]`` as a float, so it would reach the upstream rounded (docs/rules.md,
   "Nothing dropped quietly").  Such an integer needs at least 19 digits in a row; only a raw body
   holding such a run is parsed again by the standard library, with exact integers, to
   find one (``integer_above_max_value`` / ``integer_below_min_value``).  Digit runs inside
   strings (ids, base64) only cost that second parse.  The raw scan itself is skipped when
   the depth meter's output shows no float that big: orjson writes every float of
   magnitude 1e16 or more as ``<digits>e+<digits>``, so a body without a ``+`` after a
   digit and an ``e`` there holds no such float, hence no such integer (a memchr for
   ``+``, at most ``_PLUS_LOOKS`` of them looked at; probed at import, like the write
   limit: orjson writing big floats otherwise turns the shortcut off).
3. **Shapes the proxy reads.**  The fields the translators, the request quirks, the tool
   stage set-up and the demo provider look into must have the type they expect (table
   below); a value of another type is refused (``invalid_type``), a missing one the proxy
   needs is ``missing_required_parameter``.  ``null`` counts as absent.  Everything else
   (unknown fields, tool schemas below ``required``, ``metadata``…) passes untouched.

Chat Completions (``messages``/``model``/``tools`` themselves are typed in ``check_body``):

==============================================  =============================================
path                                            must be
==============================================  =============================================
``messages[i]``                                 object, with ``role`` a string
``messages[i].content``                         string, array of parts, or absent
``messages[i].tool_calls``                      array of objects: ``id``/``type`` strings,
                                                ``function`` an object with a string
                                                ``name``
``messages[i].tool_call_id`` / ``.name``        string
``tools[i]``                                    object: ``type`` string; ``function``/
                                                ``custom`` objects with a string ``name``
                                                and ``description``; ``parameters.required``
                                                an array of strings
``tool_choice``                                 string or object (``function``/``custom``/
                                                ``allowed_tools`` shapes as in the API)
``response_format``                             object with a string ``type``
==============================================  =============================================

Responses (``input``/``instructions``/``tools``/``text``/``reasoning`` typed in
``check_body``):

==============================================  =============================================
``input[i]``                                    object; ``type``/``role`` strings; a
                                                message has a ``role``
message ``content``                             string, array of parts, or absent
``function_call``/``custom_tool_call``          ``call_id``, ``name``, ``namespace``,
                                                ``input`` strings
``*_output``                                    ``call_id`` string; ``output`` an array is
                                                an array of parts
``reasoning``                                   ``summary``/``content`` arrays of parts,
                                                ``encrypted_content`` string
``tools[i]``                                    object: ``type``, ``name``, ``description``
                                                strings (``name`` required for ``function``
                                                / ``custom`` / ``namespace``); a namespace's
                                                ``tools`` an array of such tools;
                                                ``parameters.required`` strings; ``format``
                                                an object
``tool_choice``                                 string or object (``type``/``name``/
                                                ``namespace``/``mode`` strings, ``tools`` an
                                                array of objects)
``text.format``                                 object with a string ``type``
``previous_response_id``                        string
==============================================  =============================================

A content part (both protocols) is an object whose ``type``, ``text`` and ``refusal`` are
strings and whose ``image_url`` is a string or an object with a string ``url``.

Cost: one C-speed pass over the body (the depth meter's ``orjson.dumps``; the raw
``bytes.translate`` for digit runs only when its output may hold a big float) plus a Python
loop over messages/items, their parts and the tools — no walk of tool schemas or other deep
values.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import orjson

from .errors import RequestError

__all__ = [
    "CHAT",
    "GEMINI",
    "MAX_DEPTH",
    "MESSAGES",
    "RESPONSES",
    "BodyCheck",
    "check_body",
    "check_parsed",
    "check_request",
    "check_values",
    "check_depth",
    "check_integers",
    "too_deep",
]

MAX_DEPTH = 128

_I64_MIN = -(2**63)
_U64_MAX = 2**64 - 1
_BIG_DIGITS = 19  # the shortest integer orjson cannot carry exactly has 19 digits
_DIGIT_RUN = b"0" * _BIG_DIGITS
_DIGITS_TO_ZERO = bytes(0x30 if 0x30 <= c <= 0x39 else 0x20 for c in range(256))


# -- paths and errors ------------------------------------------------------------------------


def _path(segs: tuple[Any, ...]) -> str:
    out: list[str] = []
    for s in segs:
        if type(s) is int:
            out.append(f"[{s}]")
        else:
            out.append(f".{s}" if out else str(s))
    return "".join(out)


def _bad(want: str, *segs: Any) -> NoReturn:
    path = _path(segs)
    raise RequestError(f"invalid type for '{path}': expected {want}", param=path, code="invalid_type")


def _missing(*segs: Any) -> NoReturn:
    path = _path(segs)
    raise RequestError(f"missing required parameter: '{path}'", param=path, code="missing_required_parameter")


# -- 1. nesting depth ------------------------------------------------------------------------


def _nested(n: int) -> Any:
    v: Any = 0
    for _ in range(n):
        v = [v]
    return v


def _write_limit(ceiling: int = 1100) -> int:
    """The deepest nesting orjson serialises (``ceiling`` when none was found below it)."""
    try:
        orjson.dumps(_nested(ceiling))
        return ceiling
    except orjson.JSONEncodeError:
        pass
    lo, hi = 0, ceiling  # dumps(lo levels) works, dumps(hi levels) fails
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            orjson.dumps(_nested(mid))
            lo = mid
        except orjson.JSONEncodeError:
            hi = mid
    return lo


_LIMIT = _write_limit()
# lists wrapped around a body for the C-speed meter (0: no usable limit, walk instead)
_WRAP = _LIMIT - MAX_DEPTH if MAX_DEPTH < _LIMIT < 1100 else 0


def _segs(entry: tuple[Any, ...]) -> tuple[Any, ...]:
    """The path of a walk entry ``(node, parent entry, key in the parent, …)``."""
    segs: list[Any] = []
    while entry[1] is not None:
        segs.append(entry[2])
        entry = entry[1]
    return tuple(reversed(segs))


def too_deep(obj: Any, limit: int = MAX_DEPTH) -> tuple[Any, ...] | None:
    """Path of the first container nested deeper than ``limit`` (``obj`` is level 1), or None.

    Iterative, and never looks below level ``limit + 1``."""
    if type(obj) is not dict and type(obj) is not list:
        return None
    # entries: (container, parent entry, key in the parent, level); paths are built only
    # for the answer, so the walk costs the same at any depth
    stack: list[tuple[Any, Any, Any, int]] = [(obj, None, None, 1)]
    while stack:
        entry = stack.pop()
        node, _, _, level = entry
        if level > limit:
            return _segs(entry)
        pairs = node.items() if type(node) is dict else enumerate(node)
        for k, v in pairs:
            if type(v) is dict or type(v) is list:
                stack.append((v, entry, k, level + 1))
    return None


# The meter's lists, made once and reused: ``(outermost, innermost)``, the body put in the
# innermost for one ``dumps`` and taken out again (making and freeing _WRAP lists per request
# was ~9 µs, four times the meter's own ``dumps``).  Taken from and put back in a free list
# with one ``pop`` and one ``append``, each atomic: callers on other threads get their own.
_SHELLS: list[tuple[list[Any], list[Any]]] = []


def _shell() -> tuple[list[Any], list[Any]]:
    inner: list[Any] = [None]
    outer = inner
    for _ in range(_WRAP - 1):
        outer = [outer]
    return outer, inner


def check_depth(body: Any) -> bytes | None:
    """Refuse a body nested deeper than MAX_DEPTH; the depth meter's output (the body as
    orjson writes it, wrapped in lists), or None when the body was walked instead."""
    if _WRAP:
        try:
            shell = _SHELLS.pop()
        except IndexError:  # none free (first use, or every one in use on another thread)
            shell = _shell()
        shell[1][0] = body
        try:
            return orjson.dumps(shell[0])
        except orjson.JSONEncodeError:
            pass
        finally:
            shell[1][0] = None
            _SHELLS.append(shell)
    segs = too_deep(body)
    if segs is None:
        if _WRAP:  # the meter refused it but no container is too deep: not writable at all
            raise RequestError("the request body cannot be re-encoded", code="invalid_value")
        return None
    path = _path(segs)
    raise RequestError(f"'{path}' is nested deeper than {MAX_DEPTH} levels", param=path, code="nesting_too_deep")


# -- 2. integers beyond 64 bits --------------------------------------------------------------


class _Big:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _exact_int(text: str) -> Any:
    digits = len(text) - (text[0] == "-")
    if digits < _BIG_DIGITS:
        return 0  # the value itself is not needed, only where the big ones are
    if digits <= 20 and _I64_MIN <= int(text) <= _U64_MAX:
        return 0
    return _Big(text)


def _find_big(obj: Any) -> tuple[tuple[Any, ...], _Big] | None:
    stack: list[tuple[Any, Any, Any]] = [(obj, None, None)]
    while stack:
        entry = stack.pop()
        node = entry[0]
        pairs = node.items() if type(node) is dict else enumerate(node)
        for k, v in pairs:
            if type(v) is _Big:
                return (*_segs(entry), k), v
            if type(v) is dict or type(v) is list:
                stack.append((v, entry, k))
    return None


_PLUS_LOOKS = 64  # '+' signs looked at before the written body counts as "may hold one"


def may_hold_big_float(written: bytes) -> bool:
    """False when ``written`` (orjson's output) holds no float of magnitude 1e16 or more:
    no ``+`` with an ``e`` and a digit before it.  True also past _PLUS_LOOKS signs (a
    base64 blob is full of them: the exact scan is then cheaper than looking at each)."""
    i = written.find(b"+")
    for _ in range(_PLUS_LOOKS):
        if i == -1:
            return False
        if i > 1 and written[i - 1] == 0x65 and 0x30 <= written[i - 2] <= 0x39:  # <digit>e+
            return True
        i = written.find(b"+", i + 1)
    return i != -1


def _writes_big_floats_with_exponent() -> bool:
    """orjson writes the floats an out-of-range integer becomes as ``…e+…`` (probed)."""
    edges = (2.0**63, -(2.0**63), 2.0**64, 1e16, 9.3e18, 1.8446744073709552e19, 1e21, 1e300, 1.7976931348623157e308)
    return all(may_hold_big_float(orjson.dumps([[v]])) for v in edges)


_EXPONENT_SHORTCUT = _writes_big_floats_with_exponent()


def check_integers(raw: bytes) -> None:
    """Refuse an integer orjson would have turned into a float.  Also safe on a body orjson
    refused (an integer too long even for a double reads as "infinity" there): whatever the
    standard parser cannot read is left to the caller's own error."""
    if _DIGIT_RUN not in raw.translate(_DIGITS_TO_ZERO):
        return
    try:
        tree = json.loads(raw.decode("utf-8"), parse_int=_exact_int)
    except (ValueError, RecursionError):  # not UTF-8, not JSON, too deep: not ours to say
        return
    if type(tree) is not dict and type(tree) is not list:
        return
    found = _find_big(tree)
    if found is None:
        return
    segs, big = found
    path = _path(segs)
    shown = big.text if len(big.text) <= 40 else big.text[:37] + "..."
    neg = big.text.startswith("-")
    raise RequestError(
        f"integer {shown} in '{path}' is out of range: integers must fit in 64 bits "
        f"({_I64_MIN} to {_U64_MAX}); send a larger value as a string",
        param=path,
        code="integer_below_min_value" if neg else "integer_above_max_value",
    )


# -- 3. shapes -------------------------------------------------------------------------------


def _strs(obj: dict[str, Any], keys: tuple[str, ...], *where: Any) -> None:
    for k in keys:
        v = obj.get(k)
        if v is not None and type(v) is not str:
            _bad("string", *where, k)


def _name(obj: dict[str, Any], *where: Any) -> None:
    v = obj.get("name")
    if type(v) is not str:
        if v is None:
            _missing(*where, "name")
        _bad("string", *where, "name")


def _obj(v: Any, *where: Any) -> dict[str, Any] | None:
    """``v`` when it is an object, None when absent; anything else is refused."""
    if v is None or type(v) is dict:
        return v
    _bad("object", *where)


def _parts(parts: list[Any], where: tuple[Any, ...]) -> None:
    for j, p in enumerate(parts):
        if type(p) is not dict:
            _bad("object", *where, j)
        t = p.get("type")
        if t is not None and type(t) is not str:
            _bad("string", *where, j, "type")
        t = p.get("text")
        if t is not None and type(t) is not str:
            _bad("string", *where, j, "text")
        if "refusal" in p or "image_url" in p:
            t = p.get("refusal")
            if t is not None and type(t) is not str:
                _bad("string", *where, j, "refusal")
            img = p.get("image_url")
            if img is not None and type(img) is not str:
                if type(img) is not dict:
                    _bad("string or object", *where, j, "image_url")
                url = img.get("url")
                if url is not None and type(url) is not str:
                    _bad("string", *where, j, "image_url", "url")


def _content(c: Any, where: tuple[Any, ...]) -> None:
    """A message's ``content`` that is neither absent nor a string."""
    if type(c) is not list:
        _bad("string or array", *where)
    _parts(c, where)


def _schema_required(fn: dict[str, Any], *where: Any) -> None:
    params = fn.get("parameters")
    if type(params) is not dict:
        return
    req = params.get("required")
    if req is None:
        return
    if type(req) is not list:
        _bad("array", *where, "parameters", "required")
    for j, r in enumerate(req):
        if type(r) is not str:
            _bad("string", *where, "parameters", "required", j)


# Chat --------------------------------------------------------------------------------------


def _chat_message(m: Any, i: int) -> None:
    if type(m) is not dict:
        _bad("object", "messages", i)
    role = m.get("role")
    if type(role) is not str:
        if role is None:
            _missing("messages", i, "role")
        _bad("string", "messages", i, "role")
    c = m.get("content")
    if c is not None and type(c) is not str:
        _content(c, ("messages", i, "content"))
    calls = m.get("tool_calls")
    if calls is not None:
        if type(calls) is not list:
            _bad("array", "messages", i, "tool_calls")
        for j, tc in enumerate(calls):
            if type(tc) is not dict:
                _bad("object", "messages", i, "tool_calls", j)
            _strs(tc, ("id", "type"), "messages", i, "tool_calls", j)
            fn = _obj(tc.get("function"), "messages", i, "tool_calls", j, "function")
            if fn is not None:
                _name(fn, "messages", i, "tool_calls", j, "function")
    if "tool_call_id" in m or "name" in m:
        _strs(m, ("tool_call_id", "name"), "messages", i)


def _chat_tools(tools: list[Any]) -> None:
    for i, t in enumerate(tools):
        if type(t) is not dict:
            _bad("object", "tools", i)
        _strs(t, ("type",), "tools", i)
        for key in ("function", "custom"):
            fn = _obj(t.get(key), "tools", i, key)
            if fn is not None:
                _name(fn, "tools", i, key)
                _strs(fn, ("description",), "tools", i, key)
                _schema_required(fn, "tools", i, key)


def _chat_tool_choice(choice: Any) -> None:
    if choice is None or type(choice) is str:
        return
    if type(choice) is not dict:
        _bad("string or object", "tool_choice")
    _strs(choice, ("type",), "tool_choice")
    for key in ("function", "custom"):
        fn = _obj(choice.get(key), "tool_choice", key)
        if fn is not None:
            _strs(fn, ("name",), "tool_choice", key)
    allowed = _obj(choice.get("allowed_tools"), "tool_choice", "allowed_tools")
    if allowed is not None:
        _strs(allowed, ("mode",), "tool_choice", "allowed_tools")
        entries = allowed.get("tools")
        if entries is not None:
            if type(entries) is not list:
                _bad("array", "tool_choice", "allowed_tools", "tools")
            for j, e in enumerate(entries):
                if type(e) is not dict:
                    _bad("object", "tool_choice", "allowed_tools", "tools", j)
                _strs(e, ("type",), "tool_choice", "allowed_tools", "tools", j)
                for key in ("function", "custom"):
                    fn = _obj(e.get(key), "tool_choice", "allowed_tools", "tools", j, key)
                    if fn is not None:
                        _strs(fn, ("name",), "tool_choice", "allowed_tools", "tools", j, key)


def _check_chat(body: dict[str, Any]) -> None:
    messages = body.get("messages")
    if type(messages) is list:
        for i, m in enumerate(messages):
            _chat_message(m, i)
    tools = body.get("tools")
    if type(tools) is list:
        _chat_tools(tools)
    _chat_tool_choice(body.get("tool_choice"))
    fmt = _obj(body.get("response_format"), "response_format")
    if fmt is not None:
        _strs(fmt, ("type",), "response_format")


# Responses ---------------------------------------------------------------------------------

_CALL_STRS = ("call_id", "name", "namespace", "input")


def _item(it: Any, i: int) -> None:
    if type(it) is not dict:
        _bad("object", "input", i)
    kind = it.get("type")
    if kind is None:
        if "role" not in it:
            return  # not an item the proxy knows: passed on (or dropped for a Chat upstream)
        kind = "message"
    elif type(kind) is not str:
        _bad("string", "input", i, "type")
    if kind == "message":
        role = it.get("role")
        if type(role) is not str:
            if role is None:
                _missing("input", i, "role")
            _bad("string", "input", i, "role")
        c = it.get("content")
        if c is not None and type(c) is not str:
            _content(c, ("input", i, "content"))
    elif kind == "function_call" or kind == "custom_tool_call":
        for k in _CALL_STRS:
            v = it.get(k)
            if v is not None and type(v) is not str:
                _bad("string", "input", i, k)
    elif kind == "function_call_output" or kind == "custom_tool_call_output":
        v = it.get("call_id")
        if v is not None and type(v) is not str:
            _bad("string", "input", i, "call_id")
        v = it.get("output")
        if type(v) is list:
            _parts(v, ("input", i, "output"))
    elif kind == "reasoning":
        v = it.get("encrypted_content")
        if v is not None and type(v) is not str:
            _bad("string", "input", i, "encrypted_content")
        for key in ("summary", "content"):
            v = it.get(key)
            if v is not None:
                if type(v) is not list:
                    _bad("array", "input", i, key)
                _parts(v, ("input", i, key))


_TOOL_STRS = ("type", "description")


def _responses_tool(t: Any, default: str | None, *where: Any) -> None:
    """One Responses tool; ``default``: its type when it names none (a namespace's children
    are functions)."""
    if type(t) is not dict:
        _bad("object", *where)
    _strs(t, _TOOL_STRS, *where)
    kind = t.get("type", default)
    if kind in ("function", "custom", "namespace"):
        _name(t, *where)
    else:
        _strs(t, ("name",), *where)
    _schema_required(t, *where)
    fmt = _obj(t.get("format"), *where, "format") if kind == "custom" else None
    if fmt is not None:
        _strs(fmt, ("type", "syntax", "definition"), *where, "format")
    if kind == "namespace":
        children = t.get("tools")
        if type(children) is not list:
            if children is None:
                _missing(*where, "tools")
            _bad("array", *where, "tools")
        for j, child in enumerate(children):
            _responses_tool(child, "function", *where, "tools", j)


def _responses_tools(tools: list[Any]) -> None:
    for i, t in enumerate(tools):
        _responses_tool(t, None, "tools", i)


def _responses_tool_choice(choice: Any) -> None:
    if choice is None or type(choice) is str:
        return
    if type(choice) is not dict:
        _bad("string or object", "tool_choice")
    _strs(choice, ("type", "name", "namespace", "mode"), "tool_choice")
    entries = choice.get("tools")
    if entries is not None:
        if type(entries) is not list:
            _bad("array", "tool_choice", "tools")
        for j, e in enumerate(entries):
            if type(e) is not dict:
                _bad("object", "tool_choice", "tools", j)
            _strs(e, ("type", "name", "namespace"), "tool_choice", "tools", j)


def _check_responses(body: dict[str, Any]) -> None:
    items = body.get("input")
    if type(items) is list:
        for i, it in enumerate(items):
            _item(it, i)
    tools = body.get("tools")
    if type(tools) is list:
        _responses_tools(tools)
    _responses_tool_choice(body.get("tool_choice"))
    text = body.get("text")
    if type(text) is dict:
        fmt = _obj(text.get("format"), "text", "format")
        if fmt is not None:
            _strs(fmt, ("type",), "text", "format")
    _strs(body, ("previous_response_id",))


# -- entry point -----------------------------------------------------------------------------


def check_values(raw: bytes, body: Any) -> None:
    """Checks 1 and 2: ``body`` (parsed from ``raw``) is not too deep and holds no integer
    beyond 64 bits."""
    written = check_depth(body)
    if written is None or not _EXPONENT_SHORTCUT or may_hold_big_float(written):
        check_integers(raw)


@dataclass(frozen=True, slots=True)
class BodyCheck:
    """What one protocol's bodies must be (check 3): a protocol's row holds its own
    (``transformers/protocols.py``)."""

    types: dict[str, tuple[type, ...]]  # top-level fields → the types they may have
    required: tuple[str, ...]  # top-level fields that must be there (null counts as absent)
    # (field, message, code): a field that must hold at least one element (Anthropic and
    # Gemini answer 400 to an empty one; so does the proxy, in the client's protocol)
    nonempty: tuple[str, str, str] | None = None
    # the deeper shapes the proxy reads (Chat, Responses); None: the translator names what
    # it cannot read (Messages, Gemini)
    shapes: Callable[[dict[str, Any]], None] | None = None
    # a Responses body may leave ``input`` out only with a ``previous_response_id``
    input_or_previous: bool = False


def check_request(raw: bytes, body: dict[str, Any], check: BodyCheck) -> None:
    """All three checks: raise ``RequestError`` (400, ``param`` = JSON path) when ``body``
    is too deep, holds an integer beyond 64 bits, or has a field the proxy reads of the
    wrong type."""
    check_values(raw, body)
    if check.shapes is not None:
        check.shapes(body)


MESSAGES = BodyCheck(
    types={
        "model": (str,),
        "messages": (list,),
        "system": (str, list),
        "stream": (bool,),
        "tools": (list,),
        "tool_choice": (dict,),
        "max_tokens": (int,),
        "stop_sequences": (list,),
        "thinking": (dict,),
    },
    required=("model", "messages"),
    nonempty=("messages", "messages: at least one message is required", "invalid_value"),
)
CHAT = BodyCheck(
    types={
        "model": (str,),
        "messages": (list,),
        "stream": (bool,),
        "tools": (list,),
        "stream_options": (dict,),
        "max_tokens": (int,),
        "max_completion_tokens": (int,),
        "n": (int,),
    },
    required=("model", "messages"),
    shapes=_check_chat,
)
RESPONSES = BodyCheck(
    types={
        "model": (str,),
        "input": (str, list),
        "stream": (bool,),
        "tools": (list,),
        "instructions": (str,),
        "max_output_tokens": (int,),
        "reasoning": (dict,),
        "text": (dict,),
    },
    required=("model",),
    shapes=_check_responses,
    input_or_previous=True,
)
GEMINI = BodyCheck(
    types={
        "model": (str,),
        "stream": (bool,),
        "contents": (list,),
        "systemInstruction": (dict, str),
        "tools": (list,),
        "toolConfig": (dict,),
        "generationConfig": (dict,),
    },
    required=("contents",),  # the model is in the URL: the app puts it in the body after
    nonempty=("contents", "contents is not specified", "invalid_value"),
)


def check_body(raw: bytes, check: BodyCheck) -> dict[str, Any]:
    """Parse and type-check the fields the proxy relies on; everything else passes through."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        check_integers(raw)  # an integer too long even for a double: name it
        raise RequestError(f"the request body is not valid JSON: {e}", param=None, code="invalid_json") from None
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object", code="invalid_json")
    check_values(raw, body)  # nesting depth, integers beyond 64 bits
    _check_fields(body, check)
    return body


def check_parsed(body: dict[str, Any], check: BodyCheck) -> dict[str, Any]:
    """``check_body`` for a body built from JSON parsed and checked elsewhere (a WebSocket
    turn: the frame's own bytes had ``check_values``, the rest is the socket's transcript):
    its depth, fields and shapes, without a round trip through bytes (only the depth
    meter writes it, as for any body)."""
    check_depth(body)
    _check_fields(body, check)
    return body


def _check_fields(body: dict[str, Any], check: BodyCheck) -> None:
    for name in check.required:
        if body.get(name) is None:
            raise RequestError(f"missing required parameter: '{name}'", param=name, code="missing_required_parameter")
    for name, types in check.types.items():
        v = body.get(name)
        if v is not None and (not isinstance(v, types) or (isinstance(v, bool) and bool not in types)):
            want = " or ".join(
                {str: "string", list: "array", bool: "boolean", dict: "object", int: "integer"}[t] for t in types
            )
            raise RequestError(f"invalid type for '{name}': expected {want}", param=name, code="invalid_type")
    if check.nonempty is not None and body[check.nonempty[0]] == []:
        name, message, code = check.nonempty
        raise RequestError(message, param=name, code=code)
    if check.input_or_previous and body.get("input") is None and not body.get("previous_response_id"):
        raise RequestError("missing required parameter: 'input'", param="input", code="missing_required_parameter")
    if check.shapes is not None:  # the fields the proxy reads, down to content parts and tools
        check.shapes(body)
