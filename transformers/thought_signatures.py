"""Gemini's thought signatures: carried through every client, put back on their calls.

Theory of operation
-------------------
Gemini (3, and the 2.5 thinking models) signs the tool calls of an answer: on its
OpenAI-compatible endpoint a call carries ``extra_content: {"google": {"thought_signature":
"<opaque>"}}``; with parallel calls only the first call of a step has one.  A later request
must send each signed call of the current turn (the messages since the last user message)
back with its signature, or Gemini answers 400 "Function call is missing a
thought_signature".  The proxy keeps no state, so the signature travels with the client, in
what each client echoes (docs/quirks.md, ``gemini_thought_signatures``):

===========  ===================================================  ==========================
client       carrier (sealed: ``envelope.seal(text, key, {call     on the next request
             id: signature})``, the request's key)
===========  ===================================================  ==========================
Chat         the tool call's own ``extra_content.google.          ``extra_content`` of the
             thought_signature`` (the openai SDK keeps it)        replayed call
Responses    ``encrypted_content`` of a reasoning item before     the reasoning item, opened
             the call (Codex replays reasoning items)             by ``request_r2c``
Messages     ``signature`` of a thinking block before the         the thinking block, opened
             ``tool_use`` block (Claude Code replays them)        by ``request_m2c``
===========  ===================================================  ==========================

The key is the server's secret bound to the client key (``Service.envelope_key_for``): a
signature comes back only through the key it was given to, unaltered.  The translators put
what their envelopes opened into ``ctx.thought_signatures`` (upstream call id → signature);
then ``restore`` (the request row ``gemini_thought_signatures``) decides every assistant
call's signature, in this order:

=========================================  ==============================================
what the call carries                      sent to Gemini
=========================================  ==============================================
our envelope, opened, naming this call id  the signature Gemini gave for it
the escape value                           as is (the client chose it)
our envelope that does not open, or names  nothing from it: dropped
another call; any other value (a           (``thought_signature_rejected``), then as a call
signature the proxy did not see Gemini     with none
make: forged, edited, another key's)
nothing, but the request's reasoning       that signature
envelopes name the call id, or the app
kept one for this key and call id (a Chat
client that drops ``extra_content``:
app/signatures.py)
nothing                                    nothing; the FIRST call of each assistant
                                           message gets the escape value
                                           ``skip_thought_signature_validator``: what
                                           Gemini's docs give for a history it did not
                                           make, rather than a 400 that stops the agent
                                           (counted, ``thought_signature_skipped``, in the
                                           current turn, the one Gemini checks; earlier
                                           turns get it too, so that a turn's bytes do not
                                           change once it is over: the prefix cache)
=========================================  ==============================================

Without an envelope key (a config without a secret) nothing can be sealed: a Chat client
gets the signature as Gemini wrote it and may send it back as is, and the other clients
get no carrier (the escape value stands in).

Toward any other Chat upstream ``strip`` removes the proxy's envelopes from
``extra_content`` (``thought_signature_stripped``): a model switch mid-conversation must
not send another vendor a field it may refuse.
"""

from __future__ import annotations

from typing import Any

from .context import Ctx
from .envelope import is_envelope, open_sealed, seal

__all__ = ["ESCAPE", "for_client", "restore", "signature_in", "strip"]

# Gemini's documented value for a call whose signature is unknown ("Thought signatures")
ESCAPE = "skip_thought_signature_validator"

Body = dict[str, Any]


def signature_in(extra: Any) -> str | None:
    """The thought signature in a tool call's ``extra_content``, or None."""
    if extra.__class__ is not dict:
        return None
    google = extra.get("google")
    sig = google.get("thought_signature") if google.__class__ is dict else None
    return sig if sig.__class__ is str and sig else None


def for_client(signature: str, call_id: str, ctx: Ctx) -> str:
    """What a client is given for ``signature`` of call ``call_id``: sealed with the request's
    key, or as Gemini wrote it when there is no key."""
    if not ctx.envelope_key:
        return signature
    return seal("", ctx.envelope_key, {call_id: signature})


def _with_signature(tc: dict[str, Any], sig: str | None) -> dict[str, Any]:
    """``tc`` with ``extra_content.google.thought_signature`` set to ``sig`` (removed when
    None), every other field of ``extra_content`` kept."""
    extra = tc.get("extra_content")
    extra = dict(extra) if extra.__class__ is dict else {}
    google = extra.get("google")
    google = dict(google) if google.__class__ is dict else {}
    if sig is None:
        google.pop("thought_signature", None)
    else:
        google["thought_signature"] = sig
    if google:
        extra["google"] = google
    else:
        extra.pop("google", None)
    out = {k: v for k, v in tc.items() if k != "extra_content"}
    if extra:
        out["extra_content"] = extra
    return out


def _resolve(tc: dict[str, Any], ctx: Ctx) -> str | None:
    call_id = tc.get("id")
    given = signature_in(tc.get("extra_content"))
    if given is not None:
        if given == ESCAPE:
            return given
        if is_envelope(given):
            status, _, sigs = open_sealed(given, ctx.envelope_key)
            if status == "ok" and isinstance(call_id, str) and call_id in sigs:
                return sigs[call_id]
            if status != "ok":
                ctx.envelope_rejected.append(("thought_signature", status))
        elif not ctx.envelope_key:
            return given  # nothing to check it against: the client's, as Gemini wrote it
        ctx.repaired("thought_signature_rejected")
    if isinstance(call_id, str):
        return ctx.thought_signatures.get(call_id)
    return None


def _current_turn(messages: list[Any]) -> int:
    """Index of the first message of the current turn (after the last user message)."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, dict) and m.get("role") == "user":
            return i + 1
    return 0


def restore(body: Body, ctx: Ctx) -> None:
    """Every assistant tool call's signature as the table above decides (in place, copying
    what it changes)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    turn = _current_turn(messages)
    out: list[Any] | None = None
    for i, m in enumerate(messages):
        if not (isinstance(m, dict) and m.get("role") == "assistant"):
            continue
        calls = m.get("tool_calls")
        if not isinstance(calls, list) or not calls:
            continue
        new_calls = []
        changed = False
        for j, tc in enumerate(calls):
            if not isinstance(tc, dict):
                new_calls.append(tc)
                continue
            sig = _resolve(tc, ctx)
            if sig is None and j == 0:
                # every step, earlier turns too: the bytes of a turn must not change once it
                # is over (the upstream's prefix cache); counted where Gemini checks it
                sig = ESCAPE
                if i >= turn:
                    ctx.repaired("thought_signature_skipped")
            if sig != signature_in(tc.get("extra_content")) or (sig is None and "extra_content" in tc):
                tc = _with_signature(tc, sig)
                changed = True
            new_calls.append(tc)
        if changed:
            if out is None:
                out = list(messages)
            out[i] = {**m, "tool_calls": new_calls}
    if out is not None:
        body["messages"] = out


def strip(body: Body, ctx: Ctx) -> None:
    """The proxy's envelopes removed from every tool call's ``extra_content`` (an upstream
    that is not Gemini); anything else in it is the client's and goes as it came."""
    messages = body.get("messages")
    if messages.__class__ is not list or not ctx.may_carry_envelopes:
        return
    out: list[Any] | None = None
    for i, m in enumerate(messages):
        # (every Chat request to every other upstream comes here: a plain loop, a key lookup
        # per call, until a call carries extra_content at all)
        calls = m.get("tool_calls") if m.__class__ is dict else None
        if calls.__class__ is not list:
            continue
        for tc in calls:
            if tc.__class__ is dict and "extra_content" in tc and is_envelope(signature_in(tc["extra_content"])):
                break
        else:
            continue
        new_calls = [
            _with_signature(tc, None)
            if isinstance(tc, dict) and is_envelope(signature_in(tc.get("extra_content")))
            else tc
            for tc in calls
        ]
        if out is None:
            out = list(messages)
        out[i] = {**m, "tool_calls": new_calls}
        ctx.repaired("thought_signature_stripped")
    if out is not None:
        body["messages"] = out
