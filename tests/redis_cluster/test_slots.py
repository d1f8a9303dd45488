"""Every key layout and script is slot-safe, and the cluster-only paths keep their guarantees.

Static: the keys one script or multi-key command touches share one hash slot, and every script
carries a shebang, so that a Redis Cluster itself refuses a script reaching outside its slot (the
negative control below shows it does). Live, on a local cluster of three masters with a replica
each: ingest's two-step append is stored whole or refused whole, a dead process's reservation
expires, and WAIT turns a write the replicas do not have into an error, not an acknowledgement.
The stream, likes and messaging tests run on a cluster too (`make test`'s second pass).
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as redis
from agora.events.v1 import message_events_pb2 as events
from redis.crc import key_slot
from redis.exceptions import ResponseError

from services import keyspace
from services.flusher.maintenance.prune import PruneQueue
from services.gateway.rate_limit import RateLimiter
from services.ingest.repository import BacklogFull, MessageStreamRepository
from services.runtime import lua
from services.runtime.redis_client import DurableScripts, NotReplicated
from services.streams.consumer import failures_key
from services.streams.like_cache import LikeCache
from services.streams.likes import COMMENT, POST, LikeStreams
from services.streams.messages import MessageStreams
from services.streams.monitor import counters_sum
from tests.helpers import ROOT, message
from tests.redis_cluster.local_cluster import emptied
from tools.redis_cluster import LocalCluster

SHARDS = 8


def slot(key: str) -> int:
    return int(key_slot(key.encode()))


def registered_scripts() -> dict[str, str]:
    """Every Lua script a service registers, as Redis gets it: 'module:NAME' (a script put
    together in Python, `client.register_script(NAME)`) or 'module:lua/name' (a .lua file as is,
    `lua.register(client, __package__, "name")`) → its text."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "services").rglob("*.py")):
        # The loader's own call registers whichever file it is given (counted where it is used).
        if path.name == "__main__.py" or path == ROOT / "services/runtime/lua.py":
            continue
        tree = ast.parse(path.read_text())
        calls = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("register_script", "register")
            and (node.func.attr == "register_script" or ast.unparse(node.func.value) == "lua")
        ]
        if not calls:
            continue
        module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for call in calls:
            if call.func.attr == "register":  # type: ignore[attr-defined]
                name = ast.literal_eval(call.args[2])
                found[f"{module.__name__}:lua/{name}"] = lua.source(module.__package__, name)
                continue
            name = ast.unparse(call.args[0])
            value: Any = module
            for part in name.split("."):
                value = getattr(value, part)
            found[f"{module.__name__}:{name}"] = value
    return found


def test_every_script_has_a_shebang_so_the_cluster_checks_its_keys() -> None:
    scripts = registered_scripts()
    assert len(scripts) >= 20, sorted(scripts)
    missing = [name for name, text in scripts.items() if not text.startswith("#!lua")]
    assert missing == []
    # None may opt out of the check.
    assert [n for n, t in scripts.items() if "allow-cross-slot-keys" in t.splitlines()[0]] == []


def consumer_keys(streams: MessageStreams | LikeStreams, shard: int) -> list[str]:
    """The keys a shard's consumer keeps, whichever the stream: the stream itself, its dead
    letters, its lease and epoch, its failure counts."""
    stream = streams.stream(shard)
    return [
        stream,
        streams.dead_letters(shard),
        streams.lease_key(shard),
        streams.lease_epoch_key(shard),
        failures_key(stream),
    ]


def test_the_keys_of_one_message_shard_share_one_slot_and_shards_spread() -> None:
    streams = MessageStreams(keyspace.PREFIXES["messages"], SHARDS)
    slots = []
    for s in range(SHARDS):
        keys = [
            *consumer_keys(streams, s),
            streams.backlog_key(s),
            streams.backlog_bytes_key(s),
            streams.reserved_key(s),
        ]
        assert {slot(k) for k in keys} == {slot(keys[0])}, keys
        slots.append(slot(keys[0]))
    assert len(set(slots)) == SHARDS


def test_a_users_like_keys_share_the_slot_of_the_users_stream_shard() -> None:
    streams = LikeStreams("forum", 4)
    cache = LikeCache.beside(streams)
    for user in range(1, 200):
        shard = streams.shard_of(user)
        keys = [
            cache.liked_set(user, 3),
            cache.last_ops(user, 3),
            streams.backlog_bytes(shard),
            *consumer_keys(streams, shard),
        ]
        assert {slot(k) for k in keys} == {slot(keys[0])}, keys
    assert slot(cache.dirty(POST)) == slot(cache.dirty(COMMENT))
    assert len({slot(streams.stream(s)) for s in range(4)}) == 4


def test_the_prune_queue_lives_in_one_slot() -> None:
    queue = PruneQueue(redis.Redis())
    assert slot(queue.due_key) == slot(queue.running_key)


@pytest_asyncio.fixture(loop_scope="session")
async def client(cluster: LocalCluster) -> AsyncIterator[redis.Redis]:
    async with emptied(cluster) as connected:
        yield connected


@pytest.mark.asyncio(loop_scope="session")
async def test_the_cluster_refuses_a_script_that_reaches_a_second_slot(
    client: redis.Redis,
) -> None:
    """The negative control of the static checks: what a slot-unsafe script meets."""
    script = client.register_script(
        "#!lua\nredis.call('SET', KEYS[1], 1)\nreturn redis.call('GET', ARGV[1])"
    )
    first, second = (
        keyspace.family("messages.events").key(shard=0),
        keyspace.family("messages.events").key(shard=1),
    )
    assert slot(first) != slot(second)
    with pytest.raises(ResponseError, match=r"slot|cluster"):
        await script(keys=[first], args=[second])


def batch(*threads: str) -> dict[int, events.MessageStreamEntry]:
    streams = MessageStreams(keyspace.PREFIXES["messages"], SHARDS)
    out: dict[int, events.MessageStreamEntry] = {}
    for thread in threads:
        shard = streams.shard_of(1, thread)
        entry = out.setdefault(shard, events.MessageStreamEntry(account_id=1))
        entry.messages.messages.append(message(f"{thread}-m", thread=thread))
    return out


def spread_threads(count: int) -> list[str]:
    """Threads of account 1 landing on `count` different shards."""
    streams = MessageStreams(keyspace.PREFIXES["messages"], SHARDS)
    by_shard: dict[int, str] = {}
    for i in range(1000):
        by_shard.setdefault(streams.shard_of(1, f"t{i}"), f"t{i}")
        if len(by_shard) == count:
            return list(by_shard.values())
    raise AssertionError("not enough shards")


async def stream_lengths(client: redis.Redis, streams: MessageStreams) -> list[int]:
    return [int(await client.xlen(s)) for s in streams.all_streams()]


@pytest.mark.asyncio(loop_scope="session")
async def test_a_call_over_many_shards_is_stored_whole_on_the_cluster(
    client: redis.Redis, cluster: LocalCluster
) -> None:
    streams = MessageStreams(keyspace.PREFIXES["messages"], SHARDS)
    repo = MessageStreamRepository(client, streams, 8_000, 10_000_000)
    threads = spread_threads(SHARDS)
    masters = {(await cluster.master_of(streams.stream(s))).port for s in range(SHARDS)}
    assert len(masters) == 3, "the shards should spread over every master"

    await repo.append(batch(*threads))

    assert await stream_lengths(client, streams) == [1] * SHARDS
    backlog = [streams.backlog_key(s) for s in range(SHARDS)]
    assert await counters_sum(client, backlog) == SHARDS
    # Nothing stays reserved once the call is stored.
    assert [await client.hlen(streams.reserved_key(s)) for s in range(SHARDS)] == [0] * SHARDS


@pytest.mark.asyncio(loop_scope="session")
async def test_a_call_one_full_shard_refuses_is_refused_whole_on_the_cluster(
    client: redis.Redis,
) -> None:
    streams = MessageStreams(keyspace.PREFIXES["messages"], SHARDS)
    repo = MessageStreamRepository(client, streams, 8 * 3, 10_000_000)  # 3 messages per shard
    threads = spread_threads(SHARDS)
    full = streams.shard_of(1, threads[-1])
    await client.set(streams.backlog_key(full), 3)

    with pytest.raises(BacklogFull, match="per stream shard"):
        await repo.append(batch(*threads))

    assert await stream_lengths(client, streams) == [0] * SHARDS
    assert [await client.hlen(streams.reserved_key(s)) for s in range(SHARDS)] == [0] * SHARDS
    await client.set(streams.backlog_key(full), 0)
    await repo.append(batch(*threads))
    assert await stream_lengths(client, streams) == [1] * SHARDS


@pytest.mark.asyncio(loop_scope="session")
async def test_the_reservation_of_a_process_that_died_expires(client: redis.Redis) -> None:
    streams = MessageStreams(keyspace.PREFIXES["messages"], SHARDS)
    repo = MessageStreamRepository(client, streams, 8 * 3, 10_000_000)
    [thread] = spread_threads(1)
    shard = streams.shard_of(1, thread)
    # What a process that died between the two steps leaves: room held, nothing appended.
    expires = int(time.time() * 1000) + 300
    await client.hset(streams.reserved_key(shard), "dead-call", f"3:100:{expires}")

    with pytest.raises(BacklogFull):
        await repo.append(batch(thread))
    await asyncio.sleep(0.4)
    await repo.append(batch(thread))

    assert await client.xlen(streams.stream(shard)) == 1
    assert await client.hlen(streams.reserved_key(shard)) == 0


@pytest.mark.asyncio(loop_scope="session")
async def test_an_append_is_acknowledged_only_once_a_replica_has_it(
    client: redis.Redis,
) -> None:
    streams = MessageStreams(keyspace.PREFIXES["messages"], SHARDS)
    threads = spread_threads(3)
    waits_one = DurableScripts(client, 1, 2_000)
    await MessageStreamRepository(client, streams, 8_000, 10_000_000, waits_one).append(
        batch(*threads)
    )
    # Each master has one replica: asking for two can never be met, so the write is not
    # acknowledged (the caller answers UNAVAILABLE and the client retries).
    waits_two = DurableScripts(client, 2, 200)
    with pytest.raises(NotReplicated, match="1 of 2 replicas"):
        await MessageStreamRepository(client, streams, 8_000, 10_000_000, waits_two).append(
            batch(*threads)
        )
    await waits_one.aclose()
    await waits_two.aclose()


@pytest.mark.asyncio(loop_scope="session")
async def test_the_gateways_rate_limit_runs_on_the_cluster(client: redis.Redis) -> None:
    limiter = RateLimiter(client, "like", 2, 60)
    decisions = [await limiter.hit(7) for _ in range(3)]
    assert [d.allowed for d in decisions] == [True, True, False]


def test_the_scripts_module_list_is_where_the_cluster_pass_runs_them() -> None:
    """The second pass of `make test` (the cluster) covers the modules that own the scripts."""
    makefile = (ROOT / "Makefile").read_text()
    for directory in ("tests/flusher", "tests/likes", "tests/messaging"):
        assert directory in makefile
        assert Path(ROOT / directory).is_dir()
