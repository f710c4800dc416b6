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
# None when no secret is configured; else what a string value must be as long as to hold one
# (calling the mask costs more than the test: a call through the class's ``__call__`` slot)
_MASK_FROM: int | None = None


def set_mask(mask: SecretMask) -> None:
    """The configured secrets, masked in every log line from now on."""
    global _MASK, _MASK_FROM
    _MASK = mask
    _MASK_FROM = mask.shortest if mask else None


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
    mask = _MASK
    shortest = _MASK_FROM
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
            if shortest is not None and len(v) >= shortest:
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


# structlog's settings, read at each line: get_config() builds a dict of them (~2 µs a line)
_CONFIG = structlog._config._CONFIG
for _name in ("default_processors", "default_wrapper_class", "default_context_class", "logger_factory"):
    if not hasattr(_CONFIG, _name):  # structlog is pinned: a release that renames one fails here
        raise RuntimeError(f"structlog changed: its configuration has no {_name} (app/logs.py)")

# what setup() configured: (processors, wrapper class, logger factory, level number); a
# logger whose configuration is still this one writes its lines itself (_Logger)
_SETUP: tuple[Any, ...] = ()


def setup(level: str = "info") -> None:
    global _SETUP
    lvl = getattr(logging, level.upper(), logging.INFO)
    logging.basicConfig(format="%(message)s", stream=sys.stderr, level=lvl)
    # httpx logs every request line at INFO: our own request line already says it all
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    processors = [render]
    wrapper = structlog.make_filtering_bound_logger(lvl)
    # one write per line (print() writes the line and its newline apart: unbuffered, as in a
    # container, two workers' lines could interleave on the shared stderr)
    factory = structlog.WriteLoggerFactory(file=sys.stderr)
    structlog.configure(
        processors=processors, wrapper_class=wrapper, logger_factory=factory, cache_logger_on_first_use=False
    )
    _SETUP = (processors, wrapper, factory, lvl)


class _Logger:
    """The proxy's logger, bound again only when structlog's configuration changes.

    ``structlog.get_logger()`` returns a lazy proxy that, with ``cache_logger_on_first_use``
    off, assembles a new bound logger (and a new ``WriteLogger``) for every line: ~10 µs a
    request line.  With caching on, a proxy would keep the first configuration it saw for
    good, and ``setup`` (or a test's own ``structlog.configure``) must take effect for the
    modules that imported ``log`` before.  So: one bound logger, kept while the processors,
    wrapper class, context class and logger factory are the ones it was made with.

    While that configuration is ``setup``'s own, a line is written here: what structlog's
    bound logger does for it (drop a level below the configured one; the event dict as its
    keywords, then ``event``; ``render``; the ``WriteLogger``'s locked write and flush)
    without its layers of calls, dict copies and lookups (10.4 against 5.8 µs a request
    line).  Any other configuration (a test's capture, a caller's own processors) and
    ``exception`` go through structlog."""

    __slots__ = ("_name", "_made_of", "_bound", "_sink")

    def __init__(self, name: str) -> None:
        self._name = name
        self._made_of: tuple[Any, ...] = ()
        self._bound: Any = None
        self._sink: tuple[int, Any] | None = None  # (lowest level written, WriteLogger)

    def _logger(self) -> Any:
        c = _CONFIG  # structlog's own settings object (what get_config() copies into a dict)
        old = self._made_of
        if (
            not old
            or c.default_processors is not old[0]
            or c.default_wrapper_class is not old[1]
            or c.default_context_class is not old[2]
            or c.logger_factory is not old[3]
        ):
            made_of: tuple[Any, ...] = (
                c.default_processors,
                c.default_wrapper_class,
                c.default_context_class,
                c.logger_factory,
            )
            self._bound = structlog.get_logger(self._name).bind()
            self._made_of = made_of
            self._sink = None
            own = _SETUP
            if (
                own
                and made_of[0] is own[0]
                and made_of[1] is own[1]
                and made_of[2] is dict
                and made_of[3] is own[2]
                and len(own[0]) == 1
                and own[0][0] is render
            ):
                self._sink = (own[3], own[2]())
        return self._bound

    def _write(self, level: int, method: str, event: str, kw: dict[str, Any]) -> Any:
        self._logger()
        sink = self._sink
        if sink is None:
            return getattr(self._bound, method)(event, **kw)
        if level < sink[0]:
            return None
        kw["event"] = event
        sink[1].msg(render(None, method, kw))
        return None

    def debug(self, event: str, **kw: Any) -> Any:
        return self._write(logging.DEBUG, "debug", event, kw)

    def info(self, event: str, **kw: Any) -> Any:
        return self._write(logging.INFO, "info", event, kw)

    def warning(self, event: str, **kw: Any) -> Any:
        return self._write(logging.WARNING, "warning", event, kw)

    def error(self, event: str, **kw: Any) -> Any:
        return self._write(logging.ERROR, "error", event, kw)

    def exception(self, event: str, **kw: Any) -> Any:
        return self._logger().exception(event, **kw)


log = _Logger("switchboard")
