"""Codex 0.171 code mode: scripts for the scripted upstream and what the tests assert.

Theory of operation
-------------------
A model whose catalogue entry sets ``use_responses_lite: true`` and ``tool_mode:
"code_mode_only"`` (Codex 0.171's embedded ``gpt-6.x`` / ``gpt-5.6-*`` slugs, or any slug
through ``model_catalog_json``) gets no top-level ``tools``: ``input[0]`` is an
``additional_tools`` item whose ``functions`` namespace holds the one freeform tool ``exec``
(JavaScript run by Codex in a V8 isolate; the nested tools such as ``exec_command`` are
``tools.<name>(...)`` inside the script), plus ``wait`` and ``request_user_input``.

Every script here has two turns:

1. the model calls ``exec`` with ``EXEC_SCRIPT`` (``tools.exec_command`` running ``echo
   <MARKER>``).  On a Responses upstream that is a ``custom_tool_call`` (``name: "exec"``,
   ``namespace: "functions"``, ``input``: the script).  On a Chat upstream it is a function
   call under the name the proxy advertised for ``functions``/``exec`` (read from the
   request: ``chat_exec_tool``), with the arguments ``{"<param>": script}``: the proxy
   presents a custom tool as a function of one required string parameter.  The turn is
   played only if the request offers ``exec`` where this upstream looks for it
   (``when``), else the upstream answers ``PREDICATE-MISS: …``;
2. the final text ``FINAL_TEXT``, played only if the command's output (the marker) came
   back as the output of that call id, else ``PREDICATE-MISS: …`` (a Kimi-like upstream:
   reasoning only, as Kimi does when it does not recognise its own call id).

``RefusingWebSocketUpstream`` is the scripted upstream answering every WebSocket handshake
``426``, so Codex's built-in provider falls back to HTTP at once when it talks to the
upstream directly (a plain ``ScriptedUpstream`` refuses with 403, which Codex retries for
about 6 s first).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

from scenarios import miss, tool_outputs
from scripted_upstream import ScriptedUpstream, ToolCall, Turn, chat_history_carries_id, chat_turn, responses_turn
from starlette.responses import PlainTextResponse
from starlette.routing import WebSocketRoute

CODE_MODE_VERSION = "0.171.0"
CODE_MODE_SLUG = "gpt-5.6-sol"  # embedded in Codex 0.171 with use_responses_lite + code_mode_only
CUSTOM_SLUG = "kimi-k2.6"  # code mode only through a custom catalogue entry
CODE_MODE_FLAGS = {"use_responses_lite": True, "tool_mode": "code_mode_only"}

NS = "functions"  # the namespace of exec inside additional_tools
EXEC = "exec"
MARKER = "switchboard-e2e-code-mode-ok"
EXEC_SCRIPT = f'const r = await tools.exec_command({{cmd: "echo {MARKER}"}});\ntext(JSON.stringify(r));'
CALL_ID = "call_code_mode_1"
FINAL_TEXT = "Code mode: exec ran echo through tools.exec_command; 完成 ✓"
REASONING = "Run the echo inside exec."


def kimi_call_id(flat_name: str) -> str:
    """What a Kimi upstream calls its first call of ``flat_name``."""
    return f"functions.{flat_name}:0"


# --------------------------------------------------------------------------- where exec is offered


def additional_tools_items(req: dict) -> list[dict]:
    inp = req.get("input")
    return (
        [i for i in inp if isinstance(i, dict) and i.get("type") == "additional_tools"] if isinstance(inp, list) else []
    )


def _ns_children(tools: list, ns: str = NS) -> list[dict]:
    return [
        c for t in tools or [] if t.get("type") == "namespace" and t.get("name") == ns for c in t.get("tools") or []
    ]


def responses_exec_tool(req: dict, *, where: str) -> dict | None:
    """The ``functions``/``exec`` custom tool of a Responses request, looked for in the
    ``additional_tools`` item (``where="additional_tools"``: what Codex sends) or in the
    top-level ``tools`` (``where="tools"``: what a non-OpenAI upstream must get)."""
    if where == "additional_tools":
        pool = [c for it in additional_tools_items(req) for c in _ns_children(it.get("tools"))]
    else:
        pool = _ns_children(req.get("tools"))
    return next((c for c in pool if c.get("type") == "custom" and c.get("name") == EXEC), None)


def chat_exec_tool(req: dict) -> tuple[str, str]:
    """(advertised name, its one string parameter) of ``functions``/``exec`` on a Chat
    request: the function whose name carries both parts (``scenarios._advertised_name``'s
    rule; bare ``exec`` is accepted too) and whose parameters are one required string."""
    found = []
    for t in req.get("tools") or []:
        fn = t.get("function") or {}
        name = fn.get("name") or ""
        if t.get("type") == "function" and (name == EXEC or (NS in name and name.endswith(EXEC))):
            found.append(fn)
    if len(found) != 1:
        names = [(t.get("function") or {}).get("name") for t in req.get("tools") or []]
        raise LookupError(f"{NS}/{EXEC} offered {len(found)} times on Chat; tools: {names}")
    params = found[0].get("parameters") or {}
    required = params.get("required") or []
    props = params.get("properties") or {}
    if len(required) != 1 or (props.get(required[0]) or {}).get("type") != "string":
        raise LookupError(f"{found[0]['name']} is not a one-string function: {json.dumps(params)[:300]}")
    return found[0]["name"], required[0]


def chat_offers_exec(req: dict) -> bool:
    try:
        chat_exec_tool(req)
    except LookupError:
        return False
    return True


def responses_offers_exec(where: str) -> Callable[[dict], bool]:
    def pred(req: dict) -> bool:
        if responses_exec_tool(req, where=where) is None:
            return False
        # hoisted: the item is gone, nothing else of it stays in the input
        return where == "additional_tools" or not additional_tools_items(req)

    return pred


def output_carries_marker(call_id: str) -> Callable[[dict], bool]:
    def pred(req: dict) -> bool:
        return MARKER in tool_outputs(req).get(call_id, "")

    return pred


# --------------------------------------------------------------------------- turns


def with_namespace(turn: Turn, namespace: str = NS) -> Turn:
    """``responses_turn``'s custom_tool_call items (stream frames and body) with ``namespace``."""

    def fix(obj):
        if isinstance(obj, dict):
            if obj.get("type") == "custom_tool_call":
                obj["namespace"] = namespace
            for v in obj.values():
                fix(v)
        elif isinstance(obj, list):
            for v in obj:
                fix(v)

    turn.frames = copy.deepcopy(turn.frames)
    turn.body = copy.deepcopy(turn.body)
    fix(turn.frames)
    fix(turn.body)
    return turn


def code_mode_responses(model: str = CODE_MODE_SLUG, *, where: str = "tools") -> list[Turn]:
    """A Responses upstream: ``exec`` as a namespaced custom_tool_call, then the final text.
    ``where``: where turn 1 expects ``exec`` (``"tools"`` behind the proxy, hoisted;
    ``"additional_tools"`` straight from Codex)."""
    call = ToolCall(EXEC, EXEC_SCRIPT, id=CALL_ID, custom=True)
    return [
        with_namespace(
            responses_turn(
                model=model,
                reasoning=REASONING,
                tool_calls=[call],
                label="exec call",
                when=responses_offers_exec(where),
                otherwise=miss("responses", f"exec not offered in {where}"),
            )
        ),
        responses_turn(
            model=model,
            text=FINAL_TEXT,
            label="final",
            when=output_carries_marker(CALL_ID),
            otherwise=miss("responses", "exec output missing"),
        ),
    ]


def code_mode_chat(model: str = CODE_MODE_SLUG, *, kimi: bool = False) -> list[Turn]:
    """A Chat upstream: a function call of the advertised ``exec`` with ``{param: script}``,
    then the final text.  ``kimi``: the call id is ``functions.<flat>:0`` and must come back
    verbatim on the call and on its tool message, else the answer is reasoning only."""
    state: dict[str, str] = {}

    def first(req: dict) -> Turn:
        name, param = chat_exec_tool(req)
        state["name"] = name
        state["id"] = kimi_call_id(name) if kimi else CALL_ID
        args = json.dumps({param: EXEC_SCRIPT}, ensure_ascii=False)
        return chat_turn(
            model=model, reasoning=REASONING, tool_calls=[ToolCall(name, args, id=state["id"])], label="exec call"
        )

    def came_back(req: dict) -> bool:
        cid = state.get("id", CALL_ID)
        ok = output_carries_marker(cid)(req)
        return ok and (not kimi or chat_history_carries_id(cid)(req))

    fallback = (
        chat_turn(model=model, reasoning="I do not recognise that call.", text="", label="reasoning-only")
        if kimi
        else miss("chat", "exec output missing")
    )
    return [
        Turn(
            respond=first,
            when=chat_offers_exec,
            otherwise=miss("chat", "exec not offered as a one-string function"),
            label="exec call",
        ),
        chat_turn(model=model, text=FINAL_TEXT, label="final", when=came_back, otherwise=fallback),
    ]


# --------------------------------------------------------------------------- upstream


class RefusingWebSocketUpstream(ScriptedUpstream):
    """The scripted upstream, answering WebSocket handshakes 426 (counted in ``ws_refused``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ws_refused = 0
        self.app.router.routes.insert(0, WebSocketRoute("/{path:path}", self._refuse_websocket))

    async def _refuse_websocket(self, websocket) -> None:
        self.ws_refused += 1
        await websocket.send_denial_response(PlainTextResponse("upgrade required", status_code=426))


SCENARIOS: dict[str, Callable[[], list[Turn]]] = {
    "codex-code-mode-responses": code_mode_responses,
    "codex-code-mode-direct": lambda: code_mode_responses(where="additional_tools"),
    "codex-code-mode-chat": code_mode_chat,
    "codex-code-mode-kimi": lambda: code_mode_chat(CUSTOM_SLUG, kimi=True),
}
