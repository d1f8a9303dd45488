"""The Redis users, one per service, written once: `python -m tools.redis_acl local` prints the
local stack's users file (deploy/local/stack.sh writes it from the passwords in its environment)
and `python -m tools.redis_acl dev-overlay` the dev overlay's
deploy/k8s/overlays/dev/datastores/redis/redis-users.acl (the same rules, each password as its
SHA-256; tests/deploy keep the committed file equal to it and try every user's rights:
test_redis_acl.py).

Each user is allowed the commands its code and its Lua scripts run, each on the key family it
runs them on, and nothing else (least privilege, as in any deployment). `default` is the
operator's (tools, tests, backups). Redis checks every command a script runs against the
caller's ACL, so a script is no way round it (and EVALSHA/SCRIPT LOAD grant nothing): each
selector, (~keys +commands), allows its commands on its keys only. No service user can DEL,
UNLINK, EXPIRE, RENAME, MOVE, SET, XTRIM or XSETID a stream or a backlog counter. What no ACL can
refuse is an option of an allowed command: XADD's MAXLEN/MINID trim the stream appended to
(ingest its message streams, likes its like streams, the flusher its dead letters), and an
INCRBY/DECRBY takes any number; the flusher XDELs the entries it acknowledged. docs/security.md
says what that leaves.

Every key of a stream shard carries the shard's hash tag (one slot: its scripts and MULTIs stay
on one node): agora:msg:{m<s>}:events|backlog|backlog-bytes|backlog-reserved|backlog-rate(s)...|
dead|lease..., forum:{ls<s>}:..., forum:{c<course>}:access-version, forum:{dirty}:...,
agora:prune:{prune}:... The responses ingest keeps for keyed appends are single keys, each in its
own slot: agora:msg:idempotency:<account>:<digest>. In a key pattern `{` is an ordinary
character, `*` any text.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable, Mapping

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

# Writers add to the live feeds what they committed (trimming them by age, count and bytes,
# recording the versions that supersede an entry's text, beginning a new epoch: deleting what a
# feed held) and wake the feeds' watchers: the flusher to the accounts' and courses' feeds,
# ingest (forum writes) and likes (direct modes) to the courses'. A feed is its stream and three
# keys beside it in its slot (:meta, :versions, :versions-at; services/streams/lua/live/feed.lua).
# The feeds are derived, so trimming or dropping them loses nothing stored: a watcher that
# missed entries is told to reset and refetch.
INBOX_FEEDS = "~live:{a*}:inbox ~live:{a*}:inbox:*"
COURSE_FEEDS = "~live:{f*}:course ~live:{f*}:course:*"
_FEED_WRITES = (
    "+xadd +xrange +xlen +xtrim +xsetid +exists +expire +del +hmget +hget +hset +hdel +zadd"
    " +zrangebyscore +zrem +time"
)
LIVE_APPEND = f"({INBOX_FEEDS} {COURSE_FEEDS} {_FEED_WRITES})"
COURSE_APPEND = f"({COURSE_FEEDS} {_FEED_WRITES})"
LIVE_WAKE = "(~live:{w*}:wake +xadd)"

# Each user's selectors, in the order the file lists them; the commands beyond BASE and CLUSTER
# first (the flusher's transactions).
USERS: dict[str, tuple[str, tuple[str, ...]]] = {
    # ingest: appends to the message streams; counts their backlog (messages, bytes), holds room
    # for a call on a cluster, keeps the accounts' fair-share rates; drops a course's likes
    # access version after a forum write changed what the likes service may cache; keeps the
    # responses of keyed appends (claimed, kept, given back: ingest/kept_responses.py). A script's
    # keys grant nothing (each command it runs is checked): the last selector names every family
    # of the user.
    "ingest": (
        "",
        (
            "(~agora:msg:{m*}:events +xadd)",
            "(~agora:msg:{m*}:backlog ~agora:msg:{m*}:backlog-bytes +get +incrby)",
            "(~agora:msg:{m*}:backlog-reserved +hgetall +hset +hdel)",
            "(~agora:msg:{m*}:backlog-rates ~agora:msg:{m*}:backlog-rate:* +get +set)",
            "(~forum:{c*}:access-version +del)",
            "(~agora:msg:idempotency:* +set +get +del)",
            COURSE_APPEND,
            LIVE_WAKE,
            "(~agora:msg:{m*}:events ~agora:msg:{m*}:backlog* ~forum:{c*}:access-version"
            f" ~agora:msg:idempotency:* {COURSE_FEEDS} ~live:{{w*}}:wake +evalsha)",
        ),
    ),
    # likes: its users' liked SETs, last operations and direct-write guards (a cache it expires
    # and deletes), appends to the like streams and counts their bytes, the courses' access
    # versions, the dirty marks of a counterless pod.
    "likes": (
        "",
        (
            "(~forum:{ls*}:u:* +exists +get +set +del +expire +sadd +srem +sismember +smismember"
            " +hget +hgetall +hset +hdel)",
            "(~forum:{ls*}:like-events +xadd +xlen)",
            "(~forum:{ls*}:like-events:bytes +get +incrby)",
            "(~forum:{c*}:access-version +get +set)",
            "(~forum:{dirty}:* +sadd)",
            COURSE_APPEND,
            LIVE_WAKE,
            "(~forum:{ls*}:u:* ~forum:{ls*}:like-events ~forum:{ls*}:like-events:bytes"
            f" ~forum:{{c*}}:access-version ~forum:{{dirty}}:* {COURSE_FEEDS} ~live:{{w*}}:wake"
            " +evalsha)",
        ),
    ),
    # flusher: consumes both stream families and acknowledges (XACK + XDEL) what it stored,
    # gives the backlog back, counts each pending entry's failed attempts (a hash beside the
    # stream, expiring), dead-letters (a capped stream), holds its shard leases and their
    # epochs, forgets flushed last operations, reconciles the dirty marks, runs the prune and
    # periodic jobs.
    "flusher": (
        "+multi +exec +discard",
        (
            "(~agora:msg:{m*}:events ~forum:{ls*}:like-events +xgroup|create +xreadgroup +xread"
            " +xrevrange +xautoclaim +xpending +xinfo|groups +xlen +xack +xdel)",
            "(~agora:msg:{m*}:events:failures ~forum:{ls*}:like-events:failures +exists"
            " +hincrby +hdel +pexpire)",
            "(~agora:msg:{m*}:dead ~forum:{ls*}:like-events:dead +xadd +xlen +xrange)",
            "(~agora:msg:{m*}:backlog ~agora:msg:{m*}:backlog-bytes"
            " ~forum:{ls*}:like-events:bytes +get +decrby)",
            "(~agora:msg:{m*}:lease ~agora:msg:{m*}:lease:epoch ~forum:{ls*}:lease"
            " ~forum:{ls*}:lease:epoch +get +set +pexpire +del +incr)",
            "(~agora:msg:lease-members ~forum:like-lease-members +zadd +zremrangebyscore +zcard"
            " +zrem)",
            "(~forum:{ls*}:u:*:ops +hget +hset +hdel)",
            "(~forum:{dirty}:* +sadd +spop)",
            "(~agora:prune:{prune}:* +zadd +zrem +zrangebyscore +zcard)",
            "(~agora:prune:lock:* ~agora:jobs:* +get +set +del +pexpire +pttl)",
            LIVE_APPEND,
            LIVE_WAKE,
            "(~agora:msg:* ~agora:prune:* ~agora:jobs:* ~forum:{ls*}:* ~forum:like-lease-members"
            f" ~forum:{{dirty}}:* {INBOX_FEEDS} {COURSE_FEEDS} ~live:{{w*}}:wake +evalsha)",
        ),
    ),
    # timeline: reads the live feeds (its script checks a position and reads after it in one
    # step; its periodic look asks each feed's meta) and the wake streams; it writes only a
    # feed's first epoch, when a watch "from now on" finds none (a small hash, and the deletion
    # of what an epochless feed held).
    "timeline": (
        "",
        (
            "(~live:{a*}:inbox ~live:{f*}:course +exists +xrange +del +time)",
            "(~live:{a*}:inbox:meta ~live:{f*}:course:meta +hmget +hset +expire)",
            "(~live:{a*}:inbox:versions* ~live:{f*}:course:versions* +hget +del)",
            "(~live:{w*}:wake +exists +xinfo|stream +xread)",
            f"({INBOX_FEEDS} {COURSE_FEEDS} +evalsha)",
        ),
    ),
    # gateway: its rate-limit logs (sliding windows on Redis's clock), trimmed, counted, expiring;
    # the leases of its users' open event streams (services/gateway/stream_bounds.py).
    "gateway": (
        "",
        (
            "(~agora:ratelimit:* +time +zremrangebyscore +zcard +zadd +zrange +pexpire +evalsha)",
            "(~agora:live-streams:* +time +zremrangebyscore +zcard +zadd +zrange +zrem +pexpire"
            " +evalsha)",
        ),
    ),
}


def render(passwords: Mapping[str, str], secret: Callable[[str], str]) -> str:
    """The users file: `passwords` by user ("default" and each of USERS), each written as
    `secret(password)` (">plain" or "#sha256")."""
    lines = [f"user default on {secret(passwords['default'])} ~* &* +@all"]
    for name, (extra, selectors) in USERS.items():
        rights = " ".join(part for part in (BASE, extra, CLUSTER) if part)
        lines.append(f"user agora-{name} {rights} {secret(passwords[name])} {' '.join(selectors)}")
    return "\n".join(lines) + "\n"


def plain(password: str) -> str:
    return f">{password}"


def hashed(password: str) -> str:
    return "#" + hashlib.sha256(password.encode()).hexdigest()


# The dev overlay's passwords: DEVELOPMENT DEFAULTS, the same its URLs carry.
DEV_PASSWORDS = {"default": "dev-redis-password"} | {
    name: f"dev-redis-{name}-password" for name in USERS
}


def main(argv: list[str]) -> int:
    if argv == ["local"]:
        # The local stack's variables (deploy/local/stack.env, exported by stack.sh).
        passwords = {"default": os.environ["REDIS_PASSWORD"]} | {
            name: os.environ[f"REDIS_{name.upper()}_PASSWORD"] for name in USERS
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
