"""The IngestService RPC surface: per-message validation, durable append, proto out (the request's
fields are checked before, by services/domain/field_rules.py)."""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC
from typing import TypeVar

import grpc
from agora.events.v1 import message_events_pb2 as events
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc as pb_grpc
from agora.messaging.v1 import message_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2

from services.domain.idempotency import fingerprint, refused_as_grpc
from services.domain.instants import Limits
from services.ingest.accounts import AccountDirectory, AccountsUnavailable
from services.ingest.kept_responses import KeptResponses
from services.ingest.repository import AccountOverShare, BacklogFull, MessageStreamRepository
from services.ingest.validation import validate_batch, validate_receipts
from services.runtime.grpc_errors import FieldViolation, abort, abort_invalid, bad_request_status
from services.runtime.grpc_quota import abort_over_quota
from services.runtime.timeutil import to_timestamp, truncate_to_millis, utc_now
from services.streams.messages import MessageStreams

R = TypeVar("R", bound=Message)

UNKNOWN_ACCOUNT = FieldViolation("account_id", "no Zalo account has this id")


@dataclass(eq=False)
class IngestHandlers(pb_grpc.IngestServiceServicer):
    """Validates, shards by conversation, and appends; never writes a database directly."""

    limits: Limits
    streams: MessageStreams
    repo: MessageStreamRepository
    accounts: AccountDirectory
    kept: KeptResponses | None = None

    async def IngestMessages(
        self, request: pb.IngestMessagesRequest, context: grpc.aio.ServicerContext
    ) -> pb.IngestMessagesResponse:
        await self._require_account(request.account_id, context)
        return await self._once(
            request, context, pb.IngestMessagesResponse, lambda: self._ingest(request, context)
        )

    async def _ingest(
        self, request: pb.IngestMessagesRequest, context: grpc.aio.ServicerContext
    ) -> pb.IngestMessagesResponse:
        now = utc_now()
        accepted, rejected = validate_batch(request.messages, now.replace(tzinfo=UTC), self.limits)
        by_shard: dict[int, list[message_pb2.Message]] = defaultdict(list)
        for index in accepted:
            msg = request.messages[index]  # the request is ours: adjust in place, copy once below
            msg.sent_at.nanos -= msg.sent_at.nanos % 1_000_000  # keep milliseconds, as stored
            by_shard[self.streams.shard_of(request.account_id, msg.thread_id)].append(msg)

        accepted_at = to_timestamp(now)
        entries = {
            shard: events.MessageStreamEntry(
                account_id=request.account_id,
                accepted_at=accepted_at,
                messages=events.MessagesReceived(messages=msgs),
            )
            for shard, msgs in by_shard.items()
        }
        await self._append(entries, context)
        return pb.IngestMessagesResponse(
            accepted=len(accepted),
            rejected=[
                pb.Rejection(index=i, field=v.field, reason=v.description) for i, v in rejected
            ],
        )

    async def IngestReceipts(
        self, request: pb.IngestReceiptsRequest, context: grpc.aio.ServicerContext
    ) -> pb.IngestReceiptsResponse:
        await self._require_account(request.account_id, context)
        # All or none: a listener that sent a kind this server does not know (an UNSPECIFIED or
        # newer enum value) hears it now, not from a dead letter later.
        now = utc_now()
        violations = validate_receipts(
            request.receipts, request.reactions, now.replace(tzinfo=UTC), self.limits
        )
        if violations:
            await abort_invalid(context, violations)
        return await self._once(
            request,
            context,
            pb.IngestReceiptsResponse,
            lambda: self._ingest_receipts(request, context),
        )

    async def _ingest_receipts(
        self, request: pb.IngestReceiptsRequest, context: grpc.aio.ServicerContext
    ) -> pb.IngestReceiptsResponse:
        by_shard: dict[int, events.ReceiptsReceived] = defaultdict(events.ReceiptsReceived)
        for receipt in request.receipts:  # the request is ours: adjusted in place, as messages
            receipt.at.nanos -= receipt.at.nanos % 1_000_000
            shard = self.streams.shard_of(request.account_id, receipt.thread_id)
            by_shard[shard].receipts.append(receipt)
        for reaction in request.reactions:
            reaction.reacted_at.nanos -= reaction.reacted_at.nanos % 1_000_000
            shard = self.streams.shard_of(request.account_id, reaction.thread_id)
            by_shard[shard].reactions.append(reaction)
        accepted_at = to_timestamp(utc_now())
        entries = {
            shard: events.MessageStreamEntry(
                account_id=request.account_id, accepted_at=accepted_at, receipts=received
            )
            for shard, received in by_shard.items()
        }
        await self._append(entries, context)
        return pb.IngestReceiptsResponse(accepted=len(request.receipts) + len(request.reactions))

    async def RecordAgentSent(
        self, request: pb.RecordAgentSentRequest, context: grpc.aio.ServicerContext
    ) -> pb.RecordAgentSentResponse:
        await self._require_account(request.account_id, context)
        return await self._once(
            request,
            context,
            pb.RecordAgentSentResponse,
            lambda: self._record_agent_sent(request, context),
        )

    async def _record_agent_sent(
        self, request: pb.RecordAgentSentRequest, context: grpc.aio.ServicerContext
    ) -> pb.RecordAgentSentResponse:
        now = utc_now()
        sent_at = request.sent_at if request.HasField("sent_at") else to_timestamp(now)
        entry = events.MessageStreamEntry(
            account_id=request.account_id,
            accepted_at=to_timestamp(now),
            agent_sent=events.AgentSentRecorded(
                thread_id=request.thread_id,
                cli_msg_id=request.cli_msg_id,
                msg_id=request.msg_id,
                agent_user_id=request.agent_user_id,
                content=request.content,
                sent_at=truncate_to_millis(sent_at),
            ),
        )
        shard = self.streams.shard_of(request.account_id, request.thread_id)
        await self._append({shard: entry}, context)
        return pb.RecordAgentSentResponse()

    async def MarkRead(
        self, request: pb.MarkReadRequest, context: grpc.aio.ServicerContext
    ) -> pb.MarkReadResponse:
        now = utc_now()
        await self._require_account(request.account_id, context)
        # Never past the server's clock: a marker ahead of it (a client clock running fast, within
        # the skew times may have) would hide the next minutes' messages from the unread count.
        # The answer says what was stored.
        read_at = to_timestamp(now)
        asked = request.read_at if request.HasField("read_at") else read_at
        if asked.ToNanoseconds() < read_at.ToNanoseconds():
            read_at = truncate_to_millis(asked)
        entry = events.MessageStreamEntry(
            account_id=request.account_id,
            accepted_at=to_timestamp(now),
            read=events.ConversationRead(thread_id=request.conversation_key, read_at=read_at),
        )
        shard = self.streams.shard_of(request.account_id, request.conversation_key)
        await self._append({shard: entry}, context)
        return pb.MarkReadResponse(read_at=read_at)

    async def _once(
        self,
        request: pb.IngestMessagesRequest | pb.IngestReceiptsRequest | pb.RecordAgentSentRequest,
        context: grpc.aio.ServicerContext,
        response: type[R],
        append: Callable[[], Awaitable[R]],
    ) -> R:
        """`append`, once per idempotency key (see kept_responses.py): a repeat answers the
        first call's response; ABORTED while the first runs; INVALID_ARGUMENT for a different
        request with the key."""
        if not request.idempotency_key or self.kept is None:
            return await append()
        try:
            async with refused_as_grpc(context):
                claim = await self.kept.claim(
                    request.account_id, request.idempotency_key, fingerprint(request)
                )
        except BacklogFull as exc:
            await abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, f"{exc}; retry later")
        if isinstance(claim, bytes):
            return response.FromString(claim)
        try:
            answer = await append()
        except BaseException:
            await asyncio.shield(self.kept.release(claim))
            raise
        if isinstance(answer, pb.IngestMessagesResponse) and not answer.accepted:
            # Nothing was stored (every message refused): nothing to answer a retry with, and
            # the client's corrected retry with the same key must run.
            await self.kept.release(claim)
            return answer
        await self.kept.keep(claim, answer.SerializeToString())
        return answer

    async def _require_account(self, account_id: int, context: grpc.aio.ServicerContext) -> None:
        """Abort unless zalo_accounts has the account: the flusher could store nothing for it."""
        try:
            known = await self.accounts.exists(account_id)
        except AccountsUnavailable:
            await abort(
                context,
                grpc.StatusCode.UNAVAILABLE,
                "account_id cannot be checked against the database now; retry",
            )
        if not known:
            status = bad_request_status(
                f"account_id: {UNKNOWN_ACCOUNT.description}", [UNKNOWN_ACCOUNT], code_pb2.NOT_FOUND
            )
            await context.abort(status.code, status.details, status.trailing_metadata)

    async def _append(
        self,
        entries: dict[int, events.MessageStreamEntry],
        context: grpc.aio.ServicerContext,
    ) -> None:
        try:
            await self.repo.append(entries)
        except AccountOverShare as exc:
            # Not "the backlog is full": this account is refused so that the others are not.
            retry = max(1, math.ceil(exc.retry_after))
            await abort_over_quota(
                context,
                f"{exc}; retry in {retry} s",
                subject=f"account_id:{exc.account_id}",
                description=f"over its fair share of stream shard {exc.shard}, under pressure",
                retry_after=retry,
            )
        except BacklogFull as exc:
            await abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, f"{exc}; retry later")
