"""httpcore's and httpx's exception mapping as plain context managers, not generators.

Theory of operation
-------------------
Every upstream exchange enters two exception-mapping blocks of httpcore's HTTP/1.1
connection per h11 event it sends or reads (``map_exceptions``: h11's protocol errors to
httpcore's) and three of httpx's (``map_httpcore_exceptions``: httpcore's errors to
httpx's, around the request and around the body's iteration and close): seven to ten per
short request.  Both are ``@contextlib.contextmanager`` generators: each entry builds a
generator and its context-manager wrapper and steps the generator twice, for a block that
almost never sees an exception.  That was ~60,000 of the ~950,000 instructions one
exchange costs the upstream client (in process, a canned answer), 6%.

The classes below do what those generators do, in ``__exit__``:

==============================  ===========================  ===========================
the block raised                ``map_exceptions(map)``      ``map_httpcore_exceptions()``
==============================  ===========================  ===========================
nothing                         nothing                      nothing
an ``Exception`` that is an     ``to_exc(exc) from exc``,    the most specific httpx
instance of a mapped class      the first in ``map``'s       class (httpx's own rule),
                                order                        ``cls(str(exc)) from exc``
an ``Exception`` not mapped     the same exception           the same exception
a ``BaseException`` that is     the same exception           the same exception
not an ``Exception``
(cancellation, GeneratorExit)
==============================  ===========================  ===========================

``install()`` puts them where httpcore's connection and httpx's response stream look them
up (module globals, read at each use); ``providers.upstream`` reads httpx's name from its
module at each use too.  It fails loudly if a pinned release renamed one.
``tests/unit/test_httpcore_errors.py`` runs both against the originals on every exception
class of the maps.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any, Literal

import httpcore._async.http11 as _http11
import httpx._transports.default as _default

__all__ = ["ORIGINAL_MAP_HTTPCORE_EXCEPTIONS", "MapExceptions", "install", "map_httpcore_exceptions"]

# httpx's own, as imported (the tests compare against it)
ORIGINAL_MAP_HTTPCORE_EXCEPTIONS = _default.map_httpcore_exceptions


class MapExceptions:
    """``httpcore._exceptions.map_exceptions(map)``."""

    __slots__ = ("map",)

    def __init__(self, map: Mapping[type[Exception], type[Exception]]) -> None:
        self.map = map

    def __enter__(self) -> None:
        return None

    def __exit__(self, typ: Any, exc: BaseException | None, tb: types.TracebackType | None) -> Literal[False]:
        if isinstance(exc, Exception):
            for from_exc, to_exc in self.map.items():
                if isinstance(exc, from_exc):
                    raise to_exc(exc) from exc
        return False


class _MapHttpcoreExceptions:
    """``httpx._transports.default.map_httpcore_exceptions()``: holds no state, so one
    instance serves every block, nested or concurrent."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, typ: Any, exc: BaseException | None, tb: types.TracebackType | None) -> Literal[False]:
        if not isinstance(exc, Exception):
            return False
        if not _default.HTTPCORE_EXC_MAP:
            _default.HTTPCORE_EXC_MAP = _default._load_httpcore_exceptions()
        mapped: type[Exception] | None = None
        for from_exc, to_exc in _default.HTTPCORE_EXC_MAP.items():
            # httpx's rule: the most specific class that applies (ReadTimeout, not
            # TimeoutException)
            if isinstance(exc, from_exc) and (mapped is None or issubclass(to_exc, mapped)):
                mapped = to_exc
        if mapped is None:
            return False
        raise mapped(str(exc)) from exc


_ONE = _MapHttpcoreExceptions()


def map_httpcore_exceptions() -> _MapHttpcoreExceptions:
    return _ONE


_TABLE: tuple[tuple[types.ModuleType, str, Any], ...] = (
    (_http11, "map_exceptions", MapExceptions),
    (_default, "map_httpcore_exceptions", map_httpcore_exceptions),
)
# what the replacement reads of httpx's
_READ = ((_default, "HTTPCORE_EXC_MAP"), (_default, "_load_httpcore_exceptions"))


def install() -> None:
    """Idempotent."""
    for module, name in (*((m, n) for m, n, _ in _TABLE), *_READ):
        if not hasattr(module, name):
            raise RuntimeError(f"httpcore or httpx changed: {module.__name__}.{name} is gone (app/httpcore_errors.py)")
    for module, name, replacement in _TABLE:
        setattr(module, name, replacement)
