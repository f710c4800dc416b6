"""The configuration schema: the validated, immutable settings of the proxy.

These pydantic types are the YAML contract with users (docs/configuration.md): ``server``,
``auth``, ``providers`` and ``models``.  They live with the providers because the provider
layer is what consumes them (profiles, routing, the upstream client); reading the file,
``${VAR}`` expansion and error reporting stay in ``app.config`` (the loader), which
re-exports these names.  Validation happens once at start-up, never on the hot path.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

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
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerCfg(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    workers: int = Field(default=1, ge=1, le=64)
    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    # finish_reason "length" → response.completed with status incomplete (instead of
    # response.incomplete), for Responses clients that want the partial output as a turn
    incomplete_as_completed: bool = False
    # seconds of upstream silence mid-stream before the client gets a heartbeat (0 = never):
    # a response.in_progress event for Responses clients, an SSE comment for Chat clients
    keepalive_seconds: float = Field(default=15.0, ge=0)
    # HMAC key for the sealed reasoning envelope (docs/quirks.md); empty = summary only
    reasoning_envelope_key: str = ""
    # browser origins allowed to call the proxy (exact "scheme://host[:port]", or "*");
    # a request carrying any other Origin header is refused (docs/operations.md, Security)
    allowed_origins: list[str] = Field(default_factory=list)
    # Host names (or "*") served besides the loopback ones when no client key is configured
    allowed_hosts: list[str] = Field(default_factory=list)


class AuthCfg(_Strict):
    # client keys, plain or "sha256:<hex>"; empty strings (unset env defaults) are ignored
    keys: list[str] = Field(default_factory=list)

    @field_validator("keys")
    @classmethod
    def _drop_empty(cls, v: list[str]) -> list[str]:
        keys = [k for k in v if k]
        for i, k in enumerate(keys):
            if k.startswith("sha256:") and not re.fullmatch(r"[0-9a-fA-F]{64}", k[7:]):
                raise ValueError(
                    f"keys[{i}]: a 'sha256:' key must be followed by 64 hex digits (the SHA-256 of the key)"
                )
        return keys


class TimeoutsCfg(_Strict):
    connect: float = Field(default=10.0, gt=0)
    # time to the upstream's response headers
    first_byte: float = Field(default=120.0, gt=0)
    # longest silence between two upstream bytes once streaming (resets on any byte)
    idle: float = Field(default=300.0, gt=0)
    write: float = Field(default=30.0, gt=0)


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


class ProviderCfg(_Strict):
    name: str = Field(min_length=1)
    profile: Literal[PROFILES] = "openai-compatible"  # type: ignore[valid-type]
    protocol: Literal["chat", "responses"] | list[Literal["chat", "responses"]] = "chat"
    base_url: str | None = None
    api_key: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    query: dict[str, str] = Field(default_factory=dict)
    # Azure: deployment-name URLs /openai/deployments/{deployment}/…
    deployment: str | None = None
    timeouts: TimeoutsCfg = Field(default_factory=TimeoutsCfg)
    quirks: list[QuirksCfg] | QuirksCfg = Field(default_factory=list)

    @model_validator(mode="after")
    def _url(self) -> ProviderCfg:
        if self.profile != "demo":
            if not self.base_url:
                raise ValueError(f"provider {self.name!r}: base_url is required for profile {self.profile!r}")
            if not re.match(r"^https?://", self.base_url):
                raise ValueError(f"provider {self.name!r}: base_url must start with http:// or https://")
        return self

    @property
    def protocols(self) -> tuple[str, ...]:
        return (self.protocol,) if isinstance(self.protocol, str) else tuple(self.protocol)

    @property
    def quirk_overrides(self) -> list[QuirksCfg]:
        return [self.quirks] if isinstance(self.quirks, QuirksCfg) else list(self.quirks)


class ModelCfg(_Strict):
    name: str = Field(min_length=1)
    provider: str
    upstream_model: str | None = None
    quirks: QuirksCfg = Field(default_factory=QuirksCfg)
    context_window: int | None = Field(default=None, gt=0)
    max_output_tokens: int | None = Field(default=None, gt=0)
    reasoning: bool | None = None
    parallel_tool_calls: bool | None = None
    modalities: list[str] | None = None


_CREDENTIAL = re.compile(r"authorization|key|token|secret|password|cookie|signature|sig$", re.I)


class Config(_Strict):
    server: ServerCfg = Field(default_factory=ServerCfg)
    auth: AuthCfg = Field(default_factory=AuthCfg)
    providers: list[ProviderCfg]
    models: list[ModelCfg]
    # values that ``${VAR}`` put into this config (set by app.config.parse_config)
    _env_values: tuple[str, ...] = PrivateAttr(default=())

    def secrets(self) -> SecretMask:
        """Every secret this configuration holds, as one mask for outgoing text: provider
        keys, credential headers and query parameters, user:password in base URLs, values
        read from the environment, the envelope key and plain client keys."""
        found: list[str] = [*self._env_values, self.server.reasoning_envelope_key]
        found += [k for k in self.auth.keys if not k.startswith("sha256:")]
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
            if m.provider not in names:
                raise ValueError(f"models[{i}] ({m.name!r}): unknown provider {m.provider!r}; known: {names}")
        return self
