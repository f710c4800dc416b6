"""The Bridge: one sans-IO object per request, from the client's body to the client's bytes.

Theory of operation
-------------------
A request goes one of the *directions*, (client protocol, upstream protocol): every pair of
the protocols' rows (``transformers/protocols.py``: Chat Completions, Responses, Anthropic
Messages, Gemini's own ``generateContent`` API).  Each is a row of ``DIRECTIONS``, made from
the two protocol rows: how the client's body becomes the upstream's (the protocol's own
``same`` toward itself, else its ``to_hub`` into the Chat form and the upstream's
``from_hub`` out of it, the request quirk rows included), which decoder reads the upstream,
whether the tool stage runs between decoder and encoder (it finishes tool calls that a Chat
upstream leaves loose), and which
encoder writes for the client.  ``open_bridge`` picks the row, translates the body and
returns the upstream body with a ``Bridge`` for the answer::

    upstream bytes ─▶ SSEParser ─▶ decoder ─▶ [ToolStage] ─▶ encoder ─▶ framer ─▶ client bytes

The Bridge is h11-shaped: the caller does all I/O and feeds it.

The parser's work per event (two decodes, an event tuple, the data's text parsed again) is
skipped for the whole events of its two fast shapes: ``_blocks`` cuts a read at its blank
lines and parses each such event's JSON from its bytes, handing the object on as the parser
and ``_event`` would; every other event, a read with a CR, and an event cut across reads
go through the parser (a differential test holds the two to the same bytes at every cut:
``tests/unit/test_bridge_blocks.py``).  Chat → Chat text runs skip even that
(``transformers/passthrough.py``); so do a Chat upstream's text, reasoning and tool call
argument chunks, once the stream's own template of each is learnt
(``transformers/chat_text_lane.py``: ``lane``, ``rlane`` and ``alane``); and a Responses
upstream's runs of text deltas go to the decoder and the encoder a run at a time
(``transformers/text_runs.py``), in a read long enough for a run to pay (``_RUN_READ``).
A plain text, reasoning or argument delta (``decoder.text``, ``decoder.reasoning``,
``decoder.args``) goes straight to the encoder's own writer (``text_delta``,
``reasoning_delta``, ``args_delta``: the event's bytes from a format made once per part or
call) when the stages would hand it on as it is.

=====================  ==================================================================
call                   returns
=====================  ==================================================================
``receive_data(b)``    the client bytes that upstream bytes ``b`` complete
``end()``              the rest at the upstream's end of body (a truncated stream fails)
``fail(code, msg)``    the protocol's failure terminal (transport faults: idle timeout…)
``heartbeat()``        what to send during a long upstream silence ('' when nothing)
``replay(obj)``        a whole answer object to a stream request, as the complete stream
``empty()``            a complete response that produces nothing (a WebSocket warm-up)
``complete(body)``     non-streaming: ``(200, bytes)`` of the client's answer object, or
                       raises ``AnswerError`` (the app picks the HTTP error)
``response_object()``  a Responses client's whole response object, once answered (stored)
``terminal``           what the client received: '' (not yet), completed, incomplete, failed
``error_code``         the code of the failure terminal the client received, if any
``crashed``            the exception the guard caught, if it fired (the app logs it)
``finished``           nothing more to read upstream (the decoder ended, or the guard fired)
``usage``              the upstream's usage (Responses shape, ``usage.py``) once it came,
                       else None; ``tokens()``: its counts by type
``chars``              characters of output written for the client so far: text,
                       reasoning, refusal and tool call arguments (its estimate of the
                       output tokens when no usage came, and its first output)
=====================  ==================================================================

Non-streaming answers go through the very same machines: the upstream's object is replayed
as the one-event stream it stands for (``decode_chat_completion`` / ``decode_response``),
and the client's object is what the encoder's stream adds up to.  A plain answer is written
straight from the upstream's object, as the machines would write it, where the client's row
has a writer for the upstream's protocol (``straight``: Chat → Chat in
``transformers/chat_whole.py``, the directions touching Gemini in
``transformers/gemini_whole.py``) and no tool stage runs.

Guard (an upstream is untrusted): an exception raised while an upstream event goes through
the pieces never escapes.  It becomes the protocol's failure terminal with code
``upstream_bad_event`` (Responses ``error`` + ``response.failed``; Chat an error chunk),
exactly once and only if no terminal went out yet, and the bridge is ``broken``: later
feeds, ``end()`` and heartbeats produce nothing.  The terminal goes through the encoder's
own Finish path while that still works; when it raises too, or yields nothing, the
encoder's ``abort`` builds it from nothing.  The stages reject malformed input as data; the
guard is for what no rule foresaw.  Every upstream error that reaches the client (a
``Finish`` carrying one) passes through ``mask`` first: the configured secrets never do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from transformers import compaction, fields, items, sse
from transformers.chat_text_lane import ChatTextLane
from transformers.context import Ctx
from transformers.errors import stream_error
from transformers.events import Event, Finish, Reasoning, Refusal, Text, ToolCall, Usage
from transformers.masking import NO_SECRETS, SecretMask
from transformers.passthrough import ChatPassthrough
from transformers.protocols import BAD, SPECS, EncoderOptions, ProtocolSpec
from transformers.responses_encode import ResponsesStreamEncoder
from transformers.text_runs import TextRuns
from transformers.tool_stage import ToolStage, needed
from transformers.vocab import ProtocolName

__all__ = ["DIRECTIONS", "AnswerError", "Bridge", "Direction", "open_bridge", "SSEFraming", "WSFraming"]

# fields of a Responses request echoed on the response object (the SDK's Response type)
ECHO = (
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning",
    "text",
    "metadata",
    "max_output_tokens",
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "top_logprobs",
    "max_tool_calls",
    "safety_identifier",
    "prompt_cache_key",
)
# only true when the upstream itself speaks Responses (a Chat upstream stores nothing)
ECHO_SAME_PROTOCOL = ("store", "truncation", "previous_response_id", "service_tier", "background")

# Chat passthrough: events in a row that were no run before a read's rest goes to the parser whole
_LANE_MISSES = 3
# text runs: the events a read may offer to teach the template before its rest goes the full
# way
_RUN_OPENING = 6
# text runs: a read is offered to them when it is at least this long (some three deltas: an
# OpenAI delta is ~250 bytes); a shorter one, as an upstream at token rate writes them, goes
# the full way, which is cheaper for an event or two (the Bridge alone, 200 deltas read k at a
# time, instructions with runs against without: k=1 +46%, k=2 +9%, k=3 -4%, k=4 -12.5%, k=8
# -25%; docs/performance.md).  Only the length: counting a read's events costs ~3
# instructions a byte, and a long read of one big event (the item done, the response
# completed) costs the runs no more than a search
_RUN_READ = 640


class _TooDeep(Exception):
    """A whole answer nested deeper than JSON is written: upstream data, rejected as such."""


def _dump_whole(result: dict[str, Any]) -> bytes:
    """The client's whole answer as JSON.  A tool input or argument object the upstream
    nested just under the writer's depth limit may pass its decoder and still be too deep
    once the client's shape wraps it (a Messages ``content[i].input``): that is ``_TooDeep``,
    a 502 ``upstream_bad_response`` that says so, not the guard's catch-all."""
    try:
        return orjson.dumps(result)
    except orjson.JSONEncodeError as e:
        if "Recursion limit" in str(e):
            raise _TooDeep from None
        raise


class AnswerError(Exception):
    """A non-streamed answer that failed: ``error`` is the OpenAI error dict; ``bad`` when the
    proxy could not process the upstream's body (rather than the upstream saying it failed)."""

    def __init__(self, error: dict[str, Any], bad: bool = False) -> None:
        super().__init__(error.get("message"))
        self.error = error
        self.bad = bad


# -- framing ---------------------------------------------------------------------------------


class SSEFraming:
    """Server-Sent Events for one client protocol: Chat chunks as bare ``data:`` lines ending
    with ``[DONE]``; Gemini chunks as bare ``data:`` lines; Responses and Messages events
    with their ``event:`` line."""

    __slots__ = ("chat", "bare")
    content_type = b"text/event-stream; charset=utf-8"

    def __init__(self, client: ProtocolName) -> None:
        spec = SPECS[client]
        self.chat = spec.sse_done  # (the stream's end marker, data: [DONE])
        self.bare = spec.bare_sse

    def delta_frame(self, kind: str) -> tuple[bytes, bytes]:
        """What goes around the JSON of an event of type ``kind`` that the encoder writes
        itself (``frame_deltas``: a text or reasoning delta)."""
        if self.bare:
            return b"data: ", b"\n\n"
        return b"event: " + kind.encode() + b"\ndata: ", b"\n\n"

    def frame(self, obj: dict[str, Any]) -> bytes:
        if self.bare:
            return b"data: " + orjson.dumps(obj) + b"\n\n"
        return b"event: " + obj["type"].encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"

    def done(self) -> bytes:
        return sse.DONE if self.chat else b""

    def comment(self) -> bytes:
        return sse.encode_comment()


class JSONArrayFraming:
    """A stream as one JSON array, its elements written as they come (``[{…}`` then
    ``\n,{…}``, ``]`` at the end): Gemini's ``:streamGenerateContent`` without ``alt=sse``.
    No comments (JSON has none); the encoder's own delta writers are not used (the Bridge
    takes them for SSE only, and Gemini's encoder has none)."""

    __slots__ = ("opened",)
    content_type = b"application/json"

    def __init__(self) -> None:
        self.opened = False

    def frame(self, obj: dict[str, Any]) -> bytes:
        head = b"\n," if self.opened else b"["
        self.opened = True
        return head + orjson.dumps(obj)

    def delta_frame(self, kind: str) -> tuple[bytes, bytes]:
        return b"\n,", b""

    def done(self) -> bytes:
        return b"\n]" if self.opened else b"[]"

    def comment(self) -> bytes:
        return b""


class WSFraming:
    """Responses events for a WebSocket: one JSON object per line (orjson never writes a raw
    newline), each line one text frame (the app splits them); no end marker, no comments
    (a socket has its own ping/pong, and the Responses heartbeat is a real event)."""

    __slots__ = ()
    content_type = b"application/json"  # (a socket's frames: never an HTTP body's type)

    def frame(self, obj: dict[str, Any]) -> bytes:
        return orjson.dumps(obj) + b"\n"

    def delta_frame(self, kind: str) -> tuple[bytes, bytes]:
        return b"", b"\n"

    def done(self) -> bytes:
        return b""

    def comment(self) -> bytes:
        return b""


@dataclass(frozen=True, slots=True)
class Direction:
    client: ProtocolName
    upstream: ProtocolName
    translate: Callable[[dict[str, Any], Ctx], dict[str, Any]]
    # the upstream's calls are finished by the ToolStage (when needed): the upstream row's
    # ``tool_stage`` (a Chat upstream's calls come loose, and a client's custom and namespaced
    # tools went to it as functions)
    tool_stage: bool


def _translator(client: ProtocolSpec, upstream: ProtocolSpec) -> Callable[[dict[str, Any], Ctx], dict[str, Any]]:
    """The body translation of a direction: the protocol's own ``same`` toward itself, else
    by way of the hub's form (the rows' ``to_hub`` and ``from_hub``)."""
    if client is upstream and client.same is not None:
        return client.same

    def translate(body: dict[str, Any], ctx: Ctx) -> dict[str, Any]:
        return upstream.from_hub(client.to_hub(body, ctx, upstream), ctx)

    return translate


# every (client, upstream) pair of rows
DIRECTIONS: dict[tuple[str, str], Direction] = {
    (c.name, u.name): Direction(c.name, u.name, _translator(c, u), tool_stage=u.tool_stage)  # type: ignore[arg-type]
    for c in SPECS.values()
    for u in SPECS.values()
}


def open_bridge(
    body: dict[str, Any],
    client: str,
    upstream: str,
    ctx: Ctx,
    *,
    incomplete_as_completed: bool = False,
    mask: SecretMask = NO_SECRETS,
    websocket: bool = False,
    answered: dict[str, Any] | None = None,
    json_array: bool = False,
) -> tuple[dict[str, Any], Bridge]:
    """Translate a checked client body for the upstream; the Bridge that answers it
    (``websocket``: its events framed for a Responses WebSocket, see ``WSFraming``;
    ``json_array``: its stream as one JSON array, ``JSONArrayFraming``)."""
    d = DIRECTIONS[(client, upstream)]
    spec, up = SPECS[client], SPECS[upstream]
    # every top-level field by its row for this upstream (transformers/fields.py)
    sent = fields.screen(body, client, upstream, ctx)
    echo: dict[str, Any] = {}
    if spec.items:
        # remote compaction (transformers/compaction.py): sealed items expanded, a trigger
        # turned into the summarisation request when the upstream does not compact natively
        sent = compaction.prepare(sent, ctx, up.native_items)
        # every input item type by its row for this upstream (transformers/items.py)
        sent = items.prepare(sent, ctx, up.native_items)
        echo = {k: body[k] for k in ECHO if k in body}
        if upstream == client:
            echo.update((k, body[k]) for k in ECHO_SAME_PROTOCOL if k in body)
        if answered:  # what the app itself honoured (its response store: store, previous_response_id)
            echo.update(answered)
    out = d.translate(sent, ctx)
    out["stream"] = bool(body.get("stream"))
    opts = body.get("stream_options")
    include_usage = bool(opts.get("include_usage")) if isinstance(opts, dict) else False
    if not spec.usage_opt_in:
        include_usage = True
    bridge = Bridge(
        d, ctx, include_usage=include_usage, incomplete_as_completed=incomplete_as_completed, echo=echo, mask=mask
    )
    if websocket:
        bridge.framing = WSFraming()
    elif json_array:
        bridge.framing = JSONArrayFraming()
    return out, bridge


class Bridge:
    """One request's answer, upstream bytes in, client bytes out (see the module docstring)."""

    __slots__ = (
        "direction",
        "_upstream",
        "_client",
        "_options",
        "ctx",
        "decoder",
        "stage",
        "compaction",
        "encoder",
        "parser",
        "_framing",
        "mask",
        "terminal",
        "finished",
        "broken",
        "crashed",
        "error_code",
        "_incomplete_as_completed",
        "_echo",
        "_result",
        "_done_sent",
        "_closed",
        "last_frame",
        "_last_event",
        "_chat",
        "passthrough",
        "lane",
        "rlane",
        "alane",
        "runs",
        "_learning",
        "usage",
        "chars",
        "tap",
    )

    def __init__(
        self,
        direction: Direction,
        ctx: Ctx,
        *,
        include_usage: bool = True,
        incomplete_as_completed: bool = False,
        echo: dict[str, Any] | None = None,
        mask: SecretMask = NO_SECRETS,
    ) -> None:
        self.direction = direction
        self.ctx = ctx
        self.mask = mask
        self._chat = SPECS[direction.client].sse_done  # a Chat client (its chunks, its error chunk, [DONE])
        self._incomplete_as_completed = incomplete_as_completed
        self._echo = echo or {}
        self._result: dict[str, Any] | None = None  # complete()'s answer object
        self._upstream = SPECS[direction.upstream]
        self._client = SPECS[direction.client]
        self._options = EncoderOptions(
            include_usage=include_usage, incomplete_as_completed=incomplete_as_completed, echo=self._echo
        )
        self.decoder: Any = self._upstream.decoder(ctx)
        self.stage = ToolStage(ctx, self._client.tool_kinds) if direction.tool_stage and needed(ctx) else None
        # a synthesised compaction: the model's summary becomes the one compaction item
        self.compaction = compaction.CompactionStage(ctx) if ctx.compaction and not self._chat else None
        self.encoder: Any = self._client.encoder(ctx, self._options)
        self.parser = sse.SSEParser()
        self.framing = SSEFraming(direction.client)
        self.terminal = ""
        self.finished = False  # the decoder has ended: nothing more to read upstream
        self.broken = False  # the guard fired: nothing more goes out
        self.crashed: BaseException | None = None
        self.error_code = ""
        self._done_sent = False
        self._closed = False  # the client's terminal went out
        # the terminal event as written for the client, and its object (``restate``)
        self.last_frame = b""
        self._last_event: dict[str, Any] | None = None
        # Chat → Chat text chunks the full path would write unchanged go out as they came
        # (transformers/passthrough.py); None: every event takes the full path
        up = self._upstream
        self.passthrough = ChatPassthrough() if up.lanes and self._client is up else None
        # a Chat upstream's text chunks read off their bytes against the stream's own template
        # (transformers/chat_text_lane.py), where _blocks reads them (on Chat → Chat, the
        # chunks the passthrough does not take: an upstream's own key order or fields)
        self.lane = ChatTextLane() if up.lanes else None
        # and its reasoning chunks (``decoder.reasoning``), against a template of their own
        self.rlane = ChatTextLane("reasoning") if up.lanes else None
        # and its tool calls' argument chunks (``decoder.args``), against a template of their own
        self.alane = ChatTextLane("arguments") if up.lanes else None
        # a Responses upstream's runs of text deltas read off their bytes against the stream's
        # own template (transformers/text_runs.py), learnt where _blocks reads one that
        # _text_runs offers (a Chat upstream's text chunks have the passthrough and the lane)
        self.runs = TextRuns() if up.runs else None
        self._learning = False  # the event _text_runs offers to teach the runs' template
        # what the capture records (app/capture.py): called with (what, what came in, the client
        # bytes it made) after each call that takes upstream input; None: nothing recorded
        self.tap: Callable[[str, Any, bytes], None] | None = None
        self.usage: dict[str, Any] | None = None  # the upstream's, once it came (Responses shape)
        # characters of output written for the client: text, reasoning, refusal, arguments
        # (a passthrough run's: the bytes of its texts as they came, escapes included)
        self.chars = 0

    @property
    def framing(self) -> SSEFraming | WSFraming | JSONArrayFraming:
        """How events are framed for the client's transport (SSE by default; ``open_bridge``
        sets the WebSocket's); a Responses encoder writes its text deltas framed so."""
        return self._framing

    @framing.setter
    def framing(self, framing: SSEFraming | WSFraming | JSONArrayFraming) -> None:
        self._framing = framing
        self.encoder.frame_deltas(framing.delta_frame)

    @property
    def repairs(self) -> list[str]:
        return self.ctx.repairs

    # -- streaming ------------------------------------------------------------------------

    def receive_data(self, chunk: bytes) -> bytes:
        if self.broken:
            return b""
        chunk_in = chunk
        out: list[bytes] = []
        try:
            if self.passthrough is not None:
                chunk = self._run(chunk, out)
            elif self.runs is not None and len(chunk) >= _RUN_READ:
                # (a read of an event or two, as at token rate, is cheaper the full way)
                chunk = self._text_runs(chunk, out)
            self._feed(chunk, out)
        except sse.SSEOverflow as e:
            self._crash(out, e, "upstream_bad_event", str(e))
        except Exception as e:
            self._crash(out, e)
        if self.tap is not None:
            data = b"".join(out)
            self.tap("data", chunk_in, data)
            return data
        return b"".join(out)

    def end(self) -> bytes:
        data = self._end()
        if self.tap is not None:
            self.tap("end", None, data)
        return data

    def _end(self) -> bytes:
        out: list[bytes] = []
        if not self.broken:
            try:
                for ev in self.parser.end():
                    self._event(ev.data, self.decoder, out)
                    if self.broken:
                        break
                else:
                    self._end_decoder(out)
                    tail = self.encoder.end()
                    if tail:
                        out.extend(self._frame(tail))
                        self._closed = True
            except Exception as e:
                self._crash(out, e)
        # a Chat stream ends with [DONE] unless it ended with an error chunk (also when the
        # guard fired after the finish chunk went out)
        if self._chat and not self.encoder.failed and not self._done_sent:
            self._done_sent = True
            out.append(self._framing.done())
        # a JSON array is closed whatever ended it
        if self._framing.__class__ is JSONArrayFraming and not self._done_sent:
            self._done_sent = True
            out.append(self._framing.done())
        return b"".join(out)

    def fail(self, code: str, message: str) -> bytes:
        """Inject a terminal failure (a transport fault mid-stream) into the encoder."""
        if self.terminal or self.broken:
            return b""
        out: list[bytes] = []
        try:
            self._encode([Finish("failed", error=stream_error(code, message))], out)
        except Exception as e:
            self._crash(out, e, code, message)
        if self.tap is not None:
            self.tap("fail", {"code": code, "message": message}, b"".join(out))
        return b"".join(out)

    def interrupt(self, how: str) -> bytes:
        """End a Responses client's answer now (the WebSocket's cancel, ``how="cancelled"``,
        or steering, ``how="steered"``): ``ResponsesStreamEncoder.interrupt``, framed; b""
        for another client, or once the answer has its terminal."""
        if self._chat or self.broken or self.terminal or not isinstance(self.encoder, ResponsesStreamEncoder):
            return b""
        out = self._frame(self.encoder.interrupt(how))
        self.terminal = "client_cancel" if how == "cancelled" else "incomplete"
        self._closed = True
        return b"".join(out)

    def heartbeat(self) -> bytes:
        """What to send during a long upstream silence: a real Responses event (Codex's idle
        timer ignores SSE comments), an SSE comment for Chat clients."""
        if self.broken:
            return b""
        if self._chat:
            return b"" if self.terminal else self._framing.comment()
        try:
            return b"".join(self._frame(self.encoder.heartbeat()))
        except Exception:  # nothing worth failing the stream for: the next event will tell
            return b""

    def replay(self, obj: dict[str, Any]) -> bytes:
        """A whole answer object (an upstream that answered a stream request without
        streaming) as the client's complete stream: the events its stream would have given."""
        out: list[bytes] = []
        try:
            self._encode(self._decode_object(obj), out)
            self.finished = True
            if self.stage is not None:
                self._encode_stage_end(out)
        except Exception as e:
            self._crash(out, e)
        data = b"".join(out) + self._end()
        if self.tap is not None:
            self.tap("object", obj, data)
        return data

    def empty(self) -> bytes:
        """A complete response that produces nothing, without asking the upstream (a
        Responses WebSocket warm-up, ``generate: false``)."""
        out: list[bytes] = []
        self.finished = True
        self._encode([Finish("completed")], out)
        return b"".join(out)

    def response_object(self) -> dict[str, Any] | None:
        """A Responses client's response object as it received it, once the answer is whole
        (the app stores it); None for a Chat client or before the terminal."""
        if self._chat:
            return None
        if self._result is not None:
            return self._result
        return self.encoder.response if self._closed and self.terminal else None

    def restate(self) -> bytes:
        """The end of the client's answer written again from its response object as it is
        now (the app changed it after the terminal: ``store`` false for a put that failed):
        a whole answer's body, or a stream's terminal event framed (``last_frame``)."""
        if self._result is not None:
            return orjson.dumps(self._result)
        return self._framing.frame(self._last_event) if self._last_event is not None else b""

    # -- non-streaming --------------------------------------------------------------------

    def complete(self, obj: dict[str, Any]) -> tuple[int, bytes]:
        """The client's answer object for the upstream's answer object, through the same
        machines (a plain answer as they would write it, by the client row's ``straight``
        writer for the upstream); raises ``AnswerError`` when the answer failed."""
        if self.tap is None:
            return self._complete(obj)
        try:
            status, body = self._complete(obj)
        except AnswerError as e:
            self.tap("object", obj, orjson.dumps({"error": e.error}))
            raise
        self.tap("object", obj, body)
        return status, body

    def _complete(self, obj: dict[str, Any]) -> tuple[int, bytes]:
        ctx = self.ctx
        try:
            if self.stage is None and self.compaction is None:
                up = self._upstream.name
                for name, write in self._client.straight:
                    if name == up:
                        s = write(obj, ctx)  # the plain answer written straight, else the machines
                        if s is not None:
                            if s.usage is not None:  # (kept, as the machines keep it, if the write fails)
                                self.usage = s.usage
                            self.chars += s.chars
                            out = _dump_whole(s.result)  # (it may refuse: the guard below)
                            self.terminal = s.terminal
                            self._result = s.result
                            return 200, out
                        break
            events = self._decode_object(obj)
            self._account(events)
            if self.stage is not None:
                staged: list[Event] = []
                for ev in events:
                    staged.extend(self.stage.feed(ev))
                staged.extend(self.stage.end())
                events = staged
            if self.compaction is not None:
                events = [e for ev in events for e in self.compaction.feed(ev)]
            whole = self._client.whole(events, ctx, self._options, self.mask)
            result, err, self.terminal = whole.result, whole.error, whole.terminal
            body = None if err else _dump_whole(result)
        except _TooDeep:
            self.terminal = "failed"
            raise AnswerError(
                stream_error("upstream_bad_response", "the upstream sent content nested too deep to pass on"), bad=True
            ) from None
        except Exception as e:
            self.terminal = "failed"
            raise AnswerError(
                stream_error("upstream_bad_response", "the upstream answered with a body the proxy could not process"),
                bad=True,
            ) from e
        if err or body is None:
            error = self.mask.error(err if isinstance(err, dict) else {})
            raise AnswerError(error, bad=error.get("code") in BAD)
        self._result = result
        return 200, body

    def tokens(self) -> tuple[int, int, int, int, int] | None:
        """The upstream's usage as (input, output, cache read, cache write, reasoning)
        tokens (the last three are parts of the first two); None when no usage came."""
        u = self.usage
        if u is None:
            return None
        itd = u["input_tokens_details"]
        return (
            u["input_tokens"],
            u["output_tokens"],
            itd["cached_tokens"],
            itd["cache_write_tokens"],
            u["output_tokens_details"]["reasoning_tokens"],
        )

    def _account(self, events: list[Event]) -> None:
        """A whole answer's usage and output characters (a stream's are noted in ``_encode``
        and the fast lanes as they go)."""
        chars = 0
        for ev in events:
            if type(ev) is Text or type(ev) is Reasoning or type(ev) is Refusal:
                chars += len(ev.text)
            elif type(ev) is ToolCall:
                chars += len(ev.arguments)
            elif type(ev) is Usage:
                self.usage = ev.usage
        self.chars += chars

    # -- the pieces -----------------------------------------------------------------------

    def _decode_object(self, obj: dict[str, Any]) -> list[Event]:
        return self._upstream.decode_object(obj, self.ctx)

    def _frame(self, objs: list[dict[str, Any]]) -> list[bytes]:
        frame = self._framing.frame
        return [frame(o) for o in objs]

    def _event(self, data: str, decoder: Any, out: list[bytes]) -> None:
        pt = self.passthrough
        if pt is not None and self._passes(data, pt, decoder):
            self.chars += len(data) - pt.around
            out.append(b"data: " + data.encode() + b"\n\n")
            return
        if data == "[DONE]":
            self._end_decoder(out)
            return
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            obj = None
        if obj.__class__ is not dict:
            # a junk line between valid events (`data: ping`, a cut JSON fragment, an HTML
            # comment): skipped, the stream goes on; a stream that never reaches its
            # terminal still fails (upstream_stream_truncated at its end)
            self.ctx.repaired("sse_junk_line_skipped")
            return
        self._object(obj, decoder, out)

    def _object(
        self, obj: dict[str, Any], decoder: Any, out: list[bytes], data: bytes | None = None, block: bytes = b""
    ) -> None:
        """An upstream event's JSON object through the decoder, the stages and the encoder
        (``data``: its JSON's bytes, when read off them, for the text lane to learn from;
        ``block``: its whole event's, for the text runs to learn from when ``_text_runs``
        offers it)."""
        # the commonest event, a plain text delta, without the decoder's dispatch and, when
        # the tool stage would hand it on as it is, straight to the encoder
        text = decoder.text(obj)
        if text is None:
            # a plain reasoning delta, the same way (one whose bytes do not name reasoning, or
            # name it only by a key with an escape, goes the full way: the same, and rare)
            ev = decoder.reasoning(obj) if data is None or b"reasoning" in data else None
            if ev is None:
                # and a tool call's plain argument delta (its bytes name "tool_calls",
                # "function_call_arguments" or "custom_tool_call_input")
                call = decoder.args(obj) if data is None or b"_call" in data else None
                if call is None:
                    self._encode(decoder.feed(obj), out)
                    return
                alane = self.alane
                if alane is not None and data is not None:
                    alane.learn(data, call.arguments)
                self._args(call, out)
                return
            rlane = self.rlane
            if rlane is not None and data is not None:
                rlane.learn(data, ev.text)
            self._reasoning(ev, out)
            return
        lane = self.lane
        if lane is not None and data is not None:
            lane.learn(data, text)
        if block and self._learning:
            self.runs.learn(block, obj, text)  # type: ignore[union-attr]
        self._text(text, out)

    def _text(self, text: str, out: list[bytes]) -> None:
        """A plain text delta (``decoder.text``): straight to the encoder's own writer when
        the tool stage would hand it on as it is, else through the stages."""
        stage = self.stage
        if (stage is None or stage.plain_text) and self.compaction is None:
            written = self.encoder.text_delta(text)  # framed (the framing setter)
            if written is not None:
                self.chars += len(text)
                out.append(written)
                return
        self._encode([Text(text)], out)

    def _reasoning(self, ev: Reasoning, out: list[bytes]) -> None:
        """A plain reasoning delta (``decoder.reasoning``), as ``_text``."""
        stage = self.stage
        if (stage is None or stage.plain_text) and self.compaction is None:
            written = self.encoder.reasoning_delta(ev)  # framed (the framing setter)
            if written is not None:
                self.chars += len(ev.text)
                out.append(written)
                return
        self._encode([ev], out)

    def _args(self, ev: ToolCall, out: list[bytes]) -> None:
        """A plain argument delta (``decoder.args``), as ``_text``: straight to the encoder's
        writer when the tool stage would hand it on as it is (a ``plain`` call)."""
        stage = self.stage
        if (stage is None or stage.plain_call(ev.index)) and self.compaction is None:
            written = self.encoder.args_delta(ev)  # framed (the framing setter)
            if written is not None:
                self.chars += len(ev.arguments)
                out.append(written)
                return
        self._encode([ev], out)

    def _held_end(self, chunk: bytes, out: list[bytes]) -> int:
        """The event the parser holds unfinished, finished from ``chunk`` the full way: where
        ``chunk``'s own events start (0 when it holds none; -1 when ``chunk`` does not finish
        it: all of it is the parser's)."""
        if not self.parser.pending:
            return 0
        j = chunk.find(b"\n\n")
        if j < 0:
            return -1
        self._feed(chunk[: j + 2], out)
        return j + 2

    def _run(self, chunk: bytes, out: list[bytes]) -> bytes:
        """Forward the runs of passthrough events in ``chunk`` as their bytes (passthrough.py);
        what is left, for the parser.  An event the parser holds unfinished is finished
        first; between runs one event at a time goes through the full path, until
        ``_LANE_MISSES`` in a row were no run (a stream's opening: its role chunk and first
        text; its end: finish and usage), then the rest goes to the parser at once."""
        pos = self._held_end(chunk, out)
        if pos < 0:
            return chunk
        if self.broken:
            return b""
        n = len(chunk)
        pt: ChatPassthrough = self.passthrough  # type: ignore[assignment]
        enc = self.encoder
        misses = 0
        while pos < n and misses < _LANE_MISSES:
            if not pt.armed and enc.plain_text:
                pt.arm(*enc.text_template())
            if (
                pt.armed
                and enc.plain_text
                and self.decoder.plain_text
                and (self.stage is None or self.stage.plain_text)
                and not self._closed
                and self._framing.__class__ is SSEFraming
            ):
                end = pt.run(chunk, pos)
                if end > pos:
                    self.chars += pt.ran  # (the bytes of its texts)
                    out.append(chunk[pos:end])
                    pos = end
                    misses = 0
                    continue
            misses += 1
            j = chunk.find(b"\n\n", pos)
            if j < 0:
                break
            self._feed(chunk[pos : j + 2], out)
            if self.broken:
                return b""
            pos = j + 2
        return chunk[pos:]

    def _text_runs(self, chunk: bytes, out: list[bytes]) -> bytes:
        """The runs of text events in ``chunk`` through the decoder and the encoder at once
        (``text_runs.py``); what is left, for the parser.  An event the parser holds
        unfinished is finished first.  Until the template is learnt (where ``_blocks`` reads a
        text event this offers it: ``_learning``), the events before one that may teach it
        go the full way together, and that one alone, for at most ``_RUN_OPENING`` of them;
        then a run is taken wherever one starts, and the events between two runs go the full
        way together.  From a run that is not valid UTF-8 on, the rest goes the full way."""
        runs: TextRuns = self.runs  # type: ignore[assignment]
        if runs.spent:
            self.runs = None
            return chunk
        if runs.mark not in chunk:  # no event of it may teach the template or start a run
            return chunk
        pos = self._held_end(chunk, out)
        if pos < 0:
            return chunk
        if self.broken:
            return b""
        n = len(chunk)
        tries = 0
        while pos < n:
            if not runs.armed:  # the events before the next one that may teach it, together
                start = runs.candidate(chunk, pos) if tries < _RUN_OPENING else -1
                if start < 0:
                    break
                if start > pos:
                    self._feed(chunk[pos:start], out)
                    if self.broken:
                        return b""
                    pos = start
                j = chunk.find(b"\n\n", pos)
                if j < 0:
                    break
                tries += 1
                self._learning = True  # (_object hands its block to runs.learn)
                try:
                    self._feed(chunk[pos : j + 2], out)
                finally:
                    self._learning = False
                if self.broken:
                    return b""
                pos = j + 2
                continue
            else:
                if self._texts_open():
                    end, iid, quoted = runs.take(chunk, pos)
                    if quoted:
                        out.append(self._texts(iid, quoted))
                        pos = end
                        continue
                    if end < 0:  # not valid UTF-8: the rest the full way
                        break
                j = runs.next_start(chunk, pos)
                if j < 0:
                    break
            self._feed(chunk[pos:j], out)
            if self.broken:
                return b""
            pos = j
        return chunk[pos:]

    def _texts_open(self) -> bool:
        """Would a text event go from ``decoder.text`` through ``_text`` to the encoder's text
        writer (the stages handing text on as it is, the decoder and the encoder in their text
        state)?"""
        stage = self.stage
        return (
            (stage is None or stage.plain_text)
            and self.compaction is None
            and self.decoder.text_open
            and self.encoder.text_open
        )

    def _texts(self, iid: bytes, quoted: list[bytes]) -> bytes:
        """A run's text events (a Responses item ``iid``, each text's JSON), ``_texts_open``,
        as ``_object`` would take each one, all at once: the same state change, the same
        bytes."""
        texts = orjson.loads(b"[" + b",".join(quoted) + b"]")
        self.decoder.texts(iid.decode(), texts)
        self.chars += sum(map(len, texts))
        return self.encoder.text_deltas(quoted, texts)

    def _feed(self, data: bytes, out: list[bytes]) -> None:
        """The events of ``data`` through the full path, until the Bridge breaks.  The events
        of the two shapes upstreams send, whole in ``data``, are read off the bytes
        (``_blocks``); anything else, and an event the parser holds unfinished, is the
        parser's."""
        if 13 not in data:  # CR: the parser's line endings
            j = data.find(b"\n\n") if self.parser.pending else -1
            if j >= 0:  # the parser finishes the event it holds (and then holds nothing)
                self._parsed(data[: j + 2], out)
                data = data[j + 2 :]
                if self.broken:
                    return
            data = self._blocks(data, out)  # (an event still held: no whole one in data)
            if not data or self.broken:
                return
        self._parsed(data, out)

    def _parsed(self, data: bytes, out: list[bytes]) -> None:
        decoder = self.decoder
        for ev in self.parser.feed(data):
            self._event(ev.data, decoder, out)
            if self.broken:
                return

    def _blocks(self, data: bytes, out: list[bytes]) -> bytes:
        """The whole events of ``data`` (no CR in it, nothing held by the parser) through the
        full path; the rest, for the parser.  An event of one of the parser's two fast shapes
        (one ``data:`` line; an ``event:`` line then one ``data:`` line, whose name nobody
        reads: the JSON's ``type`` says it) goes from its bytes to ``_object``, its JSON
        parsed as bytes, as the parser and ``_event`` would take it: decoded as UTF-8 (orjson
        refuses bytes that are not, and then ``_event`` takes the text the parser would have
        made, invalid bytes replaced), ``[DONE]`` ending the decoder, a line that is not a
        JSON object going to ``_event`` (a junk line).  An event of any other shape goes to
        the parser alone, whole: the same events as in one feed.  (Slices, ``partition`` and
        ``in``: ``find`` and ``startswith`` parse their arguments, ~500 instructions a call.)"""
        decoder = self.decoder
        lane = self.lane
        rlane = self.rlane
        alane = self.alane
        blocks = data.split(b"\n\n")
        rest = blocks.pop()
        for block in blocks:
            payload = None
            name, sep, after = block.partition(b"\ndata: ")
            if sep:
                if name[:7] == b"event: " and 10 not in name and 10 not in after:
                    payload = after
            elif block[:6] == b"data: ":
                if 10 not in block:
                    payload = block[6:]
            if payload is None:
                self._parsed(block + b"\n\n", out)
            else:
                # what orjson.loads + decoder.text would give, read off the bytes
                text = lane.text(payload) if lane is not None and lane.armed and decoder.plain_text else None
                if text is not None:
                    self._text(text, out)
                elif rlane is not None and rlane.armed and decoder.plain_reasoning and (text := rlane.text(payload)):
                    self._reasoning(Reasoning(text), out)
                elif (
                    alane is not None
                    and alane.armed
                    and (text := alane.text(payload))
                    and (call := decoder.args_to(alane.key, text)) is not None
                ):
                    self._args(call, out)
                else:
                    try:  # not for the Chat end, once a stream: orjson's refusal costs ~1.3 µs
                        obj = orjson.loads(payload) if payload != b"[DONE]" else None
                    except orjson.JSONDecodeError:
                        obj = None
                    if obj.__class__ is dict:
                        self._object(obj, decoder, out, payload, block)
                    else:  # [DONE], a junk line, bytes that are not UTF-8: as the parser hands it
                        self._event(payload.decode("utf-8", "replace"), decoder, out)
            if self.broken:
                return b""
        return rest

    def _passes(self, data: str, pt: ChatPassthrough, decoder: Any) -> bool:
        """Is ``data`` a text chunk the full path would write as it is (passthrough.py's table)?"""
        enc = self.encoder
        if not pt.armed:
            if not enc.plain_text:
                return False
            pt.arm(*enc.text_template())
        return (
            pt.text(data)
            and decoder.plain_text
            and enc.plain_text
            and (self.stage is None or self.stage.plain_text)
            and not self._closed
            and not self.broken
            and self._framing.__class__ is SSEFraming
        )

    def _encode(self, events: list[Event], out: list[bytes]) -> None:
        if self.stage is not None:
            staged: list[Event] = []
            for ev in events:
                staged.extend(self.stage.feed(ev))
            events = staged
        if self.compaction is not None:
            events = [e for ev in events for e in self.compaction.feed(ev)]
        enc = self.encoder
        chat = self._chat
        frame = self._framing.frame
        for ev in events:
            if type(ev) is Text:
                self.chars += len(ev.text)
                # the commonest event, already serialized by the encoder when it is one plain delta
                data = enc.text_delta(ev.text)  # framed (the framing setter)
                if data is not None:
                    out.append(data)
                    continue
            elif type(ev) is Reasoning or type(ev) is Refusal:
                self.chars += len(ev.text)
            elif type(ev) is ToolCall:
                self.chars += len(ev.arguments)
            elif type(ev) is Usage:
                self.usage = ev.usage
            fin = type(ev) is Finish
            if fin and not self._closed:
                self.terminal = ev.status  # type: ignore[union-attr]
                if ev.error:  # type: ignore[union-attr]
                    ev.error = self.mask.error(ev.error)  # type: ignore[union-attr]
                    code = ev.error.get("code")  # type: ignore[union-attr]
                    self.error_code = code if isinstance(code, str) else "upstream_error"
                before = len(out)
            for obj in enc.feed(ev):
                out.append(frame(obj))
            if fin:
                if not self._closed and len(out) > before:  # the terminal event is the last one written
                    self.last_frame, self._last_event = out[-1], obj
                self._closed = True
            elif not self._closed and (enc.failed if chat else enc.done):
                # the encoder ended the stream itself (an argument mismatch, an item it cannot write)
                self._closed = True
                self.terminal = "failed"
                self.error_code = self.error_code or "invalid_tool_arguments"

    def _end_decoder(self, out: list[bytes]) -> None:
        if self.finished:
            return
        self.finished = True
        self._encode(self.decoder.end(), out)
        if self.stage is not None:
            self._encode_stage_end(out)

    def _encode_stage_end(self, out: list[bytes]) -> None:
        events = self.stage.end()  # type: ignore[union-attr]
        stage, self.stage = self.stage, None
        try:
            self._encode(events, out)
        finally:
            self.stage = stage

    def _crash(
        self,
        out: list[bytes],
        exc: BaseException,
        code: str = "upstream_bad_event",
        message: str = "the upstream sent an event the proxy could not process",
    ) -> None:
        """The guard (see the module docstring): the failure terminal, once, then nothing."""
        self.broken = True
        self.finished = True
        self.crashed = exc
        if self._closed:
            return
        self._closed = True
        self.terminal = "failed"
        self.error_code = code
        err = stream_error(code, message)
        enc = self.encoder
        try:
            objs = enc.feed(Finish("failed", error=err))
            if objs:
                out.extend(self._frame(objs))
                return
        except Exception:
            pass
        out.extend(self._frame(enc.abort(err)))
