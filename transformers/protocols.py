"""The protocols as rows of data: everything the proxy does differently per protocol.

Theory of operation
-------------------
Chat Completions, Responses, Anthropic Messages and Gemini's own API are peers.  What the
proxy does with a protocol is read off its row of ``SPECS``, never off a branch on its name
(``tests/unit/test_protocol_rows.py`` fails on such a branch outside the rows).  The Bridge
(``transformers/bridge.py``) reads the stream and translation fields; the edge
(``app/main.py``, ``app/prepare.py``, ``app/exchange.py``) reads the routes, keys and error
shapes; ``providers/`` reads the upstream's URL and auth headers.

The client side (a client speaking the protocol to the proxy):

==================  ========================================================================
field               what it is
==================  ========================================================================
``title``           its name for people, in error messages
``check``           what its bodies must be (``request_check.BodyCheck``)
``to_hub``          its body in the hub's form, the Chat one (``HUB``); it sets ``ctx.tools``
                    to the tools the client offered, which the stream stages map calls back
                    to; ``toward`` is the upstream's row (its ``title``, its ``signed``)
``same``            its body toward an upstream of the same protocol, without the hub
                    (None: by way of the hub, as any other)
``encoder``         a ``StreamEncoder`` writing the client's events
``whole``           a whole decoded answer as the client's answer object, with the error
                    it carries and the terminal it amounts to (``Whole``)
``straight``        (upstream protocol, writer): a plain whole answer of that upstream
                    written straight as the client's, without the machines
                    (``chat_whole.py``, ``gemini_whole.py``); the writer returns a
                    ``Straight``, or None and the Bridge takes ``whole``
``bare_sse``        SSE as bare ``data:`` lines (Chat, Gemini); otherwise each event has
                    its ``event:`` line (Responses, Messages)
``sse_done``        the stream ends with ``data: [DONE]`` (Chat)
``items``           its input items and compaction items go through ``items.py`` and
                    ``compaction.py``, and its answer echoes the request's fields, the
                    protocol's own ones only toward an upstream of the same protocol
                    (Responses)
``usage_opt_in``    usage only when ``stream_options.include_usage`` asks (Chat)
``tool_kinds``      it offers custom tools and namespaces, whose calls the tool stage gives
                    back as such (Responses)
``via_hub``         it reaches the other protocols only through the Chat form: a provider
                    that speaks Chat and a ``native_items`` protocol is spoken to in Chat
                    (Messages, Gemini)
``ends_at_terminal`` its stream is over at its terminal event: the pump answers and closes
                    without reading the upstream's end (Responses)
``stored``          its turns may be stored and chained by the proxy (``store``,
                    ``previous_response_id``, ``item_reference``: ``app/stored.py``)
``recalls_signatures`` its clients drop Gemini's thought signatures, so the app keeps them
                    between turns (``app/signatures.py``) (Chat)
``route``           its proxy route; ``{model}`` in it: the model and the method are the
                    path's, and the edge puts ``model`` and ``stream`` in the body (Gemini)
``stream_route``    with a ``{model}`` route: the route whose method asks for a stream
``key_query``       (parameter, header): the query may carry the client key, which counts as
                    that header when no header carries one (Gemini's ``?key=``)
``error``           an error answer's body in its shape: ``error(status, err, request_id)``
``error_prefix``    the path and the paths under it answer an unknown route in its error
                    shape (else OpenAI's)
``vendor_headers``  (header, quirk): a client header that goes to an upstream of the same
                    protocol when the quirk is on there, else is named dropped (Messages:
                    ``anthropic-beta`` to Anthropic itself)
``count``           its token count route (``TokenCount``: ``token_count.py``); the
                    upstream's own count when the model's upstream speaks it (Messages,
                    Gemini)
``models``          its own model list (``ModelList``: ``model_list.py``); a client
                    without one reads OpenAI's ``/v1/models`` (Gemini)
==================  ========================================================================

The upstream side (an upstream the proxy speaks the protocol to):

==================  ========================================================================
field               what it is
==================  ========================================================================
``decoder``         a ``StreamDecoder`` over the upstream's parsed events
``decode_object``   a non-streamed answer object as the events it stands for
``from_hub``        a body in the hub's form as this protocol's
``signed``          the hub keeps Anthropic's signed thinking blocks for it (``Ctx.signed``)
``tool_stage``      its tool calls go through the tool stage (all but Responses: their
                    custom and namespaced tools went as functions)
``native_items``    it reads Responses items natively: item references, stored responses,
                    compaction items and encrypted reasoning may go to it (Responses)
``lanes``           a fast path: chunks read off their bytes by the Chat lanes
                    (``chat_text_lane.py``), and passed through as they came to a client of
                    the same protocol (``passthrough.py``) (Chat)
``runs``            a fast path: runs of text deltas a read at a time (``text_runs.py``)
                    (Responses)
``path``            its URL after the base URL; ``{model}`` and ``{method}`` holes: the
                    upstream model, and ``methods[stream]``
``methods``         (whole, stream) method names for a ``{method}`` path (Gemini)
``stream_query``    query parameters that ask for a stream as SSE (Gemini's ``alt=sse``): the
                    proxy sends them to the upstream; a client's stream asked without them
                    is answered as one JSON array, streamed (``bridge.JSONArrayFraming``)
``stream_in_body``  the body carries ``stream``; else the URL does (Gemini)
``api_prefix``      added to a base URL that does not end with it (Messages' ``/v1``: a base
                    URL as Claude Code's ``ANTHROPIC_BASE_URL`` takes it)
``deployment_path`` its path on a deployment-name URL (Azure), ``{deployment}`` in it
``key_header``      the header that carries the provider's key ('': the profile's scheme)
``fixed_headers``   headers every request carries (Messages' ``anthropic-version``)
==================  ========================================================================

``StreamDecoder`` and ``StreamEncoder`` are the interfaces every decoder and encoder keeps
(``typing.Protocol``: checked by mypy where the Bridge calls them).  A protocol's fast paths
(the Chat lanes, the Responses text runs) stay the Bridge's own capabilities, each switched
on by the row it serves.

The Bridge's ``DIRECTIONS`` is every (client, upstream) pair of rows: ``same`` for a
protocol toward itself, else ``upstream.from_hub(client.to_hub(body, ctx, upstream))``.
Adding a protocol is its modules (checker, translators, decoder, encoder) and a row here;
``docs/architecture.md`` says which tests pick it up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from . import request_check
from .chat_decode import ChatStreamDecoder, decode_chat_completion
from .chat_encode import ChatStreamEncoder, encode_chat_completion
from .chat_whole import Straight, chat_chat
from .context import Ctx
from .errors import RequestError
from .events import Event, Finish
from .gemini_decode import GeminiStreamDecoder, decode_gemini
from .gemini_encode import GeminiEncoder, error_object
from .gemini_whole import chat_gemini, gemini_chat, gemini_gemini
from .masking import SecretMask
from .messages_decode import MessagesStreamDecoder, decode_message
from .messages_encode import MessagesEncoder
from .model_list import ModelFacts, gemini_entry
from .request_c2g import chat_to_gemini
from .request_c2m import chat_to_messages
from .request_c2r import chat_to_responses, toolinfo_from_chat
from .request_check import BodyCheck
from .request_g2c import gemini_to_chat
from .request_m2c import messages_to_chat
from .request_messages import drop_billing_header, prepare_messages
from .request_quirks import prepare_chat, prepare_responses
from .request_r2c import responses_to_chat
from .responses_decode import ResponsesStreamDecoder, decode_response
from .responses_encode import ResponsesStreamEncoder, encode_response
from .thought_signatures import restore
from .token_count import (
    gemini_body,
    gemini_estimate,
    gemini_request,
    gemini_url,
    messages_body,
    messages_estimate,
    messages_request,
    messages_url,
)

__all__ = [
    "BAD",
    "HUB",
    "SPECS",
    "EncoderOptions",
    "ModelList",
    "ProtocolSpec",
    "StreamDecoder",
    "StreamEncoder",
    "TokenCount",
    "Whole",
    "chat_status",
    "check_body",
    "check_parsed",
    "openai_error",
]

# the error codes of an answer the proxy could not process (rather than the upstream's own failure)
BAD = frozenset({"upstream_bad_response", "upstream_bad_event"})


class StreamDecoder(Protocol):
    """Upstream events (one parsed SSE ``data:`` object at a time) → unified events."""

    def feed(self, chunk: dict[str, Any]) -> list[Event]: ...

    def end(self) -> list[Event]: ...


class StreamEncoder(Protocol):
    """Unified events → the client protocol's events (dicts the Bridge frames)."""

    def feed(self, ev: Event) -> list[dict[str, Any]]: ...

    def end(self) -> list[dict[str, Any]]: ...

    def abort(self, error: dict[str, Any]) -> list[dict[str, Any]]: ...


@dataclass(frozen=True, slots=True)
class EncoderOptions:
    include_usage: bool = True  # Chat: the usage chunk (``stream_options.include_usage``)
    incomplete_as_completed: bool = False  # Responses: an incomplete answer reported completed
    echo: dict[str, Any] | None = None  # Responses: the request fields echoed on the response


@dataclass(frozen=True, slots=True)
class Whole:
    result: dict[str, Any]  # the client's answer object
    error: dict[str, Any] | None  # the error it fails with (already masked), else None
    terminal: str  # completed | incomplete | failed


def chat_status(result: dict[str, Any]) -> str:
    choices = result.get("choices") or [{}]
    return "incomplete" if choices[0].get("finish_reason") in ("length", "content_filter") else "completed"


def _failed(events: list[Event], mask: SecretMask) -> dict[str, Any] | None:
    last = events[-1] if events else None
    err = last.error if isinstance(last, Finish) and last.status == "failed" else None
    return mask.error(err) if err is not None else None


def _whole_chat(events: list[Event], ctx: Ctx, o: EncoderOptions, mask: SecretMask) -> Whole:
    result = encode_chat_completion(events, ctx)
    err = result.get("error")
    return Whole(result, err, "failed" if err else chat_status(result))


def _whole_responses(events: list[Event], ctx: Ctx, o: EncoderOptions, mask: SecretMask) -> Whole:
    result = encode_response(events, ctx, incomplete_as_completed=o.incomplete_as_completed, request_echo=o.echo)
    status = result.get("status")
    terminal = status if status in ("completed", "incomplete", "failed") else "completed"
    err = result.get("error") if status == "failed" else None
    if not (isinstance(err, dict) and err.get("code") in BAD):
        err = None  # an upstream's own failure is a failed response object, as it came
        if isinstance(result.get("error"), dict):
            result["error"] = mask.error(result["error"])
    return Whole(result, err, terminal)


def _whole_messages(events: list[Event], ctx: Ctx, o: EncoderOptions, mask: SecretMask) -> Whole:
    enc = MessagesEncoder(ctx)
    for ev in events:
        enc.feed(ev)
    result = enc.message()
    err = _failed(events, mask)
    return Whole(
        result, err, "failed" if err else ("incomplete" if result["stop_reason"] == "max_tokens" else "completed")
    )


def _whole_gemini(events: list[Event], ctx: Ctx, o: EncoderOptions, mask: SecretMask) -> Whole:
    enc = GeminiEncoder(ctx)
    for ev in events:
        enc.feed(ev)
    result = enc.answer()
    err = _failed(events, mask)
    done = enc.finish_reason in (None, "STOP")
    return Whole(result, err, "failed" if err else ("completed" if done else "incomplete"))


# -- request translation: each protocol to the hub's form and back ---------------------------

Body = dict[str, Any]


def _no_previous(body: Body, toward: ProtocolSpec) -> None:
    if body.get("previous_response_id"):
        # an upstream that stores nothing, and neither does the proxy (its store resolves a
        # stored chain before this): answering without the earlier turns would be a
        # silently wrong answer
        raise RequestError(
            f"previous_response_id is not supported for this model (its upstream speaks {toward.title} and the "
            "proxy keeps no conversation state); send the whole conversation in 'input' with store=false, as Codex does",
            param="previous_response_id",
            code="unsupported_parameter",
        )


def _chat_to_hub(body: Body, ctx: Ctx, toward: ProtocolSpec) -> Body:
    ctx.tools = toolinfo_from_chat(body.get("tools"))  # it is the hub's form: its tools as they are
    return dict(body)


def _responses_to_hub(body: Body, ctx: Ctx, toward: ProtocolSpec) -> Body:
    _no_previous(body, toward)
    return responses_to_chat(body, ctx, signed=toward.signed)


def _messages_to_hub(body: Body, ctx: Ctx, toward: ProtocolSpec) -> Body:
    # Claude Code's billing line would head the upstream's prefix cache (request_messages.py)
    return messages_to_chat(drop_billing_header(body, ctx), ctx)


def _gemini_to_hub(body: Body, ctx: Ctx, toward: ProtocolSpec) -> Body:
    return gemini_to_chat(body, ctx, signed=toward.signed, toward=toward.name)


def _hub_to_chat(hub: Body, ctx: Ctx) -> Body:
    return prepare_chat(hub, ctx, translated=True)


def _hub_to_responses(hub: Body, ctx: Ctx) -> Body:
    return prepare_responses(chat_to_responses(hub, ctx), ctx, translated=True)


def _hub_to_messages(hub: Body, ctx: Ctx) -> Body:
    return prepare_messages(chat_to_messages(hub, ctx), ctx)


def _hub_to_gemini(hub: Body, ctx: Ctx) -> Body:
    # every call's signature decided as toward Gemini's OpenAI-compatible endpoint
    # (thought_signatures.restore), then the Chat form in Gemini's own
    ctx.tools.functions |= toolinfo_from_chat(hub.get("tools")).functions
    restore(hub, ctx)
    return chat_to_gemini(hub, ctx)


def _chat_same(body: Body, ctx: Ctx) -> Body:
    # ``ctx.tools``: the quirk table's same_protocol_toolinfo row
    return prepare_chat(body, ctx, translated=False)


def _responses_same(body: Body, ctx: Ctx) -> Body:
    return prepare_responses(body, ctx, translated=False)


def _messages_same(body: Body, ctx: Ctx) -> Body:
    ctx.tools = toolinfo_from_chat(None)
    return prepare_messages(body, ctx)


# -- error shapes ----------------------------------------------------------------------------


def openai_error(status: int, err: dict[str, Any], request_id: str) -> bytes:
    """OpenAI's error object (Chat, Responses; and every route no protocol owns)."""
    return orjson.dumps({"error": {**err, "request_id": request_id}})


# an HTTP status → Anthropic's error type (a Messages client's error answers)
_ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                     404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                     529: "overloaded_error"}  # fmt: skip


def _anthropic_error(status: int, err: dict[str, Any], request_id: str) -> bytes:
    """Anthropic's ``{"type": "error", "error": {"type", "message"}, "request_id"}``."""
    kind = _ANTHROPIC_ERRORS.get(status, "overloaded_error" if status == 503 else "api_error")
    obj = {"type": "error", "error": {"type": kind, "message": str(err.get("message") or "")}}
    return orjson.dumps({**obj, "request_id": request_id})


def _google_error(status: int, err: dict[str, Any], request_id: str) -> bytes:
    """Google's ``{"error": {"code", "message", "status"}}``."""
    return orjson.dumps(error_object(status, str(err.get("message") or "")))


@dataclass(frozen=True, slots=True)
class TokenCount:
    """A protocol's token count route and its upstream's own count (``token_count.py``)."""

    route: str  # POST; ``{model}`` in it: the model is the path's, else the body's ``model``
    read: Callable[[Any], Body]  # the counted body of the request's JSON (raises RequestError)
    field: str  # the count's field: the answer's ``{field: n}``, and the upstream's answer's
    estimate: Callable[[Body], int]  # the local estimate (an overcount)
    url: Callable[[str], str]  # the upstream's count URL, from its URL for a whole answer
    request: Callable[[Body, Ctx], Body]  # the counted body as the upstream's count request


@dataclass(frozen=True, slots=True)
class ModelList:
    """A protocol's own model list (``model_list.py``)."""

    route: str  # GET: the list; this and ``/{model}``: one model
    field: str  # the list's field: ``{field: [entry, ...]}``
    entry: Callable[[str, ModelFacts], dict[str, Any]]  # one model's, from its public name and facts
    missing: str  # a 404's message for a model it does not know, ``{model}`` its name


@dataclass(frozen=True, slots=True)
class ProtocolSpec:
    """One protocol's row (the tables in the module docstring)."""

    name: str
    title: str
    # the client side
    check: BodyCheck
    to_hub: Callable[[Body, Ctx, ProtocolSpec], Body]
    encoder: Callable[[Ctx, EncoderOptions], Any]
    whole: Callable[[list[Event], Ctx, EncoderOptions, SecretMask], Whole]
    route: str
    error: Callable[[int, dict[str, Any], str], bytes]
    bare_sse: bool
    # the upstream side
    decoder: Callable[[Ctx], Any]
    decode_object: Callable[[dict[str, Any], Ctx], list[Event]]
    from_hub: Callable[[Body, Ctx], Body]
    path: str
    # the client side, optional
    same: Callable[[Body, Ctx], Body] | None = None
    straight: tuple[tuple[str, Callable[[Body, Ctx], Straight | None]], ...] = ()
    sse_done: bool = False
    items: bool = False
    usage_opt_in: bool = False
    tool_kinds: bool = False
    via_hub: bool = False
    ends_at_terminal: bool = False
    stored: bool = False
    recalls_signatures: bool = False
    stream_route: str = ""
    key_query: tuple[str, str] | None = None
    error_prefix: str = ""
    vendor_headers: tuple[tuple[str, str], ...] = ()
    count: TokenCount | None = None
    models: ModelList | None = None
    # the upstream side, optional
    signed: bool = False
    tool_stage: bool = True
    native_items: bool = False
    lanes: bool = False
    runs: bool = False
    methods: tuple[str, str] = ("", "")
    stream_query: tuple[tuple[str, str], ...] = ()
    stream_in_body: bool = True
    api_prefix: str = ""
    deployment_path: str = ""
    key_header: str = ""
    fixed_headers: tuple[tuple[str, str], ...] = ()


ANTHROPIC_VERSION = "2023-06-01"  # the Messages API version every Anthropic-compatible endpoint serves
HUB = "chat"  # the form every translation goes through

SPECS: dict[str, ProtocolSpec] = {
    s.name: s
    for s in (
        ProtocolSpec(
            "chat",
            "Chat Completions",
            check=request_check.CHAT,
            to_hub=_chat_to_hub,
            same=_chat_same,
            encoder=lambda ctx, o: ChatStreamEncoder(ctx, include_usage=o.include_usage),
            whole=_whole_chat,
            straight=(("chat", chat_chat), ("gemini", gemini_chat)),
            route="/v1/chat/completions",
            error=openai_error,
            bare_sse=True,
            sse_done=True,
            usage_opt_in=True,
            recalls_signatures=True,
            decoder=ChatStreamDecoder,
            decode_object=decode_chat_completion,
            from_hub=_hub_to_chat,
            path="/chat/completions",
            deployment_path="/openai/deployments/{deployment}/chat/completions",
            lanes=True,
        ),
        ProtocolSpec(
            "responses",
            "Responses",
            check=request_check.RESPONSES,
            to_hub=_responses_to_hub,
            same=_responses_same,
            encoder=lambda ctx, o: ResponsesStreamEncoder(
                ctx, incomplete_as_completed=o.incomplete_as_completed, request_echo=o.echo
            ),
            whole=_whole_responses,
            route="/v1/responses",
            error=openai_error,
            bare_sse=False,
            items=True,
            tool_kinds=True,
            ends_at_terminal=True,
            stored=True,
            decoder=ResponsesStreamDecoder,
            decode_object=decode_response,
            from_hub=_hub_to_responses,
            path="/responses",
            deployment_path="/openai/responses",
            tool_stage=False,
            native_items=True,
            runs=True,
        ),
        ProtocolSpec(
            "messages",
            "Anthropic Messages",
            check=request_check.MESSAGES,
            to_hub=_messages_to_hub,
            same=_messages_same,
            encoder=lambda ctx, o: MessagesEncoder(ctx),
            whole=_whole_messages,
            route="/v1/messages",
            error=_anthropic_error,
            error_prefix="/v1/messages",
            bare_sse=False,
            via_hub=True,
            vendor_headers=(("anthropic-beta", "anthropic_beta"),),
            count=TokenCount(
                "/v1/messages/count_tokens",
                read=messages_body,
                field="input_tokens",
                estimate=messages_estimate,
                url=messages_url,
                request=messages_request,
            ),
            decoder=MessagesStreamDecoder,
            decode_object=decode_message,
            from_hub=_hub_to_messages,
            path="/messages",
            api_prefix="/v1",
            signed=True,
            key_header="x-api-key",
            fixed_headers=(("anthropic-version", ANTHROPIC_VERSION),),
        ),
        ProtocolSpec(
            "gemini",
            "Gemini",
            check=request_check.GEMINI,
            to_hub=_gemini_to_hub,
            encoder=lambda ctx, o: GeminiEncoder(ctx),
            whole=_whole_gemini,
            straight=(("gemini", gemini_gemini), ("chat", chat_gemini)),
            route="/v1beta/models/{model}:generateContent",
            stream_route="/v1beta/models/{model}:streamGenerateContent",
            key_query=("key", "x-goog-api-key"),
            error=_google_error,
            error_prefix="/v1beta",
            count=TokenCount(
                "/v1beta/models/{model}:countTokens",
                read=gemini_body,
                field="totalTokens",
                estimate=gemini_estimate,
                url=gemini_url,
                request=gemini_request,
            ),
            models=ModelList("/v1beta/models", "models", gemini_entry, "models/{model} is not found"),
            bare_sse=True,
            via_hub=True,
            decoder=GeminiStreamDecoder,
            decode_object=decode_gemini,
            from_hub=_hub_to_gemini,
            path="/models/{model}:{method}",
            methods=("generateContent", "streamGenerateContent"),
            stream_query=(("alt", "sse"),),
            stream_in_body=False,
            key_header="x-goog-api-key",
        ),
    )
}


def check_body(raw: bytes, protocol: str) -> dict[str, Any]:
    """``request_check.check_body`` with the protocol's row's checks."""
    return request_check.check_body(raw, SPECS[protocol].check)


def check_parsed(body: dict[str, Any], protocol: str) -> dict[str, Any]:
    """``request_check.check_parsed`` with the protocol's row's checks."""
    return request_check.check_parsed(body, SPECS[protocol].check)
