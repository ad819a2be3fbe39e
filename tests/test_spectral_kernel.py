"""The C kernel of the spectral path (attnlens/measures/spectrum/_spectral_kernel.c) against float64
SVD, on matrices whose singular values are known, and its interleaving of matrices.

Tolerances: the kernel is backward stable in float64 (Gram matrix, Householder reduction,
QR sweeps), so each eigenvalue of ``G`` is within a few ``eps64 * trace(G)`` of the exact
one, and ``trace(G) = ||P||_F^2 <= r s_1^2``. We allow ``1e-13 * trace(G)`` (about 450
ulps, room for the order of summation on any CPU). A singular value is the square root: a
large one moves by ``delta / (2 s)``, a zero one by up to ``sqrt(delta)``, i.e. up to
``sqrt(1e-13 r) s_1`` (about ``4e-6 s_1`` at ``r = 128``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlens.errors import ConfigError
from attnlens.measures.spectrum import singular_values as spectral
from attnlens.measures.spectrum.singular_values import (
    kernel_available,
    kernel_eigenvalues,
    singular_values,
)

pytestmark = pytest.mark.skipif(not kernel_available(),
                                reason="the spectral C kernel is not built (no C compiler)")


def softmax_rows(*shape: int, seed: int = 0, sharpness: float = 3.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.softmax(sharpness * torch.randn(*shape, generator=gen), dim=-1)


def assert_eigenvalues_match(P: torch.Tensor, eig: torch.Tensor) -> None:
    """``eig [matrices, r]`` (any order) against float64 SVD of ``P`` (bound in the docstring)."""
    s = np.linalg.svd(P.double().numpy(), compute_uv=False)  # [matrices, r], descending
    got = np.sort(eig.numpy(), axis=-1)[:, ::-1]
    trace = (P.double() ** 2).sum(dim=(-2, -1)).numpy()[:, None]
    worst = float((np.abs(got - s**2) / np.maximum(trace, 1e-300)).max())
    assert worst <= 1e-13, worst


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 13, 16, 31, 47, 64, 100, 128])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_square_attention_matrices_match_float64_svd(n, dtype):
    P = softmax_rows(11, n, n, seed=n).to(dtype)  # 11: one full group of 8 and a partial one
    assert_eigenvalues_match(P, kernel_eigenvalues(P))


@pytest.mark.parametrize("shape", [(7, 12), (12, 7), (1, 9), (9, 1), (3, 40), (40, 3)])
def test_rectangular_matrices_use_the_smaller_side(shape):
    P = softmax_rows(5, *shape, seed=sum(shape))
    eig = kernel_eigenvalues(P)
    assert eig.shape == (5, min(shape))
    assert_eigenvalues_match(P, eig)


def test_known_spectra():
    n = 9
    identity = torch.eye(n)  # s = 1 (n times): a diagonal Gram, nothing to reduce
    uniform = torch.full((n, n), 1.0 / n)  # rank one: s_1 = 1, the rest 0
    permutation = torch.eye(n)[torch.randperm(n, generator=torch.Generator().manual_seed(1))]
    blocks = torch.block_diag(torch.full((4, 4), 0.25), torch.eye(5))  # splits in the middle
    repeated = torch.block_diag(*[torch.tensor([[0.5, 0.5], [0.5, 0.5]])] * 4, torch.ones(1, 1))
    P = torch.stack([identity, uniform, permutation, blocks, repeated])
    s = kernel_eigenvalues(P).clamp_min(0).sqrt().sort(dim=-1, descending=True).values
    expected = torch.tensor([
        [1.0] * n,
        [1.0] + [0.0] * (n - 1),
        [1.0] * n,
        [1.0] * 6 + [0.0] * 3,
        [1.0] * 5 + [0.0] * 4,
    ], dtype=torch.float64)
    torch.testing.assert_close(s, expected, rtol=0, atol=3e-7)  # sqrt(1e-13 * n) bound


def test_each_matrix_is_computed_as_if_alone():
    """Matrices are interleaved LANES at a time; a lane never reads another lane, so a
    matrix's values are bit-identical whatever its neighbours and its place in the batch."""
    P = softmax_rows(19, 23, 23, seed=3)
    together = kernel_eigenvalues(P)
    for t in (0, 7, 8, 18):
        assert torch.equal(kernel_eigenvalues(P[t:t + 1]), together[t:t + 1])
    shuffled = kernel_eigenvalues(P.flip(0))
    assert torch.equal(shuffled.flip(0), together)


def test_a_matrix_with_nan_comes_back_nan_and_spares_its_neighbours():
    P = softmax_rows(9, 6, 6, seed=4)
    P[2, 1, 1] = float("nan")
    eig = kernel_eigenvalues(P)
    assert torch.isnan(eig[2]).all()
    keep = [t for t in range(9) if t != 2]
    assert torch.equal(eig[keep], kernel_eigenvalues(P[keep]))


def test_wrong_buffer_sizes_are_refused():
    from attnlens.measures.spectrum import _spectral_kernel

    src = np.zeros((2, 3, 3), dtype=np.float32)
    with pytest.raises(ValueError, match=r"src holds 72 bytes, not 108"):
        _spectral_kernel.gram_eigenvalues(src, np.zeros((3, 3)), 3, 3, 3, False)
    with pytest.raises(ValueError, match=r"out holds 32 bytes, not 48"):
        _spectral_kernel.gram_eigenvalues(src, np.zeros((2, 2)), 2, 3, 3, False)


def test_kernel_and_lapack_paths_agree():
    P = softmax_rows(40, 37, 37, seed=6)
    kernel = singular_values(P, "kernel")
    lapack = singular_values(P, "gram64")
    # both within sqrt(1e-13 * 37) s_1 of the exact values (module docstring)
    torch.testing.assert_close(kernel, lapack, rtol=0, atol=4e-6)
    curve_gap = (spectral.cumulative_curve(kernel) - spectral.cumulative_curve(lapack)).abs()
    assert float(curve_gap.max()) < 1e-6


def test_auto_falls_back_to_lapack_without_the_kernel(monkeypatch):
    P = softmax_rows(4, 10, 10, seed=7)
    monkeypatch.setattr(spectral, "_spectral_kernel", None)
    assert not kernel_available()
    torch.testing.assert_close(singular_values(P), singular_values(P, "gram64"), rtol=0, atol=0)
    with pytest.raises(ConfigError, match="not built"):
        singular_values(P, "kernel")


def test_auto_leaves_large_matrices_to_lapack(monkeypatch):
    """Above KERNEL_MAX_R the blocked LAPACK solver is faster and needs less memory."""
    calls = []
    original = spectral.kernel_eigenvalues
    monkeypatch.setattr(spectral, "kernel_eigenvalues",
                        lambda P: calls.append(P.shape) or original(P))
    monkeypatch.setattr(spectral, "KERNEL_MAX_R", 6)
    singular_values(softmax_rows(2, 6, 9, seed=8))
    assert calls == [(2, 6, 9)]
    singular_values(softmax_rows(2, 7, 9, seed=8))  # r = 7 > 6: LAPACK
    assert calls == [(2, 6, 9)]
