"""List and replay dead letters (seed 002 case 3): `make dead-letters [REPLAY=<id>|REPLAY=all]`.

A dead letter keeps the entry's original fields plus source_stream, source_id, error and
deliveries. Replaying appends the original fields to the source stream again (and gives a message
entry's count back to the ingest backlog) and removes the dead letter, in one MULTI/EXEC.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis

from services.streams import entries
from services.streams.likes import LikeStreams, LikeStreamSettings
from services.streams.messages import MessageStreams, MessageStreamSettings


@dataclass(frozen=True)
class DeadLetter:
    stream: str
    id: str
    source_stream: str
    source_id: str
    error: str
    deliveries: int
    fields: dict[Any, Any]


MESSAGES = MessageStreams.from_settings(MessageStreamSettings())
LIKES = LikeStreams.from_settings(LikeStreamSettings())


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
                fields={k: v for k, v in fields.items() if k not in entries.DEAD_LETTER_FIELDS},
            )
        )
    return found


async def replay(client: redis.Redis, letter: DeadLetter, backlog_key: str | None) -> str:
    """Put the entry back on its stream; returns the new entry id."""
    async with client.pipeline(transaction=True) as pipe:
        pipe.xadd(letter.source_stream, letter.fields)
        if backlog_key and entries.FIELD_UNITS in letter.fields:
            pipe.incrby(backlog_key, int(letter.fields[entries.FIELD_UNITS]))
        pipe.xdel(letter.stream, letter.id)
        new_id, *_ = await pipe.execute()
    return str(new_id.decode() if isinstance(new_id, bytes) else new_id)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--replay", default="", help="a dead-letter id, or 'all'")
    args = parser.parse_args()
    url = f"redis://:{os.environ['REDIS_PASSWORD']}@127.0.0.1:{os.environ['REDIS_PORT']}/0"
    client = redis.Redis.from_url(url)
    try:
        for stream in (MESSAGES.dead_letters, LIKES.dead_letters):
            letters = await list_dead(client, stream)
            print(f"{stream}: {len(letters)} dead letter(s)")
            for letter in letters:
                chosen = args.replay in ("all", letter.id)
                if chosen:
                    # A message entry counts against ingest's backlog bound again.
                    backlog = MESSAGES.backlog_key if stream == MESSAGES.dead_letters else None
                    new_id = await replay(client, letter, backlog)
                    print(f"  {letter.id} replayed to {letter.source_stream} as {new_id}")
                else:
                    print(
                        f"  {letter.id} from {letter.source_stream} {letter.source_id}"
                        f" after {letter.deliveries} deliveries: {letter.error}"
                    )
    finally:
        await client.aclose()


if __name__ == "__main__":
    asyncio.run(main())
