"""Tidy tables from a ``SpectrumAnalyzer``'s running sums (one row per layer/head/measure)."""

from __future__ import annotations

from typing import Protocol

import numpy as np
import pandas as pd
import torch

SUMMARY_MEASURES = (
    "cum_at_quarter", "effective_rank", "effective_rank_frac", "rank90", "rank99",
    "rank90_frac", "rank99_frac",
)
COST_MEASURES = ("p_error", "output_error", "linformer_error")
TOP_MEASURES = (
    "ky_fan_share_lower", "ky_fan_share_upper", "nuclear_lower", "nuclear_upper",
    "top1_value", "max_residual_rel",
)


class SpectrumSums(Protocol):
    """What the tables read: a ``SpectrumAnalyzer``'s running sums and settings."""

    sentences: int
    summary_sum: torch.Tensor  # [measure, layer, head]
    curve_sum: torch.Tensor  # [layer, head, fraction]
    grid: torch.Tensor  # [fraction]
    bucket_sum: dict[str, torch.Tensor]  # bucket's largest length -> [layer, head, k]
    bucket_count: dict[str, int]
    low_rank_cost: bool
    cost_sum: torch.Tensor  # [measure, layer, head, fraction]
    rank_fractions: tuple[float, ...]
    top_sentences: int
    top_sum: torch.Tensor  # [measure, layer, head]
    top_k: int

    def rows(self, values: np.ndarray, extra: dict[str, np.ndarray]) -> pd.DataFrame: ...


def bucket_label(hi: int) -> str:
    """``"1-8"``, ``"9-16"``, ``"17-32"``, ...: the lengths a bucket holds."""
    return f"{1 if hi <= 8 else hi // 2 + 1}-{hi}"


def spectrum_tables(spec: SpectrumSums) -> dict[str, pd.DataFrame]:
    """``spectrum_summary``, ``spectrum_curve``, ``spectrum_curve_by_length`` and, when
    measured, ``low_rank_cost`` and ``spectrum_top_k``."""
    tables: dict[str, pd.DataFrame] = {}
    count = spec.sentences
    if count:
        summary = (spec.summary_sum / count).cpu().numpy()  # [measure, layer, head]
        tables["spectrum_summary"] = spec.rows(
            np.moveaxis(summary, 0, -1), {"measure": np.array(SUMMARY_MEASURES)}
        )
        tables["spectrum_curve"] = spec.rows(
            (spec.curve_sum / count).cpu().numpy(), {"fraction": spec.grid.numpy()}
        )
        frames = []
        for key in sorted(spec.bucket_sum, key=int):
            hi = int(key)
            mean = (spec.bucket_sum[key] / spec.bucket_count[key]).cpu().numpy()
            frame = spec.rows(mean, {"k": np.arange(1, hi + 1)})
            frame.insert(2, "bucket", bucket_label(hi))
            frame.insert(3, "sentences", spec.bucket_count[key])
            frames.append(frame)
        tables["spectrum_curve_by_length"] = pd.concat(frames, ignore_index=True)
        if spec.low_rank_cost:
            cost = (spec.cost_sum / count).cpu().numpy()  # [measure, layer, head, fraction]
            fractions = np.array(spec.rank_fractions)
            tables["low_rank_cost"] = spec.rows(
                np.moveaxis(cost, 0, -1),  # [layer, head, fraction, measure]
                {
                    "k_fraction": np.repeat(fractions, len(COST_MEASURES)),
                    "measure": np.tile(np.array(COST_MEASURES), len(fractions)),
                },
            )
    if spec.top_sentences:
        top = (spec.top_sum / spec.top_sentences).cpu().numpy()  # [measure, layer, head]
        frame = spec.rows(np.moveaxis(top, 0, -1), {"measure": np.array(TOP_MEASURES)})
        frame.insert(2, "k", spec.top_k)
        frame.insert(3, "sentences", spec.top_sentences)
        tables["spectrum_top_k"] = frame
    return tables
