"""Provider profiles: what each named upstream needs, as data.

A profile says how to authenticate, how to build URLs, which protocols the upstream
speaks, and which quirks (transformers/context.py) are on by default.  Three more sources
switch quirks on or off, all data:

* the provider's base URL: ``url_quirks`` rows match the host (the Kimi profile serves
  both Moonshot's own API and self-hosted vLLM/SGLang; only Moonshot gets the
  Moonshot-only fields and its schema dialect);
* the model id, whatever the provider (``MODEL_QUIRKS``; docs/rules.md §4: MiMo 2.6 is keyed on
  the model id whatever the base URL, a self-hosted model does not identify itself by URL);
* config overrides, per provider and per model, each optionally limited to model globs
  (``quirks: {enable: [...], disable: [...], models: ["mimo-v2.6-*"]}``).

Resolution order (later wins): profile defaults → URL rows → model-id rows → provider
overrides (in order) → the model entry's override.  docs/quirks.md holds the reason and
the evidence for every quirk; docs/providers.md one section per profile.

Profiles (``quirks`` = on by default):

=================  ==========  =================  =============================================
profile            auth        protocols          quirks
=================  ==========  =================  =============================================
openai             Bearer      chat, responses    strip_reasoning_envelope, max_completion_tokens,
                                                  encrypted_content_retry, native_compaction,
                                                  responses_native,
                                                  schema_no_root_combinators, schema_strict_mode,
                                                  prompt_cache_key
azure              api-key     chat, responses    as openai; deployment URLs + api-version
xai                Bearer      chat, responses    strip_reasoning_envelope
bedrock-mantle     Bearer      responses          mantle_request, strip_reasoning_envelope
kimi               Bearer      chat               reasoning_replay, kimi_request,
                                                  max_completion_tokens, developer_to_system,
                                                  kimi_tool_ids;
                                                  Moonshot hosts: + moonshot_fields,
                                                  schema_strict_subset
mimo               Bearer      chat               mimo_raw_patch, invalid_json_passthrough,
                                                  mimo_request, reasoning_replay,
                                                  thinking_param, developer_to_system
deepseek           Bearer      chat               reasoning_replay, developer_to_system
glm                Bearer      chat               reasoning_replay, thinking_param,
                                                  developer_to_system
openai-compatible  Bearer      chat, responses,   strip_reasoning_envelope (only: nothing else is
                               messages           assumed, quirks opt-in); Google's hosts
                                                  (``GEMINI_HOSTS``): + gemini_thought_signatures,
                                                  gemini_request
gemini             Bearer      chat               gemini_thought_signatures, gemini_request,
                                                  developer_to_system
demo               none        chat               (in-process)
=================  ==========  =================  =============================================

URLs: ``{base_url}/chat/completions`` and ``{base_url}/responses``; with ``deployment``
(Azure deployment-name routes) ``{base_url}/openai/deployments/{deployment}/chat/completions``
and ``{base_url}/openai/responses`` (Azure's Responses route is not per deployment; the
deployment name goes in ``model``), ``base_url`` being the resource endpoint (a trailing
``/openai`` is tolerated).  A profile's ``deployment_query`` (Azure: ``api-version``) is
merged into the provider's query for a deployment route unless ``query`` sets that key
(``upstream_query``; the query travels as httpx ``params``, which REPLACE a URL's own
query, so it is never baked into the URL).  The Azure v1 route needs none of this:
``base_url: https://<resource>.openai.azure.com/openai/v1``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from urllib.parse import urlsplit

from transformers.protocols import SPECS

__all__ = [
    "GEMINI_HOSTS",
    "MODEL_QUIRKS",
    "MOONSHOT_HOSTS",
    "PROFILES",
    "Override",
    "Profile",
    "QuirkSet",
    "auth_headers",
    "upstream_query",
    "upstream_url",
]

# Moonshot's own endpoints (international, China, Kimi Code): the only upstreams that
# accept the Moonshot-only fields and validate tool schemas as "moonshot flavored"
MOONSHOT_HOSTS = ("api.moonshot.ai", "api.moonshot.cn", "api.kimi.com")
_MOONSHOT = frozenset({"moonshot_fields", "schema_strict_subset"})
# every profile that can speak Responses: no upstream but a Switchboard opens the proxy's
# sealed reasoning envelope (tests/unit/test_profiles.py holds every such profile to it)
_RESPONSES = frozenset({"strip_reasoning_envelope"})
_OPENAI = _RESPONSES | frozenset(
    {
        "native_compaction",
        "responses_native",
        "max_completion_tokens",
        "encrypted_content_retry",
        "schema_no_root_combinators",
        "schema_strict_mode",
        "prompt_cache_key",
    }
)
# Gemini's OpenAI-compatible endpoint: thought signatures carried, the fields it refuses dropped
_GEMINI = frozenset({"gemini_thought_signatures", "gemini_request"})
GEMINI_HOSTS = ("generativelanguage.googleapis.com", "*aiplatform.googleapis.com")
# Anthropic itself: it caches at breakpoints, reads cache_control.ttl and Claude Code's billing line
_ANTHROPIC_CACHE = frozenset({"cache_breakpoints", "cache_ttl", "billing_header"})
AZURE_API_VERSION = "2025-04-01-preview"  # serves both chat completions and responses


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    auth: str = "bearer"  # bearer | api-key | none
    quirks: frozenset[str] = frozenset()
    protocols: tuple[str, ...] = ("chat", "responses")
    # (host glob, quirks switched on when the base URL's host matches)
    url_quirks: tuple[tuple[str, frozenset[str]], ...] = ()
    # query parameters added to deployment-name URLs unless the provider's query has them
    deployment_query: tuple[tuple[str, str], ...] = ()


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("openai", quirks=_OPENAI),
        Profile("azure", auth="api-key", quirks=_OPENAI, deployment_query=(("api-version", AZURE_API_VERSION),)),
        Profile("xai", quirks=_RESPONSES),
        Profile(
            "bedrock-mantle",
            quirks=_RESPONSES | {"mantle_request"},
            protocols=("responses",),
        ),
        Profile(
            "kimi",
            quirks=frozenset(
                {"reasoning_replay", "kimi_request", "max_completion_tokens", "developer_to_system", "kimi_tool_ids"}
            ),
            protocols=("chat", "messages"),
            url_quirks=tuple((h, _MOONSHOT) for h in MOONSHOT_HOSTS),
        ),
        Profile(
            "mimo",
            quirks=frozenset(
                {
                    "mimo_raw_patch",
                    "invalid_json_passthrough",
                    "mimo_request",
                    "reasoning_replay",
                    "thinking_param",
                    "developer_to_system",
                }
            ),
            protocols=("chat", "messages"),
        ),
        Profile(
            "deepseek",
            quirks=frozenset({"reasoning_replay", "developer_to_system"}),
            protocols=("chat", "messages"),
        ),
        Profile(
            "glm",
            quirks=frozenset({"reasoning_replay", "thinking_param", "developer_to_system"}),
            protocols=("chat", "messages"),
        ),
        # (vLLM, SGLang and LiteLLM serve Anthropic's /v1/messages too); Google's own hosts are
        # Gemini's OpenAI-compatible endpoint whatever the profile says
        Profile(
            "openai-compatible",
            quirks=_RESPONSES,
            protocols=("chat", "responses", "messages"),
            url_quirks=tuple((h, _GEMINI) for h in GEMINI_HOSTS),
        ),
        # Gemini: its OpenAI-compatible endpoint (chat: AI Studio, or Vertex AI's openapi
        # route), or its own API (gemini: /models/{model}:generateContent and its stream)
        Profile("gemini", quirks=_GEMINI | {"developer_to_system"}, protocols=("chat", "gemini")),
        Profile("demo", auth="none", protocols=("chat",)),
        # Anthropic itself: Messages only; signatures checked, server tools run, betas honoured
        Profile(
            "anthropic",
            auth="x-api-key",
            quirks=frozenset({"anthropic_signatures", "anthropic_tool_ids", "messages_server_tools", "anthropic_beta"})
            | _ANTHROPIC_CACHE,
            protocols=("messages",),
        ),
        # MiniMax documents Anthropic's cache breakpoints for its Messages endpoint
        Profile("minimax", quirks=frozenset({"cache_breakpoints"}), protocols=("messages", "chat")),
        # Alibaba Model Studio's Anthropic endpoint: explicit cache at Anthropic's breakpoints
        Profile("qwen", quirks=frozenset({"cache_breakpoints"}), protocols=("chat", "messages")),
    )
}

# Quirks keyed on the model id, whatever the provider or base URL (docs/rules.md §4).
# Matched (case-insensitively) against the upstream model name.
_MIMO = frozenset({"mimo_raw_patch", "invalid_json_passthrough", "mimo_request", "reasoning_replay"})
MODEL_QUIRKS: tuple[tuple[str, frozenset[str]], ...] = (
    ("mimo-v2.6*", _MIMO),
    ("*mimo-v2.6*", _MIMO),  # behind a gateway: "xiaomi/mimo-v2.6-pro", "opencode-go/mimo-v2.6-flash"
    ("kimi-k2*", frozenset({"reasoning_replay", "kimi_tool_ids"})),
    ("*/kimi-k2*", frozenset({"reasoning_replay", "kimi_tool_ids"})),
    ("deepseek-*", frozenset({"reasoning_replay"})),
)


def _host(base_url: str) -> str:
    try:
        return (urlsplit(base_url).hostname or "").lower()
    except ValueError:
        return ""


@dataclass(frozen=True, slots=True)
class Override:
    enable: frozenset[str] = frozenset()
    disable: frozenset[str] = frozenset()
    models: tuple[str, ...] = ()

    def applies(self, *names: str) -> bool:
        return not self.models or any(fnmatchcase(n.lower(), g.lower()) for g in self.models for n in names)


@dataclass(frozen=True, slots=True)
class QuirkSet:
    """Resolution order: profile defaults, base-URL rows, model-id patterns, provider
    overrides, model overrides."""

    profile: str
    overrides: tuple[Override, ...] = field(default=())
    base_url: str = ""

    def resolve(self, upstream_model: str, public_model: str, model_override: Override | None = None) -> frozenset[str]:
        prof = PROFILES[self.profile]
        q = set(prof.quirks)
        if prof.url_quirks:
            host = _host(self.base_url)
            for glob, quirks in prof.url_quirks:
                if fnmatchcase(host, glob):
                    q |= quirks
        low = upstream_model.lower()
        for glob, quirks in MODEL_QUIRKS:
            if fnmatchcase(low, glob):
                q |= quirks
        for o in (*self.overrides, *((model_override,) if model_override else ())):
            if o.applies(upstream_model, public_model):
                q |= o.enable
                q -= o.disable
        return frozenset(q)


def auth_headers(profile: str, api_key: str | None, protocol: str = "chat") -> dict[str, str]:
    """The headers that carry the provider's key (never the client's): the protocol row's
    ``fixed_headers``, and the key in its ``key_header`` (Anthropic's ``x-api-key``, which
    every Anthropic-compatible endpoint takes; Gemini's ``x-goog-api-key``), else in the
    profile's scheme.  A profile with ``auth: none`` sends no key."""
    spec = SPECS[protocol]
    out = dict(spec.fixed_headers)
    auth = PROFILES[profile].auth
    if not api_key or auth == "none":
        return out
    if spec.key_header:
        out[spec.key_header] = api_key
    elif auth == "x-api-key":
        out["x-api-key"] = api_key
    elif auth == "api-key":
        out["api-key"] = api_key
    elif auth == "bearer":
        out["authorization"] = f"Bearer {api_key}"
    return out


def upstream_url(
    profile: str,
    base_url: str | None,
    protocol: str,
    deployment: str | None = None,
    model: str = "",
    stream: bool = False,
) -> str:
    """The URL the proxy POSTs to, without query (see ``upstream_query``): the base URL and
    the protocol row's ``path`` (its ``api_prefix`` added when the base URL lacks it; a
    ``{model}`` and a ``{method}`` hole filled: Gemini's ``…/models/{model}:generateContent``,
    ``:streamGenerateContent``), or its ``deployment_path`` on a deployment-name URL."""
    spec = SPECS[protocol]
    base = (base_url or "http://demo.invalid/v1").rstrip("/")
    if spec.api_prefix and not base.endswith(spec.api_prefix):
        # an Anthropic base URL as Claude Code's ANTHROPIC_BASE_URL takes it (the host, or
        # Kimi's ``…/anthropic``): the API's ``/v1`` is added
        base += spec.api_prefix
    if deployment and spec.deployment_path:
        if base.endswith("/openai"):
            base = base[: -len("/openai")]
        return base + spec.deployment_path.format(deployment=deployment)
    return base + spec.path.format(model=model, method=spec.methods[stream])


def upstream_query(profile: str, deployment: str | None, query: dict[str, str]) -> dict[str, str]:
    """The provider's query plus the profile's defaults for a deployment route (Azure's
    ``api-version``); the provider's own values win."""
    if not deployment or not PROFILES[profile].deployment_query:
        return query
    given = {k.lower() for k in query}
    extra = {k: v for k, v in PROFILES[profile].deployment_query if k.lower() not in given}
    return {**extra, **query} if extra else query
