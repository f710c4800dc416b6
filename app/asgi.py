"""ASGI entry point for uvicorn workers: reads the config named by SWITCHBOARD_CONFIG."""

from __future__ import annotations

import gc
import os

from app import logs
from app.config import load_config
from app.main import create_app
from app.secret import with_machine_secret

logs.setup(os.environ.get("SWITCHBOARD_LOG_LEVEL", "info"))
# the server's secret: the config's, else the one this machine keeps beside its store
app = create_app(with_machine_secret(load_config(os.environ["SWITCHBOARD_CONFIG"])), signals=True)
# Everything built so far (modules, config, router) lives as long as the process: out of the
# cyclic collector's way, so its full collections stop walking it (shorter pauses, the p99)
gc.collect()
gc.freeze()
# A request leaves no reference cycle behind (tests/unit/test_no_cycles.py), so what the
# collector finds is only what long-lived connections leave.  Its default start, 700
# container objects allocated and not yet freed, is crossed while a Codex-sized body is
# parsed and translated (thousands of dicts and lists, all alive): a young collection in
# almost every such request, finding nothing, and an old one every few hundred.
GC_THRESHOLD = (10_000, 10, 10)
gc.set_threshold(*GC_THRESHOLD)
