"""Scenario scripts for the e2e suite (also playable by ``scripted_upstream.py --scenario``).

Theory of operation
-------------------
Each scenario is a function returning a list of ``Turn``s for the scripted upstream.  The
constants next to it are what the tests assert (final text, expected file bytes, ids).
Turn 2 of every tool scenario carries a predicate on the replayed history (the tool ran
and its output came back under the right id); when it is not met the upstream plays a
fallback turn whose text starts with ``PREDICATE-MISS`` (or, for Kimi, a reasoning-only
empty turn, like self-hosted Kimi K2 does when it does not recognise its own ids).
"""

from __future__ import annotations

from collections.abc import Callable

from scripted_upstream import (
    ToolCall,
    Turn,
    chat_chunks,
    chat_history_carries_id,
    chat_turn,
    reasoning_only_chat_turn,
    responses_turn,
    with_keepalives,
)

# --------------------------------------------------------------------------- predicates


def tool_outputs(req: dict) -> dict[str, str]:
    """call id -> tool output text, from a Chat or a Responses request."""
    out: dict[str, str] = {}
    for m in req.get("messages") or []:
        if m.get("role") == "tool":
            c = m.get("content")
            if isinstance(c, list):
                c = "".join(p.get("text", "") for p in c if isinstance(p, dict))
            out[m.get("tool_call_id")] = c or ""
    inp = req.get("input")
    for it in inp if isinstance(inp, list) else []:
        if it.get("type") in ("function_call_output", "custom_tool_call_output"):
            o = it.get("output")
            if isinstance(o, list):
                o = "".join(p.get("text", "") for p in o if isinstance(p, dict))
            elif isinstance(o, dict):  # older shape {content, success}
                o = o.get("content", "")
            out[it.get("call_id")] = o or ""
    return out


def tool_output_contains(call_id: str, needle: str) -> Callable[[dict], bool]:
    def pred(req: dict) -> bool:
        return needle in tool_outputs(req).get(call_id, "")

    return pred


def all_of(*preds: Callable[[dict], bool]) -> Callable[[dict], bool]:
    return lambda req: all(p(req) for p in preds)


def miss(kind: str, label: str) -> Turn:
    text = f"PREDICATE-MISS: {label}"
    return chat_turn(text=text, label=text) if kind == "chat" else responses_turn(text=text, label=text)


# --------------------------------------------------------------------------- shared content

EXEC_MARKER = "switchboard-e2e-exec-ok"
EXEC_FILE = "exec_out.txt"
EXEC_CMD = f"printf '%s' '{EXEC_MARKER}' > {EXEC_FILE} && cat {EXEC_FILE}"
EXEC_ARGS = '{"cmd":"' + EXEC_CMD.replace("\\", "\\\\").replace('"', '\\"') + '"}'

PATCH_FILE = "mimo_notes.txt"
PATCH_LINES = [
    "你好，世界 🌏 — \"double\" and 'single' quotes",
    "back\\slash \\\\ two, literal \\n and \\u00e9 stay text",
    "tab\there ✓ émoji 🚀 ｆｕｌｌ-width",
    '{"json": [1, 2.50, null]}',
]
RAW_PATCH = (
    "*** Begin Patch\n*** Add File: "
    + PATCH_FILE
    + "\n"
    + "".join("+" + line + "\n" for line in PATCH_LINES)
    + "*** End Patch"
)
PATCH_EXPECTED_BYTES = "".join(line + "\n" for line in PATCH_LINES).encode("utf-8")


def big_patch_lines(target_bytes: int = 20_000) -> list[str]:
    """> 16 KiB of patch lines with CJK, emoji, quotes, backslashes and tabs (T3-3 shape)."""
    pieces = ["行{i:04d}: 中文字符 🧪 \"q\" 'a' back\\slash \\n\ttab ✓ ｚ", 'line {i:04d} {{"k": [1, "v\\u0041"]}} 🚀']
    lines, size, i = [], 0, 0
    while size < target_bytes:
        line = pieces[i % 2].format(i=i)
        lines.append(line)
        size += len(line.encode()) + 2
        i += 1
    return lines


def make_patch(path: str, lines: list[str]) -> tuple[str, bytes]:
    raw = (
        "*** Begin Patch\n*** Add File: " + path + "\n" + "".join("+" + line + "\n" for line in lines) + "*** End Patch"
    )
    return raw, "".join(line + "\n" for line in lines).encode("utf-8")


BIG_PATCH_FILE = "big_notes.txt"
BIG_RAW_PATCH, BIG_PATCH_EXPECTED_BYTES = make_patch(BIG_PATCH_FILE, big_patch_lines())

FINAL_TEXT = {
    "exec": "All done: the command ran and printed the marker.",
    "patch": "Patched: 文件已创建 ✓",
    "kimi": "Kimi saw its own call functions.exec_command:0 and finished.",
    "mantle": "Mantle finished after the tool ran.",
    "late": "Late identity resolved; tool ran.",
    "json_patch": "JSON-wrapped patch applied.",
}

KIMI_ID = "functions.exec_command:0"


# --------------------------------------------------------------------------- Codex scenarios


def codex_chat_exec(model: str = "e2e-chat") -> list[Turn]:
    """(a) Chat upstream: exec_command, then the final text once the output came back."""
    cid = "call_exec_a1"
    return [
        chat_turn(
            model=model,
            reasoning="Run the command first.",
            text="",
            tool_calls=[ToolCall("exec_command", EXEC_ARGS, id=cid)],
            label="exec call",
        ),
        chat_turn(
            model=model,
            text=FINAL_TEXT["exec"],
            label="final",
            when=tool_output_contains(cid, EXEC_MARKER),
            otherwise=miss("chat", "exec output missing"),
        ),
    ]


def codex_responses_exec(model: str = "e2e-resp") -> list[Turn]:
    """Direct-harness twin of (a) on a Responses upstream."""
    cid = "call_exec_r1"
    return [
        responses_turn(model=model, tool_calls=[ToolCall("exec_command", EXEC_ARGS, id=cid)], label="exec call"),
        responses_turn(
            model=model,
            text=FINAL_TEXT["exec"],
            label="final",
            when=tool_output_contains(cid, EXEC_MARKER),
            otherwise=miss("responses", "exec output missing"),
        ),
    ]


def codex_mimo_patch(model: str = "mimo-v2.6-flash", *, big: bool = False, rechunk: int = 0) -> list[Turn]:
    """(b) MiMo: apply_patch with the RAW patch text in function.arguments (not JSON).
    ``big``: a > 16 KiB patch; ``rechunk``: the upstream's bytes arrive in n-byte writes."""
    cid = "call_patch_b1"
    raw, path = (BIG_RAW_PATCH, BIG_PATCH_FILE) if big else (RAW_PATCH, PATCH_FILE)
    return [
        chat_turn(
            model=model,
            reasoning="I will add the notes file.",
            chunk_size=97 if big else 5,
            rechunk=rechunk,
            tool_calls=[ToolCall("apply_patch", raw, id=cid)],
            label="raw apply_patch",
        ),
        chat_turn(
            model=model,
            text=FINAL_TEXT["patch"],
            label="final",
            when=tool_output_contains(cid, path),
            otherwise=miss("chat", "apply_patch output missing"),
        ),
    ]


def codex_chat_json_patch(model: str = "e2e-chat") -> list[Turn]:
    """(a2, T3-2) non-MiMo Chat upstream: apply_patch arguments JSON-wrapped {"input": raw},
    with SSE keepalive comments between frames."""
    import json

    cid = "call_patch_a2"
    return [
        with_keepalives(
            chat_turn(
                model=model,
                chunk_size=11,
                label="json apply_patch",
                tool_calls=[ToolCall("apply_patch", json.dumps({"input": RAW_PATCH}, ensure_ascii=False), id=cid)],
            )
        ),
        chat_turn(
            model=model,
            text=FINAL_TEXT["json_patch"],
            label="final",
            when=tool_output_contains(cid, PATCH_FILE),
            otherwise=miss("chat", "apply_patch output missing"),
        ),
    ]


def codex_responses_patch(model: str = "e2e-resp") -> list[Turn]:
    """Direct-harness twin of (b): a proper custom_tool_call from a Responses upstream."""
    cid = "call_patch_r1"
    return [
        responses_turn(
            model=model,
            tool_calls=[ToolCall("apply_patch", RAW_PATCH, id=cid, custom=True)],
            label="custom apply_patch",
        ),
        responses_turn(
            model=model,
            text=FINAL_TEXT["patch"],
            label="final",
            when=tool_output_contains(cid, PATCH_FILE),
            otherwise=miss("responses", "apply_patch output missing"),
        ),
    ]


def codex_kimi_ids(model: str = "kimi-k2.6") -> list[Turn]:
    """(c) Kimi: id functions.exec_command:0 must come back verbatim on both sides, else
    Kimi answers with reasoning only (the #520 failure)."""
    return [
        chat_turn(
            model=model,
            reasoning="The user wants the command run.",
            frame_delay=0.01,
            tool_calls=[ToolCall("exec_command", EXEC_ARGS, id=KIMI_ID)],
            label="kimi call",
        ),
        chat_turn(
            model=model,
            reasoning="The command ran.",
            text=FINAL_TEXT["kimi"],
            label="final",
            when=chat_history_carries_id(KIMI_ID),
            otherwise=reasoning_only_chat_turn(model=model),
        ),
    ]


def codex_mantle(model: str = "openai.gpt-oss-120b") -> list[Turn]:
    """(d) Bedrock Mantle: done items without id (item_id + stray output_index), completed.output id-less."""
    cid = "call_mantle_d1"
    return [
        responses_turn(
            model=model,
            reasoning="Need to run it.",
            mantle=True,
            tool_calls=[ToolCall("exec_command", EXEC_ARGS, id=cid)],
            label="mantle call",
        ),
        responses_turn(
            model=model,
            text=FINAL_TEXT["mantle"],
            mantle=True,
            label="final",
            when=tool_output_contains(cid, EXEC_MARKER),
            otherwise=miss("responses", "exec output missing"),
        ),
    ]


def codex_late_identity(model: str = "e2e-late") -> list[Turn]:
    """(e) function_call added without name; the name arrives only in arguments.done / output_item.done."""
    cid = "call_late_e1"
    return [
        responses_turn(
            model=model,
            late_identity=True,
            tool_calls=[ToolCall("exec_command", EXEC_ARGS, id=cid)],
            label="late identity call",
        ),
        responses_turn(
            model=model,
            text=FINAL_TEXT["late"],
            label="final",
            when=tool_output_contains(cid, EXEC_MARKER),
            otherwise=miss("responses", "exec output missing"),
        ),
    ]


BAD_ARGS = '{"cmd":"echo a\x01b"}'  # a raw control byte inside a JSON string: invalid JSON
PARSE_ERROR = "failed to parse function arguments"
MIXED_FINAL = "One call failed to parse, the other ran."


def codex_mimo_invalid_json(kind: str = "chat", model: str = "mimo-v2.6-flash") -> list[Turn]:
    """(h, T3-9) mixed batch: call 0 has invalid JSON arguments (raw U+0001), call 1 is
    valid.  The invalid text must reach Codex byte for byte as function_call.arguments so
    Codex answers the model with a parse error and the turn goes on; call 1 runs."""
    bad, good = "call_bad_h0", "call_good_h1"
    calls = [ToolCall("exec_command", BAD_ARGS, id=bad), ToolCall("exec_command", EXEC_ARGS, id=good)]
    mk = chat_turn if kind == "chat" else responses_turn
    return [
        mk(model=model, tool_calls=calls, label="mixed batch"),
        mk(
            model=model,
            text=MIXED_FINAL,
            label="final",
            when=all_of(tool_output_contains(bad, PARSE_ERROR), tool_output_contains(good, EXEC_MARKER)),
            otherwise=miss(kind, "parse error / exec output missing"),
        ),
    ]


UPSTREAM_400 = {
    "error": {
        "message": "scripted upstream says: context too long for this deployment",
        "type": "invalid_request_error",
        "code": "invalid_request",
        "param": None,
    }
}


def codex_upstream_400(model: str = "e2e-chat") -> list[Turn]:
    """(i) the upstream refuses with HTTP 400 before streaming: deterministic, Codex must not retry."""
    return [
        Turn(body=UPSTREAM_400, status=400, label="HTTP 400"),
        chat_turn(model=model, text="PREDICATE-MISS: retried a 400"),
        chat_turn(model=model, text="PREDICATE-MISS: retried a 400"),
    ]


RUNS_FILE = "runs.txt"
RUNS_ARGS = '{"cmd":"printf \'run\\n\' >> ' + RUNS_FILE + " && cat " + RUNS_FILE + '"}'
RETRY_FINAL = "Recovered after the upstream dropped the stream."


def codex_truncated_then_retry(model: str = "e2e-chat") -> list[Turn]:
    """(j) turn 1: the upstream streams a complete-looking tool call, then drops the
    connection (no finish_reason, no [DONE]).  The proxy must fail that response (Codex
    reconnects) WITHOUT handing Codex the half-finished call; the retry gets the full call,
    then the final text.  The command must run exactly once."""
    cid = "call_retry_j1"
    full = chat_chunks(model=model, tool_calls=[ToolCall("exec_command", RUNS_ARGS, id=cid)])
    cut = [
        f
        for f in full
        if not (isinstance(f, dict) and (f.get("usage") or any(c.get("finish_reason") for c in f.get("choices", []))))
    ]
    cut = [f for f in cut if not isinstance(f, str)]  # no [DONE]
    return [
        Turn(frames=cut, kind="chat", label="dropped stream"),
        chat_turn(model=model, tool_calls=[ToolCall("exec_command", RUNS_ARGS, id=cid)], label="retry: tool call"),
        chat_turn(
            model=model,
            text=RETRY_FINAL,
            label="final",
            when=tool_output_contains(cid, "run\n"),
            otherwise=miss("chat", "retry output missing"),
        ),
    ]


NS = "multi_agent_v1"
NS_TOOL = "close_agent"
NS_ARGS = '{"target":"agent-that-does-not-exist"}'
NS_FINAL = "Namespace tool routed back to Codex."


def tool_output_routed(call_id: str) -> Callable[[dict], bool]:
    """The call reached a real handler: an output came back and it is not Codex's
    "unsupported call" answer for a name it could not route."""

    def pred(req: dict) -> bool:
        out = tool_outputs(req).get(call_id)
        return out is not None and "unsupported call" not in out

    return pred


def _advertised_name(req: dict, ns: str, name: str) -> tuple[str, str | None]:
    """(name, namespace) under which the request offers ``ns``/``name``: a Responses
    namespace tool as is, or on Chat the flattened function whose name holds both parts."""
    for t in req.get("tools") or []:
        if t.get("type") == "namespace" and t.get("name") == ns:
            if any(c.get("name") == name for c in t.get("tools") or []):
                return name, ns
        fn = t.get("function") or {}
        if t.get("type") == "function" and ns in fn.get("name", "") and fn["name"].endswith(name):
            return fn["name"], None
    raise LookupError(
        f"{ns}/{name} not offered; tools: {[t.get('name') or (t.get('function') or {}).get('name') for t in req.get('tools') or []]}"
    )


def codex_namespace_call(kind: str = "chat", model: str = "e2e-chat") -> list[Turn]:
    """(g) Codex namespace tool (multi_agent_v1/close_agent, offered when the model has no
    tool_search): the upstream calls it under the advertised (flattened on Chat) name; the
    proxy must hand Codex namespace + name so Codex routes it (not "unsupported call")."""
    cid = "call_ns_g1"

    def first(req: dict) -> Turn:
        name, ns = _advertised_name(req, NS, NS_TOOL)
        if kind == "chat":
            return chat_turn(model=model, tool_calls=[ToolCall(name, NS_ARGS, id=cid)], label="namespace call")
        return responses_turn(
            model=model, tool_calls=[ToolCall(name, NS_ARGS, id=cid, namespace=ns)], label="namespace call"
        )

    final = (chat_turn if kind == "chat" else responses_turn)(
        model=model,
        text=NS_FINAL,
        label="final",
        when=tool_output_routed(cid),
        otherwise=miss(kind, "namespace call not routed"),
    )
    return [Turn(respond=first, label="namespace call"), final]


# --------------------------------------------------------------------------- SDK / kosong scenarios

SDK_TEXT = "Reading both files now — 两个文件 ✓"
SDK_REASONING = "The user asked for a.py and b.py; read them in parallel."
SDK_CALLS = [
    ToolCall("read_file", '{"path":"a.py","limit":9007199254740993}', id="call_sdk_1"),
    ToolCall("read_file", '{"path":"dir/b \\"q\\".py"}', id="call_sdk_2"),
]
SDK_TOOLS_CHAT = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["path"],
            },
        },
    },
]
SDK_TOOLS_RESPONSES = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Read a file.",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["path"],
        },
    },
]


def sdk_parallel(kind: str, model: str = "e2e-sdk", **quirks) -> list[Turn]:
    """One turn: reasoning, text, 2 parallel read_file calls. ``quirks`` (Responses only):
    ``mantle=True`` / ``late_identity=True``."""
    mk = chat_turn if kind == "chat" else responses_turn
    return [
        mk(
            model=model,
            reasoning=SDK_REASONING,
            text=SDK_TEXT,
            tool_calls=list(SDK_CALLS),
            label="parallel calls",
            **quirks,
        )
    ]


KOSONG_IDS = ["functions.Read:0", "functions.Read:1"]
KOSONG_CALLS = [
    ToolCall("Read", '{"path":"src/main.py"}', id=KOSONG_IDS[0]),
    ToolCall("Read", '{"path":"README.md","line_offset":10}', id=KOSONG_IDS[1]),
]
KOSONG_REASONING = "Two files to read; call Read twice."
KOSONG_FINAL = "Both files read; 完成。"


def kosong_kimi(kind: str = "chat", model: str = "kimi-k2.6") -> list[Turn]:
    mk = chat_turn if kind == "chat" else responses_turn
    pred = all_of(chat_history_carries_id(KOSONG_IDS[0]), chat_history_carries_id(KOSONG_IDS[1]))
    fallback = reasoning_only_chat_turn(model=model) if kind == "chat" else responses_turn(model=model, reasoning="??")
    return [
        mk(model=model, reasoning=KOSONG_REASONING, tool_calls=list(KOSONG_CALLS), label="parallel Read"),
        mk(model=model, reasoning="Done reading.", text=KOSONG_FINAL, label="final", when=pred, otherwise=fallback),
    ]


# --------------------------------------------------------------------------- Kimi Code scenario

KIMI_CODE_ID = "functions.Bash:0"  # what a Kimi upstream calls its first Bash call
KIMI_CODE_SANITISED = "functions_Bash_0"  # what Kimi Code 2.x sends back (sanitizeToolCallId)
KIMI_CODE_MARKER = "switchboard-e2e-kimi-code-ok"
KIMI_CODE_FILE = "kimi_code_out.txt"
KIMI_CODE_CMD = f"printf '%s' '{KIMI_CODE_MARKER}' > {KIMI_CODE_FILE} && cat {KIMI_CODE_FILE}"
KIMI_CODE_REASONING = "The user wants the marker file; run it with Bash."
KIMI_CODE_FINAL = "Kimi Code sent functions.Bash:0 back; 完成 ✓"


def kimi_code_bash(model: str = "kimi-k2.6") -> list[Turn]:
    """Kimi Code 2.x: a Kimi-like Chat upstream calls ``Bash`` as ``functions.Bash:0`` with
    reasoning; turn 2 answers only if the history carries that id verbatim on the call and
    on its tool message and the output came back, else reasoning only (what Kimi K2 does
    with a sanitised history; Kimi Code then stops with an empty-response error)."""
    import json

    args = json.dumps({"command": KIMI_CODE_CMD, "description": "write the marker file"})
    return [
        chat_turn(
            model=model,
            reasoning=KIMI_CODE_REASONING,
            tool_calls=[ToolCall("Bash", args, id=KIMI_CODE_ID)],
            label="kimi Bash call",
        ),
        chat_turn(
            model=model,
            reasoning="The file is written.",
            text=KIMI_CODE_FINAL,
            label="final",
            when=all_of(chat_history_carries_id(KIMI_CODE_ID), tool_output_contains(KIMI_CODE_ID, KIMI_CODE_MARKER)),
            otherwise=reasoning_only_chat_turn(model=model),
        ),
    ]


KIMI_CODE_MULTI_IDS = ["functions.Bash:0", "functions.Bash:1", "functions.Bash:2"]
KIMI_CODE_MULTI_REASONING = ["Two files first, in parallel.", "Now join them."]
KIMI_CODE_MULTI_FILE = "ab.txt"
KIMI_CODE_MULTI_FINAL = "Joined a and b after three Bash calls."


def kimi_code_multi(model: str = "kimi-k2.6") -> list[Turn]:
    """Kimi Code 2.x, three turns: two parallel ``Bash`` calls (``functions.Bash:0`` and
    ``:1``), then a third (``functions.Bash:2``) once both ids came back, then the final
    text once all three did and the join ran; any miss answers reasoning only."""
    import json

    def bash(cmd: str, i: int) -> ToolCall:
        return ToolCall("Bash", json.dumps({"command": cmd}), id=KIMI_CODE_MULTI_IDS[i])

    ids = [chat_history_carries_id(i) for i in KIMI_CODE_MULTI_IDS]
    return [
        chat_turn(
            model=model,
            reasoning=KIMI_CODE_MULTI_REASONING[0],
            tool_calls=[bash("printf a > a.txt && cat a.txt", 0), bash("printf b > b.txt && cat b.txt", 1)],
            label="two parallel Bash calls",
        ),
        chat_turn(
            model=model,
            reasoning=KIMI_CODE_MULTI_REASONING[1],
            tool_calls=[bash(f"cat a.txt b.txt > {KIMI_CODE_MULTI_FILE} && cat {KIMI_CODE_MULTI_FILE}", 2)],
            label="third Bash call",
            when=all_of(ids[0], ids[1]),
            otherwise=reasoning_only_chat_turn(model=model),
        ),
        chat_turn(
            model=model,
            text=KIMI_CODE_MULTI_FINAL,
            label="final",
            when=all_of(*ids, tool_output_contains(KIMI_CODE_MULTI_IDS[2], "ab")),
            otherwise=reasoning_only_chat_turn(model=model),
        ),
    ]


SCENARIOS: dict[str, Callable[[], list[Turn]]] = {
    "codex-chat-exec": codex_chat_exec,
    "codex-responses-exec": codex_responses_exec,
    "codex-mimo-patch": codex_mimo_patch,
    "codex-mimo-big-patch": lambda: codex_mimo_patch(big=True, rechunk=5),
    "codex-chat-json-patch": codex_chat_json_patch,
    "codex-responses-patch": codex_responses_patch,
    "codex-kimi-ids": codex_kimi_ids,
    "codex-mantle": codex_mantle,
    "codex-late-identity": codex_late_identity,
    "codex-namespace-chat": lambda: codex_namespace_call("chat"),
    "codex-mimo-invalid-json": codex_mimo_invalid_json,
    "codex-upstream-400": codex_upstream_400,
    "codex-truncated-then-retry": codex_truncated_then_retry,
    "sdk-chat": lambda: sdk_parallel("chat"),
    "sdk-responses": lambda: sdk_parallel("responses"),
    "kosong-kimi-chat": lambda: kosong_kimi("chat"),
    "kosong-kimi-responses": lambda: kosong_kimi("responses"),
    "kimi-code-bash": kimi_code_bash,
    "kimi-code-multi": kimi_code_multi,
}
