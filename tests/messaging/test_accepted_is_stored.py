"""Whatever ingest accepts, the flusher stores — as sent, nothing dead-lettered.

Hypothesis draws messages over the whole space ingest accepts: ids of every allowed character and
length, texts at their length bounds in every Unicode plane, JSON documents deep (up to the
server's nesting bound) and wide, spelled every way (escaped, raw, indented) up to their byte
bound, times from 2012-01-01 exactly to the allowed skew past now with any nanos, every enum value,
with and without cli_msg_id and quote. Each example is one batch for a fresh account through the
real ingest (gRPC, and the gateway's JSON), drained by the real flusher into MariaDB; then every
column is compared with what was sent. The agent-sent record and the read marker the same way.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from services.domain.instants import EARLIEST_SENT_AT
from services.domain.messaging import DIRECTION_NAMES, THREAD_TYPE_NAMES
from services.gateway.config import GatewaySettings
from services.ingest.config import IngestSettings
from services.ingest.validation import MAX_JSON_DEPTH, MAX_MESSAGE_BYTES, check_json
from services.runtime.mysql import MysqlDatabase
from tests.helpers import Downstream, mint_token
from tests.properties import PROPERTY, any_char, text
from tests.stack import Env

pytestmark = pytest.mark.asyncio
_ACCOUNTS = itertools.count(1_000_000)
_EPOCH = datetime(1970, 1, 1)
COLUMNS = (
    "msg_id, cli_msg_id, thread_id, thread_type, direction, sender_id, sender_name, content,"
    " msg_type, attachments, mentions, quote_msg_id, quote_payload, quote_preview, sent_at"
)
JSON_COLUMNS = {9, 10, 12, 13}
gateway_max_body = GatewaySettings.model_fields["gateway_max_body_bytes"].default

ID_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:@-"
ids = st.one_of(
    st.text(ID_CHARS, min_size=1, max_size=12),
    st.text(ID_CHARS, min_size=64, max_size=64),
)


def settings_of(ingest_settings: IngestSettings) -> tuple[int, int, int]:
    return (
        ingest_settings.content_max_chars,
        ingest_settings.json_max_bytes,
        ingest_settings.sent_at_max_future_seconds,
    )


def depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    # Beyond 64 bits: JSON text carries any integer up to a double's range.
    st.integers(min_value=2**64, max_value=10**300),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(any_char, max_size=12),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=6),
        st.dictionaries(st.text(any_char, max_size=8), children, max_size=6),
    ),
    max_leaves=40,
)


def nest(levels: list[bool], leaf: object) -> object:
    """`leaf` inside arrays (True) and objects (False), outermost first."""
    for is_array in reversed(levels):
        leaf = [leaf] if is_array else {"k": leaf}
    return leaf


deep_values = st.builds(
    nest, st.lists(st.booleans(), min_size=1, max_size=MAX_JSON_DEPTH), json_values
).filter(lambda v: depth(v) <= MAX_JSON_DEPTH)
wide_values = st.lists(json_scalars, min_size=200, max_size=400)
SPELLINGS = [
    lambda v: json.dumps(v),  # non-ASCII escaped: astral characters as \\ud83d\\ude00 pairs
    lambda v: json.dumps(v, ensure_ascii=False),
    lambda v: json.dumps(v, ensure_ascii=False, indent=1),
    lambda v: json.dumps(v, separators=(",", ":")),
]


def _filled(char: str, max_bytes: int) -> str:
    """A JSON string of `char` repeated as often as its spelling (escaped or not) fits."""
    unit = len(json.dumps(char, ensure_ascii=False).encode()) - 2
    return json.dumps(char * ((max_bytes - 2) // unit), ensure_ascii=False)


def json_texts(max_bytes: int) -> st.SearchStrategy[str]:
    values = st.one_of(json_values, json_values, deep_values, wide_values)
    spelled = st.builds(lambda v, spell: spell(v), values, st.sampled_from(SPELLINGS))
    # A string that fills the byte bound, as closely as its character's spelling allows.
    full = st.builds(lambda c: _filled(c, max_bytes), any_char)
    return st.one_of(st.just(""), spelled, spelled, full).filter(
        lambda t: len(t.encode()) <= max_bytes
    )


# JSON spelled by hand, every way the grammar allows: whitespace around any token, numbers in any
# notation, strings with any escape (\uXXXX in either case, surrogate pairs, \/), duplicate keys.
_WHITESPACE = st.text(" \t\n\r", max_size=2)
_NUMBERS = st.from_regex(
    r"-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,25})?([eE][+-]?[0-9]{1,3})?", fullmatch=True
)
_SHORT_ESCAPES = {
    '"': r"\"",
    "\\": r"\\",
    "/": r"\/",
    "\b": r"\b",
    "\f": r"\f",
    "\n": r"\n",
    "\r": r"\r",
    "\t": r"\t",
}


def _u_escape(c: str, upper: bool) -> str:
    """`c` as \\uXXXX escapes (a surrogate pair beyond the first plane)."""
    units = c.encode("utf-16-be")
    hexes = [units[i : i + 2].hex() for i in range(0, len(units), 2)]
    return "".join("\\u" + (h.upper() if upper else h) for h in hexes)


@st.composite
def _spelled_string(draw: st.DrawFn) -> str:
    out = []
    for c in draw(st.text(any_char, max_size=10)):
        how = draw(st.sampled_from(["raw", "u", "U", "short"]))
        if how == "short" and c in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[c])
        elif how in ("u", "U") or c in '"\\' or ord(c) < 0x20:
            out.append(_u_escape(c, upper=how == "U"))
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


@st.composite
def _spaced(draw: st.DrawFn, tokens: list[str]) -> str:
    """`tokens` with any JSON whitespace around each."""
    return "".join(draw(_WHITESPACE) + t for t in tokens) + draw(_WHITESPACE)


def _array(draw: st.DrawFn, items: list[str]) -> str:
    if not items:
        return draw(_spaced(["[", "]"]))
    commas = [token for item in items for token in (",", item)][1:]
    return draw(_spaced(["[", *commas, "]"]))


def _object(draw: st.DrawFn, pairs: list[tuple[str, str]]) -> str:
    if not pairs:
        return draw(_spaced(["{", "}"]))
    members = [token for key, value in pairs for token in (",", key, ":", value)][1:]
    return draw(_spaced(["{", *members, "}"]))


@st.composite
def _container(draw: st.DrawFn, children: st.SearchStrategy[str]) -> str:
    if draw(st.booleans()):
        return _array(draw, draw(st.lists(children, max_size=4)))
    keys = st.one_of(_spelled_string(), st.just('"dup"'))  # duplicate keys now and then
    return _object(draw, draw(st.lists(st.tuples(keys, children), max_size=4)))


spelled_json = st.recursive(
    st.one_of(st.sampled_from(["true", "false", "null"]), _NUMBERS, _spelled_string()),
    _container,
    max_leaves=20,
)


def instants(latest: datetime) -> st.SearchStrategy[Timestamp]:
    earliest = EARLIEST_SENT_AT.replace(tzinfo=None)
    seconds = st.one_of(
        st.just(earliest),
        st.just(latest),
        st.datetimes(min_value=earliest, max_value=latest),
    ).map(lambda d: int((d - _EPOCH).total_seconds()))
    nanos = st.one_of(st.just(0), st.just(999_999_999), st.integers(0, 999_999_999))
    latest_seconds = int((latest - _EPOCH).total_seconds())
    return st.builds(
        lambda s, n: Timestamp(seconds=s, nanos=0 if s >= latest_seconds else n), seconds, nanos
    )


@st.composite
def batches(
    draw: st.DrawFn, limits: tuple[int, int, int], most: int = 6
) -> list[message_pb2.Message]:
    content_max, json_max, future = limits
    # A margin for the time the example takes to reach ingest's clock.
    latest = datetime.now(UTC).replace(tzinfo=None) + timedelta(seconds=future - 5)
    threads = draw(st.lists(ids, min_size=1, max_size=3, unique=True))
    thread_types = {t: draw(st.sampled_from(sorted(THREAD_TYPE_NAMES))) for t in threads}
    msg_ids = draw(st.lists(ids, min_size=1, max_size=most, unique=True))
    optional_id = st.one_of(st.just(""), ids)
    batch = []
    for msg_id in msg_ids:
        thread = draw(st.sampled_from(threads))
        msg = message_pb2.Message(
            msg_id=msg_id,
            cli_msg_id=draw(optional_id),
            thread_id=thread,
            thread_type=thread_types[thread],
            direction=draw(st.sampled_from(sorted(DIRECTION_NAMES))),
            sender_id=draw(text(64)),
            sender_name=draw(text(255)),
            content=draw(text(content_max)),
            msg_type=draw(text(64)),
            attachments=draw(json_texts(json_max)),
            mentions=draw(json_texts(json_max)),
        )
        if draw(st.booleans()):
            msg.quote.msg_id = draw(optional_id)
            msg.quote.payload = draw(json_texts(json_max))
            msg.quote.preview = draw(json_texts(json_max))
        msg.sent_at.CopyFrom(draw(instants(latest)))
        # An oversized message is left out rather than the whole batch filtered away: with five
        # JSON fields that may each fill their bound, discarding batches tripped Hypothesis's
        # filter_too_much health check now and then.
        if msg.ByteSize() <= MAX_MESSAGE_BYTES:
            batch.append(msg)
    assume(batch)
    return batch


def stored_time(ts: Timestamp) -> datetime:
    return _EPOCH + timedelta(seconds=ts.seconds, milliseconds=ts.nanos // 1_000_000)


def expected_row(m: message_pb2.Message) -> tuple[Any, ...]:
    return (
        m.msg_id,
        m.cli_msg_id or None,
        m.thread_id,
        THREAD_TYPE_NAMES[m.thread_type],
        DIRECTION_NAMES[m.direction],
        m.sender_id or None,
        m.sender_name or None,
        m.content or None,
        m.msg_type or None,
        json.loads(m.attachments) if m.attachments else None,
        json.loads(m.mentions) if m.mentions else None,
        m.quote.msg_id or None,
        json.loads(m.quote.payload) if m.quote.payload else None,
        json.loads(m.quote.preview) if m.quote.preview else None,
        stored_time(m.sent_at),
    )


def parsed(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A stored row with its JSON columns parsed (MySQL 8.4 normalizes the text it keeps)."""
    return tuple(
        json.loads(v) if i in JSON_COLUMNS and v is not None else v for i, v in enumerate(row)
    )


async def new_account(admin_db: MysqlDatabase) -> int:
    account = next(_ACCOUNTS)
    await admin_db.execute(
        "INSERT INTO zalo_accounts (id, display_name) VALUES (%s, %s)", (account, "property")
    )
    return account


async def assert_stored(
    admin_db: MysqlDatabase, account: int, batch: list[message_pb2.Message]
) -> None:
    rows = await admin_db.fetchall(
        f"SELECT {COLUMNS} FROM zalo_messages WHERE zalo_account_id = %s", (account,)
    )
    assert {r[0]: parsed(r) for r in rows} == {m.msg_id: expected_row(m) for m in batch}
    newest: dict[str, tuple[datetime, str]] = {}
    for m in batch:
        at = stored_time(m.sent_at)
        if m.thread_id not in newest or at > newest[m.thread_id][0]:
            newest[m.thread_id] = (at, THREAD_TYPE_NAMES[m.thread_type])
    conversations = await admin_db.fetchall(
        "SELECT thread_id, last_message_at, thread_type FROM zalo_conversations"
        " WHERE zalo_account_id = %s",
        (account,),
    )
    assert {t: (at, kind) for t, at, kind in conversations} == newest


@PROPERTY
@given(data=st.data())
async def test_every_message_ingest_accepts_is_stored_as_sent(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    ingest_settings: IngestSettings,
    downstream: Downstream,
    data: st.DataObject,
) -> None:
    batch = data.draw(batches(settings_of(ingest_settings)))
    account = await new_account(downstream.db)
    dead = await downstream.dead_letters()

    reply = await ingest.IngestMessages(
        pb.IngestMessagesRequest(account_id=account, messages=batch)
    )
    # The generator stays inside the documented limits: a refusal is validation stricter than
    # the stores, which would leave the property vacuous.
    assert [(r.index, r.field, r.reason) for r in reply.rejected] == []
    assert reply.accepted == len(batch)
    await downstream.drain()

    assert await downstream.dead_letters() == dead
    await assert_stored(downstream.db, account, batch)


def gateway_item(m: message_pb2.Message, values: dict[str, object]) -> dict[str, object]:
    """`m` as a forwarder posts it: JSON fields as JSON values, the time in ISO-8601."""
    at = datetime.fromtimestamp(m.sent_at.seconds, UTC) + timedelta(
        microseconds=m.sent_at.nanos // 1000
    )
    item: dict[str, object] = {
        "msg_id": m.msg_id,
        "thread_id": m.thread_id,
        "thread_type": THREAD_TYPE_NAMES[m.thread_type],
        "direction": DIRECTION_NAMES[m.direction],
        "sent_at": at.isoformat(),
        **{k: v for k, v in values.items() if v is not None},
    }
    for field in ("cli_msg_id", "sender_id", "sender_name", "content", "msg_type"):
        if getattr(m, field):
            item[field] = getattr(m, field)
    return item


@PROPERTY
@given(data=st.data())
async def test_every_message_the_gateway_accepts_is_stored_as_sent(
    gateway: httpx.AsyncClient,
    env: Env,
    ingest_settings: IngestSettings,
    downstream: Downstream,
    data: st.DataObject,
) -> None:
    # Within the gateway's body bound (GATEWAY_MAX_BODY_BYTES, 1 MiB): fewer, smaller messages
    # (their bounds are the gRPC property's), so that few bodies are over it.
    content_max, json_max, future = settings_of(ingest_settings)
    batch = data.draw(batches((content_max // 4, json_max // 4, future), most=3))
    items = []
    for m in batch:
        # attachments and mentions as JSON values, which the gateway serializes for ingest; a
        # string is taken as JSON text there (forwarders passing columns through), so a string
        # document goes as its text, as the quote's documents do.
        values: dict[str, object] = {}
        for field, strategy in (
            ("attachments", st.one_of(st.none(), json_values, deep_values)),
            ("mentions", st.one_of(st.none(), json_values)),
        ):
            value = data.draw(strategy)
            setattr(m, field, "" if value is None else json.dumps(value))
            values[field] = json.dumps(value) if isinstance(value, str) else value
        if m.HasField("quote"):
            values["quote"] = {
                "msg_id": m.quote.msg_id or None,
                "payload": m.quote.payload or None,
                "preview": m.quote.preview or None,
            }
        m.sent_at.nanos -= m.sent_at.nanos % 1000  # ISO-8601 carries microseconds
        items.append(gateway_item(m, values))
    body = json.dumps({"messages": items}, ensure_ascii=False).encode()
    assume(len(body) <= gateway_max_body)  # larger bodies are the gateway's 413
    account = await new_account(downstream.db)
    dead = await downstream.dead_letters()
    token = mint_token(env.jwt_secret, sub=7, accounts=[account])

    response = await gateway.post(
        f"/api/zalo-accounts/{account}/messages",
        content=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    assert response.status_code == 200, response.text
    assert response.json()["data"] == {"accepted": len(batch), "rejected": []}
    await downstream.drain()

    assert await downstream.dead_letters() == dead
    await assert_stored(downstream.db, account, batch)


@PROPERTY
@given(data=st.data())
async def test_every_agent_sent_record_and_read_marker_ingest_accepts_is_stored(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    ingest_settings: IngestSettings,
    downstream: Downstream,
    data: st.DataObject,
) -> None:
    content_max, _, future = settings_of(ingest_settings)
    latest = datetime.now(UTC).replace(tzinfo=None) + timedelta(seconds=future - 5)
    account = await new_account(downstream.db)
    thread = data.draw(ids)
    sent = pb.RecordAgentSentRequest(
        account_id=account,
        thread_id=thread,
        cli_msg_id=data.draw(ids),
        msg_id=data.draw(st.one_of(st.just(""), ids)),
        agent_user_id=data.draw(st.integers(1, 2**63 - 1)),
        content=data.draw(text(content_max)),
    )
    if data.draw(st.booleans()):
        sent.sent_at.CopyFrom(data.draw(instants(latest)))
    first = message_pb2.Message(
        msg_id=data.draw(ids),
        thread_id=thread,
        thread_type=message_pb2.THREAD_TYPE_USER,
        direction=message_pb2.DIRECTION_OUT,
    )
    first.sent_at.FromDatetime(EARLIEST_SENT_AT)
    read = pb.MarkReadRequest(account_id=account, conversation_key=thread)
    if data.draw(st.booleans()):
        read.read_at.CopyFrom(data.draw(instants(latest)))
    dead = await downstream.dead_letters()

    before = datetime.now(UTC).replace(tzinfo=None)
    await ingest.RecordAgentSent(sent)
    await ingest.IngestMessages(pb.IngestMessagesRequest(account_id=account, messages=[first]))
    marked = (await ingest.MarkRead(read)).read_at
    after = datetime.now(UTC).replace(tzinfo=None)
    await downstream.drain()

    assert await downstream.dead_letters() == dead
    [row] = await downstream.db.fetchall(
        "SELECT thread_id, cli_msg_id, msg_id, agent_user_id, content, sent_at"
        " FROM zalo_agent_sent_messages WHERE zalo_account_id = %s",
        (account,),
    )
    assert row[:5] == (
        thread,
        sent.cli_msg_id,
        sent.msg_id or None,
        sent.agent_user_id,
        sent.content or None,
    )
    if sent.HasField("sent_at"):
        assert row[5] == stored_time(sent.sent_at)
    else:
        assert before - timedelta(milliseconds=1) <= row[5] <= after
    [(last_read_at,)] = await downstream.db.fetchall(
        "SELECT last_read_at FROM zalo_conversations WHERE zalo_account_id = %s", (account,)
    )
    # What MarkRead answered is what was stored: the marker asked for, or now if that is later.
    assert last_read_at == stored_time(marked)
    if read.HasField("read_at") and read.read_at.ToDatetime() < before:
        assert marked.ToDatetime() == stored_time(read.read_at)
    else:
        assert before - timedelta(milliseconds=1) <= last_read_at <= after


@settings(PROPERTY, max_examples=PROPERTY.max_examples * 5)
@given(doc=st.one_of(spelled_json, json_texts(65_536)))
async def test_every_json_text_ingest_accepts_is_stored_as_it_is_by_a_json_column(
    admin_db: MysqlDatabase, ingest_settings: IngestSettings, doc: str
) -> None:
    """Directly against a JSON column (cheap, so five times the examples): ingest's check and the
    server's must agree on everything ingest accepts."""
    assume(doc and check_json(doc, "attachments", ingest_settings.limits()) is None)
    async with admin_db.connection() as conn:
        await conn.execute("CREATE TEMPORARY TABLE json_probe (doc JSON NULL)")
        try:
            await conn.execute("INSERT INTO json_probe (doc) VALUES (%s)", (doc,))
            [(stored,)] = await conn.fetchall("SELECT doc FROM json_probe")
        finally:
            await conn.execute("DROP TEMPORARY TABLE json_probe")
    assert json.loads(stored) == json.loads(doc)
