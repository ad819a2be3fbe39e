"""``head_stats`` with bootstrap intervals over sentences and a choice of pooling.

Reads the per-sentence sums ``HeadStats`` keeps. With ``token`` pooling the values are
``HeadStats.result()``'s own (every row of the corpus counts the same); ``sentence`` pooling
averages per-sentence means. Intervals: percentile, from the bootstrap over sentences.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from attnlens.measures.heads.head_stats import HeadStats
from attnlens.stats.bootstrap import Inference, estimate_shares


def head_stats_table(stats: HeadStats, inference: Inference) -> pd.DataFrame:
    """One row per (measure, layer, head) that exists: value, ci_low, ci_high, pooling."""
    sums = stats.field_rows("sentence_sums")  # [sentence, measure, layer, head]
    rows = stats.field_rows("sentence_rows")  # [sentence, measure]
    measures = stats.measures
    shape = (len(measures), stats.n_layers, stats.n_heads)
    n = len(rows)
    per_cell = rows[:, :, None].expand(n, len(measures), stats.n_layers * stats.n_heads)
    est = estimate_shares(sums.reshape(n, -1), per_cell.reshape(n, -1),
                          torch.tensor(stats.sentences, dtype=torch.long), inference)
    low, high = est.low.reshape(shape).numpy(), est.high.reshape(shape).numpy()
    table = stats.result()["head_stats"]
    m = table["measure"].map({name: i for i, name in enumerate(measures)}).to_numpy()
    layer, head = table["layer"].to_numpy(), table["head"].to_numpy()
    if inference.pooling == "sentence":
        value = np.nan_to_num(est.value.reshape(shape).numpy(), nan=0.0)
        table = table.assign(value=value[m, layer, head])
    return table.assign(ci_low=low[m, layer, head], ci_high=high[m, layer, head],
                        pooling=inference.pooling)
