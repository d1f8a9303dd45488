"""`make backup` / `make restore` (tools/backup/) against real servers.

The source is a private Redis started with the stack's own redis.conf (AOF, fsync always), fed by
the real ingest and likes services and flushed into agora_test by the real consumers. The target
is a pair of throwaway databases that the restore creates (and the `throwaway` fixture drops) and
the same private Redis, restored in place. The claim under test (docs/reliability.md, "Backup and
restore"): a backup taken while ingest runs brings back every message acknowledged before its
Redis snapshot, exactly once.
"""

from __future__ import annotations

import asyncio
import json
import signal
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from agora.forum.v1 import like_service_pb2 as like_pb
from agora.forum.v1 import like_service_pb2_grpc

from services import keyspace
from services.likes import server as likes_service
from services.runtime.mysql import MysqlDatabase
from services.streams.likes import LikeStreams, LikeStreamSettings
from services.streams.messages import MessageStreams, MessageStreamSettings
from tests.deploy.backup_support import (
    ALL_STREAMS,
    COURSE,
    MESSAGE_STREAMS,
    Load,
    Targets,
    commit_without_ack,
    consumers,
    drain,
    enrol,
    fence_epochs,
    keep_draining,
    on,
    private_redis,
    python_tool,
    quiet,
    restore_by_command,
    restored_consumers,
    set_fences,
    source,
    stored_likes,
    stored_messages,
    target,
)
from tests.helpers import SHARDS, as_gateway, message_backlog, run_flusher
from tests.stack import Env, likes_settings, producers, serving
from tools import backup as tool
from tools.backup.redis_data import stream_backlog

pytestmark = pytest.mark.asyncio


async def test_a_backup_taken_during_ingest_restores_every_acknowledged_message_once(
    env: Env,
    clean: None,
    flusher_db: MysqlDatabase,
    pg_flusher: asyncpg.Pool,
    pg_admin: asyncpg.Pool,
    tmp_path: Path,
    throwaway: str,
) -> None:
    await enrol(pg_admin)
    async with private_redis(tmp_path / "redis") as server:
        async with (
            producers(env, server.url) as (ingest, likes),
            consumers(server.url, flusher_db, pg_flusher, range(2), "source") as flushing,
        ):
            load = Load(ingest, likes)
            # Before the backup: shards 0 and 1 are flushed as they go, shards 2 and 3 keep
            # everything in their streams, and part of shard 2 is committed but never
            # acknowledged (a flusher killed between COMMIT and ACK).
            for _ in range(20):
                await load.send()
            for _ in range(60):
                await load.like(*load.to_like.pop(0))
            assert await commit_without_ack(server.url, flusher_db, MESSAGE_STREAMS.stream(2))
            await drain(flushing)

            # During the backup (its own process), ingest, likes and flushing go on.
            stop = asyncio.Event()
            running = [
                asyncio.create_task(load.keep_sending(stop)),
                asyncio.create_task(load.keep_liking(stop)),
                asyncio.create_task(keep_draining(flushing, stop)),
            ]
            code, output = await python_tool(
                "backup",
                "--dir",
                str(tmp_path / "backups"),
                "--mysql-db",
                "agora_test",
                "--pg-db",
                "agora_test",
                "--redis-url",
                server.url,
            )
            await asyncio.sleep(0.3)
            stop.set()
            await asyncio.gather(*running)
            assert code == 0, output

        (directory,) = (tmp_path / "backups").iterdir()
        manifest = json.loads((directory / "manifest.json").read_text())
        snapshot = datetime.fromisoformat(manifest["redis"]["snapshot_requested_at"]).timestamp()
        before = {m for m, t in load.acked.items() if t < snapshot}
        liked_before = {pair for pair, t in load.liked.items() if t < snapshot}
        after = set(load.acked) - before
        streams = manifest["redis"]["streams"]
        # The snapshot holds unflushed entries (shards 2, 3) and pending ones (shard 2).
        assert sum(s["length"] for s in streams.values()) > 0
        assert streams[f"0/{MESSAGE_STREAMS.stream(2)}"]["pending"] > 0
        assert after, "ingest must go on while the backup runs"

        code, output = await restore_by_command(server, directory, throwaway)
        assert code == 0, output
        assert "restore OK: every check matches the manifest" in output, output

        # The restored tables are the manifest's, checked here without the tool's own code.
        mysql = [*tool.mysql_admin_argv(tool.Config.from_env()), "-N", "-B"]
        for table in ("zalo_messages", "zalo_conversations"):
            out = await tool.run([*mysql, "-e", f"CHECKSUM TABLE `{throwaway}`.{table}"])
            assert int(out.split()[-1]) == manifest["mariadb"]["tables"][table]["checksum"]
        conn = await asyncpg.connect(on(env.pg_admin_url, throwaway))
        try:
            async with conn.transaction():
                await conn.execute("SET LOCAL TimeZone = 'UTC'")
                md5 = await conn.fetchval(
                    "SELECT md5(coalesce(string_agg(h, '' ORDER BY h), ''))"
                    " FROM (SELECT md5(t::text) AS h FROM post_likes t) s"
                )
        finally:
            await conn.close()
        assert md5 == manifest["postgres"]["tables"]["public.post_likes"]["md5"]

        # AOF is on again and holds the restored data: it survives a kill -9 and a restart.
        client = server.client()
        try:
            persistence: Any = await client.info("persistence")
            assert persistence["aof_enabled"] == 1
            lengths = [int(await client.xlen(s)) for s in ALL_STREAMS]
        finally:
            await client.aclose()
        await server.signal(signal.SIGKILL)
        await server.start()
        client = server.client()
        try:
            assert [int(await client.xlen(s)) for s in ALL_STREAMS] == lengths
            assert sum(lengths) > 0
            backlog = await message_backlog(client, MESSAGE_STREAMS)
        finally:
            await client.aclose()
        assert backlog > 0

        # The dumps are newer than the snapshot, so their fencing rows can hold epochs the
        # snapshot's lease counters never reached (a lease taken between the two): here every
        # shard's row is ahead, and the flusher must raise its counters past them.
        await set_fences(env, throwaway, epoch=50)

        # The real flusher re-applies the restored streams to the restored databases.
        targets = Targets(
            server.url, on(env.mysql_flusher_url, throwaway), on(env.pg_flusher_url, throwaway)
        )
        exit_code = await run_flusher(
            targets, fault_point="", name="after-restore", until_drained=ALL_STREAMS
        )
        assert exit_code == 0

    assert min(await fence_epochs(env, throwaway)) > 50
    stored = await stored_messages(env, throwaway)
    assert {m for m in before if stored.get(m) != 1} == set()  # each stored exactly once
    assert {m for m, n in stored.items() if n != 1} == set()  # nothing twice
    assert set(stored) <= load.sent  # nothing made up
    likes_stored, drift = await stored_likes(env, throwaway)
    assert liked_before - likes_stored == set()
    assert drift == []
    # Shards 2 and 3 were never flushed during the backup: their messages came back only from
    # the snapshot's streams, so what came back is exactly what was acknowledged before the
    # fork (one sender: acknowledgement order is append order).
    streamed = {m for m, s in load.shard.items() if s >= 2}
    fork = max(load.acked[m] for m in streamed if m in stored)
    assert {m for m in streamed if load.acked[m] < fork and m not in stored} == set()
    # Evidence for docs/reliability.md (shown with pytest -s).
    print(
        f"\nbackup during ingest: {len(before)} messages acknowledged before the snapshot was"
        f" requested, all stored once; the last one in the snapshot was acknowledged"
        f" {fork - snapshot:.2f}s after the request (the fork: repl-diskless-sync-delay);"
        f" {len([m for m in after if m in stored])} of {len(after)} acknowledged after the"
        f" request survived (before the fork, or flushed before the dumps); {len(liked_before)}"
        f" likes before it, all stored; snapshot {manifest['redis']['snapshot_requested_at']} →"
        f" {manifest['redis']['snapshot_completed_at']}; MariaDB commits blocked"
        f" {manifest['mariadb']['commit_block_ms']} ms; the streams held"
        f" {sum(s['length'] for s in streams.values())} entries"
    )


async def test_a_damaged_backup_is_refused_before_anything_is_touched(
    clean: None, tmp_path: Path, throwaway: str
) -> None:
    async with private_redis(tmp_path / "redis", sync_delay=0) as server:
        client = server.client()
        try:
            await client.set("marker", "before")
            directory = await tool.backup(source(server), tmp_path / "backups", out=quiet)
            await client.set("marker", "after the backup")
            damaged = directory / tool.POSTGRES_FILE
            data = bytearray(damaged.read_bytes())
            data[len(data) // 2] ^= 0xFF
            damaged.write_bytes(bytes(data))

            code, output = await restore_by_command(server, directory, throwaway)
            assert code == 2, output
            assert "refused" in output, output
            assert "postgres.dump is damaged" in output, output
            # Nothing was touched: no target database, Redis never stopped nor replaced.
            assert await client.get("marker") == b"after the backup"
            show = f"SHOW DATABASES LIKE '{throwaway}'"
            mysql = [*tool.mysql_admin_argv(tool.Config.from_env()), "-N", "-e", show]
            assert (await tool.run(mysql)).strip() == b""
            assert not list(server.directory.glob("pre-restore-*"))

            (directory / tool.REDIS_FILE).unlink()
            with pytest.raises(tool.Refused, match="is missing"):
                await tool.restore(target(server, throwaway), directory, out=quiet)
            (directory / tool.MANIFEST).unlink()
            with pytest.raises(tool.Refused, match="not a backup"):
                await tool.restore(target(server, throwaway), directory, out=quiet)
        finally:
            await client.aclose()


async def test_writes_between_the_snapshot_and_the_dumps(
    env: Env,
    clean: None,
    flusher_db: MysqlDatabase,
    pg_flusher: asyncpg.Pool,
    pg_admin: asyncpg.Pool,
    tmp_path: Path,
    throwaway: str,
) -> None:
    """The RPO window, with writes landed exactly inside it (the `between` hook): a message
    acknowledged before the snapshot and flushed in the window is stored once; one acknowledged
    and flushed in the window survives; one acknowledged in the window and not flushed is lost.
    A like flushed before the snapshot and taken back in the window: the snapshot's liked SET
    still says liked, the database does not; dropping the SETs makes both agree."""
    await enrol(pg_admin)
    async with private_redis(tmp_path / "redis", sync_delay=0) as server:
        async with (
            producers(env, server.url) as (ingest, likes),
            consumers(server.url, flusher_db, pg_flusher, range(SHARDS), "source") as flush_all,
        ):
            load = Load(ingest, likes)
            await load.like(1000, 1)
            await drain(flush_all)  # liked, in the database and in the SET
            await load.like(1001, 1)  # acknowledged, still in its stream at the snapshot
            await load.send(["m-before"], account=1)

            async def window() -> None:
                await drain(flush_all)  # m-before and 1001's like: now in the dumps too
                await load.send(["m-window-flushed"], account=1)
                await load.like(1000, 1, like=False)
                await drain(flush_all)
                await load.send(["m-window-unflushed"], account=1)

            directory = await tool.backup(
                source(server), tmp_path / "backups", out=quiet, between=window
            )

        cfg = target(server, throwaway)
        report = await tool.restore(cfg, directory, out=quiet, drop_liked=False)
        assert report.ok, [c for c in report.checks if not c.ok]
        async with restored_consumers(env, server.url, throwaway) as restored_flush:
            await drain(restored_flush)

        stored = await stored_messages(env, throwaway)
        assert stored.get("m-before") == 1  # in the dump and in the stream: applied once
        assert stored.get("m-window-flushed") == 1  # after the snapshot, but in the dump
        assert "m-window-unflushed" not in stored  # the RPO: after the snapshot, not flushed
        likes_stored, drift = await stored_likes(env, throwaway)
        assert (1000, 1) not in likes_stored
        assert (1001, 1) in likes_stored
        assert drift == []

        settings = likes_settings(
            env, redis_url=server.url, postgres_url=on(env.pg_likes_url, throwaway)
        )
        async with (
            serving(await likes_service.build(settings)) as likes_server,
            as_gateway(likes_server.port, env.jwt_secret) as channel,
        ):
            restored = like_service_pb2_grpc.LikeServiceStub(channel)

            async def liked(user: int) -> bool:
                reply = await restored.LikedMap(
                    like_pb.LikedMapRequest(
                        user_id=user,
                        course_id=COURSE,
                        targets=[like_pb.Target(kind=like_pb.TARGET_KIND_POST, id=1)],
                    )
                )
                return bool(reply.liked[0])

            # Kept, the snapshot's SET contradicts the newer database (what drop_liked prevents).
            assert await liked(1000) is True
            assert await tool.drop_liked_sets(server.url) > 0
            assert await liked(1000) is False
            assert await liked(1001) is True


async def test_negative_control_dumping_the_databases_before_the_snapshot_loses_a_message(
    env: Env,
    clean: None,
    flusher_db: MysqlDatabase,
    pg_flusher: asyncpg.Pool,
    tmp_path: Path,
    throwaway: str,
) -> None:
    """The same accounting with the order reversed must see the loss: a message acknowledged
    before both and flushed between them is in neither the dumps nor the snapshot."""
    async with private_redis(tmp_path / "redis", sync_delay=0) as server:
        async with (
            producers(env, server.url) as (ingest, likes),
            consumers(server.url, flusher_db, pg_flusher, range(SHARDS), "source") as flush_all,
        ):
            load = Load(ingest, likes)
            await load.send(["m-acknowledged-first"], account=1)

            async def window() -> None:
                await drain(flush_all)

            directory = await tool.backup(
                source(server), tmp_path / "backups", out=quiet, between=window, redis_first=False
            )
        report = await tool.restore(target(server, throwaway), directory, out=quiet)
        assert report.ok
        async with restored_consumers(env, server.url, throwaway) as restored_flush:
            await drain(restored_flush)
        assert "m-acknowledged-first" not in await stored_messages(env, throwaway)


async def test_the_restore_waits_for_the_flusher_streams_only(tmp_path: Path) -> None:
    """The live feeds are streams nobody drains (trimmed by age): counting them, a restore waited
    its whole timeout for a backlog that could never empty."""
    messages = MessageStreams.from_settings(MessageStreamSettings())
    likes = LikeStreams.from_settings(LikeStreamSettings())
    async with private_redis(tmp_path / "redis") as server:
        client = server.client()
        try:
            for _ in range(3):
                await client.xadd(messages.stream(0), {"e": b"m"})
            await client.xadd(likes.stream(1), {"e": b"l"})
            await client.xadd(messages.dead_letters(0), {"e": b"dead"})
            await client.xadd(keyspace.family("live.inbox").key(account=1), {"e": b"feed"})
            await client.xadd(keyspace.family("live.wake").key(shard=1), {"e": b"wake"})
            assert await stream_backlog(server.url) == 4
        finally:
            await client.aclose()
