"""STS Benchmark: Spearman correlation (x100) of embedding cosine with gold similarity.

``SentencePairs`` and ``read_pairs`` live in ``attnlens.data.pairs`` (re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import torch

from attnlens.data.pairs import SentencePairs, read_pairs
from attnlens.errors import DataError
from attnlens.metrics.embeddings import sentence_embeddings
from attnlens.model.transformer import HookedTransformer

__all__ = ["SentencePairs", "distinct_sentences", "pair_cosines", "read_pairs", "spearman",
           "sts_spearman"]


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
    cos = (a * b).sum(dim=-1).double().cpu().numpy()
    # A pair of identical sentences shares one embedding, so its cosine is 1 exactly; the
    # float sum gives 1 +- rounding (0.99999988), which would rank such pairs by noise.
    cos[[x == y for x, y in zip(pairs.first, pairs.second, strict=True)]] = 1.0
    return cos


def sts_spearman(
    model: HookedTransformer,
    tokenizer,
    pairs: SentencePairs,
    batch_size: int = 32,
    max_length: int = 256,
    head_mask: torch.Tensor | None = None,
    progress: Callable[[int], None] | None = None,
) -> float:
    """STS Benchmark score: Spearman x 100 between pair cosines and gold scores.

    Undefined results are errors, not ``nan``: too few pairs or constant gold scores
    (``SentencePairs.require_defined``), non-finite embeddings, or equal cosines.
    """
    pairs.require_defined()
    cos = pair_cosines(model, tokenizer, pairs, batch_size, max_length, head_mask, progress)
    if not np.isfinite(cos).all():
        raise DataError("the model gives non-finite sentence embeddings (NaN or infinite "
                        "cosines); its weights or --dtype overflow: try --dtype float32.")
    spread, rounding = float(np.ptp(cos)), cosine_rounding(model)
    if spread <= rounding:
        raise DataError(f"all {len(cos)} pair cosines are equal within float rounding (spread "
                        f"{spread:.3g} <= {rounding:.3g}: the model gives the sentences the same "
                        "embedding); Spearman correlation would rank rounding noise: use pairs "
                        "of different sentences, or check the model.")
    return 100.0 * spearman(cos, pairs.scores)


def cosine_rounding(model: HookedTransformer) -> float:
    """The largest rounding error of a cosine of two unit vectors of width d summed in the
    model's dtype: d * eps (Higham's bound for a dot product of length d); cosines closer
    than this are equal as far as the model's arithmetic can tell."""
    return model.cfg.d_model * torch.finfo(model.dtype).eps
