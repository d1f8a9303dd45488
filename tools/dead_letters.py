"""List and replay dead letters: `make dead-letters [REPLAY=<id>|REPLAY=all]`.

An entry that keeps failing on its data (not on the infrastructure) becomes a dead letter: the
entry's original fields plus where it came from, its error and how often it was delivered.
Replaying puts the entry back on its stream (services/streams/replay.py): a
message counts against ingest's backlog again; a like is replayed only while it is still the
user's last operation on that target, and refused as obsolete otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis

from services.runtime import redis_client
from services.streams import entries
from services.streams.likes import LikeStreams, LikeStreamSettings
from services.streams.messages import MessageStreams, MessageStreamSettings
from services.streams.replay import Replayed, Replayer
from tools.ports import stack_redis

MESSAGES = MessageStreams.from_settings(MessageStreamSettings())
LIKES = LikeStreams.from_settings(LikeStreamSettings())


@dataclass(frozen=True)
class DeadLetter:
    stream: str
    id: str
    source_stream: str
    source_id: str
    error: str
    deliveries: int
    fields: dict[Any, Any]


async def list_dead(client: redis.Redis, stream: str, count: int = 100) -> list[DeadLetter]:
    found = []
    rows: Any = await client.xrange(stream, count=count)
    for entry_id, fields in rows:
        found.append(
            DeadLetter(
                stream=stream,
                id=entry_id.decode(),
                source_stream=fields.get(entries.FIELD_SOURCE_STREAM, b"").decode(),
                source_id=fields.get(entries.FIELD_SOURCE_ID, b"").decode(),
                error=fields.get(entries.FIELD_ERROR, b"").decode(errors="replace"),
                deliveries=int(fields.get(entries.FIELD_DELIVERIES, b"0")),
                fields=dict(fields),
            )
        )
    return found


async def replay(
    client: redis.Redis,
    letter: DeadLetter,
    message_streams: MessageStreams = MESSAGES,
    like_streams: LikeStreams = LIKES,
) -> Replayed:
    """Put the letter's entry back on its stream, or refuse it (Replayed.new_id is None)."""
    replayer = Replayer(client, message_streams, like_streams)
    return await replayer.replay(letter.stream, letter.id, letter.fields)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--replay", default="", help="a dead-letter id, or 'all'")
    args = parser.parse_args()
    url, cluster = stack_redis()
    client = redis_client.connect(url, cluster=cluster)
    try:
        streams = MESSAGES.all_dead_letters() + LIKES.all_dead_letters()
        total = 0
        for stream in streams:
            letters = await list_dead(client, stream)
            total += len(letters)
            if letters:
                print(f"{stream}: {len(letters)} dead letter(s)")
            for letter in letters:
                if args.replay in ("all", letter.id):
                    result = await replay(client, letter)
                    if result.new_id is None:
                        print(f"  {letter.id} NOT replayed: {result.reason}")
                    else:
                        print(
                            f"  {letter.id} replayed to {letter.source_stream} as {result.new_id}"
                        )
                else:
                    print(
                        f"  {letter.id} from {letter.source_stream} {letter.source_id}"
                        f" after {letter.deliveries} deliveries: {letter.error}"
                    )
        print(f"{total} dead letter(s) in {len(streams)} dead-letter streams")
    finally:
        await client.aclose()


if __name__ == "__main__":
    asyncio.run(main())
