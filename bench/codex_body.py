"""A Codex-sized Responses request: what Codex sends on a later turn of a working session.

Codex (and any Responses client with ``store: false``) sends the whole conversation on every
turn, so the request grows with the session: instructions of some 12 KB, the tools Codex
0.169 declares (``tests/fixtures/codex_tools_0.169.json``), and per earlier turn a user
message, a reasoning item (summary and an opaque ``encrypted_content``), an assistant
message and three ``exec_command`` calls with their outputs (40 lines of source each).
30 turns make about 370 KB and 271 input items.  Deterministic: the same bytes every run,
so the direct side and the proxy side parse the same body.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

TOOLS_FILE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "codex_tools_0.169.json"
SOURCE_LINE = "    total = sum(item.price * item.quantity for item in order.items)  # line\n"


def history(turns: int) -> list[dict[str, Any]]:
    """The input items of ``turns`` finished turns, in Codex's order."""
    items: list[dict[str, Any]] = []
    for t in range(turns):
        items.append(
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": f"Step {t}: fix the failing test in module m{t}. " * 4}],
            }
        )
        items.append(
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "**Reading the module**\n\nThe test expects " * 8}],
                "encrypted_content": "gAAAAB" + "q" * 800,
            }
        )
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "I will read the module and its test first. " * 6}],
            }
        )
        for c in range(3):
            call_id = f"call_{t:03d}_{c}"
            args = json.dumps({"cmd": f"sed -n 1,40p src/m{t}_{c}.py", "workdir": "/work"})
            items.append({"type": "function_call", "call_id": call_id, "name": "exec_command", "arguments": args})
            items.append({"type": "function_call_output", "call_id": call_id, "output": SOURCE_LINE * 40})
    return items


def codex_request(model: str, turns: int = 30, *, stream: bool = True) -> bytes:
    """The request Codex sends after ``turns`` turns of a session (about 10 KB per turn)."""
    body = {
        "model": model,
        "instructions": "You are Codex, a coding agent running in the user's terminal. " * 200,
        "input": [
            *history(turns),
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Now run the tests."}]},
        ],
        "tools": json.loads(TOOLS_FILE.read_text()),
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": stream,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "bench-session",
    }
    return orjson.dumps(body)
