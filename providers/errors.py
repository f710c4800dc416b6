"""The mapping of upstream failures onto OpenAI-shaped errors (docs/rules.md, "Errors speak the client's protocol").

An upstream error answer (before the first byte) becomes ``ProxyError``
(``transformers.errors``): an HTTP status and
an OpenAI error object ``{"error": {"message", "type", "param", "code"}}`` that carries the
upstream's own message and the most specific well-known code we can find, because Codex
classifies failures by ``code`` (docs/rules.md §5.3: ``context_length_exceeded`` and
``insufficient_quota`` are fatal, ``rate_limit_exceeded`` waits "try again in Ns", and any
other code makes it retry the whole turn five times).

Body shapes understood (``_extract``):

=======================================================  ===================================
upstream                                                 body
=======================================================  ===================================
OpenAI, Azure, DeepSeek, Moonshot, GLM, llama.cpp,       ``{"error": {"message", "type",
Mantle (OpenAI-compatible); Anthropic and the           "code", "param"[, "innererror"]}}``
Anthropic-compatible endpoints                           (Anthropic: ``{"type": "error",
                                                         "error": {"type", "message"}}``)
vLLM, SGLang                                             ``{"object": "error", "message",
                                                         "type": "BadRequestError",
                                                         "code": 400}``
xAI, Ollama                                              ``{"error": "<message>"[, "code":
                                                         "<description>"]}``
Gemini, Vertex AI (Google's APIs; the OpenAI-compatible   ``{"error": {"code": 400, "message",
endpoint wraps it in an array)                           "status": "INVALID_ARGUMENT"}}``
Bedrock (Mantle's AWS front)                             ``{"message": …}`` (+ ``__type`` or
                                                         the ``x-amzn-errortype`` header)
gateways (FastAPI style)                                 ``{"detail": "<message>"}``
HTML (an error page of a gateway or a debug server)       never echoed: a fixed message
anything else                                            the first 300 characters as text
=======================================================  ===================================

Everything of the upstream's that reaches the client (message, param, code) first goes
through the configured secrets' mask (``transformers.masking``): an upstream that echoes the
Authorization or ``api-key`` header it received cannot hand the proxy's key to a client.

Code resolution, first match wins:

1. the upstream ``code`` is already a well-known OpenAI code (``WELL_KNOWN``);
2. the upstream ``code`` / ``type`` / AWS error type is in ``UPSTREAM_CODES`` (GLM's
   numeric codes, Moonshot's error types, llama.cpp's, Azure's, Bedrock's exceptions);
3. a phrase of the message (``MESSAGE_HINTS``: "maximum context length", "Prompt exceeds
   max length", "exceeded model token limit", "insufficient balance", …);
4. the upstream ``code`` itself when it is a specific snake_case identifier
   (``invalid_value``, ``unsupported_parameter``…); generic ones (``invalid_request_error``,
   ``BadRequest``, numbers, sentences) are not codes;
5. the default of the HTTP status (``_STATUS_MAP``).

401/403 always map to ``upstream_auth_failed``/``upstream_forbidden`` with HTTP 502 and a
fixed message (the proxy's key to the upstream is wrong: not the client's fault, not the
client's ``invalid_api_key``, and the upstream's text about the proxy's credentials is none
of the client's business).  A resolved ``insufficient_quota``/``rate_limit_exceeded`` is answered
with HTTP 429, ``context_length_exceeded``/``invalid_prompt`` with 400 and
``server_is_overloaded`` with 503, whatever status the upstream chose (DeepSeek says 402
for an empty balance, some servers 500 for an over-long prompt).  ``retry-after`` (or
Azure's ``retry-after-ms``) is passed on, and a rate-limit message without a "try again in"
gets one, which is what Codex parses its wait from.
"""

from __future__ import annotations

import math
import re
from typing import Any

import orjson

from transformers.errors import ProxyError
from transformers.masking import NO_SECRETS, SecretMask

# upstream HTTP status → (status we answer, error type, default code)
_STATUS_MAP: dict[int, tuple[int, str, str]] = {
    400: (400, "invalid_request_error", "upstream_bad_request"),
    401: (502, "upstream_error", "upstream_auth_failed"),  # our key to them: not the client's fault
    402: (429, "insufficient_quota", "insufficient_quota"),  # DeepSeek "Insufficient Balance"
    403: (502, "upstream_error", "upstream_forbidden"),
    404: (404, "invalid_request_error", "model_not_found"),
    408: (504, "upstream_error", "upstream_timeout"),
    413: (413, "invalid_request_error", "request_too_large"),
    422: (400, "invalid_request_error", "upstream_unprocessable"),
    429: (429, "rate_limit_error", "rate_limit_exceeded"),
    500: (502, "upstream_error", "server_error"),
    502: (502, "upstream_error", "server_error"),
    503: (503, "upstream_error", "server_is_overloaded"),
    504: (504, "upstream_error", "upstream_timeout"),
    529: (503, "upstream_error", "server_is_overloaded"),
}
_AUTH_STATUSES = frozenset({401, 403})

# codes Codex (and the OpenAI SDKs) act on; passed through as is
WELL_KNOWN = frozenset(
    {
        "context_length_exceeded",
        "insufficient_quota",
        "usage_not_included",
        "invalid_prompt",
        "cyber_policy",
        "server_is_overloaded",
        "slow_down",
        "rate_limit_exceeded",
        "invalid_encrypted_content",
    }
)

# an upstream's own code / type / AWS error type → the OpenAI code (evidence: docs/providers.md)
UPSTREAM_CODES: dict[str, str] = {
    # GLM (Zhipu / Z.ai) business codes, sent as strings in error.code
    "1113": "insufficient_quota",  # account in arrears / no balance
    "1211": "model_not_found",
    "1261": "context_length_exceeded",  # "Prompt exceeds max length"
    "1301": "invalid_prompt",  # content judged unsafe
    "1302": "rate_limit_exceeded",  # too many concurrent requests
    "1303": "rate_limit_exceeded",  # request frequency too high
    "1304": "insufficient_quota",  # daily call quota used up
    "1305": "rate_limit_exceeded",  # too many requests (traffic)
    # Moonshot error types (error.type)
    "rate_limit_reached_error": "rate_limit_exceeded",
    "exceeded_current_quota_error": "insufficient_quota",
    "engine_overloaded_error": "server_is_overloaded",
    "content_filter": "invalid_prompt",  # also Azure's error.code
    "resource_not_found_error": "model_not_found",
    # OpenAI (older bodies carry it as the type)
    "insufficient_quota": "insufficient_quota",
    # llama.cpp server
    "exceed_context_size_error": "context_length_exceeded",
    # Azure
    "ResponsibleAIPolicyViolation": "invalid_prompt",
    "DeploymentNotFound": "model_not_found",
    # Bedrock (x-amzn-errortype / __type)
    "ThrottlingException": "rate_limit_exceeded",
    "ServiceQuotaExceededException": "rate_limit_exceeded",
    "ModelNotReadyException": "server_is_overloaded",
    "ServiceUnavailableException": "server_is_overloaded",
    # Anthropic and the Anthropic-compatible endpoints (error.type of
    # {"type": "error", "error": {"type", "message"}})
    "overloaded_error": "server_is_overloaded",
    "rate_limit_error": "rate_limit_exceeded",
    "not_found_error": "model_not_found",
    # Google (Gemini, Vertex AI): the canonical status of {"error": {"code", "message", "status"}}
    "RESOURCE_EXHAUSTED": "rate_limit_exceeded",
    "UNAVAILABLE": "server_is_overloaded",
    "NOT_FOUND": "model_not_found",
}

# phrases of an upstream message (lower case) → code
MESSAGE_HINTS: tuple[tuple[str, str], ...] = (
    ("context_length_exceeded", "context_length_exceeded"),
    ("maximum context length", "context_length_exceeded"),  # OpenAI, DeepSeek, vLLM
    ("maximum model length", "context_length_exceeded"),  # vLLM ("longer than the maximum model length")
    ("maximum prompt length", "context_length_exceeded"),  # xAI
    ("context window", "context_length_exceeded"),
    ("context size", "context_length_exceeded"),  # llama.cpp "exceeds the available context size"
    ("exceeded model token limit", "context_length_exceeded"),  # Moonshot
    ("prompt exceeds max length", "context_length_exceeded"),  # GLM 1261
    ("input is too long", "context_length_exceeded"),  # Bedrock
    ("exceeds the maximum number of tokens allowed", "context_length_exceeded"),  # Gemini
    ("prompt is too long", "context_length_exceeded"),
    ("too many tokens", "context_length_exceeded"),
    ("exceeds the maximum allowed length", "context_length_exceeded"),  # SGLang
    ("insufficient_quota", "insufficient_quota"),
    ("exceeded your current quota", "insufficient_quota"),  # OpenAI
    ("insufficient balance", "insufficient_quota"),  # DeepSeek 402
    ("used all available credits", "insufficient_quota"),  # xAI
    ("spending limit", "insufficient_quota"),  # xAI
    ("content management policy", "invalid_prompt"),  # Azure content filter
    ("invalid_encrypted_content", "invalid_encrypted_content"),
    ("rate limit", "rate_limit_exceeded"),
    ("too many requests", "rate_limit_exceeded"),
    ("overloaded", "server_is_overloaded"),
)

# a resolved code fixes the status the client sees
_CODE_STATUS: dict[str, tuple[int, str]] = {
    "context_length_exceeded": (400, "invalid_request_error"),
    "invalid_prompt": (400, "invalid_request_error"),
    "insufficient_quota": (429, "insufficient_quota"),
    "rate_limit_exceeded": (429, "rate_limit_error"),
    "server_is_overloaded": (503, "upstream_error"),
}

# the codes the proxy itself answers with (docs/operations.md, "Errors clients see")
OWN_CODES = frozenset(
    {"invalid_json", "invalid_type", "missing_required_parameter", "unsupported_parameter", "invalid_value",
     "missing_api_key", "invalid_api_key", "origin_not_allowed", "host_not_allowed", "unsupported_media_type",
     "model_not_found", "request_too_large", "not_found", "method_not_allowed", "upgrade_required",
     "upstream_unreachable", "upstream_timeout", "upstream_bad_response", "upstream_stream_error",
     "upstream_stream_truncated", "upstream_idle_timeout", "upstream_bad_event", "upstream_error",
     "internal_error", "invalid_tool_arguments", "integer_below_min_value", "nesting_too_deep",
     "unsupported_protocol", "integer_above_max_value", "upstream_circuit_open", "server_shutting_down"}
)  # fmt: skip
_GENERIC = frozenset(
    {"invalid_request_error", "invalid_request", "bad_request", "error", "unknown_error", "upstream_error",
     "server_error", "internal_error", "internal_server_error", "api_error", "invalid_parameter"}
)  # fmt: skip
_IDENT = re.compile(r"^[a-z][a-z0-9_]*$")
_TRY_AGAIN = re.compile(r"try again in\s*\d", re.IGNORECASE)


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]+")
_TEXT_CHARS = 300


def _text(body: bytes, content_type: str) -> str:
    """A non-JSON error body as message text: never an HTML page (it may list the request
    headers it got), otherwise its first characters without control characters."""
    head = body[:1024].lstrip()[:64].lower()
    if (
        "html" in content_type.lower()
        or head.startswith((b"<!doctype", b"<html", b"<?xml", b"<head", b"<body"))
        or (head.startswith(b"<") and b">" in head)
    ):
        return "(the upstream answered with an HTML page; not shown)"
    text = body[: _TEXT_CHARS * 4].decode("utf-8", "replace")[:_TEXT_CHARS]
    return _CONTROL.sub(" ", text).strip()


def _extract(body: bytes, content_type: str = "") -> tuple[str, list[str], str | None, str | None]:
    """(message, candidate codes/types in priority order, the upstream code, param)."""
    try:
        obj = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, list) and obj and isinstance(obj[0], dict):
        obj = obj[0]  # Gemini's OpenAI-compatible endpoint wraps its error in an array
    if not isinstance(obj, dict):
        return _text(body, content_type), [], None, None
    err = obj.get("error")
    if isinstance(err, dict):
        inner = err.get("innererror")
        if not isinstance(inner, dict):
            inner = {}
        code = _str(err.get("code"))
        # (Google's APIs: a numeric code and the canonical ``status``, e.g. RESOURCE_EXHAUSTED)
        cands = [c for c in (code, _str(err.get("type")), _str(inner.get("code")), _str(err.get("status"))) if c]
        return str(err.get("message") or ""), cands, code, _str(err.get("param"))
    if isinstance(err, str):  # xAI {"code": "<description>", "error": "<message>"}, Ollama
        code = _str(obj.get("code"))
        return err, [c for c in (code,) if c], code, None
    for key in ("message", "detail", "Message"):
        if isinstance(obj.get(key), str):
            aws = _str(obj.get("__type"))
            cands = [
                c for c in (_str(obj.get("code")), _str(obj.get("type")), aws.rsplit("#", 1)[-1] if aws else None) if c
            ]
            return obj[key], cands, _str(obj.get("code")), _str(obj.get("param"))
    return _text(body, content_type), [], None, None


def _resolve(cands: list[str], code: str | None, message: str, default: str) -> str:
    for c in cands:
        if c in WELL_KNOWN:
            return c
    for c in cands:
        if c in UPSTREAM_CODES:
            return UPSTREAM_CODES[c]
    low = message.lower()
    for hint, c in MESSAGE_HINTS:
        if hint in low:
            return c
    if code and _IDENT.match(code) and code not in _GENERIC:
        return code
    return default


_MAX_RETRY_AFTER = 24 * 3600


def _retry_after(headers: Any) -> str | None:
    """``retry-after`` in whole seconds (or Azure's ``retry-after-ms``), only when it is a
    finite number: an upstream's header value is never copied as it came."""
    if headers is None:
        return None
    for name, scale in (("retry-after", 1.0), ("retry-after-ms", 1000.0)):
        raw = headers.get(name)
        if not raw:
            continue
        try:
            secs = float(raw) / scale
        except (ValueError, OverflowError):
            continue  # an HTTP-date or junk: no hint rather than a wrong one
        if math.isfinite(secs) and secs >= 0:
            return str(min(_MAX_RETRY_AFTER, max(1, math.ceil(secs))))
    return None


def upstream_error(
    status: int, body: bytes, headers: Any, provider: str, mask: SecretMask = NO_SECRETS, *, said: str | None = None
) -> ProxyError:
    """Map an upstream HTTP error answer to the OpenAI error the client gets; the upstream's
    text goes through ``mask`` (the configured secrets) before it can reach anyone.  An
    upstream's own specific code (rule 4) and ``param`` are kept for a 4xx only: on a 5xx
    they describe the upstream's trouble, not the client's request.  ``said`` replaces
    "answered HTTP <status>" in the message (an error carried by a 200 answer)."""
    mapped = _STATUS_MAP.get(status) or (
        (status, "invalid_request_error", "upstream_error") if status < 500 else (502, "upstream_error", "server_error")
    )
    out_status, etype, default = mapped
    ctype = (headers.get("content-type") if headers is not None else None) or ""
    message, cands, code, param = _extract(body, ctype)
    aws = headers.get("x-amzn-errortype") if headers is not None else None
    if aws:
        cands.append(aws.split(":", 1)[0])
    if status in _AUTH_STATUSES:
        return ProxyError(
            out_status,
            f"the upstream rejected the proxy's credentials for provider {provider} (HTTP {status})",
            type=etype,
            code=default,
        )
    client_fault = status < 500
    resolved = _resolve(cands, code if client_fault else None, message, default)
    if mask(resolved) != resolved or len(resolved) > 64:
        resolved = default
    if resolved in _CODE_STATUS:
        out_status, etype = _CODE_STATUS[resolved]
    message = mask(message)
    extra: dict[str, str] = {}
    retry = _retry_after(headers)
    if retry:
        extra["retry-after"] = retry
        if resolved == "rate_limit_exceeded" and not _TRY_AGAIN.search(message):
            message = (
                f"{message.rstrip()} Please try again in {retry}s." if message else f"Please try again in {retry}s."
            )
    prefix = f"upstream {provider} {said or f'answered HTTP {status}'}"
    return ProxyError(
        out_status,
        f"{prefix}: {message[:4000]}" if message else prefix,
        type=etype,
        code=resolved,
        param=mask(param)[:256] if param and client_fault else None,
        headers=extra,
    )


def error_in_ok_body(
    obj: Any, body: bytes, headers: Any, provider: str, mask: SecretMask = NO_SECRETS
) -> ProxyError | None:
    """An HTTP 200 whose JSON body (``body``, parsed: ``obj``) is an error object and nothing
    else (some OpenAI-compatible servers answer so): the same OpenAI error as for that error
    with a non-200 status — status by the resolved code, else by a numeric HTTP-like ``code``
    in the body (vLLM puts 400 there), else 502.  None when the body is not such an error."""
    if not isinstance(obj, dict) or "error" not in obj or obj.get("error") is None:
        return None
    if any(k in obj for k in ("choices", "output")):
        return None  # an answer that also mentions an error: the decoders judge it
    err = obj["error"]
    raw = err.get("code") if isinstance(err, dict) else obj.get("code")
    status = 502
    if isinstance(raw, int | str) and not isinstance(raw, bool) and str(raw).isdigit() and 400 <= int(raw) <= 599:
        status = int(raw)
    if status in _AUTH_STATUSES:
        status = 502  # a 200 is no statement about the proxy's credentials
    return upstream_error(status, body, headers, provider, mask, said="answered HTTP 200 with an error")


def failed_answer_error(err: dict[str, Any], mask: SecretMask) -> ProxyError:
    """A Chat client's non-streamed answer that failed (the upstream's error inside its
    answer, or a repair that refused it): HTTP 502, or the status of a well-known code;
    text masked, a code outside the known set (an upstream's own) becomes ``upstream_error``."""
    code = err.get("code") if isinstance(err.get("code"), str) else None
    if code not in known_codes():
        code = "upstream_error"
    status, etype = _CODE_STATUS.get(code, (502, None))
    raw_type = err.get("type")
    etype = etype or (
        raw_type if isinstance(raw_type, str) and _IDENT.match(raw_type) and len(raw_type) <= 64 else "upstream_error"
    )
    return ProxyError(status, mask(str(err.get("message") or "upstream failure"))[:4000], type=etype, code=code)


def known_codes() -> frozenset[str]:
    """Every code an error of the proxy can carry that is not the upstream's own: the
    closed set metric labels take codes from."""
    return OWN_CODES | WELL_KNOWN | frozenset(UPSTREAM_CODES.values()) | frozenset(v[2] for v in _STATUS_MAP.values())
