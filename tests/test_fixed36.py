"""fixed36: the punctuation test's fast path, beside the code it replaces."""

from __future__ import annotations

import sys
import unicodedata

import attnlens.measures.heads.head_stats as head_stats
from attnlens.measures.heads.head_stats import SUBWORD_MARKERS, is_punctuation


def _old_is_punctuation(token: str) -> bool:  # as it was before fixed36
    for marker in SUBWORD_MARKERS:
        token = token.removeprefix(marker)
    return bool(token) and all(unicodedata.category(ch).startswith("P") for ch in token)


AWKWARD = ["", "##", "Ġ", "ĠĠ", "▁", "Ċ", "##.", "Ġ,", "▁!", "Ċ?", "##a", "a.", ".a", "...",
           "«»", "¿", "٫", "٣", "²", "Ⅻ", "〇", "_", "-", "##-", "$", "+", "Ġ1", "‰", "ﬁ", "·"]


def test_no_letter_or_digit_is_punctuation() -> None:
    """The fast path's premise, over every code point."""
    assert not [c for c in map(chr, range(sys.maxunicode + 1))
                if c.isalnum() and unicodedata.category(c).startswith("P")]


def test_same_answer_as_before_on_a_vocabulary_and_awkward_tokens(minilm) -> None:
    _, tokenizer = minilm
    tokens = [*tokenizer.hf.get_vocab(), *AWKWARD, *(m + t for m in SUBWORD_MARKERS
                                                       for t in AWKWARD)]
    assert [is_punctuation(t) for t in tokens] == [_old_is_punctuation(t) for t in tokens]
    assert sum(map(is_punctuation, tokens)) > 100


def test_tokens_ending_in_a_letter_or_digit_look_up_no_category(monkeypatch) -> None:
    looked_up = []
    real = unicodedata.category

    def category(ch: str) -> str:
        looked_up.append(ch)
        return real(ch)

    monkeypatch.setattr(head_stats.unicodedata, "category", category)
    assert not is_punctuation("##ing") and not is_punctuation("Ġ2024") and not is_punctuation("…a")
    assert looked_up == []
    assert is_punctuation("##…")
    assert looked_up == ["…"]
