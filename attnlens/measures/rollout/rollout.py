"""Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers").

One layer's attention says which positions a token reads *at that layer*; after several
layers have mixed the positions it no longer says which **input** tokens an output depends
on. Rollout follows the mixing through the residual stream:

- ``Ã_l = r · fuse_heads(A_l) + (1 - r) · I``, rows renormalised to sum 1 (``r`` is the
  ``residual`` weight of the attention, 0.5 in the paper: the residual connection passes the
  token itself through unchanged; ``fuse_heads`` is the mean over heads by default, or the
  elementwise max or min);
- ``R_0 = Ã_0``, ``R_l = Ã_l R_{l-1}``: ``R_l[i, j]`` is the share of input token ``j`` in
  position ``i`` after block ``l`` (layers from 0; rows sum to 1).

Positions are the model's tokens, special tokens included, padding excluded (padded query
rows of ``Ã`` are identity rows, so they never leak into real rows).

``RolloutAnalyzer`` streams a corpus: per layer the mean over real query rows of

- ``special_share``: rollout mass on special tokens ([CLS], [SEP], <s>, ...);
- ``self_share``: rollout mass on the token itself, ``R_l[i, i]``;
- ``moved``: how much block ``l`` changed where a token's information comes from, the total
  variation ``½ Σ_j |R_l[i, j] - R_{l-1}[i, j]|`` (``R_{-1} = I``): the layers that move
  information most have the largest values;
- ``distance``: mean distance in tokens between a position and its sources,
  ``Σ_j R_l[i, j] |i - j|``;
- ``mixing``: how much block ``l`` alone mixes positions, ``1 - Ã_l[i, i]`` (the share of
  the residual-mixed attention leaving the token), independent of the earlier layers:
  ``moved`` also shrinks with depth because the rolled-out rows are already spread out;

and keeps the full matrices of chosen sentences (``keep``) for tables and figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import torch

from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Batch
from attnlens.stream.head_patterns import HeadPatternAnalyzer
from attnlens.stream.per_sentence import sentence_ids_of

FUSIONS = ("mean", "max", "min")
LAYER_MEASURES = ("special_share", "self_share", "moved", "distance", "mixing")
ROLLOUT_COLUMNS = ("sentence", "layer", "query", "key", "query_token", "key_token", "value")


def check_rollout_options(residual: float, fusion: str) -> None:
    """Fail early on a residual weight outside [0, 1] or an unknown head fusion."""
    if not 0.0 <= residual <= 1.0:
        raise ConfigError(f"--residual must lie in [0, 1], not {residual}.")
    if fusion not in FUSIONS:
        raise ConfigError(f"unknown head fusion {fusion!r}; use one of {', '.join(FUSIONS)}.")


def fuse_heads(pattern: torch.Tensor, fusion: str = "mean") -> torch.Tensor:
    """``[..., head, query_pos, key_pos]`` -> ``[..., query_pos, key_pos]`` by mean, max or min."""
    if fusion == "mean":
        return pattern.mean(dim=-3)
    if fusion == "max":
        return pattern.amax(dim=-3)
    if fusion == "min":
        return pattern.amin(dim=-3)
    raise ConfigError(f"unknown head fusion {fusion!r}; use one of {', '.join(FUSIONS)}.")


def fuse_heads_double(pattern: torch.Tensor, fusion: str = "mean") -> torch.Tensor:
    """``fuse_heads(pattern.double(), fusion)`` without the float64 copy of every head: the
    mean accumulates in float64 as it reads (the same sums), max and min commute with the
    exact widening."""
    if fusion == "mean":
        return pattern.mean(dim=-3, dtype=torch.float64)
    return fuse_heads(pattern, fusion).double()


def residual_attention(
    fused: torch.Tensor, residual: float = 0.5, real: torch.Tensor | None = None
) -> torch.Tensor:
    """``Ã = r · A + (1 - r) · I`` with rows renormalised, for ``fused [..., query, key]``.

    ``real [..., pos]`` marks real tokens; rows of padded queries become identity rows.
    A row whose weights are all zero (possible only with ``r = 1`` and min fusion) stays zero.
    """
    n = fused.shape[-1]
    eye = torch.eye(n, dtype=fused.dtype, device=fused.device)
    mixed = residual * fused + (1.0 - residual) * eye  # [..., query_pos, key_pos]
    if real is not None:
        pad_rows = ~real.bool()[..., :, None]  # [..., query_pos, 1]
        mixed = torch.where(pad_rows, eye, mixed)
    total = mixed.sum(dim=-1, keepdim=True)
    return mixed / total.clamp_min(torch.finfo(mixed.dtype).tiny)


def rollout_matrices(
    patterns: torch.Tensor | Sequence[torch.Tensor],
    residual: float = 0.5,
    fusion: str = "mean",
) -> torch.Tensor:
    """Rollout of one sentence: ``patterns [layer, head, query_pos, key_pos]`` -> ``[layer,
    query_pos, key_pos]`` with ``R_l = Ã_l R_{l-1}`` (see the module docstring).

    ``patterns`` may also be a list of per-layer ``[head, query_pos, key_pos]`` tensors (their
    head counts may differ). Pass the real tokens only (no padding). Computed in float64.
    """
    check_rollout_options(residual, fusion)
    layers = list(patterns)
    if not layers:
        raise ConfigError("rollout needs at least one layer of attention patterns.")
    out = []
    rolled = None
    for pattern in layers:
        mixed = residual_attention(fuse_heads(pattern.double(), fusion), residual)
        rolled = mixed if rolled is None else mixed @ rolled  # [query_pos, key_pos]
        out.append(rolled)
    return torch.stack(out)  # [layer, query_pos, key_pos]


def token_vocabulary(tokenizer) -> list[str] | None:
    """Every token id's string (``vocab[id]``, as ``Tokenizer.decode_tokens`` gives it), read
    once, so an analyzer holds plain strings rather than the tokenizer's bound method.

    Read once per tokenizer (a report asks for the model's rollout and the null model's),
    again when the vocabulary's size changes; each caller gets its own list."""
    if tokenizer is None:
        return None
    size = len(tokenizer.hf)
    cached = getattr(tokenizer, "_token_vocabulary", None)
    if cached is None or cached[0] != size:
        cached = (size, tuple(tokenizer.decode_tokens(range(size))))
        tokenizer._token_vocabulary = cached
    return list(cached[1])


def token_strings(vocab: list[str] | None, ids: list[int]) -> list[str]:
    """The strings of ``ids`` from ``token_vocabulary``; the ids themselves without one."""
    if vocab is None:
        return [str(i) for i in ids]
    return [vocab[i] if 0 <= i < len(vocab) else str(i) for i in ids]


class RolloutAnalyzer(HeadPatternAnalyzer):
    """Streaming attention rollout: per-layer corpus shares plus the matrices of kept sentences.

    ``keep``: how many sentences to keep whole (those with corpus index below ``keep``;
    ``None`` keeps every sentence, for short inputs only). ``max_entries``: the most matrix
    entries (``layers x n^2``) one kept sentence may have; a longer one is not kept and its
    corpus index goes to ``skipped`` (None: no bound). It keeps the memory of kept matrices
    independent of depth and length. ``vocab`` (``token_vocabulary(tokenizer)``) holds each
    token id's string for the tables; it is not part of the state.
    """

    name = "rollout"
    state_fields = ("sums", "rows", "sentences", "kept", "skipped")

    def __init__(
        self,
        n_layers: int,
        residual: float = 0.5,
        fusion: str = "mean",
        keep: int | None = 0,
        vocab: list[str] | None = None,
        max_entries: int | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        check_rollout_options(residual, fusion)
        if keep is not None and keep < 0:
            raise ConfigError(f"keep must be at least 0, not {keep}.")
        self.n_layers, self.residual, self.fusion, self.keep = n_layers, residual, fusion, keep
        self.vocab, self.max_entries = vocab, max_entries
        self.sums = torch.zeros(len(LAYER_MEASURES), n_layers, dtype=torch.float64, device=device)
        self.rows = 0
        self.sentences = 0
        self.kept: list[dict[str, Any]] = []
        self.skipped: list[int] = []  # corpus indices to keep whose matrices exceed max_entries

    @classmethod
    def model_options(cls, model: HookedTransformer) -> dict:
        return {"n_layers": model.n_layers, "device": model.device}  # heads are fused

    @classmethod
    def for_model(cls, model: HookedTransformer, tokenizer=None, **options) -> RolloutAnalyzer:
        return super().for_model(model, vocab=token_vocabulary(tokenizer), **options)

    def settings(self) -> dict:
        return {"n_layers": self.n_layers, "residual": self.residual, "fusion": self.fusion,
                "keep": self.keep, "max_entries": self.max_entries}

    # Feeding --------------------------------------------------------------------------
    def begin_batch(self, batch: Batch) -> None:
        real = batch.attention_mask.bool()  # [batch, pos]
        self._real = real
        self._row_weight = real.double()  # [batch, query_pos]
        special = batch.special_mask if batch.special_mask is not None else torch.zeros_like(real)
        self._special = (special.bool() & real).double()  # [batch, key_pos]
        pos = torch.arange(real.shape[1], device=real.device)
        self._distance = (pos[:, None] - pos[None, :]).abs().double()  # [query_pos, key_pos]
        self._rolled = None  # R_{l-1} [batch, query_pos, key_pos]
        ids = sentence_ids_of(batch, self.sentences)
        self._keep_rows = [b for b, i in enumerate(ids) if self.keep is None or i < self.keep]
        if self.max_entries is not None:
            lengths = batch.lengths.tolist()
            fits = {b for b in self._keep_rows
                    if self.n_layers * int(lengths[b]) ** 2 <= self.max_entries}
            self.skipped += [ids[b] for b in self._keep_rows if b not in fits]
            self._keep_rows = [b for b in self._keep_rows if b in fits]
        # the kept rows as an index on the device, made once per batch (a Python list as an
        # index is copied to the device on every layer: a synchronisation)
        self._keep_index = torch.tensor(self._keep_rows, dtype=torch.long, device=real.device)
        self._kept_layers: list[torch.Tensor] = []
        self._ids = ids

    def update_layer(self, batch: Batch, layer: int, cache: ActivationCache) -> None:
        pattern = cache["pattern", layer]  # [batch, head, query_pos, key_pos]
        mixed = residual_attention(fuse_heads_double(pattern, self.fusion), self.residual,
                                   self._real)
        previous = self._rolled
        rolled = mixed if previous is None else mixed @ previous  # [batch, query_pos, key_pos]
        if previous is None:
            previous = torch.eye(rolled.shape[-1], dtype=rolled.dtype, device=rolled.device)
        per_row = torch.stack([
            (rolled @ self._special[..., None]).squeeze(-1),  # mass on special tokens
            rolled.diagonal(dim1=-2, dim2=-1),  # R_l[i, i]
            0.5 * (rolled - previous).abs().sum(-1),  # total variation to R_{l-1}
            (rolled * self._distance).sum(-1),
            1.0 - mixed.diagonal(dim1=-2, dim2=-1),  # block l's own mixing
        ])  # [measure, batch, query_pos]
        self.sums[:, layer] += (per_row * self._row_weight).sum(dim=(1, 2)).to(self.sums.device)
        self._rolled = rolled
        if self._keep_rows:
            self._kept_layers.append(rolled.index_select(0, self._keep_index))

    def end_batch(self, batch: Batch) -> None:
        self.rows += int(self._real.sum())
        self.sentences += batch.size
        if self._keep_rows:
            stacked = torch.stack(self._kept_layers, dim=1).cpu()  # [kept, layer, query, key]
            lengths = batch.lengths.tolist()
            for k, b in enumerate(self._keep_rows):
                n = int(lengths[b])
                positions = self._real[b].nonzero().flatten().cpu()  # real tokens, in order
                ids = batch.input_ids[b].cpu()[positions].tolist()
                matrices = stacked[k][:, positions][:, :, positions]  # [layer, n, n]
                tokens = token_strings(self.vocab, ids)
                self.kept.append({"sentence": self._ids[b], "tokens": tokens,
                                  "matrices": matrices.clone(), "length": n})
        self._rolled, self._kept_layers = None, []

    # Results --------------------------------------------------------------------------
    def kept_sentences(self) -> list[dict[str, Any]]:
        """Kept sentences in corpus order: ``sentence``, ``tokens``, ``matrices [layer, q, k]``."""
        return sorted(self.kept, key=lambda record: record["sentence"])

    def layer_table(self) -> pd.DataFrame:
        means = (self.sums / max(self.rows, 1)).cpu().numpy()
        return pd.DataFrame.from_records([
            {"layer": layer, "measure": measure, "value": float(means[m, layer])}
            for m, measure in enumerate(LAYER_MEASURES)
            for layer in range(self.n_layers)
        ])

    def result(self) -> dict[str, pd.DataFrame]:
        tables = {"rollout_layers": self.layer_table()}
        if self.kept:
            tables["rollout"] = matrices_table(self.kept_sentences())
        return tables


def matrices_table(
    records: Sequence[dict[str, Any]], extra_columns: Sequence[str] = ()
) -> pd.DataFrame:
    """Tidy ``sentence, layer, query, key, query_token, key_token, value`` rows of matrices
    (plus ``extra_columns``, each from ``record["extra_columns"][name]``)."""
    frames = []
    for record in records:
        matrices = record["matrices"]  # [layer, query_pos, key_pos]
        n_layers, n, _ = matrices.shape
        layer, query, key = torch.meshgrid(
            torch.arange(n_layers), torch.arange(n), torch.arange(n), indexing="ij"
        )
        tokens = pd.Series(record["tokens"], dtype=object)
        frame = pd.DataFrame({
            "sentence": record["sentence"],
            "layer": layer.flatten().numpy(),
            "query": query.flatten().numpy(),
            "key": key.flatten().numpy(),
        })
        frame["query_token"] = tokens.iloc[frame["query"]].to_numpy()
        frame["key_token"] = tokens.iloc[frame["key"]].to_numpy()
        frame["value"] = matrices.flatten().double().numpy()
        for name in extra_columns:
            frame[name] = record["extra_columns"][name].flatten().double().numpy()
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=[*ROLLOUT_COLUMNS, *extra_columns])
    return pd.concat(frames, ignore_index=True)
