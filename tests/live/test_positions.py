"""A live feed position is what clients hand back as Last-Event-ID or `after`: any text at all
must either be a position that prints as itself or be refused with ValueError (a reset), never
crash a stream or name an entry other than the one written. Pure logic: no datastore."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.runtime.stream_ids import MAX_POSITION_LENGTH, FeedPosition, Position
from tests.properties import PROPERTY, any_char

epochs = st.text("0123456789abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=24)
entries = st.builds(Position, st.integers(0, 10**15 - 1), st.integers(0, 2**63 - 1))


@PROPERTY
@given(epochs, entries)
def test_a_position_given_out_reads_back_as_itself(epoch: str, entry: Position) -> None:
    position = FeedPosition(epoch, entry)
    assert FeedPosition.parse(str(position)) == position
    assert FeedPosition.parse(str(position).encode()) == position


@PROPERTY
@given(
    st.one_of(
        st.text(any_char, max_size=80),
        st.binary(max_size=80).map(lambda b: b.decode("latin-1")),
        st.builds(lambda e, n: f"{e}.{n}", epochs, st.text("0123456789-.", max_size=40)),
    )
)
def test_any_other_text_is_refused_with_value_error(text: str) -> None:
    try:
        position = FeedPosition.parse(text)
    except ValueError as error:
        refused = str(error)
    else:
        refused = ""
    if refused:
        assert repr(text[:40]) in refused  # says what it was given
        return
    # Accepted: then it is a position's printed form (leading zeros aside), within the bound.
    assert FeedPosition.parse(str(position)) == position
    assert position.epoch == text.split(".")[0]
    assert len(text) <= MAX_POSITION_LENGTH


def test_the_forms_a_client_might_send_are_refused() -> None:
    for text in ("", "0-0", "0-1", "$", "abc", "e.1-", "e.-1", "E.1-1", "e.1-1 ", "x" * 10_000):
        try:
            FeedPosition.parse(text)
        except ValueError:
            continue
        raise AssertionError(f"{text[:40]!r} was taken for a position")
