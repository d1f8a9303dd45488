"""deploy/local/stack.sh's commands (cli.py lists them). Run as a directory, `python3
deploy/local/stack`: its parent goes first on the path so that this is the package `stack`.
System Python and its standard library only: `setup` is what makes the virtualenv."""

import os
import sys

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from stack.cli import main  # noqa: E402


def _callers_locale() -> None:
    """Python sets LC_CTYPE for itself under the C locale (PEP 538); the programs the stack
    starts get the caller's locale, as a shell would pass it on."""
    try:
        with open("/proc/self/environ", "rb") as given:
            initial = dict(v.partition(b"=")[::2] for v in given.read().split(b"\0") if v)
    except OSError:
        return
    if b"LC_CTYPE" in initial:
        os.environb[b"LC_CTYPE"] = initial[b"LC_CTYPE"]
    else:
        os.environ.pop("LC_CTYPE", None)


_callers_locale()
sys.exit(main(sys.argv[1:]))
