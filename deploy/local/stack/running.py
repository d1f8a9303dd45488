"""`run`, `run-cluster`, `run-ha`: a command with the stack's variables and the test suite's
(env/test.env), in the checkout, plus which Redis the services use, for the tools that reach it
themselves: AGORA_REDIS_MODE (single|cluster) and, with a cluster, REDIS_CLUSTER_URL (the
administrator on a node; the client finds the rest). REDIS_CLUSTER itself is not exported: the
tests and the service processes they start inherit this environment and talk to the single Redis
whatever the stack runs on."""

import errno
import os
import shutil
import sys
from collections.abc import Sequence

from . import datastores, ha_engines, redis_servers, settings, shell, sql_admin, supervisorctl
from .paths import HERE, ROOT
from .programs import start_supervisord

TEST_ENV = f"{HERE}/env/test.env"
TEST_CLUSTER_ENV = f"{HERE}/env/test-cluster.env"


def run(command: Sequence[str]) -> None:
    exec_with([TEST_ENV], command)


def run_cluster(command: Sequence[str]) -> None:
    """make test's second run: the tests' Redis variables point at the test cluster."""
    test_cluster()
    exec_with([TEST_ENV, TEST_CLUSTER_ENV], command)


def test_cluster() -> None:
    """The tests' cluster (make test; tests flush it): cheap to keep running, six small servers."""
    start_supervisord()
    redis_servers.cluster_up("redis-cluster-test", settings.number("REDIS_CLUSTER_TEST_PORT"))


def run_ha(command: Sequence[str]) -> None:
    """make test's HA pass and make chaos's failovers: the SQL datastores switched to their HA
    engines (installed and started as `make up HA=1` does, agora_test migrated), the command run
    against them with run's environment, then the datastores switched back to the mode the stack
    was in. The exit status is the command's."""
    was = settings.ha_mode()
    switch_sql("1")
    sql_admin.migrate("agora_test")
    code = call_with([TEST_ENV], command)
    switch_sql(was)
    raise SystemExit(code)


def switch_sql(to: str) -> None:
    """The SQL datastores on the single servers (0) or the HA engines (1), remembered like `up`'s
    HA=. Leaving the HA engines stops their nodes one at a time first, not as a group."""
    if settings.ha_mode() == "1" and to != "1" and supervisorctl.running():
        ha_engines.stop()
    settings.keep_mode("ha-mode", to)
    datastores.datastores()


def exec_with(files: Sequence[str], command: Sequence[str]) -> None:
    """The command in place of the stack's process, its exit status the stack's."""
    os.chdir(ROOT)
    env = _environment(files, command)
    if not command:
        raise SystemExit(0)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        if _program(command[0], env) is None:
            raise FileNotFoundError(errno.ENOENT, "command not found")
        os.execve(env["_"], list(command), env)  # noqa: S606 (the caller's command, as given)
    except OSError as error:
        sys.stderr.write(f"stack.sh: {command[0]}: {error.strerror}\n")
        raise SystemExit(
            shell.NOT_FOUND if isinstance(error, FileNotFoundError) else shell.NOT_EXECUTABLE
        ) from None


def call_with(files: Sequence[str], command: Sequence[str]) -> int:
    env = _environment(files, command)
    return shell.status(command, cwd=ROOT, env=env) if command else 0


def output_with(files: Sequence[str], command: Sequence[str]) -> str:
    env = _environment(files, command)
    return shell.output(command, cwd=ROOT, env=env, check=True)


def _environment(files: Sequence[str], command: Sequence[str]) -> dict[str, str]:
    """The stack's environment with the files' variables added for good (they stay set for what
    the stack does next), and the command's own as a shell gives it: in the checkout (PWD,
    OLDPWD) and its path in `_`."""
    settings.source(files)
    os.environ["AGORA_REDIS_MODE"] = settings.redis_mode()
    # 1 with `make up HA=1`: the SQL datastores are the HA ones (their addresses do not change).
    os.environ["AGORA_HA"] = settings.ha_mode()
    if os.environ["AGORA_REDIS_MODE"] == "cluster":
        password, port = settings.get("REDIS_PASSWORD"), settings.get("REDIS_CLUSTER_PORT")
        os.environ["REDIS_CLUSTER_URL"] = f"redis://:{password}@127.0.0.1:{port}/0"
    else:
        os.environ.pop("REDIS_CLUSTER_URL", None)
    env = dict(os.environ)
    env["OLDPWD"] = env.get("PWD") or os.getcwd()
    env["PWD"] = ROOT
    if command:
        env["_"] = _program(command[0], env) or command[0]
    return env


def _program(name: str, env: dict[str, str]) -> str | None:
    """Where a shell finds name: as given when it has a slash, else on PATH."""
    return name if "/" in name else shutil.which(name, path=env.get("PATH", os.defpath))
