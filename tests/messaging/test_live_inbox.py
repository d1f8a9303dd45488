"""WatchInbox: every committed change of an account's inbox, pushed to its watchers after the
COMMIT, resumable from the last position received, a reset instead of a gap (docs/live.md)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TypeAlias

import grpc
import pytest
import redis.asyncio as redis
from agora.messaging.v1 import ingest_service_pb2 as ingest_pb
from agora.messaging.v1 import ingest_service_pb2_grpc, timeline_service_pb2_grpc
from agora.messaging.v1 import timeline_service_pb2 as pb

from services.domain.live import POSITION_HEADER
from services.runtime.grpc_server import GrpcServer
from services.runtime.stream_ids import ORIGIN, FeedPosition, Position
from services.runtime.tokens import Principal, TokenVerifier
from tests.helpers import FEEDS, Flusher, at, gateway_stub, message
from tests.live.watching import started, take
from tests.stack import Env, serving_timeline
from tools import callers
from tools.jwt_token import mint

pytestmark = pytest.mark.asyncio
Stream: TypeAlias = grpc.aio.UnaryStreamCall
TimelineStub: TypeAlias = timeline_service_pb2_grpc.TimelineServiceStub


@pytest.fixture
def watch(timeline: TimelineStub, clean: None) -> TimelineStub:
    """TimelineService as the gateway calls it, on clean datastores; each watch passes its user's
    token itself."""
    return timeline


def token(env: Env, accounts: list[int], ttl: int = 600, user: int = 7) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {mint(env.jwt_secret, user, accounts, ttl)}")]


def open_watch(
    stub: TimelineStub,
    env: Env,
    account: int = 1,
    after: str = "",
    accounts: list[int] | None = None,
    ttl: int = 600,
) -> Stream:
    return stub.WatchInbox(
        pb.WatchInboxRequest(account_id=account, after=after),
        metadata=token(env, accounts if accounts is not None else [account], ttl),
        timeout=30,
    )


@dataclass(frozen=True)
class Inbox:
    """Where the watched accounts' messages come from: ingest, then the flusher, whose commit
    publishes them on each account's feed."""

    ingest: ingest_service_pb2_grpc.IngestServiceStub
    flusher: Flusher

    async def receive(self, *msgs: tuple[str, str], account: int = 1) -> None:
        """Messages (msg_id, thread) of `account`, ingested and flushed."""
        await self.ingest.IngestMessages(
            ingest_pb.IngestMessagesRequest(
                account_id=account,
                messages=[message(m, thread=t, sent_at=at(i)) for i, (m, t) in enumerate(msgs)],
            )
        )
        await self.flusher.drain()


@pytest.fixture
def inbox(ingest: ingest_service_pb2_grpc.IngestServiceStub, flusher: Flusher) -> Inbox:
    return Inbox(ingest, flusher)


async def test_a_stored_message_and_its_conversation_reach_the_watcher_after_the_commit(
    watch: TimelineStub, inbox: Inbox, env: Env
) -> None:
    stream = open_watch(watch, env)
    await started(stream)
    await inbox.receive(("m1", "t1"))

    sent, state = await take(stream, 2)
    assert sent.WhichOneof("item") == "message"
    assert sent.message.msg_id == "m1"
    assert sent.message.id > 0
    assert sent.message.zalo_conversation_id > 0
    assert sent.message.HasField("created_at")
    assert state.WhichOneof("item") == "conversation"
    assert (state.conversation.thread_id, state.conversation.unread_count) == ("t1", 1)
    assert FeedPosition.parse(sent.position).entry < FeedPosition.parse(state.position).entry
    assert "traceparent" in sent.trace_context  # the flusher's batch, linked to ingest

    read = ingest_pb.MarkReadRequest(account_id=1, conversation_key="t1")
    await inbox.ingest.MarkRead(read)
    await inbox.flusher.drain()
    [marked] = await take(stream, 1)
    assert marked.conversation.unread_count == 0
    assert marked.conversation.HasField("last_read_at")
    stream.cancel()


async def test_a_watch_resumed_after_its_last_position_misses_nothing_and_repeats_nothing(
    watch: TimelineStub, inbox: Inbox, env: Env
) -> None:
    first = open_watch(watch, env)
    await started(first)
    await inbox.receive(("m1", "t1"), ("m2", "t2"))
    seen = await take(first, 4)  # two messages, two conversations
    first.cancel()
    # Away: three more messages commit meanwhile.
    await inbox.receive(("m3", "t1"), ("m4", "t1"), ("m5", "t2"))

    resumed = open_watch(watch, env, after=seen[1].position)
    got = await take(resumed, 2 + 5)  # the rest of the first batches, then the second ones
    delivered = seen[:2] + got
    positions = [r.position for r in delivered]
    assert len(set(positions)) == len(positions)  # nothing twice
    by_thread: dict[str, list[str]] = {}
    for r in delivered:
        if r.WhichOneof("item") == "message":
            by_thread.setdefault(r.message.thread_id, []).append(r.message.msg_id)
    # Every message once, in order per conversation (conversations on other shards interleave).
    assert by_thread == {"t1": ["m1", "m3", "m4"], "t2": ["m2", "m5"]}
    # Live again: a message after the resume comes through the same stream.
    await inbox.receive(("m6", "t2"))
    [live, _state] = await take(resumed, 2)
    assert live.message.msg_id == "m6"
    resumed.cancel()


async def test_a_watch_sees_only_its_own_account(
    watch: TimelineStub,
    inbox: Inbox,
    env: Env,
    redis_client: redis.Redis,
) -> None:
    stream = open_watch(watch, env, account=1)
    await started(stream)
    await inbox.receive(("other", "t1"), account=2)
    await inbox.receive(("mine", "t1"), account=1)
    [sent, _state] = await take(stream, 2)
    assert sent.message.msg_id == "mine"
    assert sent.message.zalo_account_id == 1
    assert await redis_client.xlen(FEEDS.inbox(2)) == 2  # account 2's feed had its own events
    stream.cancel()


async def starts_at(stream: Stream) -> FeedPosition:
    """Where a watch starts (its initial metadata)."""
    return FeedPosition.parse(dict(await stream.initial_metadata())[POSITION_HEADER])


async def test_a_position_of_another_epoch_gets_a_reset_then_the_live_events(
    watch: TimelineStub, inbox: Inbox, env: Env
) -> None:
    # A position of a feed that lost its history since (it expired, its node restarted): what
    # came between may be gone, so the watcher must refetch; then it goes on from the reset.
    stream = open_watch(watch, env, after="olderepoch.1000-0")
    [reset] = await take(stream, 1)
    assert reset.WhichOneof("item") == "reset"
    assert "epoch" in reset.reset.reason
    # From the feed's current epoch, which has nothing yet.
    assert FeedPosition.parse(reset.position).epoch != "olderepoch"
    assert FeedPosition.parse(reset.position).entry == ORIGIN
    await inbox.receive(("m1", "t1"))
    [sent, _state] = await take(stream, 2)
    assert sent.message.msg_id == "m1"
    stream.cancel()


@pytest.mark.parametrize("ahead", [True, False])
async def test_a_position_the_feed_never_had_gets_a_reset(
    watch: TimelineStub, inbox: Inbox, env: Env, ahead: bool
) -> None:
    """Ahead of the feed (its newest entries lost in a failover or a restore), or between two of
    its entries: not one of its positions."""
    await inbox.receive(("m1", "t1"))
    head = await starts_at(open_watch(watch, env))
    # Between two entries: the message's event may sit at the millisecond before the head's, at
    # sequence 0; no entry of a feed has a sequence that high.
    entry = Position(99999999999999, 0) if ahead else Position(head.entry.ms - 1, 999_999)
    stream = open_watch(watch, env, after=str(FeedPosition(head.epoch, entry)))
    [reset] = await take(stream, 1)
    assert reset.WhichOneof("item") == "reset"
    assert ("ahead" if ahead else "not one of") in reset.reset.reason
    assert FeedPosition.parse(reset.position) == head
    stream.cancel()


@pytest.mark.parametrize("after", ["yesterday", "1733000000000-0", "x" * 1000, "0-0"])
async def test_a_position_that_is_no_position_gets_a_reset_at_once(
    watch: TimelineStub, env: Env, after: str
) -> None:
    """A client holding what no feed gives (another version's position, a made-up one) is
    answered as any position the feed cannot go on from: one reset, from where it starts."""
    stream = open_watch(watch, env, after=after)
    [reset] = await take(stream, 1, within=2)
    assert reset.WhichOneof("item") == "reset"
    assert "not one a feed gives" in reset.reset.reason
    assert FeedPosition.parse(reset.position) == await starts_at(stream)
    with pytest.raises(TimeoutError):
        await take(stream, 1, within=1)
    stream.cancel()


async def test_another_accounts_token_is_refused_and_a_bad_token_is_unauthenticated(
    watch: TimelineStub,
    env: Env,
    timeline_server: GrpcServer,
    inbox: Inbox,
    clean: None,
) -> None:
    """A token forwarded is checked as on every call. Forwarding none, the gateway watches for
    itself (one watch per feed, shared by its streams, which it checks itself)."""
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await take(open_watch(watch, env, account=1, accounts=[2]), 1)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    async with callers.connect(f"127.0.0.1:{timeline_server.port}", "gateway") as bare:
        stub = TimelineStub(bare)
        with pytest.raises(grpc.aio.AioRpcError) as forged:
            await take(
                stub.WatchInbox(
                    pb.WatchInboxRequest(account_id=1),
                    metadata=(("authorization", "Bearer not-a-token"),),
                    timeout=10,
                ),
                1,
            )
        assert forged.value.code() == grpc.StatusCode.UNAUTHENTICATED
        own = stub.WatchInbox(pb.WatchInboxRequest(account_id=1), timeout=30)
        await started(own)
        await inbox.receive(("m1", "t1"))
        [sent, _state] = await take(own, 2)
        own.cancel()
    assert sent.message.msg_id == "m1"


async def test_the_stream_ends_unauthenticated_when_the_token_expires(
    watch: TimelineStub, env: Env
) -> None:
    stream = open_watch(watch, env, ttl=2)
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await take(stream, 1, within=15)
    assert ended.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "expired" in (ended.value.details() or "")


async def test_a_watch_verifies_its_forwarded_token_once(
    watch: TimelineStub, env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The access interceptor verifies the end user's token; the watch ends at that token's
    expiry from what the interceptor found, without verifying it again."""
    verified: list[str] = []
    verify = TokenVerifier.verify

    def counted(self: TokenVerifier, token: str) -> Principal:
        verified.append(token)
        return verify(self, token)

    monkeypatch.setattr(TokenVerifier, "verify", counted)
    stream = open_watch(watch, env, ttl=2)
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await take(stream, 1, within=15)
    assert ended.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "expired" in (ended.value.details() or "")
    assert len(verified) == 1


async def test_an_internal_watcher_may_watch_any_account_and_call_nothing_else(
    inbox: Inbox, timeline_server: GrpcServer, clean: None
) -> None:
    """An auto-reply worker: its own certificate, no end user."""
    async with callers.connect(f"127.0.0.1:{timeline_server.port}", "watcher") as channel:
        stub = TimelineStub(channel)
        stream = stub.WatchInbox(pb.WatchInboxRequest(account_id=1), timeout=30)
        await started(stream)
        await inbox.receive(("m1", "t1"))
        [sent, _state] = await take(stream, 2)
        assert sent.message.msg_id == "m1"
        stream.cancel()
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.CountUnread(pb.CountUnreadRequest(account_id=1, conversation_key="t1"))
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_a_replica_holding_its_bound_of_watches_refuses_the_next_as_unavailable(
    env: Env, clean: None
) -> None:
    """Past LIVE_MAX_WATCHES a new watch is refused UNAVAILABLE (the caller retries, elsewhere);
    once one ends, the place is free again."""
    async with (
        serving_timeline(env, live_max_watches=1) as server,
        gateway_stub(server.port, env.jwt_secret, TimelineStub) as stub,
    ):
        first = open_watch(stub, env)
        await started(first)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await take(open_watch(stub, env), 1)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "1 watches" in (refused.value.details() or "")
        first.cancel()
        await asyncio.sleep(0.5)
        again = open_watch(stub, env)
        await started(again)
        assert not again.done()
        again.cancel()
