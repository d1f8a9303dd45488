"""Talking to the stack's supervisord (var/run/supervisor.sock)."""

import os
import stat
from collections.abc import Sequence

from . import shell
from .paths import VAR, VENV


def argv(*args: str) -> list[str]:
    return [f"{VENV}/bin/supervisorctl", "-c", f"{VAR}/supervisord.conf", *args]


def ctl(*args: str, quiet: bool = False) -> None:
    """supervisorctl ARGS with its output discarded (with quiet, its complaints too); what it
    could not do shows in the next wait or in `supervisorctl status`."""
    shell.status(argv(*args), stdout=shell.DEVNULL, stderr=shell.DEVNULL if quiet else None)


def must(*args: str) -> None:
    """supervisorctl ARGS, its output discarded; a failure ends the stack's command."""
    shell.run(argv(*args), stdout=shell.DEVNULL)


def states(programs: Sequence[str]) -> str:
    return shell.output(argv("status", *programs))


def running() -> bool:
    sock = f"{VAR}/run/supervisor.sock"
    try:
        if not stat.S_ISSOCK(os.stat(sock).st_mode):
            return False
    except OSError:
        return False
    return shell.succeeds(argv("pid"))


def require() -> None:
    if not running():
        shell.die("the stack is not running (make up)")
