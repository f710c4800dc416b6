"""Suite-wide checks.

Repair names are a closed set (``transformers/repairs.py``): in the tests an unregistered
name passed to ``Ctx.repaired`` raises ``KeyError``, and, because a stream's failure guard
may turn that exception into a protocol error the test does not look at, every test also
fails afterwards if any unregistered name was recorded during it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from transformers import repairs

repairs.STRICT = True


@pytest.fixture(autouse=True, scope="session")
def _state_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The default SQLite response store (``$XDG_STATE_HOME/switchboard/responses.db``) of
    every app and proxy the tests start lives in a temporary directory."""
    old = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    yield
    if old is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = old


@pytest.fixture(autouse=True)
def _registered_repairs_only() -> Iterator[None]:
    repairs.UNREGISTERED.clear()
    yield
    seen = sorted(repairs.UNREGISTERED)
    repairs.UNREGISTERED.clear()
    assert seen == [], f"unregistered repair names recorded: {seen} (register them in transformers/repairs.py)"
