"""Singular values of batches of attention matrices, and the curves built from them.

``singular_values`` is the analyzer's spectral path: the square roots of the eigenvalues of
the float64 Gram matrix ``G = P P^T`` (or ``P^T P``, whichever side is smaller, so
rectangular cross-attention matrices work), with closed forms when the smaller side is 1 or
2. On the CPU the eigenvalues come from attnlens' C kernel (``_spectral_kernel.c``: many
matrices at a time, interleaved so that the loops vectorise across matrices), one thread per
core over slices of the batch; without the compiled kernel, and on GPUs, from
``torch.linalg.eigvalsh``. ``top_singular_values`` is
the option for long inputs: the top ``k`` singular values by randomized subspace iteration,
with rigorous bounds on the nuclear norm (sum of all singular values) and on the Ky Fan
``k``-norm (sum of the top ``k``).

Notation: ``s_1 >= ... >= s_r`` are the singular values of one ``m x n`` matrix, ``r =
min(m, n)``; ``C(k) = (s_1 + ... + s_k) / (s_1 + ... + s_r)`` is the cumulative curve.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache, partial

import numpy as np
import torch

from attnlens.errors import ConfigError

try:  # built by `pip install` where a C compiler is present (setup.py); optional
    from attnlens.measures.spectrum import _spectral_kernel
except ImportError:  # pragma: no cover - exercised where the build was skipped
    _spectral_kernel = None

METHODS = ("auto", "kernel", "gram64", "svd32", "gram32", "svdvals")
# The kernel is built for many small matrices (its groups of 8 live in the L2 cache); above
# this size LAPACK's blocked solver is faster (measured, 1 thread: equal at r = 256, LAPACK
# 1.25x faster at 384 and 1.7x at 512) and needs 16x less workspace.
KERNEL_MAX_R = 256
# Below this much work (matrices x r^3) one solver call beats splitting the batch across
# threads: the split's fixed cost (~50 us) outweighs the solve (measured, benchmarks/spectrum.py).
PARALLEL_MIN_WORK = 200_000


@contextmanager
def lapack_single_thread(device: torch.device) -> Iterator[None]:
    """Run batched CPU eigen/SVD solvers on one thread, then restore the thread count.

    Threaded LAPACK drivers gain nothing on small matrices (and thrash on a loaded machine);
    torch loops over the batch anyway, so parallelism belongs across matrices instead.
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
    """Singular values ``[..., r]`` (descending, float64) of matrices ``P [..., m, n]``.

    ``kernel`` (what ``auto`` uses on the CPU when the C kernel is built and ``r <=
    KERNEL_MAX_R``) and ``gram64`` (``auto`` otherwise): the square roots of the eigenvalues
    of ``G``, the float64 Gram matrix of the smaller side, by the C kernel or by
    ``torch.linalg.eigvalsh``. Both are backward stable in float64: eigenvalues within a few
    ``1e-16 trace(G)``, so each singular value within about ``1e-8 s_1`` and the curve within
    about ``1e-9``. ``svd32``: ``torch.linalg.svdvals`` in float32 (curve error about
    ``3e-7``). ``gram32``: eigenvalues in float32, about ``1e-3`` off on the curve of real
    attention matrices (their small singular values drown in the float32 noise of
    ``s_1^2``); kept for comparison only. ``svdvals``: float64 SVD, the reference.
    """
    if method not in METHODS:
        raise ConfigError(f"unknown spectrum method {method!r}; use one of {METHODS}.")
    if method == "auto":
        small = min(P.shape[-2:]) <= KERNEL_MAX_R
        method = "kernel" if small and kernel_available(P.device) else "gram64"
    elif method == "kernel" and not kernel_available(P.device):
        raise ConfigError("the spectral C kernel is not built (or the matrices are not on the "
                          "CPU); reinstall attnlens with a C compiler, or use method='gram64'.")
    *batch, m, n = P.shape
    r = min(m, n)
    flat = P.reshape(-1, m, n)  # [matrices, m, n]
    if flat.shape[0] == 0 or r == 0:
        return torch.zeros(*batch, r, dtype=torch.float64, device=P.device)
    if method in ("gram64", "kernel") and r <= 2:
        return _closed_form(flat).reshape(*batch, r)
    workers = torch.get_num_threads() if P.device.type == "cpu" else 1
    with lapack_single_thread(P.device):
        count = flat.shape[0]
        if workers > 1 and count >= 2 * workers and count * r**3 >= PARALLEL_MIN_WORK:
            # One single-threaded solver per core on a slice of the matrices (they release
            # the GIL inside LAPACK and the kernel); the kernel's slices hold whole groups.
            unit = _spectral_kernel.LANES if method == "kernel" else 1
            size = -(-count // (workers * unit)) * unit  # ceil(count / workers), rounded up
            parts = flat.split(size, dim=0)
            out = torch.cat(list(_solver_pool(workers).map(partial(_spectrum, method=method),
                                                            parts)))
        else:
            out = _spectrum(flat, method)
    return out.reshape(*batch, r)


@lru_cache(maxsize=4)
def _solver_pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="attnlens-svd")


def gram(P: torch.Tensor) -> torch.Tensor:
    """The Gram matrix of the smaller side: ``P P^T`` if ``m <= n``, else ``P^T P``."""
    return P @ P.mT if P.shape[-2] <= P.shape[-1] else P.mT @ P


def kernel_available(device: torch.device | str = "cpu") -> bool:
    """Whether the C kernel is built and can read matrices on ``device``."""
    return _spectral_kernel is not None and torch.device(device).type == "cpu"


def kernel_eigenvalues(P: torch.Tensor) -> torch.Tensor:
    """Eigenvalues ``[matrices, r]`` (unsorted, float64) of the float64 Gram matrices of the
    smaller side of ``P [matrices, m, n]`` (CPU, float32 or float64), by the C kernel.

    A matrix whose iteration does not converge (NaN or Inf entries) comes back as NaN.
    """
    count, m, n = P.shape
    X = P.detach().contiguous() if P.dtype in (torch.float32, torch.float64) else \
        P.detach().float().contiguous()
    out = torch.empty(count, min(m, n), dtype=torch.float64)
    _spectral_kernel.gram_eigenvalues(X.numpy(), out.numpy(), count, m, n,
                                      X.dtype == torch.float64)
    return out


def _spectrum(P: torch.Tensor, method: str) -> torch.Tensor:
    """Singular values of ``P [matrices, m, n]`` by one concrete method."""
    if method == "kernel":
        eig = kernel_eigenvalues(P)  # [matrices, r]
        return eig.clamp_min(0).sqrt().sort(dim=-1, descending=True).values
    if method in ("svdvals", "svd32"):
        X = P.double() if method == "svdvals" else P.float()
        return torch.linalg.svdvals(X).double()
    X = P.double() if method == "gram64" else P.float()
    eig = torch.linalg.eigvalsh(gram(X)).double()  # [matrices, r] ascending
    return eig.clamp_min(0).sqrt().flip(-1)


def _closed_form(P: torch.Tensor) -> torch.Tensor:
    """Singular values of ``P [matrices, m, n]`` with ``min(m, n) <= 2``, in float64.

    ``r = 1``: the norm of the single row or column. ``r = 2``: the eigenvalues of the 2 x 2
    Gram matrix ``[[a, b], [b, c]]``: ``l1 = (a + c) / 2 + hypot((a - c) / 2, b)`` and
    ``l2 = (a c - b^2) / l1`` (the product form keeps a tiny ``l2`` accurate to ``1e-16 l1``).
    """
    G = gram(P.double())  # [matrices, r, r]
    if G.shape[-1] == 1:
        return G[:, 0].clamp_min(0).sqrt()
    a, b, c = G[:, 0, 0], G[:, 0, 1], G[:, 1, 1]
    l1 = (a + c) / 2 + torch.hypot((a - c) / 2, b)
    l2 = torch.where(l1 > 0, (a * c - b * b) / l1.clamp_min(1e-300), torch.zeros_like(l1))
    return torch.stack([l1, l2], -1).clamp_min(0).sqrt()


# --- curves ----------------------------------------------------------------------------
def cumulative_curve(s: torch.Tensor) -> torch.Tensor:
    """``C(k)`` for ``k = 1..r`` from descending singular values ``s [..., r]``."""
    total = s.sum(dim=-1, keepdim=True)
    curve = s.cumsum(dim=-1) / total.clamp_min(torch.finfo(s.dtype).tiny)
    return curve.clamp(max=1.0)


def curve_at(curve: torch.Tensor, x: torch.Tensor | float) -> torch.Tensor:
    """Linear interpolation of ``C`` (``curve [..., r]`` = ``C(1..r)``, ``C(0) = 0``) at ``x``.

    ``x`` broadcasts against ``curve[..., 0]`` with an extra trailing axis of points:
    ``x [..., points]`` -> ``[..., points]``.
    """
    padded = torch.nn.functional.pad(curve, (1, 0))  # [..., r + 1] = C(0..r)
    r = curve.shape[-1]
    x = torch.as_tensor(x, dtype=curve.dtype, device=curve.device).clamp(0, r)
    lo = x.floor().clamp(max=r - 1).long()
    # numpy's: torch.broadcast_shapes imports torch.fx's symbolic shapes (0.4 s)
    shape = np.broadcast_shapes((*padded.shape[:-1], 1), tuple(x.shape))
    padded = padded.expand(*shape[:-1], r + 1)
    lo = lo.expand(shape)
    c_lo = torch.gather(padded, -1, lo)
    c_hi = torch.gather(padded, -1, lo + 1)
    return c_lo + (x.expand(shape) - lo) * (c_hi - c_lo)


def numerical_rank(curve: torch.Tensor, level: float) -> torch.Tensor:
    """Smallest ``k`` with ``C(k) >= level`` (``curve [..., r]``), as float64."""
    return ((curve < level - 1e-12).sum(dim=-1) + 1).clamp(max=curve.shape[-1]).double()


def entropy_effective_rank(s: torch.Tensor) -> torch.Tensor:
    """``exp(H(s / sum s))`` on the last axis (float64)."""
    p = s / s.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(s.dtype).tiny)
    return torch.exp(-(p * torch.log(p.clamp_min(1e-300))).sum(dim=-1))


# --- top-k for long inputs ---------------------------------------------------------------
@dataclass
class TopSpectrum:
    """Top-``k`` singular values of a batch of matrices with bounds (``top_singular_values``).

    All tensors float64, batch shape ``[...]``:

    - ``values [..., k]``: Ritz values ``t_1 >= ... >= t_k``; each is a lower bound of the
      singular value of the same rank (``t_i <= s_i``, Cauchy interlacing);
    - ``residual [..., k]``: ``||G u_i - t_i^2 u_i||``: ``G`` has an eigenvalue within it of
      ``t_i^2`` (the symmetric residual bound), so it measures convergence;
    - ``ky_fan_lower`` / ``ky_fan_upper``: ``sum_{i<=k} s_i`` lies between ``sum t_i`` and
      ``sum t_i + sqrt(k T)``;
    - ``nuclear_lower`` / ``nuclear_upper``: ``sum_i s_i`` lies between
      ``max(sum t_i, ||P||_F^2 / b)`` and ``sum t_i + sqrt((r - k) T)``,

    where ``T = ||P||_F^2 - sum t_i^2`` is the energy outside the Ritz subspace (exact) and
    ``b = sqrt(||P||_1 ||P||_inf) >= s_1``. The upper bounds follow from the triangle
    inequality of Ky Fan norms on ``P = U U^T P + (I - U U^T) P`` and Cauchy-Schwarz on the
    at most ``r - k`` singular values of the remainder; they hold however far the iteration
    got, and tighten as the tail energy ``T`` shrinks.
    """

    values: torch.Tensor
    residual: torch.Tensor
    ky_fan_lower: torch.Tensor
    ky_fan_upper: torch.Tensor
    nuclear_lower: torch.Tensor
    nuclear_upper: torch.Tensor


def _orth(Y: torch.Tensor) -> torch.Tensor:
    return torch.linalg.qr(Y).Q


@dataclass
class MatrixProducts:
    """A batch of matrices ``P [..., r, n]`` known only through products (``r <= n``).

    ``right(X, dtype)``: ``P @ X`` for ``X [..., n, w]``; ``left(Y, dtype)``: ``P^T @ Y``
    for ``Y [..., r, w]`` (each in ``dtype``). ``frob2 [...]``: ``||P||_F^2``; ``s1_bound
    [...]``: ``sqrt(||P||_1 ||P||_inf)`` (float64). A long pattern given as query blocks
    makes these from one pass over its rows per product (``PatternProducts`` in the spectrum
    analyzer), never holding ``P``.
    """

    right: Callable[[torch.Tensor, torch.dtype], torch.Tensor]
    left: Callable[[torch.Tensor, torch.dtype], torch.Tensor]
    rows: int
    cols: int
    frob2: torch.Tensor
    s1_bound: torch.Tensor
    device: torch.device


def dense_products(P: torch.Tensor) -> MatrixProducts:
    """``MatrixProducts`` of dense matrices ``P [..., m, n]`` (transposed when ``m > n``)."""
    m, n = P.shape[-2:]
    X = P if m <= n else P.mT  # [..., r, n] with r <= n: the Gram side is the row side
    X32, X64 = X.float(), X.double()

    def right(Y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return (X32 if dtype == torch.float32 else X64) @ Y

    def left(Y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return (X32 if dtype == torch.float32 else X64).mT @ Y

    frob2 = (X64**2).sum(dim=(-2, -1))
    s1_bound = torch.sqrt(X64.abs().sum(-2).amax(-1) * X64.abs().sum(-1).amax(-1))
    return MatrixProducts(right, left, X.shape[-2], X.shape[-1], frob2, s1_bound, P.device)


def top_singular_values(
    P: torch.Tensor, k: int, iterations: int = 4, oversample: int | None = None, seed: int = 0
) -> TopSpectrum:
    """Top-``k`` singular values of ``P [..., m, n]`` with the bounds of ``TopSpectrum``.

    Randomized subspace iteration (Halko, Martinsson & Tropp 2011, Alg. 4.4): a Gaussian
    block of ``k + oversample`` columns (``oversample`` defaults to ``k``), ``iterations``
    power steps in float32 with re-orthonormalisation, then the Rayleigh-Ritz projection and
    every bound in float64. Cost ``O(m n (k + oversample) iterations)`` against ``O(r^3)``
    for the full spectrum.
    """
    return top_singular_values_of(dense_products(P), k, iterations, oversample, seed)


def top_singular_values_of(
    products: MatrixProducts, k: int, iterations: int = 4, oversample: int | None = None,
    seed: int = 0, sketch: torch.Tensor | None = None,
) -> TopSpectrum:
    """``top_singular_values`` of matrices given by their products (``MatrixProducts``):
    ``2 iterations + 3`` products in all (``2 iterations + 4`` without ``sketch``, the
    first product ``P @ omega`` when the caller already has it; ``gaussian_sketch`` makes
    ``omega``). Every bound holds whatever the products' rounding, as in the dense case."""
    r, n = products.rows, products.cols
    if not 0 < k <= r:
        raise ConfigError(f"top-k needs 0 < k <= {r} for these {r} x {n} matrices; got {k}.")
    right, left = products.right, products.left
    f32, f64 = torch.float32, torch.float64
    Y = sketch if sketch is not None else right(
        gaussian_sketch(r, n, k, oversample, seed, products.device), f32)
    Q = _orth(Y)  # [..., r, width]
    for _ in range(iterations):
        Q = _orth(right(_orth(left(Q, f32)), f32))
    Q = _orth(Q.double())
    B = left(Q, f64).mT  # [..., width, n] = Q^T P
    eig, W = torch.linalg.eigh(B @ B.mT)  # ascending
    eig, W = eig.flip(-1)[..., :k].clamp_min(0), W.flip(-1)[..., :k]
    values = eig.sqrt()  # [..., k]
    U = Q @ W  # [..., r, k] Ritz vectors of G = P P^T
    residual = torch.linalg.vector_norm(right(left(U, f64), f64) - U * eig[..., None, :],
                                        dim=-2)
    tail = (products.frob2 - eig.sum(-1)).clamp_min(0)  # energy outside span(U)
    top = values.sum(-1)
    return TopSpectrum(
        values=values,
        residual=residual,
        ky_fan_lower=top,
        ky_fan_upper=top + torch.sqrt(k * tail),
        nuclear_lower=torch.maximum(top, products.frob2 / products.s1_bound.clamp_min(1e-300)),
        nuclear_upper=top + torch.sqrt((r - k) * tail),
    )


def gaussian_sketch(r: int, n: int, k: int, oversample: int | None, seed: int,
                    device: torch.device) -> torch.Tensor:
    """The seeded Gaussian test block ``omega [n, width]`` of ``top_singular_values_of``."""
    width = min(r, k + (k if oversample is None else oversample))
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(n, width, generator=gen, device=device)


def rank_ks(n: int, fractions: tuple[float, ...]) -> list[int]:
    """``k = ceil(f n)`` (at least 1, at most n) for each fraction ``f``."""
    return [min(n, max(1, math.ceil(f * n - 1e-9))) for f in fractions]
