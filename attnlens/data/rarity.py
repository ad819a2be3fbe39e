"""Word rarity: English frequencies from ``wordfreq`` or counts from a user's corpus.

Only words containing a letter or a digit can be the rarest word of a sentence:
punctuation has zero frequency in wordfreq and would otherwise always win.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from attnlens.data.words import is_wordlike, split_words
from attnlens.errors import DataError


class WordRarity:
    """Frequency of a word (0 for unknown words); ``rarest`` ranks a sentence's words."""

    def __init__(self, frequency: Callable[[str], float], source: str) -> None:
        self._frequency = frequency
        self._cache: dict[str, float] = {}
        self.source = source

    @classmethod
    def wordfreq(cls, lang: str = "en") -> WordRarity:
        """Frequencies from the ``wordfreq`` package (case-folded by wordfreq itself)."""
        from wordfreq import word_frequency

        return cls(lambda w: float(word_frequency(w, lang)), f"wordfreq ({lang})")

    @classmethod
    def from_counts(cls, counts: Mapping[str, int], source: str = "counts") -> WordRarity:
        """Relative frequencies from word counts (looked up lower-cased)."""
        lowered: Counter[str] = Counter()
        for word, n in counts.items():
            lowered[word.lower()] += int(n)
        total = sum(lowered.values())
        if total <= 0:
            raise DataError(f"the word counts from {source} are empty; give a non-empty corpus.")
        return cls(lambda w: lowered.get(w.lower(), 0) / total, source)

    @classmethod
    def from_texts(cls, texts: Iterable[str], source: str = "corpus") -> WordRarity:
        """Count the words of ``texts`` (split like plain-text input, lower-cased)."""
        counts = Counter(w.lower() for t in texts for w in split_words(t))
        return cls.from_counts(counts, source)

    @classmethod
    def from_text_file(cls, path: str | Path) -> WordRarity:
        from attnlens.data.text import read_text_file

        return cls.from_texts(read_text_file(path), source=str(path))

    def frequency(self, word: str) -> float:
        if word not in self._cache:
            self._cache[word] = self._frequency(word)
        return self._cache[word]

    def rarest(self, words: Sequence[str], k: int = 2) -> list[int]:
        """Indices of the ``k`` rarest word-like words, rarest first (ties: earlier first)."""
        candidates = [i for i, w in enumerate(words) if is_wordlike(w)]
        candidates.sort(key=lambda i: (self.frequency(words[i]), i))
        return candidates[:k]
