"""Redis Lua scripts, each a .lua file in a `lua/` folder beside the code that runs it.

A script's first line is its shebang (`#!lua flags=…`): Redis then checks that it touches only
the keys it declares, which is what keeps every script slot-safe on a Redis Cluster.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import redis.asyncio as redis
from redis.commands.core import AsyncScript


@cache
def _read(package: str | None, name: str) -> str:
    if not package:
        raise ValueError(f"{name}.lua: scripts belong to a package")
    return (resources.files(package) / "lua" / f"{name}.lua").read_text(encoding="utf-8")


def source(package: str | None, name: str, *, before: tuple[str, ...] = ()) -> str:
    """The script `<package>/lua/<name>.lua` (`package`: the caller's `__package__`).

    `before` is Lua put between its shebang and its own text: the functions it calls (each a
    `library`) and constants the Python side owns, since a Redis script cannot load a module."""
    text = _read(package, name)
    if not text.startswith("#!lua"):
        raise ValueError(f"{name}.lua: a script starts with its #!lua shebang")
    if not before:
        return text
    shebang, _, body = text.partition("\n")
    return "\n".join((shebang, *(part.rstrip("\n") for part in before), body))


def library(package: str | None, name: str) -> str:
    """Lua functions other scripts put in front of their own text (no shebang of its own)."""
    text = _read(package, name)
    if text.startswith("#!"):
        raise ValueError(f"{name}.lua: a library has no shebang; only whole scripts do")
    return text


def register(client: redis.Redis, package: str | None, name: str) -> AsyncScript:
    """The script `name` of `package`, ready to call on `client` (EVALSHA, loaded on demand)."""
    return client.register_script(source(package, name))
