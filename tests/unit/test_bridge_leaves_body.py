"""open_bridge never changes the body it is given, on any profile's quirks, either upstream
protocol, with compaction: the WebSocket path hands it the socket's own transcript
(app/ws.py ``_prepare``: checked as parsed, not written and parsed again), so a change here
would change what the next turn replays."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from providers.profiles import MODEL_QUIRKS, PROFILES
from transformers import envelope
from transformers.bridge import open_bridge
from transformers.context import Ctx
from transformers.protocols import check_parsed

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
KEY = b"k" * 32


def body(store: Any, trigger: bool) -> dict[str, Any]:
    b = json.loads((FIXTURES / "codex_request.json").read_text())
    b["tools"] = [*json.loads((FIXTURES / "codex_tools_0.169.json").read_text()), {"type": "web_search"}]
    b["store"] = store
    items = b["input"]
    for i, it in enumerate(items):
        it.setdefault("id", f"item_{i}")  # ids a store:false request loses upstream
    items.insert(0, {"type": "compaction", "encrypted_content": envelope.seal_compaction("Earlier work.", KEY)})
    items.append({"type": "reasoning", "summary": [], "encrypted_content": envelope.seal("mine", KEY)})
    items.append(
        {"type": "function_call", "call_id": "functions_Read_0", "name": "Read", "arguments": "", "id": "fc_9"}
    )
    items.append({"type": "function_call_output", "call_id": "functions_Read_0", "output": [{"type": "input_text", "text": "x"}]})  # fmt: skip
    items.append({"type": "function_call_output", "call_id": "nobody", "output": "orphan"})
    items.append({"role": "developer", "content": "be brief"})
    if trigger:
        items.append({"type": "compaction_trigger"})
    b["max_output_tokens"] = 100
    b["tool_choice"] = {"type": "function", "name": "exec_command"}
    return b


QUIRK_SETS = sorted({p.quirks for p in PROFILES.values()} | {q for _, q in MODEL_QUIRKS}, key=sorted)


@pytest.mark.parametrize("quirks", QUIRK_SETS, ids=lambda q: "+".join(sorted(q)) or "none")
@pytest.mark.parametrize("upstream", ["chat", "responses"])
@pytest.mark.parametrize(("store", "trigger"), [(False, False), (True, False), (None, True)])
def test_open_bridge_leaves_the_body_as_it_was(quirks: frozenset[str], upstream: str, store: Any, trigger: bool):
    b = check_parsed(body(store, trigger), "responses")
    before = copy.deepcopy(b)
    ctx = Ctx(quirks=quirks, upstream_model="up", public_model="m", envelope_key=KEY, compaction_key=KEY)
    out, _bridge = open_bridge(b, "responses", upstream, ctx)
    assert b == before
    assert out is not b and out["input" if upstream == "responses" else "messages"] is not b["input"]
