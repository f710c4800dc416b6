"""Reasoning keys on Chat messages: which key replayed reasoning travels under, both ways.

Theory of operation
-------------------
Chat Completions has no standard field for reasoning; three keys are in use, and clients
echo whichever key the endpoint used (Kimi Code 2.x ``ReasoningKeyDialect``: the first of
``reasoning_content``, ``reasoning_details``, ``reasoning`` it sees, or the key configured
with ``reasoning_key``/``KIMI_MODEL_REASONING_KEY``):

=====================  ====================================================================
``reasoning_content``  a string: Moonshot/Kimi, DeepSeek, GLM, MiMo, older vLLM and SGLang
``reasoning``          a string: newer vLLM (vllm#27752, #38488), some gateways
``reasoning_details``  a list of parts: ``{"type": "reasoning.text", "text"}`` (OpenRouter),
                       ``{"type": "summary", "summary"}`` / ``{"type": "encrypted", …}``
                       (Kimi Code's own lowering); the text is the ``text``/``summary``
                       strings joined, encrypted parts carry none
=====================  ====================================================================

``reasoning_text`` reads one message or delta: the first key carrying non-empty text, in the
order above, so a client or upstream that duplicates the text under two keys (Kimi Code
sends ``reasoning_details`` together with ``reasoning_content``) is never doubled.  The
stream decoders use it for upstream answers.

Requests (``normalize_history``, the ``reasoning_keys`` row of ``request_quirks``): where
the profile says which key its upstream reads (``reasoning_replay`` or
``reasoning_key_reasoning`` on), every assistant history message carrying reasoning under
any of the three keys is sent with that text under ``upstream_key`` only:

=============================================  ============================================
client message                                 sent upstream
=============================================  ============================================
only ``upstream_key``                          unchanged (the same object)
another key (or several), some text            ``{upstream_key: text}``, the other keys
                                               removed (repair ``reasoning_key_reasoning``
                                               when the key is ``reasoning``, else
                                               ``reasoning_key_normalized``)
keys present, no text at all (``""``, only     the keys removed (``reasoning_replay`` then
encrypted ``reasoning_details``)               adds its placeholder to a tool-call message)
=============================================  ============================================

``upstream_key`` is ``reasoning`` with the ``reasoning_key_reasoning`` quirk, else
``reasoning_content``.  Elsewhere (a profile that does not replay reasoning, e.g.
``openai-compatible`` with no quirks) the client's keys go upstream as sent, as any other
Chat→Chat field.

Answers (``chat_encode``): Chat clients always get ``reasoning_content``, whatever key the
upstream used and whichever protocol it speaks: it is the key kosong's ``kimi`` provider
reads, the first key Kimi Code looks for (and so the one it echoes), and the one
DeepSeek-style SDKs read.  When the profile's upstream speaks another key
(``reasoning_key_reasoning``), the same text also goes out under that key, so a client
configured for that endpoint (kosong ``reasoning_key="reasoning"``, Kimi Code
``reasoning_key``) reads it where it looks; Kimi Code, reading the first key it knows,
never doubles it.  Whatever key comes back, the next request sends the upstream's.  A
Responses client gets reasoning items, never a key.
"""

from __future__ import annotations

from typing import Any

from .context import Ctx

__all__ = ["KEYS", "normalize_history", "reasoning_text", "upstream_key"]

KEYS = ("reasoning_content", "reasoning", "reasoning_details")


def upstream_key(ctx: Ctx) -> str:
    """The message key replayed reasoning travels under on a Chat upstream."""
    return "reasoning" if ctx.on("reasoning_key_reasoning") else "reasoning_content"


def reasoning_text(d: dict[str, Any]) -> str | None:
    """The reasoning text of a Chat message or delta (first key with non-empty text), or None."""
    v = d.get("reasoning_content")
    if v and isinstance(v, str):
        return v
    v = d.get("reasoning")
    if v and isinstance(v, str):
        return v
    det = d.get("reasoning_details")
    if det and isinstance(det, list):
        parts = []
        for item in det:
            if isinstance(item, dict):
                t = item.get("text")
                if not isinstance(t, str):
                    t = item.get("summary")
                if t and isinstance(t, str):
                    parts.append(t)
        if parts:
            return "".join(parts)
    return None


def normalize_history(messages: list[Any], ctx: Ctx) -> list[Any] | None:
    """New message list with every assistant message's reasoning under ``upstream_key`` only;
    ``None`` when nothing needed it.  Records one repair per request."""
    key = upstream_key(ctx)
    out: list[Any] | None = None
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") != "assistant":
            continue
        present = [k for k in KEYS if k in msg]
        if not present or present == [key]:
            continue
        text = reasoning_text(msg)
        new = {k: v for k, v in msg.items() if k not in KEYS}
        if text is not None:
            new[key] = text
        out = out if out is not None else list(messages)
        out[i] = new
    if out is not None and key == "reasoning":
        ctx.repaired("reasoning_key_reasoning")
    elif out is not None:
        ctx.repaired("reasoning_key_normalized")
    return out
