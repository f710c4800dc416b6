"""A request's account: its key's limits checked before the upstream call, and, once the
answer ended, its limits settled and its usage record written.

``admit`` runs after the request was prepared (the model is resolved, nothing was sent
upstream): the ticket's headers go on the answer (``x-ratelimit-*``, ``x-codex-*``), or the
refusal is the answer (429 in the client's protocol, ``app/limits.py``).  ``close`` runs
after the client's last byte, whatever the outcome: the tokens the upstream reported
(``Bridge.tokens``), else an estimate from what the client received (4 characters a token,
marked ``estimated``); a request that failed before its first byte gives its reservation
back and records no tokens.
"""

from __future__ import annotations

import time
from typing import Any

from app.limits import Ticket, cost_micros, saved_micros
from app.prepare import Prepared
from app.usage import UsageRecord

__all__ = ["admit", "close"]


async def admit(svc: Any, owner: str, p: Prepared, size: int) -> Ticket | None:
    """Check and take the key's windows for ``p`` (``size``: the request body's bytes);
    None for a key without limits (nothing to settle)."""
    limiter = svc.limiter
    if limiter.policy(owner) is None:
        return None
    ticket: Ticket = await limiter.admit(owner, p.route.public_model, size // 4, p.request_id)
    p.headers.update(ticket.headers())
    return ticket


def tokens_of(p: Prepared, size: int) -> tuple[tuple[int, int, int, int, int] | None, bool]:
    """(input, output, cache read, cache write, reasoning) tokens of the answer, and whether
    they are estimated (the request's bytes and the answer's characters over 4); None when
    nothing was answered."""
    got = p.bridge.tokens()
    if got is not None:
        return got, False
    chars = p.bridge.chars
    if not chars and not p.bridge.terminal:
        return None, False
    return (size // 4, -(-chars // 4), 0, 0, 0), True


async def close(svc: Any, owner: str, ticket: Ticket | None, p: Prepared, size: int) -> None:
    """Settle the key's windows and write the usage record of the finished request ``p``
    (``size``: the request body's bytes)."""
    usage = svc.usage
    if ticket is None and (usage is None or not usage.enabled):
        return  # no limits, no records: nothing to count
    status = p.status or 500
    tokens, estimated = tokens_of(p, size) if status < 400 else (None, False)
    model = p.route.public_model
    cost = (
        await svc.limiter.settle(ticket, model, tokens)
        if ticket is not None
        else cost_micros(svc.limiter.price(model), tokens)
        if tokens is not None
        else 0
    )
    if usage is None or not usage.enabled:
        return
    t = tokens or (0, 0, 0, 0, 0)
    usage.write(
        UsageRecord(
            ts=time.time(),
            key=owner,
            model=model,
            provider=p.route.provider.name,
            input=t[0],
            output=t[1],
            cache_read=t[2],
            cache_write=t[3],
            reasoning=t[4],
            cost_micros=cost,
            outcome=p.bridge.terminal or ("error" if status >= 400 else "client_cancel"),
            status=status,
            duration_ms=round((time.perf_counter() - p.started) * 1000, 2),
            request_id=p.request_id,
            estimated=estimated,
            saved_micros=saved_micros(svc.limiter.price(model), t),
        )
    )
