"""How low-rank are attention matrices? Singular-value spectra of every head, streamed.

For every sentence and head, only the real tokens are kept (the ``n x n`` submatrix of
``P = softmax(Q K^T / sqrt(d))`` without padding rows or columns; [CLS]/[SEP] are real
tokens and stay). Sentences of a batch are grouped by real length and each group is one
batched call: never a Python loop over matrices.

Definitions (``s_1 >= ... >= s_n`` are the singular values of one ``n x n`` matrix):

- **cumulative curve** ``C(k) = (s_1 + ... + s_k) / (s_1 + ... + s_n)``, ``C(0) = 0``: the
  normalised cumulative singular-value curve of Linformer (Wang et al. 2020, Fig. 1).
  "Energy" in this module means exactly this share of the *sum of singular values* (not of
  their squares). Between integers ``C`` is interpolated linearly, so ``C(x)`` is defined for
  real ``x`` in ``[0, n]``.
- **relative curve**: ``C(r n)`` on the grid ``r = 1/20, 2/20, ..., 1``, averaged over
  sentences (each sentence weighs the same).
- **curve by length**: ``C(k)`` for absolute ``k = 1 .. hi`` in the length buckets
  ``1-8, 9-16, 17-32, ...`` (``hi`` a power of two; ``C(k) = 1`` for ``k > n``).
- ``cum_at_quarter``: ``C(n / 4)``, Linformer's "128 of 512".
- ``effective_rank``: ``exp(H(s / sum s))`` (Roy & Vetterli 2007); ``effective_rank_frac``
  is that divided by ``n``.
- ``rank90`` / ``rank99``: the smallest integer ``k`` with ``C(k) >= 0.90`` / ``0.99``
  (same energy as the curve); ``rank90_frac`` / ``rank99_frac`` divide by ``n``.

Cost of low rank, for ``k = ceil(r n)`` with ``r`` in ``rank_fractions``:

- ``p_error``: ``||P - P_k||_F / ||P||_F = sqrt(sum_{i>k} s_i^2 / sum_i s_i^2)`` for the best
  rank-``k`` approximation ``P_k`` (Eckart-Young);
- ``output_error``: ``||P V - P_k V||_F / ||P V||_F``, the error the same truncation induces in
  the head's output, computed exactly from the left singular vectors ``U``:
  ``P V - P_k V = U_{>k} U_{>k}^T P V``;
- ``linformer_error``: ``||softmax(c Q (E K)^T) (F V) - P V||_F / ||P V||_F``, with ``E, F``
  fixed ``k x n`` Gaussian projections (entries ``N(0, 1/k)``, drawn from ``seed``, ``n`` and
  ``k``, so the result does not depend on batching) and ``c`` the head's score scale. Not
  defined for causal models (Linformer's projection mixes future keys); NaN there.

Singular values: ``sqrt(eigvalsh(P P^T))`` in float64 (see ``singular_values``); with the
low-rank costs, from the float64 ``eigh`` of ``P P^T``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache, partial

import numpy as np
import pandas as pd
import torch

from attnlens.analysis.base import Analyzer, Batch
from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.model.transformer import HookedTransformer

GRID_POINTS = 20
RANK_LEVELS = (0.90, 0.99)
SUMMARY_MEASURES = (
    "cum_at_quarter",
    "effective_rank",
    "effective_rank_frac",
    "rank90",
    "rank99",
    "rank90_frac",
    "rank99_frac",
)
COST_MEASURES = ("p_error", "output_error", "linformer_error")
METHODS = ("auto", "gram64", "svd32", "gram32", "svdvals")
# Up to this size float32 SVD beats the float64 Gram eigenvalues (benchmarks/spectrum.py).
AUTO_SVD_MAX_N = 0  # "auto" uses svd32 up to this size, gram64 above (measured: gram64 wins)


# --- real-token submatrices ---------------------------------------------------------------
@dataclass
class LengthGroup:
    """Sentences of one batch with the same number ``n`` of real tokens."""

    n: int
    rows: torch.Tensor  # [group] indices into the batch
    positions: torch.Tensor  # [group, n] positions of the real tokens, ascending


def length_groups(attention_mask: torch.Tensor) -> list[LengthGroup]:
    """Group the sentences of ``attention_mask [batch, pos]`` by their real length."""
    real = attention_mask.bool()
    lengths = real.sum(dim=1)
    # Real positions first, in order: a stable sort of "is padding" (0 for real tokens).
    order = torch.sort((~real).to(torch.int8), dim=1, stable=True).indices  # [batch, pos]
    groups = []
    for n in torch.unique(lengths).tolist():
        if n == 0:
            continue
        rows = torch.nonzero(lengths == n).flatten()
        groups.append(LengthGroup(int(n), rows, order[rows, :n]))
    return groups


def gather_square(x: torch.Tensor, group: LengthGroup) -> torch.Tensor:
    """``x [batch, head, query_pos, key_pos]`` -> real-token block ``[group, head, n, n]``."""
    x = x[group.rows]
    g, h, _, key_len = x.shape
    n = group.n
    idx = group.positions.to(x.device)
    rows = torch.gather(x, 2, idx[:, None, :, None].expand(g, h, n, key_len))
    return torch.gather(rows, 3, idx[:, None, None, :].expand(g, h, n, n))


def gather_tokens(x: torch.Tensor, group: LengthGroup) -> torch.Tensor:
    """``x [batch, pos, ...]`` -> real tokens ``[group, n, ...]``."""
    x = x[group.rows]
    idx = group.positions.to(x.device)
    idx = idx.reshape(*idx.shape, *([1] * (x.dim() - 2))).expand(-1, -1, *x.shape[2:])
    return torch.gather(x, 1, idx)


# --- spectra ------------------------------------------------------------------------------
@contextmanager
def lapack_single_thread(device: torch.device) -> Iterator[None]:
    """Run batched CPU eigen/SVD solvers on one thread, then restore the thread count.

    Measured on the 2-core machine: ``eigh`` of 576 ``64 x 64`` matrices takes 0.3 s on one
    thread and 14 s on two (the threaded LAPACK drivers thrash on small matrices); torch
    already loops over the batch, so one thread loses nothing.
    """
    previous = torch.get_num_threads()
    if device.type != "cpu" or previous == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def singular_values(P: torch.Tensor, method: str = "auto") -> torch.Tensor:
    """Singular values ``[..., n]`` (descending, float64) of square matrices ``P [..., n, n]``.

    ``gram64``: ``sqrt(eigvalsh(P P^T))`` in float64; eigenvalues are accurate to about
    ``1e-16 s_1^2``, so each singular value to ``1e-8 s_1`` and the cumulative curve to about
    ``1e-9``. ``svd32``: ``torch.linalg.svdvals`` in float32 on one thread (curve error about
    ``3e-7``). ``auto`` (default): ``gram64``, the fastest method within the 1e-4 curve
    error target at every size in ``benchmarks/spectrum.py``. ``gram32``: eigenvalues in float32,
    faster but about ``1e-3`` off on the curve of real attention matrices, whose small
    singular values drown in float32 noise of ``s_1^2``. ``svdvals``: float64 SVD, the
    reference. On the CPU the batch is split across one single-threaded solver per core
    (threaded LAPACK drivers are slow on small matrices; see ``lapack_single_thread``).
    """
    if method not in METHODS:
        raise ConfigError(f"unknown spectrum method {method!r}; use one of {METHODS}.")
    if method == "auto":
        method = "svd32" if P.shape[-1] <= AUTO_SVD_MAX_N else "gram64"
    workers = torch.get_num_threads() if P.device.type == "cpu" else 1
    with lapack_single_thread(P.device):
        if workers > 1 and P.dim() > 2 and P.shape[0] >= 2 * workers:
            # One single-threaded solver per core on a slice of the batch (they release the GIL).
            parts = P.chunk(workers, dim=0)
            return torch.cat(
                list(_solver_pool(workers).map(partial(_spectrum, method=method), parts))
            )
        return _spectrum(P, method)


@lru_cache(maxsize=4)
def _solver_pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="attnlens-svd")


def _spectrum(P: torch.Tensor, method: str) -> torch.Tensor:
    """Singular values of ``P [..., n, n]`` by one concrete method (see ``singular_values``)."""
    if method in ("svdvals", "svd32"):
        X = P.double() if method == "svdvals" else P.float()
        return torch.linalg.svdvals(X).double()
    X = P.double() if method == "gram64" else P.float()
    eig = torch.linalg.eigvalsh(X @ X.mT).double()  # [..., n] ascending
    return eig.clamp_min(0).sqrt().flip(-1)


def cumulative_curve(s: torch.Tensor) -> torch.Tensor:
    """``C(k)`` for ``k = 1..n`` from descending singular values ``s [..., n]``."""
    total = s.sum(dim=-1, keepdim=True)
    curve = s.cumsum(dim=-1) / total.clamp_min(torch.finfo(s.dtype).tiny)
    return curve.clamp(max=1.0)


def curve_at(curve: torch.Tensor, x: torch.Tensor | float) -> torch.Tensor:
    """Linear interpolation of ``C`` (``curve [..., n]`` = ``C(1..n)``, ``C(0) = 0``) at ``x``.

    ``x`` broadcasts against ``curve[..., 0]`` with an extra trailing axis of points:
    ``x [..., points]`` -> ``[..., points]``.
    """
    padded = torch.nn.functional.pad(curve, (1, 0))  # [..., n + 1] = C(0..n)
    n = curve.shape[-1]
    x = torch.as_tensor(x, dtype=curve.dtype, device=curve.device).clamp(0, n)
    lo = x.floor().clamp(max=n - 1).long()
    shape = torch.broadcast_shapes((*padded.shape[:-1], 1), x.shape)
    padded = padded.expand(*shape[:-1], n + 1)
    lo = lo.expand(shape)
    c_lo = torch.gather(padded, -1, lo)
    c_hi = torch.gather(padded, -1, lo + 1)
    return c_lo + (x.expand(shape) - lo) * (c_hi - c_lo)


def numerical_rank(curve: torch.Tensor, level: float) -> torch.Tensor:
    """Smallest ``k`` with ``C(k) >= level`` (``curve [..., n]``), as float64."""
    return ((curve < level - 1e-12).sum(dim=-1) + 1).clamp(max=curve.shape[-1]).double()


def entropy_effective_rank(s: torch.Tensor) -> torch.Tensor:
    """``exp(H(s / sum s))`` on the last axis (float64)."""
    p = s / s.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(s.dtype).tiny)
    return torch.exp(-(p * torch.log(p.clamp_min(1e-300))).sum(dim=-1))


def rank_ks(n: int, fractions: tuple[float, ...]) -> list[int]:
    """``k = ceil(r n)`` (at least 1, at most n) for each fraction ``r``."""
    return [min(n, max(1, math.ceil(r * n - 1e-9))) for r in fractions]


def tail_share(energies: torch.Tensor, ks: list[int]) -> torch.Tensor:
    """``sqrt(sum_{i>k} e_i / sum_i e_i)`` per ``k`` for descending ``energies [..., n]``."""
    total = energies.sum(dim=-1, keepdim=True)
    # tails[..., j] = sum_{i >= j} e_i (0-based), so the tail after the first k is tails[k].
    tails = energies.flip(-1).cumsum(-1).flip(-1)
    tails = torch.nn.functional.pad(tails, (0, 1))  # tails[..., n] = 0
    chosen = tails[..., ks]
    ratio = torch.where(total > 0, chosen / total.clamp_min(1e-300), torch.zeros_like(chosen))
    return ratio.clamp_min(0).sqrt()


def truncation_errors(
    P: torch.Tensor, V: torch.Tensor, ks: list[int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Singular values, rank-``k`` errors of ``P`` and of the output ``P V``, in float64.

    ``P [..., n, n]``, ``V [..., n, d_head_v]``. Returns ``s [..., n]``, ``p_error [..., K]``
    and ``output_error [..., K]`` for ``K = len(ks)``.
    """
    P64 = P.double()
    with lapack_single_thread(P.device):
        eig, U = torch.linalg.eigh(P64 @ P64.mT)  # ascending; U [..., n, n] columns
    eig, U = eig.flip(-1).clamp_min(0), U.flip(-1)  # descending
    out = P64 @ V.double()  # [..., n, d_head_v]
    coords = U.mT @ out  # [..., n, d_head_v]: the output in the left singular basis
    row_energy = (coords**2).sum(dim=-1)  # [..., n]
    return eig.sqrt(), tail_share(eig, ks), tail_share(row_energy, ks)


def linformer_projection(n: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed ``E, F [k, n]`` with entries ``N(0, 1/k)``, a function of ``(seed, n, k)`` only."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + n * 1_009 + k)
    E = torch.randn(k, n, generator=gen, dtype=torch.float64) / math.sqrt(k)
    F = torch.randn(k, n, generator=gen, dtype=torch.float64) / math.sqrt(k)
    return E, F


def linformer_errors(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    P: torch.Tensor,
    scale: float | torch.Tensor,
    ks: list[int],
    seed: int = 0,
) -> torch.Tensor:
    """Relative error of a Linformer projection of keys and values, per ``k``: ``[..., len(ks)]``.

    ``Q, K [..., n, d_head]``, ``V [..., n, d_head_v]``, ``P [..., n, n]`` the exact pattern.
    Computed in float32 (the errors are ratios of order 1; float64 made this the slowest
    step of the analyzer), returned as float64.
    """
    n = Q.shape[-2]
    Q, K, V = Q.float(), K.float(), V.float()
    if torch.is_tensor(scale):
        scale = scale.float()
    exact = P.float() @ V  # [..., n, d_head_v]
    norm = torch.linalg.matrix_norm(exact).clamp_min(torch.finfo(torch.float32).tiny)
    errors = []
    for k in ks:
        E, F = (m.to(Q.device, torch.float32) for m in linformer_projection(n, k, seed))
        K_proj = E @ K  # [..., k, d_head]
        V_proj = F @ V  # [..., k, d_head_v]
        approx = torch.softmax(scale * Q @ K_proj.mT, dim=-1) @ V_proj  # [..., n, d_head_v]
        errors.append(torch.linalg.matrix_norm(approx - exact) / norm)
    return torch.stack(errors, dim=-1).double()


def length_bucket(n: int) -> int:
    """Upper end ``hi`` of the bucket ``(hi/2, hi]`` holding length ``n`` (at least 8)."""
    return max(8, 1 << max(0, n - 1).bit_length())


def bucket_label(hi: int) -> str:
    """``"1-8"``, ``"9-16"``, ``"17-32"``, ...: the lengths a bucket holds."""
    return f"{1 if hi <= 8 else hi // 2 + 1}-{hi}"


# --- the streaming analyzer ---------------------------------------------------------------
class SpectrumAnalyzer(Analyzer):
    """Streaming singular-value statistics of every head's attention matrices.

    State: running sums over sentences (float64), so ``merge`` adds and the streamed result
    equals the all-at-once one. ``low_rank_cost=False`` skips the truncation and Linformer
    errors (they need eigenvectors and the cached q/k/v).
    """

    name = "spectrum"
    state_fields = ("sentences", "token_sum", "curve_sum", "summary_sum", "cost_sum",
                    "bucket_sum", "bucket_count")

    def __init__(
        self,
        heads_per_layer: list[int],
        rank_fractions: tuple[float, ...] = (0.125, 0.25, 0.5),
        low_rank_cost: bool = True,
        seed: int = 0,
        method: str = "auto",
        scales: list[float] | None = None,
        causal: bool = False,
    ) -> None:
        if method not in METHODS:
            raise ConfigError(f"unknown spectrum method {method!r}; use one of {METHODS}.")
        if any(not 0 < r <= 1 for r in rank_fractions):
            raise ConfigError("rank fractions must lie in (0, 1], for example 0.25 for n/4.")
        self.heads_per_layer = list(heads_per_layer)
        self.n_layers, self.n_heads = len(heads_per_layer), max(heads_per_layer)
        self.rank_fractions = tuple(rank_fractions)
        self.low_rank_cost, self.seed, self.method = low_rank_cost, seed, method
        self.scales = scales
        self.causal = causal
        shape = (self.n_layers, self.n_heads)
        f64 = torch.float64
        self.sentences = 0
        self.token_sum = 0
        self.grid = torch.arange(1, GRID_POINTS + 1, dtype=f64) / GRID_POINTS
        self.curve_sum = torch.zeros(*shape, GRID_POINTS, dtype=f64)
        self.summary_sum = torch.zeros(len(SUMMARY_MEASURES), *shape, dtype=f64)
        self.cost_sum = torch.zeros(len(COST_MEASURES), *shape, len(rank_fractions), dtype=f64)
        self.bucket_sum: dict[int, torch.Tensor] = {}  # hi -> [layer, head, hi]
        self.bucket_count: dict[int, int] = {}

    @classmethod
    def for_model(cls, model: HookedTransformer, **kwargs) -> SpectrumAnalyzer:
        scales = [block.attn.scale for block in model.blocks]
        analyzer = cls(model.heads_per_layer, scales=scales, causal=model.cfg.causal, **kwargs)
        analyzer.identify_model(model)
        return analyzer

    def settings(self) -> dict:
        return {
            "heads_per_layer": self.heads_per_layer, "rank_fractions": self.rank_fractions,
            "low_rank_cost": self.low_rank_cost, "seed": self.seed, "method": self.method,
            "scales": self.scales, "causal": self.causal,
        }

    def hook_names(self, model: HookedTransformer) -> list[str]:
        kinds = ["pattern", *self._qkv_kinds()]
        return [f"blocks.{i}.attn.hook_{kind}" for i in range(model.n_layers) for kind in kinds]

    def layer_blocks(self) -> list[list[int]]:
        """Layers processed together: all of them when every layer has the same heads."""
        if len(set(self.heads_per_layer)) == 1:
            return [list(range(self.n_layers))]
        return [[layer] for layer in range(self.n_layers)]

    def update(self, batch: Batch, cache: ActivationCache) -> None:
        groups = length_groups(batch.attention_mask)
        for layers in self.layer_blocks():
            # Layers side by side on the head axis: one batched call per length group.
            patterns = torch.cat([cache["pattern", i] for i in layers], dim=1)  # [b, L*head, q, k]
            qkv = self._qkv(cache, layers) if self.low_rank_cost else None
            for group in groups:
                self._update_group(group, layers, patterns, qkv)
        for group in groups:
            self.sentences += len(group.rows)
            self.token_sum += group.n * len(group.rows)

    def _qkv_kinds(self) -> tuple[str, ...]:
        """Cached activations the low-rank costs read (no Linformer for causal models)."""
        if not self.low_rank_cost:
            return ()
        return ("v",) if self.causal else ("q", "k", "v")

    def _qkv(self, cache: ActivationCache, layers: list[int]) -> dict[str, torch.Tensor]:
        """q, k, v of ``layers`` side by side: ``[batch, pos, L*head, d]`` (kv heads repeated)."""
        out = {}
        for kind in self._qkv_kinds():
            parts = []
            for i in layers:
                x = cache[kind, i]  # [batch, pos, head | kv_head, d]
                repeat = self.heads_per_layer[i] // x.shape[2]
                parts.append(x.repeat_interleave(repeat, dim=2) if repeat > 1 else x)
            out[kind] = torch.cat(parts, dim=2)
        return out

    def _update_group(
        self,
        group: LengthGroup,
        layers: list[int],
        patterns: torch.Tensor,
        qkv: dict[str, torch.Tensor] | None,
    ) -> None:
        n, g = group.n, len(group.rows)
        n_layers, h = len(layers), self.heads_per_layer[layers[0]]
        block = (slice(layers[0], layers[-1] + 1), slice(0, h))  # [layer, head] of the state
        ks = rank_ks(n, self.rank_fractions)
        hi = length_bucket(n)
        bucket = self.bucket_sum.setdefault(
            hi, torch.zeros(self.n_layers, self.n_heads, hi, dtype=torch.float64)
        )
        if layers[0] == 0:
            self.bucket_count[hi] = self.bucket_count.get(hi, 0) + g

        def fold(x: torch.Tensor) -> torch.Tensor:
            """``[group, L*head, ...]`` summed over sentences -> ``[L, head, ...]`` on the CPU."""
            return x.sum(0).reshape(n_layers, h, *x.shape[2:]).cpu()

        P = gather_square(patterns, group)  # [group, L*head, n, n]
        if qkv is not None:
            V = gather_tokens(qkv["v"], group).transpose(1, 2)  # [group, L*head, n, d_head_v]
            s, p_err, out_err = truncation_errors(P, V, ks)
            self.cost_sum[(0, *block)] += fold(p_err)
            self.cost_sum[(1, *block)] += fold(out_err)
            if self.causal:
                self.cost_sum[(2, *block)] = float("nan")
            else:
                Q = gather_tokens(qkv["q"], group).transpose(1, 2)  # [group, L*head, n, d_head]
                K = gather_tokens(qkv["k"], group).transpose(1, 2)
                scales = [self.scales[i] if self.scales else Q.shape[-1] ** -0.5 for i in layers]
                scale = torch.tensor(scales, dtype=torch.float64, device=Q.device)
                scale = scale.repeat_interleave(h)[:, None, None]  # [L*head, 1, 1]
                lin = linformer_errors(Q, K, V, P, scale, ks, self.seed)
                self.cost_sum[(2, *block)] += fold(lin)
        else:
            s = singular_values(P, self.method)  # [group, L*head, n]
        curve = cumulative_curve(s)  # [group, L*head, n]
        quarter = curve_at(curve, torch.tensor([n / 4]))[..., 0]
        eff = entropy_effective_rank(s)
        r90, r99 = (numerical_rank(curve, level) for level in RANK_LEVELS)
        summary = torch.stack([quarter, eff, eff / n, r90, r99, r90 / n, r99 / n], -1)
        self.summary_sum[(slice(None), *block)] += fold(summary).permute(2, 0, 1)
        self.curve_sum[block] += fold(curve_at(curve, self.grid.to(curve) * n))
        by_k = torch.nn.functional.pad(curve, (0, hi - n), value=1.0)  # [group, L*head, hi]
        bucket[block] += fold(by_k)

    def _index(self) -> pd.DataFrame:
        return pd.DataFrame(
            [(layer, head) for layer, h in enumerate(self.heads_per_layer) for head in range(h)],
            columns=["layer", "head"],
        )

    def _rows(self, values: np.ndarray, extra: dict[str, np.ndarray]) -> pd.DataFrame:
        """Tidy rows from ``values [layer, head, ...]`` keeping only existing heads."""
        frames = []
        for layer, h in enumerate(self.heads_per_layer):
            for head in range(h):
                frame = pd.DataFrame({k: v for k, v in extra.items()})
                frame.insert(0, "head", head)
                frame.insert(0, "layer", layer)
                frame["value"] = values[layer, head].reshape(-1)
                frames.append(frame)
        return pd.concat(frames, ignore_index=True)

    def result(self) -> dict[str, pd.DataFrame]:
        if self.sentences == 0:
            raise ConfigError("the spectrum analyzer saw no sentences; pass a non-empty corpus.")
        count = self.sentences
        summary = (self.summary_sum / count).numpy()  # [measure, layer, head]
        summary_table = self._rows(
            np.moveaxis(summary, 0, -1), {"measure": np.array(SUMMARY_MEASURES)}
        )
        curve_table = self._rows((self.curve_sum / count).numpy(), {"fraction": self.grid.numpy()})
        tables = {"spectrum_summary": summary_table, "spectrum_curve": curve_table}
        bucket_frames = []
        for hi in sorted(self.bucket_sum):
            values = (self.bucket_sum[hi] / self.bucket_count[hi]).numpy()
            frame = self._rows(values, {"k": np.arange(1, hi + 1)})
            frame.insert(2, "bucket", bucket_label(hi))
            frame.insert(3, "sentences", self.bucket_count[hi])
            bucket_frames.append(frame)
        tables["spectrum_curve_by_length"] = pd.concat(bucket_frames, ignore_index=True)
        if self.low_rank_cost:
            cost = (self.cost_sum / count).numpy()  # [measure, layer, head, fraction]
            fractions = np.array(self.rank_fractions)
            grid = np.moveaxis(cost, 0, -1)  # [layer, head, fraction, measure]
            tables["low_rank_cost"] = self._rows(
                grid,
                {
                    "k_fraction": np.repeat(fractions, len(COST_MEASURES)),
                    "measure": np.tile(np.array(COST_MEASURES), len(fractions)),
                },
            )
        return tables

    @property
    def mean_length(self) -> float:
        return self.token_sum / max(self.sentences, 1)
