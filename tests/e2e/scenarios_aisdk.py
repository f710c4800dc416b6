"""Scenario scripts for the Vercel AI SDK e2e tests (``test_aisdk_proxy.py``).

Theory of operation
-------------------
Turn 1 answers with reasoning, a short text and one tool call; the AI SDK runs the tool
(its ``execute`` returns a fixed string) and sends step 2.  With ``openai.responses(model)``
at its defaults (no ``store`` sent, so the proxy stores) step 2 carries the reasoning and
the text as ``{"type": "item_reference", "id": <id the proxy gave them>}`` and only the
``function_call`` / ``function_call_output`` in full; with ``openai.chat(model)`` it sends the
text and the call in an assistant message (no reasoning) and the output as a tool message.

Turn 2 answers the final text only when ``history_problems`` finds nothing wrong with what
the upstream received (else ``PREDICATE-MISS: <problems>``):

* Chat upstream: an assistant message whose ``tool_calls`` carry the call (id, name,
  arguments as the upstream sent them) and the tool message with the output under that id;
  the turn-1 text as assistant content; with ``reasoning`` also that text as the assistant's
  ``reasoning_content`` (the reasoning of a Responses client exists only behind its
  ``item_reference``);
* Responses upstream: the ``function_call`` and ``function_call_output`` items, the turn-1
  text in an assistant message item, with ``reasoning`` a reasoning item with that text, and
  NO ``item_reference`` item (its id was minted by the proxy: the upstream never saw it).

``MIMO_*``: a MiMo Chat upstream calls ``apply_patch`` with the RAW patch text as
``function.arguments`` (``scenarios.RAW_PATCH``); the AI SDK offers ``apply_patch`` as a
function with one string parameter ``input``, so the proxy wraps it as ``{"input": raw}``.
``MANTLE``: a Bedrock-Mantle Responses stream (id-less done items, id-less
``completed.output``).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import scenarios as sc
from scripted_upstream import ToolCall, Turn, chat_turn, responses_turn

EXEC_TOOL = {
    "name": "exec_command",
    "description": "Run a shell command and return its output.",
    "param": "cmd",
    "output": "switchboard-e2e-aisdk-tool-ok: 3 files",
}
EXEC_CALL_ID = "call_aisdk_exec_1"
STEP1_REASONING = "The user wants the command run; call exec_command."
STEP1_TEXT = "Running the command now — 先运行 ✓"
FINAL_TEXT = "The AI SDK ran the tool once; 完成 ✓"

PATCH_TOOL = {
    "name": "apply_patch",
    "description": "Apply a patch in the apply_patch format.",
    "param": "input",
    "output": f"Success. Updated the following files:\nA {sc.PATCH_FILE}\n",
}
MIMO_CALL_ID = "call_aisdk_patch_1"
MIMO_REASONING = "I will add the notes file with apply_patch."
MIMO_FINAL = "Patched via the AI SDK: 文件已创建 ✓"

PROMPT = "Run `ls | wc -l` with exec_command, then say you are done."
MIMO_PROMPT = "Create mimo_notes.txt with apply_patch, then say you are done."


# --------------------------------------------------------------------------- predicate


def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return ""


def history_problems(
    req: dict,
    kind: str,
    *,
    call_id: str,
    tool: str,
    arguments: str,
    output: str,
    text: str | None = None,
    reasoning: str | None = None,
) -> list[str]:
    """What is missing or wrong in the history of ``req`` (a request the upstream received
    on turn 2); empty when the tool call, its output (and ``text`` / ``reasoning`` when given)
    are there in the upstream protocol's own form. ``arguments`` is compared as JSON."""
    want_args = json.loads(arguments)
    problems: list[str] = []
    if kind == "chat":
        msgs = [m for m in req.get("messages") or [] if isinstance(m, dict)]
        asst = [m for m in msgs if m.get("role") == "assistant"]
        calls = [tc for m in asst for tc in m.get("tool_calls") or []]
        mine = [tc for tc in calls if tc.get("id") == call_id]
        if len(mine) != 1:
            problems.append(f"assistant tool_calls ids {[tc.get('id') for tc in calls]}, want one {call_id!r}")
        else:
            fn = mine[0].get("function") or {}
            if fn.get("name") != tool:
                problems.append(f"tool call name {fn.get('name')!r}, want {tool!r}")
            try:
                got_args = json.loads(fn.get("arguments") or "")
            except ValueError:
                got_args = fn.get("arguments")
            if got_args != want_args:
                problems.append(f"tool call arguments {fn.get('arguments')!r}, want {arguments!r}")
        outs = [m for m in msgs if m.get("role") == "tool" and m.get("tool_call_id") == call_id]
        if len(outs) != 1 or output not in _text_of(outs[0].get("content")):
            problems.append(f"tool messages for {call_id!r}: {outs}, want one containing {output!r}")
        if text is not None and not any(text in _text_of(m.get("content")) for m in asst):
            problems.append(f"turn-1 text {text!r} in no assistant message: {[m.get('content') for m in asst]}")
        if reasoning is not None:
            got = [m.get("reasoning_content") or m.get("reasoning") for m in asst]
            if reasoning not in got:
                problems.append(f"assistant reasoning_content {got}, want {reasoning!r}")
        return problems

    items = [it for it in req.get("input") or [] if isinstance(it, dict)] if isinstance(req.get("input"), list) else []
    refs = [it.get("id") for it in items if it.get("type") == "item_reference"]
    if refs:
        problems.append(f"item_reference items reached the upstream (ids it never minted): {refs}")
    fcs = [it for it in items if it.get("type") == "function_call" and it.get("call_id") == call_id]
    if len(fcs) != 1:
        problems.append(f"function_call items for {call_id!r}: {fcs}, want one")
    else:
        if fcs[0].get("name") != tool:
            problems.append(f"function_call name {fcs[0].get('name')!r}, want {tool!r}")
        try:
            got_args = json.loads(fcs[0].get("arguments") or "")
        except ValueError:
            got_args = fcs[0].get("arguments")
        if got_args != want_args:
            problems.append(f"function_call arguments {fcs[0].get('arguments')!r}, want {arguments!r}")
    fcos = [it for it in items if it.get("type") == "function_call_output" and it.get("call_id") == call_id]
    if len(fcos) != 1 or output not in _text_of(fcos[0].get("output")):
        problems.append(f"function_call_output items for {call_id!r}: {fcos}, want one containing {output!r}")
    if text is not None:
        msgs = [it for it in items if it.get("role") == "assistant" and it.get("type", "message") == "message"]
        if not any(text in _text_of(m.get("content")) for m in msgs):
            problems.append(f"turn-1 text {text!r} in no assistant message item: {msgs}")
    if reasoning is not None:
        rs = [it for it in items if it.get("type") == "reasoning"]
        texts = [_text_of(it.get("summary")) or _text_of(it.get("content")) for it in rs]
        if reasoning not in texts:
            problems.append(f"reasoning items {rs}, want one with the text {reasoning!r}")
    return problems


def _gate(kind: str, problems: Callable[[dict], list[str]], final: str, model: str, **quirks) -> Turn:
    """Turn 2: ``final`` when ``problems(request)`` is empty, else PREDICATE-MISS naming them."""
    mk = chat_turn if kind == "chat" else responses_turn

    def respond(req: dict) -> Turn:
        found = problems(req)
        text = final if not found else "PREDICATE-MISS: " + "; ".join(found)
        return mk(model=model, text=text, label="final" if not found else "miss", **quirks)

    # ``when`` only records the outcome (Recorded.matched); both branches build from the request
    return Turn(respond=respond, when=lambda req: not problems(req), otherwise=Turn(respond=respond), label="final")


# --------------------------------------------------------------------------- scenarios


def exec_problems(kind: str, *, reasoning: bool) -> Callable[[dict], list[str]]:
    """Turn 2's check for ``exec_turns`` (``reasoning``: the client can send reasoning back)."""
    return lambda req: history_problems(
        req,
        kind,
        call_id=EXEC_CALL_ID,
        tool=EXEC_TOOL["name"],
        arguments=sc.EXEC_ARGS,
        output=EXEC_TOOL["output"],
        text=STEP1_TEXT,
        reasoning=STEP1_REASONING if reasoning else None,
    )


def exec_turns(kind: str, *, model: str, reasoning: bool, mantle: bool = False) -> list[Turn]:
    """Turn 1: reasoning + text + ``exec_command``; turn 2: ``FINAL_TEXT`` behind the check.
    ``kind``: the upstream protocol; ``mantle``: Bedrock-Mantle id-less items (Responses)."""
    quirks = {"mantle": True} if mantle else {}
    mk = chat_turn if kind == "chat" else responses_turn
    return [
        mk(
            model=model,
            reasoning=STEP1_REASONING,
            text=STEP1_TEXT,
            tool_calls=[ToolCall(EXEC_TOOL["name"], sc.EXEC_ARGS, id=EXEC_CALL_ID)],
            label="reasoning + text + exec_command",
            **quirks,
        ),
        _gate(kind, exec_problems(kind, reasoning=reasoning), FINAL_TEXT, model, **quirks),
    ]


def mimo_problems(*, reasoning: bool) -> Callable[[dict], list[str]]:
    return lambda req: history_problems(
        req,
        "chat",
        call_id=MIMO_CALL_ID,
        tool=PATCH_TOOL["name"],
        arguments=json.dumps({"input": sc.RAW_PATCH}),
        output=sc.PATCH_FILE,
        reasoning=MIMO_REASONING if reasoning else None,
    )


def mimo_patch_turns(*, model: str = "mimo-v2.6-flash", reasoning: bool) -> list[Turn]:
    """MiMo Chat upstream: reasoning + ``apply_patch`` with the RAW patch as arguments (in
    5-byte argument pieces, 3-byte transport writes); turn 2: the call came back as
    ``{"input": raw}``, the output under its id (and, ``reasoning``, the reasoning)."""
    return [
        chat_turn(
            model=model,
            reasoning=MIMO_REASONING,
            chunk_size=5,
            rechunk=3,
            tool_calls=[ToolCall(PATCH_TOOL["name"], sc.RAW_PATCH, id=MIMO_CALL_ID)],
            label="raw apply_patch",
        ),
        _gate("chat", mimo_problems(reasoning=reasoning), MIMO_FINAL, model),
    ]
