"""``switchboard replay FILE``: a captured exchange (``app/capture.py``) run again through
today's code, offline.

Theory of operation
-------------------
For each line of FILE (or the one ``--index`` names), ``replay`` rebuilds the request's
context from what the line recorded (client and upstream protocols, upstream model, the
quirks that were on, the output limit), translates the recorded client request with
``open_bridge`` — as the app did, with no network and no store: the fields the app's store
honoured then (``answered``: ``store``, ``previous_response_id``) are echoed as recorded,
and the request holds the stored conversation the store put back — and feeds the Bridge the
recorded upstream input in order (``data`` bytes, ``end``, ``fail``, a whole ``object``).
What comes out is compared with what the client got then, and the upstream request body
with the one sent then.  Both sides are masked first (``mask``): ids the proxy mints,
clock readings, and the proxy's sealed envelopes (sealed with the server's secret, which a
capture never holds) become numbered placeholders, so only a real change shows.  Clock
readings are numbered per field (``created_at``, ``completed_at``): a turn that ended in the
second it began reads one value in both fields, and its replay, seconds later, two.

``--golden NAME`` writes the line to ``tests/golden/captured/NAME.json``: the suite replays
every file there and fails on any difference (``tests/golden/test_captured.py``).  That
is the way to report a broken upstream: capture the exchange, replay it, attach the line.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

import orjson

from transformers.bridge import AnswerError, open_bridge
from transformers.context import Ctx
from transformers.errors import RequestError

__all__ = ["Outcome", "mask", "replay_line"]

_ID = re.compile(r"\b(req_|resp_|msg_|fc_|ctc_|rs_|cmp_|item_|call_|toolu_|chatcmpl-)[0-9a-f]{32}\b")
_TIME = re.compile(r'"(created|created_at|completed_at)":(\d+)')
_SEALED = re.compile(r"\b(pxy1|pxc1)\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+")


def mask(text: str) -> str:
    """``text`` with minted ids, clock readings and sealed envelopes numbered in order of
    first appearance (the same value keeps its placeholder)."""
    seen: dict[tuple[str, str], int] = {}
    counts: dict[str, int] = {}

    def number(kind: str, value: str) -> int:
        key = (kind, value)
        if key not in seen:
            counts[kind] = counts.get(kind, 0) + 1
            seen[key] = counts[kind]
        return seen[key]

    text = _ID.sub(lambda m: f"{m.group(1)}<{number(m.group(1), m.group(0))}>", text)
    text = _SEALED.sub(lambda m: f"{m.group(1)}.<sealed:{number('sealed', m.group(0))}>", text)
    return _TIME.sub(lambda m: f'"{m.group(1)}":"<time:{number(m.group(1), m.group(2))}>"', text)


@dataclass
class Outcome:
    index: int
    request_id: str
    client_then: str
    client_now: str
    upstream_then: str
    upstream_now: str

    @property
    def same(self) -> bool:
        return self.client_then == self.client_now and self.upstream_then == self.upstream_now

    def diff(self) -> str:
        out: list[str] = []
        for name, then, now in (
            ("upstream request", self.upstream_then, self.upstream_now),
            ("client bytes", self.client_then, self.client_now),
        ):
            if then != now:
                out += difflib.unified_diff(
                    _lines(then), _lines(now), f"{name} (captured)", f"{name} (now)", lineterm="", n=2
                )
        return "\n".join(out)


def _lines(text: str) -> list[str]:
    return text.replace("\n\n", "\n\n\x00").split("\x00") if "\n\n" in text else text.splitlines()


def _upstream_text(body: Any) -> str:
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2).decode() if body is not None else ""


def replay_line(line: dict[str, Any], index: int = 0) -> Outcome:
    """Run one captured exchange again (see the module docstring)."""
    ctx = Ctx(
        quirks=frozenset(line.get("quirks") or ()),
        upstream_model=line.get("upstream_model") or "",
        public_model=line.get("model") or "",
        max_output_tokens=line.get("max_output"),
    )
    request = line["client_request"]
    then_client = "".join(c[1] for c in line.get("client_events") or ())
    then_upstream = _upstream_text((line.get("upstream_request") or {}).get("body"))
    try:
        body = request if isinstance(request, dict) else orjson.loads(request)
        sent, bridge = open_bridge(
            body,
            line["client"],
            line["upstream"],
            ctx,
            incomplete_as_completed=bool(line.get("incomplete_as_completed")),
            websocket=line.get("transport") == "websocket",
            answered=line.get("answered") or None,
        )
    except (RequestError, ValueError, KeyError) as e:
        return Outcome(index, line.get("request_id", ""), mask(then_client), f"(refused now: {e})",
                       mask(then_upstream), "")  # fmt: skip
    out: list[bytes] = []
    for _, kind, given in line.get("upstream_events") or ():
        if kind == "data":
            out.append(bridge.receive_data(given.encode("latin-1")))
        elif kind == "end":
            out.append(bridge.end())
        elif kind == "fail":
            out.append(bridge.fail(given.get("code", ""), given.get("message", "")))
        elif kind == "object":
            if body.get("stream"):
                out.append(bridge.replay(given))
            else:
                try:
                    out.append(bridge.complete(given)[1])
                except AnswerError as e:
                    out.append(orjson.dumps({"error": e.error}))
    now_client = b"".join(out).decode("latin-1")
    return Outcome(
        index,
        line.get("request_id", ""),
        mask(then_client),
        mask(now_client),
        mask(then_upstream),
        mask(_upstream_text(sent)),
    )
