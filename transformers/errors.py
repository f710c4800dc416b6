"""Errors raised by the sans-IO core; the app turns them into OpenAI error objects.

Theory of operation
-------------------
Request translation and validation raise ``RequestError`` with the OpenAI fields
(``message``, ``param``, ``code``, ``type``); the HTTP layer renders it as a 400 (or the
``status`` given) ``{"error": {...}}``.  Stream stages never raise for bad upstream data:
they end the stream with ``Finish(status="failed", error=...)`` built by ``stream_error``.
An error answered before the first byte (an upstream's error answer, an auth or limit
refusal) is ``ProxyError``: an HTTP status, the OpenAI error object (``body()``, orjson)
and the extra headers (``retry-after``); ``providers.errors`` maps upstream failures onto it.
"""

from __future__ import annotations

from typing import Any

import orjson


class RequestError(Exception):
    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = "invalid_request_error",
        type: str = "invalid_request_error",
        status: int = 400,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.type = type
        self.status = status

    def to_dict(self) -> dict[str, Any]:
        return {"message": self.message, "type": self.type, "param": self.param, "code": self.code}


def stream_error(code: str, message: str, type: str = "server_error") -> dict[str, Any]:
    """The error dict carried by ``Finish(status="failed")``."""
    return {"code": code, "message": message, "type": type, "param": None}


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
