"""Usage records: one per answered request, kept in the response store's backend.

Theory of operation
-------------------
At the end of each request the app hands a ``UsageRecord`` to ``UsageLog.record``: the
client key's name, the public model, the provider, the tokens (cache reads and writes are
parts of the input, reasoning a part of the output), the cost by the model's price
(``models[].price``, micro-dollars: ``app.limits.cost_micros``), the outcome, the HTTP
status, the duration and the request id; ``estimated`` says the upstream reported no usage
and the tokens are the proxy's estimate.

``record`` never waits and never raises: it appends to an in-memory buffer, which a flusher
task (``start``) writes in batches every ``FLUSH_SECONDS`` or as soon as ``BATCH`` records
wait.  The buffer holds at most ``MAX_PENDING`` records; past that the oldest are dropped
(``switchboard_usage_dropped_total``).  A batch whose write fails is put back at the front
of the buffer, counted (``switchboard_usage_write_errors_total``) and logged
(``usage_write_failed``), and the flusher waits longer before the next try (up to
``_MAX_BACKOFF`` seconds): a store outage shorter than the buffer loses nothing, and no
request ever fails because of its usage record.  ``aclose`` stops the flusher and writes
what is left (what it cannot write is counted as dropped).

Where the records live (the store's backend, ``store.backend``):

* SQLite: a table ``usage`` in the store's database file (the store's own connection),
  indexed on ``ts``; rows older than ``usage.retention_days`` are deleted by a write at
  most once an hour.
* Redis: one stream per UTC day, ``store.key_prefix + "usage:" + YYYYMMDD``, one entry per
  record (its fields flat), expiring ``retention_days`` after the end of its day (EXPIREAT
  the day's start + ``retention_days + 1`` days); a query reads the days it spans with
  XRANGE.  On a Redis Cluster the streams are ``key_prefix + "{usage}:" + YYYYMMDD``: one
  slot, so that a batch over two days stays one transaction.

``query(since, until)`` answers the records of that span (epoch seconds; never older than
the retention), oldest first; ``aggregate`` sums them by key, model or UTC day.  With the
store off (``store.enabled: false``) records are kept nowhere: ``record`` does nothing and
``query`` raises ``UsageOff``; ``usage.enabled: false`` stops recording, what was recorded
stays readable until its retention ends.

``GET /v1/admin/usage`` (``usage_routes``) and ``switchboard usage`` (app/cli.py, straight
from the backend, no server needed) answer the aggregates; docs/operations.md, "Usage
records".
"""

from __future__ import annotations

import asyncio
import calendar
import contextlib
import hashlib
import hmac
import math
import os
import re
import time
from collections import deque
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any, Protocol

from app.logs import log
from app.metrics import Metrics
from app.store import RedisStore, SQLiteStore, Store, open_store
from providers.config import Config

__all__ = [
    "BY",
    "UsageError",
    "UsageLog",
    "UsageOff",
    "UsageRecord",
    "UsageUnavailable",
    "aggregate",
    "parse_when",
    "read_usage",
    "table",
    "usage_routes",
]

MAX_PENDING = 10_000  # records waiting for the flusher; past it the oldest are dropped
BATCH = 500  # records per write; this many waiting wakes the flusher at once
FLUSH_SECONDS = 1.0
_MAX_BACKOFF = 30.0  # seconds between two tries while the backend fails
_PURGE_SECONDS = 3600.0  # SQLite: the retention delete runs at most this often
_CLOSE_SECONDS = 10.0  # what aclose waits for its last write
_DAY = 86400

BY = ("key", "model", "day")
OUTCOMES = ("completed", "incomplete", "failed", "client_cancel", "error")
_ERRORS = frozenset({"failed", "error"})
DEFAULT_SINCE = "30d"
PATH = "/v1/admin/usage"


@dataclass(slots=True)
class UsageRecord:
    """One request's usage (see the module docstring)."""

    ts: float  # when the request ended (epoch seconds)
    key: str  # the client key's configured name (auth.keys)
    model: str  # the public model name
    provider: str
    input: int = 0
    output: int = 0
    cache_read: int = 0  # part of input
    cache_write: int = 0  # part of input
    reasoning: int = 0  # part of output
    cost_micros: int = 0  # US dollars × 10⁶
    outcome: str = "completed"  # completed | incomplete | failed | client_cancel | error
    status: int = 200
    duration_ms: float = 0.0
    request_id: str = ""
    estimated: bool = False  # the upstream sent no usage: the tokens are estimated
    # what the prompt cache saved against the input price (US dollars × 10⁶; a record
    # written before this field reads 0)
    saved_micros: int = 0


_FIELDS = tuple((f.name, str(f.type)) for f in fields(UsageRecord))
_NAMES = tuple(name for name, _ in _FIELDS)
# a record's values in ``_NAMES``'s order, as one C call (every field is a scalar:
# dataclasses.astuple deep-copied each one, a Python call per field)
_values: Any = attrgetter(*_NAMES)
# field name → what turns its stored text (Redis) or column (SQLite) back into its type
_TYPES: dict[str, Any] = {
    name: {"float": float, "int": int, "str": str, "bool": lambda v: v not in (0, "0", b"0", "", b"")}[kind]
    for name, kind in _FIELDS
}


# fields added after the first version, with their SQLite column's default
_ADDED = {"saved_micros": 0}


def _decode(raw: dict[str, Any]) -> UsageRecord | None:
    """A record from its stored fields (text or typed); None when one is missing or broken."""
    try:
        values = {}
        for name in _NAMES:
            if name in _ADDED and name not in raw:
                continue  # a record of a version without the field: its default
            v = raw[name]
            if isinstance(v, bytes):
                v = v.decode()
            values[name] = _TYPES[name](v)
        return UsageRecord(**values)
    except (KeyError, ValueError, TypeError, UnicodeDecodeError):
        return None


class UsageError(Exception):
    """Usage records cannot be read; ``status`` and ``code`` are what the endpoint answers."""

    status = 503
    code = "store_unavailable"


class UsageOff(UsageError):
    """Nothing records usage here: the store is off (usage records live in its backend)."""

    status = 404
    code = "usage_not_recorded"


class UsageUnavailable(UsageError):
    """The backend did not answer."""


class _Backend(Protocol):
    name: str

    async def write(self, batch: list[UsageRecord], now: float) -> None: ...

    async def read(self, since: float, until: float) -> list[UsageRecord]: ...


class _SQLiteBackend:
    """A table ``usage`` in the store's database file, on the store's own connection."""

    name = "sqlite"
    _COLUMNS = ", ".join(f'"{n}"' for n in _NAMES)
    _INSERT = f"INSERT INTO usage ({_COLUMNS}) VALUES ({', '.join('?' * len(_NAMES))})"

    def __init__(self, store: SQLiteStore, retention: float) -> None:
        self.store = store
        self.retention = retention
        self._ready = False
        self._purged = -math.inf  # monotonic time of the last retention delete

    async def _db(self) -> Any:
        db = await self.store.connection()
        if not self._ready:
            types = {"float": "REAL", "int": "INTEGER", "str": "TEXT", "bool": "INTEGER"}
            cols = ", ".join(f'"{n}" {types[k]} NOT NULL' for n, k in _FIELDS)
            await db.execute(f"CREATE TABLE IF NOT EXISTS usage ({cols})")
            have = {row[1] for row in await db.execute_fetchall("PRAGMA table_info(usage)")}
            for name, default in _ADDED.items():
                if name not in have:  # a file of an earlier version
                    await db.execute(f'ALTER TABLE usage ADD COLUMN "{name}" INTEGER NOT NULL DEFAULT {default}')
            await db.execute("CREATE INDEX IF NOT EXISTS usage_ts ON usage (ts)")
            await db.commit()
            self._ready = True
        return db

    async def write(self, batch: list[UsageRecord], now: float) -> None:
        db = await self._db()
        await db.executemany(self._INSERT, [_values(r) for r in batch])
        mono = time.monotonic()
        if mono - self._purged >= _PURGE_SECONDS:
            await db.execute("DELETE FROM usage WHERE ts < ?", (now - self.retention,))
            self._purged = mono
        await db.commit()

    async def read(self, since: float, until: float) -> list[UsageRecord]:
        db = await self._db()
        out = []
        sql = f"SELECT {self._COLUMNS} FROM usage WHERE ts >= ? AND ts < ? ORDER BY ts"
        async with db.execute(sql, (since, min(until, 1e18))) as cur:
            async for row in cur:
                rec = _decode(dict(zip(_NAMES, row)))
                if rec is not None:
                    out.append(rec)
        return out


def _day(ts: float) -> str:
    return time.strftime("%Y%m%d", time.gmtime(ts))


def _day_start(ts: float) -> int:
    return int(ts // _DAY * _DAY)


class _RedisBackend:
    """One stream per UTC day under the store's key prefix."""

    name = "redis"
    _PAGE = 5000  # entries per XRANGE

    def __init__(self, store: RedisStore, retention_days: int) -> None:
        self.redis = store.redis
        self.prefix = store.shared("usage")  # (one slot on a cluster: a batch is one transaction)
        self.retention_days = retention_days

    def key(self, ts: float) -> str:
        return self.prefix + _day(ts)

    async def write(self, batch: list[UsageRecord], now: float) -> None:
        days: dict[str, int] = {}
        async with self.redis.pipeline(transaction=True) as pipe:
            for r in batch:
                key = self.key(r.ts)
                days.setdefault(key, _day_start(r.ts))
                entry: dict[Any, Any] = {n: (int(v) if isinstance(v, bool) else v) for n, v in zip(_NAMES, _values(r))}
                pipe.xadd(key, entry)
            for key, start in days.items():
                # gone retention_days after its day ended (already past: at once)
                pipe.expireat(key, start + (self.retention_days + 1) * _DAY)
            await pipe.execute()

    async def read(self, since: float, until: float) -> list[UsageRecord]:
        out: list[UsageRecord] = []
        day = _day_start(since)
        last = min(until, time.time() + _DAY)  # no stream is ahead of tomorrow
        while day < last:
            key = self.key(day)
            start = "-"
            while True:
                page: list[Any] = await self.redis.xrange(key, min=start, max="+", count=self._PAGE) or []
                for _, raw in page:
                    rec = _decode({k.decode() if isinstance(k, bytes) else k: v for k, v in raw.items()})
                    if rec is not None and since <= rec.ts < until:
                        out.append(rec)
                if len(page) < self._PAGE:
                    break
                last_id = page[-1][0]
                start = "(" + (last_id.decode() if isinstance(last_id, bytes) else last_id)
            day += _DAY
        out.sort(key=lambda r: r.ts)
        return out


class UsageLog:
    """The app's usage records (see the module docstring).  ``store``: the response store
    (``Service.store``), None when it is off."""

    def __init__(self, config: Config, store: Store | None, metrics: Metrics | None = None) -> None:
        self.cfg = config.usage
        self.store = store
        self.metrics = metrics if metrics is not None else Metrics()
        self.retention = self.cfg.retention_days * _DAY
        self.backend: _Backend | None = None
        if isinstance(store, SQLiteStore):
            self.backend = _SQLiteBackend(store, self.retention)
        elif isinstance(store, RedisStore):
            self.backend = _RedisBackend(store, self.cfg.retention_days)
        self.enabled = self.cfg.enabled and self.backend is not None
        self.pending: deque[UsageRecord] = deque()
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._failures = 0  # writes failed in a row

    # -- writing --------------------------------------------------------------------------

    def write(self, rec: UsageRecord) -> None:
        """Keep ``rec`` for the next write (never waits, never raises)."""
        if not self.enabled:
            return
        pending = self.pending
        if len(pending) >= MAX_PENDING:
            pending.popleft()
            self.metrics.inc("switchboard_usage_dropped_total")
        pending.append(rec)
        if len(pending) >= BATCH and not self._failures:
            self._wake.set()

    async def start(self) -> None:
        """Start the flusher (the app's start-up)."""
        if self.enabled and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="usage-flusher")

    async def _run(self) -> None:
        while True:
            if self._failures:
                await asyncio.sleep(min(FLUSH_SECONDS * 2**self._failures, _MAX_BACKOFF))
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(FLUSH_SECONDS):
                        await self._wake.wait()
            self._wake.clear()
            try:
                await self.flush()
            except Exception as e:  # (flush handles the backend's; anything else: never stop)
                log.exception("usage_write_failed", error=type(e).__name__)

    async def flush(self) -> bool:
        """Write every pending record, ``BATCH`` at a time; False when a write failed (its
        batch is pending again, at the front)."""
        if self.backend is None:
            return True
        async with self._lock:
            while self.pending:
                n = min(len(self.pending), BATCH)
                batch = [self.pending.popleft() for _ in range(n)]
                try:
                    await self.backend.write(batch, time.time())
                except asyncio.CancelledError:
                    self._requeue(batch)  # (aclose never cancels a write: another task's cancel)
                    raise
                except Exception as e:
                    self._requeue(batch)
                    self._failures += 1
                    self.metrics.inc("switchboard_usage_write_errors_total")
                    log.warning(
                        "usage_write_failed",
                        backend=self.backend.name,
                        error=type(e).__name__,
                        pending=len(self.pending),
                    )
                    return False
                if self._failures:
                    log.info("usage_write_recovered", backend=self.backend.name, failures=self._failures)
                self._failures = 0
                self.metrics.inc("switchboard_usage_records_total", float(n))
        return True

    def _requeue(self, batch: list[UsageRecord]) -> None:
        self.pending.extendleft(reversed(batch))
        over = len(self.pending) - MAX_PENDING
        for _ in range(max(over, 0)):  # the oldest go first
            self.pending.popleft()
        if over > 0:
            self.metrics.inc("switchboard_usage_dropped_total", float(over))

    async def aclose(self) -> None:
        """Stop the flusher and write what is left (the app's shutdown; before the store's
        own ``aclose``).  Never raises."""
        task, self._task = self._task, None
        if task is not None:
            async with self._lock:  # not in the middle of a write: it could be half done
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if not self.pending or self.backend is None:
            return
        self._failures = 0
        try:
            async with asyncio.timeout(_CLOSE_SECONDS):
                await self.flush()
        except Exception as e:
            log.warning("usage_write_failed", backend=self.backend.name, error=type(e).__name__)
        if self.pending:
            lost = len(self.pending)
            self.pending.clear()
            self.metrics.inc("switchboard_usage_dropped_total", float(lost))
            log.warning("usage_records_lost", backend=self.backend.name, records=lost)

    # -- reading --------------------------------------------------------------------------

    async def query(self, since: float, until: float | None = None) -> list[UsageRecord]:
        """The records with ``since <= ts < until`` (epoch seconds; ``until`` None: up to
        now and on), oldest first.  ``UsageOff`` when nothing keeps usage records,
        ``UsageUnavailable`` when the backend does not answer."""
        if self.backend is None:
            raise UsageOff(
                "usage records are not kept: they live in the response store's backend, and the store is off "
                "(store.enabled: false)"
            )
        since = max(since, time.time() - self.retention)  # older: deleted (or about to be)
        end = math.inf if until is None else until
        if end <= since:
            return []
        try:
            return await self.backend.read(since, end)
        except Exception as e:
            raise UsageUnavailable(
                f"usage records could not be read from the store ({self.backend.name}): {type(e).__name__}"
            ) from None


async def read_usage(config: Config, since: float, until: float | None = None) -> list[UsageRecord]:
    """The records of the configured store, read straight from its backend (``switchboard
    usage``: no server needed).  A SQLite file that does not exist holds none (and is not
    created)."""
    store = open_store(config.store)
    if isinstance(store, SQLiteStore) and store.path != ":memory:":
        if not await asyncio.to_thread(os.path.exists, store.path):
            return []
    try:
        return await UsageLog(config, store).query(since, until)
    finally:
        if store is not None:
            await store.aclose()


# -- aggregates -------------------------------------------------------------------------

_SUMS = ("input", "output", "cache_read", "cache_write", "reasoning")


def aggregate(records: list[UsageRecord], by: str) -> list[dict[str, Any]]:
    """One row per key, public model or UTC day (``YYYY-MM-DD``), sorted by it: requests,
    the token sums, ``cost_usd`` and ``errors`` (outcome failed or error)."""
    if by not in BY:
        raise ValueError(f"by must be one of {', '.join(BY)}")
    groups: dict[str, dict[str, Any]] = {}
    for r in records:
        g = r.key if by == "key" else r.model if by == "model" else time.strftime("%Y-%m-%d", time.gmtime(r.ts))
        row = groups.get(g)
        if row is None:
            row = groups[g] = {by: g, "requests": 0, **dict.fromkeys(_SUMS, 0), "cost_micros": 0, "saved_micros": 0,
                               "errors": 0}  # fmt: skip
        row["requests"] += 1
        for name in _SUMS:
            row[name] += getattr(r, name)
        row["cost_micros"] += r.cost_micros
        row["saved_micros"] += r.saved_micros
        if r.outcome in _ERRORS:
            row["errors"] += 1
    out = []
    for g in sorted(groups):
        row = groups[g]
        micros = row.pop("cost_micros")
        saved = row.pop("saved_micros")
        errors = row.pop("errors")
        row["cost_usd"] = round(micros / 1_000_000, 6)
        row["errors"] = errors
        row["cache_hit"] = hit_ratio(row)
        row["saved_usd"] = round(saved / 1_000_000, 6)
        out.append(row)
    return out


def hit_ratio(row: dict[str, Any]) -> float:
    """The share of the input read from the upstream's prompt cache (0 without input)."""
    return round(row["cache_read"] / row["input"], 4) if row["input"] else 0.0


_COLUMNS = ("requests", *_SUMS, "cost_usd", "errors", "cache_hit", "saved_usd")


def table(rows: list[dict[str, Any]], by: str) -> str:
    """``rows`` (``aggregate``) as an aligned text table, with a total line."""
    total: dict[str, Any] = {by: "total", **dict.fromkeys(_COLUMNS, 0)}
    for row in rows:
        for c in _COLUMNS:
            total[c] += row[c]
    total["cache_hit"] = hit_ratio(total)

    def cell(row: dict[str, Any], c: str) -> str:
        if c in ("cost_usd", "saved_usd"):
            return f"{row[c]:.4f}"
        if c == "cache_hit":
            return f"{row[c] * 100:.1f}%"
        return str(row[c])

    def cells(row: dict[str, Any]) -> list[str]:
        return [str(row[by])] + [cell(row, c) for c in _COLUMNS]

    lines = [[by.upper(), *(c.upper() for c in _COLUMNS)], *(cells(r) for r in rows), cells(total)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    out = []
    for i, line in enumerate(lines):
        if i == len(lines) - 1:
            out.append("  ".join("-" * w for w in widths))
        out.append("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(line, widths))))
    return "\n".join(s.rstrip() for s in out)


# -- periods ----------------------------------------------------------------------------

_RELATIVE = re.compile(r"(\d{1,6})([dh])")


def parse_when(text: str, now: float, *, end: bool = False) -> float:
    """Epoch seconds of ``text``: ``YYYY-MM-DD`` (UTC midnight; ``end``: the end of that day,
    so an ``until`` date includes its day), an ISO 8601 time (UTC unless it says), or ``7d``
    / ``24h`` (that long before ``now``).  ValueError with a message otherwise."""
    text = text.strip()
    m = _RELATIVE.fullmatch(text)
    if m:
        return now - int(m.group(1)) * (_DAY if m.group(2) == "d" else 3600)
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            day = calendar.timegm(datetime.strptime(text, "%Y-%m-%d").timetuple())
            return float(day + (_DAY if end else 0))
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text[:40]!r} is not a date (YYYY-MM-DD), a time (ISO 8601) or a span (7d, 24h)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- GET /v1/admin/usage ----------------------------------------------------------------


def admin_digests(keys: list[str]) -> list[bytes]:
    """The SHA-256 digest of every admin key (plain or ``sha256:<hex>``); empty entries (an
    unset ``${VAR:-}``) are ignored, a malformed ``sha256:`` entry is left out and logged."""
    out = []
    for k in keys:
        if not k:
            continue
        if k.startswith("sha256:"):
            if not re.fullmatch(r"[0-9a-fA-F]{64}", k[7:]):
                log.warning("admin_key_malformed", message="an auth.admin_keys 'sha256:' entry is not 64 hex digits")
                continue
            out.append(bytes.fromhex(k[7:]))
        else:
            out.append(hashlib.sha256(k.encode()).digest())
    return out


def admin_refusal(digests: list[bytes], authorization: str) -> tuple[str, str] | None:
    """None when ``authorization`` (the header) carries an admin key; else (message, code)."""
    key = authorization[7:].strip() if authorization[:7].lower() == "bearer " else ""
    if not key:
        return "Missing admin key: send 'Authorization: Bearer <admin key>'.", "missing_api_key"
    d = hashlib.sha256(key.encode()).digest()
    ok = False
    for x in digests:  # every digest compared: the time does not tell which matched
        ok = hmac.compare_digest(d, x) | ok
    return None if ok else ("Incorrect admin key provided.", "invalid_api_key")


def usage_routes(app: Any, svc: Any) -> None:
    """``GET /v1/admin/usage?by=key|model|day&since=…&until=…`` on ``app``: the aggregates of
    ``svc.usage`` (a ``UsageLog``) for an admin key (``auth.admin_keys`` of ``svc.config``,
    read at each request); 404 while no admin key is configured."""
    import orjson
    from starlette.requests import Request
    from starlette.responses import Response

    from app.prepare import new_request_id

    memo: dict[tuple[str, ...], list[bytes]] = {}

    def digests() -> list[bytes]:
        keys = tuple(svc.config.auth.admin_keys)
        got = memo.get(keys)
        if got is None:
            memo.clear()
            got = memo[keys] = admin_digests(list(keys))
        return got

    def answer(status: int, body: dict[str, Any], rid: str) -> Response:
        return Response(
            orjson.dumps(body), status_code=status, media_type="application/json", headers={"x-request-id": rid}
        )

    def error(status: int, message: str, code: str | None, rid: str, param: str | None = None) -> Response:
        log.info("admin_usage", request_id=rid, status=status, code=code)
        err = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
        return answer(status, {"error": err}, rid)

    async def admin_usage(request: Request) -> Response:
        rid = new_request_id(request.scope)
        allowed = digests()
        if not allowed:  # the endpoint is off: answered as an unknown route
            return error(404, f"Unknown route GET {request.url.path[:200]}", "not_found", rid)
        refused = admin_refusal(allowed, request.headers.get("authorization", ""))
        if refused is not None:
            return error(401, *refused, rid)
        q = request.query_params
        by = q.get("by", "key")
        if by not in BY:
            return error(400, f"by must be one of {', '.join(BY)}", "invalid_value", rid, "by")
        now = time.time()
        try:
            since = parse_when(q.get("since") or DEFAULT_SINCE, now)
        except ValueError as e:
            return error(400, f"since: {e}", "invalid_value", rid, "since")
        until = None
        if q.get("until"):
            try:
                until = parse_when(q["until"], now, end=True)
            except ValueError as e:
                return error(400, f"until: {e}", "invalid_value", rid, "until")
        usage: UsageLog | None = getattr(svc, "usage", None)
        try:
            if usage is None:
                raise UsageOff("usage records are not kept by this server")
            records = await usage.query(since, until)
        except UsageError as e:
            return error(e.status, str(e), e.code, rid)
        rows = aggregate(records, by)
        log.info("admin_usage", request_id=rid, status=200, by=by, rows=len(rows))
        body = {
            "object": "list",
            "by": by,
            "since": iso(since),
            "until": iso(until) if until is not None else None,
            "data": rows,
        }
        return answer(200, body, rid)

    # a plain Starlette route: nothing for FastAPI to inspect in the handler's signature
    app.router.add_route(PATH, admin_usage, methods=["GET"])
