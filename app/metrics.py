"""Metrics on prometheus_client, exported at ``GET /metrics`` in the Prometheus text format.

Theory of operation
-------------------
**The library.**  prometheus_client (the Prometheus project's own Python client) writes the
exposition and holds the gauges.  It was chosen over the OpenTelemetry SDK with its
Prometheus exporter because of ``--workers N``: its *multiprocess mode* keeps every
worker's values in small memory-mapped files of a directory the workers share
(``PROMETHEUS_MULTIPROC_DIR``), and any worker's scrape merges the files, so one scrape of
``/metrics`` answers for every worker of the instance.  The OpenTelemetry exporter serves
the one process it runs in (a scrape would see whichever worker the kernel handed the
connection).  It is also the lighter of the two: no SDK pipeline, views or attribute sets
per measurement, and no further dependency.

**The values.**  Counters, summaries and histograms (every update of a request) are kept
here, not in prometheus_client's metric objects, whose update takes a lock and walks the
buckets in Python per observation, plus a write through its memory-mapped dict per value in
multiprocess mode.  A series is a short array of floats: a counter ``[value]``, a summary
``[count, sum]``, a histogram one count per bucket (``bisect_left``: the first bound not
below the value, prometheus_client's ``le``; ``+Inf`` last) then the sum.  In one process
it is a list; at scrape time a ``Collector`` hands them to prometheus_client as
``CounterMetricFamily``, ``SummaryMetricFamily`` and ``HistogramMetricFamily`` (cumulative
buckets), which write the same lines its own metric classes would.

**Multiprocess mode** is on when ``PROMETHEUS_MULTIPROC_DIR`` is set when the process
starts; ``app/workers.py`` (the ``--workers N`` supervisor) creates a private directory per
instance, passes it to its workers, marks a worker that exits dead
(``multiprocess.mark_process_dead``: its gauges leave the scrape, its counts stay in the
sums) and removes the directory when it exits.  Each ``Metrics`` then writes its series
into two files of its own in the directory, beside prometheus_client's ``*.db`` (the
gauges): ``switchboard_<pid>_<random>.values``, float64 slots memory-mapped in chunks of
``_CHUNK``, and ``switchboard_<pid>_<random>.index``, one JSON line per series (first slot,
name, labels) appended before the series' first update.  An update is a store into the
map, so nothing waits for a flush and a worker killed outright loses nothing.  A scrape
(``read_dir``) reads every index, then its values file (so every slot it names is there),
and sums the series over the files.  The series of a process that exited stay in the sums,
as prometheus_client keeps a dead process's counters, and counters never go back: the
supervisor adds them into one file, ``switchboard_exited.json`` (``fold_exited``: renamed
into place, then the process's own files are removed), so restarts do not pile files up.  Without the variable (one process) the values live
in memory.  Either way one ``Metrics`` is made per app (``create_app``); two apps in one
process, as in the tests, never see each other's counts (in multiprocess mode a worker
holds one app, and its scrape is the directory's).  Counters and histograms are summed over
the workers; the breaker gauge shows the worst state any live worker has
(``livemax``).  A ``Metrics`` is not shared across a fork: the workers are started afresh
(``subprocess``), each makes its own.

**Closed label sets.**  Label values come from closed sets, never from what a client or an
upstream sent: a label whose value is not in its set (``LABELS``, completed for each
``Metrics`` with the configured provider, model and client key names and the known error
codes) is exported as ``other``.  A request path, an upstream's own error code or a
client's model name can therefore never create a series, and the number of series is
bounded by the product of the sets.  As a second bound, a metric that somehow reached
``MAX_SERIES`` label sets adds no new ones: further label sets are counted under
all-``other`` labels.

**Hot path.**  A label set's series is found once and remembered: ``answered`` and
``turn`` do one dict lookup for all the series of a request, then, under one lock (an
add to a float is a read and a write), one or two additions per update (their cost:
docs/operations.md, "Metrics").

Metric list, units, labels and buckets: docs/operations.md.  The GenAI metrics follow the
OpenTelemetry GenAI semantic conventions as the OpenTelemetry Prometheus exporter names
them (``gen_ai.server.request.duration`` → ``gen_ai_server_request_duration_seconds``).
"""

from __future__ import annotations

import contextlib
import glob
import mmap
import os
import secrets
import threading
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Gauge, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from app.logs import log
from providers.retry import ATTEMPT_OUTCOMES
from transformers import repairs
from transformers.fields import FIELDS
from transformers.vocab import OUTCOMES, PROTOCOLS

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# read once, as prometheus_client reads it once (at import) to choose where values live
MULTIPROC_DIR = os.environ.get(MULTIPROC_ENV) or None

# no ``_created`` series beside each counter, histogram and summary (the multiprocess
# collector has none either): a scrape is the same in both modes
disable_created_metrics()

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # the exposition format /metrics has always answered in

# OpenTelemetry GenAI semantic conventions: the explicit bucket boundaries they advise
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
TOKEN_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip

# name → (type, help, histogram buckets).  A counter's name ends in _total (prometheus_client
# exports it so); a summary's series are <name>_sum and <name>_count.
METRICS: dict[str, tuple[str, str, tuple[float, ...]]] = {
    "switchboard_requests_total": (
        "counter", "Requests answered, by route, client protocol, provider and status.", ()
    ),
    "switchboard_stream_outcomes_total": (
        "counter", "Streams by terminal outcome (completed, incomplete, failed, client_cancel).", ()
    ),
    "switchboard_repairs_total": ("counter", "Wire repairs that fired, by rule and provider.", ()),
    "switchboard_fields_dropped_total": (
        "counter", "Top-level request fields an upstream did not get (transformers/fields.py), by field and provider.", ()
    ),
    "switchboard_upstream_errors_total": (
        "counter", "Upstream failures before the first byte, by provider and code.", ()
    ),
    "switchboard_stream_failures_total": (
        "counter", "Answers that ended failed after the first byte, by provider and code.", ()
    ),
    "switchboard_request_duration_seconds": (
        "summary", "Request time, by route (_sum: total seconds, _count: requests).", ()
    ),
    "switchboard_ttfb_seconds": (
        "summary", "Time to the upstream's first byte, by route (_sum: total seconds, _count: requests).", ()
    ),
    "switchboard_upstream_attempts_total": (
        "counter", "Upstream attempts before the first byte (retries and fallbacks), by provider and outcome.", ()
    ),
    "switchboard_fallbacks_total": (
        "counter", "Upstream attempts on another target of the model than the ones tried before (fallbacks), by the provider fallen back to.", ()
    ),
    "switchboard_breaker_state": (
        "gauge", "Circuit breaker state per provider (model -) and per provider+model: 0 closed, 1 half-open, 2 open.", ()
    ),
    "switchboard_envelope_rejected_total": (
        "counter", "Proxy-sealed envelopes that did not open, by kind and reason.", ()
    ),
    "switchboard_store_errors_total": (
        "counter", "Response store operations that failed, by operation (put, get, chain, ...).", ()
    ),
    "switchboard_websocket_connections_total": (
        "counter", "Responses WebSocket upgrades accepted and refused, and closes, by event.", ()
    ),
    "switchboard_websocket_events_total": (
        "counter", "Responses WebSocket cancel, steering and inject outcomes, by event.", ()
    ),
    "switchboard_store_bytes": (
        "gauge", "Total compressed size of the stored responses, as of the last put or delete (store.max_bytes caps it).", ()
    ),
    "switchboard_store_evicted_total": (
        "counter", "Stored responses deleted to keep the store under store.max_bytes.", ()
    ),
    "switchboard_usage_records_total": ("counter", "Usage records written to the store's backend.", ()),
    "switchboard_usage_dropped_total": (
        "counter", "Usage records lost: dropped from a full buffer, or still pending at shutdown when the backend failed.", ()
    ),
    "switchboard_usage_write_errors_total": (
        "counter", "Usage record batches whose write failed (kept and written again later).", ()
    ),
    "switchboard_limits_refused_total": (
        "counter", "Requests refused by their key's limits, by the limit hit (kind).", ()
    ),
    "switchboard_limits_degraded_total": (
        "counter", "Requests admitted without their limits checked: the limits' Redis did not answer (fail open).", ()
    ),
    "gen_ai_server_request_duration_seconds": (
        "histogram", "GenAI request duration: from the request to the client's last byte.", DURATION_BUCKETS
    ),
    "gen_ai_server_time_to_first_token_seconds": (
        "histogram", "Time from the request to the first output token sent to the client (streams).", DURATION_BUCKETS
    ),
    "gen_ai_server_time_per_output_token_seconds": (
        "histogram", "Time per output token after the first one (streams).", TPOT_BUCKETS
    ),
    "gen_ai_client_token_usage": (
        "histogram", "Tokens used per request, by type (input, output, cache_read, cache_write, reasoning).", TOKEN_BUCKETS
    ),
}  # fmt: skip

OTHER = "other"
MAX_SERIES = 4096

# the route templates the app serves; anything else (an unknown path, a model id inside a
# path) is "other"
ROUTES = frozenset({
    "/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses/compact", "/v1/models", "/v1/models/{model}", "/healthz", "/readyz", "/metrics",
    "/v1beta/models/{model}:generateContent", "/v1beta/models/{model}:streamGenerateContent",
    "/v1beta/models/{model}:countTokens", "/v1beta/models", "/v1beta/models/{model}",
})  # fmt: skip
# Gemini's methods on a model (``/v1beta/models/{model}:{method}``)
GEMINI_METHODS = frozenset({"generateContent", "streamGenerateContent", "countTokens"})

_STATUSES = frozenset(str(s) for s in range(100, 600))

# gen_ai_token_type: the OpenTelemetry types (input, output) and the parts of them the
# upstreams report (cache_read and cache_write of the input, reasoning of the output)
TOKEN_TYPES = ("input", "output", "cache_read", "cache_write", "reasoning")

# label name → the closed set of its values (protocols, outcomes and repair rule names come
# from the one vocabulary: transformers/vocab.py, transformers/repairs.py)
LABELS: dict[str, frozenset[str]] = {
    "route": ROUTES,
    "client": PROTOCOLS | {"-"},
    "provider": frozenset({"-"}),
    "status": _STATUSES,
    "outcome": OUTCOMES | ATTEMPT_OUTCOMES,
    "model": frozenset({"-"}),  # breaker gauges: completed with the configured upstream models
    "rule": repairs.NAMES,
    # request fields by name (transformers/fields.py; a field it does not know: "other"),
    # and the client headers that may be withheld
    "field": frozenset(n for table in FIELDS.values() for n in table) | {"other", "anthropic-beta"},
    "code": frozenset(),
    # response store operations (app/store.py); too_large: a record over store.max_record_bytes
    "op": frozenset({"put", "get", "chain", "items", "delete", "ping", "too_large", "signatures"}),
    # Responses WebSocket connections (app/ws.py)
    "event": frozenset(
        {"accepted", "refused_auth", "refused_capacity", "refused_disabled"}
        | {"closed_client", "closed_idle", "closed_lifetime", "closed_shutdown"}
    ),
    # proxy envelopes (transformers/envelope.py): what was sealed, why it did not open
    # ... and, for switchboard_limits_refused_total, the limit a request hit (app/limits.py)
    "kind": frozenset({"reasoning", "compaction", "thought_signature"})
    | frozenset({"requests", "tokens_minute", "tokens_day", "tokens_month", "cost_day", "cost_month", "concurrent"}),
    "reason": frozenset({"bad_mac", "malformed", "unknown_version", "no_key", "foreign"}),
    # the GenAI metrics: the client's protocol, the configured provider, the configured
    # public model name (completed per Metrics), the client key's configured name ("-": an
    # open proxy), what the request failed with ("": it did not; the error codes and the
    # HTTP statuses), the token type, and whether the count is an estimate
    "gen_ai_operation_name": PROTOCOLS,
    "gen_ai_provider_name": frozenset({"-"}),
    "gen_ai_request_model": frozenset(),
    "key_name": frozenset({"-"}),
    "error_type": frozenset({"", "client_cancel"}) | _STATUSES,
    "gen_ai_token_type": frozenset(TOKEN_TYPES),
    "gen_ai_token_estimated": frozenset({"true", "false"}),
}


_KEY_MEMO = 4096  # label sets whose series key is remembered (Metrics._keys)

Key = tuple[tuple[str, str], ...]  # a series' labels, cleaned, sorted by name
# a series' values: a list in memory, a slice of the process's values file in multiprocess
# mode.  A counter is [value]; a summary [count, sum]; a histogram one count per bucket (not
# cumulative, +Inf last), then the sum.
Values = Any

# Metrics.turn's series of one (operation, provider, model, key, error, estimated), by slot:
# the duration, the time to first token, the time per output token, then one per token type
_DURATION, _TTFT, _TPOT, _TOKENS = 0, 1, 2, 3

# multiprocess mode: each Metrics writes two files into the directory, beside
# prometheus_client's own ``*.db`` ones (its gauges): ``switchboard_<pid>_<id>.values``, the
# values as float64s, and ``switchboard_<pid>_<id>.index``, one JSON line per series
# ([first slot, name, labels]) written before the series' first update
FILE_PREFIX = "switchboard_"
# the series of every process that exited, summed (fold_exited): JSON, renamed into place
EXITED = FILE_PREFIX + "exited.json"
_READ_TRIES = 3  # a scrape whose listing went stale (a fold) reads the directory again
_CHUNK = 4096  # slots (8 bytes each) the values file grows by: one memory map each


def _shape(name: str) -> tuple[str, str, tuple[float, ...]]:
    """(type, help, buckets) of a metric: a name not in METRICS is a counter."""
    return METRICS.get(name, ("counter", name, ()))


def _width(kind: str, buckets: tuple[float, ...]) -> int:
    return 1 if kind == "counter" else 2 if kind == "summary" else len(buckets) + 2


def _go_float(x: float) -> str:
    """A bucket bound as prometheus_client writes ``le`` (Go's float format)."""
    s = repr(float(x))
    dot = s.find(".")
    if x > 0 and dot > 6:  # Go switches to exponents sooner than Python
        return f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.") + f"e+0{dot - 1}"
    return s


_LE: dict[tuple[float, ...], tuple[str, ...]] = {}


def _families(data: dict[str, dict[Key, Values]]) -> Iterator[Metric]:
    """The metric families of ``data`` (name → labels → values), as prometheus_client's
    Counter, Summary and Histogram collect them."""
    for name, series in data.items():
        if not series:
            continue
        kind, doc, buckets = _shape(name)
        names = [k for k, _ in next(iter(series))]
        family: Any
        if kind == "counter":
            family = CounterMetricFamily(name, doc, labels=names)
            for key, v in series.items():
                family.add_metric([x for _, x in key], v[0])
        elif kind == "summary":
            family = SummaryMetricFamily(name, doc, labels=names)
            for key, v in series.items():
                family.add_metric([x for _, x in key], v[0], v[1])
        else:
            le = _LE.get(buckets)
            if le is None:
                le = _LE[buckets] = (*(_go_float(b) for b in buckets), "+Inf")
            family = HistogramMetricFamily(name, doc, labels=names)
            for key, v in series.items():
                total = 0.0
                counts = []
                for i, bound in enumerate(le):
                    total += v[i]
                    counts.append((bound, total))
                family.add_metric([x for _, x in key], counts, v[-1])
        yield family


def _add(out: dict[str, dict[Key, list[float]]], name: str, key: Key, values: Iterable[float]) -> None:
    series = out.setdefault(name, {})
    got = series.get(key)
    if got is None:
        series[key] = list(values)
    else:
        for i, v in enumerate(values):
            got[i] += v


def _load_exited(path: str) -> tuple[dict[str, dict[Key, list[float]]], set[str]]:
    """The exited processes' series summed in ``EXITED`` (``fold_exited``), and the names of
    the files folded into it last (a scrape skips them while they are being removed)."""
    try:
        with open(os.path.join(path, EXITED), "rb") as f:
            doc = orjson.loads(f.read())
    except FileNotFoundError:
        return {}, set()
    out: dict[str, dict[Key, list[float]]] = {}
    for name, labels, values in doc["series"]:
        _add(out, name, tuple((k, v) for k, v in labels), values)
    return out, set(doc["files"])


def read_dir(path: str, pid: int | None = None) -> dict[str, dict[Key, list[float]]]:
    """Every process's series in a multiprocess directory (or process ``pid``'s), summed:
    the live ones' and the exited ones' (their counts stay, as prometheus_client keeps a
    dead process's counters; ``fold_exited`` moves them into one file).

    A process's files vanish only when they are folded, after the folded file holding
    them was written: a file gone between the listing and its read means the listing
    is stale, and the read starts again (the folded file, read after the listing, then
    holds it)."""
    for _ in range(_READ_TRIES - 1):
        out = _read_dir(path, pid, strict=True)
        if out is not None:
            return out
    return _read_dir(path, pid, strict=False) or {}


def _read_dir(path: str, pid: int | None, strict: bool) -> dict[str, dict[Key, list[float]]] | None:
    pattern = f"{FILE_PREFIX}{'*' if pid is None else pid}_*.index"
    indexes = sorted(glob.glob(os.path.join(glob.escape(path), pattern)))
    # (after the listing: a process folded since is in it, and its files are skipped)
    out, folded = _load_exited(path) if pid is None else ({}, set())
    for index in indexes:
        base = index.removesuffix(".index")
        if os.path.basename(base) in folded:
            continue
        try:
            # the index first: every slot it names is in the values file read after it
            with open(index, "rb") as f:
                lines = f.read().split(b"\n")[:-1]  # (a line still being written: no newline)
            with open(base + ".values", "rb") as f:
                data = f.read()
        except FileNotFoundError:
            if strict:
                return None
            continue
        values = memoryview(data[: len(data) - len(data) % 8]).cast("d")
        for line in lines:
            try:
                slot, name, labels = orjson.loads(line)
            except ValueError:  # (a line a full disk cut short, with the next one after it)
                continue
            kind, _, buckets = _shape(name)
            width = _width(kind, buckets)
            if slot + width > len(values):
                continue
            _add(out, name, tuple((k, v) for k, v in labels), values[slot : slot + width])
    return out


def fold_exited(path: str, pid: int) -> None:
    """Process ``pid`` exited: its series are added into the directory's ``EXITED`` file
    (written to a temporary name, then renamed over it), then its own files are removed.
    A directory holds the live processes' files and one file for every process that
    exited, however many restarts it has seen; the sums a scrape reads do not change."""
    pattern = os.path.join(glob.escape(path), f"{FILE_PREFIX}{pid}_*.index")
    bases = [i.removesuffix(".index") for i in glob.glob(pattern)]
    if not bases:
        return
    out, before = _load_exited(path)
    for name, series in read_dir(path, pid).items():
        for key, values in series.items():
            _add(out, name, key, values)
    # (files folded before that a removal left behind stay named: counted once, from here)
    kept = [b for b in before if os.path.exists(os.path.join(path, b + ".index"))]
    doc = {
        "files": [*kept, *(os.path.basename(b) for b in bases)],
        "series": [[name, key, values] for name, series in out.items() for key, values in series.items()],
    }
    tmp = os.path.join(path, f".{EXITED}.{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(orjson.dumps(doc))
    os.replace(tmp, os.path.join(path, EXITED))
    for base in bases:  # (the index first: a scrape that still lists it reads again)
        for suffix in (".index", ".values"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(base + suffix)


class _Files:
    """This Metrics' values file and its index, made at the first series."""

    __slots__ = ("path", "_values", "_index", "_chunks", "_used")

    def __init__(self, path: str) -> None:
        self.path = path
        self._values = self._index = -1
        self._chunks: list[memoryview[float]] = []
        self._used = _CHUNK

    def new(self, name: str, key: Key, width: int) -> Values:
        """``width`` zeroed slots for a series, named in the index before any update."""
        if self._values < 0:
            base = os.path.join(self.path, f"{FILE_PREFIX}{os.getpid()}_{secrets.token_hex(4)}")
            flags = os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
            self._values = os.open(base + ".values", flags | os.O_RDWR, 0o600)
            self._index = os.open(base + ".index", flags | os.O_WRONLY | os.O_APPEND, 0o600)
        if self._used + width > _CHUNK:
            n = len(self._chunks)
            # the blocks allocated now: a full disk fails here, not as SIGBUS at a store
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(self._values, n * _CHUNK * 8, _CHUNK * 8)
            else:
                os.ftruncate(self._values, (n + 1) * _CHUNK * 8)
            self._chunks.append(memoryview(mmap.mmap(self._values, _CHUNK * 8, offset=n * _CHUNK * 8)).cast("d"))
            self._used = 0
        at = self._used
        self._used += width
        slot = (len(self._chunks) - 1) * _CHUNK + at
        os.write(self._index, orjson.dumps([slot, name, key]) + b"\n")
        return self._chunks[-1][at : at + width]


class _Own(Collector):
    """The counters, summaries and histograms of one Metrics, at scrape time."""

    def __init__(self, m: Metrics) -> None:
        self.m = m

    def collect(self) -> Iterator[Metric]:
        return self.m._families(None)


class _Dir(Collector):
    """The counters, summaries and histograms of every process of a multiprocess directory."""

    def __init__(self, path: str) -> None:
        self.path = path

    def collect(self) -> Iterator[Metric]:
        return _families(read_dir(self.path))


class Metrics:
    """The metrics of one app instance (see the module docstring)."""

    __slots__ = (
        "labels",
        "registry",
        "_export",
        "_gauges",
        "_series",
        "_keys",
        "_answers",
        "_turns",
        "_files",
        "_lock",
    )

    def __init__(
        self,
        providers: Iterable[str] = (),
        codes: Iterable[str] = (),
        models: Iterable[str] = (),
        *,
        public_models: Iterable[str] = (),
        keys: Iterable[str] = (),
    ) -> None:
        """``providers``: the configured provider names; ``codes``: the error codes the proxy
        knows; ``models``: the configured upstream model names (breaker gauges);
        ``public_models``: the model names clients may send (``models[].name``, globs left
        out: their names are the clients'); ``keys``: the client keys' configured names."""
        providers = frozenset(providers)
        codes = frozenset(codes)
        # the closed sets, completed with the configured names and the error codes the proxy
        # knows (its own and the well-known OpenAI ones)
        self.labels = {
            **LABELS,
            "provider": LABELS["provider"] | providers,
            "code": LABELS["code"] | codes,
            "model": LABELS["model"] | frozenset(models),
            "gen_ai_provider_name": LABELS["gen_ai_provider_name"] | providers,
            "gen_ai_request_model": LABELS["gen_ai_request_model"] | frozenset(public_models),
            "key_name": LABELS["key_name"] | frozenset(keys),
            "error_type": LABELS["error_type"] | codes,
        }
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Own(self))
        self._export: CollectorRegistry | None = None  # what a scrape reads (render)
        self._gauges: dict[str, Gauge] = {}  # name → prometheus_client gauge, made at first use
        # name → label set → its values (a gauge's: its prometheus_client child)
        self._series: dict[str, dict[Key, Values]] = {}
        # the series key of each label set already seen, as the call site passed it (a call
        # site passes its labels in one order): one lookup instead of a sort and a set test
        # per label on every request; bounded, as the series are
        self._keys: dict[Key, Key] = {}
        # answered(): the series each (route, client, provider, status, outcome) adds to
        self._answers: dict[tuple[str, str, str, int, str | None], tuple[Values, Values, Values, Values]] = {}
        # turn(): the series of each (operation, provider, model, key, error, estimated),
        # filled as they are first used (a label set never used is never exported)
        self._turns: dict[tuple[str, str, str, str, str, bool], list[Values]] = {}
        self._files = _Files(MULTIPROC_DIR) if MULTIPROC_DIR is not None else None
        # updates are made under it (a read-add-write of a value is not atomic between threads)
        self._lock = threading.RLock()

    # -- label sets and series ------------------------------------------------------------

    def _clean(self, labels: dict[str, str]) -> Key:
        sets = self.labels
        out = []
        for k, v in sorted(labels.items()):
            allowed = sets.get(k)
            out.append((k, v if allowed is not None and v in allowed else OTHER))
        return tuple(out)

    def _key(self, labels: dict[str, str]) -> Key:
        """``_clean(labels)``, remembered for the label set as the call site passed it."""
        given = tuple(labels.items())
        key = self._keys.get(given)
        if key is None:
            key = self._clean(labels)
            if len(self._keys) < _KEY_MEMO:
                self._keys[given] = key
        return key

    def _new(self, name: str, key: Key) -> Values:
        kind, doc, buckets = _shape(name)
        if kind == "gauge":
            g = self._gauges.get(name)
            if g is None:
                names = [k for k, _ in key]
                g = self._gauges[name] = Gauge(name, doc, names, registry=self.registry, multiprocess_mode="livemax")
            # (a metric without labels is its own series: prometheus_client refuses .labels())
            return g.labels(*[v for _, v in key]) if key else g
        width = _width(kind, buckets)
        return [0.0] * width if self._files is None else self._files.new(name, key, width)

    def _child(self, name: str, key: Key) -> Values:
        """Metric ``name``'s series for ``key``: the all-"other" one once the metric holds
        MAX_SERIES label sets and ``key`` is not among them."""
        series = self._series.get(name)
        if series is None:
            series = self._series[name] = {}
        child = series.get(key)
        if child is None:
            if len(series) >= MAX_SERIES:
                key = tuple((k, OTHER) for k, _ in key)
                child = series.get(key)
            if child is None:
                with self._lock:
                    child = series.get(key)
                    if child is None:
                        child = series[key] = self._new(name, key)
        return child

    # -- updates --------------------------------------------------------------------------

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        v = self._child(name, self._key(labels))
        with self._lock:
            v[0] += value

    def set_gauge(self, name: str, value: float, **labels: str) -> None:
        key = self._key(labels)
        series = self._series.get(name)
        if series is None or key in series or len(series) < MAX_SERIES:
            self._child(name, key).set(value)

    def answered(
        self,
        route: str,
        client: str,
        provider: str,
        status: int,
        duration: float,
        ttfb: float | None,
        outcome: str | None,
    ) -> None:
        """One proxied answer's ``switchboard_*`` series: ``switchboard_requests_total``, the
        duration and time-to-first-byte summaries, and a stream's outcome (``outcome`` None:
        not a stream), with the series found once per combination."""
        at = (route, client, provider, status, outcome)
        series = self._answers.get(at)
        if series is None:
            series = self._answer_series(at)
        requests, dur, first, out = series
        with self._lock:
            requests[0] += 1.0
            dur[0] += 1.0
            dur[1] += duration
            if ttfb is not None:
                first[0] += 1.0
                first[1] += ttfb
            if out is not None:
                out[0] += 1.0

    def _answer_series(self, at: tuple[str, str, str, int, str | None]) -> tuple[Values, Values, Values, Values]:
        route, client, provider, status, outcome = at
        req = {"route": route, "client": client, "provider": provider, "status": str(status)}
        out = (
            self._child("switchboard_requests_total", self._clean(req)),
            self._child("switchboard_request_duration_seconds", self._clean({"route": route})),
            self._child("switchboard_ttfb_seconds", self._clean({"route": route})),
            None
            if outcome is None
            else self._child("switchboard_stream_outcomes_total", self._clean({"outcome": outcome, "client": client})),
        )
        if len(self._answers) < _KEY_MEMO:
            self._answers[at] = out
        return out

    def turn(
        self,
        operation: str,
        provider: str,
        model: str,
        key: str,
        error: str,
        duration: float,
        ttft: float | None,
        tokens: tuple[int | None, ...] | None,
        estimated: bool,
    ) -> None:
        """One model request's GenAI series.

        ``error``: what it failed with ("" when it did not); ``ttft``: seconds to the first
        output token sent (a stream's; None otherwise); ``tokens``: (input, output,
        cache_read, cache_write, reasoning), each None when unknown, or None; ``estimated``:
        the counts are the proxy's estimate, not the upstream's.  The duration is always
        recorded; the time to first token and per output token for answers that did not
        fail (the latter from the upstream's own output count); input and output tokens
        when known, the other types when not zero.

        A histogram observation is a bucket count (``bisect_left``: the first bound the
        value is not above, as prometheus_client's ``le``) and the sum."""
        at = (operation, provider, model, key, error, estimated)
        slots = self._turns.get(at)
        if slots is None:
            slots = self._turn_slots(at)
        with self._lock:
            s = slots[_DURATION]
            if s is None:
                s = self._turn_child(at, slots, _DURATION)
            s[bisect_left(DURATION_BUCKETS, duration)] += 1.0
            s[-1] += duration
            if ttft is not None and not error:
                s = slots[_TTFT]
                if s is None:
                    s = self._turn_child(at, slots, _TTFT)
                s[bisect_left(DURATION_BUCKETS, ttft)] += 1.0
                s[-1] += ttft
                out = tokens[1] if tokens is not None and not estimated else None
                if out is not None and out > 1 and duration > ttft:
                    s = slots[_TPOT]
                    if s is None:
                        s = self._turn_child(at, slots, _TPOT)
                    per = (duration - ttft) / (out - 1)
                    s[bisect_left(TPOT_BUCKETS, per)] += 1.0
                    s[-1] += per
            if tokens is not None:
                i = _TOKENS
                for n in tokens:
                    if n is not None and (n or i < _TOKENS + 2):
                        s = slots[i]
                        if s is None:
                            s = self._turn_child(at, slots, i)
                        s[bisect_left(TOKEN_BUCKETS, n)] += 1.0
                        s[-1] += n
                    i += 1

    def _turn_slots(self, at: tuple[str, str, str, str, str, bool]) -> list[Values]:
        slots: list[Values] = [None] * (_TOKENS + len(TOKEN_TYPES))
        if len(self._turns) < _KEY_MEMO:
            self._turns[at] = slots
        return slots

    def _turn_child(self, at: tuple[str, str, str, str, str, bool], slots: list[Values], i: int) -> Values:
        operation, provider, model, key, error, estimated = at
        labels = {
            "gen_ai_operation_name": operation,
            "gen_ai_provider_name": provider,
            "gen_ai_request_model": model,
            "key_name": key,
        }
        if i == _DURATION:
            name = "gen_ai_server_request_duration_seconds"
            labels["error_type"] = error
        elif i == _TTFT:
            name = "gen_ai_server_time_to_first_token_seconds"
        elif i == _TPOT:
            name = "gen_ai_server_time_per_output_token_seconds"
        else:
            name = "gen_ai_client_token_usage"
            labels["gen_ai_token_type"] = TOKEN_TYPES[i - _TOKENS]
            labels["gen_ai_token_estimated"] = "true" if estimated else "false"
        child = slots[i] = self._child(name, self._clean(labels))
        return child

    # -- reading --------------------------------------------------------------------------

    def _families(self, names: Iterable[str] | None) -> Iterator[Metric]:
        """This process's metric families named ``names`` (None: every one but the gauges)."""
        with self._lock:  # a copy: the values go on changing, the series may grow
            chosen = self._series if names is None else {n: self._series[n] for n in names if n in self._series}
            data = {n: {k: list(v) for k, v in s.items()} for n, s in chosen.items() if n not in self._gauges}
        yield from _families(data)
        if names is not None:
            for name in names:
                gauge = self._gauges.get(name)
                if gauge is not None:
                    yield from gauge.collect()

    def get(self, name: str, **labels: str) -> float:
        """The value of a sample of this process's series (0 when there is none): a counter
        or gauge by its name, a histogram's or summary's by ``<name>_sum``, ``_count`` or
        ``_bucket`` (with ``le``)."""
        le = labels.pop("le", None)
        want = dict(self._clean(labels))
        if le is not None:
            want["le"] = le
        for base in (name, *(name.removesuffix(s) for s in ("_sum", "_count", "_bucket"))):
            if base in self._series:
                break
        else:
            return 0.0
        for family in self._families([base]):
            for sample in family.samples:
                if sample.name == name and sample.labels == want:
                    return float(sample.value)
        return 0.0

    def samples(self, names: Iterable[str]) -> Iterable[Any]:
        """The samples of this process's metrics named ``names`` (those made so far)."""
        for family in self._families(names):
            yield from family.samples

    def add_keys(self, names: Iterable[str]) -> None:
        """Client key names made at run time (app/keys.py) join the ``key_name`` set (at most
        ``MAX_SERIES`` names: past that they stay ``other``)."""
        known = self.labels["key_name"]
        fresh = frozenset(names) - known
        if fresh and len(known) + len(fresh) <= MAX_SERIES:
            self.labels["key_name"] = known | fresh
            self._keys.clear()  # (a remembered label set may have said "other")
            self._turns.clear()

    def series_count(self) -> int:
        """Label sets over every metric (a histogram's label set is one, whatever its buckets)."""
        return sum(len(s) for s in self._series.values())

    def render(self) -> bytes:
        """The exposition: this app's metrics, or in multiprocess mode every process's
        (prometheus_client's files for the gauges, ours for the rest)."""
        if self._export is None:
            self._export = self.registry
            if MULTIPROC_DIR is not None:
                self._export = CollectorRegistry(auto_describe=False)
                MultiProcessCollector(self._export, MULTIPROC_DIR)
                self._export.register(_Dir(MULTIPROC_DIR))
        return generate_latest(self._export)


def route_label(path: str) -> str:
    """The route template of a path (a metric label: never the raw path)."""
    if path in ROUTES:
        return path
    if path.startswith("/v1beta/models/"):
        _, sep, method = path.rpartition(":")
        if not sep:
            return "/v1beta/models/{model}"
        return "/v1beta/models/{model}:" + method if method in GEMINI_METHODS else OTHER
    return "/v1/models/{model}" if path.startswith("/v1/models/") else OTHER


def log_rejected(counters: Metrics, path: str, status: int, code: str | None, rid: str) -> None:
    """A request refused before any upstream call: counted and logged as the request's line."""
    route = route_label(path)
    counters.inc("switchboard_requests_total", route=route, client="-", provider="-", status=str(status))
    log.info("request", request_id=rid, route=route, path=path[:200], status=status, code=code, terminal="rejected")
