"""The Redis users, one per service, derived from the keyspace: `python -m tools.redis_acl local`
prints the local stack's users file (deploy/local/stack.sh writes it from the passwords in its
environment) and `python -m tools.redis_acl dev-overlay` the dev overlay's
deploy/k8s/overlays/dev/datastores/redis/redis-users.acl (the same rules, each password as its
SHA-256; tests/deploy keep the committed file equal to it and try every user's rights:
test_redis_acl.py).

Each user is allowed, on each key family services/keyspace declares it touches, the commands
the declaration names (its code's and its Lua scripts'), and nothing else: one selector
(~keys +commands) per set of families granted the same commands, and one (&channels +commands)
per pub/sub channel family it publishes or subscribes on. `default` is the operator's
(tools, tests, backups). Redis checks every command a script runs against the caller's ACL, so
a script is no way round it (and EVALSHA/SCRIPT LOAD grant nothing). No service user can DEL,
UNLINK, EXPIRE, RENAME, MOVE, SET, XTRIM or XSETID a durable stream or a backlog counter. What
no ACL can refuse is an option of an allowed command: XADD's MAXLEN/MINID trim the stream
appended to (ingest its message streams, likes its like streams, the flusher its dead letters),
and an INCRBY/DECRBY takes any number; the flusher XDELs the entries it acknowledged.
docs/security.md says what that leaves. In a key pattern `{` is an ordinary character, `*` any
text.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable, Mapping

from services import keyspace

# Every user: connecting (not CLIENT KILL/LIST/PAUSE: -@dangerous), INFO (the eviction check),
# SELECT, loading its scripts; no key outside its selectors.
BASE = (
    "on resetchannels resetkeys -@all +@connection -@dangerous +info +select +script|load"
    " +script|exists"
)
# redis-py's cluster client reads the topology (CLUSTER SLOTS/SHARDS/NODES/INFO/MYID) and follows
# redirections (ASKING, READONLY, READWRITE); WAIT holds an acknowledgement until replicas have
# the write (REDIS_WAIT_REPLICAS). None is @dangerous; on the single Redis they are harmless.
CLUSTER = (
    "+cluster|slots +cluster|shards +cluster|nodes +cluster|info +cluster|myid +readonly"
    " +readwrite +asking +wait"
)

# Commands on no key, by user: the flusher's transactions; Redis's clock for the feeds' writers
# and watcher and for the gateway's sliding windows.
KEYLESS: dict[str, str] = {
    "ingest": "+time",
    "likes": "+time",
    "flusher": "+multi +exec +discard +time",
    "timeline": "+time",
    "gateway": "+time",
}


def selectors(user: str) -> list[str]:
    """The user's selectors. Redis allows a command when one selector allows the command and
    every key it names, so each selector pairs a set of commands with every family the user
    runs them on: a multi-key command (a script's EVALSHA, a DEL of a feed and the keys beside
    it) then finds its keys in one selector."""
    families: dict[str, list[str]] = {}
    for family in keyspace.FAMILIES:
        for command in family.commands(user):
            families.setdefault(command, []).append(family.pattern)
    grouped: dict[tuple[str, ...], list[str]] = {}
    for command, patterns in families.items():
        grouped.setdefault(tuple(patterns), []).append(command)
    keyed = [
        "(" + " ".join([*(f"~{p}" for p in patterns), *(f"+{c}" for c in commands)]) + ")"
        for patterns, commands in grouped.items()
    ]
    # Pub/sub: each channel family's commands on its channels only (`&pattern`), keys none.
    channels = [
        "(" + " ".join([f"&{c.pattern}", *(f"+{command}" for command in c.commands(user))]) + ")"
        for c in keyspace.CHANNELS
        if c.commands(user)
    ]
    return keyed + channels


def render(passwords: Mapping[str, str], secret: Callable[[str], str]) -> str:
    """The users file: `passwords` by user ("default" and each service), each written as
    `secret(password)` (">plain" or "#sha256")."""
    lines = [f"user default on {secret(passwords['default'])} ~* &* +@all"]
    for name in keyspace.SERVICES:
        rights = " ".join((BASE, KEYLESS[name], CLUSTER))
        granted = " ".join(selectors(name))
        lines.append(f"user agora-{name} {rights} {secret(passwords[name])} {granted}")
    return "\n".join(lines) + "\n"


def plain(password: str) -> str:
    return f">{password}"


def hashed(password: str) -> str:
    return "#" + hashlib.sha256(password.encode()).hexdigest()


# The dev overlay's passwords: DEVELOPMENT DEFAULTS, the same its URLs carry.
DEV_PASSWORDS = {"default": "dev-redis-password"} | {
    name: f"dev-redis-{name}-password" for name in keyspace.SERVICES
}


def main(argv: list[str]) -> int:
    if argv == ["local"]:
        # The local stack's variables (deploy/local/stack.env, exported by stack.sh).
        passwords = {"default": os.environ["REDIS_PASSWORD"]} | {
            name: os.environ[f"REDIS_{name.upper()}_PASSWORD"] for name in keyspace.SERVICES
        }
        sys.stdout.write(render(passwords, plain))
        return 0
    if argv == ["dev-overlay"]:
        sys.stdout.write(render(DEV_PASSWORDS, hashed))
        return 0
    sys.stderr.write("usage: python -m tools.redis_acl local | dev-overlay\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
