"""The console: a page for people, served by the proxy at ``/console`` (admins only).

Theory of operation
-------------------
**Who.**  ``GET /console`` answers a login form until the browser holds a session; the form
posts the admin key (``auth.admin_keys``) to ``POST /console/login``, which answers a
session cookie (``sb_console``: HttpOnly, SameSite=Strict, Path=/, Secure when the request
came over HTTPS, ``SESSION_SECONDS`` long) and a redirect back.  The cookie holds its expiry,
the actor (``admin:<12 hex>`` of the admin key: what the audit says) and an HMAC-SHA256 of
both under a key derived from ``server.secret_key`` (so a session is valid on every instance
that shares the secret; without one, a random key of this process).  A session ends at its
expiry, at ``POST /console/logout``, or when its admin key leaves ``auth.admin_keys``.  No key
ever travels in a URL.  Without any admin key the console does not exist (404).

**What it shows.**  The page (static HTML, CSS and plain JS under ``app/console/``, no build
step; charts drawn as SVG by the page itself) reads ``GET /console/api/overview`` every two
seconds and the keys from ``/v1/admin/keys`` (app/admin.py: the page manages keys there,
with the session and the header ``x-switchboard-console: 1``).  Every name that came from a
client (a key, a model) is put in the page as text, never as markup.  The overview:

* ``now``: the last ``WINDOW`` seconds of this process's metrics (``Sampler``: a snapshot of
  the counters and histograms every second while a console looks, on any instance, and
  ``_WATCH`` seconds after; nothing otherwise): requests and tokens per second, answers open,
  errors by kind (HTTP status, stream failure code, client cancel), latency and time to
  first token percentiles (from the histograms' buckets, interpolated), a per-second series.
  With the Redis store each instance also writes its window to ``<key_prefix>console:now``
  every second, and the overview sums the windows of the instances heard from in the last
  ``_LIVE`` seconds: the whole cluster.
* ``keys``: each key's usage today and this month (UTC), from the usage records (the same
  sums as ``/v1/admin/usage``, for the whole cluster when the store is shared), what cache
  reads saved by the models' prices, and the budget left of each day or month limit.
* ``health``: each provider's breakers (the worst state any instance reports), attempts,
  failed attempts by class, upstream error codes, fallbacks taken, the error rate.
* ``failures``: the last failed turns (usage records with outcome ``failed`` or ``error``)
  with their request ids.
"""

from __future__ import annotations

import asyncio
import calendar
import contextlib
import functools
import hashlib
import hmac
import os
import secrets
import socket
import time
from collections import deque
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

import orjson
from starlette.requests import Request
from starlette.responses import Response

from app.logs import log
from app.metrics import DURATION_BUCKETS
from app.prepare import new_request_id
from app.usage import UsageError, UsageRecord, aggregate, iso

__all__ = ["Sampler", "Sessions", "console_routes"]

COOKIE = "sb_console"
SESSION_SECONDS = 12 * 3600
WINDOW = 60  # seconds the "now" panel covers
_LIVE = 5.0  # seconds an instance's published window counts
_WATCH = 120.0  # seconds the metrics are sampled after a console last looked
_CACHE = 2.0  # seconds an overview's usage part is reused
_BEFORE_SECONDS = 600.0  # seconds the month's sums before today are reused
_FAILURES = 25
_FORM_MAX = 8192  # bytes of the login form's body
STATIC = {
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
_SECURITY = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",  # (no-referrer: a form POST would say Origin: null)
    "cache-control": "no-store",
}


_LOGIN_FAILED = b'<p class="error" id="login-error" role="alert">That is not an admin key.</p>'


@functools.cache
def _asset(name: str) -> bytes:
    return resources.files("app").joinpath("console", name).read_bytes()


class Sessions:
    """The console's signed session cookies."""

    def __init__(self, secret: bytes, auth: Any) -> None:
        self.key = hmac.new(secret or os.urandom(32), b"switchboard-console-session", hashlib.sha256).digest()
        self.auth = auth

    def _mac(self, payload: str) -> str:
        return hmac.new(self.key, payload.encode(), hashlib.sha256).hexdigest()

    def issue(self, actor: str, now: float) -> str:
        payload = f"{int(now + SESSION_SECONDS)}.{actor}"
        return f"{payload}.{self._mac(payload)}"

    def actor(self, request: Request) -> str | None:
        """The admin of the request's session; None without a valid one."""
        raw = request.cookies.get(COOKIE)
        if not raw or len(raw) > 200:
            return None
        parts = raw.split(".")
        if len(parts) != 3 or not parts[0].isdigit():
            return None
        exp, actor, mac = parts
        if not hmac.compare_digest(mac, self._mac(f"{exp}.{actor}")) or int(exp) <= time.time():
            return None
        if not actor.startswith("admin:") or actor[6:] not in {d.hex()[:12] for d in self.auth.digests()}:
            return None  # (its admin key was removed from the config)
        return actor


# -- the metrics' window -------------------------------------------------------------------

_BOUNDS = (*DURATION_BUCKETS, float("inf"))
# the metrics the "now" and "health" panels read
_SAMPLED = (
    "switchboard_requests_total",
    "gen_ai_client_token_usage",
    "gen_ai_server_request_duration_seconds",
    "gen_ai_server_time_to_first_token_seconds",
    "switchboard_stream_outcomes_total",
    "switchboard_stream_failures_total",
    "switchboard_upstream_attempts_total",
    "switchboard_upstream_errors_total",
    "switchboard_fallbacks_total",
)


def _hist(out: list[float], sample: Any) -> None:
    le = float(sample.labels["le"])
    out[_BOUNDS.index(le)] += sample.value


def _add(a: dict[str, Any], b: dict[str, Any], sign: int = 1) -> dict[str, Any]:
    """``a + sign * b``, key by key, into nested dicts and lists of numbers."""
    out = dict(a)
    for k, v in b.items():
        cur = out.get(k)
        if isinstance(v, dict):
            out[k] = _add(cur if isinstance(cur, dict) else {}, v, sign)
        elif isinstance(v, list):
            base = cur if isinstance(cur, list) and len(cur) == len(v) else [0.0] * len(v)
            out[k] = [x + sign * y for x, y in zip(base, v, strict=True)]
        elif isinstance(v, int | float):
            out[k] = (cur if isinstance(cur, int | float) else 0) + sign * v
    return out


def percentiles(buckets: list[float]) -> dict[str, float | None]:
    """p50, p90 and p99 in ms from cumulative bucket counts (``_BOUNDS``), interpolated in
    the bucket; past the last finite bound: that bound."""
    total = buckets[-1] if buckets else 0
    out: dict[str, float | None] = {}
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        if total <= 0:
            out[name] = None
            continue
        rank = q * total
        lo, below = 0.0, 0.0
        got = _BOUNDS[-2]
        for bound, count in zip(_BOUNDS, buckets, strict=True):
            if count >= rank:
                if bound != float("inf"):
                    inside = count - below
                    got = lo + (bound - lo) * ((rank - below) / inside if inside else 1.0)
                break
            lo, below = bound, count
        out[name] = round(got * 1000, 1)
    return out


class Sampler:
    """This process's counters every second (``WINDOW`` seconds kept), published to Redis
    when the store is shared."""

    def __init__(self, svc: Any) -> None:
        self.svc = svc
        self.samples: deque[tuple[float, dict[str, Any]]] = deque(maxlen=WINDOW + 1)
        self.instance = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        store = svc.store
        self.redis = getattr(store, "redis", None)
        self.key = (getattr(store, "prefix", "") or "") + "console:now"
        self.watch_key = (getattr(store, "prefix", "") or "") + "console:watch"
        self.watched_until = 0.0
        self._announced = -_WATCH
        self._task: asyncio.Task[None] | None = None

    def snapshot(self) -> dict[str, Any]:
        """The counters now (cumulative since this process started)."""
        snap: dict[str, Any] = {"requests": 0.0, "status": {}, "tokens": 0.0, "outcomes": {}, "stream_failures": {}}
        dur = [0.0] * len(_BOUNDS)
        ttft = [0.0] * len(_BOUNDS)
        prov: dict[str, dict[str, Any]] = {}

        def p(name: str) -> dict[str, Any]:
            return prov.setdefault(
                name, {"requests": 0.0, "attempts": {}, "upstream_errors": {}, "stream_failures": 0.0, "fallbacks": 0.0}
            )

        for s in self.svc.counters.samples(_SAMPLED):
            n, lab, v = s.name, s.labels, s.value
            if n == "switchboard_requests_total":
                snap["requests"] += v
                snap["status"][lab["status"]] = snap["status"].get(lab["status"], 0.0) + v
                if lab["provider"] != "-":
                    p(lab["provider"])["requests"] += v
            elif n == "gen_ai_client_token_usage_sum" and lab.get("gen_ai_token_type") in ("input", "output"):
                snap["tokens"] += v
            elif n == "gen_ai_server_request_duration_seconds_bucket":
                _hist(dur, s)
            elif n == "gen_ai_server_time_to_first_token_seconds_bucket":
                _hist(ttft, s)
            elif n == "switchboard_stream_outcomes_total":
                o = snap["outcomes"]
                o[lab["outcome"]] = o.get(lab["outcome"], 0.0) + v
            elif n == "switchboard_stream_failures_total":
                f = snap["stream_failures"]
                f[lab["code"]] = f.get(lab["code"], 0.0) + v
                p(lab["provider"])["stream_failures"] += v
            elif n == "switchboard_upstream_attempts_total":
                a = p(lab["provider"])["attempts"]
                a[lab["outcome"]] = a.get(lab["outcome"], 0.0) + v
            elif n == "switchboard_upstream_errors_total":
                e = p(lab["provider"])["upstream_errors"]
                e[lab["code"]] = e.get(lab["code"], 0.0) + v
            elif n == "switchboard_fallbacks_total":
                p(lab["provider"])["fallbacks"] += v
        snap["duration"] = dur
        snap["ttft"] = ttft
        snap["providers"] = prov
        return snap

    def sample(self, now: float) -> None:
        self.samples.append((now, self.snapshot()))

    async def sample_async(self) -> None:
        """``sample`` with the registry read in a thread (a few ms per thousand series the
        event loop does not wait for)."""
        snap = await asyncio.to_thread(self.snapshot)
        self.samples.append((time.time(), snap))

    def window(self) -> dict[str, Any]:
        """This process's last ``WINDOW`` seconds: the counters' growth, a per-second series,
        the answers open now, and the counters since start."""
        if not self.samples:
            self.sample(time.time())
        t_end, last = self.samples[-1]
        t0, first = self.samples[0]
        delta = _add(last, first, -1)
        series = []
        prev = None
        for t, s in self.samples:
            if prev is not None:
                series.append(
                    {
                        "t": round(t, 3),
                        "requests": s["requests"] - prev["requests"],
                        "tokens": s["tokens"] - prev["tokens"],
                        "errors": _errors(s) - _errors(prev),
                    }
                )
            prev = s
        return {
            "seconds": max(t_end - t0, 0.0),
            "delta": delta,
            "totals": last,
            "series": series,
            "open": len(self.svc.drain.open),
            "breakers": self.svc.resilience.states(),
            "ts": t_end,
            "instance": self.instance,
        }

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="console-sampler")

    async def watch(self, now: float) -> None:
        """A console is looking: sample for the next ``_WATCH`` seconds (every instance of
        the Redis store, through ``console:watch``)."""
        self.watched_until = now + _WATCH
        if self.redis is not None and now - self._announced > _WATCH / 4:
            self._announced = now
            with contextlib.suppress(Exception):
                await self.redis.set(self.watch_key, b"1", ex=int(_WATCH))

    async def _watched(self, now: float) -> bool:
        if self.watched_until > now:
            return True
        if self.redis is None:
            return False
        try:
            return bool(await self.redis.exists(self.watch_key))
        except Exception:
            return False

    async def _run(self) -> None:
        failing = False
        while True:
            await asyncio.sleep(1.0)
            try:
                if not await self._watched(time.time()):
                    self.samples.clear()  # (nobody looks: nothing sampled, no stale minute kept)
                    continue
                await self.sample_async()
                if self.redis is not None:
                    blob = orjson.dumps(self.window())
                    async with self.redis.pipeline(transaction=False) as pipe:
                        pipe.hset(self.key, self.instance, blob)
                        pipe.expire(self.key, 60)
                        await pipe.execute()
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if not failing:
                    log.warning("console_sample_failed", error=type(e).__name__)
                failing = True

    async def cluster(self) -> list[dict[str, Any]]:
        """The windows of every instance heard from lately (this one's included); this
        one's alone without Redis or when it does not answer."""
        mine = self.window()
        if self.redis is None:
            return [mine]
        try:
            raw = await self.redis.hgetall(self.key)
        except Exception:
            return [mine]
        out = [mine]
        now = time.time()
        for inst, blob in raw.items():
            name = inst.decode() if isinstance(inst, bytes) else inst
            if name == self.instance:
                continue
            with contextlib.suppress(Exception):
                w = orjson.loads(blob)
                if now - float(w["ts"]) <= _LIVE:
                    out.append(w)
        return out

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.redis is not None:
            with contextlib.suppress(Exception):
                await self.redis.hdel(self.key, self.instance)


def _errors(s: dict[str, Any]) -> float:
    bad = sum(v for k, v in s["status"].items() if k.isdigit() and int(k) >= 400)
    return bad + sum(s["stream_failures"].values())


_WORST = {"closed": 0, "half_open": 1, "open": 2}


def now_panel(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """The "now" and "health" figures of every instance's window, summed."""
    delta: dict[str, Any] = {}
    totals: dict[str, Any] = {}
    series: dict[int, dict[str, float]] = {}
    breakers: dict[str, str] = {}
    open_now = 0
    seconds = 0.0
    for w in windows:
        delta = _add(delta, w["delta"])
        totals = _add(totals, w["totals"])
        open_now += int(w["open"])
        seconds = max(seconds, float(w["seconds"]))
        for point in w["series"]:
            slot = series.setdefault(int(point["t"]), {"requests": 0.0, "tokens": 0.0, "errors": 0.0})
            for k in ("requests", "tokens", "errors"):
                slot[k] += point[k]
        for name, state in w["breakers"].items():
            if _WORST.get(state, 0) > _WORST.get(breakers.get(name, "closed"), 0):
                breakers[name] = state
    span = seconds or 1.0
    errors: dict[str, float] = {}
    for status, n in (delta.get("status") or {}).items():
        if status.isdigit() and int(status) >= 400 and n:
            errors[f"HTTP {status}"] = n
    for code, n in (delta.get("stream_failures") or {}).items():
        if n:
            errors[f"stream {code}"] = n
    cancels = (delta.get("outcomes") or {}).get("client_cancel", 0)
    if cancels:
        errors["client cancel"] = cancels
    return {
        "instances": len(windows),
        "window_seconds": round(seconds, 1),
        "requests_per_second": round(delta.get("requests", 0.0) / span, 2),
        "tokens_per_second": round(delta.get("tokens", 0.0) / span, 1),
        "answers_open": open_now,
        "errors": [{"kind": k, "count": int(v)} for k, v in sorted(errors.items(), key=lambda kv: -kv[1])],
        "latency_ms": percentiles(delta.get("duration") or []),
        "ttft_ms": percentiles(delta.get("ttft") or []),
        "series": [{"t": t, **v} for t, v in sorted(series.items())][-WINDOW:],
        "requests_total": int(totals.get("requests", 0)),
        "_providers": (delta.get("providers") or {}, totals.get("providers") or {}),
        "_breakers": breakers,
    }


def health_panel(svc: Any, providers: tuple[dict[str, Any], dict[str, Any]], breakers: dict[str, str]) -> list[Any]:
    window, since = providers
    out = []
    for pc in svc.config.providers:
        name = pc.name
        w = window.get(name) or {}
        t = since.get(name) or {}
        attempts = t.get("attempts") or {}
        tried = sum(v for k, v in attempts.items() if k not in ("breaker_open", "budget_exhausted", "untranslatable"))
        failed = sum(
            v
            for k, v in attempts.items()
            if k not in ("ok", "breaker_open", "budget_exhausted", "untranslatable", "cancelled")
        )
        w_attempts = w.get("attempts") or {}
        w_tried = sum(
            v for k, v in w_attempts.items() if k not in ("breaker_open", "budget_exhausted", "untranslatable")
        )
        w_failed = sum(
            v
            for k, v in w_attempts.items()
            if k not in ("ok", "breaker_open", "budget_exhausted", "untranslatable", "cancelled")
        )
        models = {k.split("/", 1)[1]: v for k, v in breakers.items() if k.startswith(name + "/")}
        out.append(
            {
                "provider": name,
                "breaker": breakers.get(name, "closed"),
                "model_breakers": models,
                "requests": int(t.get("requests", 0)),
                "attempts": int(tried),
                "failed_attempts": int(failed),
                "attempts_by_outcome": {k: int(v) for k, v in sorted(attempts.items()) if v},
                "upstream_errors": {k: int(v) for k, v in sorted((t.get("upstream_errors") or {}).items()) if v},
                "stream_failures": int(t.get("stream_failures", 0)),
                "fallbacks": int(t.get("fallbacks", 0)),
                "error_rate": round(failed / tried, 4) if tried else 0.0,
                "error_rate_now": round(w_failed / w_tried, 4) if w_tried else 0.0,
            }
        )
    return out


# -- the usage part ---------------------------------------------------------------------------


def _starts(now: float) -> tuple[float, float]:
    t = time.gmtime(now)
    day = float(calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0)))
    month = float(calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0)))
    return day, month


def _saved(svc: Any, records: list[UsageRecord]) -> dict[str, float]:
    """US dollars cache reads saved, by key: their tokens at the input price less what they cost."""
    out: dict[str, float] = {}
    for r in records:
        if not r.cache_read:
            continue
        price = svc.limiter.price(r.model)
        if price is None or price.cache_read is None:
            continue
        out[r.key] = out.get(r.key, 0.0) + r.cache_read * (price.input - price.cache_read) / 1e6
    return out


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two ``aggregate`` rows of one key, summed."""
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, int | float) and not isinstance(v, bool):
            out[k] = out.get(k, 0) + v
    out["cost_usd"] = round(out.get("cost_usd", 0.0), 6)
    return out


async def usage_panels(svc: Any, now: float, cache: dict[str, Any]) -> dict[str, Any]:
    """The keys and failures panels.  Today's records are read at each call; the month's
    before today once a day (and every ``_BEFORE_SECONDS``: a late write), kept as sums."""
    day, month = _starts(now)
    error = None
    before = cache.get("before")
    if before is None or before[0] != day or now - before[1] > _BEFORE_SECONDS:
        try:
            old = await svc.usage.query(month, day) if month < day else []
            failed_old = [r for r in old if r.outcome in ("failed", "error")][-_FAILURES:]
            before = (day, now, {row["key"]: row for row in aggregate(old, "key")}, _saved(svc, old), failed_old)
            cache["before"] = before
        except UsageError as e:
            error, before = str(e), (day, now, {}, {}, [])
    try:
        today = await svc.usage.query(day)
    except UsageError as e:
        error, today = str(e), []
    by_day = {row["key"]: row for row in aggregate(today, "key")}
    by_month = dict(before[2])
    for name, row in by_day.items():
        by_month[name] = _merge(by_month[name], row) if name in by_month else row
    saved_day = _saved(svc, today)
    saved_month = dict(before[3])
    for name, v in saved_day.items():
        saved_month[name] = saved_month.get(name, 0.0) + v
    names: list[tuple[str, str, bool]] = [(n, "config", True) for n, _ in svc.config.auth.named()]
    names += [(n, "api", False) for n in sorted(svc.keys.records) if n not in {x[0] for x in names}]
    names += [(n, "-", True) for n in sorted(set(by_month) - {x[0] for x in names})]
    keys = []
    for name, source, read_only in names:
        d = by_day.get(name) or {}
        m = by_month.get(name) or {}
        pol = svc.limiter.policy(name)
        budgets = []
        if pol is not None:
            for field, used in (
                ("tokens_per_day", d.get("input", 0) + d.get("output", 0)),
                ("tokens_per_month", m.get("input", 0) + m.get("output", 0)),
                ("cost_per_day", d.get("cost_usd", 0.0)),
                ("cost_per_month", m.get("cost_usd", 0.0)),
            ):
                limit = getattr(pol, field)
                if limit is not None:
                    budgets.append({"limit": field, "max": limit, "used": used, "left": max(limit - used, 0)})
        keys.append(
            {
                "name": name,
                "source": source,
                "read_only": read_only,
                "today": {k: d.get(k, 0) for k in ("requests", "input", "output", "cost_usd", "errors")},
                "month": {k: m.get(k, 0) for k in ("requests", "input", "output", "cost_usd", "errors")},
                "cache_saved_usd": {
                    "today": round(saved_day.get(name, 0.0), 6),
                    "month": round(saved_month.get(name, 0.0), 6),
                },
                "requests_per_minute": pol.requests_per_minute if pol is not None else None,
                "budgets": budgets,
            }
        )
    failed = [*before[4], *(r for r in today if r.outcome in ("failed", "error"))][-_FAILURES:]
    failures = [
        {
            "at": iso(r.ts),
            "request_id": r.request_id,
            "key": r.key,
            "model": r.model,
            "provider": r.provider,
            "status": r.status,
            "outcome": r.outcome,
            "duration_ms": r.duration_ms,
        }
        for r in reversed(failed)
    ]
    return {"day_start": iso(day), "month_start": iso(month), "keys": keys, "failures": failures, "usage_error": error}


# -- the routes -------------------------------------------------------------------------------


def console_routes(app: Any, svc: Any, auth: Any, sampler: Sampler) -> Sessions:
    sessions = Sessions(svc.config.server.secret.encode(), auth)
    auth.console = sessions
    cache: dict[str, Any] = {"at": 0.0, "body": None}
    month: dict[str, Any] = {}
    cache_lock = asyncio.Lock()

    def page(name: str, status: int = 200, extra: dict[str, str] | None = None, *, failed: bool = False) -> Response:
        body = _asset(name)
        if failed:  # the login page again, saying why (its one slot for it)
            body = body.replace(b"<!--failed-->", _LOGIN_FAILED)
        return Response(
            body,
            status_code=status,
            media_type="text/html; charset=utf-8",
            headers={**_SECURITY, **(extra or {})},
        )

    def off(request: Request) -> Response | None:
        if not auth.digests():
            return Response(
                orjson.dumps({"error": {"message": f"Unknown route {request.method} {request.url.path[:200]}",
                                        "type": "invalid_request_error", "param": None, "code": "not_found"}}),
                status_code=404, media_type="application/json",
            )  # fmt: skip
        return None

    async def console(request: Request) -> Response:
        if (gone := off(request)) is not None:
            return gone
        if sessions.actor(request) is None:
            return page("login.html")
        return page("index.html")

    async def login(request: Request) -> Response:
        if (gone := off(request)) is not None:
            return gone
        rid = new_request_id(request.scope)
        raw = b""
        async for chunk in request.stream():  # (a form of one field: a few hundred bytes)
            raw += chunk
            if len(raw) > _FORM_MAX:
                return Response(b"", status_code=413, headers=_SECURITY)
        key = (parse_qs(raw.decode("latin-1")).get("key") or [""])[0].strip()
        if not key or auth.check_key(key) is None:
            log.info("console_login", request_id=rid, status=401)
            return page("login.html", 401, failed=True)
        actor = auth.actor_of(key)
        log.info("console_login", request_id=rid, status=303, actor=actor)
        secure = "; Secure" if request.url.scheme == "https" else ""
        cookie = f"{COOKIE}={sessions.issue(actor, time.time())}; Max-Age={SESSION_SECONDS}; Path=/; HttpOnly; SameSite=Strict{secure}"
        return Response(b"", status_code=303, headers={"location": "/console", "set-cookie": cookie, **_SECURITY})

    async def logout(request: Request) -> Response:
        cookie = f"{COOKIE}=; Max-Age=0; Path=/; HttpOnly; SameSite=Strict"
        return Response(b"", status_code=303, headers={"location": "/console", "set-cookie": cookie, **_SECURITY})

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC or off(request) is not None:
            return Response(b"", status_code=404)
        return Response(_asset(name), media_type=STATIC[name], headers=_SECURITY)

    async def overview(request: Request) -> Response:
        rid = new_request_id(request.scope)
        _, refused = auth.check(request, False)
        if refused is not None:
            err = {"message": refused[1], "type": "invalid_request_error", "param": None, "code": refused[2]}
            return Response(orjson.dumps({"error": err}), status_code=refused[0], media_type="application/json",
                            headers={"x-request-id": rid})  # fmt: skip
        now = time.time()
        async with cache_lock:
            if cache["body"] is None or now - cache["at"] > _CACHE:
                cache["body"] = await usage_panels(svc, now, month)
                cache["at"] = now
            used = cache["body"]
        await sampler.watch(now)
        panel = now_panel(await sampler.cluster())
        providers, breakers = panel.pop("_providers"), panel.pop("_breakers")
        body = {
            "object": "console.overview",
            "at": iso(now),
            "store": svc.config.store.backend if svc.store is not None else None,
            "now": panel,
            "health": health_panel(svc, providers, breakers),
            **used,
        }
        return Response(
            orjson.dumps(body),
            media_type="application/json",
            headers={"x-request-id": rid, "cache-control": "no-store"},
        )

    app.router.add_route("/console", console, methods=["GET"])
    app.router.add_route("/console/login", login, methods=["POST"])
    app.router.add_route("/console/logout", logout, methods=["POST"])
    app.router.add_route("/console/static/{name}", static, methods=["GET"])
    app.router.add_route("/console/api/overview", overview, methods=["GET"])
    return sessions
