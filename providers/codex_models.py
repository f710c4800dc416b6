"""Codex's catalogue entry for a routed model: what ``GET /v1/models?client_version=…`` answers.

Theory of operation
-------------------
Codex decides how to talk to a model from its catalogue entry (a ``ModelInfo``): code mode or
ordinary tools, ``apply_patch`` as a freeform tool or none, the context window it compacts
against, the reasoning levels it offers, and the base instructions it puts first in every
request.  Codex 0.171 fetches the catalogue from the proxy in two cases (measured):

* a custom provider with ``model_catalog_url`` (any URL): ``GET <url>?client_version=0.171.0``
  with its ``Authorization: Bearer <env_key>``;
* the built-in ``openai`` provider signed in with ChatGPT: ``GET
  {openai_base_url}/models?client_version=0.171.0`` (plus ``version`` and
  ``chatgpt-account-id`` headers).  With an API key it fetches nothing.

The answer replaces Codex's whole catalogue (its own entries are gone), and one entry Codex
cannot decode empties it: every entry here carries what Codex 0.171 requires (``slug``,
``display_name``, ``supported_reasoning_levels``, ``shell_type``, ``visibility``,
``supported_in_api``, ``priority``, ``support_verbosity``, ``truncation_policy``,
``experimental_supported_tools``, ``base_instructions``).  Unknown fields are ignored, so
the entry also keeps the facts the proxy served before (``max_output_tokens``,
``supports_parallel_tool_calls``).

=======================  ===================================================================
entry field              from
=======================  ===================================================================
``tool_mode``            ``codex.tool_mode``; unset: ``code_mode_only`` for a model trained
                         for code mode (``ModelInfo.code_mode``, providers/catalog.py), else
                         null (ordinary top-level tools)
``use_responses_lite``   ``codex.use_responses_lite``; unset: true with code mode
``apply_patch_tool_type`` ``codex.apply_patch_tool_type`` (``freeform`` unless set to null).
                         Every upstream serves it: toward Chat and Messages the proxy offers
                         the freeform tool as a one-string function (docs/items.md)
``context_window``,      ``codex.context_window``, else the model's (``models[].context_window``,
``max_context_window``   else the built-in facts, else 128,000)
``supported_reasoning_   ``codex.reasoning_levels``; unset: low, medium, high for a reasoning
levels``                 model, none otherwise; the default level: ``codex.default_reasoning_
                         level`` when offered, else the middle one
``input_modalities``     the model's ``modalities``
``support_verbosity``    true toward OpenAI and Azure (they read ``text.verbosity``)
``base_instructions``    ``codex.base_instructions``, else ``BASE_INSTRUCTIONS`` below
``priority``             the model's position among the entries (Codex's default model is the
                         first)
=======================  ===================================================================
"""

from __future__ import annotations

from typing import Any

from providers.catalog import DEFAULT_CONTEXT, ModelInfo
from providers.config import CodexModelCfg

__all__ = ["BASE_INSTRUCTIONS", "codex_entry"]

# What Codex puts first in every request to a routed model when the config gives no
# ``codex.base_instructions``.  Codex's own prompts are written for OpenAI's models; the
# tools' descriptions (exec_command, apply_patch's grammar, code mode's exec) say how each
# tool works, so this says how to work.
BASE_INSTRUCTIONS = """\
You are a coding agent running in the Codex CLI, in a terminal on the user's computer. You \
and the user share one workspace: its files, its shell and its tools. Your job is to carry \
the user's task through to a working result.

How you work:
- Read before you change: look at the relevant files and how the project is built and \
tested before you edit anything.
- Use the tools you are given. Run shell commands to search (prefer `rg`), read files, \
build and test. Edit files with `apply_patch` when it is offered; keep each patch small and \
focused.
- Make the change the task needs, in the style of the code around it. Do not rename, \
reformat or rewrite what the task does not touch, and do not add licence headers or \
comments that restate the code.
- Check your work: run the project's tests or build, or the narrowest command that shows \
the change works. If something fails, find the cause and fix it.
- Keep going until the task is done or you are blocked by something only the user can \
decide. Do not stop to ask for confirmation of things you can find out yourself.
- Never run destructive commands (deleting data, `git reset --hard`, force pushes) unless \
the user asked for them. Do not commit unless the user asks you to.

When you answer:
- Be brief and concrete. Say what you changed and why, with file paths, and what you ran to \
check it.
- If you could not finish, say what is left and what stands in the way.
- Use Markdown only where it helps: short lists, `code` for commands, paths and \
identifiers.
"""

_DESCRIPTIONS = {
    "none": "No reasoning",
    "minimal": "The least reasoning",
    "low": "Fast answers with light reasoning",
    "medium": "Balanced speed and reasoning depth",
    "high": "Deeper reasoning for complex problems",
    "xhigh": "The deepest reasoning",
}
_REASONING_LEVELS = ("low", "medium", "high")
_VERBOSITY_PROFILES = frozenset({"openai", "azure"})
# what Codex's own entries say: tool outputs kept to 10,000 tokens in the history
_TRUNCATION = {"mode": "tokens", "limit": 10_000}


def codex_entry(info: ModelInfo, cfg: CodexModelCfg | None, *, profile: str, priority: int) -> dict[str, Any]:
    """The catalogue entry Codex 0.171 accepts for the routed model ``info`` (module docstring)."""
    codex = cfg if cfg is not None else CodexModelCfg()
    given = codex.model_fields_set
    if "tool_mode" in given:
        tool_mode = codex.tool_mode
    else:
        tool_mode = "code_mode_only" if info.code_mode else None
    code_mode = tool_mode == "code_mode_only"
    window = codex.context_window or info.context_window or DEFAULT_CONTEXT
    levels: list[str]
    if codex.reasoning_levels is not None:
        levels = list(dict.fromkeys(codex.reasoning_levels))
    else:
        levels = list(_REASONING_LEVELS) if info.reasoning else []
    default: str | None = codex.default_reasoning_level
    if default not in levels:
        default = levels[len(levels) // 2] if levels else None
    return {
        "slug": info.id,
        "display_name": codex.display_name or info.id,
        "description": f"{info.id}, served by Switchboard ({info.provider})",
        "default_reasoning_level": default,
        "supported_reasoning_levels": [{"effort": e, "description": _DESCRIPTIONS[e]} for e in levels],
        "shell_type": "unified_exec",
        "visibility": "list",
        "supported_in_api": True,
        "priority": priority,
        "upgrade": None,
        "availability_nux": None,
        "base_instructions": codex.base_instructions or BASE_INSTRUCTIONS,
        "supports_reasoning_summaries": info.reasoning,
        "default_reasoning_summary": "none",
        "support_verbosity": profile in _VERBOSITY_PROFILES,
        "default_verbosity": None,
        "apply_patch_tool_type": codex.apply_patch_tool_type,
        "truncation_policy": dict(_TRUNCATION),
        "supports_parallel_tool_calls": info.parallel_tool_calls,
        "context_window": window,
        "max_context_window": window,
        "max_output_tokens": info.max_output_tokens,
        "experimental_supported_tools": [],
        "input_modalities": list(info.modalities),
        "tool_mode": tool_mode,
        "use_responses_lite": code_mode if codex.use_responses_lite is None else codex.use_responses_lite,
    }
