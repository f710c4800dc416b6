"""Provider profiles: what each named upstream needs, as data.

A profile says how to authenticate, how to build URLs, and which quirks (transformers/
context.py) are on by default.  Model-id patterns switch quirks on whatever the provider
(self-hosted models do not identify themselves by URL: a MiMo 2.6 behind OpenCode Go still
writes raw patches).  Config can add or remove quirks per provider and per model glob.
docs/quirks.md holds the reason and the evidence for every quirk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    auth: str = "bearer"  # bearer | api-key | none
    quirks: frozenset[str] = frozenset()
    protocols: tuple[str, ...] = ("chat", "responses")


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("openai", quirks=frozenset({"strip_reasoning_envelope", "max_completion_tokens", "encrypted_content_retry"})),
        Profile(
            "azure",
            auth="api-key",
            quirks=frozenset({"strip_reasoning_envelope", "max_completion_tokens", "encrypted_content_retry"}),
        ),
        Profile("xai", quirks=frozenset({"strip_reasoning_envelope"})),
        Profile(
            "bedrock-mantle",
            quirks=frozenset({"mantle_request", "strip_reasoning_envelope"}),
            protocols=("responses",),
        ),
        Profile(
            "kimi",
            quirks=frozenset({"reasoning_replay", "kimi_request", "max_completion_tokens"}),
            protocols=("chat",),
        ),
        Profile(
            "mimo",
            quirks=frozenset(
                {"mimo_raw_patch", "invalid_json_passthrough", "mimo_request", "reasoning_replay", "thinking_param"}
            ),
            protocols=("chat",),
        ),
        Profile("deepseek", quirks=frozenset({"reasoning_replay"}), protocols=("chat",)),
        Profile("glm", quirks=frozenset({"reasoning_replay", "thinking_param"}), protocols=("chat",)),
        Profile("openai-compatible"),
        Profile("demo", auth="none", protocols=("chat",)),
    )
}

# Quirks keyed on the model id, whatever the provider (SPEC §4 R3-a condition 1: "keyed on
# the model id whatever the base URL").  Matched against the upstream model name.
MODEL_QUIRKS: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "mimo-v2.6*",
        frozenset({"mimo_raw_patch", "invalid_json_passthrough", "mimo_request", "reasoning_replay"}),
    ),
    ("*mimo-v2.6*", frozenset({"mimo_raw_patch", "invalid_json_passthrough", "mimo_request", "reasoning_replay"})),
    ("kimi-k2*", frozenset({"reasoning_replay"})),
    ("*/kimi-k2*", frozenset({"reasoning_replay"})),
    ("deepseek-*", frozenset({"reasoning_replay"})),
)


@dataclass(frozen=True, slots=True)
class Override:
    enable: frozenset[str] = frozenset()
    disable: frozenset[str] = frozenset()
    models: tuple[str, ...] = ()

    def applies(self, *names: str) -> bool:
        return not self.models or any(fnmatchcase(n.lower(), g.lower()) for g in self.models for n in names)


@dataclass(frozen=True, slots=True)
class QuirkSet:
    """Resolution order: profile defaults, model-id patterns, provider overrides, model overrides."""

    profile: str
    overrides: tuple[Override, ...] = field(default=())

    def resolve(self, upstream_model: str, public_model: str, model_override: Override | None = None) -> frozenset[str]:
        q = set(PROFILES[self.profile].quirks)
        low = upstream_model.lower()
        for glob, quirks in MODEL_QUIRKS:
            if fnmatchcase(low, glob):
                q |= quirks
        for o in (*self.overrides, *((model_override,) if model_override else ())):
            if o.applies(upstream_model, public_model):
                q |= o.enable
                q -= o.disable
        return frozenset(q)


def chat_path(profile: str) -> str:
    return "/chat/completions"


def responses_path(profile: str) -> str:
    return "/responses"
