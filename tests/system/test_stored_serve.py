"""Stored responses across real ``switchboard serve`` processes sharing one Redis.

Theory of operation
-------------------
The test starts its own ``redis-server`` on a free port (no persistence; stopped by its PID),
two scripted upstreams (Chat, and Responses without a store of its own) and three proxy
processes configured with the Redis store, a 3 s TTL and two client keys.  With the openai
SDK it then plays, for each upstream, three turns chained by ``previous_response_id``, each
on another proxy process, and checks that the upstream of turn 3 received the whole
conversation; ``retrieve``, ``input_items.list`` and ``delete`` on yet another process; the
other key's 404; after the TTL, 404 and ``previous_response_not_found``.  Then Redis is
stopped: stateless requests are still answered, stored ones are 503 ``store_unavailable``,
``/readyz`` says degraded; Redis is started again on the same port and stored requests work
again on the same processes (they reconnect by themselves).  A missing ``redis-server``
fails the test.

The hand-off test runs two processes on one Redis: A reaches it through ``SlowRelay``,
which holds everything A sends for ``DELAY`` seconds (a slow store write, longer than any
grace a lookup could give), B directly.  One conversation alternates between them, every
other pair of turns streamed: each turn goes to the other instance the moment the previous
answer's terminal event (or whole body) arrives, and must find its previous response.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

E2E = Path(__file__).resolve().parent.parent / "e2e"
if str(E2E) not in sys.path:
    sys.path.insert(0, str(E2E))
from proxy_harness import Proxy, free_port, provider_entry  # noqa: E402
from scripted_upstream import ScriptedUpstream, Turn, chat_turn, responses_turn  # noqa: E402

ALICE = "sk-stored-alice-41d9"  # a plain key (its name is derived from its hash)
BOB = "sk-stored-bob-77e0"
TTL = 3


class RedisServer:
    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.fail("redis-server is not installed (apt-get install redis-server)")
        self.proc = subprocess.Popen(
            [
                exe,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],  # fmt: skip
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        pytest.fail(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        os.kill(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=5)


def answering(kind: str, count: list[int]) -> Turn:
    """A turn that answers 'answer <n>' (n counts this upstream's requests in ``count``)."""

    def respond(req: dict) -> Turn:
        count[0] += 1
        if kind == "chat":
            return chat_turn(text=f"answer {count[0]}")
        t = responses_turn(text=f"answer {count[0]}")
        rid = f"resp_{uuid.uuid4().hex}"  # every response its own id, as a real upstream
        t.body["id"] = rid
        for f in t.frames or []:
            if isinstance(f, dict) and isinstance(f.get("response"), dict):
                f["response"]["id"] = rid
        return t

    return Turn(respond=respond, kind=kind)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, Any]]:
    redis = RedisServer(tmp_path)
    redis.start()
    counts: tuple[list[int], list[int]] = ([0], [0])
    chat = ScriptedUpstream([answering("chat", counts[0]) for _ in range(40)], name="chat").start()
    resp = ScriptedUpstream([answering("responses", counts[1]) for _ in range(40)], name="resp").start()
    config = {
        # instances sharing a Redis store must share a secret (app/secret.py): serve refuses otherwise
        "server": {"secret_key": "s" * 48},
        "auth": {"keys": [ALICE, {"name": "bob", "key": BOB}]},
        "store": {
            "backend": "redis",
            "url": f"redis://127.0.0.1:{redis.port}/0",
            "key_prefix": f"sbtest:{uuid.uuid4().hex[:8]}:",
            "ttl_seconds": TTL,
            # (the default: a stopped Redis refuses at once, whatever the timeout; a shorter one
            # turned a loaded machine's slow first read after the restart into a 503)
            "timeout_seconds": 2,
        },
        "providers": [
            provider_entry(chat, name="chatup", protocol="chat"),
            provider_entry(resp, name="respup", protocol="responses"),
        ],
        "models": [{"name": "chat-model", "provider": "chatup"}, {"name": "resp-model", "provider": "respup"}],
    }
    proxies = [Proxy(dict(config), tmp_path / f"proxy{i}") for i in range(3)]
    try:
        for p in proxies:
            p.start()
        yield {"redis": redis, "proxies": proxies, "chat": chat, "resp": resp}
    finally:
        for p in proxies:
            p.stop()
        chat.stop()
        resp.stop()
        redis.stop()


def sdk(proxy: Proxy, key: str = ALICE) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0, timeout=10)


def texts(items: list[Any]) -> list[str]:
    out = []
    for m in items:
        c = m.get("content")
        out.append(c if isinstance(c, str) else "".join(p.get("text", "") for p in c or []))
    return out


def test_stored_conversation_across_processes(env: dict[str, Any]) -> None:
    started = time.monotonic()
    a, b, c = env["proxies"]
    for model, upstream in (("chat-model", env["chat"]), ("resp-model", env["resp"])):
        r1 = sdk(a).responses.create(model=model, input="one")
        r2 = sdk(b).responses.create(model=model, input="two", previous_response_id=r1.id)
        r3 = sdk(c).responses.create(model=model, input="three", previous_response_id=r2.id, instructions="short")
        assert r3.previous_response_id == r2.id and r3.store is True
        last = upstream.requests[-1].json
        if model == "chat-model":
            assert texts(last["messages"]) == ["short", "one", "answer 1", "two", "answer 2", "three"]
        else:
            assert "previous_response_id" not in last
            assert texts(last["input"]) == ["one", "answer 1", "two", "answer 2", "three"]
            assert last["instructions"] == "short"

        got = sdk(a).responses.retrieve(r3.id)
        assert got.id == r3.id and got.output_text == r3.output_text
        items = sdk(b).responses.input_items.list(r2.id)
        assert [texts([i.model_dump()]) for i in items.data] == [["two"]]
        with pytest.raises(openai.NotFoundError):
            sdk(c, BOB).responses.retrieve(r1.id)
        with pytest.raises(openai.NotFoundError) as e:
            sdk(c, BOB).responses.create(model=model, input="x", previous_response_id=r1.id)
        assert e.value.code == "previous_response_not_found"
        sdk(c).responses.delete(r3.id)
        with pytest.raises(openai.NotFoundError):
            sdk(a).responses.retrieve(r3.id)

    # after the TTL: gone everywhere
    r1 = sdk(a).responses.create(model="chat-model", input="short-lived")
    time.sleep(TTL + 0.5)
    with pytest.raises(openai.NotFoundError):
        sdk(b).responses.retrieve(r1.id)
    with pytest.raises(openai.NotFoundError) as e:
        sdk(c).responses.create(model="chat-model", input="x", previous_response_id=r1.id)
    assert e.value.code == "previous_response_not_found"

    # Redis stopped: stateless traffic unaffected, stored traffic 503, /readyz degraded
    env["redis"].stop()
    for p in (a, b):
        stateless = sdk(p).responses.create(model="chat-model", input="x", store=False)
        assert stateless.output_text
        with pytest.raises(openai.InternalServerError) as e:
            sdk(p).responses.create(model="chat-model", input="x", previous_response_id="resp_anything")
        assert e.value.status_code == 503 and e.value.code == "store_unavailable"
        ready = httpx.get(f"{p.url}/readyz", timeout=5)
        assert ready.status_code == 200 and ready.json()["store"] == "degraded"
    metrics = httpx.get(f"{a.url}/metrics", timeout=5).text
    assert 'switchboard_store_errors_total{op="get"}' in metrics
    assert "response store (redis) failed on get: ConnectionError" in a.log(100_000)  # the 503's cause

    # Redis back on the same port: the same processes recover by themselves
    env["redis"].start()
    r1 = sdk(a).responses.create(model="chat-model", input="again")
    try:
        r2 = sdk(b).responses.create(model="chat-model", input="and again", previous_response_id=r1.id)
    except openai.APIStatusError as e:
        pytest.fail(f"after Redis came back: {e}\nlog of b:\n{b.log()}")
    assert r2.previous_response_id == r1.id
    assert httpx.get(f"{b.url}/readyz", timeout=5).json()["store"] == "ok"
    assert time.monotonic() - started < 40


DELAY = 0.1  # what SlowRelay holds each write of instance A back


class SlowRelay:
    """A TCP relay to Redis on ``port``: what a client sends reaches Redis ``DELAY`` seconds
    later; Redis's answers come back at once.  Threads, stopped with their sockets."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.socks: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            self.socks += [client, server]
            threading.Thread(target=self._pipe, args=(client, server, DELAY), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, 0.0), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket, delay: float) -> None:
        try:
            while data := src.recv(65536):
                time.sleep(delay)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self) -> None:
        for s in self.socks:
            s.close()


TERMINALS = ("response.completed", "response.incomplete", "response.failed")


def turn(c: httpx.Client, body: dict[str, Any], stream: bool) -> tuple[int, dict[str, Any]]:
    """One turn: (status, response object or error body), returned the moment the answer's
    terminal event (or whole body) is read."""
    headers = {"authorization": f"Bearer {ALICE}"}
    if not stream:
        r = c.post("/v1/responses", json=body, headers=headers)
        return r.status_code, r.json()
    with c.stream("POST", "/v1/responses", json={**body, "stream": True}, headers=headers) as r:
        if r.status_code != 200:
            return r.status_code, orjson.loads(r.read())
        event = ""
        for line in r.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event in TERMINALS:
                return 200, orjson.loads(line[6:])["response"]
    raise AssertionError("the stream ended without a terminal event")


def test_every_turn_finds_its_previous_response_on_the_other_instance(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path)
    redis.start()
    relay = SlowRelay(redis.port)
    store = {"backend": "redis", "key_prefix": f"sbhand:{uuid.uuid4().hex[:8]}:", "timeout_seconds": 5}
    proxies = []
    try:
        for i, port in enumerate((relay.port, redis.port)):
            config = {
                "server": {"secret_key": "h" * 48},
                "auth": {"keys": [ALICE]},
                "store": {**store, "url": f"redis://127.0.0.1:{port}/0"},
                "providers": [{"name": "demo", "profile": "demo"}],
                "models": [{"name": "demo", "provider": "demo"}],
            }
            proxies.append(Proxy(config, tmp_path / f"hand{i}").start())
        clients = [httpx.Client(base_url=p.url, timeout=20) for p in proxies]
        prev: str | None = None
        lost: list[str] = []
        for i in range(20):
            stream = i // 2 % 2 == 0  # A and B streamed, then A and B not, ...
            body: dict[str, Any] = {"model": "demo", "input": f"turn {i}"}
            if prev is not None:
                body["previous_response_id"] = prev
            status, got = turn(clients[i % 2], body, stream)
            if status != 200:  # noted; the same turn once the put surely landed, to go on
                lost.append(f"turn {i} on {'AB'[i % 2]} (stream={stream}): {status} {got['error']['code']}")
                time.sleep(1)
                status, got = turn(clients[i % 2], body, stream)
                assert status == 200, got
            assert got["store"] is True and got.get("previous_response_id") == prev
            assert f"You said: turn {i}" in got["output"][-1]["content"][0]["text"]
            prev = got["id"]
        assert not lost, lost
        items = clients[0].get(f"/v1/responses/{prev}/input_items", headers={"authorization": f"Bearer {ALICE}"})
        assert items.status_code == 200
        for c in clients:
            c.close()
    finally:
        for p in proxies:
            p.stop()
        relay.stop()
        redis.stop()
