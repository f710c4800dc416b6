"""app/httpcore_errors.py against the context managers it replaces: httpcore's
``map_exceptions`` and httpx's ``map_httpcore_exceptions``, on every exception class of
their maps and on what they leave alone."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import h11
import httpcore
import httpcore._async.http11 as http11
import httpx
import httpx._transports.default as httpx_default
import pytest

from app import httpcore_errors
from app.httpcore_errors import MapExceptions, install, map_httpcore_exceptions
from providers.upstream import StaleConnection

ORIGINAL_HTTPX = httpcore_errors.ORIGINAL_MAP_HTTPCORE_EXCEPTIONS
ORIGINAL_HTTPCORE = httpcore._exceptions.map_exceptions


class Sub(h11.RemoteProtocolError):
    pass


def outcome(cm: Callable[[], Any], exc: BaseException | None) -> tuple[Any, ...]:
    """What leaves a ``with cm():`` block that raises ``exc``: (kind, type, str, args,
    whether the cause is ``exc``, whether it is ``exc`` itself)."""
    try:
        with cm():
            if exc is not None:
                raise exc
    except BaseException as got:  # every kind is compared
        return ("raised", type(got), str(got), got.args == (exc,), got.__cause__ is exc, got is exc)
    return ("nothing",)


def fresh(e: BaseException) -> BaseException:
    return type(e)(*e.args)


RAISED = [
    None,
    h11.LocalProtocolError("bad request line"),
    h11.RemoteProtocolError("bad answer"),
    Sub("a subclass", 400),
    ValueError("not mapped"),
    KeyError("k"),
    StopIteration(),
    asyncio.CancelledError(),
    GeneratorExit(),
    KeyboardInterrupt(),
]
MAPS = [
    {h11.LocalProtocolError: httpcore.LocalProtocolError},
    {h11.RemoteProtocolError: httpcore.RemoteProtocolError},
    # the first class in the map's order wins
    {h11.ProtocolError: httpcore.ProtocolError, h11.RemoteProtocolError: httpcore.RemoteProtocolError},
]


@pytest.mark.parametrize("mapping", MAPS, ids=["local", "remote", "ordered"])
@pytest.mark.parametrize("exc", RAISED, ids=lambda e: type(e).__name__)
def test_map_exceptions_does_what_httpcore_s_does(mapping: dict, exc: BaseException | None) -> None:
    want = outcome(lambda: ORIGINAL_HTTPCORE(mapping), None if exc is None else fresh(exc))
    got = outcome(lambda: MapExceptions(mapping), None if exc is None else fresh(exc))
    assert got == want


HTTPCORE_ERRORS = [
    httpcore.ConnectError("refused"),
    httpcore.ConnectTimeout("slow"),
    httpcore.ReadTimeout("silent"),
    httpcore.WriteTimeout("stuck"),
    httpcore.PoolTimeout("full"),
    httpcore.TimeoutException("late"),
    httpcore.ReadError("reset"),
    httpcore.WriteError("broken pipe"),
    httpcore.NetworkError("down"),
    httpcore.RemoteProtocolError("bad answer"),
    httpcore.LocalProtocolError("bad request"),
    httpcore.ProtocolError("protocol"),
    httpcore.ProxyError("proxy"),
    httpcore.UnsupportedProtocol("ftp"),
    StaleConnection("the upstream closed the kept-alive connection"),
]


@pytest.mark.parametrize("exc", [None, *HTTPCORE_ERRORS, *RAISED[4:]], ids=lambda e: type(e).__name__)
def test_map_httpcore_exceptions_does_what_httpx_s_does(exc: BaseException | None) -> None:
    want = outcome(ORIGINAL_HTTPX, None if exc is None else fresh(exc))
    got = outcome(map_httpcore_exceptions, None if exc is None else fresh(exc))
    # httpx builds its exception from the message: the args are the text, not the exception
    assert got[:3] == want[:3] and got[4:] == want[4:]
    if exc is not None and isinstance(exc, httpcore.ReadError):
        assert got[1] is httpx.ReadError  # the most specific class, as httpx maps it


def test_installed_where_httpcore_and_httpx_look_them_up() -> None:
    install()
    install()  # idempotent
    assert http11.map_exceptions is MapExceptions
    assert httpx_default.map_httpcore_exceptions is map_httpcore_exceptions


def test_a_renamed_name_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(httpx_default, "_load_httpcore_exceptions")
    with pytest.raises(RuntimeError, match="_load_httpcore_exceptions is gone"):
        install()


async def test_an_async_generator_closed_early_closes_cleanly() -> None:
    """httpx's response stream yields inside the block: a consumer that stops early closes
    the generator with GeneratorExit, which must go through unmapped."""
    closed: list[bool] = []

    async def parts() -> Any:
        try:
            with map_httpcore_exceptions():
                for i in range(3):
                    yield i
        finally:
            closed.append(True)

    gen = parts()
    assert await gen.__anext__() == 0
    await gen.aclose()
    assert closed == [True]


async def test_a_failed_exchange_reads_as_httpx_s_error() -> None:
    """Through the real transport: a refused connection is httpx's ConnectError, its text
    httpcore's."""
    from providers.upstream import _ShardedTransport

    with contextlib.closing(__import__("socket").socket()) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
        transport = _ShardedTransport(1)
        with pytest.raises(httpx.ConnectError) as info:
            await transport.handle_async_request(httpx.Request("POST", f"http://127.0.0.1:{port}/v1/x", content=b"{}"))
        await transport.aclose()
    assert isinstance(info.value.__cause__, httpcore.ConnectError)
