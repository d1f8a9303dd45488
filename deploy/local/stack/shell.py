"""Running other programs the way the stack always has: a command that fails ends the stack's
command with the same exit status, a check is quiet and only says yes or no, a wait gives up with
the name of what never became ready."""

import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, NoReturn

# A child's output goes to the terminal, a file, nowhere, or back to the stack (a pipe).
Sink = int | IO[bytes] | IO[str] | None
DEVNULL = subprocess.DEVNULL
PIPE = subprocess.PIPE
STDOUT = subprocess.STDOUT

# What a shell answers for a program it cannot start: not found, or found but not executable.
NOT_FOUND = 127
NOT_EXECUTABLE = 126


def log(message: str) -> None:
    sys.stderr.write(f"\033[1m==> {message}\033[0m\n")
    sys.stderr.flush()


def die(message: str) -> NoReturn:
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(1)


def which(program: str) -> str | None:
    """Where a program is, as `command -v` finds it on PATH."""
    return shutil.which(program)


def exit_status(returncode: int) -> int:
    """A child killed by a signal ends with 128 + the signal's number, as a shell reports it."""
    return 128 - returncode if returncode < 0 else returncode


def status(
    argv: Sequence[str],
    *,
    stdout: Sink = None,
    stderr: Sink = None,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Runs argv and returns its exit status (a program that cannot start: 127 or 126, said on
    stderr as a shell says it)."""
    return _completed(argv, None, stdout, stderr, None, cwd, env, -1)[0]


def run(
    argv: Sequence[str],
    *,
    stdin: Sink = None,
    stdout: Sink = None,
    text: str | None = None,
    cwd: str | None = None,
    umask: int = -1,
) -> None:
    """Runs argv (its input the text given, or stdin); when it fails, the stack's command ends
    with its exit status, as under `set -e`."""
    code = _completed(argv, stdin, stdout, None, text, cwd, None, umask)[0]
    if code:
        raise SystemExit(code)


def capture(
    argv: Sequence[str],
    *,
    stderr: Sink = None,
    text: str | None = None,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[int, str]:
    """argv's exit status and its standard output without the trailing newlines, as `$(argv)`
    reads it."""
    code, out = _completed(argv, None, PIPE, stderr, text, cwd, env, -1)
    return code, out.rstrip("\n")


def output(
    argv: Sequence[str],
    *,
    stderr: Sink = None,
    text: str | None = None,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = False,
) -> str:
    """argv's standard output, as `$(argv)` reads it; with check, a failure ends the stack's
    command with its exit status."""
    code, out = capture(argv, stderr=stderr, text=text, cwd=cwd, env=env)
    if check and code:
        raise SystemExit(code)
    return out


def run_logged(argv: Sequence[str], logfile: str, failure: str) -> None:
    """argv with all its output in logfile, which is shown when it fails."""
    with open(logfile, "wb") as log_file:
        code = status(argv, stdout=log_file, stderr=STDOUT)
    if code:
        with open(logfile, "rb") as log_file:
            sys.stdout.flush()
            sys.stderr.buffer.write(log_file.read())
        die(failure)


def succeeds(argv: Sequence[str]) -> bool:
    """Whether argv exits 0, its output discarded: the checks a wait repeats."""
    return status(argv, stdout=DEVNULL, stderr=DEVNULL) == 0


def wait_for(what: str, seconds: int, ready: Callable[[], bool]) -> None:
    for _ in range(seconds * 5):
        if ready():
            return
        time.sleep(0.2)
    die(f"{what} is not ready after {seconds}s (make logs)")


def _completed(
    argv: Sequence[str],
    stdin: Sink,
    stdout: Sink,
    stderr: Sink,
    text: str | None,
    cwd: str | None,
    env: Mapping[str, str] | None,
    umask: int,
) -> tuple[int, str]:
    sys.stdout.flush()
    try:
        done = subprocess.run(  # noqa: S603 (the stack's own commands and the caller's)
            list(argv),
            stdin=stdin if text is None else None,
            input=None if text is None else text.encode(),
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            env=env,
            umask=umask,
            check=False,
        )
    except FileNotFoundError:
        if stderr is None:
            sys.stderr.write(f"stack.sh: {argv[0]}: command not found\n")
        return NOT_FOUND, ""
    except PermissionError:
        if stderr is None:
            sys.stderr.write(f"stack.sh: {argv[0]}: Permission denied\n")
        return NOT_EXECUTABLE, ""
    out = done.stdout.decode(errors="surrogateescape") if done.stdout is not None else ""
    return exit_status(done.returncode), out
