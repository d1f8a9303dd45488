"""The stack's variables: deploy/local/stack.env, a second stack's $AGORA_VAR/stack.env, and the
files `run` adds (env/test.env, ...). They are shell files that run-service.sh sources too, so
bash reads them here as well and every value means what it means there; whatever they set is
exported to every program the stack starts (a shell's `set -a`)."""

import os
import re
from collections.abc import Sequence

from . import shell
from .paths import HERE, PY, ROOT, VAR, VENV

_ASSIGNMENT = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)=")

# Sources the files in order (a later one sees what an earlier one set) with the stack's own shell
# variables at hand ($root, as in the services' files), then prints each assigned name's value.
_SOURCE = r"""
here=$1 root=$2 var=$3 venv=$4 py=$5
shift 5
set -a
while [ "$1" != -- ]; do . "$1"; shift; done
shift
for name; do printf '%s\0' "${!name}"; done
"""


def source(files: Sequence[str]) -> None:
    names = list(dict.fromkeys(name for path in files for name in _assigned(path)))
    argv = ["bash", "-ec", _SOURCE, "bash", HERE, ROOT, VAR, VENV, PY, *files, "--", *names]
    values = shell.output(argv, check=True).split("\0")
    os.environ.update(zip(names, values, strict=False))


def load() -> None:
    """The stack's own variables, as every command starts with them."""
    files = [f"{HERE}/stack.env"]
    # A second stack beside this one (AGORA_VAR elsewhere, e.g. an HA drill while the first keeps
    # running) names its own ports in its state directory.
    if os.path.isfile(f"{VAR}/stack.env"):
        files.append(f"{VAR}/stack.env")
    source(files)


def get(name: str) -> str:
    """A variable as the shell expands it: empty when unset."""
    return os.environ.get(name, "")


def number(name: str) -> int:
    return int(get(name))


def _mode(name: str, default: str) -> str:
    try:
        with open(f"{VAR}/{name}") as kept:
            return kept.read().rstrip("\n") or default
    except (OSError, UnicodeDecodeError):
        return default


def redis_mode() -> str:
    """Which Redis the services use: single (the default) or cluster, as the last `up` chose
    (REDIS=...). Kept in var/redis-mode so that run-service.sh, `run` and the banner agree."""
    return _mode("redis-mode", "single")


def ha_mode() -> str:
    """Whether the datastores run on their HA engines: 0 (the single servers, the default) or 1,
    as the last `up` chose (HA=...). Kept in var/ha-mode, like var/redis-mode."""
    return _mode("ha-mode", "0")


def keep_mode(name: str, value: str) -> None:
    os.makedirs(VAR, exist_ok=True)
    with open(f"{VAR}/{name}", "w") as kept:
        kept.write(f"{value}\n")


def _assigned(path: str) -> list[str]:
    try:
        with open(path) as lines:
            return [m.group(1) for line in lines if (m := _ASSIGNMENT.match(line))]
    except OSError:
        return []  # bash says why it cannot read the file, and the command ends
