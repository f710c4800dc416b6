"""app/h11_body.py: connections whose ``Data`` events skip h11's state-machine pass behave
exactly as h11's own, event for event.

A client and a server talk through bytes; the same random conversation (requests with
every framing, 100-continue, upgrades and CONNECT, answers, body data, ends, new cycles,
closes, and the illegal moves in between) runs on a pair of h11's connections and on a
pair of patched ones.  After every step both pairs must have answered the same (events
read, bytes written, errors raised) and be in the same state."""

from __future__ import annotations

from typing import Any

import h11
from h11._connection import Connection
from hypothesis import given, settings
from hypothesis import strategies as st

from app import h11_body


class Plain(Connection):
    _process_event = h11_body._H11_PROCESS_EVENT  # h11's own


class Patched(Connection):
    _process_event = h11_body._process_event


REQUESTS = {
    "length": (b"POST", [(b"content-length", b"5")]),
    "chunked": (b"POST", [(b"transfer-encoding", b"chunked")]),
    "no body": (b"GET", []),
    "expect": (b"POST", [(b"content-length", b"5"), (b"expect", b"100-continue")]),
    "close": (b"POST", [(b"content-length", b"3"), (b"connection", b"close")]),
    "upgrade": (b"GET", [(b"connection", b"upgrade"), (b"upgrade", b"websocket")]),
    "connect": (b"CONNECT", []),
}
RESPONSES = {
    "length": (200, [(b"content-length", b"4")]),
    "chunked": (200, [(b"transfer-encoding", b"chunked")]),
    "until close": (200, []),
    "close": (200, [(b"content-length", b"2"), (b"connection", b"close")]),
    "no content": (204, []),
    "switch": (101, [(b"connection", b"upgrade"), (b"upgrade", b"websocket")]),
}

ACTIONS = st.one_of(
    st.tuples(st.just("request"), st.sampled_from(sorted(REQUESTS))),
    st.tuples(st.just("response"), st.sampled_from(sorted(RESPONSES))),
    st.tuples(st.just("continue"), st.just("")),
    st.tuples(st.sampled_from(["client data", "server data"]), st.integers(0, 7)),
    st.tuples(st.sampled_from(["client eom", "server eom", "client close", "server close"]), st.just("")),
    st.tuples(st.sampled_from(["client reads", "server reads", "next cycle"]), st.just("")),
)


def _exchange(req: str, sent: list[int], resp: str, answered: list[int], again: bool) -> list[tuple[str, Any]]:
    """A whole request and answer, each part read by the other side as it goes."""
    out: list[tuple[str, Any]] = [("request", req), ("server reads", "")]
    for n in sent:
        out += [("client data", n), ("server reads", "")]
    out += [("client eom", ""), ("server reads", ""), ("response", resp), ("client reads", "")]
    for n in answered:
        out += [("server data", n), ("client reads", "")]
    out += [("server eom", ""), ("client reads", "")]
    return out + [("next cycle", "")] if again else out


SIZES = st.lists(st.integers(0, 3), max_size=3)
EXCHANGES = st.builds(
    _exchange, st.sampled_from(sorted(REQUESTS)), SIZES, st.sampled_from(sorted(RESPONSES)), SIZES, st.booleans()
)
# whole exchanges (mostly legal: the bodies' Data events) with random steps between them
CONVERSATIONS = st.lists(st.one_of(EXCHANGES, ACTIONS.map(lambda a: [a])), max_size=8).map(
    lambda parts: [a for p in parts for a in p]
)


def _state(c: Connection) -> tuple[Any, ...]:
    return (
        c.our_state,
        c.their_state,
        c.client_is_waiting_for_100_continue,
        c.their_http_version,
        c._cstate.keep_alive,
        frozenset(c._cstate.pending_switch_proposals),
        type(c._reader).__name__,
        type(c._writer).__name__,
        bytes(c._receive_buffer),
    )


def _do(client: Connection, server: Connection, pipe: dict[str, bytearray], action: tuple[str, Any]) -> Any:
    """One step; what it gave (events read, or the error raised)."""
    kind, arg = action
    me, other = (client, "server") if kind.startswith("client") or kind == "request" else (server, "client")
    try:
        if kind == "request":
            method, headers = REQUESTS[arg]
            out = me.send(h11.Request(method=method, target=b"/", headers=[(b"host", b"x"), *headers]))
        elif kind == "response":
            status, headers = RESPONSES[arg]
            cls = h11.InformationalResponse if status < 200 else h11.Response
            out = me.send(cls(status_code=status, headers=headers))
        elif kind == "continue":
            out = me.send(h11.InformationalResponse(status_code=100, headers=[]))
        elif kind.endswith(" data"):
            out = me.send(h11.Data(data=b"x" * arg))
        elif kind.endswith(" eom"):
            out = me.send(h11.EndOfMessage())
        elif kind.endswith(" close"):
            out = me.send(h11.ConnectionClosed())
        elif kind == "next cycle":
            client.start_next_cycle()
            server.start_next_cycle()
            return "cycled"
        else:  # a side reads what the other wrote
            reader = client if kind == "client reads" else server
            source = "server" if reader is client else "client"
            data = bytes(pipe[source])
            pipe[source].clear()
            reader.receive_data(data)
            got = []
            for _ in range(20):
                ev = reader.next_event()
                got.append(ev)
                if ev in (h11.NEED_DATA, h11.PAUSED) or type(ev) is h11.ConnectionClosed:
                    break
            return got
        if out is not None:
            pipe["client" if other == "server" else "server"] += out
        return out
    except Exception as e:  # both sides' errors are compared
        return (type(e).__name__, str(e))


@settings(max_examples=400, deadline=None)
@given(CONVERSATIONS)
def test_a_conversation_goes_the_same_on_both(actions: list[tuple[str, Any]]) -> None:
    plain = (Plain(h11.CLIENT), Plain(h11.SERVER), {"client": bytearray(), "server": bytearray()})
    patched = (Patched(h11.CLIENT), Patched(h11.SERVER), {"client": bytearray(), "server": bytearray()})
    for action in actions:
        a = _do(*plain, action)
        b = _do(*patched, action)
        assert a == b, action
        for x, y in zip(plain[:2], patched[:2], strict=True):
            assert _state(x) == _state(y), action


def test_a_streamed_body_reads_the_same() -> None:
    """The case it is for: a chunked answer read one chunk per read."""
    for cls in (Plain, Patched):
        c = cls(h11.CLIENT)
        c.send(h11.Request(method=b"POST", target=b"/", headers=[(b"host", b"x"), (b"content-length", b"0")]))
        c.send(h11.EndOfMessage())
        c.receive_data(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        assert type(c.next_event()) is h11.Response
        for _ in range(3):
            c.receive_data(b"5\r\nchunk\r\n")
            ev = c.next_event()
            assert type(ev) is h11.Data and ev.data == b"chunk"
            assert c.next_event() is h11.NEED_DATA
        c.receive_data(b"0\r\n\r\n")
        assert type(c.next_event()) is h11.EndOfMessage
        assert c.their_state is h11.DONE and c.our_state is h11.DONE
        c.start_next_cycle()
        assert c.our_state is h11.IDLE


def test_a_client_that_sends_body_data_stops_waiting_for_100_continue() -> None:
    """The one effect of the pass for a Data event, on both sides."""
    for cls in (Plain, Patched):
        client, server = cls(h11.CLIENT), cls(h11.SERVER)
        head = client.send(
            h11.Request(
                method=b"POST",
                target=b"/",
                headers=[(b"host", b"x"), (b"content-length", b"2"), (b"expect", b"100-continue")],
            )
        )
        server.receive_data(head)
        assert type(server.next_event()) is h11.Request
        assert client.client_is_waiting_for_100_continue and server.client_is_waiting_for_100_continue
        server.receive_data(client.send(h11.Data(data=b"ab")))
        assert not client.client_is_waiting_for_100_continue
        assert type(server.next_event()) is h11.Data
        assert not server.client_is_waiting_for_100_continue


def test_installed_on_h11_s_connection() -> None:
    h11_body.install()
    h11_body.install()
    assert Connection._process_event is h11_body._process_event
    assert h11.Connection is Connection
