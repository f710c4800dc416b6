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
    for k, v in event.items():  # values replaced in place: the keys do not change
        if _secret_name(k):
            event[k] = "[redacted]"
        elif isinstance(v, str):
            if "earer" in v:
                v = _BEARER.sub(r"\1[redacted]", v)
            event[k] = mask(v) if mask is not None else v
    return event


def _dumps(obj: Any, default: Any = None) -> str:
    return orjson.dumps(obj, default=default or str).decode()


def setup(level: str = "info") -> None:
    lvl = getattr(logging, level.upper(), logging.INFO)
    logging.basicConfig(format="%(message)s", stream=sys.stderr, level=lvl)
    # httpx logs every request line at INFO: our own request line already says it all
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redact,
            structlog.processors.JSONRenderer(serializer=_dumps),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        # one write per line (print() writes the line and its newline apart: unbuffered, as
        # in a container, two workers' lines could interleave on the shared stderr)
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


log = structlog.get_logger("switchboard")
