"""The machine the stack runs on: who we are, the servers' own users, PostgreSQL's binaries."""

import glob
import os
import pwd
import re
import shutil

from . import shell


def is_root() -> bool:
    return os.geteuid() == 0


def user_name() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


# Administration goes through the unix sockets with OS-user authentication: no admin password.
def admin_user() -> str:
    return "root" if is_root() else user_name()


def pg_superuser() -> str:
    return "postgres" if is_root() else user_name()


def pg_bin() -> str:
    """The newest PostgreSQL's server binaries."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_order)
    if not found:
        shell.die("PostgreSQL server binaries not found under /usr/lib/postgresql")
    return found[-1]


def chown(path: str, user: str, *, recursive: bool = False) -> None:
    """user:user, as chown -R gives a tree to a server's own user."""
    shutil.chown(path, user, user)
    if recursive:
        for top, dirs, files in os.walk(path):
            for name in dirs + files:
                shutil.chown(os.path.join(top, name), user, user)


def open_path_for(user: str, directory: str) -> None:
    """mysql and postgres run as their own users and must be able to reach ./var. A checkout
    under a private directory (mktemp -d is 0700) blocks them, so open the path for traversal
    only (o+x)."""
    if not is_root() or _can_traverse(user, directory):
        return
    parts = directory.removeprefix("/").split("/")
    if parts[-1] == "":
        parts.pop()
    reached = ""
    for part in parts:
        reached = f"{reached}/{part}"
        if not _can_traverse(user, reached):
            shell.log(f"allowing {user} to traverse {reached} (chmod o+x)")
            os.chmod(reached, os.stat(reached).st_mode & 0o7777 | 0o001)


def _can_traverse(user: str, directory: str) -> bool:
    return shell.status(["runuser", "-u", user, "--", "test", "-x", directory]) == 0


def _version_order(path: str) -> list[tuple[int, str]]:
    """sort -V's order: runs of digits compare as numbers."""
    return [(int(run), "") if run.isdigit() else (-1, run) for run in re.findall(r"\d+|\D+", path)]
