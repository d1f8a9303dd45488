"""Fixtures of the deploy tests."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.deploy.k8s_support import SQL_HA, Doc, dev_with
from tools import backup as tool
from tools import k8s_validate


@pytest.fixture(params=k8s_validate.kustomizations(), ids=str)
def docs(request: pytest.FixtureRequest) -> list[Doc]:
    """The rendering of each kustomization (overlays and variants), one test each."""
    docs: list[Doc] = k8s_validate.render(request.param)
    return docs


@pytest.fixture(scope="package")
def ha_variant(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """overlays/dev with components/sql-ha, as a kustomization of its own."""
    return dev_with(SQL_HA, tmp_path_factory.mktemp("k8s"))


@pytest.fixture(scope="package")
def ha(ha_variant: Path) -> list[Doc]:
    """Its rendering."""
    return k8s_validate.render(ha_variant)


@pytest_asyncio.fixture
async def throwaway() -> AsyncIterator[str]:
    """A database name the restore creates, in MariaDB and PostgreSQL; dropped afterwards, with
    the per-service grants the restore gave it."""
    name = f"agora_restore_{os.getpid()}_{secrets.token_hex(3)}"
    yield name
    cfg = tool.Config.from_env()
    forget = " ".join(
        f"DELETE FROM mysql.{t} WHERE Db = '{name}';" for t in ("db", "tables_priv", "columns_priv")
    )
    await tool.run(
        [
            *tool.mysql_admin_argv(cfg),
            "-e",
            f"DROP DATABASE IF EXISTS `{name}`; {forget} FLUSH PRIVILEGES",
        ]
    )
    psql = [*tool.pg_admin_argv(cfg, "psql"), "-X", "-q", "-d", "postgres"]
    await tool.run([*psql, "-c", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'])
