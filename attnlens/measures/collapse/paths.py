"""Rank collapse along paths of attention heads (Dong et al. 2021, path decomposition).

A path of length ``k`` picks ``k`` distinct layers ``l_1 < ... < l_k`` (the skip connections
let a path pass over the other layers) and one head ``h_i`` in each. Its attention product,
per sentence and over real tokens only, is ``P = A[l_k, h_k] @ ... @ A[l_1, h_1]``
``[query_pos, key_pos]``: the token mixing that path applies to the embeddings. Its rank-1
residual is ``sqrt(sum_{i >= 2} s_i^2) / ||P||_F`` with ``s_1 >= s_2 >= ...`` the singular
values: the relative Frobenius distance from ``P`` to its best rank-1 approximation.

Paths are sampled uniformly (layers as a uniform k-subset of the layers that have heads, then
one uniform head per chosen layer) with a fixed seed, so every sentence sees the same paths
and two analyzers built alike can be merged.

Memory: the products need the used heads of every layer of a sentence at once, which grows
with depth and with the square of the length. ``PathCollapse`` therefore holds at most
``max_elements`` pattern entries per batch (``PATH_MAX_ELEMENTS``, 128 MiB in float32): of a
batch's sampled sentences it keeps as many as fit, and a sentence too long to fit even alone
is skipped and counted (``skipped``), so memory stays bounded whatever the depth and length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.measures.collapse.residual import summarize
from attnlens.model.head_ids import head_ids_of, original_head
from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Analyzer, Batch
from attnlens.stream.sentence_sample import check_sample_options, sample_rows, sampled_rows

# Pattern entries a PathCollapse holds per batch (the used heads of every layer of the kept
# sentences); the float64 products are formed in chunks of paths of 1/16 of it.
PATH_MAX_ELEMENTS = 2**25


@dataclass(frozen=True)
class HeadPath:
    """One head per layer: ``heads[i]`` in layer ``layers[i]``, layers increasing."""

    layers: tuple[int, ...]
    heads: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.layers)

    def label(self, head_ids: list[list[int]] | None = None) -> str:
        """``L0H3 > L2H1``: heads by their original numbers (``head_ids`` of a pruned model)."""
        pairs = zip(self.layers, self.heads, strict=True)
        return " > ".join(f"L{layer}H{original_head(head_ids, layer, head)}"
                          for layer, head in pairs)


def count_paths(heads_per_layer: list[int], length: int) -> int:
    """Number of distinct paths of ``length`` (sum over layer subsets of the head products)."""
    # Elementary symmetric polynomial e_length(heads_per_layer), by dynamic programming.
    e = [1] + [0] * length
    for n in heads_per_layer:
        for k in range(length, 0, -1):
            e[k] += e[k - 1] * n
    return e[length]


def sample_paths(
    heads_per_layer: list[int], n_paths: int, seed: int = 0
) -> dict[int, list[HeadPath]]:
    """Up to ``n_paths`` distinct paths per length 1..(layers with heads), with a fixed seed.

    When fewer than ``n_paths`` paths of a length exist, all of them are returned.
    """
    if n_paths < 1:
        raise ConfigError(f"paths per length must be at least 1, not {n_paths}.")
    layers = [layer for layer, n in enumerate(heads_per_layer) if n > 0]
    rng = np.random.default_rng(seed)
    paths: dict[int, list[HeadPath]] = {}
    for length in range(1, len(layers) + 1):
        wanted = min(n_paths, count_paths(heads_per_layer, length))
        chosen: dict[HeadPath, None] = {}
        while len(chosen) < wanted:
            picked = sorted(rng.choice(layers, size=length, replace=False).tolist())
            heads = tuple(int(rng.integers(heads_per_layer[layer])) for layer in picked)
            chosen.setdefault(HeadPath(tuple(picked), heads), None)
        paths[length] = list(chosen)
    return paths


def rank1_residual(matrices: torch.Tensor) -> torch.Tensor:
    """``sqrt(sum_{i>=2} s_i^2) / ||M||_F`` of each ``[..., rows, cols]`` matrix -> ``[...]``.

    Zero rows and columns (padding) change no singular value but add zeros, so they are exact.
    The solver always runs on the CPU (LAPACK, one call for the batch): on a GPU, cuSOLVER
    took path collapse to 4.0 s of a 7.8 s corpus pass (NVIDIA H200, 2026-11-27), 0.46 s
    with this (0.4 s for the whole analyzer on two CPU cores), and the solver is the CPU run's (the
    products themselves still come from the device's float64 kernels). The residuals go back
    to the matrices' device (``[...]``, small).
    """
    s = torch.linalg.svdvals(matrices.double().cpu())  # [..., min(rows, cols)], descending
    total = s.pow(2).sum(-1)
    residual = torch.sqrt(s[..., 1:].pow(2).sum(-1) / total.clamp_min(torch.finfo(s.dtype).tiny))
    return residual.to(matrices.device)


def real_patterns(
    patterns: dict[int, torch.Tensor], mask: torch.Tensor | None
) -> dict[int, torch.Tensor]:
    """``patterns[layer] [batch, head, query_pos, key_pos]`` with padded rows and columns set to
    0 (``mask [batch, pos]``, 1 = real), as ``[head, batch, query_pos, key_pos]`` views.

    A real query gives padded keys zero weight, so the real block of a product of such
    matrices is the product of their real blocks. The dtype is kept (multiplying by 0 or 1 is
    exact); ``path_products`` converts to float64 one step at a time.
    """
    out = {}
    for layer, pattern in patterns.items():
        a = pattern
        if mask is not None:
            keep = mask.to(device=a.device, dtype=a.dtype)
            a = a * keep[:, None, :, None] * keep[:, None, None, :]
        out[layer] = a.transpose(0, 1)  # [head, batch, query_pos, key_pos]
    return out


def path_products(patterns: dict, paths: list[HeadPath]) -> torch.Tensor:
    """Attention products ``A[l_k, h_k] @ ... @ A[l_1, h_1]`` of equally long ``paths``.

    ``patterns[layer][head]`` is ``[batch, query_pos, key_pos]`` with padding zeroed (a
    ``real_patterns`` tensor, or a dict of the heads the paths use); returns
    ``[path, batch, query_pos, key_pos]`` (float64).
    """
    length = len(paths[0])
    product = None
    for step in range(length):
        a = torch.stack(
            [patterns[p.layers[step]][p.heads[step]] for p in paths]
        ).double()  # [path, batch, query_pos, key_pos]
        product = a if product is None else a @ product
    return product


def _in_one_copy(tensors: dict, device: torch.device) -> dict:
    """The 1-D tensors of ``tensors`` (one dtype) on ``device``, as views of one buffer: one
    host-to-device copy for them all (a copy each waits for a GPU once per key: per path
    length or layer)."""
    if not tensors:
        return {}
    flat = torch.cat(list(tensors.values())).to(device)
    return dict(zip(tensors, flat.split([len(t) for t in tensors.values()]), strict=True))


class PathCollapse(Analyzer):
    """Rank-1 residual of sampled head paths' attention products, against path length.

    Layerwise: each layer's patterns are cut down to the sampled sentences and the heads some
    path uses as soon as the layer is produced; the products are formed at the end of the
    batch, in chunks of paths. At most ``max_elements`` pattern entries are held per batch
    (module docstring); sentences too long for that are skipped and counted. State per
    length: each path's running sum over sentences (float64, keyed by the length as text),
    the sentence count and the skipped count, so a merge adds. ``result`` gives
    ``path_collapse`` (per length: mean, geo_mean, min, q10, q90, max over the sampled paths
    of each path's mean over sentences) and ``path_samples`` (one row per path).
    """

    name = "path_collapse"
    # a sample by corpus index: each torchrun rank reads its share, merged in rank order
    distributed = "shard"
    layerwise = True
    state_fields = ("sums", "sentences", "skipped")

    def __init__(
        self,
        heads_per_layer: list[int],
        n_paths: int = 32,
        seed: int = 0,
        per_batch: int | None = None,
        max_sentences: int | None = None,
        max_elements: int = PATH_MAX_ELEMENTS,
        head_ids: list[list[int]] | None = None,
    ) -> None:
        check_sample_options(per_batch, max_sentences)
        self.heads_per_layer = list(heads_per_layer)
        self.head_ids = head_ids  # original head numbers for the labels (pruned models)
        self.max_elements = max_elements
        self.n_paths, self.seed = n_paths, seed
        # Cost bounds: max_sentences evenly spaced by corpus index (stream.sentence_sample),
        # at most per_batch of them per batch (a bound that depends on the batching).
        self.per_batch, self.max_sentences = per_batch, max_sentences
        self.paths = sample_paths(self.heads_per_layer, n_paths, seed)
        self.heads_used: dict[int, list[int]] = {}
        for paths in self.paths.values():
            for path in paths:
                for layer, head in zip(path.layers, path.heads, strict=True):
                    self.heads_used.setdefault(layer, []).append(head)
        self.heads_used = {k: sorted(set(v)) for k, v in sorted(self.heads_used.items())}
        self.sums = {str(k): torch.zeros(len(p), dtype=torch.float64)
                     for k, p in self.paths.items()}
        self.sentences = 0
        self.skipped = 0  # sampled sentences too long for max_elements
        self._seen = 0  # sentences fed, sampled or not (indices of batches without any)
        self._rows: torch.Tensor | None = None  # per-batch scratch: sampled sentences
        self._patterns: dict[int, dict[int, torch.Tensor]] = {}
        self._head_index: dict[int, torch.Tensor] = {}  # heads_used as index tensors

    @classmethod
    def for_model(
        cls, model: HookedTransformer, n_paths: int = 32, seed: int = 0, **bounds
    ) -> PathCollapse:
        analyzer = cls(model.heads_per_layer, n_paths, seed, head_ids=head_ids_of(model),
                       **bounds)
        analyzer.identify_model(model)
        return analyzer

    def settings(self) -> dict:
        return {"heads_per_layer": self.heads_per_layer, "n_paths": self.n_paths,
                "seed": self.seed, "per_batch": self.per_batch,
                "max_sentences": self.max_sentences, "max_elements": self.max_elements}

    @property
    def layers(self) -> list[int]:
        """Layers that some sampled path passes through."""
        return list(self.heads_used)

    def hook_names(self, model: HookedTransformer) -> list[str]:
        return [f"blocks.{layer}.attn.hook_pattern" for layer in self.layers]

    def begin_batch(self, batch: Batch) -> None:
        device = batch.attention_mask.device
        first = next(iter(self.sums.values()), None)
        if first is not None and first.device != device:  # one copy for every length's sums
            self.sums = _in_one_copy(self.sums, device)
        self.move_state(device)  # the rest of the state (a no-op where it is)
        seen, self._seen = self._seen, self._seen + batch.size
        rows = sampled_rows(batch, self.per_batch, self.max_sentences, seen)
        if rows is None:
            rows = torch.arange(batch.size)
        # Memory bound: every used head of every layer, [n, n] per kept sentence.
        n = batch.attention_mask.shape[-1]
        per_sentence = sum(len(h) for h in self.heads_used.values()) * n * n
        fit = self.max_elements // max(per_sentence, 1)
        if fit < len(rows):
            if fit == 0:
                self.skipped += len(rows)
            rows = rows[sample_rows(len(rows), fit)]
        self._rows = rows.to(device)
        self._patterns = {}
        built_on = next(iter(self._head_index.values())).device if self._head_index else None
        if built_on != device:  # index tensors on the batch's device: no copy in update_layer
            self._head_index = _in_one_copy(
                {layer: torch.tensor(heads) for layer, heads in self.heads_used.items()}, device)

    def update_layer(self, batch: Batch, layer: int, cache: ActivationCache) -> None:
        if self._rows is None or len(self._rows) == 0:
            return
        heads = self.heads_used[layer]
        mask = batch.attention_mask[self._rows]
        kept = cache["pattern", layer][self._rows][:, self._head_index[layer]]
        # kept [rows, used head, query_pos, key_pos]
        real = real_patterns({layer: kept}, mask)[layer]  # [used head, rows, query, key]
        self._patterns[layer] = {head: real[i] for i, head in enumerate(heads)}

    def end_batch(self, batch: Batch) -> None:
        if self._rows is not None and len(self._rows):
            n = batch.attention_mask.shape[-1]
            # float64 products of a chunk of paths, [chunk, rows, n, n] of at most
            # max_elements / 16 entries: small blocks that the allocator reuses from one
            # length to the next (larger ones left the peak growing with the path length)
            chunk = max(1, self.max_elements // (16 * len(self._rows) * n * n))
            residual = torch.cat(self._residuals(chunk))  # [path of every length, rows]
            lengths = [str(length) for length in self.paths]
            sizes = [len(paths) for paths in self.paths.values()]
            for length, part in zip(lengths, residual.split(sizes), strict=True):
                self.sums[length] += part.sum(dim=1)
            self.sentences += len(self._rows)
        self._rows, self._patterns = None, {}

    def _residuals(self, chunk: int) -> list[torch.Tensor]:
        """Rank-1 residuals ``[path, rows]`` of every path, length by length, in chunks of
        at most ``chunk`` products: the chunks are filled across lengths, so the
        singular-value solver runs once per chunk, not once per length (on a GPU each run
        waits for the device: a wait per layer of depth otherwise)."""
        out: list[torch.Tensor] = []
        pending: list[torch.Tensor] = []  # products [path, rows, n, n] of one chunk
        room = chunk
        for paths in self.paths.values():
            start = 0
            while start < len(paths):
                take = min(room, len(paths) - start)
                pending.append(path_products(self._patterns, paths[start:start + take]))
                start, room = start + take, room - take
                if room == 0:
                    out.append(rank1_residual(torch.cat(pending)))
                    pending, room = [], chunk
        if pending:
            out.append(rank1_residual(torch.cat(pending)))
        return out

    def result(self) -> dict[str, pd.DataFrame]:
        curve, samples = [], []
        if self.sentences:
            for length, paths in self.paths.items():
                means = (self.sums[str(length)].cpu() / self.sentences).numpy()
                curve.append({"path_length": length, **summarize(means)})
                samples += [
                    {"path_length": length, "path": p.label(self.head_ids),
                     "residual": float(m)}
                    for p, m in zip(paths, means, strict=True)
                ]
        # Named columns even when empty (every sentence skipped): the CSV stays readable.
        summary = ["path_length", "mean", "geo_mean", "min", "q10", "q90", "max", "n"]
        return {
            "path_collapse": pd.DataFrame.from_records(curve, columns=summary),
            "path_samples": pd.DataFrame.from_records(
                samples, columns=["path_length", "path", "residual"]),
        }
