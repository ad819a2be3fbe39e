"""What a rank-``k`` attention would cost: truncation errors and Linformer's projection error.

For ``P [..., m, n]`` (queries x keys), ``V [..., n, d_head_v]`` and ``k`` in ``ks``:

- ``p_error``: ``||P - P_k||_F / ||P||_F = sqrt(sum_{i>k} s_i^2 / sum_i s_i^2)`` for the best
  rank-``k`` approximation ``P_k`` (Eckart-Young);
- ``output_error``: ``||P V - P_k V||_F / ||P V||_F``, the error the same truncation induces in
  the head's output, exact from the left singular vectors ``U``: ``P V - P_k V = U_{>k}
  U_{>k}^T P V``;
- ``linformer_error``: the root-mean-square relative error of Linformer's random projection
  of the context, ``||P E^T E V - P V||_F / ||P V||_F``, over Gaussian ``E [k, n]`` with
  entries ``N(0, 1/k)``. That scaling makes ``E^T E`` an unbiased estimate of the identity,
  so ``P E^T E V`` is an unbiased estimator of ``P V`` (Wang et al. 2020, Theorem 1: the
  argument that attention is low rank). Its mean square has a closed form
  (``linformer_rms_error``), so no projection is drawn and the value does not depend on a
  seed or on batching: ``sqrt((1 + ||P||_F^2 ||V||_F^2 / ||P V||_F^2) / k)``. It is at least
  ``sqrt(2 / k)``; it is small when ``P V`` keeps the norm of its inputs (sharp heads that
  copy one value) and large when averaging cancels values out.
"""

from __future__ import annotations

import torch

from attnlens.measures.spectrum.singular_values import lapack_single_thread


def tail_share(energies: torch.Tensor, ks: list[int]) -> torch.Tensor:
    """``sqrt(sum_{i>k} e_i / sum_i e_i)`` per ``k`` for descending ``energies [..., r]``."""
    total = energies.sum(dim=-1, keepdim=True)
    # tails[..., j] = sum_{i >= j} e_i (0-based), so the tail after the first k is tails[k].
    tails = energies.flip(-1).cumsum(-1).flip(-1)
    tails = torch.nn.functional.pad(tails, (0, 1))  # tails[..., r] = 0
    chosen = tails[..., ks]
    ratio = torch.where(total > 0, chosen / total.clamp_min(1e-300), torch.zeros_like(chosen))
    return ratio.clamp_min(0).sqrt()


def truncation_errors(
    P: torch.Tensor, V: torch.Tensor, ks: list[int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Singular values, rank-``k`` errors of ``P`` and of the output ``P V``, in float64.

    ``P [..., m, n]``, ``V [..., n, d_head_v]``. Returns ``s [..., r]`` (``r = min(m, n)``),
    ``p_error [..., K]`` and ``output_error [..., K]`` for ``K = len(ks)``.
    """
    r = min(P.shape[-2], P.shape[-1])
    P64 = P.double()
    with lapack_single_thread(P.device):
        eig, U = torch.linalg.eigh(P64 @ P64.mT)  # ascending; U [..., m, m] columns
    eig, U = eig.flip(-1).clamp_min(0), U.flip(-1)  # descending; beyond r only rounding
    out = P64 @ V.double()  # [..., m, d_head_v]
    coords = U.mT @ out  # [..., m, d_head_v]: the output in the left singular basis
    row_energy = (coords**2).sum(dim=-1)  # [..., m]
    return eig[..., :r].sqrt(), tail_share(eig[..., :r], ks), tail_share(row_energy, ks)


def linformer_rms_error(P: torch.Tensor, V: torch.Tensor, ks: list[int]) -> torch.Tensor:
    """RMS relative error of ``P E^T E V`` as an estimate of ``P V``, per ``k``: ``[..., K]``.

    ``P [..., m, n]``, ``V [..., n, d_head_v]``. With ``E``'s rows ``g_l^T / sqrt(k)``,
    ``g_l ~ N(0, I_n)``, ``P E^T E V`` is the mean of ``k`` independent copies of
    ``X = P g g^T V`` with ``E X = P V`` and, by Isserlis' theorem, ``E ||X||_F^2 =
    ||P||_F^2 ||V||_F^2 + 2 ||P V||_F^2``; so ``E ||P E^T E V - P V||_F^2 =
    (||P||_F^2 ||V||_F^2 + ||P V||_F^2) / k``. Float64; NaN where ``P V = 0``.
    """
    P64, V64 = P.double(), V.double()
    p2 = (P64**2).sum(dim=(-2, -1))
    v2 = (V64**2).sum(dim=(-2, -1))
    out2 = ((P64 @ V64) ** 2).sum(dim=(-2, -1))
    ratio = torch.where(out2 > 0, p2 * v2 / out2.clamp_min(1e-300), torch.nan)  # [...]
    k = torch.tensor(ks, dtype=torch.float64, device=P.device)
    return torch.sqrt((1 + ratio[..., None]) / k)
