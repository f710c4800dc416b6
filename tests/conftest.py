"""Suite-wide checks.

Repair names are a closed set (``transformers/repairs.py``): in the tests an unregistered
name passed to ``Ctx.repaired`` raises ``KeyError``, and, because a stream's failure guard
may turn that exception into a protocol error the test does not look at, every test also
fails afterwards if any unregistered name was recorded during it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from transformers import repairs

repairs.STRICT = True


@pytest.fixture(autouse=True)
def _registered_repairs_only() -> Iterator[None]:
    repairs.UNREGISTERED.clear()
    yield
    seen = sorted(repairs.UNREGISTERED)
    repairs.UNREGISTERED.clear()
    assert seen == [], f"unregistered repair names recorded: {seen} (register them in transformers/repairs.py)"
