"""STS Benchmark: Spearman correlation (x100) of embedding cosine with gold similarity."""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from attnlens.errors import DataError
from attnlens.metrics.embeddings import sentence_embeddings
from attnlens.model.transformer import HookedTransformer


@dataclass
class SentencePairs:
    """Sentence pairs with a gold score each."""

    first: list[str]
    second: list[str]
    scores: np.ndarray

    def __len__(self) -> int:
        return len(self.first)

    def subset(self, indices) -> SentencePairs:
        idx = list(indices)
        return SentencePairs(
            [self.first[i] for i in idx], [self.second[i] for i in idx], self.scores[idx]
        )


def read_pairs(path: str | Path) -> SentencePairs:
    """A CSV of ``sentence1,sentence2,score`` rows without header."""
    path = Path(path)
    if not path.is_file():
        raise DataError(
            f"pairs file {path} does not exist; pass a CSV of sentence1,sentence2,score."
        )
    first, second, scores = [], [], []
    with path.open(encoding="utf-8", newline="") as handle:
        for line_no, row in enumerate(csv.reader(handle), start=1):
            if not row:
                continue
            if len(row) != 3:
                raise DataError(
                    f"{path}:{line_no}: expected 3 columns (sentence1,sentence2,score), "
                    f"got {len(row)}."
                )
            try:
                scores.append(float(row[2]))
            except ValueError:
                raise DataError(
                    f"{path}:{line_no}: score {row[2]!r} is not a number (the file has no header)."
                ) from None
            first.append(row[0])
            second.append(row[1])
    if len(first) < 2:
        raise DataError(f"{path} holds fewer than 2 sentence pairs.")
    return SentencePairs(first, second, np.asarray(scores, dtype=np.float64))


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho: Pearson correlation of average ranks (ties share their mean rank)."""
    rx = pd.Series(np.asarray(x, dtype=np.float64)).rank().to_numpy()
    ry = pd.Series(np.asarray(y, dtype=np.float64)).rank().to_numpy()
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denom = np.sqrt((rx**2).sum() * (ry**2).sum())
    return float((rx * ry).sum() / denom) if denom > 0 else float("nan")


def distinct_sentences(pairs: SentencePairs) -> list[str]:
    """Every sentence of the pairs once (each is embedded once)."""
    return sorted(set(pairs.first) | set(pairs.second))


@torch.no_grad()
def pair_cosines(
    model: HookedTransformer,
    tokenizer,
    pairs: SentencePairs,
    batch_size: int = 32,
    max_length: int = 256,
    head_mask: torch.Tensor | None = None,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Cosine similarity of each pair's normalised mean-pooled embeddings.

    ``progress(n)`` is called after each batch of ``n`` distinct sentences.
    """
    unique = distinct_sentences(pairs)
    index = {s: i for i, s in enumerate(unique)}
    emb = sentence_embeddings(
        model, tokenizer, unique, batch_size, max_length, head_mask, progress=progress
    )
    a = emb[[index[s] for s in pairs.first]]
    b = emb[[index[s] for s in pairs.second]]
    return (a * b).sum(dim=-1).double().cpu().numpy()


def sts_spearman(
    model: HookedTransformer,
    tokenizer,
    pairs: SentencePairs,
    batch_size: int = 32,
    max_length: int = 256,
    head_mask: torch.Tensor | None = None,
    progress: Callable[[int], None] | None = None,
) -> float:
    """STS Benchmark score: Spearman x 100 between pair cosines and gold scores."""
    cos = pair_cosines(model, tokenizer, pairs, batch_size, max_length, head_mask, progress)
    return 100.0 * spearman(cos, pairs.scores)
