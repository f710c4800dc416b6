"""Codex's catalogue entry for a routed model (providers/codex_models.py): every field Codex
0.171 requires, with the types it decodes, and each value from the config or the facts."""

from __future__ import annotations

from typing import Any

import pytest

from app.config import parse_config
from providers.catalog import catalog_entry
from providers.codex_models import BASE_INSTRUCTIONS, codex_entry

# Measured on Codex 0.171: an entry without one of these is refused, and with it the whole
# catalogue (plus base_instructions, or a model_messages template)
REQUIRED = (
    "slug", "display_name", "supported_reasoning_levels", "shell_type", "visibility", "supported_in_api",
    "priority", "support_verbosity", "truncation_policy", "experimental_supported_tools", "base_instructions",
)  # fmt: skip
EFFORTS = {"none", "minimal", "low", "medium", "high", "xhigh"}


def assert_codex_decodes(e: dict[str, Any]) -> None:
    """The entry has every field Codex requires, each of the type Codex reads."""
    missing = [k for k in REQUIRED if k not in e]
    assert not missing, missing
    assert isinstance(e["slug"], str) and e["slug"] and isinstance(e["display_name"], str)
    assert all(set(lvl) == {"effort", "description"} for lvl in e["supported_reasoning_levels"])
    assert {lvl["effort"] for lvl in e["supported_reasoning_levels"]} <= EFFORTS
    assert e["default_reasoning_level"] in EFFORTS | {None}
    assert e["shell_type"] in {"default", "local", "unified_exec", "disabled", "shell_command"}
    assert e["visibility"] in {"list", "hide", "none"}
    assert e["supported_in_api"] is True and isinstance(e["support_verbosity"], bool)
    assert isinstance(e["priority"], int) and not isinstance(e["priority"], bool)
    assert e["truncation_policy"]["mode"] in {"tokens", "bytes"} and isinstance(e["truncation_policy"]["limit"], int)
    assert e["experimental_supported_tools"] == []
    assert isinstance(e["base_instructions"], str) and e["base_instructions"].strip()
    assert e["apply_patch_tool_type"] in {"freeform", None}
    assert e["tool_mode"] in {"code_mode_only", None} and isinstance(e["use_responses_lite"], bool)
    assert isinstance(e["context_window"], int) and e["max_context_window"] == e["context_window"]
    assert set(e["input_modalities"]) <= {"text", "image"} and "text" in e["input_modalities"]


def entries(*models: dict[str, Any], profile: str = "kimi") -> dict[str, dict[str, Any]]:
    cfg = parse_config(
        {"providers": [{"name": "p", "profile": profile, "base_url": "http://127.0.0.1:9/v1"}], "models": list(models)},
        "<test>",
    )
    out = {}
    for i, m in enumerate(cfg.models, 1):
        info = catalog_entry(m, m.upstream_model or m.name, "p")
        out[m.name] = codex_entry(info, m.codex, profile=profile, priority=i)
    return out


def test_a_model_without_a_block_gets_its_facts() -> None:
    e = entries({"name": "kimi-k2.6", "provider": "p"})["kimi-k2.6"]
    assert_codex_decodes(e)
    assert (e["slug"], e["display_name"], e["priority"]) == ("kimi-k2.6", "kimi-k2.6", 1)
    assert e["context_window"] == 262_144  # Moonshot's window, not a default
    assert e["tool_mode"] is None and e["use_responses_lite"] is False  # ordinary tools
    assert e["apply_patch_tool_type"] == "freeform"
    assert [lvl["effort"] for lvl in e["supported_reasoning_levels"]] == ["low", "medium", "high"]
    assert e["default_reasoning_level"] == "medium"
    assert e["input_modalities"] == ["text"] and e["base_instructions"] == BASE_INSTRUCTIONS
    assert e["support_verbosity"] is False and e["upgrade"] is None and e["availability_nux"] is None


def test_a_code_mode_model_gets_code_mode_and_its_real_window() -> None:
    got = entries({"name": "gpt-6.2-sol", "provider": "p"}, {"name": "gpt-5.6-luna", "provider": "p"}, profile="openai")
    for e in got.values():
        assert_codex_decodes(e)
        assert e["tool_mode"] == "code_mode_only" and e["use_responses_lite"] is True
        assert e["input_modalities"] == ["text", "image"] and e["support_verbosity"] is True  # OpenAI reads it
    assert got["gpt-6.2-sol"]["context_window"] == 500_000 and got["gpt-5.6-luna"]["context_window"] == 272_000


def test_the_block_decides() -> None:
    block = {
        "tool_mode": "code_mode_only", "apply_patch_tool_type": None, "context_window": 131072,
        "reasoning_levels": ["high", "low", "high"], "default_reasoning_level": "low", "display_name": "Kimi",
        "base_instructions": "Be brief.",
    }  # fmt: skip
    got = entries(
        {"name": "kimi-k2.6", "provider": "p", "context_window": 200000, "codex": block},
        {"name": "gpt-6-sol", "provider": "p", "codex": {"tool_mode": None}},  # code mode refused
        {"name": "local", "provider": "p", "reasoning": False, "codex": {"use_responses_lite": True}},
    )
    k = got["kimi-k2.6"]
    assert_codex_decodes(k)
    assert (k["tool_mode"], k["use_responses_lite"], k["apply_patch_tool_type"]) == ("code_mode_only", True, None)
    assert k["context_window"] == 131072 and k["display_name"] == "Kimi" and k["base_instructions"] == "Be brief."
    assert [lvl["effort"] for lvl in k["supported_reasoning_levels"]] == ["high", "low"]  # once each
    assert k["default_reasoning_level"] == "low"
    g = got["gpt-6-sol"]
    assert g["tool_mode"] is None and g["use_responses_lite"] is False and g["priority"] == 2
    loc = got["local"]
    assert_codex_decodes(loc)
    assert loc["supported_reasoning_levels"] == [] and loc["default_reasoning_level"] is None
    assert loc["context_window"] == 128_000 and loc["use_responses_lite"] is True


@pytest.mark.parametrize("levels, default, want", [(["low", "high"], None, "high"), (["medium"], "xhigh", "medium")])
def test_the_default_level_is_one_offered(levels: list[str], default: str | None, want: str) -> None:
    block: dict[str, Any] = {"reasoning_levels": levels}
    if default:
        block["default_reasoning_level"] = default
    assert entries({"name": "m", "provider": "p", "codex": block})["m"]["default_reasoning_level"] == want


def test_empty_instructions_are_refused() -> None:
    with pytest.raises(Exception, match="base_instructions"):
        entries({"name": "m", "provider": "p", "codex": {"base_instructions": ""}})
