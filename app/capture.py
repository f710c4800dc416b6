"""Capture: the loop from a field failure to a test.

Theory of operation
-------------------
With ``capture.enabled`` (per model glob, per client key name), each matching exchange is
written as one JSON line once its answer ended (``Capture.finish``, from the request's log
line), so that ``switchboard replay FILE`` (``app/replay.py``) can run the upstream's bytes
through today's code offline and show what changed.  A line holds:

==================  ============================================================================
field               what
==================  ============================================================================
``v``               the format's version (1)
``ts``              when the answer ended (epoch seconds)
``request_id``      the request's id (as in its log line)
``key``             the client key's configured name
``client``,         the client's protocol and the upstream's (a Bridge direction), the transport
``upstream``,       (``http`` | ``websocket``)
``transport``
``model``,          the public model, the upstream model, the provider, its profile, the quirks
``upstream_model``, that were on, the catalogue's output limit, whether an incomplete answer
``provider``,       counted as completed
``profile``,
``quirks``,
``max_output``,
``incomplete_as_completed``
``client_request``  the client's request body (parsed JSON), a stored conversation put back
``answered``        the response fields the proxy honoured itself (``store``,
                    ``previous_response_id``: its response store), which the answer echoes
``upstream_request`` ``{"url", "body"}``: what was sent upstream (no headers: they hold credentials)
``upstream``        what came back, in order: ``[ms since the request, kind, input]``; kind
                    ``data`` (bytes, as a latin-1 string: exact), ``end``, ``fail``
                    (``{code, message}``), ``object`` (a whole answer's JSON)
``client``          ``[ms, bytes as a latin-1 string]`` the client got for each of those
``status``,         the HTTP status, the outcome, the repairs that fired
``terminal``,
``repairs``
==================  ============================================================================

Every string goes through the configured secrets' mask (``transformers.masking``), as log
lines do.  The file is rotated at ``capture.max_bytes`` (``FILE`` → ``FILE.1`` …, the oldest
beyond ``capture.keep`` deleted).  The write is synchronous and small (one line per
answer); capture is a diagnosis tool, off in normal operation.
"""

from __future__ import annotations

import fnmatch
import os
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from app.logs import log
from app.prepare import Prepared
from providers.config import CaptureCfg
from transformers.masking import SecretMask

__all__ = ["Capture", "Recording", "default_path"]

VERSION = 1


def default_path() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "switchboard", "capture.jsonl")


class Recording:
    """One exchange's record while it runs: the Bridge's ``tap``."""

    __slots__ = ("sink", "started", "upstream", "client", "request", "answered")

    def __init__(self, sink: Capture, started: float, request: Any, answered: dict[str, Any] | None = None) -> None:
        self.sink = sink  # where the record goes when the answer ends
        self.started = started
        self.upstream: list[list[Any]] = []
        self.client: list[list[Any]] = []
        self.request = request
        self.answered = dict(answered or {})

    def __call__(self, what: str, given: Any, out: bytes) -> None:
        ms = round((time.perf_counter() - self.started) * 1000, 3)
        if what == "data":
            given = given.decode("latin-1")
        self.upstream.append([ms, what, given])
        self.client.append([ms, out.decode("latin-1")])


class Capture:
    """The app's capture (``capture`` in the config)."""

    def __init__(self, cfg: CaptureCfg, mask: SecretMask) -> None:
        self.cfg = cfg
        self.mask = mask
        self.path = Path(cfg.path or default_path())
        self._lock = threading.Lock()

    def matches(self, owner: str, model: str) -> bool:
        cfg = self.cfg
        if cfg.keys and owner not in cfg.keys:
            return False
        return not cfg.models or any(fnmatch.fnmatchcase(model, g) for g in cfg.models)

    def begin(self, p: Prepared, request: Any, answered: dict[str, Any] | None = None) -> None:
        """Record ``p``'s exchange (``request``: the client's body, parsed; ``answered``: the
        fields the app's response store honoured, which the Bridge echoes)."""
        if self.matches(p.owner, p.route.public_model):
            rec = Recording(self, p.started, request, answered)
            p.capture = rec
            p.bridge.tap = rec

    def finish(self, p: Prepared, terminal: str) -> None:
        rec: Recording | None = p.capture
        if rec is None:
            return
        p.capture = None
        p.bridge.tap = None
        prov = p.route.provider
        line = {
            "v": VERSION,
            "ts": round(time.time(), 3),
            "request_id": p.request_id,
            "key": p.owner,
            "client": p.client,
            "upstream": p.upstream,
            "transport": p.transport,
            "model": p.route.public_model,
            "upstream_model": p.route.upstream_model,
            "provider": prov.name,
            "profile": prov.profile,
            "quirks": sorted(p.route.quirks),
            "max_output": p.ctx.max_output_tokens,
            "incomplete_as_completed": bool(getattr(p.bridge, "_incomplete_as_completed", False)),
            "client_request": rec.request,
            "answered": rec.answered,
            "upstream_request": {"url": prov.url(p.upstream), "body": _json(p.upstream_body)},
            "upstream_events": rec.upstream,
            "client_events": rec.client,
            "status": p.status,
            "terminal": terminal,
            "repairs": sorted(set(p.ctx.repairs)),
        }
        try:
            data = self.mask(orjson.dumps(line).decode()).encode() + b"\n"
            self._write(data)
        except Exception as e:  # a capture never fails a request
            log.warning("capture_failed", request_id=p.request_id, error=type(e).__name__)

    def _write(self, data: bytes) -> None:
        with self._lock:
            path = self.path
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                size = 0
            if size and size + len(data) > self.cfg.max_bytes:
                self._rotate()
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # prompts: the owner's only
            try:
                os.write(fd, data)
            finally:
                os.close(fd)

    def _rotate(self) -> None:
        keep = self.cfg.keep
        path = self.path
        if keep == 0:
            path.unlink(missing_ok=True)
            return
        Path(f"{path}.{keep}").unlink(missing_ok=True)
        for i in range(keep - 1, 0, -1):
            src = Path(f"{path}.{i}")
            if src.exists():
                src.rename(f"{path}.{i + 1}")
        path.rename(f"{path}.1")


def _json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("latin-1")
