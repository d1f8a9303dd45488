"""TLS to MySQL with the server verified: the local MariaDB made to refuse insecure transport
(`require_secure_transport=ON`, as managed MySQL 8.4 with caching_sha2_password effectively is),
and the services connecting with `?ssl_ca=` (the CA; certificate and name verified)."""

from __future__ import annotations

import asyncio
import getpass
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from pymysql.err import OperationalError

from services.runtime.mysql import MysqlDatabase, MysqlTarget
from tests.deploy.process_support import (
    SERVING,
    TIMELINE,
    eventually,
    service_process,
    timeline_datastores,
)
from tests.helpers import ROOT
from tests.stack import Env
from tools import callers, certs


def with_ca(url: str, ca: Path) -> str:
    return f"{url}?ssl_ca={ca}"


async def as_root(sql: str) -> None:
    """A statement as MariaDB's administrator, over the unix socket (OS-user authentication)."""
    var = Path(os.environ.get("AGORA_VAR") or ROOT / "var")
    user = "root" if os.geteuid() == 0 else getpass.getuser()
    proc = await asyncio.create_subprocess_exec(
        "mariadb", "--no-defaults", f"--socket={var}/run/mysqld.sock", "-u", user, "-e", sql
    )
    assert await proc.wait() == 0, sql


@asynccontextmanager
async def secure_transport_required() -> AsyncIterator[None]:
    await as_root("SET GLOBAL require_secure_transport = ON")
    try:
        yield
    finally:
        await as_root("SET GLOBAL require_secure_transport = OFF")


async def one(url: str) -> object:
    db = await MysqlDatabase.connect(url)
    try:
        row = await db.fetchone("SHOW SESSION STATUS LIKE 'Ssl_version'")
        return row[1] if row else None
    finally:
        await db.close()


@pytest.mark.asyncio
async def test_services_reach_a_mysql_that_requires_tls_verifying_it(
    env: Env, tmp_path: Path
) -> None:
    ca = callers.tls_dir() / "ca.pem"
    rogue = certs.make_authority(tmp_path)  # another CA: the server's certificate is not its
    assert rogue.cert is not None
    async with secure_transport_required():
        # MariaDB answers 1045 (MySQL 3159); the same credentials over TLS are let in below.
        with pytest.raises(OperationalError) as refused:
            await one(env.mysql_timeline_url)
        assert refused.value.args[0] in (1045, 3159)
        assert str(await one(with_ca(env.mysql_timeline_url, ca))).startswith("TLSv1")
        with pytest.raises(OperationalError):
            await one(with_ca(env.mysql_timeline_url, tmp_path / "ca.pem"))
        mysql_url = with_ca(env.mysql_timeline_url, ca)
        async with service_process("timeline", timeline_datastores(env, mysql_url)) as port:
            await eventually(port, {TIMELINE: SERVING})


def test_mysql_url_tls_options() -> None:
    bundle = "/etc/ssl/certs/ca-certificates.crt"
    assert MysqlTarget.from_url("mysql://u:p@db:3306/agora").ssl_context() is None
    verified = MysqlTarget.from_url(f"mysql://u:p@db:3306/agora?ssl_ca={bundle}").ssl_context()
    assert verified is not None
    assert verified.check_hostname
    ca_only = MysqlTarget.from_url(f"mysql://u:p@db/agora?ssl_ca={bundle}&ssl_mode=verify_ca")
    context = ca_only.ssl_context()
    assert context is not None
    assert not context.check_hostname
    for bad, problem in {
        "mysql://u:p@db/agora?sslca=x": "unknown MySQL URL parameter",
        "mysql://u:p@db/agora?ssl_mode=VERIFY_IDENTITY": "needs ssl_ca",
        "mysql://u:p@db/agora?ssl_mode=sometimes": "ssl_mode 'SOMETIMES'",
    }.items():
        with pytest.raises(ValueError, match=problem):
            MysqlTarget.from_url(bad)
