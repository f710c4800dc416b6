"""ASGI entry point for uvicorn workers: reads the config named by SWITCHBOARD_CONFIG."""

from __future__ import annotations

import os

from app import logs
from app.config import load_config
from app.main import create_app

logs.setup(os.environ.get("SWITCHBOARD_LOG_LEVEL", "info"))
app = create_app(load_config(os.environ["SWITCHBOARD_CONFIG"]), signals=True)
