"""The configuration schema: the validated, immutable settings of the proxy.

These pydantic types are the YAML contract with users (docs/configuration.md): ``server``,
``auth``, ``providers`` and ``models``.  They live with the providers because the provider
layer is what consumes them (profiles, routing, the upstream client); reading the file,
``${VAR}`` expansion and error reporting stay in ``app.config`` (the loader), which
re-exports these names.  Validation happens once at start-up, never on the hot path.
"""

from __future__ import annotations

import hashlib
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from providers.profiles import PROFILES as PROFILE_TABLE
from transformers.context import QUIRKS
from transformers.masking import SecretMask

PROFILES = (
    "openai",
    "azure",
    "xai",
    "bedrock-mantle",
    "kimi",
    "mimo",
    "deepseek",
    "glm",
    "openai-compatible",
    "demo",
    "anthropic",
    "minimax",
    "qwen",
    "gemini",
)
# profiles whose Responses endpoint keeps responses (previous_response_id works upstream)
STORING_PROFILES = frozenset({"openai", "azure", "xai"})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WebSocketCfg(_Strict):
    """The Responses WebSocket transport on GET /v1/responses (docs/clients.md)."""

    # serve it; false answers the upgrade 426 (clients fall back to HTTP)
    enabled: bool = True
    # open sockets per process; the next upgrade is answered 426 (clients fall back to HTTP)
    max_connections: int = Field(default=512, ge=1)
    # bytes of one socket's transcript (its last full input + output); above it the
    # transcript is dropped and the next continuation gets previous_response_not_found
    max_transcript_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    # a socket with no frame for this long is closed (the client reconnects)
    idle_timeout_seconds: float = Field(default=900.0, gt=0)
    # creates a client may send ahead of the answers in flight (waiting on their lanes), and
    # frames read but not yet taken; past them the socket is not read until one is taken (a
    # client that pipelines frames cannot grow the queues)
    max_pipelined_frames: int = Field(default=8, ge=1)
    # named lanes (stream_id) one socket may use; the next one is answered
    # websocket_stream_limit_reached
    max_lanes: int = Field(default=32, ge=1)
    # responses one socket runs at the same time (on different lanes); more wait their turn
    max_active_responses: int = Field(default=16, ge=1)
    # steering submissions accepted per running response; more get too_many_pending_steers
    max_steers_per_response: int = Field(default=8, ge=1)
    # a socket older than this gets websocket_connection_limit_reached at its next request
    max_lifetime_seconds: float = Field(default=3600.0, gt=0)
    # WebSocket pings (dead peers are found and closed); 0 = never
    ping_interval_seconds: float = Field(default=20.0, ge=0)
    # permessage-deflate when the client offers it (Codex does): the instructions and tools a
    # client repeats in every frame cost almost nothing on the wire (one compression context
    # per socket), for some CPU per frame (bench/ws_turns.py measures both)
    per_message_deflate: bool = True


class RetryCfg(_Strict):
    """Retries and fallbacks before the first byte (docs/operations.md, "Resilience")."""

    # attempts per request, over all its targets (1 = no retry, no fallback)
    max_attempts: int = Field(default=3, ge=1, le=10)
    # backoff before a target is tried again: base · 2^(n-1), capped, half of it jitter
    backoff_base_seconds: float = Field(default=0.2, ge=0)
    backoff_max_seconds: float = Field(default=2.0, ge=0)
    # an upstream's retry-after is waited for up to this; longer: that target is not retried
    retry_after_max_seconds: float = Field(default=5.0, ge=0)
    # no new attempt starts later than this after the request came (the first one always runs)
    deadline_seconds: float = Field(default=30.0, gt=0)
    # per provider: retries ≤ budget_ratio × requests over budget_window_seconds, at least
    # budget_min_retries
    budget_ratio: float = Field(default=0.2, ge=0)
    budget_min_retries: int = Field(default=3, ge=0)
    budget_window_seconds: float = Field(default=10.0, gt=0)


class BreakerCfg(_Strict):
    """Circuit breakers per provider and per (provider, upstream model)."""

    enabled: bool = True
    failures: int = Field(default=5, ge=1)  # in a row
    failure_ratio: float = Field(default=0.5, gt=0, le=1)  # in the window …
    min_calls: int = Field(default=10, ge=1)  # … once it holds this many calls
    window_seconds: float = Field(default=60.0, gt=0)
    open_seconds: float = Field(default=30.0, gt=0)  # then one probe (half-open)


class DrainCfg(_Strict):
    """What `switchboard serve` does on SIGTERM (docs/operations.md, "Drain")."""

    # /readyz answers 503 draining while the listener stays open this long
    announce_seconds: float = Field(default=3.0, ge=0)
    # from the signal: streams still open then end with server_shutting_down (keep it below
    # the orchestrator's grace: Docker 10 s, Kubernetes 30 s)
    timeout_seconds: float = Field(default=8.0, gt=0)

    @model_validator(mode="after")
    def _order(self) -> DrainCfg:
        if self.announce_seconds > self.timeout_seconds:
            raise ValueError("announce_seconds must not exceed timeout_seconds")
        return self


class ServerCfg(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    workers: int = Field(default=1, ge=1, le=64)
    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    # the whole request body must arrive within this many seconds of the head (a client that
    # announces more than it sends is answered 408, not waited for)
    body_timeout_seconds: float = Field(default=60.0, gt=0)
    # finish_reason "length" → response.completed with status incomplete (instead of
    # response.incomplete), for Responses clients that want the partial output as a turn
    incomplete_as_completed: bool = False
    # seconds of upstream silence mid-stream before the client gets a heartbeat (0 = never):
    # a response.in_progress event for Responses clients, an SSE comment for Chat clients
    keepalive_seconds: float = Field(default=15.0, ge=0)
    # the server's one secret: the HMAC key of the proxy's sealed envelopes (reasoning replay
    # and synthesised compaction, transformers/envelope.py); the same on every instance.
    # Empty: reasoning rides as summary text only, compaction summaries are sealed with a
    # per-process key (docs/configuration.md)
    secret_key: str = ""
    # deprecated alias of secret_key (used when secret_key is empty)
    reasoning_envelope_key: str = ""
    # browser origins allowed to call the proxy (exact "scheme://host[:port]", or "*");
    # a request carrying any other Origin header is refused (docs/operations.md, Security)
    allowed_origins: list[str] = Field(default_factory=list)
    # Host names (or "*") served besides the loopback ones when no client key is configured
    allowed_hosts: list[str] = Field(default_factory=list)
    websocket: WebSocketCfg = Field(default_factory=WebSocketCfg)
    retries: RetryCfg = Field(default_factory=RetryCfg)
    breaker: BreakerCfg = Field(default_factory=BreakerCfg)
    drain: DrainCfg = Field(default_factory=DrainCfg)
    # the upstream client's transport: the proxy's own (providers/transport.py) or httpx's
    upstream_transport: Literal["fast", "httpx"] = "fast"

    @property
    def secret(self) -> str:
        """The effective server secret: ``secret_key``, else the deprecated alias."""
        return self.secret_key or self.reasoning_envelope_key


class LimitsCfg(_Strict):
    """What one client key may use (docs/operations.md, "Keys, limits and usage"); every
    limit is optional (absent: none).  Windows are calendar ones in UTC: the minute, the
    day, the month."""

    # the models the key may use (globs on the public model name); absent: every model
    models: list[str] | None = None
    requests_per_minute: int | None = Field(default=None, ge=1)
    # input + output tokens a minute
    tokens_per_minute: int | None = Field(default=None, ge=1)
    # answers streaming at once (an HTTP request, or a WebSocket response while it streams)
    concurrent: int | None = Field(default=None, ge=1)
    tokens_per_day: int | None = Field(default=None, ge=1)
    tokens_per_month: int | None = Field(default=None, ge=1)
    # US dollars, by the models' prices (models[].price)
    cost_per_day: float | None = Field(default=None, gt=0)
    cost_per_month: float | None = Field(default=None, gt=0)


class PriceCfg(_Strict):
    """US dollars per million tokens."""

    input: float = Field(default=0.0, ge=0)
    output: float = Field(default=0.0, ge=0)
    cache_read: float | None = Field(default=None, ge=0)  # absent: the input price
    cache_write: float | None = Field(default=None, ge=0)  # absent: the input price


class KeyCfg(_Strict):
    """A named client key: the name owns what the key stores (stored responses) and is what
    logs may say instead of the key."""

    name: str = Field(min_length=1, max_length=64)
    key: str
    # this key's limits (absent: auth.default_limits)
    limits: LimitsCfg | None = None


class AuthCfg(_Strict):
    # client keys, plain or "sha256:<hex>", or {name, key} entries (named keys); empty
    # strings and entries with an empty key (unset env defaults) are ignored
    keys: list[str | KeyCfg] = Field(default_factory=list)
    # the limits of every key without its own (absent: none)
    default_limits: LimitsCfg | None = None
    # keys of the admin endpoints (GET /v1/admin/usage), plain or "sha256:<hex>"; empty: off
    admin_keys: list[str] = Field(default_factory=list)

    @field_validator("keys")
    @classmethod
    def _drop_empty(cls, v: list[str | KeyCfg]) -> list[str | KeyCfg]:
        keys = [k for k in v if (k.key if isinstance(k, KeyCfg) else k)]
        for i, k in enumerate(keys):
            raw = k.key if isinstance(k, KeyCfg) else k
            if raw.startswith("sha256:") and not re.fullmatch(r"[0-9a-fA-F]{64}", raw[7:]):
                raise ValueError(
                    f"keys[{i}]: a 'sha256:' key must be followed by 64 hex digits (the SHA-256 of the key)"
                )
        names = [k.name for k in keys if isinstance(k, KeyCfg)]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate key name(s): {dup}")
        return keys

    @field_validator("admin_keys")
    @classmethod
    def _admin_digests(cls, v: list[str]) -> list[str]:
        # the same rule as a client key's: a malformed digest would never match any key
        for i, k in enumerate(v):
            if k.startswith("sha256:") and not re.fullmatch(r"[0-9a-fA-F]{64}", k[7:]):
                raise ValueError(
                    f"admin_keys[{i}]: a 'sha256:' key must be followed by 64 hex digits (the SHA-256 of the key)"
                )
        return v

    def named(self) -> list[tuple[str, str]]:
        """(name, key) of every key; a plain key is named after its SHA-256 (``key-<12 hex>``:
        the same on every instance, whatever the order of the list)."""
        out = []
        for k in self.keys:
            if isinstance(k, KeyCfg):
                out.append((k.name, k.key))
            else:
                digest = k[7:].lower() if k.startswith("sha256:") else hashlib.sha256(k.encode()).hexdigest()
                out.append((f"key-{digest[:12]}", k))
        return out


def cluster_seeds(url: str) -> tuple[str, list[tuple[str, int]]]:
    """A cluster's URL may name several nodes, comma-separated (``redis://:pw@a:6379,b:6379``,
    as PostgreSQL's and MongoDB's URLs do): the URL with the first, and the others' (host,
    port).  Any one that answers is enough to find the cluster."""
    m = re.match(r"^(rediss?://(?:[^@/?#]*@)?)([^/?#]*)(.*)$", url, re.S)
    if m is None or "," not in m.group(2):
        return url, []
    first, *others = m.group(2).split(",")
    seeds = []
    for hp in others:
        host, colon, port = hp.rpartition(":")
        if not colon or "]" in port:  # (no port: Redis's own)
            host, port = hp, "6379"
        if not port.isdigit() or not host:
            raise ValueError(f"store.url: {hp[:80]!r} is not host:port")
        seeds.append((host.strip("[]"), int(port)))
    return m.group(1) + first + m.group(3), seeds


class StoreCfg(_Strict):
    """The response store (``store`` and ``previous_response_id`` of the Responses API;
    docs/configuration.md)."""

    # false: nothing is stored; a request with store=true is refused (400), an absent store
    # means false
    enabled: bool = True
    backend: Literal["sqlite", "redis"] = "sqlite"
    # sqlite: the database file (created at the first stored response; WAL mode); empty =
    # $XDG_STATE_HOME/switchboard/responses.db (~/.local/state/switchboard/responses.db)
    path: str = ""
    # redis: the server, and the prefix of every key the proxy writes
    url: str = "redis://127.0.0.1:6379/0"
    key_prefix: str = "switchboard:resp:"
    # redis: ``url`` is one node of a Redis Cluster (the others are found from it)
    cluster: bool = False
    # redis cluster: how long a put waits for a failed primary's replica to take over
    failover_seconds: float = Field(default=30.0, gt=0)
    # how long a stored response lives (30 days, as OpenAI keeps them); a new turn renews
    # the whole conversation it continues
    ttl_seconds: int = Field(default=30 * 24 * 3600, ge=1)
    # a response whose compressed record is larger is answered but not stored
    max_record_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    # how long one store operation may take before the store counts as unavailable
    timeout_seconds: float = Field(default=2.0, gt=0)
    # the stored records' total size (compressed, as max_record_bytes counts them); past it
    # the records least recently written or continued are deleted first (1 GiB)
    max_bytes: int = Field(default=1024 * 1024 * 1024, ge=1024)

    @model_validator(mode="after")
    def _cluster(self) -> StoreCfg:
        if self.cluster and self.backend != "redis":
            raise ValueError("store.cluster needs store.backend: redis")
        if self.cluster:
            cluster_seeds(self.url)  # (each node named is host:port)
        db = re.match(r"^rediss?://[^/]*/+([^?#]*)", self.url)
        if self.cluster and db and db.group(1) not in ("", "0"):
            raise ValueError(f"store.url: a Redis Cluster has only database 0, not {db.group(1)[:20]!r}")
        return self


# seconds an idle upstream connection is kept by default: reqwest's default (Codex's client)
POOL_IDLE = 90.0


class TimeoutsCfg(_Strict):
    connect: float = Field(default=10.0, gt=0)
    # time to the upstream's response headers
    first_byte: float = Field(default=120.0, gt=0)
    # longest silence between two upstream bytes once streaming (resets on any byte)
    idle: float = Field(default=300.0, gt=0)
    write: float = Field(default=30.0, gt=0)
    # how long an upstream connection left idle is kept for the next request (0: never reused)
    pool_idle: float = Field(default=POOL_IDLE, ge=0)


class QuirksCfg(_Strict):
    enable: list[str] = Field(default_factory=list)
    disable: list[str] = Field(default_factory=list)
    # restrict this override to models matching one of these globs (upstream or public name)
    models: list[str] = Field(default_factory=list)

    @field_validator("enable", "disable")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        unknown = sorted(set(v) - QUIRKS)
        if unknown:
            raise ValueError(f"unknown quirk(s) {unknown}; known: {sorted(QUIRKS)}")
        return v


# an HTTP header name, and a value h11 sends: printable ASCII, SP or HTAB inside only
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE = re.compile(r"(?:[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?)?")
_SENDABLE = "the value must be printable ASCII, without spaces at either end"


class ProviderCfg(_Strict):
    name: str = Field(min_length=1)
    profile: Literal[PROFILES] = "openai-compatible"  # type: ignore[valid-type]
    # the protocol(s) the upstream speaks; None: the profile's first (providers/profiles.py:
    # chat for most, responses for bedrock-mantle, messages for anthropic and minimax; gemini,
    # Gemini's own API, on the gemini profile)
    protocol: (
        Literal["chat", "responses", "messages", "gemini"]
        | list[Literal["chat", "responses", "messages", "gemini"]]
        | None
    ) = None
    base_url: str | None = None
    api_key: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    query: dict[str, str] = Field(default_factory=dict)
    # Azure: deployment-name URLs /openai/deployments/{deployment}/…
    deployment: str | None = None
    # a Responses upstream that keeps its responses (``store``), so a conversation that stays
    # on it is continued by passing previous_response_id through; None = the profile's
    # default (openai, azure, xai); false = the proxy always sends the whole conversation
    upstream_store: bool | None = None
    timeouts: TimeoutsCfg = Field(default_factory=TimeoutsCfg)
    quirks: list[QuirksCfg] | QuirksCfg = Field(default_factory=list)

    @model_validator(mode="after")
    def _url(self) -> ProviderCfg:
        if self.profile != "demo":
            if not self.base_url:
                raise ValueError(f"provider {self.name!r}: base_url is required for profile {self.profile!r}")
            if not re.match(r"^https?://", self.base_url):
                raise ValueError(f"provider {self.name!r}: base_url must start with http:// or https://")
        # what goes into the upstream request's head must be sendable as it is: refused here,
        # not on every request (values are not echoed: they may be credentials)
        for k, v in self.headers.items():
            if not _TOKEN.fullmatch(k):
                raise ValueError(f"provider {self.name!r}: header name {k!r} is not an HTTP token")
            if not _HEADER_VALUE.fullmatch(v):
                raise ValueError(f"provider {self.name!r}: header {k!r}: {_SENDABLE}")
        if self.api_key is not None and not _HEADER_VALUE.fullmatch(self.api_key):
            raise ValueError(f"provider {self.name!r}: api_key: {_SENDABLE}")
        speaks = PROFILE_TABLE[self.profile].protocols
        wrong = [p for p in self.protocols if p not in speaks]
        if wrong or not self.protocols:
            raise ValueError(
                f"provider {self.name!r}: profile {self.profile!r} speaks {', '.join(speaks)}, not {', '.join(wrong)}"
            )
        return self

    @property
    def protocols(self) -> tuple[str, ...]:
        if self.protocol is None:  # the profile's first
            return PROFILE_TABLE[self.profile].protocols[:1]
        return (self.protocol,) if isinstance(self.protocol, str) else tuple(self.protocol)

    @property
    def stores_responses(self) -> bool:
        """The upstream keeps the responses it answers (``upstream_store``, else the profile)."""
        return self.upstream_store if self.upstream_store is not None else self.profile in STORING_PROFILES

    @property
    def quirk_overrides(self) -> list[QuirksCfg]:
        return [self.quirks] if isinstance(self.quirks, QuirksCfg) else list(self.quirks)


class TargetCfg(_Strict):
    """One place a model can be served: a provider and the model name it knows."""

    provider: str
    upstream_model: str | None = None
    # weighted targets share the load (drawn by weight); weight 0 or none: fallback only
    weight: float | None = Field(default=None, ge=0)


class CodexModelCfg(_Strict):
    """What Codex is told about a model: its entry in ``GET /v1/models?client_version=…``
    (providers/codex_models.py), and in the file ``switchboard codex-catalog`` writes
    (docs/clients.md, "Codex's model catalogue").  A key left out takes the model's facts."""

    base: str = "gpt-5.5"  # codex-catalog: the entry of Codex's own catalogue this one starts from
    # unset: code mode for the models trained for it (providers/catalog.py), else ordinary
    # top-level tools; null: ordinary tools
    tool_mode: Literal["code_mode_only"] | None = None
    use_responses_lite: bool | None = None  # code mode's additional_tools request shape
    # unset: freeform; null: no apply_patch tool
    apply_patch_tool_type: Literal["freeform"] | None = "freeform"
    context_window: int | None = Field(default=None, gt=0)  # else the model's context_window
    reasoning_levels: list[Literal["none", "minimal", "low", "medium", "high", "xhigh"]] | None = None
    default_reasoning_level: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    display_name: str | None = None
    # the instructions Codex puts first in every request (its base instructions); unset:
    # Switchboard's own (providers/codex_models.py)
    base_instructions: str | None = Field(default=None, min_length=1)


class ModelCfg(_Strict):
    name: str = Field(min_length=1)
    # one provider (the short form), or `targets`: ordered fallbacks, optionally weighted
    provider: str | None = None
    upstream_model: str | None = None
    targets: list[TargetCfg] = Field(default_factory=list)
    quirks: QuirksCfg = Field(default_factory=QuirksCfg)
    context_window: int | None = Field(default=None, gt=0)
    max_output_tokens: int | None = Field(default=None, gt=0)
    reasoning: bool | None = None
    parallel_tool_calls: bool | None = None
    modalities: list[str] | None = None
    codex: CodexModelCfg | None = None
    # what a million tokens cost (cost budgets, usage records); absent: 0
    price: PriceCfg | None = None

    @model_validator(mode="after")
    def _one_form(self) -> ModelCfg:
        if self.targets and (self.provider or self.upstream_model):
            raise ValueError(f"model {self.name!r}: give either provider/upstream_model or targets, not both")
        if not self.targets and not self.provider:
            raise ValueError(f"model {self.name!r}: provider (or targets) is required")
        return self

    def target_list(self) -> list[TargetCfg]:
        """Every target, the short form as a one-target list."""
        return self.targets or [TargetCfg(provider=self.provider or "", upstream_model=self.upstream_model)]


_CREDENTIAL = re.compile(r"authorization|key|token|secret|password|cookie|signature|sig$", re.I)


class UsageCfg(_Strict):
    """Usage records: one per request, in the store's backend (docs/operations.md)."""

    enabled: bool = True
    retention_days: int = Field(default=90, ge=1)


class TracingCfg(_Strict):
    """OpenTelemetry traces (app/tracing.py): a span per request and per upstream attempt,
    sent over OTLP/HTTP (docs/operations.md, "Traces").  Off by default."""

    enabled: bool = False
    # the collector's OTLP/HTTP traces endpoint (protobuf)
    endpoint: str = "http://127.0.0.1:4318/v1/traces"
    # sent with every export (a collector's or a vendor's auth)
    headers: dict[str, str] = Field(default_factory=dict)
    service_name: str = Field(default="switchboard", min_length=1)
    # the share of new traces kept (a client's sampled traceparent decides for its own)
    sample_ratio: float = Field(default=1.0, ge=0, le=1)
    # the request body and the answer as span events (size-bounded); off: no content at all
    capture_content: bool = False


class CaptureCfg(_Strict):
    """Capture: each matching exchange written as one JSON line (app/capture.py), for
    ``switchboard replay``.  Off by default; it holds prompts and answers (secrets masked)."""

    enabled: bool = False
    # the file (rotated: FILE.1 … FILE.<keep>); empty: $XDG_STATE_HOME/switchboard/capture.jsonl
    path: str = ""
    # public model globs and client key names to capture; empty: every one
    models: list[str] = Field(default_factory=list)
    keys: list[str] = Field(default_factory=list)
    # a file is rotated when it reaches this size; this many rotated files are kept
    max_bytes: int = Field(default=64 * 1024 * 1024, ge=4096)
    keep: int = Field(default=3, ge=0)


class Config(_Strict):
    server: ServerCfg = Field(default_factory=ServerCfg)
    auth: AuthCfg = Field(default_factory=AuthCfg)
    store: StoreCfg = Field(default_factory=StoreCfg)
    usage: UsageCfg = Field(default_factory=UsageCfg)
    capture: CaptureCfg = Field(default_factory=CaptureCfg)
    tracing: TracingCfg = Field(default_factory=TracingCfg)
    providers: list[ProviderCfg]
    models: list[ModelCfg]
    # values that ``${VAR}`` put into this config (set by app.config.parse_config)
    _env_values: tuple[str, ...] = PrivateAttr(default=())

    def secrets(self) -> SecretMask:
        """Every secret this configuration holds, as one mask for outgoing text: provider
        keys, credential headers and query parameters, user:password in base URLs, values
        read from the environment, the envelope key and plain client keys."""
        found: list[str] = [*self._env_values, self.server.secret_key, self.server.reasoning_envelope_key]
        store_auth = re.match(r"^rediss?://([^/@]+)@", self.store.url)
        if store_auth:
            found += [store_auth.group(1), *store_auth.group(1).split(":", 1)]
        found += [k for _, k in self.auth.named() if not k.startswith("sha256:")]
        found += [v for k, v in self.tracing.headers.items() if _CREDENTIAL.search(k)]  # the collector's
        for p in self.providers:
            found.append(p.api_key or "")
            found += [v for k, v in p.headers.items() if _CREDENTIAL.search(k)]
            found += [v for k, v in p.query.items() if _CREDENTIAL.search(k)]
            userinfo = re.match(r"^https?://([^/@]+)@", p.base_url or "")
            if userinfo:
                found += [userinfo.group(1), *userinfo.group(1).split(":", 1)]
        return SecretMask(found)

    @model_validator(mode="after")
    def _refs(self) -> Config:
        names = [p.name for p in self.providers]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate provider name(s): {sorted(dup)}")
        mnames = [m.name for m in self.models]
        mdup = {n for n in mnames if mnames.count(n) > 1}
        if mdup:
            raise ValueError(f"duplicate model name(s): {sorted(mdup)}")
        for i, m in enumerate(self.models):
            for t in m.target_list():
                if t.provider not in names:
                    raise ValueError(f"models[{i}] ({m.name!r}): unknown provider {t.provider!r}; known: {names}")
        return self
