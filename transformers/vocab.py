"""One vocabulary: the closed sets of words the proxy's layers pass to each other.

Each word set is defined once, here, as a ``Literal`` type (for annotations and the type
checker) and a frozenset of the same values (for membership tests at run time: config
checks, metric label sets, tests).  The values stay plain ``str`` at run time, so the hot
path keeps comparing ``status == "completed"`` with no enum objects to build, unwrap or
serialise; the frozensets are derived from the ``Literal`` types, so the two cannot drift.

=====================  ======================================================================
type                   values
=====================  ======================================================================
``ProtocolName``       ``chat`` (Chat Completions), ``responses`` (Responses API),
                       ``messages`` (Anthropic Messages), ``gemini`` (Gemini's own
                       ``generateContent`` API: a client protocol, toward Chat, Responses
                       and Messages upstreams): what a client or an upstream speaks
``FinishStatus``       ``completed``, ``incomplete``, ``failed``: ``events.Finish.status``,
                       the end of every decoded stream or answer
``Outcome``            how a request ended, as logged (``terminal=``) and metered
                       (``switchboard_stream_outcomes_total{outcome}``): a ``FinishStatus``;
                       ``client_cancel`` (the client went away, HTTP 499); ``error`` (an
                       upstream failure answered as an OpenAI error before the first
                       byte); ``rejected`` (refused before any upstream call: auth,
                       limits, an invalid request, an unknown model; logged, not
                       metered); ``none`` (a stream that ended without a terminal status)
=====================  ======================================================================
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "FINISH_STATUSES",
    "OUTCOMES",
    "PROTOCOLS",
    "FinishStatus",
    "Outcome",
    "ProtocolName",
]

ProtocolName = Literal["chat", "responses", "messages", "gemini"]
PROTOCOLS: frozenset[str] = frozenset(get_args(ProtocolName))

FinishStatus = Literal["completed", "incomplete", "failed"]
FINISH_STATUSES: frozenset[str] = frozenset(get_args(FinishStatus))

Outcome = Literal[FinishStatus, "client_cancel", "error", "rejected", "none"]
OUTCOMES: frozenset[str] = frozenset(get_args(Outcome))
