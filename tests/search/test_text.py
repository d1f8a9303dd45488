"""The one normalisation of search (services/search/text.py), alone: each Vietnamese trap a
query meets, as the words both sides are reduced to."""

from __future__ import annotations

import unicodedata

import pytest

from services.search.text import MatchKind, Query, QueryError, match, normal_word, snippet, words


def forms(text: str) -> list[tuple[str, str]]:
    return [(w.exact, w.folded) for w in words(text)]


def test_marks_are_folded_and_kept_apart() -> None:
    assert forms("Xịt chống nắng") == [("xit5", "xit"), ("chông1", "chong"), ("năng1", "nang")]
    assert [f for _, f in forms("xit chong nang")] == ["xit", "chong", "nang"]


def test_the_two_tone_placements_are_one_word_and_nfc_alone_does_not_unify_them() -> None:
    old, new = "hoà", "hòa"
    assert unicodedata.normalize("NFC", old) != unicodedata.normalize("NFC", new)
    assert normal_word(old) == normal_word(new) == ("hoa2", "hoa")
    assert normal_word("thuỷ") == normal_word("thủy")


def test_decomposed_input_is_the_same_word() -> None:
    decomposed = unicodedata.normalize("NFD", "Tiếng Việt")
    assert forms(decomposed) == forms("Tiếng Việt")
    # A word is not cut at its combining marks.
    assert len(words(decomposed)) == 2


def test_d_with_stroke_folds_to_d_and_tones_tell_false_friends_apart() -> None:
    assert normal_word("Đường") == ("đương2", "duong")
    assert normal_word("dương")[1] == normal_word("đương")[1] == "duong"
    assert len({normal_word(w)[0] for w in ("đường", "dương", "đương", "duong")}) == 4


def test_one_letter_syllables_are_words() -> None:
    assert forms("ở và là ạ") == [("ơ3", "o"), ("va2", "va"), ("la2", "la"), ("a5", "a")]


def test_case_digits_and_separators() -> None:
    assert forms("ĐƠN_HÀNG #2024-12") == [
        ("đơn", "don"),
        ("hang2", "hang"),
        ("2024", "2024"),
        ("12", "12"),
    ]


@pytest.mark.parametrize(
    ("query", "text", "kind"),
    [
        ("xịt chống nắng", "Shop ơi, xịt chống nắng còn không?", MatchKind.EXACT_PHRASE),
        ("nắng xịt", "xịt chống nắng", MatchKind.EXACT_WORDS),
        ("xit chong nang", "Shop ơi, xịt chống nắng còn không?", MatchKind.FOLDED_PHRASE),
        ("nang xit", "xịt chống nắng", MatchKind.FOLDED_WORDS),
        ("công nghệ", "Nghệ thuật và công việc", MatchKind.EXACT_WORDS),
        ("hoà", "hòa bình", MatchKind.EXACT_PHRASE),
    ],
)
def test_a_match_is_ranked_by_how_it_matched(query: str, text: str, kind: MatchKind) -> None:
    found = match(Query.parse(query), text)
    assert found is not None
    assert found.kind == kind


def test_every_word_must_occur() -> None:
    assert match(Query.parse("xịt chống muỗi"), "xịt chống nắng") is None
    assert match(Query.parse("đường"), "dương") is not None  # folded: a false friend, ranked last


def test_the_highlights_are_the_texts_own_characters() -> None:
    text = "Em muốn mua XỊT chống nắng ạ"
    found = match(Query.parse("xit chong"), text)
    assert found is not None
    assert [text[s:e] for s, e in found.spans] == ["XỊT", "chống"]
    cut = snippet(text, found.spans)
    assert "".join(t for t, _ in cut.fragments) == text
    assert [t for t, h in cut.fragments if h] == ["XỊT", "chống"]


def test_a_long_text_is_cut_around_its_first_match() -> None:
    text = " ".join(["lorem"] * 200) + " giao hàng nhanh " + " ".join(["ipsum"] * 200)
    found = match(Query.parse("giao hang"), text)
    assert found is not None
    cut = snippet(text, found.spans)
    shown = "".join(t for t, _ in cut.fragments)
    assert cut.cut_before
    assert cut.cut_after
    assert "giao hàng" in shown
    assert len(shown) < 220


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        ("x" * 201, "at most 200 characters"),
        ("giá\x07", "control characters"),
        ("!!! ???", "at least one letter or digit"),
        (" ".join(["a"] * 17), "at most 16 words"),
    ],
)
def test_what_cannot_be_searched_says_why(query: str, why: str) -> None:
    with pytest.raises(QueryError, match=why):
        Query.parse(query)
