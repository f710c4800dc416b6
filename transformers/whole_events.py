"""What an encoder without the Bridge's shortcuts answers to the Bridge.

The Chat and Responses encoders write their commonest events themselves (``text_delta``,
``reasoning_delta``, ``args_delta``, ``frame_deltas``: ``transformers/bridge.py``).  The
Messages encoder takes every event through ``feed`` and the Bridge's framing, the Gemini
encoder every event but a text chunk under SSE (its own ``text_delta``); ``WholeEvents`` is
their answer to each shortcut they do not take: none taken.
"""

from __future__ import annotations

from typing import Any

from .events import Reasoning, ToolCall

__all__ = ["WholeEvents"]


class WholeEvents:
    """Mixed into an encoder that has ``error`` (its failure, once it failed) and ``finished``."""

    error: dict[str, Any] | None
    finished: bool

    text_open = False  # (the Bridge's runs of text deltas: a Chat and Responses shortcut)
    plain_text = False  # (the Chat passthrough's)

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def done(self) -> bool:
        return self.finished

    def frame_deltas(self, framing: Any) -> None:
        pass  # every event goes through feed() and the Bridge's framing

    def text_delta(self, text: str) -> bytes | None:
        return None  # no shortcut: the Bridge feeds a Text event

    def reasoning_delta(self, ev: Reasoning) -> None:
        return None

    def args_delta(self, ev: ToolCall) -> None:
        return None

    def end(self) -> list[dict[str, Any]]:
        return []
