"""Run one golden case through the real ASGI app and render what the client got.

Theory of operation
-------------------
``run(case, mode)`` builds the app with ``app.main.create_app`` from the case's config
(one provider, one model, ``keepalive_seconds: 0``), the upstream answered in process by an
``httpx.MockTransport`` (``Upstream``: the case's ``before`` answers in order, then its
stream when the proxy asked for one, else its object), and sends the client request over
``httpx.ASGITransport`` (Host ``127.0.0.1``, ``content-type: application/json``).  It
returns the status, the ``content-type`` and the exact body bytes.

``mask(text)`` replaces what differs from run to run by stable placeholders numbered in
order of first appearance, one counter per kind, the same value always getting the same
placeholder within one answer (so "these two ids are equal" is still checked):

* ids the proxy mints: ``<prefix><32 hex>`` for the prefixes ``req_ resp_ msg_ fc_ ctc_ rs_
  cmp_ item_ call_ chatcmpl-`` (``uuid4().hex`` / ``os.urandom(16).hex()``) →
  ``resp_<1>``, ``call_<2>``…;
* a Gemini answer's ``responseId`` (hex) → ``"<responseId:1>"``;
* clock readings: a ``"created"`` / ``"created_at"`` / ``"completed_at"`` integer within a
  week of now → ``"<created:1>"`` (a string: the placeholder stays JSON), numbered per key:
  whether two different keys were stamped in the same second is timing, not behaviour.
  Timestamps an upstream sent (``1``, ``1700000000``) are kept: passing them through is
  behaviour.

``render(result)`` is a corpus file: ``HTTP <status> <content-type>``, a newline, then the
masked body exactly (SSE bodies are one line per ``event:`` / ``data:`` line as sent).
"""

from __future__ import annotations

import difflib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import orjson

from app.config import parse_config
from app.main import create_app
from tests.golden.cases import Answer, Case, upstream_body
from transformers.protocols import SPECS

CORPUS = Path(__file__).resolve().parent / "corpus"


@dataclass(frozen=True)
class Result:
    status: int
    content_type: str
    body: bytes


def corpus_path(case: Case, mode: str) -> Path:
    return CORPUS / f"{case.name}.{mode}.txt"


# --------------------------------------------------------------------------- the upstream


class Upstream:
    """The MockTransport handler playing one answer."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.calls = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        a = self.answer
        n = self.calls
        self.calls += 1
        if n < len(a.before):
            status, body = a.before[n]
            return httpx.Response(
                status, content=_body(upstream_body(body), 0, False), headers={"content-type": "application/json"}
            )
        if a.unreachable:
            raise httpx.ConnectError("connection refused", request=request)
        if a.status >= 400:
            ctype = "text/plain" if isinstance(a.object, bytes) else "application/json"
            return httpx.Response(
                a.status, content=_body(upstream_body(a.object), 0, False), headers={"content-type": ctype}
            )
        wants_stream = bool(orjson.loads(request.content).get("stream"))
        if wants_stream:
            if a.stream is None:
                raise AssertionError(f"{a.name}: the proxy asked for a stream, the case has none")
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=_body(a.stream, a.chunk, a.cut)
            )
        return httpx.Response(
            200, headers={"content-type": "application/json"}, content=_body(upstream_body(a.object), 0, a.cut)
        )


def _body(data: bytes, chunk: int, cut: bool) -> Any:
    """The body as a network stream (the proxy reads streams raw: bytes content would arrive
    already read), in writes of ``chunk`` bytes (0: one write), failing after it if ``cut``."""

    async def gen():  # type: ignore[no-untyped-def]
        step = chunk or len(data) or 1
        for i in range(0, len(data), step):
            yield data[i : i + step]
        if cut:
            raise httpx.ReadError("connection reset")

    return gen()


# --------------------------------------------------------------------------- running


_CACHE: dict[tuple[str, str], Result] = {}


async def run(case: Case, mode: str) -> Result:
    config = parse_config(case.config(), "<golden>")
    app = create_app(config, transport=httpx.MockTransport(Upstream(case.answer)))
    spec = SPECS[case.client]
    body = case.client_body(mode)
    path = spec.route
    if "{model}" in path:  # the model and the stream are the path's (Gemini's), SSE asked in the query
        model, stream = body.pop("model"), body.pop("stream")
        path = (spec.stream_route if stream else spec.route).format(model=model)
        if stream:
            path += "?" + urlencode(spec.stream_query)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            r = await client.post(
                path,
                content=orjson.dumps(body),
                headers={"host": "127.0.0.1", "content-type": "application/json", "user-agent": "golden/1"},
            )
    return Result(r.status_code, r.headers.get("content-type", ""), r.content)


async def result(case: Case, mode: str) -> Result:
    """``run``, once per process (the golden and the differential tests share it)."""
    key = (case.name, mode)
    if key not in _CACHE:
        _CACHE[key] = await run(case, mode)
    return _CACHE[key]


# --------------------------------------------------------------------------- masking, rendering

_ID = re.compile(r"\b(req_|resp_|msg_|fc_|ctc_|rs_|cmp_|item_|call_|chatcmpl-)[0-9a-f]{32}\b")
_TIME = re.compile(r'"(created|created_at|completed_at)":(\d+)')
_RESPONSE_ID = re.compile(r'"responseId":"([0-9a-f]{16,})"')  # a Gemini answer's id the proxy mints
_WINDOW = 7 * 24 * 3600


def mask(text: str, now: float | None = None) -> str:
    now = time.time() if now is None else now
    seen: dict[str, str] = {}
    count: dict[str, int] = {}

    def placeholder(kind: str, value: str, fmt: str) -> str:
        if value not in seen:
            count[kind] = count.get(kind, 0) + 1
            seen[value] = fmt.format(count[kind])
        return seen[value]

    def ident(m: re.Match[str]) -> str:
        prefix = m.group(1)
        return placeholder(prefix, m.group(0), prefix + "<{}>")

    def clock(m: re.Match[str]) -> str:
        if abs(int(m.group(2)) - now) > _WINDOW:
            return m.group(0)
        key = m.group(1)
        return f'"{key}":' + placeholder(key, f"{key}={m.group(2)}", '"<' + key + ':{}>"')

    def response_id(m: re.Match[str]) -> str:
        return '"responseId":"' + placeholder("responseId", m.group(1), "<responseId:{}>") + '"'

    return _RESPONSE_ID.sub(response_id, _TIME.sub(clock, _ID.sub(ident, text)))


def body_text(body: bytes) -> str:
    return body.decode("utf-8", errors="backslashreplace")


def render(r: Result) -> str:
    return f"HTTP {r.status} {r.content_type}\n" + mask(body_text(r.body))


def split_render(text: str) -> tuple[str, str, str]:
    """A corpus file → (status, content type, masked body)."""
    head, _, body = text.partition("\n")
    _, status, ctype = head.split(" ", 2)
    return status, ctype, body


# --------------------------------------------------------------------------- diffs


def _explode(text: str) -> list[str]:
    """Lines for a readable diff: each JSON line (a ``data:`` line or a JSON body) pretty-printed."""
    out: list[str] = []
    for line in text.split("\n"):
        prefix, payload = ("data: ", line[6:]) if line.startswith("data: ") else ("", line)
        if payload[:1] in ("{", "["):
            try:
                pretty = json.dumps(json.loads(payload), indent=1, ensure_ascii=False)
            except ValueError:
                out.append(line)
                continue
            out.append(prefix + "⏎")
            out.extend("    " + p for p in pretty.split("\n"))
        else:
            out.append(line)
    return out


def diff(expected: str, actual: str, *, limit: int = 150, names: tuple[str, str] = ("recorded", "now")) -> str:
    lines = list(difflib.unified_diff(_explode(expected), _explode(actual), names[0], names[1], n=3, lineterm=""))
    if len(lines) > limit:
        lines = lines[:limit] + [f"... {len(lines) - limit} more diff lines"]
    return "\n".join(lines)
