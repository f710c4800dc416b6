"""Loaded by a proxy process that tests/unit/test_bench_collector.py starts with this folder on
PYTHONPATH: every Responses stream encoder is put in a reference cycle (a list holding
itself and the encoder), the kind of leak bench/collector.py is there to find."""

from __future__ import annotations

from typing import Any

from transformers.responses_encode import ResponsesStreamEncoder

_init = ResponsesStreamEncoder.__init__


def _init_in_a_cycle(self: ResponsesStreamEncoder, *a: Any, **k: Any) -> None:
    _init(self, *a, **k)
    box: list[Any] = [self]
    box.append(box)


ResponsesStreamEncoder.__init__ = _init_in_a_cycle  # type: ignore[method-assign]
