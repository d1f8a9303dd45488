"""The search bench's data: the documents it writes straight into the index are the ones the
indexer would write for the same text, and its query mix finds what it says it finds."""

from __future__ import annotations

from bench.search_data import QUERIES, Chat, Documents
from bench.search_indexing import bucket_p99
from services.domain.search_text import Query, match
from services.search.terms import document


def test_the_background_documents_are_the_indexers_terms_for_their_text() -> None:
    chat, docs = Chat(seed=5), Documents(seed=5)
    texts = [chat.message() for _ in range(2000)]
    assert any(t.isascii() for t in texts), "some messages are typed without marks"
    for text in texts:
        assert docs.terms(42, text) == document("a42", text), text


def test_each_query_of_the_mix_finds_messages_and_the_rare_word_is_rare() -> None:
    chat = Chat(seed=9)
    texts = [chat.message() for _ in range(20_000)]
    share = {
        p.name: sum(match(Query.parse(p.text), t) is not None for t in texts) / len(texts)
        for p in QUERIES
    }
    assert share["common word"] > 0.1
    assert 0.0005 < share["rare word"] < 0.005
    # The phrase is typed with marks in most messages that hold it; without marks, the query
    # finds those too.
    assert 0.01 < share["phrase with marks"] <= share["phrase without marks"] < 0.05


def test_the_p99_of_a_histogram_between_two_readings_is_its_bucket_bound() -> None:
    before = [(0.1, 50.0), (0.25, 90.0), (0.5, 100.0), (float("inf"), 100.0)]
    # 1,000 new observations: 900 under 0.1 s, 85 more under 0.25 s, 15 under 0.5 s.
    after = [(0.1, 950.0), (0.25, 1075.0), (0.5, 1100.0), (float("inf"), 1100.0)]
    assert bucket_p99(before, after) == 0.5
    after_fast = [(0.1, 1045.0), (0.25, 1090.0), (0.5, 1100.0), (float("inf"), 1100.0)]
    assert bucket_p99(before, after_fast) == 0.1
