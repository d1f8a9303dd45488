"""Run one service by name: `python -m services ingest` (the container image's entrypoint)."""

import importlib
import sys

from services.runtime.process import run

SERVICES = ("ingest", "timeline", "likes", "flusher", "gateway", "migrate")

if len(sys.argv) != 2 or sys.argv[1] not in SERVICES:
    sys.exit(f"usage: python -m services {{{'|'.join(SERVICES)}}}")
server = importlib.import_module(f"services.{sys.argv[1]}.server")
run(server.main)
