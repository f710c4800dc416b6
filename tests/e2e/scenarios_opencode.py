"""Scenario scripts for the opencode e2e tests (``test_opencode_proxy.py``).

Theory of operation
-------------------
As in ``scenarios.py``: each function returns the ``Turn``s a scripted upstream plays, the
constants beside it are what the tests assert.  Turn 1 calls opencode's ``bash`` tool
(``{"command", "description"}``) under a fixed call id; turn 2 answers the final text only
if the history carries that id on the call and on its output, and the output holds the
marker (plus, for ``opencode_bash_rich``, the assistant text of turn 1: what an
``item_reference`` to turn 1's message item stands for), else it answers
``PREDICATE-MISS…``.  ``kind`` is the upstream's protocol (``chat`` behind the proxy; the
wire-shape tests also play ``responses`` straight to opencode's Responses provider).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from scenarios import all_of, miss, tool_output_contains
from scripted_upstream import ToolCall, Turn, chat_history_carries_id, chat_turn, responses_turn

OPENCODE_CALL_ID = "call_opencode_bash_1"
OPENCODE_MARKER = "switchboard-e2e-opencode-ok"
OPENCODE_FILE = "opencode_out.txt"
OPENCODE_CMD = f"printf '%s' '{OPENCODE_MARKER}' > {OPENCODE_FILE} && cat {OPENCODE_FILE}"
OPENCODE_ARGS = json.dumps({"command": OPENCODE_CMD})  # bash takes command, timeout, workdir
OPENCODE_FINAL = "opencode ran bash through Switchboard; 完成 ✓"
OPENCODE_TEXT = "Writing the marker file with bash now."  # rich turn 1: text before the call
OPENCODE_REASONING = "The user wants the marker file: one bash call."  # rich turn 1


def assistant_text_in_history(needle: str) -> Callable[[dict], bool]:
    """An assistant message of a Chat or a Responses request's history holds ``needle``."""

    def text_of(content) -> str:
        if isinstance(content, list):
            return "".join(p.get("text", "") for p in content if isinstance(p, dict))
        return content if isinstance(content, str) else ""

    def pred(req: dict) -> bool:
        items = req.get("messages") or (req.get("input") if isinstance(req.get("input"), list) else [])
        return any(
            isinstance(m, dict) and m.get("role") == "assistant" and needle in text_of(m.get("content")) for m in items
        )

    return pred


def _turn(kind: str) -> Callable[..., Turn]:
    if kind not in ("chat", "responses"):
        raise ValueError(f"kind must be chat or responses, not {kind!r}")
    return chat_turn if kind == "chat" else responses_turn


def opencode_bash(kind: str = "chat", model: str = "e2e-opencode") -> list[Turn]:
    """One ``bash`` call, then the final text once its id and output came back."""
    turn = _turn(kind)
    return [
        turn(
            model=model, tool_calls=[ToolCall("bash", OPENCODE_ARGS, id=OPENCODE_CALL_ID)], label="opencode bash call"
        ),
        turn(
            model=model,
            text=OPENCODE_FINAL,
            label="final",
            when=all_of(
                chat_history_carries_id(OPENCODE_CALL_ID), tool_output_contains(OPENCODE_CALL_ID, OPENCODE_MARKER)
            ),
            otherwise=miss(kind, "opencode bash call or output missing"),
        ),
    ]


def opencode_bash_rich(kind: str = "chat", model: str = "e2e-opencode", *, text_back: bool = True) -> list[Turn]:
    """Turn 1 has reasoning and text before the ``bash`` call: a Responses client keeping
    state (``store: true``) refers to those items by ``item_reference`` in turn 2; the final
    text needs the call, its output and (``text_back``) turn 1's text back.  Without
    ``text_back``: for a scripted upstream that is played the references unresolved."""
    turn = _turn(kind)
    back = [assistant_text_in_history(OPENCODE_TEXT)] if text_back else []
    return [
        turn(
            model=model,
            reasoning=OPENCODE_REASONING,
            text=OPENCODE_TEXT,
            tool_calls=[ToolCall("bash", OPENCODE_ARGS, id=OPENCODE_CALL_ID)],
            label="opencode reasoning, text, bash call",
        ),
        turn(
            model=model,
            text=OPENCODE_FINAL,
            label="final",
            when=all_of(
                chat_history_carries_id(OPENCODE_CALL_ID),
                tool_output_contains(OPENCODE_CALL_ID, OPENCODE_MARKER),
                *back,
            ),
            otherwise=miss(kind, "opencode bash call, output or turn-1 text missing"),
        ),
    ]


SCENARIOS: dict[str, Callable[[], list[Turn]]] = {
    "opencode-bash": opencode_bash,
    "opencode-bash-responses": lambda: opencode_bash("responses"),
    "opencode-bash-rich": opencode_bash_rich,
    "opencode-bash-rich-responses": lambda: opencode_bash_rich("responses"),
}
