"""Scenario scripts for the openai-agents SDK e2e tests (``test_agents_proxy.py``).

Theory of operation
-------------------
The Agents SDK runs an agent with one ``exec_command`` tool (``agents_checks.py``): the
upstream calls it with the shared ``EXEC_ARGS`` (the command writes and prints
``EXEC_MARKER``), and answers the final text on the next turn only if the replayed history
carries the call (``call_id`` on the call and on its output) and the command's output;
otherwise it answers ``PREDICATE-MISS…``.  The chained conversation is two agent runs, four
upstream turns: the second run goes out with ``previous_response_id`` and only its new
prompt, so the upstream (which keeps nothing) answers only when the proxy expanded the
stored conversation: the first run's prompt, call, output and final text, then the second
prompt, in order, and no ``previous_response_id`` left in the request.  ``SCENARIOS`` names
the scripts (``scripted_upstream.py --scenario`` plays only ``scenarios.SCENARIOS``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scenarios import EXEC_ARGS, EXEC_MARKER, all_of, miss, tool_output_contains
from scripted_upstream import ToolCall, Turn, chat_history_carries_id, chat_turn, responses_turn

AGENTS_PROMPTS = ["Run the marker command and tell me what it printed.", "Run it once more, then confirm — 再来一次."]
AGENTS_REASONING = "The user wants the marker command run; call exec_command."
AGENTS_FINAL = [
    "The command printed the marker: switchboard-e2e-exec-ok ✓",
    "Second run done; the marker is still there — 完成.",
]
AGENTS_IDS = ["call_agents_1", "call_agents_2"]


# --------------------------------------------------------------------------- transcript


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return ""


def transcript(req: dict) -> list[tuple[str, str]]:
    """The conversation a Chat or Responses request carries, flattened: ``("user", text)``,
    ``("assistant", text)``, ``("call", call_id)``, ``("output", call_id)``, in order
    (system/developer messages and reasoning left out)."""
    out: list[tuple[str, str]] = []
    for m in req.get("messages") or []:  # Chat
        role = m.get("role")
        if role in ("user", "assistant") and _text(m.get("content")):
            out.append((role, _text(m.get("content"))))
        for tc in m.get("tool_calls") or []:
            out.append(("call", tc.get("id")))
        if role == "tool":
            out.append(("output", m.get("tool_call_id")))
    inp = req.get("input")
    if isinstance(inp, str):
        out.append(("user", inp))
    for it in inp if isinstance(inp, list) else []:  # Responses
        t = it.get("type") or "message"
        if t == "message" and it.get("role") in ("user", "assistant") and _text(it.get("content")):
            out.append((it["role"], _text(it.get("content"))))
        elif t == "function_call":
            out.append(("call", it.get("call_id")))
        elif t == "function_call_output":
            out.append(("output", it.get("call_id")))
    return out


def carries_in_order(*entries: tuple[str, str]) -> Callable[[dict], bool]:
    """The request's transcript holds ``entries`` as a subsequence (in this order)."""

    def pred(req: dict) -> bool:
        it = iter(transcript(req))
        return all(any(e == got for got in it) for e in entries)

    return pred


def no_previous_response_id(req: dict) -> bool:
    """The proxy expanded the stored conversation instead of passing the id on."""
    return "previous_response_id" not in req


def continues(response_id: str) -> Callable[[dict], bool]:
    """A Responses upstream that keeps its responses: the proxy passed the id through."""
    return lambda req: req.get("previous_response_id") == response_id


# --------------------------------------------------------------------------- scripts


def _mk(kind: str) -> Callable[..., Turn]:
    return chat_turn if kind == "chat" else responses_turn


def call_turn(kind: str, model: str, cid: str, *, label: str = "exec call", **kw: Any) -> Turn:
    return _mk(kind)(
        model=model,
        reasoning=AGENTS_REASONING,
        tool_calls=[ToolCall("exec_command", EXEC_ARGS, id=cid)],
        label=label,
        **kw,
    )


def ran(cid: str) -> Callable[[dict], bool]:
    """The call came back under its id, on the call and on its output, with the command's output."""
    return all_of(chat_history_carries_id(cid), tool_output_contains(cid, EXEC_MARKER))


def agents_exec(kind: str = "chat", model: str = "e2e-agents") -> list[Turn]:
    """One agent run: exec_command, then the final text once the call and its output came back."""
    cid = AGENTS_IDS[0]
    return [
        call_turn(kind, model, cid),
        _mk(kind)(
            model=model,
            text=AGENTS_FINAL[0],
            label="final",
            when=ran(cid),
            otherwise=miss(kind, "exec call/output missing"),
        ),
    ]


def agents_chained(kind: str = "chat", model: str = "e2e-agents", *, upstream_keeps: bool = False) -> list[Turn]:
    """Two agent runs chained by ``previous_response_id`` (four upstream turns).

    ``upstream_keeps=False`` (a Chat upstream, or a Responses one that keeps nothing): every
    continuation must arrive expanded (the whole conversation so far, no
    ``previous_response_id``).  ``upstream_keeps=True`` (a Responses upstream with
    ``upstream_store``): every continuation must name the upstream's own previous response
    and carry only the new items (the upstream holds the rest)."""
    c1, c2 = AGENTS_IDS
    p1, p2 = (("user", p) for p in AGENTS_PROMPTS)
    f1 = ("assistant", AGENTS_FINAL[0])
    mk = _mk(kind)
    t0 = call_turn(kind, model, c1, label="run 1: exec call")
    t1 = mk(model=model, text=AGENTS_FINAL[0], label="run 1: final")
    t2 = call_turn(kind, model, c2, label="run 2: exec call")
    t3 = mk(model=model, text=AGENTS_FINAL[1], label="run 2: final")
    if upstream_keeps:
        # non-stream bodies: the id each turn answered is the one the next must continue
        conds = [
            all_of(continues(t0.body["id"]), tool_output_contains(c1, EXEC_MARKER)),
            all_of(continues(t1.body["id"]), carries_in_order(p2), lambda r: ("call", c1) not in transcript(r)),
            all_of(continues(t2.body["id"]), tool_output_contains(c2, EXEC_MARKER)),
        ]
    else:
        conds = [
            all_of(no_previous_response_id, carries_in_order(p1, ("call", c1), ("output", c1)), ran(c1)),
            all_of(no_previous_response_id, carries_in_order(p1, ("call", c1), ("output", c1), f1, p2), ran(c1)),
            all_of(
                no_previous_response_id,
                carries_in_order(p1, ("call", c1), ("output", c1), f1, p2, ("call", c2), ("output", c2)),
                ran(c1),
                ran(c2),
            ),
        ]
    for turn, cond, what in zip(
        (t1, t2, t3), conds, ("run 1 history", "run 1 expanded before run 2", "both runs expanded")
    ):
        turn.when = cond
        turn.otherwise = miss(kind, what + " missing")
    return [t0, t1, t2, t3]


SCENARIOS: dict[str, Callable[[], list[Turn]]] = {
    "agents-exec-chat": lambda: agents_exec("chat"),
    "agents-exec-responses": lambda: agents_exec("responses"),
    "agents-chained-chat": lambda: agents_chained("chat"),
    "agents-chained-responses": lambda: agents_chained("responses"),
}
