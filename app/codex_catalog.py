"""``switchboard codex-catalog``: the model catalogue Codex reads, for the proxy's models.

Theory of operation
-------------------
Codex decides how to talk to a model from its catalogue entry (a ``ModelInfo``): whether the
request is code mode (``tool_mode: "code_mode_only"`` with ``use_responses_lite``: one
``additional_tools`` item whose main tool is the freeform ``exec``), whether it offers
``apply_patch`` as a freeform tool, the context window it compacts against, the reasoning
levels it offers.  A model it has no entry for gets generic metadata (no ``apply_patch`` at
all).  The proxy serves a catalogue of the configured models itself (``GET
/v1/models?client_version=…``, providers/codex_models.py), which Codex fetches with a custom
provider's ``model_catalog_url``.  Codex with an API key and no ``model_catalog_url`` asks no
server (measured on 0.171): it reads its embedded catalogue, or the file
``model_catalog_json`` names.  This command writes that file, for such a setup:

1. the base catalogue is Codex's own (``codex debug models --bundled > codex-models.json``);
   every entry of it is kept;
2. each configured model with a ``codex:`` block (``--all``: every model with a plain name)
   becomes an entry cloned from the base entry its ``base`` names (``gpt-5.5`` by default),
   with the block's settings; an entry of the same slug in the base is replaced.

==========================  ===================================================================
``codex:`` key              entry field(s)
==========================  ===================================================================
``tool_mode``               ``tool_mode`` (``code_mode_only``, or null: ordinary tools)
``use_responses_lite``      ``use_responses_lite`` (default: true with code mode, else false)
``apply_patch_tool_type``   ``apply_patch_tool_type`` (``freeform``, the default, or null: no
                            apply_patch)
``context_window``          ``context_window`` and ``max_context_window`` (default: the
                            model's ``context_window``, else the base entry's)
``reasoning_levels``        ``supported_reasoning_levels`` (the base's descriptions kept)
``default_reasoning_level`` ``default_reasoning_level`` (default: the base's when offered,
                            else the middle level)
``display_name``            ``display_name`` (default: the model's name)
``base_instructions``       ``base_instructions``, the base entry's ``model_messages`` removed
                            (default: the base entry's)
==========================  ===================================================================

Every entry also gets ``slug`` = the model's name, ``supported_in_api: true``,
``visibility: "list"`` and no ``upgrade`` / ``availability_nux`` (Codex would otherwise offer
to move the user to an OpenAI model).
"""

from __future__ import annotations

import copy
from typing import Any

from providers.config import CodexModelCfg, Config

__all__ = ["build_catalog", "CatalogError"]


class CatalogError(ValueError):
    pass


def _levels(base: dict[str, Any], efforts: list[str]) -> list[dict[str, Any]]:
    known = {lvl.get("effort"): lvl for lvl in base.get("supported_reasoning_levels") or () if isinstance(lvl, dict)}
    return [copy.deepcopy(known[e]) if e in known else {"effort": e, "description": e} for e in efforts]


def _entry(name: str, context_window: int | None, cfg: CodexModelCfg, base: dict[str, Any]) -> dict[str, Any]:
    entry = copy.deepcopy(base)
    code_mode = cfg.tool_mode == "code_mode_only"
    window = cfg.context_window or context_window or base.get("context_window")
    entry.update(
        slug=name,
        display_name=cfg.display_name or name,
        description=f"{name}, served by Switchboard",
        tool_mode=cfg.tool_mode,
        use_responses_lite=code_mode if cfg.use_responses_lite is None else cfg.use_responses_lite,
        apply_patch_tool_type=cfg.apply_patch_tool_type,
        context_window=window,
        max_context_window=window,
        upgrade=None,
        availability_nux=None,
        visibility="list",
        supported_in_api=True,
    )
    if cfg.base_instructions is not None:  # (a model_messages template would take precedence)
        entry["base_instructions"] = cfg.base_instructions
        entry.pop("model_messages", None)
    if cfg.reasoning_levels is not None:
        entry["supported_reasoning_levels"] = _levels(base, list(cfg.reasoning_levels))
        offered = list(cfg.reasoning_levels)
        default = cfg.default_reasoning_level or base.get("default_reasoning_level")
        if default not in offered:
            default = offered[len(offered) // 2] if offered else None
        entry["default_reasoning_level"] = default
    elif cfg.default_reasoning_level is not None:
        entry["default_reasoning_level"] = cfg.default_reasoning_level
    return entry


def build_catalog(cfg: Config, base: dict[str, Any], *, every_model: bool = False) -> dict[str, Any]:
    """Codex's catalogue ``base`` with an entry for each configured model (module docstring)."""
    models = base.get("models") if isinstance(base, dict) else None
    if not isinstance(models, list) or not all(isinstance(m, dict) and isinstance(m.get("slug"), str) for m in models):
        raise CatalogError('the base catalogue is not Codex\'s: expected {"models": [{"slug": …}, …]}')
    by_slug = {m["slug"]: m for m in models}
    mine: list[dict[str, Any]] = []
    for model in cfg.models:
        if any(ch in model.name for ch in "*?["):
            continue  # a glob entry names no one model
        codex = model.codex if model.codex is not None else (CodexModelCfg() if every_model else None)
        if codex is None:
            continue
        base_entry = by_slug.get(codex.base)
        if base_entry is None:
            raise CatalogError(f"model {model.name!r}: codex.base {codex.base!r} is not in the base catalogue")
        mine.append(_entry(model.name, model.context_window, codex, base_entry))
    taken = {m["slug"] for m in mine}
    return {**base, "models": [m for m in models if m["slug"] not in taken] + mine}
