"""ASGI entry point for uvicorn workers: reads the config named by SWITCHBOARD_CONFIG."""

from __future__ import annotations

import gc
import os

from app import logs
from app.config import load_config
from app.main import create_app

logs.setup(os.environ.get("SWITCHBOARD_LOG_LEVEL", "info"))
app = create_app(load_config(os.environ["SWITCHBOARD_CONFIG"]), signals=True)
# Everything built so far (modules, config, router) lives as long as the process: out of the
# cyclic collector's way, so its full collections stop walking it (shorter pauses, the p99)
gc.collect()
gc.freeze()
