"""Sparse-pattern coverage: how much of each head's attention a sparse pattern would keep.

Sparse transformers attend to a fixed subset of keys per query: a local window (Longformer,
Beltagy et al. 2020), a few global tokens, and in BigBird (Zaheer et al. 2020) also a few
random keys. For every head, over the real query rows of a corpus (special tokens included):

- ``mass``: mean share of a row's attention inside the sparse set ``S_i`` of query ``i``:
  ``window`` ``|i - j| <= w`` (``w`` in ``windows``), ``global`` (special tokens plus the
  first ``n_global`` positions), ``window+global`` (their union), ``bigbird`` (window of 3
  keys ``|i - j| <= 1``, 2 global tokens: special tokens plus the first 2 positions, and 3
  random other visible keys per row, seeded), and
  ``random``: what ``|S_i|`` uniformly random visible keys keep, i.e. its exact expectation
  ``|S_i| / n_i`` (``n_i`` visible keys: ``n`` in encoders, ``i + 1`` in causal models),
  with ``|S_i|`` the size of the BigBird set;
- ``output_error``: ``||(P - P_S) V||_F / ||P V||_F`` per sentence and head (real query rows;
  ``P_S`` is ``P`` restricted to ``S`` with rows renormalised; ``V`` the layer's values,
  query head ``h`` reading key/value head ``h // group``), averaged over sentences;
- per head: ``window90``, the smallest ``w`` of ``windows`` whose window keeps 90 %
  (``coverage``) of the mass on average (NaN: none does), ``window90_exact``, the smallest
  integer window that does (from the mass at each distance, NaN beyond ``max_distance``),
  ``window90_global`` the same with the global tokens added, and the mass and output error
  at ``window90``.

The random keys of BigBird come from an integer hash of ``(seed, sentence index, query,
key)``: the same on every device and for any batching, so merged partial runs equal one run.
They are drawn once per sentence and query row and shared by every layer and head (BigBird
draws per head; the mean mass kept is the same in expectation). Every set is evaluated from
gathered columns plus one ``n x n`` product per window, so the cost stays a few times that
of the attention itself. On the CPU, whole patterns in float32 go to a C kernel instead
(``_sparse_kernel.c``, built by setup.py where a compiler is present): one walk over each
real row's keys in order of distance gives every set's mass, product and output error, each
sum in float64 (the torch path, kept for GPUs, query blocks and as the float64 reference,
rounds to float32 between operations: the two agree to float32 rounding).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.measures.linear.linear_attention import per_query_head
from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Batch, PatternBlock
from attnlens.stream.head_patterns import HeadPatternAnalyzer
from attnlens.stream.held_layers import HeldLayers, add_to_layers
from attnlens.stream.per_sentence import sentence_ids_of
from attnlens.stream.sentence_sample import check_sample_options, sample_batch
from attnlens.stream.threads import run_split

try:  # the C kernel (setup.py builds it where a compiler is present)
    from attnlens.measures.sparse import _sparse_kernel
except ImportError:  # pragma: no cover - the torch path then runs everywhere
    _sparse_kernel = None

WINDOWS = (1, 2, 4, 8, 16)
BIGBIRD = {"window": 1, "n_global": 2, "n_random": 3}  # window 1 each side = 3 keys
MAX_DISTANCE = 128
MAX_WINDOWS = 64  # the most windows the C kernel takes (its MAX_WINDOWS); more: torch
# Pattern entries of one chunk of heads in ``_fold_rows`` on the CPU: its ~40 passes (masks,
# products, differences, norms) then run on about 1 MiB, within the core's L2 cache (2 MiB on
# the project's machine), instead of streaming several MiB through memory each time
# (sparse32: 1.3-1.5x at one thread; 2^17 measured the same, 2^19 1.25x).
CHUNK_ELEMENTS = 2**18
PATTERNS = ("window", "window+global", "global", "bigbird", "random")


def hash_scores(seed: int, sentences: torch.Tensor, n: int,
                queries: torch.Tensor | None = None) -> torch.Tensor:
    """Pseudo-random integers ``[batch, query_pos, key_pos]`` in ``[0, 2**32)`` from
    ``(seed, sentence index, query, key)`` (exact integer arithmetic on any device);
    ``queries`` (default ``0 .. n-1``) picks the query rows."""
    device = sentences.device

    def mix(x: torch.Tensor) -> torch.Tensor:  # x < 2**32; products < 2**59 fit int64
        x = ((x >> 16) ^ x) * 0x45D9F3B % 2**32
        x = ((x >> 16) ^ x) * 0x45D9F3B % 2**32
        return (x >> 16) ^ x

    pos = torch.arange(n, device=device, dtype=torch.int64)
    rows = pos if queries is None else queries.to(torch.int64)
    x = mix(torch.full((), seed % 2**32, dtype=torch.int64, device=device))
    x = mix(x ^ (sentences.to(torch.int64) % 2**32))[:, None, None]  # [batch, 1, 1]
    x = mix(x ^ rows[None, :, None])  # [batch, query_pos, 1]
    return mix(x ^ pos[None, None, :])  # [batch, query_pos, key_pos]


def restricted_output_error(
    pattern: torch.Tensor,
    keep: torch.Tensor,
    values: torch.Tensor,
    rows: torch.Tensor,
) -> torch.Tensor:
    """``||(P - P_S) V||_F / ||P V||_F`` per sentence and head: ``[batch, head]``.

    ``pattern [batch, head, query_pos, key_pos]``; ``keep`` (broadcastable to it) is the
    sparse set; ``values [batch, head, key_pos, d_head_v]``; ``rows [batch, query_pos]`` the
    real query rows. ``P_S`` is ``P`` on ``S`` with rows renormalised. (The analyzer computes
    the same quantity from gathered columns; this is the plain definition.)
    """
    kept = pattern * keep
    return relative_row_error(pattern @ values, kept @ values, kept.sum(-1), rows)


def relative_row_error(
    full: torch.Tensor,
    kept_product: torch.Tensor,
    kept_mass: torch.Tensor,
    rows: torch.Tensor,
    full_norm: torch.Tensor | None = None,
) -> torch.Tensor:
    """``||full - kept_product / kept_mass||_F / ||full||_F`` over real rows, ``[batch, head]``.

    ``full = P V`` and ``kept_product = (P ⊙ S) V`` are ``[batch, head, query_pos, d_head_v]``;
    ``kept_mass [batch, head, query_pos]`` the row sums of ``P ⊙ S``; ``full_norm`` the
    denominator when already computed (``output_norm``).
    """
    tiny = torch.finfo(full.dtype).tiny
    weight = rows[:, None, :, None].to(full.dtype)  # [batch, 1, query_pos, 1]
    approx = kept_product / kept_mass.clamp_min(tiny)[..., None]
    diff = torch.linalg.vector_norm((full - approx) * weight, dim=(-2, -1))
    if full_norm is None:
        full_norm = output_norm(full, rows)
    return diff / full_norm.clamp_min(tiny)


def squared_row_error(
    full: torch.Tensor, kept_product: torch.Tensor, kept_mass: torch.Tensor,
    weight: torch.Tensor,
) -> torch.Tensor:
    """``||(full - kept_product / kept_mass) * weight||_F^2`` per sentence and head:
    ``[batch, head]`` (a query block's share of ``relative_row_error``'s numerator, squared;
    ``weight [batch, 1, rows, 1]`` is 1 on real query rows)."""
    diff = _minus_ratio(full, kept_product, kept_mass) * weight
    return (diff * diff).sum(dim=(-2, -1))  # x * x: square's own arithmetic, without pow


def _minus_ratio(full: torch.Tensor, kept_product: torch.Tensor, kept_mass: torch.Tensor
                 ) -> torch.Tensor:
    """``full - kept_product / kept_mass`` (the mass clamped to the smallest normal) in one
    pass: ``addcdiv`` forms ``full + (-kept_product) / mass``, the same rounded numbers."""
    mass = kept_mass.clamp_min(torch.finfo(full.dtype).tiny)[..., None]
    return torch.addcdiv(full, kept_product, mass, value=-1)


def _norm(x: torch.Tensor) -> torch.Tensor:
    """``||x||_F`` over the last two axes in one float32 pass: ``[...]``."""
    return torch.linalg.vector_norm(x, dim=(-2, -1))


def _error_norm(full: torch.Tensor, kept_product: torch.Tensor, kept_mass: torch.Tensor
                ) -> torch.Tensor:
    """``||full - kept_product / kept_mass||_F`` per sentence and head, ``[batch, head]``,
    where the padded query rows of all three are already 0 (their difference is then 0,
    ``0 - 0 / tiny``, as the row weight would make it)."""
    return _norm(_minus_ratio(full, kept_product, kept_mass))


def output_norm(full: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``||P V||_F`` over the real query rows: ``[batch, head]``."""
    return torch.linalg.vector_norm(full * rows[:, None, :, None].to(full.dtype), dim=(-2, -1))


def _columns(mask: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The marked keys of ``mask [batch, key_pos]`` as a few columns: (``select [batch,
    key_pos, c]`` one-hot float, ``valid [batch, c]``, ``|query - key| [batch, query_pos, c]``),
    ``c`` the most marked keys of a sentence (one host sync per batch)."""
    c = int(mask.sum(1).max()) if mask.numel() else 0
    order = torch.sort((~mask).to(torch.int8), dim=1, stable=True).indices[:, :c]  # [batch, c]
    valid = mask.gather(1, order)
    pos = torch.arange(n, device=mask.device)
    select = (pos[None, :, None] == order[:, None, :]).float()  # [batch, key_pos, c]
    distance = (pos[None, :, None] - order[:, None, :]).abs()  # [batch, query_pos, c]
    return select, valid, distance


class SparseCoverage(HeadPatternAnalyzer):
    """Streaming sparse-pattern coverage per head (see the module docstring).

    Reads query blocks: every set is a set of keys per query row, so masses and histograms
    add over blocks, and each output error adds its blocks' squared row errors and squared
    output norms per sentence before the ratio is taken at the end of the layer.
    """

    name = "sparse"
    # a sample by corpus index: each torchrun rank reads its share, merged in rank order
    distributed = "shard"
    hook_kinds = ("v", "pattern")
    reads_blocks = True
    state_fields = ("by_distance", "nonglobal_by_distance", "masses", "errors", "rows",
                    "sentences")
    # the precision of the per-sentence arithmetic (float64: a reference for the tests)
    compute_dtype = torch.float32

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        causal: bool = False,
        windows: tuple[int, ...] = WINDOWS,
        n_global: int = 2,
        coverage: float = 0.9,
        seed: int = 0,
        max_distance: int = MAX_DISTANCE,
        per_batch: int | None = None,
        max_sentences: int | None = None,
        device: torch.device | str = "cpu",
        heads_per_layer: list[int] | None = None,
    ) -> None:
        check_sample_options(per_batch, max_sentences)
        self.per_batch, self.max_sentences = per_batch, max_sentences
        # heads each layer really has (structurally pruned models): only those are listed
        self.set_heads(heads_per_layer, n_layers, n_heads)
        windows = tuple(sorted(set(int(w) for w in windows)))
        if not windows or windows[0] < 0:
            raise ConfigError("windows must be non-negative integers, e.g. 1,2,4,8,16.")
        if n_global < 0:
            raise ConfigError(f"the number of global tokens must be at least 0, not {n_global}.")
        if not 0.0 < coverage <= 1.0:
            raise ConfigError(f"coverage must lie in (0, 1], not {coverage}.")
        self.causal = causal
        self.windows, self.n_global, self.coverage, self.seed = windows, n_global, coverage, seed
        self.max_distance = max(max_distance, windows[-1])
        shape = (n_layers, n_heads)
        kwargs = {"dtype": torch.float64, "device": device}
        # mass at distance d = |i - j| summed over rows; the last bucket holds d > max_distance
        self.by_distance = torch.zeros(*shape, self.max_distance + 2, **kwargs)
        self.nonglobal_by_distance = torch.zeros(*shape, self.max_distance + 2, **kwargs)
        self.masses = torch.zeros(*shape, 3, **kwargs)  # global, bigbird, random (row sums)
        # output errors summed over sentences: [window | window+global], then global, bigbird
        self.errors = torch.zeros(*shape, 2 * len(windows) + 2, **kwargs)
        self.rows = 0
        self.sentences = 0
        self._seen = 0  # sentences fed, sampled or not (indices of batches without any)
        self._held = HeldLayers()
        self._squared = self._norms = None
        self._windows_i32 = np.array(windows, dtype=np.int32)

    @classmethod
    def model_options(cls, model: HookedTransformer) -> dict:
        return {**cls.head_shape(model), "causal": model.cfg.causal, "device": model.device}

    def settings(self) -> dict:
        return {"n_layers": self.n_layers, "n_heads": self.n_heads, "causal": self.causal,
                "windows": list(self.windows), "n_global": self.n_global,
                "coverage": self.coverage, "seed": self.seed, "max_distance": self.max_distance,
                "per_batch": self.per_batch, "max_sentences": self.max_sentences,
                "heads_per_layer": self.heads_per_layer}

    # Feeding --------------------------------------------------------------------------
    def begin_batch(self, batch: Batch) -> None:
        self.move_state(batch.attention_mask.device)  # built for another device: follow the data
        seen, self._seen = self._seen, self._seen + batch.size
        batch, self._rows = sample_batch(batch, self.per_batch, self.max_sentences, seen)
        self._skip = batch.size == 0
        if self._skip:
            return
        real = batch.attention_mask.bool()  # [batch, pos]
        # the sample's sentences of the fed batch (host), as the C kernel reads them in place
        self._picked = (torch.arange(batch.size) if self._rows is None
                        else self._rows).numpy()  # [batch] int64
        if self._rows is not None:  # the sample's index on the device, moved once per batch
            self._rows = self._rows.to(real.device)
        n = real.shape[1]
        pos = torch.arange(n, device=real.device)
        special = (batch.special_mask.bool() if batch.special_mask is not None
                   else torch.zeros_like(real))
        is_global = (special | (pos < self.n_global)[None, :]) & real  # [batch, key_pos]
        self._real, self._special = real, special
        self._global = is_global[:, None, :]  # [batch, 1, key_pos]
        self._global_cols = _columns(is_global, n)
        self._ids = torch.tensor(sentence_ids_of(batch, self.sentences), device=real.device)
        self._bigbird_whole = None  # the whole matrix's BigBird set, shared by every layer
        self._kernel_inputs = None  # the C kernel's view of the sets, shared likewise
        self.rows += int(real.sum())
        self.sentences += batch.size

    def _bigbird_sets(self, block: PatternBlock) -> tuple[torch.Tensor, torch.Tensor]:
        """BigBird's set for the block's query rows as a mask ``[batch, 1, rows, key_pos]``:
        window, global tokens and seeded random keys (one draw per sentence and query row,
        shared by every layer and head), and the sum over those real rows of the random
        baseline ``|S_i| / n_i``. The whole matrix's set is kept for the batch's layers."""
        if block.is_whole and self._bigbird_whole is not None:
            return self._bigbird_whole
        real = self._real
        n = real.shape[1]
        pos = torch.arange(n, device=real.device)
        query_real = block.query_rows(real)  # [batch, rows]
        visible = real[:, None, :] & query_real[:, :, None]  # [batch, rows, key_pos]
        if self.causal:
            visible = visible & (pos[None, :] <= block.positions[:, None])
        distance = block.distance  # [rows, key_pos]
        bb_global = (self._special | (pos < BIGBIRD["n_global"])[None, :]) & real
        fixed = visible & ((distance <= BIGBIRD["window"]) | bb_global[:, None, :])
        eligible = visible & ~fixed  # [batch, rows, key_pos]
        hashes = hash_scores(self.seed, self._ids, n, block.positions)
        scores = torch.where(eligible, hashes, -1)
        top = scores.topk(min(BIGBIRD["n_random"], n), dim=-1)  # largest hashes among eligible
        chosen = torch.zeros_like(fixed).scatter_(-1, top.indices, top.values >= 0)
        keep = fixed | chosen
        share = keep.sum(-1) / visible.sum(-1).clamp_min(1)  # [batch, rows]: |S_i| / n_i
        sets = (keep[:, None].float(), (share * query_real).double().sum())
        if block.is_whole:
            self._bigbird_whole = sets
        return sets

    def update_block(self, batch: Batch, layer: int, block: PatternBlock,
                     cache: ActivationCache) -> None:
        if self._skip:
            return
        # [batch, head, rows, key_pos] and [batch, key_pos, kv_head, d_head_v]
        pattern, values = block.pattern, cache["v", layer]
        if not (block.is_whole and self._uses_kernel(pattern)):  # (the kernel reads the
            pattern, values = self._take(pattern), self._take(values)  # sample in place)
        if block.is_whole:  # held, then folded several layers at a time (``_fold_held``)
            self._whole = block
            if self._held.add(layer, pattern, values):
                self._fold_held()
            return
        n_heads = pattern.shape[1]
        if block.start == 0:  # per sentence and head: squared errors and norms of the layer
            self._squared = torch.zeros(pattern.shape[0], n_heads, 2 * len(self.windows) + 2,
                                        dtype=torch.float64, device=pattern.device)
            self._norms = torch.zeros(pattern.shape[0], n_heads, dtype=torch.float64,
                                      device=pattern.device)
        dtype = self.compute_dtype
        squared, norms = self._fold_rows([layer], pattern.to(dtype), values.to(dtype), block)
        self._squared += squared
        self._norms += norms

    def end_layer(self, batch: Batch, layer: int) -> None:
        if self._skip or self._squared is None:
            return
        self._add_errors([layer], self._squared, self._norms)
        self._squared = self._norms = None

    def end_batch(self, batch: Batch) -> None:
        if not self._skip:
            self._fold_held()

    def _fold_held(self) -> None:
        if self._held and self._uses_kernel(self._held.tensors[0][0]):
            self._kernel_fold_held()
            return
        # pattern [batch, head, query_pos, key_pos], values [batch, key_pos, kv_head, d]:
        # the held layers' heads side by side, layer-major (layer * n_heads + head)
        for layers, (pattern, values) in self._held.take(dims=(1, 2)):
            squared, norms = self._fold_rows(layers, pattern.to(self.compute_dtype),
                                             values.to(self.compute_dtype), self._whole)
            self._add_errors(layers, squared, norms)

    def _kernel_fold_held(self) -> None:
        """The held layers by the C kernel, one call per layer on its tensors where they lie
        (no concatenation, the sample not copied out), the calls back to back (a large torch
        operation between two calls leaves its threads spinning beside the kernel's), then
        each layer's results added as a layer's own call added them."""
        block = self._whole
        folded = [(layer, pattern.shape[1], self._kernel_fold(pattern, values, block))
                  for layers, held in self._held.take_apart()
                  for layer, (pattern, values) in zip(layers, held, strict=True)]
        baseline = self._bigbird_sets(block)[1]
        for layer, n_heads, (squared, norms, by_distance, nonglobal, masses) in folded:
            self._add_sums([layer], n_heads, by_distance, nonglobal, masses, baseline)
            self._add_errors([layer], squared, norms)

    def _add_errors(self, layers: list[int], squared: torch.Tensor, norms: torch.Tensor
                    ) -> None:
        """Each sentence's output errors from its squared errors ``[batch, layer * head,
        set]`` and squared norms ``[batch, layer * head]``, summed over sentences."""
        tiny = torch.finfo(torch.float32).tiny
        norm = norms.sqrt().clamp_min(tiny)[..., None]  # [batch, head, 1]
        errors = (squared.sqrt() / norm).sum(0)  # [layer * head, set]
        self._add(self.errors, layers, errors)

    def _add(self, target: torch.Tensor, layers: list[int], x: torch.Tensor) -> None:
        """``target[layer, :heads] += x`` for ``x [layer * head, ...]`` (layer-major)."""
        add_to_layers(target, layers, x.unflatten(0, (len(layers), -1)))

    def _fold_rows(self, layers: list[int], pattern: torch.Tensor, values_kv: torch.Tensor,
                   block: PatternBlock) -> tuple[torch.Tensor, torch.Tensor]:
        """Fold the block's rows of ``layers`` (``pattern [batch, layer * head, rows,
        key_pos]``, ``values_kv [batch, key_pos, layer * kv_head, d_head_v]``) into the
        histograms and masses; return their squared output errors ``[batch, layer * head,
        set]`` and squared output norms ``[batch, layer * head]`` (float64).

        The heads go by chunks of about ``CHUNK_ELEMENTS`` pattern entries (``_fold_heads``),
        so that the dozens of passes over each stay in the core's cache; every result is per
        sentence and head, so the chunks change no mass (the output errors' batched float32
        products may round otherwise for another number of heads on some CPUs)."""
        n_heads = pattern.shape[1]
        # values: [batch, head, key_pos, d_head_v] (a view; each chunk made contiguous once)
        values = per_query_head(values_kv, n_heads)
        sets = self._fold_sets(block)
        step = max(1, CHUNK_ELEMENTS // max(1, pattern[:, :1].numel()))
        if pattern.device.type != "cpu":  # a GPU's kernels want the whole tensor at once
            step = n_heads
        parts = [self._fold_heads(pattern[:, i : i + step], values[:, i : i + step].contiguous(),
                                  block, sets)
                 for i in range(0, n_heads, step)]
        squared, norms, by_distance, nonglobal, masses = (
            found[0] if len(parts) == 1 else torch.cat(found, dim=1)
            for found in zip(*parts, strict=True))
        self._add_sums(layers, n_heads, by_distance, nonglobal, masses, sets["baseline"])
        return squared, norms

    def _add_sums(self, layers: list[int], n_heads: int, by_distance: torch.Tensor,
                  nonglobal: torch.Tensor, masses: torch.Tensor, baseline: torch.Tensor
                  ) -> None:
        """Add a fold's per-sentence masses (``[batch, layer * head, ...]``) to the state:
        per sentence as the fold computed them, then over sentences in float64 (so a merged
        split run adds the same per-sentence terms as one run); and the random baseline's
        sum over the block's rows to each layer's heads."""
        for target, found in ((self.by_distance, by_distance),
                              (self.nonglobal_by_distance, nonglobal),
                              (self.masses[..., :2], masses)):
            self._add(target, layers, found.double().sum(0))
        for layer in layers:
            self.masses[layer, : n_heads // len(layers), 2] += baseline.to(self.masses.device)

    def _uses_kernel(self, pattern: torch.Tensor) -> bool:
        """Whether the C kernel folds this pattern: built, a CPU pattern, float32 arithmetic
        (``compute_dtype``; float64 is the tests' reference and takes the torch path)."""
        return (_sparse_kernel is not None and pattern.device.type == "cpu"
                and self.compute_dtype == torch.float32 and len(self.windows) <= MAX_WINDOWS)

    def _kernel_fold(self, pattern: torch.Tensor, values_kv: torch.Tensor,
                     block: PatternBlock) -> tuple[torch.Tensor, ...]:
        """``_fold_heads``' five results for every head of a whole block at once, by the C
        kernel (``_sparse_kernel.c``: one walk over each real row's keys, sums in float64;
        float64 results), for the sample's sentences (``_picked``) of the fed batch's
        tensors. Every (sentence, head) pair is independent: the pairs are split between the
        intra-op threads (the kernel releases the GIL)."""
        pattern = pattern.detach().float().contiguous()  # [total, head, n, n]
        values = values_kv.detach().float().contiguous()  # [total, n, kv_head, d]
        total, n_heads, n, _ = pattern.shape
        batch = len(self._picked)
        _, _, kv_heads, d = values.shape
        rows, is_global, keep = self._kernel_sets(block)
        top = self.max_distance + 1
        buckets = min(n - 1, top) + 1
        sets = 2 * len(self.windows) + 2
        f64 = {"dtype": torch.float64}
        out = (torch.empty(batch, n_heads, sets, **f64), torch.empty(batch, n_heads, **f64),
               torch.empty(batch, n_heads, buckets, **f64),
               torch.empty(batch, n_heads, buckets, **f64),
               torch.empty(batch, n_heads, 2, **f64))
        args = (pattern.numpy(), values.numpy(), rows, is_global, keep, self._windows_i32,
                self._picked, total, batch, n_heads, n, kv_heads, d, top)
        outs = tuple(x.numpy() for x in out)
        run_split(lambda first, stop: _sparse_kernel.fold(*args, first, stop, *outs),
                  batch * n_heads)
        return out

    def _kernel_sets(self, block: PatternBlock) -> tuple:
        """The kernel's per-batch inputs, made once per batch: real rows and global keys
        ``[batch, n]`` and BigBird's keys ``[batch, n, n]``, as uint8 numpy arrays."""
        if self._kernel_inputs is None:
            keep = self._bigbird_sets(block)[0][:, 0]  # [batch, n, n] 0/1 float
            self._kernel_inputs = tuple(
                x.to(torch.uint8).contiguous().numpy()
                for x in (self._real, self._global[:, 0], keep))
        return self._kernel_inputs

    def _fold_sets(self, block: PatternBlock) -> dict:
        """What every chunk of heads of a block shares: the real rows' weight, the global
        columns, and each set's keys as 0/1 in the pattern's dtype."""
        dtype = self.compute_dtype
        rows = block.query_rows(self._real)  # [batch, rows]
        select, valid, col_distance = self._global_cols
        col_distance = block.query_rows(col_distance, dim=1)  # [batch, rows, c]
        keep, baseline = self._bigbird_sets(block)
        return {
            "weight": rows[:, None, :, None].to(dtype),  # [batch, 1, rows, 1]
            "select": select.to(dtype)[:, None],  # [batch, 1, key_pos, c]
            "valid": valid[:, None, None, :].to(dtype),  # [batch, 1, 1, c]
            # per window: the keys [rows, key_pos], the global columns outside it
            # [batch, 1, rows, c]
            "windows": [((block.distance <= w).to(dtype),
                         (valid[:, None, :] & (col_distance > w)).to(dtype)[:, None])
                        for w in self.windows],
            "bigbird": keep.to(dtype),  # [batch, 1, rows, key_pos]
            "baseline": baseline,
            "nonglobal": (~self._global[:, None]).to(dtype),  # [batch, 1, 1, key_pos]
        }

    def _fold_heads(self, pattern: torch.Tensor, values: torch.Tensor, block: PatternBlock,
                    sets: dict) -> tuple[torch.Tensor, ...]:
        """One chunk of heads (``pattern [batch, head, rows, key_pos]``, ``values [batch, head,
        key_pos, d_head_v]``): squared output errors ``[batch, head, set]`` and squared output
        norms ``[batch, head]`` (float64), the masses at each distance of all keys and of
        non-global keys ``[batch, head, distance]`` and the global and BigBird masses
        ``[batch, head, 2]`` (both in the pattern's precision).

        Each norm is one float32 ``vector_norm`` pass over its difference (squared in
        float64, exactly); the windows' kept masses come from the rows' mass at each
        distance (``_distance_masses``), the window+global products add the global columns
        outside the window in the same ``baddbmm`` (sparse32: float32 rounding, not bits,
        differs from the masked sums it replaced; ``tests/test_sparse32.py``)."""
        n = pattern.shape[-1]
        squared = torch.zeros(pattern.shape[0], pattern.shape[1], 2 * len(self.windows) + 2,
                              dtype=torch.float64, device=pattern.device)
        # Padded query rows set to 0 once: every product, mass and error below is then 0 on
        # them, as the row weight made it, and the real rows' values are the same.
        pattern = pattern * sets["weight"]
        # within [batch, head, rows, w]: each row's mass within |i - j| <= w, w = 0 .. largest
        by_distance, nonglobal, within = self._distance_masses(pattern, block,
                                                               sets["nonglobal"])
        full = pattern @ values  # [batch, head, rows, d_head_v]
        norms = _norm(full).double().square()
        global_pattern = pattern @ sets["select"]  # [batch, head, rows, c]
        global_values = sets["select"].mT @ values  # [batch, head, c, d_head_v]
        # the global columns themselves (a column past a sentence's own global tokens selects
        # another key, so it is masked out)
        taken = global_pattern * sets["valid"]
        global_mass, global_product = taken.sum(-1), taken @ global_values
        n_w = len(self.windows)
        for k, (w, (keys, outside)) in enumerate(zip(self.windows, sets["windows"],
                                                     strict=True)):
            if w >= n - 1:  # the window holds every key: P_S = P, no error
                continue
            window_mass, window_product = within[..., w], (pattern * keys) @ values
            squared[..., k] = _error_norm(full, window_product, window_mass).double().square()
            taken = global_pattern * outside  # the global columns outside the window
            product = torch.baddbmm(window_product.flatten(0, 1), taken.flatten(0, 1),
                                    global_values.flatten(0, 1)).view_as(window_product)
            squared[..., n_w + k] = _error_norm(
                full, product, window_mass + taken.sum(-1)).double().square()
        kept = pattern * sets["bigbird"]
        bigbird_mass, bigbird_product = kept.sum(-1), kept @ values
        squared[..., 2 * n_w] = _error_norm(full, global_product, global_mass).double().square()
        squared[..., 2 * n_w + 1] = _error_norm(full, bigbird_product,
                                                bigbird_mass).double().square()
        # [batch, head, 2]: the padded rows' masses are 0 already
        masses = torch.stack([global_mass.sum(-1), bigbird_mass.sum(-1)], -1)
        return squared, norms, by_distance, nonglobal, masses

    def _take(self, x: torch.Tensor) -> torch.Tensor:
        """The sampled sentences of an activation ``[batch, ...]``."""
        return x if self._rows is None else x.index_select(0, self._rows)

    def _distance_masses(self, masked: torch.Tensor, block: PatternBlock,
                         nonglobal_keys: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The mass at each distance ``|i - j|`` of each sentence and head's rows, of all keys
        and of non-global keys ``[batch, head, distance]`` (the distances this block can
        have; the last bucket of the state holds every ``d > max_distance``), and each row's
        mass within ``|i - j| <= w`` for ``w = 0 .. max(windows)`` ``[batch, head, rows, w]``
        (at most two keys per row and distance, added in order)."""
        batch, n_heads, rows, n = masked.shape
        top = self.max_distance + 1
        n_buckets = min(n - 1, top) + 1
        bucket = block.distance.clamp(max=top).long()  # [rows, key_pos]
        by_row = torch.zeros(batch, n_heads, rows, n_buckets, dtype=masked.dtype,
                             device=masked.device)
        by_row.scatter_add_(3, bucket.expand(batch, n_heads, rows, n), masked)
        nonglobal = torch.zeros(batch, n_heads, n_buckets, dtype=masked.dtype,
                                device=masked.device)
        nonglobal.scatter_add_(2, bucket.flatten().expand(batch, n_heads, -1),
                               (masked * nonglobal_keys).flatten(2))
        return by_row.sum(2), nonglobal, by_row[..., : self.windows[-1] + 1].cumsum(-1)

    # Results --------------------------------------------------------------------------
    def _window_curves(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean share within ``|i - j| <= w`` for ``w = 0..max_distance``: (window, +global)."""
        rows = max(self.rows, 1)
        window = (self.by_distance.cumsum(-1) / rows).cpu().numpy()[..., :-1]
        glob = (self.masses[..., 0] / rows).cpu().numpy()[..., None]
        plus = glob + (self.nonglobal_by_distance.cumsum(-1) / rows).cpu().numpy()[..., :-1]
        return window, plus

    def _smallest(self, curve: np.ndarray, candidates) -> float:
        for w in candidates:
            if curve[w] >= self.coverage:
                return float(w)
        return math.nan

    def result(self) -> dict[str, pd.DataFrame]:
        window, plus = self._window_curves()
        sentences, rows = max(self.sentences, 1), max(self.rows, 1)
        errors = (self.errors / sentences).cpu().numpy()
        masses = (self.masses / rows).cpu().numpy()
        n_w = len(self.windows)
        coverage, heads = [], []
        for layer in range(self.n_layers):
            for head in range(self.heads_per_layer[layer]):  # only heads the model has
                rows_of = []
                for k, w in enumerate(self.windows):
                    rows_of.append(("window", w, window[layer, head, w], errors[layer, head, k]))
                    rows_of.append(("window+global", w, plus[layer, head, w],
                                    errors[layer, head, n_w + k]))
                rows_of.append(("global", math.nan, masses[layer, head, 0],
                                errors[layer, head, 2 * n_w]))
                rows_of.append(("bigbird", BIGBIRD["window"], masses[layer, head, 1],
                                errors[layer, head, 2 * n_w + 1]))
                rows_of.append(("random", math.nan, masses[layer, head, 2], math.nan))
                for pattern, w, mass, error in rows_of:
                    for measure, value in (("mass", mass), ("output_error", error)):
                        coverage.append({"layer": layer, "head": head, "pattern": pattern,
                                         "window": w, "measure": measure, "value": float(value)})
                heads += self._head_rows(layer, head, window, plus, errors)
        return {"sparse_coverage": pd.DataFrame.from_records(coverage),
                "sparse_heads": pd.DataFrame.from_records(heads),
                "sparse_window_curve": self._curve_table(window, plus)}

    def _curve_table(self, window: np.ndarray, plus: np.ndarray) -> pd.DataFrame:
        """``sparse_window_curve``: each head's mass within ``±w`` (``window_mass``) and with
        the global keys (``window_global_mass``) for ``w = 0..max_distance``, as columns."""
        layer = np.repeat(np.arange(self.n_layers), self.heads_per_layer)  # [head of model]
        head = np.concatenate([np.arange(n) for n in self.heads_per_layer])  # [head of model]
        if not len(layer):  # no head: the table of no records, without columns
            return pd.DataFrame.from_records([])
        width = self.max_distance + 1
        return pd.DataFrame({
            "layer": np.repeat(layer, width), "head": np.repeat(head, width),
            "window": np.tile(np.arange(width), len(layer)),
            "window_mass": window[layer, head, :width].astype(np.float64).reshape(-1),
            "window_global_mass": plus[layer, head, :width].astype(np.float64).reshape(-1),
        })

    def _head_rows(self, layer, head, window, plus, errors) -> list[dict]:
        all_w = range(self.max_distance + 1)
        grid = self._smallest(window[layer, head], self.windows)
        k = self.windows.index(int(grid)) if not math.isnan(grid) else None
        measures = {
            "window90": grid,
            "window90_exact": self._smallest(window[layer, head], all_w),
            "window90_global": self._smallest(plus[layer, head], all_w),
            "mass_at_window90": math.nan if k is None else window[layer, head, int(grid)],
            "error_at_window90": math.nan if k is None else errors[layer, head, k],
        }
        return [{"layer": layer, "head": head, "measure": m, "value": float(v)}
                for m, v in measures.items()]
