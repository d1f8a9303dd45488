"""The timeline's page in JSON (messages_as_json) is, byte for byte, what the gateway's own
conversion of the same page's protos gives: every column set and unset, JSON columns that parse
and that do not, reactions, delivery states, agents, and the orders not stored yet."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from agora.messaging.v1 import message_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from services.domain.message_json import instant_text, order_message_json, stored_message_json
from services.domain.messaging import order_message_fields, stored_message_fields
from services.gateway.convert import message_json

EPOCH = datetime(1970, 1, 1)
TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12)
JSON_TEXT = st.one_of(
    st.none(),
    TEXT,  # stored text that is not JSON stays text
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**53), 2**53) | TEXT,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
        max_leaves=6,
    ).map(lambda v: orjson.dumps(v).decode()),
)
# Naive UTC times as the driver returns them, to the microsecond (the JSON keeps milliseconds).
INSTANT = st.integers(0, 4_000_000_000 * 1_000_000).map(
    lambda us: EPOCH + timedelta(microseconds=us)
)


def reactions(items: list[tuple[str, str, str, datetime]]) -> str:
    """The flusher's reactions column: reacted_at as MariaDB writes a DATETIME(3) into JSON."""
    return orjson.dumps(
        [
            {"reactor_id": r, "direction": d, "reaction": x, "reacted_at": str(at)}
            for r, d, x, at in items
        ]
    ).decode()


@st.composite
def message_rows(draw: st.DrawFn) -> tuple[Any, ...]:
    optional_text = st.none() | TEXT
    optional_time = st.none() | INSTANT
    reaction = st.tuples(TEXT, st.sampled_from(["in", "out"]), TEXT, INSTANT)
    return (
        draw(st.integers(1, 2**63 - 1)),
        draw(st.integers(1, 2**40)),
        draw(st.integers(1, 2**40)),
        draw(TEXT),
        draw(st.none() | st.sampled_from(["agora-1", "agora-2", ""])),
        draw(TEXT),
        draw(st.sampled_from(["user", "group"])),
        draw(st.sampled_from(["in", "out"])),
        draw(optional_text),
        draw(optional_text),
        draw(optional_text),
        draw(optional_text),
        draw(JSON_TEXT),
        draw(JSON_TEXT),
        draw(optional_text),
        draw(JSON_TEXT),
        draw(JSON_TEXT),
        draw(INSTANT),
        draw(optional_time),
        draw(optional_time),
        draw(optional_time),
        draw(optional_time),
        draw(st.none() | st.lists(reaction, max_size=3).map(reactions)),
    )


@st.composite
def order_rows(draw: st.DrawFn) -> tuple[Any, ...]:
    state = draw(st.sampled_from(["queued", "sending", "sent", "failed"]))
    return (
        draw(st.integers(1, 2**40)),
        draw(TEXT),
        draw(st.sampled_from(["user", "group"])),
        draw(TEXT),
        draw(st.none() | TEXT),
        draw(st.none() | st.integers(1, 2**40)),
        draw(st.none() | TEXT),
        draw(st.none() | TEXT),
        draw(JSON_TEXT),
        state,
        draw(st.none() | st.sampled_from(["retryable", "permanent", "rate_limited", "odd"])),
        draw(st.none() | TEXT),
        draw(INSTANT),
        draw(st.none() | INSTANT),
        draw(st.none() | INSTANT),
    )


def through_protos(fields: dict[str, Any]) -> bytes:
    return orjson.dumps(message_json(message_pb2.StoredMessage(**fields)))


@settings(max_examples=400, deadline=None, derandomize=True)
@given(row=message_rows(), agent=st.none() | st.integers(1, 2**40))
def test_a_stored_message_is_spelled_as_the_gateway_spells_its_proto(
    row: tuple[Any, ...], agent: int | None
) -> None:
    agents = {(row[1], row[4]): agent} if agent and row[4] else {}
    assert orjson.dumps(stored_message_json(row, agents)) == through_protos(
        stored_message_fields(row, agents)
    )


@settings(max_examples=200, deadline=None, derandomize=True)
@given(row=order_rows(), conversation=st.integers(1, 2**40))
def test_an_order_not_stored_yet_is_spelled_as_the_gateway_spells_its_proto(
    row: tuple[Any, ...], conversation: int
) -> None:
    assert orjson.dumps(order_message_json(row, conversation)) == through_protos(
        order_message_fields(row, conversation)
    )


def test_times_keep_milliseconds_cut_not_rounded_and_aware_times_are_utc() -> None:
    naive = datetime(2026, 8, 2, 10, 0, 0, 123_999)
    aware = datetime(2026, 8, 2, 17, 0, 0, 123_999, tzinfo=UTC).astimezone(
        datetime.now(UTC).astimezone().tzinfo
    )
    assert instant_text(naive) == "2026-08-02T10:00:00.123+00:00"
    assert instant_text(aware) == "2026-08-02T17:00:00.123+00:00"
