"""Stored responses across real ``switchboard serve`` processes sharing one SQLite file.

Theory of operation
-------------------
The SQLite store keeps a put in its process's journal and writes it to the file a few
milliseconds later (``app/journal.py``).  Two proxy processes on one file (as the workers
of ``--workers`` share it, each a process of its own) play one conversation alternately,
every other pair of turns streamed: each turn goes to the other process the moment the
previous answer's terminal event (or whole body) arrives, and must find its previous
response, which may still be only in the other process's journal.

Then one process is killed with SIGKILL right after a stored answer (its put perhaps not
yet in the file): the other process continues that conversation at once (reading the dead one's
journal), applies the dead one's puts to the file, and removes its journal; a restarted
process on the file reads the whole conversation.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.system.test_stored_serve import ALICE, turn

E2E = Path(__file__).resolve().parent.parent / "e2e"
if str(E2E) not in sys.path:
    sys.path.insert(0, str(E2E))
from proxy_harness import Proxy  # noqa: E402

AUTH = {"authorization": f"Bearer {ALICE}"}


def config(db: Path) -> dict[str, Any]:
    return {
        "server": {"secret_key": "j" * 48},
        "auth": {"keys": [ALICE]},
        "store": {"backend": "sqlite", "path": str(db)},
        "providers": [{"name": "demo", "profile": "demo"}],
        "models": [{"name": "demo", "provider": "demo"}],
    }


def in_file(db: Path) -> int:
    con = sqlite3.connect(db)
    try:
        return int(con.execute("SELECT count(*) FROM responses").fetchone()[0])
    finally:
        con.close()


def test_turns_alternate_between_processes_on_one_file_and_a_killed_one_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    journal_dir = Path(str(db) + "-puts")
    proxies = [Proxy(config(db), tmp_path / f"p{i}").start() for i in range(2)]
    try:
        clients = [httpx.Client(base_url=p.url, timeout=20) for p in proxies]
        prev: str | None = None
        for i in range(20):
            stream = i // 2 % 2 == 0
            body: dict[str, Any] = {"model": "demo", "input": f"turn {i}"}
            if prev is not None:
                body["previous_response_id"] = prev
            status, got = turn(clients[i % 2], body, stream)
            assert status == 200, (i, got)
            assert got["store"] is True and got.get("previous_response_id") == prev
            assert f"You said: turn {i}" in got["output"][-1]["content"][0]["text"]
            prev = got["id"]
        # the dead process's last put: answered, then the process killed at once
        status, got = turn(clients[0], {"model": "demo", "input": "last words", "previous_response_id": prev}, False)
        assert status == 200 and got["store"] is True
        assert proxies[0].proc is not None
        os.killpg(proxies[0].proc.pid, signal.SIGKILL)
        proxies[0].proc.wait(timeout=5)
        proxies[0].proc = None
        last = got["id"]
        status, got = turn(clients[1], {"model": "demo", "input": "after", "previous_response_id": last}, True)
        assert status == 200, got
        assert got["previous_response_id"] == last
        # (continued: its whole chain was found, else 404 previous_response_not_found)
        r = clients[1].get(f"/v1/responses/{last}", headers=AUTH)
        assert r.status_code == 200
        assert "You said: last words" in r.json()["output"][-1]["content"][0]["text"]
        # the survivor applies the dead process's journal (it looks every 5 s) and removes it
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and len(os.listdir(journal_dir)) > 2:
            time.sleep(0.2)
        assert len(os.listdir(journal_dir)) == 2, os.listdir(journal_dir)  # (the survivor's own)
        for c in clients:
            c.close()
        proxies[1].stop()
        # every turn (20, the last words, the one after) is in the file, and the stopped
        # process left no journal
        assert in_file(db) == 22
        assert os.listdir(journal_dir) == []
        again = Proxy(config(db), tmp_path / "p2").start()
        proxies.append(again)
        with httpx.Client(base_url=again.url, timeout=20) as c:
            r = c.get(f"/v1/responses/{last}", headers=AUTH)
            assert r.status_code == 200 and r.json()["id"] == last
    finally:
        for p in proxies:
            p.stop()
