"""Hostile input against the real processes: the gateway fuzzed from its own OpenAPI document
(schemathesis), malformed gRPC, SQL-looking strings and auth attacks — each answered with the
documented 4xx / gRPC status, and the stored data checked to be unchanged."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import httpx
import jwt
import pytest
import pytest_asyncio
from agora.forum.v1 import forum_write_service_pb2 as forum_pb
from agora.forum.v1 import forum_write_service_pb2_grpc, like_service_pb2_grpc
from agora.forum.v1 import like_service_pb2 as like_pb
from agora.messaging.v1 import ingest_service_pb2 as ingest_pb
from agora.messaging.v1 import ingest_service_pb2_grpc, timeline_service_pb2_grpc
from agora.messaging.v1 import timeline_service_pb2 as timeline_pb
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.runtime.grpc_errors import field_violations
from services.runtime.mysql import MysqlDatabase
from tests.chaos.harness.local_stack import ROOT
from tests.chaos.harness.run import prepare
from tests.chaos.harness.stack import ChaosStack
from tests.helpers import as_gateway, as_listener, at, batch_reply, message, mint_token
from tests.stack import Env
from tools import callers, certs

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture(scope="module")
async def live() -> AsyncIterator[ChaosStack]:
    """Every service as its own process, behind the real gateway."""
    await prepare()  # the chaos account and course exist; the forum lab comes from `clean`
    stack = ChaosStack(full=True)
    await stack.start()
    yield stack
    await stack.stop()


async def snapshot(env: Env) -> dict[str, Any]:
    """Row counts and checksums of every table a hostile request could touch."""
    db = await MysqlDatabase.connect(env.mysql_admin_url)
    try:
        mysql = {}
        for table in ("zalo_messages", "zalo_conversations", "zalo_agent_sent_messages"):
            row = await db.fetchone(f"CHECKSUM TABLE {table}")
            mysql[table] = row[1] if row else None
    finally:
        await db.close()
    conn = await asyncpg.connect(env.pg_admin_url)
    try:
        pg = {
            table: await conn.fetchval(
                f"SELECT md5(string_agg(t::text, ',' ORDER BY t::text)) FROM {table} t"
            )
            for table in ("posts", "comments", "post_likes", "comment_likes", "course_members")
        }
    finally:
        await conn.close()
    return {"mysql": mysql, "pg": pg}


# make chaos's full run (20 examples of every operation, the event streams among them, each of
# those held until the request timeout) takes longer than the suite's per-test limit.
@pytest.mark.timeout(1800)
async def test_every_route_fuzzed_from_the_openapi_document(
    live: ChaosStack, env: Env, clean: None, tmp_path: Path
) -> None:
    """schemathesis (its own CLI, against the running gateway) with every check: no 5xx, every
    response as documented, and the requests the document allows taken, the others refused."""
    token = mint_token(env.jwt_secret, sub=7, accounts=[1, 2])
    port = live.services["gateway"].port
    proc = await asyncio.create_subprocess_exec(
        str(ROOT / ".venv/bin/schemathesis"),
        "--config-file",
        str(Path(__file__).with_name("schemathesis.toml")),
        "run",
        f"http://127.0.0.1:{port}/openapi.json",
        # Every check: no 5xx, the answers as documented, and the document saying what the server
        # enforces (a schema-valid request is not refused, a schema-violating one is not taken).
        "--checks",
        "all",
        "--header",
        f"Authorization: Bearer {token}",
        "--max-examples",
        # make test asks for a few per operation (CI's time); make chaos and a direct run, 20.
        os.environ.get("FUZZ_MAX_EXAMPLES", "20"),
        "--seed",
        "7",
        "--generation-deterministic",
        "--request-timeout",
        "10",
        "--continue-on-failure",
        # make test leaves out the event streams (each holds its request until the timeout; their
        # own tests are tests/gateway/test_live_events.py); make chaos and a direct run fuzz them.
        *(f"--exclude-tag={tag}" for tag in os.environ.get("FUZZ_SKIP_TAGS", "").split(",") if tag),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        # Its hooks (fuzz_hooks.py: each well-formed Idempotency-Key made unique) import the
        # project's rule from the repository root.
        env={
            **os.environ,
            "NO_COLOR": "1",
            "SCHEMATHESIS_HOOKS": str(Path(__file__).with_name("fuzz_hooks.py")),
            "PYTHONPATH": str(ROOT),
        },
        cwd=tmp_path,  # its example cache is written to the working directory
    )
    output, _ = await proc.communicate()
    report = output.decode(errors="replace")
    assert proc.returncode == 0, report[-6000:]
    assert " passed" in report, report[-2000:]


def unsigned(header: dict[str, object], claims: dict[str, object]) -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({**header, 'alg': 'none'})}.{part(claims)}."


# Tokens that are right in everything but their algorithm (the configured kid, audience, issuer
# and lifetime of a token the gateway accepts): only the check that the algorithm is the key's
# own refuses them.
ALGORITHM_ATTACKS = ("alg none", "HS384 with the right secret")


@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")  # the HS384 one
async def test_auth_attacks_are_refused_and_change_nothing(
    live: ChaosStack, env: Env, clean: None
) -> None:
    base = f"http://127.0.0.1:{live.services['gateway'].port}"
    secret = env.jwt_secret
    valid = mint_token(secret, sub=7, accounts=[1])
    header = jwt.get_unverified_header(valid)
    claims = jwt.decode(valid, options={"verify_signature": False})
    assert header["kid"]
    attacks = {
        "no token": {},
        "expired": {"Authorization": f"Bearer {mint_token(secret, sub=7, accounts=[1], ttl=-60)}"},
        "wrong signature": {"Authorization": f"Bearer {mint_token('x' * 40, sub=7, accounts=[1])}"},
        "alg none": {"Authorization": f"Bearer {unsigned(header, claims)}"},
        "HS384 with the right secret": {
            "Authorization": "Bearer "
            + jwt.encode(claims, secret, algorithm="HS384", headers={"kid": header["kid"]})
        },
    }
    before = await snapshot(env)
    async with httpx.AsyncClient(base_url=base) as client:
        # The token the two algorithm attacks are made from is accepted as it is.
        control = await client.get(
            "/api/courses/42/posts", headers={"Authorization": f"Bearer {valid}"}
        )
        assert control.status_code == 200, control.text
        for name, headers in attacks.items():
            for method, path, body in (
                (
                    "POST",
                    "/api/zalo-accounts/1/messages",
                    {
                        "messages": [
                            {
                                "msg_id": "evil",
                                "thread_id": "t",
                                "direction": "in",
                                "sent_at": "2026-08-02T10:00:00Z",
                            }
                        ]
                    },
                ),
                ("POST", "/api/courses/42/posts", {"title": "evil", "body": "evil"}),
                ("DELETE", "/api/courses/42/posts/1", None),
                ("POST", "/api/courses/42/posts/1/like", {"like": True}),
            ):
                response = await client.request(method, path, json=body, headers=headers)
                assert response.status_code == 401, (name, path, response.text)
                if name in ALGORITHM_ATTACKS:
                    # Refused for its algorithm, not for something checked before it.
                    message = response.json()["error"]["message"]
                    assert "alg value is not allowed" in message, (name, message)
        other = {"Authorization": f"Bearer {mint_token(secret, sub=7, accounts=[2])}"}
        account = await client.post(
            "/api/zalo-accounts/1/messages", json={"messages": []}, headers=other
        )
        assert account.status_code == 403
        stranger = {"Authorization": f"Bearer {mint_token(secret, sub=5555, accounts=[])}"}
        course = await client.post(
            "/api/courses/42/posts", json={"title": "t", "body": "b"}, headers=stranger
        )
        assert course.status_code == 403
        member = {"Authorization": f"Bearer {mint_token(secret, sub=8, accounts=[])}"}
        theft = await client.delete("/api/courses/42/posts/1", headers=member)
        assert theft.status_code == 403
        cross = await client.post(
            "/api/courses/42/posts/3/like", json={"like": True}, headers=member
        )
        assert cross.status_code == 404
    assert await snapshot(env) == before


async def test_malformed_grpc_is_invalid_argument_and_changes_nothing(
    live: ChaosStack, env: Env, clean: None
) -> None:
    ingest = live.services["ingest"]
    before = await snapshot(env)
    async with as_listener(ingest.port) as channel:
        raw = channel.unary_unary(
            "/agora.messaging.v1.IngestService/IngestMessages",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        for payload in (
            b"\x08\x01\x12\x07\x1a\x05\xff\xfe\xfd\xfc\xfb",  # thread_id that is not UTF-8
            b"\xff\xff\xff\xff",  # not protobuf at all
            b"\x12\x90\x80\x80\x80\x10",  # a length running past the end
        ):
            with pytest.raises(grpc.aio.AioRpcError) as bad:
                await raw(payload, timeout=5)
            assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert field_violations(bad.value)[0].field == "request"
        stub = ingest_service_pb2_grpc.IngestServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as too_many:
            await stub.IngestMessages(
                ingest_pb.IngestMessagesRequest(
                    account_id=1, messages=[message(f"m{i}") for i in range(501)]
                )
            )
        assert too_many.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        hostile = [
            message("1'; DROP TABLE zalo_messages; --"),
            message("ok-1", thread="t'); DELETE FROM zalo_conversations; --"),
            message("ok-2", attachments="[1, 2"),
            message("ok-3", attachments='{"a": NaN}'),
            message("ok-4", sent_at=at(10**10)),
            message("ok-5", sent_at=at(-(10**9))),
            message("ok-6"),
            message("ok-7", mentions="[" * 200 + "]" * 200),
        ]
        hostile[6].content = "x" * 70_000
        reply = await stub.IngestMessages(
            ingest_pb.IngestMessagesRequest(account_id=1, messages=hostile)
        )
        assert reply.accepted == 0
        assert [r.index for r in reply.rejected] == list(range(len(hostile)))
    async with as_gateway(ingest.forum_port, env.jwt_secret) as channel:
        forum = forum_write_service_pb2_grpc.ForumWriteServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as nul:
            await forum.CreatePost(
                forum_pb.CreatePostRequest(course_id=42, user_id=7, title="x\x00y", body="b")
            )
        assert nul.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert await snapshot(env) == before


async def test_sql_looking_text_is_stored_verbatim_and_nothing_else_happens(
    live: ChaosStack, env: Env, clean: None
) -> None:
    base = f"http://127.0.0.1:{live.services['gateway'].port}"
    evil = "Robert'); DROP TABLE posts; --"
    headers = {"Authorization": f"Bearer {mint_token(env.jwt_secret, sub=7, accounts=[])}"}
    async with httpx.AsyncClient(base_url=base) as client:
        created = await client.post(
            "/api/courses/42/posts",
            json={"title": evil, "body": evil + " \\' OR 1=1"},
            headers=headers,
        )
        assert created.status_code == 201
        post = created.json()["data"]
        fetched = await client.get(f"/api/courses/42/posts/{post['id']}", headers=headers)
    assert fetched.json()["data"]["title"] == evil
    conn = await asyncpg.connect(env.pg_admin_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM posts") == 4
    finally:
        await conn.close()


async def test_values_mysql_would_refuse_never_5xx_and_change_nothing(
    live: ChaosStack, env: Env, clean: None
) -> None:
    """Lone surrogates (sent as raw JSON escapes), numbers beyond a double and times before 2012,
    at every request body and at ingest's RPCs: refused with the field, nothing stored."""
    base = f"http://127.0.0.1:{live.services['gateway'].port}"
    token = mint_token(env.jwt_secret, sub=7, accounts=[1])
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    item = r'"msg_id": "s1", "thread_id": "t1", "direction": "in", "sent_at": 1785664800000'
    before = await snapshot(env)
    async with httpx.AsyncClient(base_url=base) as client:
        for path, text, field in (
            ("/api/courses/42/posts", r'{"title": "\ud800", "body": "b"}', "title"),
            ("/api/courses/42/posts/1/comments", r'{"body": "\udc00"}', "body"),
            ("/api/zalo-accounts/1/conversations/t1/read", r'{"read_at": "\ud800"}', "read_at"),
            (
                "/api/zalo-accounts/1/agent-sent",
                r'{"thread_id": "t1", "cli_msg_id": "c1", "content": "\udbff"}',
                "content",
            ),
        ):
            response = await client.post(path, content=text.encode(), headers=headers)
            assert response.status_code == 422, (path, response.text)
            assert [f["field"] for f in response.json()["error"]["fields"]] == [field]
        batch = await client.post(
            "/api/zalo-accounts/1/messages",
            content=(
                '{"messages": ['
                f'{{{item}, "content": "\\ud800"}}, '
                f'{{{item}, "attachments": [1e400]}}, '
                f'{{{item}, "mentions": "[\\"\\\\udfff\\"]"}}'
                "]}"
            ).encode(),
            headers=headers,
        )
        assert batch_reply(batch) == (0, [(0, "content"), (1, "attachments"), (2, "mentions")])
    async with as_gateway(live.services["ingest"].port, env.jwt_secret) as channel:
        stub = ingest_service_pb2_grpc.IngestServiceStub(channel)
        read = ingest_pb.MarkReadRequest(account_id=1, conversation_key="t1")
        read.read_at.seconds = -62135596800  # 0001-01-01
        sent = ingest_pb.RecordAgentSentRequest(
            account_id=1, thread_id="t1", cli_msg_id="c1", agent_user_id=7
        )
        sent.sent_at.seconds = -1
        for call, field in (
            (stub.MarkRead(read), "read_at"),
            (stub.RecordAgentSent(sent), "sent_at"),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert [v.field for v in field_violations(refused.value)] == [field]
        reply = await stub.IngestMessages(
            ingest_pb.IngestMessagesRequest(
                account_id=1,
                messages=[
                    message("j1", attachments="[1e400]"),
                    message("j2", mentions='{"\\ud800": 1}'),
                ],
            )
        )
        assert reply.accepted == 0
        assert [(r.index, r.field) for r in reply.rejected] == [(0, "attachments"), (1, "mentions")]
    await asyncio.sleep(1)  # the flusher process would have landed anything accepted by now
    assert await snapshot(env) == before


# --- internal gRPC: mTLS, the access table, the forwarded user ----------------------------------


def _credentials(directory: Path, identity: str | None) -> grpc.ChannelCredentials:
    """Channel credentials trusting the local CA, presenting `identity`'s certificate from
    `directory` (None: no client certificate at all)."""
    ca = (callers.tls_dir() / "ca.pem").read_bytes()
    if identity is None:
        return grpc.ssl_channel_credentials(root_certificates=ca)
    return grpc.ssl_channel_credentials(
        root_certificates=ca,
        private_key=(directory / f"{identity}.key").read_bytes(),
        certificate_chain=(directory / f"{identity}.pem").read_bytes(),
    )


def _as_user(env: Env, user: int, accounts: list[int], secret: str | None = None) -> Any:
    token = mint_token(secret or env.jwt_secret, sub=user, accounts=accounts)
    return (("authorization", f"Bearer {token}"),)


async def test_grpc_without_a_trusted_client_certificate_is_refused_at_the_handshake(
    live: ChaosStack, env: Env, clean: None, tmp_path: Path
) -> None:
    rogue = certs.make_authority(tmp_path)  # a CA of its own, issuing a "gateway" certificate
    certs.issue(rogue, "gateway", tmp_path)
    before = await snapshot(env)
    request = ingest_pb.IngestMessagesRequest(account_id=1, messages=[message("no-cert")])
    for port in (live.services["ingest"].port, live.services["timeline"].port):
        for name, channel in {
            "plaintext": grpc.aio.insecure_channel(f"127.0.0.1:{port}"),
            "no client certificate": grpc.aio.secure_channel(
                f"127.0.0.1:{port}", _credentials(tmp_path, None)
            ),
            "another CA's gateway certificate": grpc.aio.secure_channel(
                f"127.0.0.1:{port}", _credentials(tmp_path, "gateway")
            ),
        }.items():
            async with channel:
                stub = ingest_service_pb2_grpc.IngestServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.IngestMessages(request, metadata=_as_user(env, 7, [1]), timeout=5)
                # The TLS handshake fails: no RPC ever reaches a handler (UNAVAILABLE, not a
                # status a servicer or interceptor returns).
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, (port, name)
    assert await snapshot(env) == before


async def test_each_workload_identity_calls_only_what_the_table_grants(
    live: ChaosStack, env: Env, clean: None
) -> None:
    ingest, timeline, likes = (live.services[n] for n in ("ingest", "timeline", "likes"))
    before = await snapshot(env)
    conversations = timeline_pb.ListConversationsRequest(account_id=1, limit=10)
    post = forum_pb.CreatePostRequest(course_id=42, user_id=7, title="t", body="b")
    like = like_pb.SetLikeRequest(
        user_id=7,
        course_id=42,
        target=like_pb.Target(kind=like_pb.TARGET_KIND_POST, id=1),
        like=True,
    )
    # Every call carries a valid token for user 7 with account 1: only the certificate differs.
    for identity, port, call in (
        ("listener", ingest.forum_port, lambda ch: forum_stub(ch).CreatePost(post)),
        ("listener", timeline.port, lambda ch: timeline_stub(ch).ListConversations(conversations)),
        ("listener", likes.port, lambda ch: like_stub(ch).SetLike(like)),
        ("listener", ingest.port, lambda ch: ingest_stub(ch).MarkRead(mark_read())),
        ("flusher", ingest.port, lambda ch: ingest_stub(ch).IngestMessages(one_message())),
        ("timeline", likes.port, lambda ch: like_stub(ch).SetLike(like)),
        ("likes", ingest.forum_port, lambda ch: forum_stub(ch).CreatePost(post)),
        ("operator", timeline.port, lambda ch: timeline_stub(ch).ListConversations(conversations)),
    ):
        async with callers.connect(f"127.0.0.1:{port}", identity, secret=env.jwt_secret) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call(ch)
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED, (identity, port)
            assert identity in (refused.value.details() or ""), refused.value.details()
    # The same calls as the gateway are answered (a read, to leave the data as it was).
    async with as_gateway(timeline.port, env.jwt_secret) as ch:
        await timeline_stub(ch).ListConversations(conversations)
    # A listener may ingest; forum writes are not even served on its port.
    async with as_listener(ingest.port) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as elsewhere:
            await forum_stub(ch).CreatePost(post)
        assert elsewhere.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert await snapshot(env) == before


async def test_the_gateway_acts_only_as_the_user_whose_token_it_forwards(
    live: ChaosStack, env: Env, clean: None
) -> None:
    ingest, timeline, likes = (live.services[n] for n in ("ingest", "timeline", "likes"))
    before = await snapshot(env)
    user_7 = _as_user(env, 7, [1])
    cases: list[tuple[str, int, Any, Any, grpc.StatusCode]] = [
        (
            "post as user 8 with user 7's token",
            ingest.forum_port,
            lambda ch, md: forum_stub(ch).CreatePost(
                forum_pb.CreatePostRequest(course_id=42, user_id=8, title="t", body="b"),
                metadata=md,
            ),
            user_7,
            grpc.StatusCode.PERMISSION_DENIED,
        ),
        (
            "account 2 with a token for account 1",
            timeline.port,
            lambda ch, md: timeline_stub(ch).ListConversations(
                timeline_pb.ListConversationsRequest(account_id=2, limit=10), metadata=md
            ),
            user_7,
            grpc.StatusCode.PERMISSION_DENIED,
        ),
        (
            "agent-sent as another agent",
            ingest.port,
            lambda ch, md: ingest_stub(ch).RecordAgentSent(
                ingest_pb.RecordAgentSentRequest(
                    account_id=1, thread_id="t1", cli_msg_id="c1", agent_user_id=8, content="x"
                ),
                metadata=md,
            ),
            user_7,
            grpc.StatusCode.PERMISSION_DENIED,
        ),
        (
            "like as user 8",
            likes.port,
            lambda ch, md: like_stub(ch).SetLike(
                like_pb.SetLikeRequest(
                    user_id=8,
                    course_id=42,
                    target=like_pb.Target(kind=like_pb.TARGET_KIND_POST, id=1),
                    like=True,
                ),
                metadata=md,
            ),
            user_7,
            grpc.StatusCode.PERMISSION_DENIED,
        ),
        (
            "no forwarded token",
            timeline.port,
            lambda ch, md: timeline_stub(ch).ListConversations(
                timeline_pb.ListConversationsRequest(account_id=1, limit=10), metadata=md
            ),
            (),
            grpc.StatusCode.UNAUTHENTICATED,
        ),
        (
            "a token signed with another key",
            timeline.port,
            lambda ch, md: timeline_stub(ch).ListConversations(
                timeline_pb.ListConversationsRequest(account_id=1, limit=10), metadata=md
            ),
            _as_user(env, 7, [1], secret="another-secret-that-is-at-least-32-bytes"),
            grpc.StatusCode.UNAUTHENTICATED,
        ),
    ]
    for name, port, call, metadata, code in cases:
        async with callers.connect(f"127.0.0.1:{port}", "gateway") as ch:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call(ch, metadata)
            assert refused.value.code() == code, (name, refused.value.details())
    assert await snapshot(env) == before


async def test_health_has_its_own_plaintext_port_that_serves_nothing_else(
    live: ChaosStack,
) -> None:
    for name in ("ingest", "timeline", "likes"):
        service = live.services[name]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{service.health_port}") as ch:
            health = health_pb2_grpc.HealthStub(ch)
            reply = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, name
            with pytest.raises(grpc.aio.AioRpcError) as nothing_else:
                await ingest_stub(ch).IngestMessages(one_message(), timeout=5)
            assert nothing_else.value.code() == grpc.StatusCode.UNIMPLEMENTED, name


def forum_stub(channel: grpc.aio.Channel) -> Any:
    return forum_write_service_pb2_grpc.ForumWriteServiceStub(channel)


def timeline_stub(channel: grpc.aio.Channel) -> Any:
    return timeline_service_pb2_grpc.TimelineServiceStub(channel)


def like_stub(channel: grpc.aio.Channel) -> Any:
    return like_service_pb2_grpc.LikeServiceStub(channel)


def ingest_stub(channel: grpc.aio.Channel) -> Any:
    return ingest_service_pb2_grpc.IngestServiceStub(channel)


def mark_read() -> Any:
    return ingest_pb.MarkReadRequest(account_id=1, conversation_key="t1")


def one_message() -> Any:
    return ingest_pb.IngestMessagesRequest(account_id=1, messages=[message("one")])
