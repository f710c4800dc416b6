"""bench/instructions.py: the callgrind dump's total, and the request loop (both answer
framings, errors named).  No valgrind here: the counting is valgrind's own."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from bench.instructions import CASES, send, total_instructions


def test_total_is_read_from_the_dump(tmp_path: Path) -> None:
    dump = tmp_path / "callgrind.out.1"
    dump.write_text("version: 1\ncreator: callgrind\ncmd: x\nevents: Ir\nsummary: 730271080\n\nfn=(1) main\n3 4\n")
    assert total_instructions(dump) == 730271080
    (tmp_path / "empty").write_text("events: Ir\n")
    with pytest.raises(RuntimeError, match="no totals"):
        total_instructions(tmp_path / "empty")


def serve(answers: list[bytes]) -> tuple[int, threading.Thread, list[bytes]]:
    """One connection: reads a request, writes the next answer, for each answer."""
    srv = socket.create_server(("127.0.0.1", 0))
    got: list[bytes] = []

    def run() -> None:
        conn, _ = srv.accept()
        with conn, srv:
            for a in answers:
                data = b""
                while b"\r\n\r\n" not in data or not data.endswith(b"}"):
                    data += conn.recv(65536)
                got.append(data)
                conn.sendall(a)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return srv.getsockname()[1], t, got


def test_send_reads_each_answer_to_its_end() -> None:
    plain = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"
    chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    port, t, got = serve([plain, chunked, plain])
    path, body = CASES["ns-chat"]
    send(port, 3, path, body)
    t.join(5)
    assert len(got) == 3 and all(g.endswith(body) and g.startswith(b"POST /v1/chat/completions ") for g in got)


def test_send_names_an_error_answer() -> None:
    port, t, _ = serve([b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}"])
    with pytest.raises(RuntimeError, match="404"):
        send(port, 1, *CASES["ns-chat"])
    t.join(5)


def test_the_reference_cases_send_what_their_switchboard_cases_send() -> None:
    from bench.instructions import REFERENCE

    assert REFERENCE and all(r.startswith("ref-") for r in REFERENCE)
    for r in REFERENCE:
        assert CASES[r] == CASES[r.removeprefix("ref-")]
        assert CASES[r][0] == "/v1/chat/completions"  # the forwarder passes the client's protocol on
