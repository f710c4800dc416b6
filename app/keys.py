"""Client keys made at run time: created, changed, rotated and revoked without a restart.

Theory of operation
-------------------
A runtime key is a ``KeyRecord`` kept in the response store's backend (``store.backend``),
beside the keys of the config file (``auth.keys``), which stay as they are and cannot be
changed here (they are listed as ``source: config``, ``read_only``).  Only the SHA-256 of a
secret is kept; the secret itself (``sk-sb-`` and 43 random URL-safe characters) is shown
once, in the answer to ``create`` and ``rotate``.  A record holds:

==================  =========================================================================
field               what
==================  =========================================================================
name                what limits, usage records, stored responses and logs say (unique,
                    among the config's names too)
digest              the SHA-256 of the secret (hex)
hint                the secret's first 10 and last 4 characters (to tell keys apart)
limits              ``auth.keys[].limits`` as in the config (``models``: the models it may
                    use); absent: ``auth.default_limits``
expires_at          after it the key is refused (401 ``key_expired``); None: never
previous, until     ``rotate``: the former digest, accepted until ``until`` (the grace)
==================  =========================================================================

Every change (create, update, rotate, revoke) writes an audit entry in the same atomic
step: when, who (``admin:<12 hex>``, the SHA-256 of the admin key that asked;
``cli:<user>@<host>`` for ``switchboard keys``), what and which key, and the fields that
changed (never a secret or a digest).  Each change also bumps a version number.

Backends: Redis keeps the records in a hash (``<key_prefix>keys:records``, name → JSON),
the version in ``keys:version`` and the audit in a stream (``keys:audit``, the newest
100,000 entries); one Lua script per change checks, writes, bumps and audits (on a Redis
Cluster the three are ``{keys}:…``: one slot).  The version is polled, not published: it
works the same on a cluster.  SQLite keeps
three tables in the store's file (``api_keys``, ``api_key_audit``, ``api_key_meta``).

Every instance (``KeyRegistry``) reads the version every ``REFRESH_SECONDS`` and, when it
changed, all the records: a change made through any instance, or with the CLI straight
on the backend, is seen everywhere within a second.  Authorization itself reads memory
only (one dict lookup by the presented key's SHA-256).  A backend that does not answer
leaves the keys as last read (logged ``keys_refresh_failed``).  A revoked key is refused
from the next request on; a request already admitted goes on to its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import secrets
import socket
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson
from pydantic import ValidationError

from app.logs import log
from app.store import RedisStore, SQLiteStore, Store, open_store
from providers.config import Config, LimitsCfg

__all__ = [
    "KeysError",
    "KeyRecord",
    "KeyRegistry",
    "Keys",
    "cli_actor",
    "open_keys",
    "parse_expiry",
]

REFRESH_SECONDS = 0.5
AUDIT_MAX = 100_000  # audit entries Redis keeps (the newest)
DEFAULT_GRACE = 3600.0  # seconds a rotated key's former secret keeps working
SECRET_PREFIX = "sk-sb-"
_NAME = re.compile(r"[^\x00-\x1f\x7f]{1,64}")


class KeysError(Exception):
    """A refused change: ``status`` and ``code`` are what the admin API answers."""

    def __init__(self, status: int, message: str, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.param = param


@dataclass(slots=True)
class KeyRecord:
    name: str
    digest: str
    hint: str
    limits: dict[str, Any] | None = None
    expires_at: float | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    created_by: str = ""
    previous: str | None = None  # the former digest, during a rotation's grace
    until: float | None = None  # when ``previous`` stops working

    def encode(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def decode(cls, raw: bytes | str) -> KeyRecord:
        return cls(**orjson.loads(raw))

    def policy(self) -> LimitsCfg | None:
        return LimitsCfg.model_validate(self.limits) if self.limits is not None else None

    def public(self, now: float) -> dict[str, Any]:
        """What the API and the CLI show (no digest, no secret)."""
        models, lim = split_limits(self.limits)
        return {
            "object": "key",
            "name": self.name,
            "source": "api",
            "read_only": False,
            "hint": self.hint,
            "models": models,
            "limits": lim,
            "expires_at": iso(self.expires_at),
            "expired": self.expires_at is not None and self.expires_at <= now,
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
            "created_by": self.created_by,
            "rotating_until": iso(self.until) if self.previous and self.until and self.until > now else None,
        }


def split_limits(limits: dict[str, Any] | None) -> tuple[list[str] | None, dict[str, Any] | None]:
    """(the models, the other limits or None) of a stored ``limits``."""
    if limits is None:
        return None, None
    rest = dict(limits)
    models = rest.pop("models", None)
    return models, rest or None


def iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def hint(secret: str) -> str:
    return f"{secret[:10]}…{secret[-4:]}"


def cli_actor() -> str:
    import getpass  # (the CLI's: not in a running proxy's memory)

    try:
        user = getpass.getuser()
    except Exception:  # (no user name in this environment)
        user = str(os.getuid())
    return f"cli:{user}@{socket.gethostname()}"


_SPAN = re.compile(r"(\d+)\s*([dhm])")


def parse_expiry(value: Any, now: float) -> float | None:
    """An expiry: None/""/"never" (none), epoch seconds, a span ahead (``30d``, ``12h``,
    ``90m``), a date (``2026-12-31``: its end, UTC) or an ISO 8601 time.  ValueError otherwise."""
    if value is None or value == "" or value == "never":
        return None
    if isinstance(value, bool):
        raise ValueError("expires_at must be a time, a span (30d) or null")
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        raise ValueError("expires_at must be a time, a span (30d) or null")
    text = value.strip()
    m = _SPAN.fullmatch(text)
    if m:
        return now + int(m.group(1)) * {"d": 86400, "h": 3600, "m": 60}[m.group(2)]
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            day = datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)
            return day.timestamp() + 86400
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text[:40]!r} is not a span (30d, 12h), a date (YYYY-MM-DD) or an ISO 8601 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def check_limits(limits: Any, models: Any) -> dict[str, Any] | None:
    """``limits`` (a mapping as ``auth.keys[].limits``) with ``models`` folded in, validated;
    None when both are absent or empty (the key then has ``auth.default_limits``)."""
    if limits is None and models is None:
        return None
    if limits is not None and not isinstance(limits, dict):
        raise KeysError(400, "limits must be an object", "invalid_value", "limits")
    merged = dict(limits or {})
    if models is not None:
        if not isinstance(models, list) or not all(isinstance(m, str) and m for m in models):
            raise KeysError(400, "models must be a list of model names or globs", "invalid_value", "models")
        merged["models"] = models
    try:
        cfg = LimitsCfg.model_validate(merged)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise KeysError(400, f"limits.{where}: {err['msg']}", "invalid_value", "limits") from None
    return cfg.model_dump(exclude_none=True) or None  # (none at all: auth.default_limits)


# -- backends --------------------------------------------------------------------------


class _Backend(Protocol):
    async def version(self) -> int | None: ...

    async def records(self) -> dict[str, KeyRecord]: ...

    async def change(self, action: str, rec: KeyRecord | None, name: str, entry: dict[str, Any]) -> KeyRecord | None:
        """create (False-y when the name exists), update/rotate (when it exists), revoke
        (the record deleted); the audit ``entry`` written in the same step.  The record as
        it was before (None: there was none); create answers the new one, or None."""
        ...

    async def audit(self, since: float, name: str | None, limit: int) -> list[dict[str, Any]]: ...


# KEYS: records hash, version, audit stream.  ARGV: action, name, record JSON, audit JSON, maxlen
_CHANGE = """
local old = redis.call('HGET', KEYS[1], ARGV[2])
local action = ARGV[1]
if action == 'create' then
  if old then return {0, old} end
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
elseif not old then
  return {0, ''}
elseif action == 'revoke' then
  redis.call('HDEL', KEYS[1], ARGV[2])
else
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
end
redis.call('INCR', KEYS[2])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[5], '*', 'entry', ARGV[4])
return {1, old or ''}
"""


class _RedisKeys:
    def __init__(self, store: RedisStore) -> None:
        self.redis = store.redis
        p = store.shared("keys")  # (one slot on a cluster: the change script touches the three)
        self.k_records, self.k_version, self.k_audit = p + "records", p + "version", p + "audit"
        self.script = self.redis.register_script(_CHANGE)

    async def version(self) -> int | None:
        v = await self.redis.get(self.k_version)
        return int(v) if v is not None else 0

    async def records(self) -> dict[str, KeyRecord]:
        raw = await self.redis.hgetall(self.k_records)
        out = {}
        for name, blob in raw.items():
            with contextlib.suppress(Exception):
                out[name.decode() if isinstance(name, bytes) else name] = KeyRecord.decode(blob)
        return out

    async def change(self, action: str, rec: KeyRecord | None, name: str, entry: dict[str, Any]) -> KeyRecord | None:
        keys = [self.k_records, self.k_version, self.k_audit]
        args: list[Any] = [action, name, rec.encode() if rec is not None else b"", orjson.dumps(entry), AUDIT_MAX]
        ok, old = await self.script(keys=keys, args=args)
        old_rec = KeyRecord.decode(old) if old else None
        if action == "create":
            return rec if int(ok) else None
        return old_rec if int(ok) else None

    async def audit(self, since: float, name: str | None, limit: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        start = f"{int(since * 1000)}-0"
        count = limit if name is None else AUDIT_MAX
        page: list[Any] = await self.redis.xrevrange(self.k_audit, max="+", min=start, count=count) or []
        for _, fields in page:
            blob = (fields or {}).get(b"entry")
            if blob is None:
                continue
            e = orjson.loads(blob)
            if name is None or e.get("key") == name:
                out.append(e)
                if len(out) >= limit:
                    break
        return out


_SQL = (
    "CREATE TABLE IF NOT EXISTS api_keys (name TEXT PRIMARY KEY, record TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS api_key_audit (ts REAL NOT NULL, key TEXT NOT NULL, entry TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS api_key_audit_ts ON api_key_audit (ts)",
    "CREATE TABLE IF NOT EXISTS api_key_meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO api_key_meta (k, v) VALUES ('version', 0)",
)


class _SQLiteKeys:
    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self._ready = False
        self._lock = asyncio.Lock()

    async def _db(self, create: bool) -> Any:
        if self.store._db is None and not create and self.store.path != ":memory:":
            # a proxy that never stored anything has no file: nothing to read (none is made)
            if not await asyncio.to_thread(os.path.exists, self.store.path):
                return None
        db = await self.store.connection()
        if not self._ready:
            for s in _SQL:
                await db.execute(s)
            await db.commit()
            self._ready = True
        return db

    async def version(self) -> int | None:
        db = await self._db(False)
        if db is None:
            return None
        rows = await db.execute_fetchall("SELECT v FROM api_key_meta WHERE k = 'version'")
        return int(rows[0][0]) if rows else 0

    async def records(self) -> dict[str, KeyRecord]:
        db = await self._db(False)
        if db is None:
            return {}
        out = {}
        for name, blob in await db.execute_fetchall("SELECT name, record FROM api_keys"):
            with contextlib.suppress(Exception):
                out[name] = KeyRecord.decode(blob)
        return out

    async def change(self, action: str, rec: KeyRecord | None, name: str, entry: dict[str, Any]) -> KeyRecord | None:
        db = await self._db(True)
        async with self._lock:
            rows = await db.execute_fetchall("SELECT record FROM api_keys WHERE name = ?", (name,))
            old = KeyRecord.decode(rows[0][0]) if rows else None
            if action == "create":
                if old is not None:
                    return None
                await db.execute("INSERT INTO api_keys (name, record) VALUES (?, ?)", (name, rec.encode().decode()))  # type: ignore[union-attr]
            elif old is None:
                return None
            elif action == "revoke":
                await db.execute("DELETE FROM api_keys WHERE name = ?", (name,))
            else:
                await db.execute("UPDATE api_keys SET record = ? WHERE name = ?", (rec.encode().decode(), name))  # type: ignore[union-attr]
            await db.execute("UPDATE api_key_meta SET v = v + 1 WHERE k = 'version'")
            await db.execute(
                "INSERT INTO api_key_audit (ts, key, entry) VALUES (?, ?, ?)",
                (entry["ts"], name, orjson.dumps(entry).decode()),
            )
            await db.commit()
        return rec if action == "create" else old

    async def audit(self, since: float, name: str | None, limit: int) -> list[dict[str, Any]]:
        db = await self._db(False)
        if db is None:
            return []
        sql = "SELECT entry FROM api_key_audit WHERE ts >= ?"
        args: list[Any] = [since]
        if name is not None:
            sql += " AND key = ?"
            args.append(name)
        sql += " ORDER BY ts DESC, rowid DESC LIMIT ?"
        args.append(limit)
        return [orjson.loads(r[0]) for r in await db.execute_fetchall(sql, args)]


def _backend(store: Store | None) -> _Backend | None:
    if isinstance(store, RedisStore):
        return _RedisKeys(store)
    if isinstance(store, SQLiteStore):
        return _SQLiteKeys(store)
    return None


# -- the operations (admin API and CLI) --------------------------------------------------

_EDITABLE = ("models", "limits", "expires_at")


class Keys:
    """The runtime keys' operations on one backend; ``config``: the config whose
    ``auth.keys`` are the read-only ones."""

    def __init__(self, config: Config, store: Store | None) -> None:
        self.config = config
        self.backend = _backend(store)

    def _need(self) -> _Backend:
        if self.backend is None:
            raise KeysError(
                404,
                "runtime keys live in the response store's backend, and the store is off (store.enabled: false)",
                "keys_not_kept",
            )
        return self.backend

    def config_names(self) -> list[str]:
        return [name for name, _ in self.config.auth.named()]

    def config_key(self, name: str) -> dict[str, Any] | None:
        for k in self.config.auth.keys:
            if isinstance(k, str):
                continue
            if k.name == name:
                lim = k.limits.model_dump(exclude_none=True) if k.limits is not None else None
                return self._config_view(name, lim)
        for n, _ in self.config.auth.named():
            if n == name:
                return self._config_view(name, None)
        return None

    def _config_view(self, name: str, limits: dict[str, Any] | None) -> dict[str, Any]:
        models, lim = split_limits(limits)
        return {
            "object": "key",
            "name": name,
            "source": "config",
            "read_only": True,
            "hint": None,
            "models": models,
            "limits": lim,
            "expires_at": None,
            "expired": False,
            "created_at": None,
            "updated_at": None,
            "created_by": "config",
            "rotating_until": None,
        }

    async def all(self) -> list[dict[str, Any]]:
        now = time.time()
        out = [self.config_key(n) for n in self.config_names()]
        if self.backend is not None:
            recs = await self.backend.records()
            out += [r.public(now) for _, r in sorted(recs.items())]
        return [x for x in out if x is not None]

    async def show(self, name: str) -> dict[str, Any]:
        got = self.config_key(name)
        if got is not None:
            return got
        rec = (await self._need().records()).get(name)
        if rec is None:
            raise KeysError(404, f"No key named '{name[:64]}'.", "key_not_found")
        return rec.public(time.time())

    def _writable(self, name: str) -> None:
        if name in self.config_names():
            raise KeysError(
                409,
                f"The key '{name[:64]}' is in the config file (auth.keys): read-only here; edit the file instead.",
                "key_read_only",
            )

    async def create(self, body: dict[str, Any], actor: str) -> dict[str, Any]:
        backend = self._need()
        name = body.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise KeysError(400, "name must be 1 to 64 characters, none a control character", "invalid_value", "name")
        unknown = sorted(set(body) - {"name", *_EDITABLE})
        if unknown:
            raise KeysError(400, f"unknown field(s): {', '.join(unknown)[:200]}", "invalid_value", unknown[0])
        self._writable(name)
        now = time.time()
        limits = check_limits(body.get("limits"), body.get("models"))
        expires = self._expiry(body.get("expires_at"), now)
        secret = new_secret()
        rec = KeyRecord(name, digest(secret), hint(secret), limits, expires, now, now, actor)
        entry = self._entry(now, actor, "create", name, {f: v for f, v in self._fields(rec).items() if v is not None})
        if await backend.change("create", rec, name, entry) is None:
            raise KeysError(409, f"A key named '{name[:64]}' exists already.", "key_exists", "name")
        return {**rec.public(now), "secret": secret}

    def _expiry(self, value: Any, now: float) -> float | None:
        try:
            return parse_expiry(value, now)
        except ValueError as e:
            raise KeysError(400, f"expires_at: {e}", "invalid_value", "expires_at") from None

    @staticmethod
    def _fields(rec: KeyRecord) -> dict[str, Any]:
        models, lim = split_limits(rec.limits)
        return {
            "models": models,
            "limits": lim,
            "expires_at": iso(rec.expires_at),
        }

    @staticmethod
    def _entry(now: float, actor: str, action: str, name: str, detail: dict[str, Any]) -> dict[str, Any]:
        return {"ts": now, "at": iso(now), "actor": actor, "action": action, "key": name, "detail": detail}

    async def _current(self, name: str) -> KeyRecord:
        self._writable(name)
        rec = (await self._need().records()).get(name)
        if rec is None:
            raise KeysError(404, f"No key named '{name[:64]}'.", "key_not_found")
        return rec

    async def update(self, name: str, body: dict[str, Any], actor: str) -> dict[str, Any]:
        unknown = sorted(set(body) - set(_EDITABLE))
        if unknown:
            raise KeysError(400, f"unknown or read-only field(s): {', '.join(unknown)[:200]}", "invalid_value")
        rec = await self._current(name)
        now = time.time()
        before = self._fields(rec)
        cur = dict(rec.limits or {})
        models = body["models"] if "models" in body else cur.pop("models", None)
        cur.pop("models", None)
        limits = body.get("limits", cur or None)
        new = KeyRecord(**asdict(rec))
        new.limits = check_limits(limits, models)
        if "expires_at" in body:
            new.expires_at = self._expiry(body["expires_at"], now)
        new.updated_at = now
        after = self._fields(new)
        changed = {f: [before[f], after[f]] for f in after if before[f] != after[f]}
        entry = self._entry(now, actor, "update", name, changed)
        if await self._need().change("update", new, name, entry) is None:
            raise KeysError(404, f"No key named '{name[:64]}'.", "key_not_found")
        return new.public(now)

    async def rotate(self, name: str, grace: Any, actor: str) -> dict[str, Any]:
        if grace is None:
            grace = DEFAULT_GRACE
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 <= grace <= 30 * 86400:
            raise KeysError(400, "grace_seconds must be a number of seconds, 0 to 2592000", "invalid_value")
        rec = await self._current(name)
        now = time.time()
        secret = new_secret()
        new = KeyRecord(**asdict(rec))
        new.previous, new.until = (rec.digest, now + float(grace)) if grace > 0 else (None, None)
        new.digest, new.hint, new.updated_at = digest(secret), hint(secret), now
        entry = self._entry(now, actor, "rotate", name, {"grace_seconds": grace, "hint": new.hint})
        if await self._need().change("rotate", new, name, entry) is None:
            raise KeysError(404, f"No key named '{name[:64]}'.", "key_not_found")
        return {**new.public(now), "secret": secret}

    async def revoke(self, name: str, actor: str) -> dict[str, Any]:
        self._writable(name)
        now = time.time()
        entry = self._entry(now, actor, "revoke", name, {})
        old = await self._need().change("revoke", None, name, entry)
        if old is None:
            raise KeysError(404, f"No key named '{name[:64]}'.", "key_not_found")
        return {"object": "key.revoked", "name": name, "revoked": True}

    async def audit(self, since: float, name: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        return await self._need().audit(since, name, limit)


async def open_keys(config: Config) -> tuple[Keys, Store | None]:
    """The configured store's keys, for the CLI (no server); close the store after."""
    store = open_store(config.store)
    return Keys(config, store), store


# -- what every instance holds -----------------------------------------------------------


@dataclass(slots=True)
class _Live:
    name: str
    expires_at: float | None
    until: float | None = None  # a rotated-out digest: accepted until then


@dataclass
class KeyRegistry:
    """This process's view of the runtime keys: digest → key, refreshed from the backend."""

    keys: Keys
    on_change: Any = None  # called with {name: LimitsCfg | None} after each refresh
    by_digest: dict[bytes, _Live] = field(default_factory=dict)
    records: dict[str, KeyRecord] = field(default_factory=dict)
    version: int | None = -1
    unread: bool = False  # the first read at start failed, and none succeeded since
    failing: bool = False
    _task: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        return self.keys.backend is not None

    @property
    def none(self) -> bool:
        """No runtime key is known to exist.  A backend that did not answer at start may hold
        some: a proxy without config keys is not open until it was read."""
        return not self.by_digest and not self.unread

    def lookup(self, d: bytes, now: float) -> str | None:
        """The key name of digest ``d``; None for none; ``KeysError`` 401 when it expired."""
        live = self.by_digest.get(d)
        if live is None:
            return None
        if (live.expires_at is not None and live.expires_at <= now) or (live.until is not None and live.until <= now):
            raise KeysError(401, "This API key has expired.", "key_expired")
        return live.name

    async def refresh(self) -> bool:
        """Read the backend when its version changed; True when the keys changed."""
        backend = self.keys.backend
        if backend is None:
            return False
        v = await backend.version()
        if v == self.version:
            return False
        recs = await backend.records() if v is not None else {}
        config_names = set(self.keys.config_names())
        table: dict[bytes, _Live] = {}
        for name, r in recs.items():
            if name in config_names:  # (the config's key wins: it cannot be changed here)
                continue
            table[bytes.fromhex(r.digest)] = _Live(name, r.expires_at)
            if r.previous and r.until:
                table.setdefault(bytes.fromhex(r.previous), _Live(name, r.expires_at, r.until))
        self.by_digest, self.records, self.version, self.unread = table, recs, v, False
        if self.on_change is not None:
            self.on_change({n: r.policy() for n, r in recs.items() if n not in config_names})
        return True

    async def start(self) -> None:
        if not self.enabled:
            return
        try:
            await self.refresh()
        except Exception as e:
            self.failing = self.unread = True
            log.warning("keys_refresh_failed", error=type(e).__name__)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="keys-refresh")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_SECONDS)
            try:
                if await self.refresh():
                    log.info("keys_refreshed", keys=len(self.records), version=self.version)
                if self.failing:
                    log.info("keys_refresh_recovered")
                self.failing = False
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if not self.failing:
                    log.warning("keys_refresh_failed", error=type(e).__name__)
                self.failing = True

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
