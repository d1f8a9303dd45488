"""The developer's local stack as the harness reaches it: the checkout it runs from, the state
directory, the supervisord that keeps its datastores (MariaDB, PostgreSQL) running, and those
datastores' test database as its administrator (the migrator) reaches it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def var() -> Path:
    """The local stack's state directory (where its supervisord runs)."""
    return Path(os.environ.get("AGORA_VAR") or ROOT / "var")


async def supervisorctl(*args: str) -> str:
    """A command to the local stack's supervisord (its datastores); what it printed."""
    proc = await asyncio.create_subprocess_exec(
        str(ROOT / ".venv/bin/supervisorctl"),
        "-c",
        str(var() / "supervisord.conf"),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    return out.decode()


def mysql_admin_url() -> str:
    e = os.environ
    return (
        f"mysql://agora_migrator:{e['MYSQL_MIGRATOR_PASSWORD']}@127.0.0.1:{e['MYSQL_PORT']}"
        "/agora_test"
    )


def pg_admin_url() -> str:
    e = os.environ
    return (
        f"postgresql://agora_migrator:{e['PG_MIGRATOR_PASSWORD']}@127.0.0.1:{e['PG_PORT']}"
        "/agora_test"
    )
