"""How low-rank are attention matrices? Singular-value spectra of every head, streamed.

For every sentence and head only the real tokens are kept (the ``m x n`` block of ``P =
softmax(Q K^T / sqrt(d))`` without padding rows or columns; [CLS]/[SEP] are real tokens and
stay; ``m = n`` for self-attention, ``m != n`` for cross-attention, ``r = min(m, n)``).
Blocks of every layer of a batch are pooled by shape, so each shape is one batched solver
call (``spectral.singular_values``), never a Python loop over matrices.

Definitions (``s_1 >= ... >= s_r`` are the singular values of one block):

- **cumulative curve** ``C(k) = (s_1 + ... + s_k) / (s_1 + ... + s_r)``, ``C(0) = 0``: the
  normalised cumulative singular-value curve of Linformer (Wang et al. 2020, Fig. 1).
  "Energy" here means exactly this share of the *sum of singular values* (not of their
  squares). Between integers ``C`` is interpolated linearly.
- **relative curve**: ``C(f r)`` on the grid ``f = 1/20, 2/20, ..., 1``, averaged over
  sentences (each sentence weighs the same).
- **curve by length**: ``C(k)`` for absolute ``k = 1 .. hi`` in the length buckets
  ``1-8, 9-16, 17-32, ...`` of ``r`` (``hi`` a power of two; ``C(k) = 1`` for ``k > r``).
- ``cum_at_quarter``: ``C(r / 4)``, Linformer's "128 of 512".
- ``effective_rank``: ``exp(H(s / sum s))`` (Roy & Vetterli 2007); ``effective_rank_frac``
  is that divided by ``r``.
- ``rank90`` / ``rank99``: the smallest integer ``k`` with ``C(k) >= 0.90`` / ``0.99``;
  ``rank90_frac`` / ``rank99_frac`` divide by ``r``.

Low-rank costs (``low_rank_cost=True``; ``p_error``, ``output_error``, ``linformer_error``
for ``k = ceil(f r)``, ``f`` in ``rank_fractions``) are defined in ``measures.spectrum.low_rank``.
``linformer_error`` is NaN for causal models (a projection of the context mixes in future
tokens).

Long inputs: with ``top_k > 0``, blocks with ``r >= top_k_min_n`` get only their top ``k``
singular values and bounded sums (``spectral.top_singular_values``) in the table
``spectrum_top_k``; the other tables then cover the shorter sentences only. When the model
hands patterns over in query blocks (``attnlens.model.query_blocks``) those long blocks are
never held whole: the randomized range finder runs on block products, recomputing the
layer's rows for each product (``measures.spectrum.long_patterns``), with the same bounds.
Full spectra (``top_k = 0``, or sentences shorter than ``top_k_min_n``) need whole blocks:
the analyzer asks for them (``whole_matrix_length``) only up to the whole-matrix limit.

Bounded sample (``max_sentences = N``): of a corpus of ``S > N`` sentences only the ``N``
evenly spaced by corpus index are read, ``floor(j S / N)`` for ``j = 0 .. N-1``
(``spread_sample``; ``batch.extra["index"]`` and ``["corpus_size"]``; without a corpus size,
the first ``N`` indices; without indices, the first ``N`` sentences seen), whatever the
batching or the number of processes; the other sentences are not touched (``unsampled``
counts them). `attnlens analyze` reads ``--spectrum-sentences`` (256) sentences: the exact
spectra cost more than every other analyzer together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.measures.spectrum.long_patterns import BlockSketch, ShortBlocks
from attnlens.measures.spectrum.low_rank import (  # re-exported: tests and benchmarks use them here
    linformer_rms_error,
    tail_share,
    truncation_errors,
)
from attnlens.measures.spectrum.singular_values import (  # re-exported: tests use them here
    METHODS,
    cumulative_curve,
    curve_at,
    entropy_effective_rank,
    lapack_single_thread,
    numerical_rank,
    rank_ks,
    singular_values,
    top_singular_values,
    top_singular_values_of,
)
from attnlens.measures.spectrum.spectrum_tables import (  # the measures' names, in table order
    COST_MEASURES,
    SUMMARY_MEASURES,
    TOP_MEASURES,
    spectrum_tables,
)
from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Batch, PatternBlock
from attnlens.stream.head_patterns import HeadPatternAnalyzer
from attnlens.stream.per_sentence import sentence_ids_of
from attnlens.stream.real_tokens import (  # re-exported: tests use them here
    BlockGroup,
    LengthGroup,
    block_groups,
    gather_block,
    gather_key_tokens,
    gather_square,
    gather_tokens,
    length_groups,
)
from attnlens.stream.sentence_sample import spread_sample  # re-exported: tests use it here

__all__ = [
    "METHODS", "BlockGroup", "LengthGroup", "SpectrumAnalyzer", "block_groups",
    "cumulative_curve", "curve_at", "entropy_effective_rank", "gather_block", "gather_square",
    "gather_tokens", "lapack_single_thread", "length_groups", "linformer_rms_error",
    "numerical_rank", "rank_ks", "singular_values", "tail_share", "top_singular_values",
    "truncation_errors",
]

GRID_POINTS = 20
RANK_LEVELS = (0.90, 0.99)
DEFAULT_BUFFER = 1 << 22  # pooled pattern elements (16 MiB of float32) before a solver call


@dataclass
class _Pending:
    layer: int
    group: BlockGroup
    P: torch.Tensor  # [group, head, n_query, n_key]
    V: torch.Tensor | None  # [group, head, n_key, d_head_v]


def length_bucket(n: int) -> int:
    """Upper end ``hi`` of the bucket ``(hi/2, hi]`` holding length ``n`` (at least 8)."""
    return max(8, 1 << max(0, n - 1).bit_length())


class SpectrumAnalyzer(HeadPatternAnalyzer):
    """Streaming singular-value statistics of every head's attention blocks (module doc).

    State: running float64 sums over sentences, so ``merge`` adds and a streamed or
    distributed result equals the all-at-once one. ``low_rank_cost=False`` skips the
    truncation and Linformer errors (they need eigenvectors and the cached values ``v``).
    On an encoder-decoder model the cross-attention's query rows follow
    ``batch.extra["query_mask"]`` when given (else every query row is real).
    """

    name = "spectrum"
    reads_blocks = True
    state_fields = (
        "sentences", "token_sum", "curve_sum", "summary_sum", "cost_sum", "bucket_sum",
        "bucket_count", "top_sum", "top_sentences", "unsampled",
    )

    def __init__(
        self,
        heads_per_layer: list[int],
        rank_fractions: tuple[float, ...] = (0.125, 0.25, 0.5),
        low_rank_cost: bool = True,
        method: str = "auto",
        causal: bool = False,
        top_k: int = 0,
        top_k_min_n: int = 1024,
        buffer_elements: int = DEFAULT_BUFFER,
        max_sentences: int | None = None,
    ) -> None:
        if method not in METHODS:
            raise ConfigError(f"unknown spectrum method {method!r}; use one of {METHODS}.")
        if any(not 0 < f <= 1 for f in rank_fractions):
            raise ConfigError("rank fractions must lie in (0, 1], for example 0.25 for n/4.")
        if top_k < 0 or top_k_min_n < 1:
            raise ConfigError("top-k must be >= 0 (0 = off) and its minimum length >= 1.")
        if max_sentences is not None and max_sentences < 1:
            raise ConfigError(f"the spectrum's sentences must be at least 1 (or all), not "
                              f"{max_sentences}.")
        self.max_sentences = max_sentences
        self.set_heads(heads_per_layer)
        self.rank_fractions = tuple(rank_fractions)
        self.low_rank_cost, self.method, self.causal = low_rank_cost, method, causal
        self.top_k, self.top_k_min_n = top_k, top_k_min_n
        self.buffer_elements = buffer_elements
        shape = (self.n_layers, self.n_heads)
        f64 = torch.float64
        self.grid = torch.arange(1, GRID_POINTS + 1, dtype=f64) / GRID_POINTS
        self.sentences = 0
        self.token_sum = 0
        self.curve_sum = torch.zeros(*shape, GRID_POINTS, dtype=f64)
        self.summary_sum = torch.zeros(len(SUMMARY_MEASURES), *shape, dtype=f64)
        self.cost_sum = torch.zeros(len(COST_MEASURES), *shape, len(rank_fractions), dtype=f64)
        # Keyed by str(hi) (JSON keeps the keys): "16" -> [layer, head, 16]
        self.bucket_sum: dict[str, torch.Tensor] = {}
        self.bucket_count: dict[str, int] = {}
        self.top_sum = torch.zeros(len(TOP_MEASURES), *shape, dtype=f64)
        self.top_sentences = 0
        self.unsampled = 0  # sentences outside the bounded sample (never read)
        self._pending: list[_Pending] = []
        self._groups: dict[tuple[int, int], list[BlockGroup]] = {}
        self._device = torch.device("cpu")
        self._grid = self.grid
        self._sample: torch.Tensor | None = None
        self._idle = False

    @classmethod
    def model_options(cls, model: HookedTransformer) -> dict:
        return {"heads_per_layer": list(model.heads_per_layer), "causal": model.cfg.causal}

    @property
    def hook_kinds(self) -> tuple[str, ...]:
        return ("pattern", "v") if self.low_rank_cost else ("pattern",)

    def settings(self) -> dict:
        return {
            "heads_per_layer": self.heads_per_layer, "rank_fractions": self.rank_fractions,
            "low_rank_cost": self.low_rank_cost, "method": self.method, "causal": self.causal,
            "top_k": self.top_k, "top_k_min_n": self.top_k_min_n,
            "max_sentences": self.max_sentences,
        }

    # Feeding ------------------------------------------------------------------------
    def sampled(self, batch: Batch) -> torch.Tensor | None:
        """``[batch]`` True for the sentences of the bounded sample (``spread_sample``), on
        the host; None when every sentence is read."""
        if self.max_sentences is None:
            return None
        seen = self.sentences + self.top_sentences + self.unsampled
        ids = torch.tensor(sentence_ids_of(batch, seen), dtype=torch.long)
        return spread_sample(ids, self.max_sentences, batch.extra.get("corpus_size"))

    def begin_batch(self, batch: Batch) -> None:
        self._groups = {}
        self._batch_counted = False
        self._sample = self.sampled(batch)
        self._idle = self._sample is not None and not bool(self._sample.any())
        if self._sample is not None:
            self.unsampled += int((~self._sample).sum())
            self._batch_counted = self._idle  # nothing of this batch is counted
        if self._idle:  # no sentence of the sample: the batch is not read at all
            return
        # Self-attention blocks (queries = keys = the batch's tokens), grouped once per batch:
        # the grouping reads the mask on the host, which must not happen once per layer.
        width = batch.attention_mask.shape[1]
        self._place(batch.attention_mask.device)
        self._groups_for(batch, width, width)

    def _groups_for(self, batch: Batch, n_query: int, n_key: int) -> list[BlockGroup]:
        """Block groups of this batch for patterns ``[.., n_query, n_key]`` (cached)."""
        if (n_query, n_key) not in self._groups:
            key_mask = batch.attention_mask
            query_mask = batch.extra.get("query_mask")
            if query_mask is None:
                same = n_query == n_key
                query_mask = key_mask if same else key_mask.new_ones(key_mask.shape[0], n_query)
            if self._sample is not None:  # sentences outside the sample: no real tokens
                keep = self._sample.to(key_mask.device)[:, None]
                key_mask, query_mask = key_mask * keep, query_mask * keep
            self._groups[(n_query, n_key)] = block_groups(query_mask, key_mask, self._device)
        return self._groups[(n_query, n_key)]

    def whole_matrix_length(self, batch: Batch) -> int:
        """The longest sentence needing its whole real-token block: every sentence for the
        full spectrum (``top_k = 0``), else those shorter than ``top_k_min_n``."""
        lengths = batch.attention_mask.sum(1).cpu()  # one host read per batch
        sample = self.sampled(batch)
        lengths = (lengths if sample is None else lengths[sample]).tolist()
        if self.top_k > 0:
            lengths = [n for n in lengths if n < self.top_k_min_n]
        return int(max(lengths, default=0))

    def update_block(self, batch: Batch, layer: int, block: PatternBlock,
                     cache: ActivationCache) -> None:
        if self._idle:
            return
        if block.is_whole:
            self._update_whole(batch, layer, block.pattern, cache)
            return
        self._place(block.pattern.device)
        groups = self._groups_for(batch, block.query.length, block.n_keys)
        if not self._batch_counted:
            self._count(groups)
        if block.start == 0:  # each group's blocks: a sketch (top-k) or put together
            self._parts = [
                BlockSketch(g, block.n_heads, block.query.length, min(self.top_k, g.rank),
                            None, 0, self._device) if self._is_long(g)
                else ShortBlocks(g, block.n_heads, block.query.length, block.pattern.dtype,
                                 self._device)
                for g in groups]
            self._cache_values = cache["v", layer] if self.low_rank_cost else None
        for part in self._parts:
            part.add(block)
        self._recompute = (block.recompute, block.query.rows)

    def end_layer(self, batch: Batch, layer: int) -> None:
        parts, self._parts = getattr(self, "_parts", None), None
        if not parts:
            return
        recompute, rows = self._recompute
        values, self._recompute = None, None
        for part in parts:
            if isinstance(part, ShortBlocks):
                if self.low_rank_cost and values is None:
                    values = self._values(self._cache_values, part.P.shape[1])
                V = None if values is None else gather_key_tokens(
                    values, part.group).transpose(1, 2)  # [group, head, n_key, d]
                self._pending.append(_Pending(layer, part.group, part.P, V))
                continue
            if recompute is None:
                raise TypeError("top-k spectra of query blocks need the model's recomputed "
                                "rows (PatternBlock.recompute).")
            k = min(self.top_k, part.group.rank)
            top = top_singular_values_of(part.products(recompute, rows), k,
                                         sketch=part.first_product())
            self._fold_top_spectrum(layer, top, part.sketch.shape[1])
        self._cache_values = None
        if sum(p.P.numel() for p in self._pending) >= self.buffer_elements:
            self._flush()

    def _values(self, cache: ActivationCache | None, n_heads: int) -> torch.Tensor | None:
        """The layer's values ``[batch, pos, head, d]`` per query head (grouped heads)."""
        if cache is None:
            return None
        values = cache  # [batch, pos, kv_head, d]
        if values.shape[2] != n_heads:
            values = values.repeat_interleave(n_heads // values.shape[2], dim=2)
        return values

    def _update_whole(self, batch: Batch, layer: int, pattern: torch.Tensor,
                      cache: ActivationCache) -> None:
        # pattern: [batch, head, query_pos, key_pos]
        self._place(pattern.device)
        groups = self._groups_for(batch, pattern.shape[-2], pattern.shape[-1])
        if not self._batch_counted:
            self._count(groups)
        values = cache["v", layer] if self.low_rank_cost else None  # [batch, pos, kv_head, d]
        if values is not None and values.shape[2] != pattern.shape[1]:  # grouped-query heads
            values = values.repeat_interleave(pattern.shape[1] // values.shape[2], dim=2)
        for group in groups:
            P = gather_block(pattern, group)  # [group, head, n_query, n_key]
            V = None
            if values is not None:
                V = gather_key_tokens(values, group).transpose(1, 2)  # [group, head, n_key, d]
            self._pending.append(_Pending(layer, group, P, V))
        if sum(p.P.numel() for p in self._pending) >= self.buffer_elements:
            self._flush()

    def end_batch(self, batch: Batch) -> None:
        self._flush()
        self._groups = {}
        self._idle = False

    def _count(self, groups: list[BlockGroup]) -> None:
        self._batch_counted = True
        for group in groups:
            g = len(group.rows)
            if self._is_long(group):
                self.top_sentences += g
                continue
            self.sentences += g
            self.token_sum += group.rank * g
            key = str(length_bucket(group.rank))
            self.bucket_count[key] = self.bucket_count.get(key, 0) + g

    def _place(self, device: torch.device) -> None:
        """Keep the running sums on the device the patterns come from: adding to them then
        needs no copy to the host (no synchronisation per layer on a GPU)."""
        if device == self._device:
            return
        self._device = device
        for field in ("curve_sum", "summary_sum", "cost_sum", "top_sum"):
            setattr(self, field, getattr(self, field).to(device))
        self.bucket_sum = {hi: t.to(device) for hi, t in self.bucket_sum.items()}
        self._grid = self.grid.to(device)

    def _is_long(self, group: BlockGroup) -> bool:
        return self.top_k > 0 and group.rank >= self.top_k_min_n

    # Solving ------------------------------------------------------------------------
    def _flush(self) -> None:
        """Solve every pending block, pooled by shape, and fold the results per layer."""
        pending, self._pending = self._pending, []
        by_shape: dict[tuple[int, int], list[_Pending]] = {}
        for item in pending:
            if self._is_long(item.group):
                self._fold_top(item)
            else:
                by_shape.setdefault(item.P.shape[-2:], []).append(item)
        for items in by_shape.values():
            # [sum of group*head, n_query, n_key]: one solver call for the whole shape
            P = torch.cat([it.P.flatten(0, 1) for it in items])
            if self.low_rank_cost:
                V = torch.cat([it.V.flatten(0, 1) for it in items])
                ks = rank_ks(items[0].group.rank, self.rank_fractions)
                s, p_err, out_err = truncation_errors(P, V, ks)
                lin = linformer_rms_error(P, V, ks)
                if self.causal:
                    lin = torch.full_like(lin, float("nan"))
                costs = torch.stack([p_err, out_err, lin], 1)  # [matrices, measure, K]
            else:
                s, costs = singular_values(P, self.method), None
            self._fold(s, costs, self._slots(items), items[0].group.rank)

    def _slots(self, items: list[_Pending]) -> torch.Tensor:
        """Each pooled matrix's ``layer * n_heads + head`` (the order of ``flatten(0, 1)``)."""
        return torch.cat([
            it.layer * self.n_heads
            + torch.arange(it.P.shape[1], device=self._device).repeat(it.P.shape[0])
            for it in items
        ])

    def _fold(self, s: torch.Tensor, costs: torch.Tensor | None, slots: torch.Tensor,
              r: int) -> None:
        """Add per-matrix results (``s [matrices, r]``, one shape, every layer of a batch) to
        the running sums, each at its ``slots`` entry (``layer * n_heads + head``)."""
        n_slots = self.n_layers * self.n_heads
        curve = cumulative_curve(s)  # [matrices, r]
        quarter = curve_at(curve, torch.full((1,), r / 4, dtype=curve.dtype,
                                             device=curve.device))[..., 0]
        eff = entropy_effective_rank(s)
        r90, r99 = (numerical_rank(curve, level) for level in RANK_LEVELS)
        summary = torch.stack([quarter, eff, eff / r, r90, r99, r90 / r, r99 / r])  # [7, m]
        self.summary_sum.view(len(SUMMARY_MEASURES), n_slots).index_add_(1, slots, summary)
        grid = curve_at(curve, self._grid * r)  # [matrices, grid point]
        self.curve_sum.view(n_slots, GRID_POINTS).index_add_(0, slots, grid)
        hi = length_bucket(r)
        bucket = self.bucket_sum.setdefault(
            str(hi), torch.zeros(self.n_layers, self.n_heads, hi, dtype=torch.float64,
                            device=self._device)
        )
        padded = torch.nn.functional.pad(curve, (0, hi - r), value=1.0)  # [matrices, hi]
        bucket.view(n_slots, hi).index_add_(0, slots, padded)
        if costs is not None:  # [matrices, measure, K] -> [measure, layer * head, K]
            self.cost_sum.view(len(COST_MEASURES), n_slots, -1).index_add_(
                1, slots, costs.transpose(0, 1))

    def _fold_top(self, item: _Pending) -> None:
        """Top-``k`` statistics of one group of long blocks (``spectrum_top_k``)."""
        k = min(self.top_k, item.group.rank)
        top = top_singular_values(item.P, k)  # batch [group, head]
        self._fold_top_spectrum(item.layer, top, item.P.shape[1])

    def _fold_top_spectrum(self, layer: int, top, h: int) -> None:
        """Add one group's ``TopSpectrum`` (batch ``[group, head]``) to ``top_sum``."""
        first = top.values[..., 0].clamp_min(1e-300)
        measures = torch.stack([
            top.ky_fan_lower / top.nuclear_upper,
            (top.ky_fan_upper / top.nuclear_lower).clamp(max=1.0),
            top.nuclear_lower,
            top.nuclear_upper,
            top.values[..., 0],
            (top.residual / first[..., None] ** 2).amax(-1),
        ])  # [measure, group, head]
        self.top_sum[:, layer, :h] += measures.sum(1).to(self.top_sum.device)

    # Results ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        self._flush()  # nothing may stay pending in a shipped state
        return super().state_dict()

    def result(self) -> dict[str, pd.DataFrame]:
        self._flush()
        if self.sentences == 0 and self.top_sentences == 0:
            raise ConfigError("the spectrum analyzer saw no sentences; pass a non-empty corpus.")
        return spectrum_tables(self)

    @property
    def mean_length(self) -> float:
        return self.token_sum / max(self.sentences, 1)

    def rows(self, values: np.ndarray, extra: dict[str, np.ndarray]) -> pd.DataFrame:
        """Tidy rows from ``values [layer, head, ...]`` keeping only existing heads."""
        return head_rows(self.heads_per_layer, values, extra)


def head_rows(heads_per_layer: Sequence[int], values: np.ndarray,
              extra: dict[str, np.ndarray]) -> pd.DataFrame:
    """``layer, head, <extra...>, value``: ``extra``'s rows once per existing head, beside
    that head's ``values [layer, head, ...]`` flattened; built column by column (the same
    table as one frame per head concatenated)."""
    heads = [(layer, head) for layer, h in enumerate(heads_per_layer) for head in range(h)]
    if not heads:
        return pd.concat([], ignore_index=True)  # nothing to concatenate: pandas' error
    n = len(next(iter(extra.values()))) if extra else values[heads[0]].size
    columns: dict[str, np.ndarray] = {
        "layer": np.repeat(np.array([layer for layer, _ in heads], dtype=np.int64), n),
        "head": np.repeat(np.array([head for _, head in heads], dtype=np.int64), n),
    }
    columns.update({name: np.tile(np.asarray(column), len(heads))
                    for name, column in extra.items()})
    columns["value"] = np.concatenate([values[layer, head].reshape(-1) for layer, head in heads])
    return pd.DataFrame(columns)
