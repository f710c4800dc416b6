"""OpenAI-shaped errors (DESIGN rule 5) and the mapping of upstream failures onto them."""

from __future__ import annotations

from typing import Any

import orjson


class ProxyError(Exception):
    """An error answered before the first byte: HTTP status + OpenAI error object."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.headers = headers or {}

    def body(self, request_id: str | None = None) -> bytes:
        err: dict[str, Any] = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        if request_id:
            err["request_id"] = request_id
        return orjson.dumps({"error": err})


# upstream HTTP status → (status we answer, error type, default code)
_STATUS_MAP: dict[int, tuple[int, str, str]] = {
    400: (400, "invalid_request_error", "upstream_bad_request"),
    401: (502, "upstream_error", "upstream_auth_failed"),  # our key to them: not the client's fault
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
}

# words in an upstream message that identify a well-known OpenAI code (SPEC §5.3: Codex
# classifies by code; a generic one makes it retry five times)
_CODE_HINTS: tuple[tuple[str, str], ...] = (
    ("context_length_exceeded", "context_length_exceeded"),
    ("maximum context length", "context_length_exceeded"),
    ("context window", "context_length_exceeded"),
    ("too many tokens", "context_length_exceeded"),
    ("insufficient_quota", "insufficient_quota"),
    ("exceeded your current quota", "insufficient_quota"),
    ("rate limit", "rate_limit_exceeded"),
    ("invalid_encrypted_content", "invalid_encrypted_content"),
)


def upstream_error(status: int, body: bytes, headers: Any, provider: str) -> ProxyError:
    """Map an upstream HTTP error answer to the OpenAI error the client gets."""
    mapped = _STATUS_MAP.get(status) or ((status, "invalid_request_error", "upstream_error") if status < 500 else (502, "upstream_error", "server_error"))
    out_status, etype, code = mapped
    message = ""
    param = None
    try:
        obj = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        obj = None
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict):
        message = str(err.get("message") or "")
        if isinstance(err.get("code"), str) and err["code"]:
            code = err["code"]
        elif isinstance(err.get("type"), str) and err["type"] in {c for _, c in _CODE_HINTS}:
            code = err["type"]
        param = err.get("param") if isinstance(err.get("param"), str) else None
    elif isinstance(err, str):
        message = err
    elif isinstance(obj, dict) and isinstance(obj.get("message"), str):
        message = obj["message"]
    else:
        message = body[:500].decode("utf-8", "replace").strip()
    low = message.lower()
    if code in ("upstream_bad_request", "upstream_error", "server_error", None):
        for hint, c in _CODE_HINTS:
            if hint in low:
                code = c
                break
    extra: dict[str, str] = {}
    retry = headers.get("retry-after") if headers is not None else None
    if retry:
        extra["retry-after"] = retry
    prefix = f"upstream {provider} answered HTTP {status}"
    return ProxyError(out_status, f"{prefix}: {message}" if message else prefix, type=etype, code=code, param=param, headers=extra)
