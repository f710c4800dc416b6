"""Model catalogue: what the proxy knows about each public model.

Built-in facts keyed by upstream model pattern (first match wins), overridden field by field
by the config's ``models[]`` entries.  Served by ``/v1/models`` (the OpenAI ``{"data": [...]}``
shape, and Codex's ``{"models": [...]}`` built by ``providers/codex_models.py``) and used to
fill ``max_output_tokens`` when a client (Codex) sends none and the upstream needs one.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

DEFAULT_CONTEXT = 128_000


@dataclass(frozen=True, slots=True)
class ModelInfo:
    id: str
    provider: str
    upstream_model: str
    context_window: int | None = None
    max_output_tokens: int | None = None
    modalities: tuple[str, ...] = ("text",)
    reasoning: bool = False
    parallel_tool_calls: bool = True
    # trained for Codex's code mode (one freeform ``exec`` tool that runs JavaScript)
    code_mode: bool = False

    def openai(self) -> dict[str, Any]:
        return {"id": self.id, "object": "model", "created": 0, "owned_by": self.provider}


# (glob on the model id, facts), first match wins; matched against the upstream model id,
# then against the public name (an Azure deployment "gpt5-prod" published as "gpt-5.5").
# Values are the vendors' published limits; max_output_tokens is what the proxy sends when a
# client (Codex) sends none, so it is a safe maximum, never above the vendor's.
BUILTIN: tuple[tuple[str, dict[str, Any]], ...] = (
    # docs/rules.md §4, the catalogue entry: 1M context, 131072 output, multimodal, thinking, no parallel tools
    ("*mimo-v2.6*", {"context_window": 1_048_576, "max_output_tokens": 131_072,
                     "modalities": ("text", "image"), "reasoning": True, "parallel_tool_calls": False}),
    # Moonshot: 256K context shared with the output
    ("*kimi-k2*", {"context_window": 262_144, "max_output_tokens": 32_768, "reasoning": True}),
    # DeepSeek API: deepseek-chat 8K max output, deepseek-reasoner 64K, 128K context
    ("deepseek-reasoner*", {"context_window": 131_072, "max_output_tokens": 65_536, "reasoning": True}),
    ("deepseek-chat*", {"context_window": 131_072, "max_output_tokens": 8_192}),
    ("deepseek-*", {"context_window": 131_072, "reasoning": True}),
    ("glm-*", {"context_window": 200_000, "max_output_tokens": 32_768, "reasoning": True}),
    ("gpt-oss-*", {"context_window": 131_072, "reasoning": True}),
    ("*gpt-oss*", {"context_window": 131_072, "reasoning": True}),
    # OpenAI's code-mode models: the windows of Codex 0.171's own catalogue
    ("gpt-6.2-sol*", {"context_window": 500_000, "modalities": ("text", "image"), "reasoning": True,
                      "code_mode": True}),
    ("gpt-6.1-sol*", {"context_window": 500_000, "modalities": ("text", "image"), "reasoning": True,
                      "code_mode": True}),
    ("gpt-6.1-terra*", {"context_window": 500_000, "modalities": ("text", "image"), "reasoning": True,
                        "code_mode": True}),
    ("gpt-6*", {"context_window": 272_000, "modalities": ("text", "image"), "reasoning": True, "code_mode": True}),
    ("gpt-5.6*", {"context_window": 272_000, "max_output_tokens": 128_000, "modalities": ("text", "image"),
                  "reasoning": True, "code_mode": True}),
    # the input window (400K in all, 128K of it output): what Codex's own catalogue says
    ("gpt-5*", {"context_window": 272_000, "max_output_tokens": 128_000,
                "modalities": ("text", "image"), "reasoning": True}),
)  # fmt: skip


def builtin_facts(*names: str) -> dict[str, Any]:
    """The first BUILTIN row matching the first name that matches any row."""
    for name in names:
        low = name.lower()
        for glob, f in BUILTIN:
            if fnmatchcase(low, glob):
                return dict(f)
    return {}


def catalog_entry(m: Any, upstream: str, provider: str) -> ModelInfo:
    facts = builtin_facts(upstream, m.name)
    for key in ("context_window", "max_output_tokens", "reasoning", "parallel_tool_calls"):
        v = getattr(m, key, None)
        if v is not None:
            facts[key] = v
    if getattr(m, "modalities", None):
        facts["modalities"] = tuple(m.modalities)
    return ModelInfo(id=m.name, provider=provider, upstream_model=upstream, **facts)
