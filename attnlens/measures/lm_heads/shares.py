"""Per-sequence sums of per-head measures, pooled with bootstrap intervals and role tests.

The probe, sink and retrieval analyzers all reduce one sequence (a probe, a haystack or a
corpus sentence) to a sum per measure and head plus a count (queries, answer positions), and
report the pooled share over sequences with a bootstrap interval whose resampling unit is
the sequence (``attnlens.stats.bootstrap``). ``HeadShares`` keeps those sums per sequence
(``PerSentenceRows``: mergeable, shipped as one tensor per field) and builds the tidy table
and the one-sided role tests every analyzer of this measure shares.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from attnlens.model.transformer import HookedTransformer
from attnlens.stats.bootstrap import Inference, Shares, estimate_shares, threshold_tests
from attnlens.stream.base import Analyzer, Batch, pattern_hook_names
from attnlens.stream.per_sentence import PerSentenceRows, sentence_ids_of

SCORE_COLUMNS = ["layer", "head", "kv_head", "measure", "value", "ci_low", "ci_high",
                 "n_sequences"]
# Sequences needed before a head is tested: the bootstrap resamples sequences, and on fewer
# than 20 its interval undercovers (the positional heads' rule, docs/heads.md).
MIN_SEQUENCES = 20


def kv_heads_of(model: HookedTransformer) -> list[int]:
    """Key/value heads per layer (fewer than the query heads under GQA/MQA)."""
    return [block.attn.n_kv_heads for block in model.blocks]


def kv_head_index(heads_per_layer: Sequence[int], kv_per_layer: Sequence[int],
                  layer: np.ndarray, head: np.ndarray) -> np.ndarray:
    """The key/value head each query head reads: ``head // (n_heads / n_kv_heads)``."""
    group = np.array([h // max(k, 1) for h, k in zip(heads_per_layer, kv_per_layer,
                                                       strict=True)])
    return head // group[layer]


class HeadShares(PerSentenceRows, Analyzer):
    """Per-sequence ``[measure, layer, head]`` sums and a per-sequence count (see module).

    Subclasses name their ``measures``, add each query block's share to ``self._scratch
    [sequence, measure, layer, head]`` in ``update_block`` (``reads_blocks``: on long inputs
    the pattern comes a block of query rows at a time, a short one as one block) and call
    ``_start(batch, counts)`` / ``_finish()`` from ``begin_batch`` / ``end_batch``.
    ``pooling`` fixes how sequences are pooled whatever the run's ``--pooling`` (the
    measure's definition decides it).
    """

    layerwise = True
    reads_blocks = True
    measures: tuple[str, ...] = ()
    pooling = "token"
    state_fields = ("sentences", "sentence_sums", "sentence_rows")
    row_fields = ("sentence_sums", "sentence_rows")

    def __init__(self, heads_per_layer: Sequence[int], kv_heads_per_layer: Sequence[int],
                 inference: Inference | None = None) -> None:
        self.heads_per_layer = list(heads_per_layer)
        self.kv_heads_per_layer = list(kv_heads_per_layer)
        self.n_layers, self.n_heads = len(self.heads_per_layer), max(self.heads_per_layer)
        self.inference = dataclasses.replace(inference or Inference(), pooling=self.pooling)
        self.sentences: list[int] = []  # index of every sequence seen
        self.sentence_sums: list[torch.Tensor] = []  # per batch [sequence, measure, layer, head]
        self.sentence_rows: list[torch.Tensor] = []  # per batch [sequence]: the count
        self._scratch: torch.Tensor | None = None

    def _identify(self, model: HookedTransformer) -> HeadShares:
        self.identify_model(model)
        return self

    def hook_names(self, model: HookedTransformer) -> list[str]:
        return pattern_hook_names(model)

    def row_width(self, field: str) -> tuple[int, ...]:
        if field == "sentence_sums":
            return (len(self.measures), self.n_layers, self.n_heads)
        return ()

    def settings(self) -> dict:
        return {"heads_per_layer": self.heads_per_layer,
                "kv_heads_per_layer": self.kv_heads_per_layer, **self.inference.settings()}

    # Feeding helpers --------------------------------------------------------------------
    def _start(self, batch: Batch, counts: torch.Tensor) -> None:
        """Register the batch's sequences and their counts ``[sequence]``; zero the scratch."""
        self.sentences += sentence_ids_of(batch, self.next_sentence_id())
        self.sentence_rows.append(counts.to(torch.float32))
        self._scratch = torch.zeros(batch.size, len(self.measures), self.n_layers,
                                    self.n_heads, device=counts.device)

    def _finish(self) -> None:
        self.sentence_sums.append(self._scratch)  # stays on the model's device
        self._scratch = None

    def end_batch(self, batch: Batch) -> None:
        self._finish()

    # Results ----------------------------------------------------------------------------
    def exists(self) -> tuple[np.ndarray, np.ndarray]:
        """(layer, head) of every head the model has (structurally pruned layers have fewer)."""
        exists = np.zeros((self.n_layers, self.n_heads), dtype=bool)
        for layer, n in enumerate(self.heads_per_layer):
            exists[layer, :n] = True
        return np.nonzero(exists)

    def estimates(self, keep_replicates: bool = False) -> Shares:
        """Pooled shares ``[measure * layer * head]`` with intervals over sequences."""
        sums = self.field_rows("sentence_sums")  # [sequence, measure, layer, head]
        counts = self.field_rows("sentence_rows")  # [sequence]
        ids = torch.tensor(self.sentences, dtype=torch.long)
        return estimate_shares(sums.reshape(len(counts), -1), counts, ids, self.inference,
                               keep_replicates=keep_replicates)

    @property
    def n_sequences(self) -> int:
        """Sequences with at least one counted example."""
        return int((self.field_rows("sentence_rows") > 0).sum())

    @property
    def n_examples(self) -> int:
        """Counted examples (queries, answer positions) over every sequence."""
        return int(self.field_rows("sentence_rows").sum())

    def table(self) -> pd.DataFrame:
        """``SCORE_COLUMNS``: one row per measure and head that exists."""
        shape = (len(self.measures), self.n_layers, self.n_heads)
        est = self.estimates()
        value, low, high = (t.reshape(shape).numpy() for t in (est.value, est.low, est.high))
        value = np.nan_to_num(value, nan=0.0) if self.n_examples == 0 else value
        layer, head = self.exists()
        kv = kv_head_index(self.heads_per_layer, self.kv_heads_per_layer, layer, head)
        parts = [pd.DataFrame({
            "layer": layer, "head": head, "kv_head": kv, "measure": measure,
            "value": value[m, layer, head], "ci_low": low[m, layer, head],
            "ci_high": high[m, layer, head], "n_sequences": self.n_sequences,
        }) for m, measure in enumerate(self.measures)]
        return pd.concat(parts, ignore_index=True)[SCORE_COLUMNS]

    def result(self) -> dict[str, pd.DataFrame]:
        return {self.name: self.table()}

    def role_tests(self, measure: str, role: str, threshold: float, min_examples: int,
                   detail: str = "", min_sequences: int = MIN_SEQUENCES) -> pd.DataFrame:
        """One-sided tests ``score > threshold`` for every head, corrected over the heads.

        Nothing is tested (p and q NaN, nothing passes) with fewer than ``min_sequences``
        sequences or ``min_examples`` counted examples: the minimum-evidence rules of the
        positional and rare-word roles. Columns: those of ``attnlens.measures.heads.roles``'
        ``role_tests``.
        """
        shape = (len(self.measures), self.n_layers, self.n_heads)
        m = self.measures.index(measure)
        est = self.estimates(keep_replicates=True)
        layer, head = self.exists()
        value = est.value.reshape(shape)[m, layer, head]
        reps = None if est.reps is None else est.reps.reshape(-1, *shape)[:, m, layer, head]
        df = est.df.reshape(shape)[m, layer, head]
        enough = self.n_sequences >= min_sequences and self.n_examples >= max(min_examples, 1)
        p, q, passed = threshold_tests(value, reps, threshold, self.inference, df,
                                       testable=enough)
        return pd.DataFrame({
            "role": role, "layer": layer, "head": head, "detail": detail,
            "value": value.numpy(), "ci_low": est.low.reshape(shape)[m, layer, head].numpy(),
            "ci_high": est.high.reshape(shape)[m, layer, head].numpy(),
            "reference": threshold, "compared_to": f"threshold {threshold:.2f}",
            "tested": ~np.isnan(p.numpy()), "p_value": p.numpy(), "q_value": q.numpy(),
            "n_sentences": self.n_sequences, "n_examples": self.n_examples,
            "passed": passed.numpy().astype(bool),
            "above_rule": (value >= threshold).numpy() & (self.n_examples > 0),
        })
