"""Per-request context shared by request translation and the stream stages.

Theory of operation
-------------------
A request is translated once, at the edge; what the stream stages later need to know about
it is captured here, as plain data computed from the request alone (docs/rules.md, "Stateless": any
instance can serve any turn, so nothing here lives beyond the request):

* ``ToolInfo``: which tool names the upstream sees, and what each one really is — a plain
  function, a Responses ``custom`` tool presented as a one-string function, a namespaced
  function flattened to one name, or a function (offered over either protocol) with exactly
  one required string parameter (the R3-a′ ``apply_patch`` shape, ``one_string_param``).
* ``Ctx``: the quirk names switched on for this (provider, model), the upstream model
  name, defaults from the model catalogue, and the ``repairs`` list that every stage
  appends a rule name to when it changes something (the app turns it into counters and a
  debug log line; transformers do no logging).  Rule names are a closed set, registered
  in ``transformers/repairs.py``.

Quirk names (the switches the profiles in ``providers/`` turn on; see docs/quirks.md):

=========================  ===============================================================
``mimo_raw_patch``         R3-a / R3-a′: wrap a complete raw ``*** Begin Patch`` text
``invalid_json_passthrough`` R3-b: non-JSON arguments of registered functions pass through
``mimo_request``           R3-c: max_completion_tokens, tool_choice auto, no parallel calls,
                           strict custom tools
``reasoning_replay``       R3-d / Kimi / DeepSeek: reasoning on replayed tool-call messages
                           (placeholder when unknown)
``reasoning_key_reasoning`` send replayed reasoning as ``reasoning`` (newer vLLM)
``mantle_request``         assistant content as a string; ``tool_choice:none`` → no tools
``kimi_request``           forced tool_choice → auto (thinking); max_completion_tokens
``strict_tool_ids``        tool-call ids limited to ``[A-Za-z0-9_-]`` (docs/rules.md §1 strict)
``kimi_tool_ids``          client-sanitised Kimi ids (``functions_Read_0``) put back to the
                           native ``functions.Read:0`` before a Chat upstream (docs/rules.md §1)
``max_completion_tokens``  send ``max_completion_tokens`` instead of ``max_tokens``
``thinking_param``         ``reasoning.effort`` → ``thinking:{type}``
``moonshot_fields``        keep Moonshot-only message/tool fields (else they are stripped)
``strip_reasoning_envelope`` drop proxy-sealed (``pxy1.``) reasoning items before a Responses
                           upstream (on for every profile that speaks Responses)
``inline_think``           a leading ``<think>…</think>`` in Chat content is reasoning
``encrypted_content_retry`` on ``400 invalid_encrypted_content`` retry once without the
                           replayed reasoning blobs
``schema_strict_subset``   Moonshot-flavoured tool schemas: every property gets a ``type``
``schema_no_root_combinators`` no ``anyOf``/``oneOf``/``allOf``/``enum`` at a schema's root
``schema_strict_mode``     ``strict:true`` tools: ``additionalProperties:false``, all required
``developer_to_system``    Chat ``developer`` messages sent as ``system``
``system_at_head``         all system messages merged into one at the head
``native_compaction``      the upstream compacts natively (``compaction_trigger`` and its
                           ``compaction`` items pass through; transformers/compaction.py)
``responses_native``       the upstream is OpenAI's own Responses API: every item and tool
                           type passes (responses-lite, hosted calls; transformers/items.py)
``gemini_thought_signatures`` Gemini's thought signatures carried through the client and put
                           back on their calls, the escape value where none came back
                           (transformers/thought_signatures.py)
``gemini_request``         Gemini's OpenAI-compatible endpoint: the fields it refuses
                           dropped, ``reasoning_effort`` on the levels the model takes
``cache_breakpoints``      add ``cache_control`` breakpoints where the client set none, as
                           Claude Code places them (Messages upstreams that cache at them)
``cache_ttl``              the upstream reads ``cache_control.ttl`` (Anthropic); else removed
``billing_header``         the upstream is Anthropic: Claude Code's billing line goes as sent;
                           else it is removed
``prompt_cache_key``       the upstream routes by ``prompt_cache_key``: the client's goes
                           through, and one is derived per conversation when it sent none
=========================  ===============================================================
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from . import repairs as _repairs

MAX_TOOL_NAME = 64

QUIRKS = frozenset(
    {
        "mimo_raw_patch",
        "invalid_json_passthrough",
        "mimo_request",
        "reasoning_replay",
        "reasoning_key_reasoning",
        "mantle_request",
        "kimi_request",
        "strict_tool_ids",
        "kimi_tool_ids",
        "max_completion_tokens",
        "thinking_param",
        "moonshot_fields",
        "strip_reasoning_envelope",
        "inline_think",
        "encrypted_content_retry",
        "schema_strict_subset",
        "schema_no_root_combinators",
        "schema_strict_mode",
        "developer_to_system",
        "system_at_head",
        "native_compaction",
        "responses_native",
        # Messages upstreams (transformers/request_messages.py)
        "anthropic_signatures",
        "anthropic_tool_ids",
        "messages_server_tools",
        "anthropic_beta",
        # Gemini's OpenAI-compatible endpoint (transformers/thought_signatures.py, request_quirks)
        "gemini_thought_signatures",
        "gemini_request",
        # prompt caching (transformers/request_messages.py, transformers/cache_key.py)
        "cache_breakpoints",
        "cache_ttl",
        "billing_header",
        "prompt_cache_key",
    }
)


def flatten_name(namespace: str, name: str) -> str:
    """Deterministic flat name for a namespaced tool, at most 64 characters.

    ``mcp__gh__`` + ``get_me`` → ``mcp__gh__get_me``; if the namespace does not already end
    in ``_`` a ``__`` joiner is used.  When too long, the tail is replaced by ``_`` and an
    8-hex SHA-256 suffix of the full pair, so two long names never collide in practice and
    the same pair always maps to the same name (stateless across instances).
    """
    joiner = "" if namespace.endswith("_") else "__"
    flat = f"{namespace}{joiner}{name}"
    if len(flat) <= MAX_TOOL_NAME:
        return flat
    digest = hashlib.sha256(f"{namespace}\x00{name}".encode()).hexdigest()[:8]
    return flat[: MAX_TOOL_NAME - 9] + "_" + digest


def one_string_param(params: Any) -> str | None:
    """The parameter name when a function's JSON schema has exactly one required property and
    it is a string (the R3-a′ ``apply_patch`` shape, whatever the client protocol), else None."""
    if not isinstance(params, dict):
        return None
    required, props = params.get("required"), params.get("properties")
    if not (isinstance(required, list) and len(required) == 1 and isinstance(required[0], str)):
        return None
    prop = props.get(required[0]) if isinstance(props, dict) else None
    return required[0] if isinstance(prop, dict) and prop.get("type") == "string" else None


@dataclass(slots=True)
class ToolInfo:
    # upstream-visible names of plain registered functions (flattened names included)
    functions: set[str] = field(default_factory=set)
    # upstream-visible name → the original Responses custom tool definition
    custom: dict[str, dict[str, Any]] = field(default_factory=dict)
    # flattened upstream name → (namespace, name) as the client knows it
    namespaces: dict[str, tuple[str, str]] = field(default_factory=dict)
    # functions (Chat or Responses client) with exactly one required string parameter → it
    single_string_param: dict[str, str] = field(default_factory=dict)
    # hosted tools dropped on the way to a Chat upstream (reported to the client)
    dropped: list[str] = field(default_factory=list)

    def is_registered(self, name: str | None) -> bool:
        return bool(name) and (name in self.functions or name in self.custom)


@dataclass(slots=True)
class Ctx:
    quirks: frozenset[str] = frozenset()
    upstream_model: str = ""
    public_model: str = ""
    max_output_tokens: int | None = None  # catalogue default when the client sends none
    tools: ToolInfo = field(default_factory=ToolInfo)
    repairs: list[str] = field(default_factory=list)
    # secret for the proxy-sealed reasoning envelope (bytes; empty = summary text only)
    envelope_key: bytes = b""
    # secret for the compaction envelope (the server's secret, or a per-process one)
    compaction_key: bytes = b""
    # this request asks for a synthesised compaction (transformers/compaction.py)
    compaction: bool = False
    # proxy envelopes that did not open: (kind, status), for the app's metric and log
    envelope_rejected: list[tuple[str, str]] = field(default_factory=list)
    # input items dropped as named repairs, ``input[i]:<type>`` (transformers/items.py): the
    # app warns, names them in a header and never logs the turn ``completed``
    dropped_items: list[str] = field(default_factory=list)
    # top-level request fields the upstream does not get, by name (transformers/fields.py): the
    # app names them in a header, counts and logs them
    dropped_fields: list[str] = field(default_factory=list)
    # False when the request's bytes hold no proxy envelope at all (``pxy1.``: the app knows it
    # from the raw body for nothing): the passes that look for one skip their walk
    may_carry_envelopes: bool = True
    # Gemini thought signatures the request's proxy envelopes carried back (upstream call id →
    # signature), for transformers/thought_signatures.restore
    thought_signatures: dict[str, str] = field(default_factory=dict)
    # Gemini thought signatures the upstream put on the calls of a whole answer (call id →
    # (function name, signature)): the app keeps them for Chat clients that drop them
    # (app/signatures.py)
    signatures_seen: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Anthropic's signed thinking blocks of the hub body's assistant messages, by the
    # message's index in its ``messages``: set by a translator into the hub (the Chat form)
    # when the upstream's row is ``signed`` (a Messages upstream), read by ``chat_to_messages``
    # (transformers/protocols.py).  The hub's Chat body itself carries no key of the proxy's.
    signed: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    def on(self, quirk: str) -> bool:
        return quirk in self.quirks

    def repaired(self, rule: str) -> None:
        """Record that rule ``rule`` changed something.  ``rule`` must be registered in
        ``transformers/repairs.py`` (refused under ``repairs.STRICT``, as in the tests)."""
        if rule not in _repairs.NAMES:
            _repairs.unregistered(rule)
        self.repairs.append(rule)
