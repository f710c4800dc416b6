"""``switchboard codex-catalog`` (app/codex_catalog.py): Codex's catalogue plus an entry per
configured model, built from the model's ``codex:`` block."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.cli import main
from app.codex_catalog import CatalogError, build_catalog
from app.config import parse_config

LEVELS = [
    {"effort": "low", "description": "Fast"},
    {"effort": "medium", "description": "Balanced"},
    {"effort": "high", "description": "Deep"},
]
BASE: dict[str, Any] = {
    "models": [
        {"slug": "gpt-6-sol", "tool_mode": "code_mode_only", "use_responses_lite": True, "context_window": 500000},
        {
            "slug": "gpt-5.5",
            "display_name": "GPT-5.5",
            "tool_mode": None,
            "use_responses_lite": False,
            "apply_patch_tool_type": "freeform",
            "context_window": 272000,
            "max_context_window": 272000,
            "default_reasoning_level": "medium",
            "supported_reasoning_levels": LEVELS,
            "upgrade": {"model": "gpt-6-sol"},
            "availability_nux": {"message": "try"},
            "visibility": "hide",
            "model_messages": {"instructions_template": "You are Codex."},
        },
    ]
}


def cfg(*models: dict[str, Any]) -> Any:
    return parse_config(
        {"providers": [{"name": "k", "profile": "kimi", "base_url": "http://127.0.0.1:9/v1"}], "models": list(models)},
        "<test>",
    )


def test_a_code_mode_entry_from_the_block() -> None:
    c = cfg(
        {"name": "kimi-k2.6", "provider": "k", "context_window": 262144,
         "codex": {"tool_mode": "code_mode_only", "reasoning_levels": ["low", "high", "xhigh"]}},
        {"name": "plain", "provider": "k"},  # no block: not in the catalogue
        {"name": "mimo-*", "provider": "k", "codex": {}},  # a glob names no model
    )  # fmt: skip
    out = build_catalog(c, BASE)
    slugs = [m["slug"] for m in out["models"]]
    assert slugs == ["gpt-6-sol", "gpt-5.5", "kimi-k2.6"]  # Codex's own entries are kept
    e = out["models"][2]
    assert e["tool_mode"] == "code_mode_only" and e["use_responses_lite"] is True
    assert e["apply_patch_tool_type"] == "freeform"  # the default
    assert e["context_window"] == e["max_context_window"] == 262144
    assert e["supported_reasoning_levels"] == [LEVELS[0], LEVELS[2], {"effort": "xhigh", "description": "xhigh"}]
    assert e["default_reasoning_level"] == "high"  # the base's medium is not offered: the middle one
    assert e["upgrade"] is None and e["availability_nux"] is None and e["visibility"] == "list"
    assert e["model_messages"] == {"instructions_template": "You are Codex."}  # the rest as the base's
    assert e["display_name"] == "kimi-k2.6" and e["supported_in_api"] is True
    assert BASE["models"][1]["upgrade"] == {"model": "gpt-6-sol"}  # the base is not changed


def test_an_ordinary_entry_and_every_model() -> None:
    c = cfg(
        {"name": "gpt-5.5", "provider": "k", "codex": {"apply_patch_tool_type": "freeform", "display_name": "K"}},
        {"name": "plain", "provider": "k"},
    )
    out = build_catalog(c, BASE)
    assert [m["slug"] for m in out["models"]] == ["gpt-6-sol", "gpt-5.5"]  # the same slug replaced
    e = out["models"][1]
    assert e["tool_mode"] is None and e["use_responses_lite"] is False and e["apply_patch_tool_type"] == "freeform"
    assert e["display_name"] == "K" and e["context_window"] == 272000 and e["default_reasoning_level"] == "medium"
    assert [m["slug"] for m in build_catalog(c, BASE, every_model=True)["models"]][-1] == "plain"


def test_no_apply_patch_and_own_instructions() -> None:
    c = cfg({"name": "m", "provider": "k", "codex": {"apply_patch_tool_type": None, "base_instructions": "Be brief."}})
    e = build_catalog(c, BASE)["models"][-1]
    assert e["apply_patch_tool_type"] is None  # null: no apply_patch tool
    # Codex prefers a model_messages template to base_instructions: the base's is removed
    assert e["base_instructions"] == "Be brief." and "model_messages" not in e


def test_errors_name_the_problem() -> None:
    with pytest.raises(CatalogError, match="codex.base 'nope'"):
        build_catalog(cfg({"name": "m", "provider": "k", "codex": {"base": "nope"}}), BASE)
    with pytest.raises(CatalogError, match="not Codex's"):
        build_catalog(cfg({"name": "m", "provider": "k"}), {"data": []})
    with pytest.raises(Exception, match="tool_mode"):
        cfg({"name": "m", "provider": "k", "codex": {"tool_mode": "direct"}})


def test_the_command(tmp_path, capsys) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text(
        "providers: [{name: k, profile: kimi, base_url: 'http://127.0.0.1:9/v1'}]\n"
        "models: [{name: kimi-k2.6, provider: k, codex: {tool_mode: code_mode_only}}]\n"
    )
    base = tmp_path / "base.json"
    base.write_text(json.dumps(BASE))
    assert main(["codex-catalog", "--config", str(conf), "--base", str(base)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["models"][-1]["slug"] == "kimi-k2.6" and out["models"][-1]["tool_mode"] == "code_mode_only"
    dest = tmp_path / "out.json"
    assert main(["codex-catalog", "--config", str(conf), "--base", str(base), "-o", str(dest)]) == 0
    assert json.loads(dest.read_text()) == out
    assert main(["codex-catalog", "--config", str(conf), "--base", str(tmp_path / "missing.json")]) == 2
