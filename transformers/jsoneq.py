"""JSON equality that keeps number lexemes (docs/rules.md §3).

Theory of operation
-------------------
``done`` reconciliation accepts a terminal argument text that differs from the streamed
deltas only in whitespace or object-key order.  Two texts are equal when both parse as
JSON and the parsed values are equal, with one twist: numbers are compared as the *text*
the upstream wrote, never as Python numbers.  This is what the seed's Go code gets from
``json.Decoder.UseNumber()``:

=========================================  =======  ==================================
texts                                      equal?   why
=========================================  =======  ==================================
``{"a":1,"b":2}`` / ``{ "b": 2, "a": 1 }``  yes      key order and whitespace ignored
``9007199254740992`` / ``9007199254740993``  no       distinct lexemes (floats collapse)
``1.0`` / ``1.00``                           no       distinct lexemes (Decimal would not)
``1`` / ``true``                             no       a number is never a boolean
``"\\u0041"`` / ``"A"``                      yes      strings compare decoded
``NaN`` / ``NaN``, or any invalid text       no       not JSON, so never equal
=========================================  =======  ==================================

Numbers become ``_Lex`` wrappers (``parse_int``/``parse_float``), which compare equal only
to another ``_Lex`` with the same text.  The standard library parser is used on purpose:
orjson has no hook that keeps the lexeme.  This runs only on ``done`` events whose text is
not a plain extension of the deltas, so it is off the hot path.
"""

from __future__ import annotations

import json

__all__ = ["json_equal"]


class _Lex:
    """A JSON number, kept as the text the producer wrote."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return other.__class__ is _Lex and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"_Lex({self.text})"


def _reject_constant(name: str) -> None:
    # NaN, Infinity and -Infinity are Python extensions, not JSON.
    raise ValueError(f"not JSON: {name}")


_DECODER = json.JSONDecoder(parse_int=_Lex, parse_float=_Lex, parse_constant=_reject_constant)


def json_equal(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` are both JSON and equal, numbers compared by lexeme."""
    try:
        return _DECODER.decode(a) == _DECODER.decode(b)
    except (ValueError, TypeError, RecursionError):
        return False
