"""A Vietnamese customer-service chat corpus for the search engine bench, deterministic by seed.

Messages read like a shop's inbox: stock phrases ("cho em hỏi giá", "đơn hàng của em giao chưa
ạ") mixed with runs of words drawn from a vocabulary of a few thousand syllables and words whose
frequencies follow Zipf's law (a handful of words are in most messages, most words are rare). The
vocabulary holds what makes Vietnamese search hard: one-letter syllables (ở, và, ạ, ừ), words
that differ only by a tone or by đ ("đường", "dương", "đương"), and both placements of a tone
("hoà" and "hòa"). Some messages are typed without marks, some arrive decomposed (NFD), some
capitalised. Accounts are Zipf-sized too (a few very big ones), each with its conversations;
ids grow with time, so newest first is id descending.

Each message is written with its words already normalised by services/domain/search_text.py (the
vocabulary is finite, so each surface form is normalised once), which every engine indexes.
"""

from __future__ import annotations

import random
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from services.domain.search_text import normal_word, words

# Tone marks as combining characters: sắc, huyền, hỏi, ngã, nặng.
_TONE_MARKS = ("\u0301", "\u0300", "\u0309", "\u0303", "\u0323")

# The common words of a shop's inbox, most frequent first (Zipf rank = position).
_COMMON_TEXT = (
    "ạ em shop ơi cho hỏi giá bao nhiêu có không còn hàng đơn giao và là ở ship bạn anh chị "
    "được rồi nhé với của này mình mua sản phẩm size màu nào ừ vâng dạ thì cần gửi địa chỉ "
    "số điện thoại khi nào nhận tiền chuyển khoản đặt thêm cái một hai ba lấy đổi trả hoàn "
    "ngày mai hôm nay tuần sau xịt chống nắng kem dưỡng da mặt son môi nước hoa sữa rửa "
    "công nghệ điện máy tính bảng đường dương đương hoà hòa thuận khoẻ khỏe thuỷ thủy tuỳ "
    "tùy loại tốt đẹp rẻ đắt giảm khuyến mãi miễn phí freeship mã voucher lỗi hỏng bảo hành "
    "đúng sai ok cảm ơn xin chào tư vấn giúp với nhanh chậm đến tới chưa đã đang sẽ vậy sao "
    "gì đâu ai nhiều ít lắm quá rất thật cũng vẫn nữa luôn tháng năm giờ phút sáng chiều tối "
    "quận huyện phường thành phố hà nội hồ chí minh đà nẵng cần thơ hải phòng nhà trường "
    "ý á ô ê ừm ờ uh ok oke zalo facebook tiktok link ảnh hình video xem thử dùng thấy"
)
COMMON = tuple(_COMMON_TEXT.split())

# Stock lines of a customer-service chat, used whole.
PHRASES = (
    "shop ơi cho em hỏi giá",
    "đơn hàng của em giao chưa ạ",
    "giao hàng mất bao lâu vậy shop",
    "xịt chống nắng còn hàng không ạ",
    "em ở hà nội ship mất mấy ngày",
    "cảm ơn shop nhiều ạ",
    "dạ vâng em đặt một đơn nhé",
    "sản phẩm này dùng cho da dầu được không",
    "bên mình có ship cod không ạ",
    "em muốn đổi size được không shop",
    "giá này đã giảm chưa ạ",
    "hàng công nghệ bảo hành bao lâu",
    "đường nào đi đến cửa hàng vậy ạ",
    "chị ở đường lê lợi quận một",
    "dương ơi kiểm tra đơn giúp chị",
    "hoà ơi đơn này giao chưa",
    "hòa bình quận hai",
    "ừ được rồi em",
    "ở đâu có bán vậy ạ",
    "và mã giảm giá dùng thế nào",
    "là hàng chính hãng không ạ",
    "kem chống nắng cho da nhạy cảm",
    "đơn hàng bị giao nhầm địa chỉ",
    "em chuyển khoản rồi nhé shop",
    "shop gửi em số tài khoản với",
    "tuỳ chị chọn màu nào cũng được",
    "thuỷ tinh hay nhựa vậy shop",
    "khỏe không shop lâu rồi không mua",
    "đương nhiên là còn hàng ạ",
    "xin chào mình cần tư vấn",
)

# Initial consonants; "" three times: a syllable often starts with its vowel.
_ONSETS_TEXT = "b c ch d đ g gh gi h k kh l m n ng ngh nh p ph qu r s t th tr v x"
_ONSETS = (*_ONSETS_TEXT.split(), "", "", "")
# Rhymes with the index (in the rhyme) of the vowel that carries the tone: "new" placement.
_RHYMES = (
    ("a", 0), ("ai", 0), ("ao", 0), ("an", 0), ("ang", 0), ("anh", 0), ("at", 0), ("ac", 0),
    ("ach", 0), ("am", 0), ("ap", 0), ("ay", 0), ("au", 0), ("ăn", 0), ("ăng", 0), ("ăm", 0),
    ("ăt", 0), ("ân", 0), ("âng", 0), ("âu", 0), ("ây", 0), ("ât", 0), ("e", 0), ("em", 0),
    ("en", 0), ("eo", 0), ("et", 0), ("ê", 0), ("ên", 0), ("ênh", 0), ("êt", 0), ("êu", 0),
    ("i", 0), ("im", 0), ("in", 0), ("inh", 0), ("it", 0), ("ich", 0), ("iu", 0), ("ia", 0),
    ("iêu", 1), ("iên", 1), ("iêt", 1), ("o", 0), ("oi", 0), ("on", 0), ("ong", 0), ("ot", 0),
    ("oc", 0), ("oa", 1), ("oan", 1), ("oang", 1), ("oai", 1), ("oe", 1), ("ô", 0), ("ôi", 0),
    ("ôn", 0), ("ông", 0), ("ôt", 0), ("ôc", 0), ("ơ", 0), ("ơi", 0), ("ơn", 0), ("ơm", 0),
    ("ơt", 0), ("u", 0), ("ui", 0), ("un", 0), ("ung", 0), ("ut", 0), ("uc", 0), ("ua", 0),
    ("uy", 1), ("uyên", 2), ("uân", 1), ("uôi", 1), ("uôn", 1), ("uông", 1), ("ư", 0),
    ("ưa", 0), ("ưi", 0), ("ưng", 0), ("ưt", 0), ("ươi", 1), ("ương", 1), ("ươn", 1),
    ("ươc", 1), ("ươt", 1),
)  # fmt: skip
_OLD_PLACEMENT = {"oa": 0, "oe": 0, "uy": 0, "oai": 0}


def _with_tone(onset: str, rhyme: str, at: int, tone: int | None) -> str:
    if tone is None:
        return onset + rhyme
    letters = list(unicodedata.normalize("NFD", rhyme))
    # Find the at-th base letter in the decomposed rhyme and put the mark after its own marks.
    base = [i for i, c in enumerate(letters) if not unicodedata.combining(c)]
    i = base[at]
    j = i + 1
    while j < len(letters) and unicodedata.combining(letters[j]):
        j += 1
    letters.insert(j, _TONE_MARKS[tone])
    return onset + unicodedata.normalize("NFC", "".join(letters))


def vocabulary(size: int, rng: random.Random) -> list[str]:
    """`size` distinct words, most frequent first: the common shop words, then made syllables
    (some in both tone placements) and a few two-syllable compounds."""
    seen: set[str] = set()
    vocab: list[str] = []

    def add(word: str) -> None:
        if word not in seen:
            seen.add(word)
            vocab.append(word)

    for w in COMMON:
        add(w)
    for p in PHRASES:
        for w in p.split():
            add(w)
    while len(vocab) < size:
        onset = rng.choice(_ONSETS)
        rhyme, at = rng.choice(_RHYMES)
        tone = rng.choice((None, 0, 1, 2, 3, 4))
        if (onset == "qu" and rhyme.startswith("u")) or (onset == "gi" and rhyme.startswith("i")):
            continue
        add(_with_tone(onset, rhyme, at, tone))
        if rhyme in _OLD_PLACEMENT and tone is not None:
            # The same word with the tone on the other vowel: both are written in the wild.
            add(_with_tone(onset, rhyme, _OLD_PLACEMENT[rhyme], tone))
    return vocab[:size]


@dataclass(frozen=True, slots=True)
class Message:
    id: int  # ids grow with sent_at
    account: int
    conversation: int
    sent_at: int  # epoch seconds
    text: str
    exact: tuple[str, ...]  # the text's words, normalised (services/domain/search_text.py)
    folded: tuple[str, ...]


@dataclass(frozen=True)
class Corpus:
    messages: int
    accounts: int
    seed: int
    vocab_size: int = 4000
    start: int = 1_764_547_200  # 2025-12-01
    days: int = 30

    def account_sizes(self) -> list[int]:
        """Messages per account (account ids 1..accounts, biggest first): Zipf with exponent 1."""
        weights = 1.0 / np.arange(1, self.accounts + 1)
        share = weights / weights.sum()
        sizes = np.floor(share * self.messages).astype(np.int64)
        sizes[0] += self.messages - int(sizes.sum())
        return [int(s) for s in sizes]

    def generate(self) -> Iterator[Message]:
        rng = random.Random(self.seed)
        nprng = np.random.default_rng(self.seed)
        vocab = vocabulary(self.vocab_size, rng)
        ranks = np.arange(1, len(vocab) + 1, dtype=np.float64)
        word_p = 1.0 / ranks**1.07
        word_p /= word_p.sum()
        sizes = self.account_sizes()
        owners = np.repeat(np.arange(1, self.accounts + 1), sizes)
        nprng.shuffle(owners)
        # About 40 messages a conversation.
        convs = [max(1, s // 40) for s in sizes]
        forms: dict[str, tuple[str, str]] = {}

        def norm(w: str) -> tuple[str, str]:
            got = forms.get(w)
            if got is None:
                got = forms[w] = normal_word(w)
            return got

        step = self.days * 86400 / max(1, self.messages)
        batch = 10_000
        for lo in range(0, self.messages, batch):
            n = min(batch, self.messages - lo)
            draws = nprng.choice(len(vocab), size=n * 12, p=word_p)
            lengths = nprng.integers(2, 12, size=n)
            k = 0
            for i in range(n):
                mid = lo + i + 1
                account = int(owners[lo + i])
                parts: list[str] = []
                if rng.random() < 0.35:
                    parts.extend(rng.choice(PHRASES).split())
                m = int(lengths[i]) if not parts else int(lengths[i]) // 2
                parts.extend(vocab[int(d)] for d in draws[k : k + m])
                k += 12
                if not parts:
                    parts.append(vocab[0])
                exact, folded = zip(*(norm(w) for w in parts), strict=True)
                text = " ".join(parts)
                style = rng.random()
                if style < 0.06:
                    text = " ".join(folded)  # typed without a Vietnamese keyboard
                    exact = folded
                elif style < 0.11:
                    text = unicodedata.normalize("NFD", text)  # a decomposing keyboard
                elif style < 0.30:
                    text = text[0].upper() + text[1:]
                if rng.random() < 0.4:
                    text += rng.choice(("?", ".", " ạ", "!!", " :)", "..."))
                    if text.endswith(" ạ"):
                        exact, folded = (*exact, norm("ạ")[0]), (*folded, norm("ạ")[1])
                yield Message(
                    id=mid,
                    account=account,
                    conversation=account * 100_000 + rng.randrange(convs[account - 1]),
                    sent_at=self.start + int(mid * step),
                    text=text,
                    exact=tuple(exact),
                    folded=tuple(folded),
                )


def check(message: Message) -> None:
    """The corpus's words are exactly what the one normalisation makes of its text."""
    ws = words(message.text)
    assert tuple(w.exact for w in ws) == message.exact, (message.text, message.exact)
    assert tuple(w.folded for w in ws) == message.folded, (message.text, message.folded)
