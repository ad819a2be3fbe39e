"""Lazy products ``A @ B`` whose spectra are computed without forming the product."""

from __future__ import annotations

import numpy as np
import torch


class FactoredMatrix:
    """The matrix ``A @ B`` kept as its factors ``A [..., m, r]`` and ``B [..., r, n]``.

    Singular values come from two thin QR decompositions and an ``r x r`` SVD:
    ``A = Q_a R_a``, ``B^T = Q_b R_b`` so ``A B = Q_a (R_a R_b^T) Q_b^T`` and the singular
    values of ``A B`` are those of the small core ``R_a R_b^T``. Cost ``O((m + n) r^2)``
    instead of ``O(m n r)`` plus an ``m x n`` SVD.
    """

    def __init__(self, A: torch.Tensor, B: torch.Tensor) -> None:
        if A.shape[-1] != B.shape[-2]:
            raise ValueError(f"inner dimensions differ: A {tuple(A.shape)}, B {tuple(B.shape)}")
        self.A, self.B = A, B

    @property
    def shape(self) -> tuple[int, ...]:
        # numpy's: torch.broadcast_shapes imports torch.fx's symbolic shapes (0.4 s)
        batch = torch.Size(np.broadcast_shapes(self.A.shape[:-2], self.B.shape[:-2]))
        return (*batch, self.A.shape[-2], self.B.shape[-1])

    @property
    def inner_dim(self) -> int:
        return self.A.shape[-1]

    @property
    def AB(self) -> torch.Tensor:
        """The full product (materialised)."""
        return self.A @ self.B

    @property
    def T(self) -> FactoredMatrix:
        return FactoredMatrix(self.B.transpose(-1, -2), self.A.transpose(-1, -2))

    def __getitem__(self, index: int | slice) -> FactoredMatrix:
        return FactoredMatrix(self.A[index], self.B[index])

    def __matmul__(self, other: torch.Tensor) -> FactoredMatrix:
        return FactoredMatrix(self.A, self.B @ other)

    def __rmatmul__(self, other: torch.Tensor) -> FactoredMatrix:
        return FactoredMatrix(other @ self.A, self.B)

    def _core(self) -> torch.Tensor:
        A = self.A.detach().double()
        B = self.B.detach().double()
        _, R_a = torch.linalg.qr(A)  # [..., min(m, r), r]
        _, R_b = torch.linalg.qr(B.transpose(-1, -2))  # [..., min(n, r), r]
        return R_a @ R_b.transpose(-1, -2)

    def svdvals(self) -> torch.Tensor:
        """Singular values ``[..., min(m, n, r)]``, descending (computed in float64)."""
        return torch.linalg.svdvals(self._core()).to(self.A.dtype)

    def frobenius_norm(self) -> torch.Tensor:
        return torch.linalg.matrix_norm(self._core()).to(self.A.dtype)

    def effective_rank(self) -> torch.Tensor:
        """``exp(H(s / sum s))``, the entropy effective rank of Roy & Vetterli (2007)."""
        return effective_rank(self.svdvals())

    def __repr__(self) -> str:
        return f"FactoredMatrix(shape={self.shape}, inner_dim={self.inner_dim})"


def effective_rank(singular_values: torch.Tensor) -> torch.Tensor:
    """``exp(H(p))`` with ``p = s / sum(s)`` on the last axis; zeros contribute nothing."""
    s = singular_values.double()
    p = s / s.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    entropy = -(p * torch.log(p.clamp_min(1e-300))).sum(dim=-1)
    return entropy.exp().to(singular_values.dtype)
