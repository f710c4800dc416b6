"""Shared pieces of the tests that put a *Messages upstream* (``messages_upstream.py``)
behind the proxy: the fixture that starts one, the checks every recorded request must
pass, and request predicates on a Messages body.

Theory of operation
-------------------
* ``messages_upstream(turns, name=...)`` (a pytest fixture; a test module imports
  ``messages_upstream_fixture``, which pytest knows by that name) starts a ``MessagesUpstream`` on 127.0.0.1 and stops it at teardown.  Its
  ``base_url`` is the bare origin, what a ``profile: anthropic`` provider takes (the proxy
  appends ``/v1/messages``), so ``proxy_for(up, profile="anthropic", protocol="messages")``
  (``conftest``) puts it behind a real proxy process as is.
* ``check_upstream_headers(up, ...)``: every request the proxy made carries the provider's
  key as ``x-api-key`` (never the client's, no ``Authorization``), ``anthropic-version:
  2023-06-01``, and an ``anthropic-beta`` exactly as given (``None``: absent).
* predicates (``tool_result_for``, ``assistant_blocks``, ``replays_block``) read a Messages
  request body; ``sbx_id`` is the proxy's reversible mapping of a tool id that Anthropic's
  ``^[a-zA-Z0-9_-]+$`` rejects (``transformers/ids.to_anthropic_id``), written out here so
  the tests do not import the proxy.
* ``cache_control_paths(body)``: where ``cache_control`` sits in a Messages body (a path
  tuple -> its value), to compare what a client sent with what the upstream got.
* ``stage_fixture(Route(...), ..., name="stage", server=None)``: a module-scoped fixture
  ``stage`` (or ``name``; ``server``: more ``server`` settings): ONE proxy process
  for the whole module (a proxy start costs about a second) in front of one scripted
  upstream per route (``kind``: ``messages`` -> ``MessagesUpstream``, ``chat`` /
  ``responses`` -> ``ScriptedUpstream``), each its own provider (``profile``,
  ``protocol``, ``provider_extra``) under its own client-facing model name.  A test calls
  ``stage.script(model, turns)``, which gives that upstream a fresh script and record
  (``set_script``) and returns it; ``stage.proxy`` is the ``Proxy`` (``.url``,
  ``.base_url``, ``.log()``: the log is the module's, newest last; ``mark()`` /
  ``log_since(mark)`` cut out one test's part).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from messages_upstream import MessagesUpstream, block_text, tool_results
from proxy_harness import PROXY_CLIENT_KEY, UPSTREAM_KEY, Proxy, provider_entry
from scripted_upstream import ScriptedUpstream

ANTHROPIC_VERSION = "2023-06-01"
ANTHROPIC_ID_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@pytest.fixture(name="messages_upstream")
def messages_upstream_fixture():
    started: list[MessagesUpstream] = []

    def make(turns, name: str = "", **kw) -> MessagesUpstream:
        up = MessagesUpstream(turns, name=name, **kw).start()
        started.append(up)
        return up

    yield make
    for up in started:
        up.stop()


@dataclass(frozen=True)
class Route:
    model: str  # the client-facing model name (and the upstream model)
    profile: str = "anthropic"
    protocol: str = "messages"
    kind: str = "messages"  # the scripted upstream: messages | chat | responses
    provider_extra: tuple[tuple[str, Any], ...] = ()  # more provider settings, as (key, value) pairs
    upstream_model: str | None = None  # the name the upstream gets, when not ``model``


class Stage:
    """One proxy process in front of one scripted upstream per ``Route``."""

    def __init__(self, routes: tuple[Route, ...], workdir, server: dict | None = None) -> None:
        self.ups: dict[str, ScriptedUpstream] = {}
        providers, models = [], []
        try:
            for i, r in enumerate(routes):
                up_cls = MessagesUpstream if r.kind == "messages" else ScriptedUpstream
                up = up_cls([], name=f"{r.kind}-{r.model}").start()
                self.ups[r.model] = up
                prov = provider_entry(
                    up,
                    name=f"p{i}-{r.profile}-{r.protocol}",
                    profile=r.profile,
                    protocol=r.protocol,
                    **dict(r.provider_extra),
                )
                providers.append(prov)
                models.append({"name": r.model, "provider": prov["name"]})
                if r.upstream_model:
                    models[-1]["upstream_model"] = r.upstream_model
            cfg = {
                "server": {"host": "127.0.0.1", "port": 0, **(server or {})},
                "auth": {"keys": [PROXY_CLIENT_KEY]},
                "providers": providers,
                "models": models,
            }
            self.proxy = Proxy(cfg, workdir)
            self.proxy.start()
        except BaseException:
            self.stop()
            raise

    def script(self, model: str, turns) -> ScriptedUpstream:
        up = self.ups[model]
        up.set_script(turns)
        return up

    def mark(self) -> int:
        """Where the proxy's log ends now (for ``log_since``)."""
        try:
            return self.proxy.log_path.stat().st_size
        except OSError:
            return 0

    def log_since(self, mark: int) -> str:
        """The proxy's log written after ``mark``: this test's part of the module's log."""
        try:
            with open(self.proxy.log_path, "rb") as f:
                f.seek(mark)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return "<no proxy log>"

    def stop(self) -> None:
        proxy = getattr(self, "proxy", None)
        if proxy is not None:
            proxy.stop()
        for up in self.ups.values():
            up.stop()


def stage_fixture(*routes: Route, name: str = "stage", server: dict | None = None):
    """A module-scoped fixture named ``name`` (assign it to a module-level name); ``server``:
    more ``server`` settings of the proxy's config."""

    @pytest.fixture(scope="module", name=name)
    def _stage(tmp_path_factory):
        st = Stage(routes, tmp_path_factory.mktemp(name), server)
        yield st
        st.stop()

    return _stage


def sbx_id(raw: str) -> str:
    """What a Messages client must see for an upstream tool id outside Anthropic's alphabet."""
    return "sbx_" + raw.encode().hex()


def anthropic_valid_id(i: str) -> bool:
    return bool(i) and set(i) <= ANTHROPIC_ID_CHARS


def check_upstream_headers(up: MessagesUpstream, info: str, *, beta: str | None) -> None:
    reqs = up.message_requests
    assert reqs, info
    for r in reqs:
        h = r.headers
        assert r.path == "/v1/messages", info
        assert h.get("x-api-key") == UPSTREAM_KEY, info  # the provider's key, never the client's
        assert "authorization" not in h, info
        assert PROXY_CLIENT_KEY not in json.dumps(h), info
        assert h.get("anthropic-version") == ANTHROPIC_VERSION, info
        assert h.get("anthropic-beta") == beta, (f"anthropic-beta {h.get('anthropic-beta')!r} != {beta!r}", info)


# --------------------------------------------------------------------------- body readers


def assistant_blocks(req: dict, which: int = -1) -> list[dict]:
    """The content blocks of an assistant turn of a Messages body (the last by default)."""
    turns = [m for m in req.get("messages") or [] if m.get("role") == "assistant"]
    if not turns:
        return []
    c = turns[which].get("content")
    if isinstance(c, str):
        return [{"type": "text", "text": c}]
    return [b for b in c or [] if isinstance(b, dict)]


def tool_result_for(req: dict, tool_use_id: str) -> dict | None:
    found = [r for r in tool_results(req) if r.get("tool_use_id") == tool_use_id]
    return found[0] if len(found) == 1 else None


def result_has(req: dict, tool_use_id: str, needle: str) -> bool:
    r = tool_result_for(req, tool_use_id)
    return r is not None and needle in block_text(r) and not r.get("is_error")


def replays_block(req: dict, block: dict) -> bool:
    """``block`` (a thinking / tool_use block) is in the last assistant turn, key for key."""
    return any(all(b.get(k) == v for k, v in block.items()) for b in assistant_blocks(req))


def thinking_consistent(req: dict) -> bool:
    """What Anthropic requires of a request with thinking on: the last assistant turn, when
    it calls tools, starts with a thinking block carrying a signature (not the proxy's own
    ``pxy1.`` envelope), or a redacted_thinking block."""
    t = req.get("thinking")
    if not (isinstance(t, dict) and t.get("type") in ("enabled", "adaptive")):
        return True
    blocks = assistant_blocks(req)
    if not any(b.get("type") == "tool_use" for b in blocks):
        return True
    first = blocks[0]
    if first.get("type") == "redacted_thinking":
        return True
    sig = first.get("signature")
    return first.get("type") == "thinking" and isinstance(sig, str) and bool(sig) and not sig.startswith("pxy1.")


def all_of(*preds: Callable[[dict], bool]) -> Callable[[dict], bool]:
    return lambda req: all(p(req) for p in preds)


def cache_control_paths(body: dict) -> dict[tuple, dict]:
    """Every ``cache_control`` in ``system``, ``tools`` and ``messages[*].content[*]``."""
    out: dict[tuple, dict] = {}
    system = body.get("system")
    for i, b in enumerate(system if isinstance(system, list) else []):
        if isinstance(b, dict) and "cache_control" in b:
            out[("system", i)] = b["cache_control"]
    for t in body.get("tools") or []:
        if isinstance(t, dict) and "cache_control" in t:
            out[("tools", t.get("name"))] = t["cache_control"]
    for i, m in enumerate(body.get("messages") or []):
        c = m.get("content")
        for j, b in enumerate(c if isinstance(c, list) else []):
            if isinstance(b, dict) and "cache_control" in b:
                out[("messages", i, j, b.get("type"))] = b["cache_control"]
    return out
