"""structlog JSON logs: one line per request, secrets never written.

Request lines carry a fixed set of fields (no headers, no bodies); the redaction processor
is a second line of defence for anything that slips into an event dict: keys whose name
looks like a credential are masked, every configured secret (``set_mask``) and bearer
tokens inside strings are cut, tracebacks included (they are rendered into the line
first, so an exception message that quotes a key is masked too).
"""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import Any

import orjson
import structlog
from structlog.typing import EventDict, WrappedLogger

from transformers.masking import NO_SECRETS, SecretMask

_SECRET_KEYS = re.compile(r"(authorization|api[-_]?key|secret|token|password|cookie)$", re.I)
_BEARER = re.compile(r"(Bearer\s+)[A-Za-z0-9._~+/=-]+", re.I)


_MASK: SecretMask = NO_SECRETS


def set_mask(mask: SecretMask) -> None:
    """The configured secrets, masked in every log line from now on."""
    global _MASK
    _MASK = mask


_NOT_SECRET = frozenset(("tokens", "input_tokens", "output_tokens"))
# a field name's verdict, decided once: log calls use a small fixed set of names
_SECRET_NAME: dict[str, bool] = {}


def _secret_name(k: str) -> bool:
    hit = _SECRET_NAME.get(k)
    if hit is None:
        hit = k not in _NOT_SECRET and _SECRET_KEYS.search(k) is not None
        if len(_SECRET_NAME) < 4096:  # bounded, whatever names a caller makes up
            _SECRET_NAME[k] = hit
    return hit


def redact(_: WrappedLogger, __: str, event: EventDict) -> EventDict:
    mask = _MASK if _MASK else None
    names = _SECRET_NAME
    for k, v in event.items():  # values replaced in place: the keys do not change
        secret = names.get(k)
        if secret is None:
            secret = _secret_name(k)
        if secret:
            event[k] = "[redacted]"
        elif isinstance(v, str):
            if "earer" in v:
                v = event[k] = _BEARER.sub(r"\1[redacted]", v)
            if mask is not None:
                event[k] = mask(v)
    return event


def _dumps(obj: Any, default: Any = None) -> str:
    return orjson.dumps(obj, default=default or str).decode()


# add_log_level's names: a deprecated alias, and exception() is error() with its traceback
_LEVEL_NAME = {"warn": "warning", "exception": "error"}
_format_exc_info = structlog.processors.format_exc_info
_second = -1
_second_text = ""


def timestamp() -> str:
    """Now in UTC as ISO 8601 with microseconds and ``Z``, as structlog's
    ``TimeStamper(fmt="iso", utc=True)`` writes it (``datetime.now().isoformat()``: 5 µs);
    the date and time of day are formatted once per second, the microseconds (rounded down,
    as ``datetime.now()`` does) from the clock's integer nanoseconds."""
    global _second, _second_text
    sec, ns = divmod(time.time_ns(), 1_000_000_000)
    if sec != _second:
        _second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        _second = sec
    return f"{_second_text}.{ns // 1000:06d}Z"


def render(_: WrappedLogger, method: str, event: EventDict) -> str:
    """The one processor: structlog's add_log_level, TimeStamper(fmt="iso", utc=True),
    format_exc_info (when a traceback was asked for), then ``redact`` and the JSON line.
    One call where a chain of six cost a call and a dict pass each."""
    event["level"] = _LEVEL_NAME.get(method, method)
    event["timestamp"] = timestamp()
    if "exc_info" in event:
        event = _format_exc_info(_, method, event)
    return _dumps(redact(_, method, event))


def setup(level: str = "info") -> None:
    lvl = getattr(logging, level.upper(), logging.INFO)
    logging.basicConfig(format="%(message)s", stream=sys.stderr, level=lvl)
    # httpx logs every request line at INFO: our own request line already says it all
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    structlog.configure(
        processors=[render],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        # one write per line (print() writes the line and its newline apart: unbuffered, as
        # in a container, two workers' lines could interleave on the shared stderr)
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


class _Logger:
    """The proxy's logger, bound again only when structlog's configuration changes.

    ``structlog.get_logger()`` returns a lazy proxy that, with ``cache_logger_on_first_use``
    off, assembles a new bound logger (and a new ``WriteLogger``) for every line: ~10 µs a
    request line.  With caching on, a proxy would keep the first configuration it saw for
    good, and ``setup`` (or a test's own ``structlog.configure``) must take effect for the
    modules that imported ``log`` before.  So: one bound logger, kept while the processors,
    wrapper class, context class and logger factory are the ones it was made with."""

    __slots__ = ("_name", "_made_of", "_bound")

    def __init__(self, name: str) -> None:
        self._name = name
        self._made_of: tuple[Any, ...] = ()
        self._bound: Any = None

    def _logger(self) -> Any:
        cfg = structlog.get_config()
        made_of = (cfg["processors"], cfg["wrapper_class"], cfg["context_class"], cfg["logger_factory"])
        old = self._made_of
        if len(old) != 4 or any(a is not b for a, b in zip(old, made_of, strict=True)):
            self._bound = structlog.get_logger(self._name).bind()
            self._made_of = made_of
        return self._bound

    def debug(self, event: str, **kw: Any) -> Any:
        return self._logger().debug(event, **kw)

    def info(self, event: str, **kw: Any) -> Any:
        return self._logger().info(event, **kw)

    def warning(self, event: str, **kw: Any) -> Any:
        return self._logger().warning(event, **kw)

    def error(self, event: str, **kw: Any) -> Any:
        return self._logger().error(event, **kw)

    def exception(self, event: str, **kw: Any) -> Any:
        return self._logger().exception(event, **kw)


log = _Logger("switchboard")
