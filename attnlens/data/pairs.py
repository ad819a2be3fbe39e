"""Sentence pairs with a gold similarity score (STS Benchmark CSVs), checked on reading.

A pairs file is a UTF-8 CSV of ``sentence1,sentence2,score`` rows without header. Spearman
correlation needs at least 3 pairs whose scores are finite and not all equal, and the STS
training loss compares cosines with scores rescaled from their range (0 to 5 for STS-B), so
scores outside the declared range are refused (``score_range`` / ``--score-range``).
Imports nothing heavier than numpy.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnlens.data.files import has_real_text, read_utf8, refuse_conllu
from attnlens.errors import ConfigError, DataError
from attnlens.runs.io import check_input_file

STS_RANGE = (0.0, 5.0)  # STS Benchmark gold scores
MIN_PAIRS = 3  # Spearman's rho of fewer pairs is undefined or meaningless


@dataclass
class SentencePairs:
    """Sentence pairs with a gold score each; ``score_range`` is the scores' scale."""

    first: list[str]
    second: list[str]
    scores: np.ndarray
    score_range: tuple[float, float] = STS_RANGE

    def __len__(self) -> int:
        return len(self.first)

    def subset(self, indices) -> SentencePairs:
        idx = list(indices)
        return SentencePairs([self.first[i] for i in idx], [self.second[i] for i in idx],
                             self.scores[idx], self.score_range)

    def require_defined(self, source: str = "the pairs") -> None:
        """Refuse pairs on which Spearman correlation is undefined."""
        if len(self) < MIN_PAIRS:
            raise DataError(f"{source} holds {len(self)} sentence pair(s); Spearman correlation "
                            f"needs at least {MIN_PAIRS}: add pairs.")
        if all(a == b for a, b in zip(self.first, self.second, strict=True)):
            raise DataError(f"in every one of the {len(self)} pairs of {source} the two "
                            "sentences are identical, so every cosine is 1 and Spearman "
                            "correlation is undefined: use pairs of different sentences.")
        if float(np.ptp(self.scores)) == 0.0:
            raise DataError(f"all {len(self)} gold scores of {source} are equal "
                            f"({self.scores[0]:g}); Spearman correlation is undefined: use "
                            "pairs with different scores.")

    def scaled_scores(self) -> np.ndarray:
        """Scores mapped to [0, 1] by ``score_range`` (the STS loss's cosine targets)."""
        low, high = self.score_range
        return (self.scores - low) / (high - low)


def parse_score_range(text: str | None) -> tuple[float, float]:
    """``"LOW,HIGH"`` -> (low, high); None gives the STS-B range 0,5."""
    if text is None:
        return STS_RANGE
    parts = text.split(",")
    try:
        low, high = (float(p) for p in parts)
    except ValueError:
        raise ConfigError(f"--score-range {text!r} must be two numbers LOW,HIGH, "
                          "e.g. --score-range 0,5.") from None
    if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
        raise ConfigError(f"--score-range {text!r}: LOW must be below HIGH and both finite.")
    return low, high


def _rows(text: str, source: str):
    try:
        yield from enumerate(csv.reader(io.StringIO(text, newline="")), start=1)
    except csv.Error as exc:
        raise DataError(f"{source} is not a valid CSV ({exc}).") from None


def read_pairs(path: str | Path, score_range: tuple[float, float] = STS_RANGE,
               option: str = "--pairs") -> SentencePairs:
    """A CSV of ``sentence1,sentence2,score`` rows without header, checked (module doc)."""
    path = check_input_file(path, option, "CSV of sentence1,sentence2,score")
    low, high = score_range
    first, second, scores = [], [], []
    text = read_utf8(path)
    refuse_conllu(text, str(path), option, "a CSV of sentence1,sentence2,score rows")
    for line_no, row in _rows(text, str(path)):
        if not row:
            continue
        where = f"{path}:{line_no}"
        if len(row) != 3:
            raise DataError(f"{where}: expected 3 columns (sentence1,sentence2,score), "
                            f"got {len(row)}.")
        try:
            score = float(row[2])
        except ValueError:
            raise DataError(f"{where}: score {row[2][:40]!r} is not a number (the file has "
                            "no header).") from None
        if not math.isfinite(score):
            raise DataError(f"{where}: score {row[2]!r} is not a finite number.")
        if not low <= score <= high:
            raise DataError(f"{where}: score {score:g} is outside {low:g}..{high:g}; fix it, "
                            "or give the scores' scale with --score-range LOW,HIGH.")
        for column, sentence in enumerate(row[:2], start=1):
            if not has_real_text(sentence):
                raise DataError(f"{where}: sentence{column} is empty; fill it in or remove "
                                "the pair.")
        first.append(row[0])
        second.append(row[1])
        scores.append(score)
    pairs = SentencePairs(first, second, np.asarray(scores, dtype=np.float64), (low, high))
    pairs.require_defined(str(path))
    return pairs
