"""Do the heads of a layer share their query/key subspaces? (Cordonnier et al. 2020)

Per layer, singular values of:

- ``W_Q concat``: the heads' ``W_Q[h] [d_in, d_head]`` side by side, ``[d_in, heads * d_head]``;
- ``W_K concat``: the same for keys;
- ``W_QK stacked``: the heads' ``W_QK[h] = W_Q[h] W_K[h]^T [d_in, d_in]`` side by side,
  ``[d_in, heads * d_in]`` (the query-side subspace the heads read, weighted by what their
  keys do with it). Computed without forming it: with ``W_K[h] = Q_h R_h`` (thin QR),
  ``W_QK[h] = (W_Q[h] R_h^T) Q_h^T`` and ``Q_h^T`` has orthonormal rows, so the stacked matrix
  has the singular values of ``[W_Q[h] R_h^T]_h [d_in, heads * d_head]``;

against the same for each head alone (``per head``: each head's ``W_Q[h]``, ``W_K[h]``,
``W_QK[h]``). Energy here is the share of the *squared* singular values (the Frobenius
energy, as in Cordonnier et al.): ``E(k) = sum_{i<=k} s_i^2 / sum_i s_i^2``. The tables give
the number of dimensions holding 90/95/99 % of it, beside ``d_model`` and beside the sum over
heads of the per-head counts (what the concatenation would need if the heads' subspaces were
orthogonal).

Pre-norm models: the input norm is folded into ``W_Q`` and ``W_K`` first
(``attnlens.model.folding``).

**Rotary models** (RoPE): ``W_Q`` and ``W_K`` alone are exact at every offset (a rotation on
the right changes neither a column space nor its spectrum). ``W_QK`` is the form at
**relative offset 0** (``R(0) = I``), not averaged over offsets as the weight asymmetry and
the QK circuit measures are:

- what the offset leaves alone is the subspace: at offset ``delta`` head ``h`` contributes
  ``W_Q[h] R(delta) R_h^T``, whose column space is that of ``W_Q[h]`` (the ``d_head x d_head``
  factor is invertible when ``W_K[h]`` has full column rank), so the span of the heads
  together is the same at every offset; what moves is how the energy spreads inside it, and
  with it the 90/95/99 % counts of ``W_QK``;
- averaging those counts would take one eigenproblem of size ``min(d_in, heads * d_head)``
  per offset and layer, 128 times the cost of this table (4096 x 4096 per offset for a 7B
  Llama: several seconds each on 2 CPU cores, hours for the model), where every other
  per-offset measure costs ``d_head``-sized work;
- the spread of each head alone at each offset is the QK circuit's spectrum (the singular
  values of ``W_QK[h]``), and ``circuits.circuit_summary`` reports its mean over offsets.
"""

from __future__ import annotations

import pandas as pd
import torch
from einops import rearrange

from attnlens.measures.spectrum.singular_values import lapack_single_thread
from attnlens.model.attention import MultiHeadAttention
from attnlens.model.folding import NormParams, attention_input_norm, attention_weights
from attnlens.model.transformer import HookedTransformer

ENERGY_LEVELS = (0.90, 0.95, 0.99)
MATRICES = ("W_Q", "W_K", "W_QK")


def energy_curve(s: torch.Tensor) -> torch.Tensor:
    """``E(k)`` for ``k = 1..r`` from descending singular values ``s [..., r]`` (float64)."""
    sq = s.double() ** 2
    return (sq.cumsum(-1) / sq.sum(-1, keepdim=True).clamp_min(1e-300)).clamp(max=1.0)


def dims_for_energy(curve: torch.Tensor, level: float) -> torch.Tensor:
    """Smallest ``k`` with ``E(k) >= level``: ``[...]`` (int64)."""
    return ((curve < level - 1e-12).sum(-1) + 1).clamp(max=curve.shape[-1])


def head_factors(
    attn: MultiHeadAttention, norm: NormParams | None = None
) -> dict[str, torch.Tensor]:
    """Per-head matrices ``[head, d_in, r]`` whose column spaces and spectra are studied.

    ``norm``: the input norm folded in (``model.folding``). ``W_QK`` is represented by
    ``W_Q[h] R_h^T`` (same singular values, same column space).
    """
    weights = attention_weights(attn, norm)
    W_Q = weights.W_Q  # [head, d_in, d_head], float64
    W_K = attn._kv_per_query_head(weights.W_K)  # [head, d_in, d_head]
    with lapack_single_thread(W_K.device):
        _, R = torch.linalg.qr(W_K)  # W_K[h] = Q_h R_h, R [head, d_head, d_head]
    return {"W_Q": W_Q, "W_K": W_K, "W_QK": W_Q @ R.mT}


def gram_singular_values(M: torch.Tensor) -> torch.Tensor:
    """Singular values ``[..., min(m, r)]`` (descending) of ``M [..., m, r]`` via the Gram matrix.

    ``sqrt(eigvalsh(M^T M))`` (or ``M M^T``, whichever is smaller) in float64: the squared
    values, which are what the energy uses, are exact to about ``1e-16 s_1^2``.
    """
    M = M.double()
    gram = M.mT @ M if M.shape[-1] <= M.shape[-2] else M @ M.mT
    with lapack_single_thread(M.device):
        eig = torch.linalg.eigvalsh(gram)
    return eig.flip(-1).clamp_min(0).sqrt()


def layer_spectra(
    attn: MultiHeadAttention, norm: NormParams | None = None
) -> dict[str, dict[str, torch.Tensor]]:
    """Singular values ``{matrix: {"concat": [r], "per_head": [head, r_h]}}`` of one layer."""
    out = {}
    for name, per_head in head_factors(attn, norm).items():
        concat = rearrange(per_head, "head d_in r -> d_in (head r)")
        out[name] = {
            "concat": gram_singular_values(concat),
            "per_head": gram_singular_values(per_head),
        }
    return out


def shared_subspace_tables(model: HookedTransformer) -> dict[str, pd.DataFrame]:
    """``shared_subspace_dims`` and ``shared_subspace_curve`` tables for every layer.

    ``shared_subspace_dims``: ``layer, matrix, scope, energy, dims, d_model`` with ``scope``
    ``concat`` (all heads together), ``per_head_mean``, ``per_head_max`` and ``sum_of_heads``.
    ``shared_subspace_curve``: ``layer, matrix, scope (concat | per_head_mean), k, energy``.
    """
    d_model = model.cfg.d_model
    dims_rows, curve_rows = [], []
    for layer, block in enumerate(model.blocks):
        norm = attention_input_norm(model, layer)
        for matrix, spectra in layer_spectra(block.attn, norm).items():
            concat = energy_curve(spectra["concat"])  # [r]
            heads = energy_curve(spectra["per_head"])  # [head, r_h]
            for level in ENERGY_LEVELS:
                per_head = dims_for_energy(heads, level).double()
                scopes = {
                    "concat": float(dims_for_energy(concat, level)),
                    "per_head_mean": float(per_head.mean()),
                    "per_head_max": float(per_head.max()),
                    "sum_of_heads": float(per_head.sum()),
                }
                dims_rows += [
                    {"layer": layer, "matrix": matrix, "scope": scope, "energy": level,
                     "dims": value, "d_model": d_model}
                    for scope, value in scopes.items()
                ]
            for scope, curve in (("concat", concat), ("per_head_mean", heads.mean(0))):
                curve_rows += [
                    {"layer": layer, "matrix": matrix, "scope": scope, "k": k + 1, "energy": e}
                    for k, e in enumerate(curve.tolist())
                ]
    return {
        "shared_subspace_dims": pd.DataFrame.from_records(dims_rows),
        "shared_subspace_curve": pd.DataFrame.from_records(curve_rows),
    }
