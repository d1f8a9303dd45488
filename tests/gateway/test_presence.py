"""Presence (docs/presence.md): an agent's `viewing` and `typing` reach the other agents of the
account on its event stream within a second, end by themselves (an `idle` within seconds of the
state's length) or at once with an `idle`, are never in the durable feed nor replayed on a resume,
are bounded per account, and are refused to a token without the account. Real Redis (as the
gateway's own Redis user), real gateways under uvicorn, two of them where replicas matter."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import jwt
import pytest
import redis.asyncio as redis
from agora.messaging.v1 import ingest_service_pb2 as ingest_pb
from agora.messaging.v1 import ingest_service_pb2_grpc

from services import keyspace
from tests.gateway import sse_client as sse
from tests.helpers import FEEDS, Flusher, at, message, mint_token
from tests.stack import Env

pytestmark = pytest.mark.asyncio

gateway = sse.gateway
events = sse.events
Gateway = sse.Gateway

EVENTS = "/api/zalo-accounts/1/events"
PRESENCE = "/api/zalo-accounts/1/presence"
LAN = "Nguyễn Thị Lan"
TTL = 2.0


def at_conversation(key: str) -> str:
    return f"/api/zalo-accounts/1/conversations/{key}/presence"


def named_token(secret: str, *, sub: int, accounts: list[int], name: str) -> str:
    """A token as an identity provider issues one: with OpenID Connect's `name` claim."""
    token = mint_token(secret, sub=sub, accounts=accounts)
    claims: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
    kid = jwt.get_unverified_header(token)["kid"]
    return jwt.encode({**claims, "name": name}, secret, algorithm="HS256", headers={"kid": kid})


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def put(url: str, token: str, key: str, state: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url) as client:
        return await client.put(at_conversation(key), json={"state": state}, headers=bearer(token))


async def current(url: str, token: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=url) as client:
        answer = await client.get(PRESENCE, headers=bearer(token))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["success"] is True
    entries: list[dict[str, Any]] = body["presence"]
    return entries


async def next_presence(stream: sse.EventStream, within: float) -> sse.Event:
    event = await stream.next(within)
    assert event.event == "presence", event
    assert event.id is None, "a presence event has no id: it never moves the position"
    return event


async def test_another_agent_sees_viewing_then_typing_then_idle_once_it_expires(
    clean: None, gateway: Gateway, env: Env, redis_client: redis.Redis
) -> None:
    lan = named_token(env.jwt_secret, sub=8, accounts=[1], name=f"  {LAN} ")
    other = mint_token(env.jwt_secret, sub=7, accounts=[1])
    async with (
        gateway(presence_ttl_seconds=TTL) as (url, _),
        events(url, EVENTS, other) as stream,
    ):
        await stream.opening()
        assert (await put(url, lan, "t1", "viewing")).status_code == 204
        viewing = await next_presence(stream, within=1)
        assert viewing.data["conversation_key"] == "t1"
        assert viewing.data["user"] == {"user_id": 8, "name": LAN}
        assert viewing.data["state"] == "viewing"
        assert (await put(url, lan, "t1", "typing")).status_code == 204
        typing = await next_presence(stream, within=1)
        assert (typing.data["state"], typing.data["user"]["user_id"]) == ("typing", 8)
        listed = await current(url, other)
        assert [(e["conversation_key"], e["user"], e["state"]) for e in listed] == [
            ("t1", {"user_id": 8, "name": LAN}, "typing")
        ]
        assert listed[0]["expires_at"] == typing.data["expires_at"]
        # Lan closes the tab: no `idle` comes from her, the state ends by itself.
        stopped = time.monotonic()
        idle = await next_presence(stream, within=TTL + 2)
        assert time.monotonic() - stopped < TTL + 2
        assert (idle.data["state"], idle.data["conversation_key"]) == ("idle", "t1")
        assert idle.data["user"] == {"user_id": 8, "name": LAN}
        assert await current(url, other) == []
    # An idle account leaves nothing in Redis.
    expiry = keyspace.family("coordination.presence_expiry").key(account=1)
    entries = keyspace.family("coordination.presence_entries").key(account=1)
    assert await redis_client.exists(expiry, entries) == 0


async def test_idle_ends_the_state_at_once_and_a_name_is_null_without_a_claim(
    clean: None, gateway: Gateway, env: Env
) -> None:
    agent = mint_token(env.jwt_secret, sub=8, accounts=[1])
    other = mint_token(env.jwt_secret, sub=7, accounts=[1])
    async with (
        gateway(presence_ttl_seconds=30) as (url, _),
        events(url, EVENTS, other) as stream,
    ):
        await stream.opening()
        assert (await put(url, agent, "t2", "viewing")).status_code == 204
        viewing = await next_presence(stream, within=1)
        assert viewing.data["user"] == {"user_id": 8, "name": None}
        started = time.monotonic()
        assert (await put(url, agent, "t2", "idle")).status_code == 204
        idle = await next_presence(stream, within=1)
        assert time.monotonic() - started < 1
        assert (idle.data["state"], idle.data["conversation_key"]) == ("idle", "t2")
        assert await current(url, other) == []
        # An idle for a state that already ended says nothing more.
        assert (await put(url, agent, "t2", "idle")).status_code == 204
        with pytest.raises(TimeoutError):
            await stream.next(within=0.5)


async def test_every_replica_streams_it_and_an_expiry_is_announced_once_per_stream(
    clean: None, gateway: Gateway, env: Env
) -> None:
    """A state written through one gateway reaches the streams of another; each stream, on
    either, hears its end exactly once."""
    lan = named_token(env.jwt_secret, sub=8, accounts=[1], name=LAN)
    other = mint_token(env.jwt_secret, sub=7, accounts=[1])
    async with (
        gateway(presence_ttl_seconds=TTL) as (first, _),
        gateway(presence_ttl_seconds=TTL) as (second, _),
        events(first, EVENTS, other) as on_first,
        events(second, EVENTS, other) as on_second,
    ):
        await on_first.opening()
        await on_second.opening()
        assert (await put(second, lan, "t3", "typing")).status_code == 204
        for stream in (on_first, on_second):
            seen = await next_presence(stream, within=1)
            assert (seen.data["state"], seen.data["user"]["name"]) == ("typing", LAN)
        for stream in (on_first, on_second):
            assert (await next_presence(stream, within=TTL + 2)).data["state"] == "idle"
        for stream in (on_first, on_second):
            with pytest.raises(TimeoutError):
                await stream.next(within=1)


async def test_presence_never_lands_in_the_durable_feed_nor_comes_back_on_a_resume(
    clean: None,
    gateway: Gateway,
    env: Env,
    redis_client: redis.Redis,
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
) -> None:
    agent = mint_token(env.jwt_secret, sub=8, accounts=[1])
    other = mint_token(env.jwt_secret, sub=7, accounts=[1])

    async def send(msg_id: str, second: int) -> None:
        await ingest.IngestMessages(
            ingest_pb.IngestMessagesRequest(
                account_id=1, messages=[message(msg_id, sent_at=at(second))]
            )
        )
        await flusher.drain()

    async with gateway(presence_ttl_seconds=30) as (url, _):
        async with events(url, EVENTS, other) as stream:
            await stream.opening()
            await send("m1", 1)
            stored = await stream.next()
            assert (stored.event, stored.data["msg_id"]) == ("message", "m1")
            state = await stream.next()
            assert state.event == "conversation"
            for key, what in (("t1", "viewing"), ("t1", "typing"), ("t9", "viewing")):
                assert (await put(url, agent, key, what)).status_code == 204
                assert (await next_presence(stream, within=1)).data["state"] == what
            last = state.id
        assert last is not None
        # The feed holds the message and its conversation, nothing of presence.
        feed: Any = await redis_client.xrange(FEEDS.inbox(1))
        assert len(feed) == 2
        assert all(b"viewing" not in v and b"typing" not in v for _, e in feed for v in e.values())
        # Back with the last id: what comes after it is the next message, no presence again.
        async with events(url, EVENTS, other, last) as resumed:
            await resumed.opening()
            await send("m2", 2)
            got = [await resumed.next() for _ in range(2)]
            assert [e.event for e in got] == ["message", "conversation"]
            assert got[0].data["msg_id"] == "m2"
            with pytest.raises(TimeoutError):
                await resumed.next(within=0.5)
        # Yet the states are current (GET reads them).
        assert {(e["conversation_key"], e["state"]) for e in await current(url, other)} == {
            ("t1", "typing"),
            ("t9", "viewing"),
        }


async def test_an_account_holds_at_most_its_bound_the_newest_kept(
    clean: None, gateway: Gateway, env: Env, redis_client: redis.Redis
) -> None:
    cap = 5
    agents = [mint_token(env.jwt_secret, sub=sub, accounts=[1]) for sub in (7, 8)]
    async with (
        gateway(presence_ttl_seconds=30, presence_max_per_account=cap) as (url, _),
        events(url, EVENTS, agents[0]) as stream,
    ):
        await stream.opening()
        written = [(agents[n % 2], f"c{n}") for n in range(cap + 4)]
        for token, key in written:
            assert (await put(url, token, key, "viewing")).status_code == 204
        listed = await current(url, agents[0])
        assert len(listed) == cap
        assert {e["conversation_key"] for e in listed} == {key for _, key in written[-cap:]}
        expiry = keyspace.family("coordination.presence_expiry").key(account=1)
        assert await redis_client.zcard(expiry) == cap
        # The streams are told that the dropped ones ended.
        frames = [await next_presence(stream, within=1) for _ in range(len(written) + 4)]
        ended = {e.data["conversation_key"] for e in frames if e.data["state"] == "idle"}
        assert ended == {key for _, key in written[:4]}


async def test_a_token_without_the_account_is_refused_and_a_bad_state_names_the_field(
    clean: None, gateway: Gateway, env: Env
) -> None:
    stranger = mint_token(env.jwt_secret, sub=9, accounts=[2])
    agent = mint_token(env.jwt_secret, sub=8, accounts=[1])
    async with gateway() as (url, _), httpx.AsyncClient(base_url=url) as client:
        refused = await client.put(
            at_conversation("t1"), json={"state": "viewing"}, headers=bearer(stranger)
        )
        assert refused.status_code == 403, refused.text
        assert (await client.get(PRESENCE, headers=bearer(stranger))).status_code == 403
        async with events(url, EVENTS, stranger) as stream:
            assert stream.response.status_code == 403
        for body in ({"state": "away"}, {"state": None}, {}, {"state": "viewing "}):
            bad = await client.put(at_conversation("t1"), json=body, headers=bearer(agent))
            assert bad.status_code == 422, (body, bad.text)
            error = bad.json()["error"]
            assert error["code"] == "invalid_argument"
            assert [f["field"] for f in error["fields"]] == ["state"], error
        assert await current(url, agent) == []


async def test_presence_writes_are_rate_limited_per_user(
    clean: None, gateway: Gateway, env: Env
) -> None:
    agent = mint_token(env.jwt_secret, sub=8, accounts=[1])
    other = mint_token(env.jwt_secret, sub=7, accounts=[1])
    async with gateway(presence_writes_per_minute=3) as (url, _):
        for state in ("viewing", "typing", "typing"):
            assert (await put(url, agent, "t1", state)).status_code == 204
        refused = await put(url, agent, "t1", "typing")
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["retry-after"]) >= 1
        assert "presence updates" in refused.json()["error"]["message"]
        assert (await put(url, other, "t1", "viewing")).status_code == 204


async def test_a_subscription_redis_cut_comes_back_and_tells_what_changed_meanwhile(
    clean: None, gateway: Gateway, env: Env, redis_client: redis.Redis
) -> None:
    """Pub/sub keeps nothing for a subscriber that is away, and redis-py subscribes again by
    itself: once it has, the process reads the account and tells its streams what they missed
    (here changes made behind the channel's back, as if their messages had been lost)."""
    agent = mint_token(env.jwt_secret, sub=8, accounts=[1])
    other = mint_token(env.jwt_secret, sub=7, accounts=[1])
    expiry = keyspace.family("coordination.presence_expiry").key(account=1)
    entries = keyspace.family("coordination.presence_entries").key(account=1)
    async with (
        gateway(presence_ttl_seconds=30) as (url, _),
        events(url, EVENTS, other) as stream,
    ):
        await stream.opening()
        assert (await put(url, agent, "t5", "viewing")).status_code == 204
        assert (await next_presence(stream, within=1)).data["state"] == "viewing"
        seconds, micros = await redis_client.time()
        ends = seconds * 1000 + micros // 1000 + 30_000
        await redis_client.zrem(expiry, "8:t5")
        await redis_client.hdel(entries, "8:t5")
        await redis_client.zadd(expiry, {"8:t6": ends})
        person = '{"conversation_key":"t6","user_id":8,"name":null}'
        await redis_client.hset(entries, "8:t6", f"typing {person}")
        with pytest.raises(TimeoutError):
            await stream.next(within=0.5)  # nothing was published
        assert await redis_client.execute_command("CLIENT", "KILL", "TYPE", "pubsub") >= 1
        told = {
            (e.data["conversation_key"], e.data["state"])
            for e in [await next_presence(stream, within=3) for _ in range(2)]
        }
        assert told == {("t5", "idle"), ("t6", "typing")}


async def test_a_stream_joining_later_still_hears_the_end_of_what_was_there(
    clean: None, gateway: Gateway, env: Env
) -> None:
    """A process that begins to follow an account reads what it holds: an entry written before
    the first stream opened still ends with an `idle` on it."""
    agent = mint_token(env.jwt_secret, sub=8, accounts=[1])
    other = mint_token(env.jwt_secret, sub=7, accounts=[1])
    async with gateway(presence_ttl_seconds=TTL) as (url, _):
        assert (await put(url, agent, "t4", "viewing")).status_code == 204
        async with events(url, EVENTS, other) as stream:
            await stream.opening()
            assert [e["conversation_key"] for e in await current(url, other)] == ["t4"]
            idle = await next_presence(stream, within=TTL + 2)
            assert (idle.data["state"], idle.data["conversation_key"]) == ("idle", "t4")
    await asyncio.sleep(0)
