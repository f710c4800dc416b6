"""Per-key limits: what a named client key may use, checked before any upstream call.

Theory of operation
-------------------
A key's policy (``auth.keys[].limits``, else ``auth.default_limits``) names windows, each a
counter in the current calendar window (UTC):

==================  =========  ===========  =============  ==============================
limit               window     admit needs  admit takes    settled at the end with
==================  =========  ===========  =============  ==============================
requests_per_minute minute     1 free       1              (nothing)
tokens_per_minute   minute     1 free       the estimate   the tokens used − the estimate
tokens_per_day      day        1 free       the estimate   the same
tokens_per_month    month      1 free       the estimate   the same
cost_per_day        day        1 µ$ free    0              the cost (micro-dollars)
cost_per_month      month      1 µ$ free    0              the same
concurrent          lease      1 free slot  a slot         the slot released
==================  =========  ===========  =============  ==============================

``Limiter.admit`` checks every window of the key and takes from all of them in one step,
or refuses without taking anything (``LimitExceeded``: the app answers 429 in the client's
protocol with ``retry-after`` and the limit it hit, before any upstream call).  A request
is refused only when a counter has no room left: requests are exact (the 101st of a limit
of 100 in one minute is refused, the 100th never), tokens and cost admit a request while
any room is left and settle with the upstream's usage afterwards, so a budget is overrun
by at most the requests already running when it fills — a stream is never cut for it (the
next request is refused).  The estimate taken at admission is the request body's bytes
over 4 (its input); settling adds what the upstream reported (input + output) less it, and
a request that failed before its first byte gives its estimate back.

Where the counters live (``Counters``):

* ``RedisCounters``, with the Redis store: shared by every instance; one Lua script checks
  and takes every window atomically (``TAKE``), so three instances on one Redis admit
  exactly the limit between them.  Redis unreachable: the request goes through (fail
  open), the ticket is marked ``degraded`` and never settled (nothing counted twice when
  Redis is back), ``switchboard_limits_degraded_total`` counts it and ``/readyz`` says
  ``limits: degraded`` for ``_DEGRADED_FOR`` seconds after the last failure.  On a Redis
  Cluster (``store.cluster``) a key's counters share a hash tag, so its script touches one
  slot; a failover is Redis unreachable for the counters on the dead primary.
* ``MemoryCounters``, with SQLite or no store: the same rules, per process.

Concurrency slots are leases (a sorted set of request ids, each with a suffix of its own,
scored by expiry) of ``_LEASE`` seconds, which the instance holding them renews every
``_RENEW`` seconds while its answers are open (``Limiter.renew``, one call for all of
them): a slot is held as long as its stream lives, and a process that dies gives its slots
back within ``_LEASE`` seconds.

``Ticket.headers()`` are what the client sees of its limits on every answer: OpenAI's
``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` and Codex's own
``x-codex-primary-*`` (the minute window: the larger of the requests and tokens used
percent) and ``x-codex-secondary-*`` (the day or month budget most used); ``event()`` is
the ``codex.rate_limits`` event a Responses WebSocket sends before a response.  A
refusal carries the window it hit instead (remaining 0, used 100 %).

On Redis, the calls of one event-loop turn share one round trip (``RedisCounters``): the
takes of the requests admitted together and the settlements owed go out in one write.  A
settlement is not waited for; it waits at most ``_SETTLE_DELAY`` for takes to ride on.  A
batch that fails keeps its settlements owed and sends them again on a fresh connection
(a Redis restart loses none), and each settlement's marker key (``SET NX``, ``_MARKED``
seconds) makes one sent twice count once.  A take whose batch failed is tried again on a
fresh connection (``_RECONNECTS``) before it fails open.

A busy key pays no round trip (``RedisCounters``: grants).  Once an instance takes from a
key's window ``_GRANT_RATE`` times in a second, its next take in Redis also asks for a
grant: ``_GRANT_SPAN`` seconds of takes at that rate (``_GRANT_TAKES`` at least) of each
window (tokens: the estimate and what settlements add to it on average; never of a cost,
known only at the end) and as many concurrency slots, added to the counters (the slots:
members of the sorted set) as if used.  The instance's next takes come out of the grant
in the process, its settlements are paid from it or given back to it, a slot lent from
it comes back to it; once half of it is used, a take of nothing asks for more without
waiting (a refill).  So Redis never counts less than what is used, and no instance can
take past a limit.  A grant is given only while the window keeps room for
``_GRANT_ROOM`` of them after the take: a small limit never grants, and every request of
it is checked in Redis.  What a grant has left after ``_GRANT_IDLE`` seconds unused goes
back (as a settlement: owed, marked, sent again after a failure).  ``<counter>:g`` counts
the instances holding a grant of it.  A take refused while it is not zero gives this
instance's own grant of that window back, waits ``_GRANT_WAIT`` when another instance
holds one too (what it leaves unused comes back meanwhile), and is tried once more, so
the limits stay exact between instances: the 2,000th request of a limit of 2,000 is
admitted, the 2,001st refused, whichever instance holds what.

The batches go on the counters' own connection (``Wire`` in ``app/redis_wire.py``; the
store's puts have one of their own), not through redis-py's pool: one connection per
process, the commands packed by ``redis_wire.pack``, the replies read by hiredis in the
order sent, batches pipelined (a batch does not wait for the one before).  It logs in and
selects the database as the store's URL says, over TCP or a Unix socket.  A lost
connection fails every batch still waiting (a take is tried again on a new one), and so
do replies later than the store's ``timeout_seconds`` (the connection is dropped; a take
that timed out fails open at once, as redis-py's timeout did).  A script the server lost
(NOSCRIPT: it did not run) is loaded and sent again, once, here.  A Redis Cluster, TLS or
a credential provider keeps redis-py's connections instead.  Where the CPU of a request
went, before and after: ``docs/performance.md``, "Limits, metrics and the store: CPU per
request".
"""

from __future__ import annotations

import asyncio
import calendar
import contextlib
import fnmatch
import functools
import hashlib
import itertools
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from app.logs import log
from providers.config import Config, LimitsCfg, PriceCfg
from transformers.errors import ProxyError

__all__ = [
    "Counters",
    "LimitExceeded",
    "Limiter",
    "MemoryCounters",
    "RedisCounters",
    "Ticket",
    "cost_micros",
]

_LEASE = 15.0  # seconds a concurrency slot is held unless renewed
_LEASE_MS = int(_LEASE * 1000)
_RENEW = 5.0  # seconds between two renewals of the open answers' slots
_HELD_MAX = 86400.0  # an answer open longer stops renewing its slot (a ticket never settled)
_DEGRADED_FOR = 30.0  # seconds /readyz says degraded after the last Redis failure
_SLACK = 120  # seconds a window's counter outlives its window
_RECONNECTS = 3  # tries on a connection error before the last one, which may fail open
_SETTLE_DELAY = 0.002  # seconds a settlement waits for a batch of takes to ride on
_BACKOFF_MAX = 11  # settlements that failed are sent again after at most 2**11 × 2 ms (4 s)
_OWED_MAX = 100_000  # settlements kept while Redis does not answer; past that the oldest go
_MARKED = 60  # seconds a settlement's marker lives (a batch sent again within them counts once)
# Grants (RedisCounters): a share of a key's windows and slots reserved for one instance,
# once it takes from them ``_GRANT_RATE`` times in a second; a grant holds ``_GRANT_SPAN``
# seconds of its takes, ``_GRANT_TAKES`` at least, given only while the window keeps room
# for ``_GRANT_ROOM`` such grants; what is left of one unused for ``_GRANT_IDLE`` seconds
# goes back
_GRANT_RATE = 20
_GRANT_TAKES = 16
_GRANT_ROOM = 16
_GRANT_IDLE = 0.05
_GRANT_SPAN = 0.05  # seconds of takes at the key's rate a grant holds (at least _GRANT_TAKES)
_GRANT_WAIT = 2 * _GRANT_IDLE  # a refusal while grants are held waits this long, and takes again


@dataclass(slots=True)
class Entry:
    """One window's counter: refuse when ``count + need > limit``; else add ``take``."""

    kind: str  # requests | tokens_minute | tokens_day | tokens_month | cost_day | cost_month
    key: str
    limit: int
    need: int
    take: int
    ttl: int
    reset: float  # seconds until the window ends


@dataclass(frozen=True, slots=True)
class Slot:
    key: str
    limit: int
    member: str


class Counters(Protocol):
    reconnect_errors: tuple[type[BaseException], ...]  # errors worth another try on another connection

    def key(self, name: str, rest: str) -> str:
        """The counter ``rest`` (``requests:m…``, ``concurrent``) of the key ``name``."""
        ...

    async def take(self, entries: list[Entry], slot: Slot | None, now: float) -> tuple[int, list[int]]:
        """(0 when taken, else the 1-based index of the refusing entry — ``len(entries) +
        1`` for the slot — and the counts it saw: every entry's, then the slots held, when
        the slot refused)."""
        ...

    async def settle(self, adds: list[tuple[str, int, int]], slot: Slot | None, once: str = "") -> None:
        """Add each ``(key, amount, ttl)`` and release ``slot``, in one step, once (``once``:
        the settlement's own key, which a settlement sent twice finds taken)."""
        ...

    async def flush(self) -> None:
        """Whatever is owed, sent now."""
        ...

    async def aclose(self) -> None:
        """Connections closed (after ``flush``)."""
        ...

    async def renew(self, slots: list[Slot], now: float) -> None:
        """Extend each slot still held to ``now + _LEASE`` (a released one stays released)."""
        ...


class MemoryCounters:
    """Counters in this process (SQLite or no store)."""

    reconnect_errors: tuple[type[BaseException], ...] = ()  # (nothing to reconnect to)

    def __init__(self) -> None:
        self.counts: dict[str, tuple[int, float]] = {}  # key → (count, expires at)
        self.slots: dict[str, dict[str, float]] = {}  # key → member → lease end

    def key(self, name: str, rest: str) -> str:
        return f"lim:{name}:{rest}"

    def _get(self, key: str, now: float) -> int:
        got = self.counts.get(key)
        if got is None or got[1] <= now:
            return 0
        return got[0]

    async def take(self, entries: list[Entry], slot: Slot | None, now: float) -> tuple[int, list[int]]:
        seen = [self._get(e.key, now) for e in entries]
        for i, (e, cur) in enumerate(zip(entries, seen, strict=True)):
            if cur + e.need > e.limit:
                return i + 1, seen
        if slot is not None:
            held = {m: t for m, t in self.slots.get(slot.key, {}).items() if t > now}
            self.slots[slot.key] = held
            if len(held) >= slot.limit:
                return len(entries) + 1, [*seen, len(held)]
            held[slot.member] = now + _LEASE
        for e, cur in zip(entries, seen, strict=True):
            self.counts[e.key] = (cur + e.take, now + e.ttl)
        if len(self.counts) > 4096:  # expired windows go
            self.counts = {k: v for k, v in self.counts.items() if v[1] > now}
        return 0, seen

    async def settle(self, adds: list[tuple[str, int, int]], slot: Slot | None, once: str = "") -> None:
        for key, amount, ttl in adds:
            got = self.counts.get(key)  # (the window's own end kept: the key names the window)
            self.counts[key] = (got[0] + amount, got[1]) if got is not None else (amount, time.time() + ttl)
        if slot is not None:
            self.slots.get(slot.key, {}).pop(slot.member, None)

    async def flush(self) -> None:
        return

    async def aclose(self) -> None:
        return

    async def renew(self, slots: list[Slot], now: float) -> None:
        for slot in slots:
            held = self.slots.get(slot.key, {})
            if slot.member in held:
                held[slot.member] = now + _LEASE


# KEYS: the entries' counters, then each counter's grant count (``<counter>:g``: how many
# instances hold a grant of it), then, when ARGV[1] == "1", the slot's sorted set and its
# grant count.  ARGV: has_slot, now (ms), then per entry: limit, need, take, ttl, grant
# wanted, 1 when this instance holds no grant of it yet; then the slot's limit, member
# (empty: no slot taken, grants only), lease (ms), slots wanted, 1 when it holds none yet,
# the granted slots' name.  Returns {0, the counts seen…, the grant per entry…, the slots
# granted} when taken; {n + 1, the counts seen…, the slots held, the slot's grant count}
# when the slot refused; else {index, count, its grant count}.  What is wanted is granted
# whole, and only while the window keeps room for ``_GRANT_ROOM`` times as much after this
# take (granted slots are members ``<name>+1…``, leased as a request's own).  A take of
# nothing (need, take and member none) only asks for grants: a refill.
TAKE = """
local has_slot = ARGV[1] == '1'
local now = tonumber(ARGV[2])
local n = #KEYS
if has_slot then n = n - 2 end
n = n / 2
local seen = {0}
for i = 1, n do
  local b = 2 + (i - 1) * 6
  local cur = tonumber(redis.call('GET', KEYS[i]) or '0')
  if cur + tonumber(ARGV[b + 2]) > tonumber(ARGV[b + 1]) then
    return {i, cur, tonumber(redis.call('GET', KEYS[n + i]) or '0')}
  end
  seen[i + 1] = cur
end
local granted = {}
if has_slot then
  local sk, gk = KEYS[2 * n + 1], KEYS[2 * n + 2]
  local b = 2 + n * 6
  local lease = tonumber(ARGV[b + 3])
  redis.call('ZREMRANGEBYSCORE', sk, '-inf', now)
  local held = redis.call('ZCARD', sk)
  local limit = tonumber(ARGV[b + 1])
  local member = ARGV[b + 2]
  if member ~= '' then
    if held >= limit then
      seen[1] = n + 1
      seen[n + 2] = held
      seen[n + 3] = tonumber(redis.call('GET', gk) or '0')
      return seen
    end
    redis.call('ZADD', sk, now + lease, member)
    held = held + 1
  end
  local want = tonumber(ARGV[b + 4])
  local g = 0
  if want > 0 and limit - held >= ROOM * want then
    g = want
    for k = 1, g do redis.call('ZADD', sk, now + lease, ARGV[b + 6] .. '+' .. k) end
    if ARGV[b + 5] == '1' then redis.call('INCR', gk) end
    redis.call('PEXPIRE', gk, lease)
  end
  granted[n + 1] = g
  redis.call('PEXPIRE', sk, lease)
end
for i = 1, n do
  local b = 2 + (i - 1) * 6
  local take, want, ttl = tonumber(ARGV[b + 3]), tonumber(ARGV[b + 5]), tonumber(ARGV[b + 4])
  local g = 0
  if want > 0 and tonumber(ARGV[b + 1]) - seen[i + 1] - take >= ROOM * want then
    g = want
    if ARGV[b + 6] == '1' then redis.call('INCR', KEYS[n + i]) end
    redis.call('EXPIRE', KEYS[n + i], ttl)
  end
  granted[i] = g
  redis.call('INCRBY', KEYS[i], take + g)
  redis.call('EXPIRE', KEYS[i], ttl)
end
for i = 1, n do seen[#seen + 1] = granted[i] end
if has_slot then seen[#seen + 1] = granted[n + 1] end
return seen
""".replace("ROOM", str(_GRANT_ROOM))


# KEYS: the settlement's marker, the counters to add to, then the slot's sorted set when
# ARGV[1] == "1".  ARGV: has_slot, the marker's lifetime (s), then per counter: amount, ttl;
# then the slot's members to release (a request's own, or granted slots given back).  The
# marker makes a settlement sent twice (its batch's reply lost to a broken connection)
# count once.  An amount taken off a counter that is gone (its window over, or a Redis
# that lost its data) is not added: a counter never starts below zero.
SETTLE = """
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', tonumber(ARGV[2])) then return 0 end
local has_slot = ARGV[1] == '1'
local n = #KEYS - 1
if has_slot then n = n - 1 end
for i = 1, n do
  local amount = tonumber(ARGV[2 * i + 1])
  if amount >= 0 or redis.call('EXISTS', KEYS[i + 1]) == 1 then
    redis.call('INCRBY', KEYS[i + 1], amount)
    redis.call('EXPIRE', KEYS[i + 1], tonumber(ARGV[2 * i + 2]))
  end
end
if has_slot then
  for j = 2 * n + 3, #ARGV do redis.call('ZREM', KEYS[n + 2], ARGV[j]) end
end
return 1
"""


class _Batch:
    """Commands written together, and where each reply goes: a take's future, or None for a
    settlement (its reply only logged when it is an error).  ``skip``: the replies of the
    ``SCRIPT LOAD`` commands a batch sent again after a NOSCRIPT starts with.  On the
    counters' own connection it is a ``redis_wire.Batch`` (``data``: the commands packed)."""

    __slots__ = ("owner", "cmds", "sinks", "skip", "replies", "data", "n", "sent", "fresh")

    def __init__(
        self, owner: RedisCounters, cmds: list[tuple[Any, ...]], sinks: list[asyncio.Future[Any] | None], skip: int = 0
    ) -> None:
        self.owner = owner
        self.cmds = cmds
        self.sinks = sinks
        self.skip = skip
        self.replies: list[Any] = []
        self.data = b""
        self.n = len(cmds)
        self.sent = 0.0
        self.fresh = True

    def landed(self) -> None:
        self.owner._done(self)

    def failed(self, e: Exception) -> None:
        self.owner._failed(self, e)


@dataclass(slots=True)
class _Grant:
    """A share of one window's counter reserved in Redis for this instance: ``left`` of it
    not used yet, handed out here without a round trip."""

    left: int
    seen: int  # the count the next take from it reports (the headers' view)
    ends: float  # when its window ends (unix seconds): nothing to give back after
    last: float  # when it was last taken from (monotonic)
    over: float = 0.0  # what a settlement paid from it adds to a take, on average (tokens)


@dataclass(slots=True)
class _Slots:
    """Concurrency slots granted to this instance on one key's sorted set: ``free`` to hand
    out, and every member it holds (handed out or not), which its renewals extend."""

    free: list[str] = field(default_factory=list)
    held: set[str] = field(default_factory=set)
    last: float = 0.0


class RedisCounters:
    """Counters shared by every instance on one Redis.

    Every call of one event-loop turn goes out in one batch: the takes of the requests
    admitted together, and the settlements owed, in one write, their replies read in order.
    A settlement is not waited for: it is owed for at most ``_SETTLE_DELAY`` seconds and
    rides on the next batch of takes (under load, a request costs one share of one round
    trip); its marker makes it count once when a batch whose replies were lost is sent
    again.  Each script stays atomic on the server: batching changes no count.

    The batches go on the counters' own connection (``app/redis_wire.py``: an asyncio
    protocol whose replies hiredis reads, batches pipelined, no pool to take a connection
    from and give it back to), opened with the store's address, user, password and
    database.  A cluster, TLS or a credential provider keeps redis-py's connections.

    On a Redis Cluster (``cluster``) a key's counters, and its settlements' markers, carry a
    hash tag of its name (``lim:{<16 hex of its SHA-256>}:<name>:…``): the scripts touch one
    slot, and the keys' counters spread over the cluster."""

    def __init__(self, redis: Any, prefix: str, cluster: bool = False) -> None:
        self.redis = redis
        self.prefix = prefix
        self.cluster = cluster
        from redis.exceptions import ConnectionError as RedisConnectionError  # (redis only with this store)
        from redis.exceptions import NoScriptError, ResponseError

        self.reconnect_errors: tuple[type[BaseException], ...] = (RedisConnectionError,)
        self._no_script = NoScriptError
        self._response_error = ResponseError
        self.script = redis.register_script(TAKE)
        self.settle_script = redis.register_script(SETTLE)
        self._take_sha = self.script.sha
        self._settle_sha = self.settle_script.sha
        self._scripts = {self.script.sha: TAKE, self.settle_script.sha: SETTLE}
        self._takes: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []  # for the next batch
        self._owed: list[tuple[Any, ...]] = []  # settlements not yet sent, oldest first
        self._kicked = False  # a batch is scheduled for the next loop turn
        self._timer: asyncio.TimerHandle | None = None  # the owed settlements' own batch
        self._failures = 0  # batches of settlements failed in a row (the retry's backoff)
        self._batches: set[asyncio.Task[None]] = set()  # batches through redis-py (no wire)
        from app import redis_wire

        self._pack = redis_wire.pack
        where = redis_wire.params(redis)  # None: redis-py's connections
        self._wire = redis_wire.Wire(where) if where is not None else None
        self._inflight = 0  # batches written, their replies not all read
        self._idle: list[asyncio.Future[None]] = []  # flush() calls waiting for no batch in flight
        self._tags: dict[str, str] = {}  # key name → its counters' prefix (a cluster's hash tag)
        self._grants: dict[str, _Grant] = {}  # counter → this instance's grant of it
        self._slots: dict[str, _Slots] = {}  # slot key → the slots granted to this instance
        self._lent: dict[str, str] = {}  # a request's slot member → the granted slot it uses
        self._rates: dict[str, tuple[int, int, int]] = {}  # see _busy
        self._sweeper: asyncio.TimerHandle | None = None  # the grants' next _sweep
        self._asking: set[str] = set()  # counters and slot keys a take in flight asks a grant of
        self._refills: dict[str, asyncio.Future[Any]] = {}  # counter or slot key → its refill on the way

    def key(self, name: str, rest: str) -> str:
        if self.cluster:
            tag = self._tags.get(name)
            if tag is None:
                if len(self._tags) > 4096:
                    self._tags.clear()
                tag = self._tags[name] = f"lim:{{{hashlib.sha256(name.encode()).hexdigest()[:16]}}}:{name}:"
            return tag + rest
        return f"lim:{name}:{rest}"

    async def take(self, entries: list[Entry], slot: Slot | None, now: float) -> tuple[int, list[int]]:
        t = time.monotonic()
        # (the rate of the key's first window, whichever minute or day it is)
        busy = self._busy(entries[0].key.rpartition(":")[0] if entries else slot.key if slot is not None else "", t)
        if self._grants or self._slots:
            seen = self._take_granted(entries, slot, t)
            if seen is None and self._refills:  # a refill on its way: the grants it brings
                keys = [e.key for e in entries] + ([slot.key] if slot is not None else [])
                pending = {f for f in map(self._refills.get, keys) if f is not None}
                if pending:
                    await asyncio.wait(pending)
                    seen = self._take_granted(entries, slot, time.monotonic())
            if seen is not None:
                if busy:
                    self._refill(entries, slot, now, busy)
                return 0, seen
        index, seen, grants = await self._take(entries, slot, now, busy)
        if index and grants:
            # refused while grants of that window are held: this instance's own goes back
            # now (before the next take, in the same batch); what the others leave unused
            # comes back within _GRANT_WAIT; then the take is tried once more
            if index <= len(entries):
                key = entries[index - 1].key
                mine = key in self._grants and key not in self._asking
                if mine:
                    self._give_back(key)
            else:
                key = slot.key if slot is not None else ""
                mine = key in self._slots and key not in self._asking
                if mine:
                    self._give_back_slots(key)
            if grants > mine:
                await asyncio.sleep(_GRANT_WAIT)
            index, seen, grants = await self._take(entries, slot, now, 0)
        return index, seen

    def _ask(
        self, entries: list[Entry], slot: Slot | None, now: float, busy: int, name: str = ""
    ) -> tuple[tuple[Any, ...], list[str]]:
        """A take's command (``name``: of nothing, a refill, whose granted slots are named
        so), asking for grants of ``busy`` takes' worth (0: none) where this instance holds
        less and none is asked already; and the counters and slot key it asks of."""
        take = not name
        prefix = self.prefix
        n = len(entries)
        asking: list[str] = []
        cmd: list[Any] = ["EVALSHA", self._take_sha, 2 * n + 2 * (slot is not None)]
        cmd += [prefix + e.key for e in entries]
        cmd += [prefix + e.key + ":g" for e in entries]
        if slot is not None:
            cmd += [prefix + slot.key, prefix + slot.key + ":g", "1", int(now * 1000)]
        else:
            cmd += ["0", int(now * 1000)]
        for e in entries:
            want = 0
            g = self._grants.get(e.key)
            # (one grant asked at a time; a cost is known only once settled)
            if busy and e.key not in self._asking and not e.kind.startswith("cost"):
                per = max(e.take, e.need) + (round(g.over) if g is not None else 0)
                want = max(busy * per - (g.left if g is not None else 0), 0)
                if want:
                    asking.append(e.key)
            if take:
                cmd += (e.limit, e.need, e.take, e.ttl, want, int(g is None))
            else:
                cmd += (e.limit, 0, 0, e.ttl, want, int(g is None))
        if slot is not None:
            want = 0
            free = self._slots.get(slot.key)
            if busy and slot.key not in self._asking:
                want = max(busy - (len(free.free) if free is not None else 0), 0)
                if want:
                    asking.append(slot.key)
            cmd += (slot.limit, slot.member if take else "", _LEASE_MS, want, int(free is None), name or slot.member)
        return tuple(cmd), asking

    async def _take(self, entries: list[Entry], slot: Slot | None, now: float, busy: int) -> tuple[int, list[int], int]:
        """One take in Redis: (0 or the refusing index, the counts seen, when refused the
        grants held of the refusing window)."""
        cmd, asking = self._ask(entries, slot, now, busy)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._takes.append((cmd, fut))
        if not self._kicked:
            self._kick()
        self._asking.update(asking)
        try:
            got = await asyncio.shield(fut)
        except asyncio.CancelledError:
            # (the request went, its take's reply still comes: what it grants is kept, as a
            # refill's; the slot and count the request took run out as before)
            name = slot.member if slot is not None else ""
            fut.add_done_callback(functools.partial(self._replied, entries, slot, now, asking, name, True))
            raise
        except BaseException:
            self._asking.difference_update(asking)
            raise
        self._asking.difference_update(asking)
        index = int(got[0])
        if index:
            return index, [int(x) for x in got[1:-1]], int(got[-1])
        n = len(entries)
        seen = [int(x) for x in got[1 : n + 1]]
        if asking:
            self._granted(entries, slot, seen, got[n + 1 :], now, time.monotonic())
        return 0, seen, 0

    def _refill(self, entries: list[Entry], slot: Slot | None, now: float, busy: int) -> None:
        """Grants asked again, without waiting, once one of this take's windows or its slots
        has under half a grant's worth left: the next takes find them refilled."""
        low = False
        for e in entries:
            g = self._grants.get(e.key)
            if (
                g is not None
                and g.left * 2 < busy * (max(e.take, e.need) + round(g.over))
                and e.key not in self._asking
            ):
                low = True
        if slot is not None:
            free = self._slots.get(slot.key)
            if free is not None and len(free.free) * 2 < busy and slot.key not in self._asking:
                low = True
        if not low:
            return
        name = f"{slot.member if slot is not None else ''}~{_nonce()}"
        cmd, asking = self._ask(entries, slot, now, busy, name)
        if not asking:
            return
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._takes.append((cmd, fut))
        if not self._kicked:
            self._kick()
        self._asking.update(asking)
        for key in asking:
            self._refills[key] = fut
        fut.add_done_callback(functools.partial(self._replied, entries, slot, now, asking, name, False))

    def _replied(
        self,
        entries: list[Entry],
        slot: Slot | None,
        now: float,
        asking: list[str],
        name: str,
        took: bool,
        f: asyncio.Future[Any],
    ) -> None:
        """The reply of a take nobody waits for (a refill; or, ``took``, a request's take whose
        request went), its granted slots named ``name``: what it granted kept for the next
        takes."""
        self._asking.difference_update(asking)
        for key in asking:
            if self._refills.get(key) is f:
                del self._refills[key]
        if f.cancelled() or f.exception() is not None:
            return  # (the next take asks again)
        got = f.result()
        if int(got[0]) == 0:
            n = len(entries)
            seen = [int(x) for x in got[1 : n + 1]]
            self._granted(entries, slot, seen, got[n + 1 :], now, time.monotonic(), name, took)

    def _busy(self, key: str, t: float) -> int:
        """How many takes a grant of ``key``'s window should hold: 0 under ``_GRANT_RATE``
        takes in this second and the one before (this one counted), else those of
        ``_GRANT_SPAN`` seconds at that rate, ``_GRANT_TAKES`` at least."""
        sec = int(t)
        got = self._rates.get(key)
        if got is None or got[0] < sec - 1:
            if len(self._rates) > 4096:
                self._rates.clear()
            self._rates[key] = (sec, 1, 0)
            return 0
        if got[0] == sec:
            count, before = got[1] + 1, got[2]
        else:  # (the next second)
            count, before = 1, got[1]
        self._rates[key] = (sec, count, before)
        rate = max(count, before)
        return max(int(rate * _GRANT_SPAN), _GRANT_TAKES) if rate >= _GRANT_RATE else 0

    def _take_granted(self, entries: list[Entry], slot: Slot | None, t: float) -> list[int] | None:
        """Taken from this instance's grants alone (the counts each saw), or None: some
        window or the slot has no grant with room enough, and Redis decides."""
        grants = self._grants
        for e in entries:
            g = grants.get(e.key)
            if g is None or g.left < e.take or g.left < e.need:
                return None
        free = None
        if slot is not None:
            free = self._slots.get(slot.key)
            if free is None or not free.free:
                return None
        seen = []
        for e in entries:
            g = grants[e.key]
            seen.append(g.seen)
            g.seen += e.take
            g.left -= e.take
            g.last = t
        if free is not None and slot is not None:
            self._lent[slot.member] = free.free.pop()
            free.last = t
        return seen

    def _granted(
        self,
        entries: list[Entry],
        slot: Slot | None,
        seen: list[int],
        grants: list[Any],
        now: float,
        t: float,
        name: str = "",
        took: bool = True,
    ) -> None:
        """What a take's reply granted, kept for the next takes (its granted slots named
        ``name``, else the request's own member; ``took`` False: a refill, which took
        nothing)."""
        for e, cur, raw in zip(entries, seen, grants, strict=False):
            amount = int(raw)
            if amount:
                g = self._grants.get(e.key)
                after = cur + e.take if took else cur
                if g is None:
                    self._grants[e.key] = _Grant(amount, after, now + e.reset, t)
                else:  # (Redis's count holds what this grant has left: never counted back)
                    g.seen = max(g.seen, after - g.left)
                    g.left += amount
                    g.last = t
        if slot is not None and len(grants) > len(entries):
            amount = int(grants[len(entries)])
            if amount:
                free = self._slots.get(slot.key)
                if free is None:
                    free = self._slots[slot.key] = _Slots()
                members = [f"{name or slot.member}+{k}" for k in range(1, amount + 1)]
                free.free += members
                free.held.update(members)
                free.last = t
        if (self._grants or self._slots) and self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(_GRANT_IDLE / 2, self._sweep)

    def _sweep(self, everything: bool = False) -> None:
        """The grants unused for ``_GRANT_IDLE`` seconds (``everything``: all of them) given
        back."""
        self._sweeper = None
        t = time.monotonic()
        for key, g in list(self._grants.items()):
            if (everything or t - g.last >= _GRANT_IDLE) and key not in self._asking:
                self._give_back(key)
        for key, free in list(self._slots.items()):
            if (everything or t - free.last >= _GRANT_IDLE) and key not in self._asking:
                self._give_back_slots(key)
        if self._grants or self._slots:
            self._sweeper = asyncio.get_running_loop().call_later(_GRANT_IDLE / 2, self._sweep)

    def _give_back(self, key: str) -> None:
        """The grant of counter ``key`` ended: what is left of it, and this instance's count
        in its ``:g`` key, owed as settlements are (another instance may wait for it)."""
        g = self._grants.pop(key)
        now = time.time()
        if now < g.ends:  # (a window over needs nothing back)
            ttl = int(g.ends - now) + _SLACK
            back = [(key, -g.left, ttl), (key + ":g", -1, ttl)] if g.left else [(key + ":g", -1, ttl)]
            self._owe(self._settle_cmd(back, None, [], key + ":back:" + _nonce()))

    def _give_back_slots(self, key: str) -> None:
        """The granted slots of ``key`` not lent out, owed back; the grant ends with them
        when none is lent out."""
        free = self._slots[key]
        members, free.free = free.free, []
        free.held.difference_update(members)
        back = []
        if not free.held:
            del self._slots[key]
            back = [(key + ":g", -1, int(_LEASE))]
        if members or back:
            self._owe(self._settle_cmd(back, key, members, key + ":back:" + _nonce()))

    async def settle(self, adds: list[tuple[str, int, int]], slot: Slot | None, once: str = "") -> None:
        """Owed, sent with the next batch (at most ``_SETTLE_DELAY`` seconds from now); what
        a grant of this instance covers is settled here (a slot it lent goes back to it)."""
        if self._grants:
            kept = []
            for add in adds:
                g = self._grants.get(add[0])
                if g is not None and g.left >= add[1]:  # (paid from the grant, or given back to it)
                    g.left -= add[1]
                    g.seen += add[1]
                    g.over += (max(add[1], 0) - g.over) / 8  # (the next grants hold it too)
                else:
                    kept.append(add)
            adds = kept
        if slot is not None and self._lent:
            lent = self._lent.pop(slot.member, None)
            if lent is not None:
                free = self._slots.get(slot.key)
                if free is not None and lent in free.held:
                    free.free.append(lent)
                    free.last = time.monotonic()
                slot = None
        if not adds and slot is None:
            return
        members = [slot.member] if slot is not None else []
        self._owe(self._settle_cmd(adds, slot.key if slot is not None else None, members, once))

    def _settle_cmd(
        self, adds: list[tuple[str, int, int]], slot_key: str | None, members: list[str], once: str
    ) -> tuple[Any, ...]:
        prefix = self.prefix
        cmd: list[Any] = ["EVALSHA", self._settle_sha, len(adds) + 1 + (slot_key is not None)]
        cmd.append(prefix + (once or "lim:settled:" + _nonce()))
        cmd += [prefix + k for k, _, _ in adds]
        if slot_key is not None:
            cmd += [prefix + slot_key, "1", _MARKED]
        else:
            cmd += ["0", _MARKED]
        for _, amount, ttl in adds:
            cmd += (amount, ttl)
        cmd += members
        return tuple(cmd)

    def _owe(self, cmd: tuple[Any, ...]) -> None:
        self._owed.append(cmd)
        if len(self._owed) > _OWED_MAX:  # Redis away for long: the oldest go
            del self._owed[0]
            log.warning("limits_settlement_dropped", owed=_OWED_MAX)
        if self._timer is None and not self._kicked:
            self._timer = asyncio.get_running_loop().call_later(_SETTLE_DELAY * 2**self._failures, self._kick)

    def _kick(self) -> None:
        if not self._kicked:
            self._kicked = True
            asyncio.get_running_loop().call_soon(self._send)

    def _send(self) -> None:
        self._kicked = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        takes, self._takes = self._takes, []
        owed, self._owed = self._owed, []
        if not takes and not owed:
            return
        sinks: list[asyncio.Future[Any] | None] = [None] * len(owed)
        for cmd, fut in takes:
            owed.append(cmd)
            sinks.append(fut)
        self._post(_Batch(self, owed, sinks))

    def _post(self, batch: _Batch) -> None:
        self._inflight += 1
        wire = self._wire
        if wire is None:  # redis-py's own connections, in a task
            task = asyncio.get_running_loop().create_task(self._through_pool(batch))
            self._batches.add(task)
            task.add_done_callback(self._batches.discard)
            return
        pack = self._pack
        batch.data = b"".join([pack(c) for c in batch.cmds])
        wire.send(batch)

    def _done(self, batch: _Batch) -> None:
        """A batch's replies, each to its take, or logged (a settlement's error)."""
        replies = batch.replies[batch.skip :] if batch.skip else batch.replies
        cmds = batch.cmds[batch.skip :] if batch.skip else batch.cmds
        again: list[int] = []
        owed = False
        for i, (reply, sink) in enumerate(zip(replies, batch.sinks, strict=True)):
            if sink is None:
                owed = True
                if isinstance(reply, Exception):
                    if not batch.skip and str(reply).startswith("NOSCRIPT"):
                        again.append(i)
                    else:  # (a script's own error: never sent again)
                        log.error("limits_settle_error", error=str(reply)[:200])
            elif isinstance(reply, Exception):
                if not batch.skip and str(reply).startswith("NOSCRIPT"):
                    again.append(i)
                elif not sink.done():
                    sink.set_exception(reply)
            elif not sink.done():
                sink.set_result(reply)
        if owed:
            self._failures = 0
        if again:
            # Redis restarted without the scripts: NOSCRIPT means they did not run; loaded,
            # and sent again, in one write
            loads: list[tuple[Any, ...]] = [("SCRIPT", "LOAD", body) for body in self._scripts.values()]
            redo = _Batch(self, loads + [cmds[i] for i in again], [batch.sinks[i] for i in again], skip=len(loads))
            self._post(redo)
        self._landed()

    def _failed(self, batch: _Batch, e: BaseException) -> None:
        """A batch that got no replies: its takes fail (the Limiter tries again, or fails
        open), its settlements are owed again, first, and sent after a backoff."""
        owed = []
        for cmd, sink in zip(batch.cmds[batch.skip :], batch.sinks, strict=True):
            if sink is None:
                owed.append(cmd)
            elif not sink.done():
                sink.set_exception(e)
        if owed:
            self._owed[:0] = owed
            self._failures = min(self._failures + 1, _BACKOFF_MAX)
            if not self._takes and self._timer is None and not self._kicked:
                delay = _SETTLE_DELAY * 2**self._failures
                self._timer = asyncio.get_running_loop().call_later(delay, self._kick)
            log.warning("limits_settle_failed", owed=len(self._owed), error=type(e).__name__)
        self._landed()

    def _landed(self) -> None:
        self._inflight -= 1
        if self._inflight <= 0 and self._idle:
            idle, self._idle = self._idle, []
            for fut in idle:
                if not fut.done():
                    fut.set_result(None)

    async def _through_pool(self, batch: _Batch) -> None:
        try:
            batch.replies = await self._execute(batch.cmds)
        except Exception as e:
            self._failed(batch, e)
            return
        self._done(batch)

    async def _execute(self, cmds: list[tuple[Any, ...]]) -> list[Any]:
        """``cmds`` on one of redis-py's connections in one write; their replies (an error
        reply as its exception).  A script the server does not know (it restarted) is loaded
        and its commands sent again: NOSCRIPT means they did not run."""
        replies = await self._round_trip(cmds)
        again = [i for i, r in enumerate(replies) if isinstance(r, self._no_script)]
        if again:
            # (the client's own SCRIPT LOAD: a cluster's goes to every primary)
            for body in self._scripts.values():
                await self.redis.script_load(body)
            redo = await self._round_trip([cmds[i] for i in again])
            for i, r in zip(again, redo, strict=True):
                replies[i] = r
        return replies

    async def _round_trip(self, cmds: list[tuple[Any, ...]]) -> list[Any]:
        pool = getattr(self.redis, "connection_pool", None)
        if pool is None:  # a client without one pool: its own pipeline
            async with self.redis.pipeline(transaction=False) as pipe:
                for cmd in cmds:
                    pipe.execute_command(*cmd)
                return list(await pipe.execute(raise_on_error=False))
        conn = await pool.get_connection()
        try:
            await conn.send_packed_command(conn.pack_commands(cmds))
            out: list[Any] = []
            for _ in cmds:
                try:
                    out.append(await conn.read_response())
                except self._response_error as e:
                    out.append(e)
            return out
        except BaseException:
            await conn.disconnect()  # (a half-read connection never goes back to the pool)
            raise
        finally:
            await pool.release(conn)

    async def flush(self) -> None:
        """Give back every grant's unused part, send what is owed now and wait for the
        batches under way (shutdown, tests)."""
        for _ in range(3):  # (a refill's reply, landing meanwhile, brings grants to give back)
            if self._sweeper is not None:
                self._sweeper.cancel()
            self._sweep(everything=True)
            self._send()
            while self._inflight > 0:
                fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._idle.append(fut)
                await fut
            if not self._grants and not any(free.free for free in self._slots.values()):
                break

    async def aclose(self) -> None:
        """The counters' own connection closed (after ``flush``)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._wire is not None:
            self._wire.close()

    async def renew(self, slots: list[Slot], now: float) -> None:
        """Each slot's lease extended; a slot lent from a grant renews with the whole grant
        (every slot this instance was granted and still holds)."""
        members: dict[str, list[str]] = {}
        for slot in slots:
            if slot.member not in self._lent:
                members.setdefault(slot.key, []).append(slot.member)
        for key, free in self._slots.items():
            if free.held:
                members.setdefault(key, []).extend(free.held)
        if not members:
            return
        until = int((now + _LEASE) * 1000)
        async with self.redis.pipeline(transaction=False) as pipe:
            for key, held in members.items():
                # (XX: a released slot is not taken again)
                pipe.zadd(self.prefix + key, dict.fromkeys(held, until), xx=True)
                pipe.pexpire(self.prefix + key, _LEASE_MS)
                if key in self._slots:  # (its count of grants lives as long as they do)
                    pipe.pexpire(self.prefix + key + ":g", _LEASE_MS)
            await pipe.execute()


class LimitExceeded(ProxyError):
    """A refused request: 429 (or 403 for a model the key may not use)."""


# limit kind → (what the message calls it, the code a client acts on)
_KINDS = {
    "requests": ("requests per minute", "rate_limit_exceeded"),
    "tokens_minute": ("tokens per minute", "rate_limit_exceeded"),
    "tokens_day": ("tokens per day", "insufficient_quota"),
    "tokens_month": ("tokens per month", "insufficient_quota"),
    "cost_day": ("cost per day (micro-dollars)", "insufficient_quota"),
    "cost_month": ("cost per month (micro-dollars)", "insufficient_quota"),
    "concurrent": ("concurrent streams", "rate_limit_exceeded"),
}


# OpenAI's three headers of a minute window (its limit, what remains, when it resets), by
# the window's kind; and Codex's four of a window family (the percent used, the window's
# minutes, the seconds until it resets, when): names made once, not at each answer
_MINUTE_HEADERS = {
    kind: (f"x-ratelimit-limit-{word}", f"x-ratelimit-remaining-{word}", f"x-ratelimit-reset-{word}")
    for kind, word in (("requests", "requests"), ("tokens_minute", "tokens"))
}
_CODEX_HEADERS = {
    family: (
        f"x-codex-{family}-used-percent",
        f"x-codex-{family}-window-minutes",
        f"x-codex-{family}-reset-after-seconds",
        f"x-codex-{family}-reset-at",
    )
    for family in ("primary", "secondary")
}
_BUDGET_RANK = {"tokens_day": 0, "cost_day": 1, "tokens_month": 2, "cost_month": 3}  # Codex's secondary: ties


_DAYS: dict[int, tuple[str, float, str, float, int]] = {}  # day → its windows (see _windows)


def _windows(now: float) -> dict[str, tuple[str, float, int]]:
    """window → (its id, seconds until it ends, its length in minutes)."""
    day = int(now // 86400)
    got = _DAYS.get(day)
    if got is None:  # (the calendar's part, once a day)
        t = time.gmtime(day * 86400)
        days = calendar.monthrange(t.tm_year, t.tm_mon)[1]
        last = calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0)) + days * 86400
        day_id = f"d{t.tm_year:04d}{t.tm_mon:02d}{t.tm_mday:02d}"
        got = (day_id, day * 86400 + 86400.0, f"M{t.tm_year:04d}{t.tm_mon:02d}", float(last), days * 1440)
        if len(_DAYS) > 64:
            _DAYS.clear()
        _DAYS[day] = got
    day_id, day_end, month_id, month_end, month_minutes = got
    return {
        "minute": (f"m{int(now // 60)}", 60 - now % 60, 1),
        "day": (day_id, day_end - now, 1440),
        "month": (month_id, month_end - now, month_minutes),
    }


def cost_micros(price: PriceCfg | None, tokens: tuple[int, int, int, int, int]) -> int:
    """What ``tokens`` (input, output, cache read, cache write, reasoning: the last three
    parts of the first two) cost, in micro-dollars (an integer: the counters' unit)."""
    if price is None:
        return 0
    inp, out, read, write, _ = tokens
    plain = max(inp - read - write, 0)
    read_price = price.input if price.cache_read is None else price.cache_read
    write_price = price.input if price.cache_write is None else price.cache_write
    usd_per_million = plain * price.input + read * read_price + write * write_price + out * price.output
    return round(usd_per_million)  # (a million tokens at $1 = 1 µ$ per token)


def saved_micros(price: PriceCfg | None, tokens: tuple[int, int, int, int, int]) -> int:
    """What the upstream's prompt cache saved on ``tokens``, in micro-dollars: the input at
    the input price less what it cost (cache reads at ``cache_read``, writes at
    ``cache_write``).  A write dearer than the input (Anthropic: 1.25×) counts against it."""
    if price is None:
        return 0
    _, _, read, write, _ = tokens
    read_price = price.input if price.cache_read is None else price.cache_read
    write_price = price.input if price.cache_write is None else price.cache_write
    return round(read * (price.input - read_price) + write * (price.input - write_price))


@dataclass(slots=True)
class Ticket:
    """One admitted request's share of its key's windows."""

    name: str
    policy: LimitsCfg | None
    entries: list[Entry] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)  # what each entry saw before taking
    slot: Slot | None = None
    reserved: int = 0
    degraded: bool = False
    settled: bool = False
    now: float = 0.0

    def headers(self) -> dict[str, str]:
        """OpenAI's and Codex's rate-limit headers for this key's windows (none without a policy)."""
        out: dict[str, str] = {}
        minute_pct = 0.0
        minute_reset = 0.0
        minute = False
        best: tuple[float, int, Entry] | None = None  # (percent, rank, entry): the budget most used
        for e, before in zip(self.entries, self.counts, strict=False):  # (the order of _ROWS)
            used = before + e.take
            pct = 100.0 * used / e.limit
            names = _MINUTE_HEADERS.get(e.kind)
            if names is not None:
                limit_h, remaining_h, reset_h = names
                out[limit_h] = str(e.limit)
                out[remaining_h] = str(max(e.limit - used, 0))
                out[reset_h] = f"{max(int(e.reset), 1)}s"
                minute_pct = max(minute_pct, pct)
                minute_reset, minute = e.reset, True
            else:  # the first of the most used: a day's before a month's, tokens before cost
                rank = _BUDGET_RANK[e.kind]
                if best is None or pct > best[0] or (pct == best[0] and rank < best[1]):
                    best = (pct, rank, e)
        if minute:
            _codex(out, "primary", minute_pct, 1, self.now, minute_reset)
        if best is not None:
            pct, _, e = best
            minutes = 1440 if e.kind.endswith("day") else _windows(self.now)["month"][2]
            _codex(out, "secondary", pct, minutes, self.now, e.reset)
        return out

    def event(self) -> dict[str, Any] | None:
        """The ``codex.rate_limits`` event of these windows (a Responses WebSocket)."""
        h = self.headers()
        windows: dict[str, Any] = {}
        for fam, (used, minutes, after, at) in _CODEX_HEADERS.items():
            if used in h:
                windows[fam] = {
                    "used_percent": float(h[used]),
                    "window_minutes": int(h[minutes]),
                    "reset_after_seconds": int(h[after]),
                    "reset_at": int(h[at]),
                }
        if not windows:
            return None
        return {
            "type": "codex.rate_limits",
            "rate_limits": {"allowed": True, "limit_reached": False, **windows},
        }


def _codex(out: dict[str, str], family: str, pct: float, minutes: int, now: float, reset: float) -> None:
    """Codex's four headers of the window ``family``, into ``out``."""
    used, window, after, at = _CODEX_HEADERS[family]
    out[used] = f"{min(pct, 100.0):.1f}"
    out[window] = str(minutes)
    out[after] = str(max(int(reset), 1))
    out[at] = str(int(now + reset))


class Limiter:
    """The app's limits: policies by key name, one ``Counters``, the degraded state."""

    def __init__(self, config: Config, counters: Counters, metrics: Any = None) -> None:
        self.counters = counters
        self.metrics = metrics
        self.failed_at = 0.0
        # the policies of the keys made at run time (app/keys.py): name → limits (None: the
        # default), set by the key registry at each change
        self.runtime: dict[str, LimitsCfg | None] = {}
        self.held: dict[int, Ticket] = {}  # the open answers' tickets that hold a slot
        self._task: asyncio.Task[None] | None = None
        self._plans: dict[int, tuple[LimitsCfg, list[tuple[str, int, str, int]]]] = {}  # see _plan
        self.reload(config)

    def reload(self, config: Config) -> None:
        """New policies (SIGHUP): requests admitted before keep their tickets."""
        self.default = config.auth.default_limits
        self.policies: dict[str, LimitsCfg | None] = {}
        for k in config.auth.keys:
            if not isinstance(k, str) and k.limits is not None:
                self.policies[k.name] = k.limits
        self.prices: dict[str, PriceCfg | None] = {m.name: m.price for m in config.models}

    def _plan(self, pol: LimitsCfg) -> list[tuple[str, int, str, int]]:
        """The windows ``pol`` limits: (kind, limit, window, what admission takes: -1 for
        the estimate), worked out once per policy."""
        got = self._plans.get(id(pol))
        if got is not None and got[0] is pol:
            return got[1]
        rows = [
            (kind, limit, window, take)
            for kind, limit, window, take in (
                ("requests", pol.requests_per_minute, "minute", 1),
                ("tokens_minute", pol.tokens_per_minute, "minute", -1),
                ("tokens_day", pol.tokens_per_day, "day", -1),
                ("tokens_month", pol.tokens_per_month, "month", -1),
                ("cost_day", _micros(pol.cost_per_day), "day", 0),
                ("cost_month", _micros(pol.cost_per_month), "month", 0),
            )
            if limit is not None
        ]
        if len(self._plans) > 4096:
            self._plans.clear()
        self._plans[id(pol)] = (pol, rows)  # (pol kept: its id is not reused while cached)
        return rows

    @property
    def degraded(self) -> bool:
        return time.monotonic() - self.failed_at < _DEGRADED_FOR if self.failed_at else False

    def policy(self, name: str) -> LimitsCfg | None:
        got = self.policies.get(name)
        if got is None:
            got = self.runtime.get(name)
        return self.default if got is None else got

    def price(self, model: str) -> PriceCfg | None:
        got = self.prices.get(model)
        if got is not None:
            return got
        for pattern, price in self.prices.items():  # a glob model entry's price
            if price is not None and any(c in pattern for c in "*?[") and fnmatch.fnmatchcase(model, pattern):
                return price
        return None

    async def admit(self, name: str, model: str, estimate: int, request_id: str, now: float | None = None) -> Ticket:
        """The ticket of an admitted request, or ``LimitExceeded``."""
        pol = self.policy(name)
        now = time.time() if now is None else now
        ticket = Ticket(name, pol, now=now, reserved=estimate)
        if pol is None:
            return ticket
        if pol.models is not None and not any(fnmatch.fnmatchcase(model, g) for g in pol.models):
            raise LimitExceeded(
                403,
                f"The key '{name}' may not use the model '{model[:200]}'.",
                type="permission_error",
                code="model_not_allowed",
                param="model",
            )
        rows = self._plan(pol)
        if rows:
            win = _windows(now)
            key = self.counters.key
            for kind, limit, window, take in rows:
                wid, reset, _ = win[window]
                amount = estimate if take < 0 else take
                ticket.entries.append(
                    Entry(kind, key(name, f"{kind}:{wid}"), limit, 1, amount, int(reset) + _SLACK, reset)
                )
        if pol.concurrent is not None:
            # (the member: the request id, which a client may send, made unique: two requests
            # that send one id hold two slots)
            ticket.slot = Slot(self.counters.key(name, "concurrent"), pol.concurrent, f"{request_id}#{_nonce()}")
        if not ticket.entries and ticket.slot is None:
            return ticket
        try:
            index, seen = await self._take(ticket, now)
        except Exception as e:  # Redis down: fail open, counted, never settled
            self._failed(e, name)
            ticket.degraded = True
            return ticket
        if index:
            raise self._refusal(ticket, index, seen)
        ticket.counts = seen if len(seen) == len(ticket.entries) else [0] * len(ticket.entries)
        if ticket.slot is not None:
            self.held[id(ticket)] = ticket
        return ticket

    async def _take(self, ticket: Ticket, now: float) -> tuple[int, list[int]]:
        for _ in range(_RECONNECTS):
            try:
                return await self.counters.take(ticket.entries, ticket.slot, now)
            except self.counters.reconnect_errors:
                # a pooled connection from before a Redis restart fails once (redis-py hands
                # it out unchecked, and drops it): again, on another, before failing open (a
                # Redis that is down refuses at once: the tries cost no wait)
                continue
        return await self.counters.take(ticket.entries, ticket.slot, now)

    async def settle(self, ticket: Ticket, model: str, tokens: tuple[int, int, int, int, int] | None) -> int:
        """The request ended: its slot released, its windows given the real tokens and cost
        (``tokens`` None: it failed before its first byte, the estimate goes back).  The
        cost in micro-dollars."""
        if ticket.settled:
            return 0
        ticket.settled = True
        self.held.pop(id(ticket), None)
        cost = cost_micros(self.price(model), tokens) if tokens is not None else 0
        if ticket.degraded or ticket.policy is None:
            return cost
        used = (tokens[0] + tokens[1]) if tokens is not None else 0
        adds = []
        for e in ticket.entries:
            if e.kind.startswith("tokens") and used != ticket.reserved:
                adds.append((e.key, used - ticket.reserved, e.ttl))
            elif e.kind.startswith("cost") and cost:
                adds.append((e.key, cost, e.ttl))
        if not adds and ticket.slot is None:
            return cost
        try:
            await self._settle(adds, ticket.slot, self.counters.key(ticket.name, f"settled:{_nonce()}"))
        except Exception as e:
            self._failed(e, ticket.name)
        return cost

    async def _settle(self, adds: list[tuple[str, int, int]], slot: Slot | None, once: str) -> None:
        for _ in range(_RECONNECTS):
            try:
                return await self.counters.settle(adds, slot, once)
            except self.counters.reconnect_errors:
                # as _take: a pooled connection from before a Redis restart fails before the
                # script ran; again, on another (a lost settlement would keep the tokens
                # reserved, or a concurrency slot held until its lease ends)
                continue
        await self.counters.settle(adds, slot, once)

    async def renew(self, now: float | None = None) -> None:
        """Renew the slots of every open answer of this process (``_RENEW``: the app's task)."""
        now = time.time() if now is None else now
        slots = []
        for key, t in list(self.held.items()):
            if now - t.now > _HELD_MAX:
                del self.held[key]
            elif t.slot is not None:
                slots.append(t.slot)
        await self.counters.renew(slots, now)  # (also the slots granted to this process)

    async def start(self) -> None:
        """The renewals' task (the app's start-up)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._renewing(), name="limits-renew")

    async def _renewing(self) -> None:
        while True:
            await asyncio.sleep(_RENEW)
            try:
                await self.renew()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # Redis down: the leases run out, as a dead process's would
                log.warning("limits_renew_failed", slots=len(self.held), error=type(e).__name__)

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        try:
            await self.counters.flush()  # the settlements still owed
        except Exception as e:
            log.warning("limits_flush_failed", error=type(e).__name__)
        await self.counters.aclose()

    def _failed(self, e: BaseException, name: str) -> None:
        self.failed_at = time.monotonic()
        if self.metrics is not None:
            self.metrics.inc("switchboard_limits_degraded_total")
        log.warning("limits_degraded", key_name=name, error=type(e).__name__)

    def _refusal(self, ticket: Ticket, index: int, seen: list[int]) -> LimitExceeded:
        if index > len(ticket.entries):
            kind, limit, reset = "concurrent", ticket.slot.limit if ticket.slot else 0, 1.0
        else:
            e = ticket.entries[index - 1]
            kind, limit, reset = e.kind, e.limit, e.reset
        what, code = _KINDS[kind]
        wait = max(int(reset + 0.999), 1)
        if self.metrics is not None:
            self.metrics.inc("switchboard_limits_refused_total", kind=kind)
        headers = {"retry-after": str(wait), "x-switchboard-limit": kind}
        # the window it hit, full: OpenAI's three headers for a minute window, Codex's own
        # (primary: the minute, secondary: a day or month budget); a slot refused: the
        # key's windows as they stand (nothing was taken from them)
        names = _MINUTE_HEADERS.get(kind)
        if kind == "concurrent" and len(seen) > len(ticket.entries):
            n = len(ticket.entries)
            entries = [replace(e, take=0) for e in ticket.entries]
            view = Ticket(ticket.name, ticket.policy, entries=entries, counts=seen[:n], now=ticket.now)
            headers = {**view.headers(), **headers}
        if names is not None:
            limit_h, remaining_h, reset_h = names
            headers[limit_h] = str(limit)
            headers[remaining_h] = "0"
            headers[reset_h] = f"{wait}s"
            _codex(headers, "primary", 100.0, 1, ticket.now, reset)
        elif kind != "concurrent":
            minutes = _windows(ticket.now)["day" if kind.endswith("day") else "month"][2]
            _codex(headers, "secondary", 100.0, minutes, ticket.now, reset)
        return LimitExceeded(
            429,
            f"Rate limit reached for {what} on key '{ticket.name}' (limit {limit}). Please try again in {wait}s.",
            type="rate_limit_error" if code == "rate_limit_exceeded" else "insufficient_quota",
            code=code,
            headers=headers,
        )


_NONCES = itertools.count()
_PROCESS = [os.urandom(6).hex()]  # (a forked child draws its own)
os.register_at_fork(after_in_child=lambda: _PROCESS.__setitem__(0, os.urandom(6).hex()))


def _nonce() -> str:
    """An id no other settlement of any process has."""
    return f"{_PROCESS[0]}{next(_NONCES):x}"


def _micros(usd: float | None) -> int | None:
    return None if usd is None else round(usd * 1_000_000)
