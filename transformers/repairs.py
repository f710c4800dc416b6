"""The registry of repair names: every rule name a stage may record with ``ctx.repaired``.

Theory of operation
-------------------
When a quirk or an always-on repair changes a request or a stream it records its rule name
(``Ctx.repaired``); the app turns the names into ``switchboard_repairs_total{rule,provider}``
counters and a debug log line.  The names are a closed set, defined once, here:

* ``Ctx.repaired`` checks every name against ``NAMES``.  An unregistered name is remembered
  in ``UNREGISTERED`` and, when ``STRICT`` is on, refused with ``KeyError``.  The test
  suite turns ``STRICT`` on and fails any test after which ``UNREGISTERED`` is not empty
  (``tests/conftest.py``), so a ``KeyError`` swallowed by a stream's failure guard still
  fails the test.  In production an unregistered name is still counted, under the
  metric's ``other`` rule label, and never breaks a request.
* ``tests/unit/test_repairs.py`` reads the source of ``transformers/`` and ``app/``: every
  name passed to ``repaired`` (or to the aliases a stage binds it to: ``rep``, ``_rep``,
  ``record``) must be a registered literal, or one of the few listed table-driven sites
  whose values it checks; every registered name must be recorded somewhere.
* ``app/metrics.py`` takes the ``rule`` label's closed set from ``NAMES``.
* ``docs/quirks.md`` documents every name, and documents no repair that is not here
  (``tests/unit/test_profiles.py``).

A rule named after a quirk (``mimo_request``, ``inline_think``…) is recorded by that
quirk; the others are always-on repairs.  ``side`` is ``request`` (the body sent upstream,
or the app's retry of it) or ``response`` (the upstream's stream or answer on its way to
the client); ``where`` names the modules that record it.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

__all__ = ["NAMES", "REPAIRS", "STRICT", "UNREGISTERED", "Repair", "unregistered"]


class Repair(NamedTuple):
    side: Literal["request", "response"]
    where: str
    what: str


# fmt: off
REPAIRS: dict[str, Repair] = {
    # -- request side: quirks ------------------------------------------------------------------
    "mimo_request":               Repair("request", "request_quirks", "MiMo R3-c: max_completion_tokens, tool_choice auto, no parallel_tool_calls, strict custom tools, json_schema → json_object"),
    "kimi_request":               Repair("request", "request_quirks", "Kimi: forced tool_choice → auto; max_tokens → max_completion_tokens"),
    "max_completion_tokens":      Repair("request", "request_quirks", "max_tokens sent as max_completion_tokens"),
    "reasoning_key_reasoning":    Repair("request", "request_quirks (reasoning_keys)", "replayed reasoning sent under `reasoning`, the key the upstream reads (the client sent `reasoning_content` or `reasoning_details`)"),
    "reasoning_key_normalized":   Repair("request", "request_quirks (reasoning_keys)", "replayed reasoning a client sent under `reasoning` or `reasoning_details` sent under `reasoning_content`"),
    "developer_to_system":        Repair("request", "request_quirks", "Chat developer messages sent as system"),
    "system_at_head":             Repair("request", "request_quirks", "every system message merged into one at the head"),
    "mantle_request":             Repair("request", "request_quirks, request_c2r", "Bedrock Mantle: assistant content as a string; tool_choice none → no tools, forced → auto"),
    "strip_reasoning_envelope":   Repair("request", "request_quirks", "reasoning items sealed in the proxy's pxy1. envelope removed before a Responses upstream"),
    "encrypted_content_retry":    Repair("request", "app (upstream retry)", "400 invalid_encrypted_content: retried once without the reasoning blobs"),
    "kimi_tool_ids_restored":     Repair("request", "request_quirks (ids.kimi_restore_map)", "Kimi: a client-sanitised native id (functions_Read_0) restored to functions.Read:0 on calls and their tool messages"),
    "reasoning_placeholder":      Repair("request", "request_quirks, request_r2c", "reasoning_replay: placeholder reasoning on an assistant tool-call message without any"),
    "gemini_request":             Repair("request", "request_quirks", "Gemini's OpenAI-compatible endpoint: fields it refuses removed, reasoning_effort on a level the model takes, assistant reasoning keys removed"),
    "thought_signature_skipped":  Repair("request", "thought_signatures", "Gemini: the first call of an assistant step of the current turn came back without its thought signature; sent with the documented escape value skip_thought_signature_validator"),
    "thought_signature_rejected": Repair("request", "thought_signatures, request_g2c", "Gemini: a thought signature the proxy did not see Gemini make (forged, edited, sealed for another key or call) not sent"),
    "thought_signature_stripped": Repair("request", "thought_signatures", "the proxy's sealed thought signature removed from a tool call's extra_content before an upstream that is not Gemini"),
    "tool_schema_gemini_subset":  Repair("request", "schema", "quirk gemini_request: JSON Schema keywords Gemini does not know removed, const sent as a one-value enum"),
    # -- request side: always on ---------------------------------------------------------------
    "stream_include_usage":       Repair("request", "request_quirks", "Chat→Chat: stream → stream_options.include_usage true; no stream → no stream_options"),
    "tool_choice_without_tools":  Repair("request", "request_quirks", "no tools → no tool_choice / parallel_tool_calls"),
    "strip_moonshot_fields":      Repair("request", "request_quirks", "Moonshot-only fields and builtin_function tools removed (quirk moonshot_fields off)"),
    "responses_call_ids":         Repair("request", "request_quirks", "Responses upstream: call_ids by the Responses id policy (docs/rules.md §1), made unique"),
    "store_false_item_ids":       Repair("request", "request_quirks", "store:false → input items lose their id (call_id kept)"),
    "tool_call_ids_normalized":   Repair("request", "request_r2c", "Responses→Chat: call ids by the Chat id policy (docs/rules.md §1), made unique"),
    "hosted_tool_dropped":        Repair("request", "request_r2c, request_m2c, request_g2c", "hosted tools dropped for a Chat upstream, named in x-switchboard-dropped-tools"),
    "builtin_function_dropped":   Repair("request", "request_c2r", "Chat→Responses: Moonshot builtin_function tool dropped"),
    "unknown_tool_dropped":       Repair("request", "request_c2r", "Chat→Responses: a tool of unknown kind dropped"),
    "content_part_dropped":       Repair("request", "request_r2c, request_c2r, request_g2c", "a content part with no form on the other side dropped"),
    "reasoning_dropped_for_responses": Repair("request", "request_c2r", "Chat→Responses: reasoning_content has no Responses form"),
    "reasoning_unattached_dropped": Repair("request", "request_r2c", "reasoning with no assistant message of its turn to attach to"),
    "empty_arguments":            Repair("request", "request_r2c", 'a replayed call with arguments "" sent as "{}"'),
    "tool_output_reordered":      Repair("request", "request_r2c", "tool outputs moved next to their assistant tool_calls message"),
    "orphan_tool_output_to_user": Repair("request", "request_r2c, request_g2c", "an output with no matching call kept as user text"),
    "additional_tools_hoisted":   Repair("request", "items", "code mode: the tools of an additional_tools item moved into top-level tools for an upstream without responses-lite"),
    "hosted_call_translated":     Repair("request", "items", "a local_shell_call or mcp_call item (and its output) sent as a function_call and its output"),
    "hosted_call_dropped":        Repair("request", "items", "a hosted call item whose results stayed upstream (web_search_call, …) dropped, named in x-switchboard-dropped-items"),
    "unknown_item_dropped":       Repair("request", "items", "an input item of a type nobody here knows dropped before a non-OpenAI upstream, named in x-switchboard-dropped-items"),
    "redacted_thinking_dropped":  Repair("request", "request_m2c", "a Messages redacted_thinking block (only Anthropic reads it) dropped before a Chat upstream"),
    "system_at_head_messages":    Repair("request", "request_c2m", "Chat→Messages: a system message not at the head moved into the top-level system (Messages has no system turn in place)"),
    "tool_input_wrapped":         Repair("request", "request_c2m", 'Chat→Messages: tool call arguments that are not a JSON object sent as {"input": text}'),
    "thinking_sampling_dropped":  Repair("request", "request_c2m", "Chat→Messages: temperature/top_p not sent with thinking on (Anthropic refuses them)"),
    "temperature_clamped":        Repair("request", "request_c2m", "Chat→Messages: a temperature above 1 sent as 1 (Messages' range is 0-1)"),
    "empty_text_block_dropped":   Repair("request", "request_messages", "an empty text block (or a turn left empty) not sent to a Messages upstream"),
    "thinking_unsigned_dropped":  Repair("request", "request_messages", "a thinking block Anthropic did not sign (the proxy's envelope, or none) not sent to Anthropic"),
    "thinking_disabled_unsigned_turn": Repair("request", "request_messages", "thinking off for a request whose last assistant turn calls tools without a signed thinking block (Anthropic refuses it)"),
    "messages_beta_fields_dropped": Repair("request", "request_messages", "context_management, container, mcp_servers not sent to an Anthropic-compatible endpoint"),
    "item_reference_resolved":    Repair("request", "app (stored)", "an item_reference to an item of a stored response replaced by the item"),
    "input_item_dropped":         Repair("request", "request_r2c", "a Responses input item with no Chat form dropped"),
    "compaction_synthesized":     Repair("request", "compaction", "a compaction_trigger toward an upstream without native compaction: the routed model is asked for the summary"),
    "compaction_expanded":        Repair("request", "compaction", "a compaction item sealed by the proxy replaced by its summary as a user message"),
    "billing_header_dropped":     Repair("request", "request_messages, bridge", "Claude Code's billing line (x-anthropic-billing-header) not sent to an upstream that is not Anthropic"),
    "cache_ttl_dropped":          Repair("request", "request_messages", "cache_control.ttl not sent to a Messages endpoint that does not document it"),
    "cache_breakpoint_added":     Repair("request", "request_messages", "a cache_control breakpoint added where the client set none (quirk cache_breakpoints)"),
    "prompt_cache_key_derived":   Repair("request", "request_quirks (cache_key)", "a stable prompt_cache_key derived from the conversation's head for an upstream that routes by it"),
    # -- request side: tool schemas (schema.RULES) ---------------------------------------------
    "tool_schema_type_object":    Repair("request", "schema, request_r2c, request_c2r, request_g2c", 'parameters missing, {}, or of null type → type "object"'),
    "tool_schema_null_type":      Repair("request", "schema", 'a nested "type": null removed'),
    "tool_schema_root_combinators": Repair("request", "schema", "quirk schema_no_root_combinators: root oneOf/anyOf/allOf/enum merged into properties"),
    "tool_schema_property_types": Repair("request", "schema", "quirk schema_strict_subset: every property gets a type"),
    "tool_schema_strict_mode":    Repair("request", "schema", "quirk schema_strict_mode: strict tools closed and fully required"),
    # -- response side: quirks -----------------------------------------------------------------
    "mimo_raw_patch":             Repair("response", "tool_stage", "R3-a: a raw *** Begin Patch text wrapped as apply_patch's custom input"),
    "mimo_raw_patch_function":    Repair("response", "tool_stage", "R3-a′: a raw patch wrapped as {param: raw} for a client's one-string function apply_patch (Chat or Responses client)"),
    "invalid_json_passthrough":   Repair("response", "tool_stage", "R3-b: non-JSON arguments of a registered function passed through"),
    "inline_think":               Repair("response", "chat_decode", "a leading <think>…</think> in Chat content becomes reasoning"),
    "gemini_thought_tokens":      Repair("response", "usage", "quirk gemini_request: thinking tokens counted only in total_tokens added to the output and reasoning tokens"),
    # -- response side: always on --------------------------------------------------------------
    "responses_stray_output_index": Repair("response", "normalize", "a stray output_index inside a done item removed"),
    "responses_item_id_adopted":  Repair("response", "normalize", "an id-less item takes the id registered in its slot"),
    "responses_item_id_minted":   Repair("response", "normalize", "an item still without id gets a minted one"),
    "responses_delta_item_id_remap": Repair("response", "normalize", "a delta without item_id routed by its output_index"),
    "done_args_suffix":           Repair("response", "responses_decode", "done arguments extend the deltas: the missing suffix emitted"),
    "done_args_equivalent":       Repair("response", "responses_decode", "done arguments equal the deltas as JSON"),
    "done_args_mismatch":         Repair("response", "responses_decode", "done arguments contradict the deltas: reported"),
    "late_tool_identity":         Repair("response", "responses_decode", "a name/namespace only in done sent as an identity-only delta"),
    "chat_tool_index_reused":     Repair("response", "chat_decode", "a reused Chat tool-call index with a new id is a new call"),
    "chat_legacy_function_call":  Repair("response", "chat_decode", "a legacy function_call answer becomes a tool call"),
    "chat_arguments_stringified": Repair("response", "chat_decode", "Chat tool-call arguments that are not a string become their JSON text"),
    "sse_junk_line_skipped": Repair("response", "bridge", "an upstream data line that is not a JSON object skipped; the stream goes on"),
    "chat_malformed_field_dropped": Repair("response", "chat_decode", "a Chat chunk/object field of the wrong type ignored as if absent"),
    "responses_malformed_field_dropped": Repair("response", "responses_decode, normalize", "a Responses event field of the wrong type ignored"),
    "usage_malformed_field_dropped": Repair("response", "usage", "a usage detail that is not an object, or a count that is not an integer, normalised"),
    "tool_call_id_stringified":   Repair("response", "ids (decoders)", "a numeric tool-call id becomes its decimal text"),
    "namespace_split":            Repair("response", "tool_stage", "a flattened namespace tool name goes back to Codex as namespace + name"),
    "tool_call_unnamed_dropped":  Repair("response", "chat_encode, responses_encode, gemini_encode", "a tool call that never got a name dropped"),
    "compaction_summary_truncated": Repair("response", "compaction", "a summary cut by the upstream's output limit still sealed as the compaction item"),
}
# fmt: on

NAMES: frozenset[str] = frozenset(REPAIRS)

# Tests switch this on (tests/conftest.py): an unregistered name is then a KeyError.
STRICT = False
# Every unregistered name recorded since start (a set: bounded by the code's own names).
UNREGISTERED: set[str] = set()


def unregistered(rule: str) -> None:
    """Called by ``Ctx.repaired`` for a name that is not in ``NAMES``."""
    UNREGISTERED.add(rule)
    if STRICT:
        raise KeyError(f"unregistered repair name {rule!r}: add it to transformers/repairs.py")
