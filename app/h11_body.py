"""A body's ``Data`` events skip h11's state-machine pass, which cannot move for them.

Theory of operation
-------------------
h11 runs every event it reads or sends through ``Connection._process_event``: a copy of
both roles' states, the event-triggered transition, the state-triggered transitions to
their fixpoint, the keep-alive and 100-continue checks, and a comparison of old and new
states to pick a new reader or writer.  An upstream that streams at token rate sends one
event per read, so each read of a stream paid this pass for its one ``Data`` event: 1.6 µs
of the ~6.6 µs the upstream client spends per read (in process, h11 and httpcore and
httpx's stream layers), the most of any one step.

For a ``Data`` event in the ``SEND_BODY`` state, h11's transition table gives
``SEND_BODY`` again, and the state-triggered transitions depend on nothing else that
changed (both states, keep-alive, switch proposals: h11 runs them to their fixpoint after
every change, so they are already there).  The one effect the pass has is 100-continue's:
a client sending body data is no longer waiting for ``100 Continue``.  So:

==============================================  ======================================
the event                                       ``_process_event``
==============================================  ======================================
``Data``, its sender's state ``SEND_BODY``      the client's ``Data``: clears
                                                ``client_is_waiting_for_100_continue``;
                                                nothing else (no state can move)
``Data`` in any other state (an error)          h11's own: its ``LocalProtocolError``
every other event                               h11's own
==============================================  ======================================

``install()`` wraps h11's method in its class.  The app's server is uvicorn on httptools,
so in this process h11 serves httpcore's upstream connections only.
``tests/unit/test_h11_body.py`` drives patched and plain connections through the same
random conversations (both roles, keep-alive, 100-continue, errors) and compares every
state after every event.
"""

from __future__ import annotations

from typing import Any

from h11 import CLIENT, Data
from h11._connection import Connection
from h11._state import SEND_BODY

__all__ = ["install"]

_H11_PROCESS_EVENT = Connection._process_event


def _process_event(self: Any, role: Any, event: Any) -> None:
    if type(event) is Data and self._cstate.states[role] is SEND_BODY:
        if role is CLIENT:
            self.client_is_waiting_for_100_continue = False
        return
    _H11_PROCESS_EVENT(self, role, event)


def install() -> None:
    """Idempotent."""
    Connection._process_event = _process_event  # type: ignore[method-assign]
