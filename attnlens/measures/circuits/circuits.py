"""Spectra of each head's factored circuits: QK (W_Q W_K^T) and OV (W_V W_O).

Singular values come from the factored view (``FactoredMatrix``: an ``r x r`` SVD after two
thin QRs, never the ``d_in x d_in`` product), in float64. ``effective_rank`` is
``exp(H(s / sum s))``; ``rank90`` / ``rank99`` the smallest ``k`` whose singular values hold
90 % / 99 % of ``sum s`` (the same energy as the attention spectrum).

Pre-norm models: the input norm's gain (and bias) is folded into ``W_Q``, ``W_K``, ``W_V``
first (``attnlens.model.folding``), so QK is the bilinear form the head applies to the
residual stream and OV the map it writes back. OV does not depend on the position.

**Rotary models** (RoPE): query ``i`` and key ``j`` meet through ``W_Q R(i - j) W_K^T``, so the
QK form depends on the relative offset. The ``QK`` rows are the form at offset 0
(``R(0) = I``); beside them, for rotary layers only, ``circuit_summary`` adds
``effective_rank_offsets_mean``, ``rank90_offsets_mean``, ``rank99_offsets_mean``,
``spectral_norm_offsets_mean`` and ``frobenius_norm_offsets_mean``: each measure computed at
every offset, then its arithmetic mean over the offsets (so the ranks' means need not be
integers, and ``frobenius_norm_offsets_mean`` is the mean of the norms, not their RMS).
``circuit_spectra`` adds rows with circuit ``QK_offsets_mean``: the mean over the offsets of
the ``i``-th largest singular value. The offsets are those of ``weight_asymmetry``:
``0 .. offsets - 1`` for causal models, ``-(offsets - 1) .. offsets - 1`` for bidirectional
ones, ``offsets = 128`` by default. Each offset is exact and cheap: with thin QRs
``W_Q = Q1 R1``, ``W_K = Q2 R2`` the form is ``Q1 (R1 R(delta) R2^T) Q2^T``, so its singular
values are those of the ``d_head x d_head`` core ``R1 R(delta) R2^T`` (float64, batched over
offsets, never a ``d_in x d_in`` product). Models without rotary embeddings get no extra
rows. The rotations use the model's own frequencies, RoPE scaling included
(``weight_asymmetry.rotary_tables``).
"""

from __future__ import annotations

import pandas as pd
import torch

from attnlens.errors import ConfigError
from attnlens.measures.asymmetry.weight_asymmetry import (
    DEFAULT_OFFSETS,
    OFFSETS_SUFFIX,
    offsets_for,
    rotary_tables,
)
from attnlens.measures.spectrum.singular_values import (
    cumulative_curve,
    entropy_effective_rank,
    lapack_single_thread,
    numerical_rank,
)
from attnlens.model.attention import MultiHeadAttention
from attnlens.model.factored import FactoredMatrix
from attnlens.model.folding import FoldedWeights, folded_attention_weights
from attnlens.model.transformer import HookedTransformer

CIRCUITS = ("QK", "OV")


def circuit_matrix(model: HookedTransformer, layer: int, circuit: str) -> FactoredMatrix:
    """``layer``'s per-head QK or OV circuit, the input norm folded in (pre-norm models)."""
    attn = model.blocks[layer].attn
    folded = folded_attention_weights(model, layer)
    if not folded.folded:
        return getattr(attn, circuit)  # the module's own factored view
    dtype = attn.W_Q.dtype  # the same precision as the module's view
    if circuit == "QK":
        W_K = attn._kv_per_query_head(folded.W_K.to(dtype))
        return FactoredMatrix(folded.W_Q.to(dtype), W_K.mT)
    return FactoredMatrix(attn._kv_per_query_head(folded.W_V.to(dtype)), attn.W_O_effective())


def circuit_singular_values(model: HookedTransformer, circuit: str) -> list[torch.Tensor]:
    """Per layer, ``[head, r]`` singular values (float64, descending) of ``circuit``."""
    if circuit not in CIRCUITS:
        raise ConfigError(f"unknown circuit {circuit!r}; use one of {CIRCUITS}.")
    with torch.no_grad(), lapack_single_thread(model.device):
        return [circuit_matrix(model, layer, circuit).svdvals().double()
                for layer in range(model.n_layers)]


def rotary_qk_singular_values(
    weights: FoldedWeights, attn: MultiHeadAttention, offsets: torch.Tensor
) -> torch.Tensor:
    """Singular values ``[head, offset, r]`` (float64, descending) of ``W_Q R(delta) W_K^T``.

    ``weights``: the layer's (folded) weights; ``offsets [offset]``: relative offsets
    ``query - key``; ``r = min(d_in, d_head)``. With ``W_Q = Q1 R1`` and ``W_K = Q2 R2`` (thin
    QRs, ``R [head, r, d_head]``) the singular values are those of the core
    ``R1 R(delta) R2^T [r, r]``, and ``R1 R(delta) = R1 diag(c) + (R1 J) diag(s)`` only scales
    columns (``rotary_tables``). One batched SVD of ``[offset, r, r]`` cores per head keeps
    the memory at ``O(offsets r^2)``.
    """
    device = weights.W_Q.device
    cos, sin, J = (t.to(device) for t in rotary_tables(
        attn.d_head, attn.rotary_dim, attn.rotary_base, offsets, attn.rotary_scaling))
    with lapack_single_thread(device):
        _, R1 = torch.linalg.qr(weights.W_Q.double())  # [head, r, d_head]
        _, R2 = torch.linalg.qr(weights.W_K.double())  # [kv_head, r, d_head]
        R2 = attn._kv_per_query_head(R2)  # [head, r, d_head]
        values = []
        for r1, r2 in zip(R1, R2, strict=True):
            rotated = r1 * cos[:, None, :] + (r1 @ J) * sin[:, None, :]  # [offset, r, d_head]
            values.append(torch.linalg.svdvals(rotated @ r2.T))  # [offset, r]
    return torch.stack(values)  # [head, offset, r]


def qk_offset_singular_values(
    model: HookedTransformer, offsets: int = DEFAULT_OFFSETS
) -> list[torch.Tensor | None]:
    """Per layer, ``[head, offset, r]`` QK singular values of a rotary layer (None otherwise)."""
    deltas = offsets_for(model, offsets)
    with torch.no_grad():
        return [
            rotary_qk_singular_values(folded_attention_weights(model, layer), block.attn, deltas)
            if block.attn.rotary_dim else None
            for layer, block in enumerate(model.blocks)
        ]


def spectrum_measures(s: torch.Tensor) -> dict[str, torch.Tensor]:
    """Effective rank, rank90/99 and norms of descending singular values ``s [..., r]``."""
    curve = cumulative_curve(s)
    return {
        "effective_rank": entropy_effective_rank(s),
        "rank90": numerical_rank(curve, 0.90),
        "rank99": numerical_rank(curve, 0.99),
        "spectral_norm": s[..., 0],
        "frobenius_norm": s.norm(dim=-1),
    }


def circuit_tables(
    model: HookedTransformer, circuits=CIRCUITS, offsets: int = DEFAULT_OFFSETS
) -> dict[str, pd.DataFrame]:
    """``circuit_summary`` and ``circuit_spectra`` from one computation of the spectra (the
    rotary offsets are the costly part on large models)."""
    spectra = _circuit_spectra(model, circuits, offsets)
    return {"circuit_summary": _summary_table(*spectra),
            "circuit_spectra": _spectra_table(*spectra)}


def _circuit_spectra(model: HookedTransformer, circuits, offsets: int):
    """Per circuit its layers' singular values, and QK's per offset (rotary layers)."""
    singular = {circuit: circuit_singular_values(model, circuit) for circuit in circuits}
    per_offset = qk_offset_singular_values(model, offsets) if "QK" in circuits else None
    return singular, per_offset


def circuit_spectra(
    model: HookedTransformer, circuits=CIRCUITS, offsets: int = DEFAULT_OFFSETS
) -> pd.DataFrame:
    """Tidy ``layer, head, circuit, index, singular_value`` (index from 0).

    Rotary layers also get circuit ``QK_offsets_mean`` (after ``QK``): the mean over
    ``offsets`` relative offsets of each singular value (see the module docstring).
    """
    return _spectra_table(*_circuit_spectra(model, circuits, offsets))


def circuit_summary(
    model: HookedTransformer, circuits=CIRCUITS, offsets: int = DEFAULT_OFFSETS
) -> pd.DataFrame:
    """Tidy ``layer, head, circuit, measure, value``: effective rank, rank90/99, norms.

    Rotary layers' QK rows also hold ``<measure>_offsets_mean``: the mean over ``offsets``
    relative offsets of the measure at each offset (see the module docstring).
    """
    return _summary_table(*_circuit_spectra(model, circuits, offsets))


def _spectra_table(singular: dict[str, list[torch.Tensor]],
                   per_offset: list[torch.Tensor | None] | None) -> pd.DataFrame:
    records = []
    for circuit, layers_of in singular.items():
        spectra = [(circuit, layers_of)]
        if circuit == "QK" and per_offset is not None:
            spectra.append((f"QK{OFFSETS_SUFFIX}",
                            [None if s is None else s.mean(dim=1) for s in per_offset]))
        for name, layers in spectra:
            for layer, values in enumerate(layers):
                if values is None:
                    continue
                for head, row in enumerate(values.tolist()):
                    records += [
                        {"layer": layer, "head": head, "circuit": name, "index": i,
                         "singular_value": s}
                        for i, s in enumerate(row)
                    ]
    return pd.DataFrame.from_records(records)


def _summary_table(singular: dict[str, list[torch.Tensor]],
                   per_offset: list[torch.Tensor | None] | None) -> pd.DataFrame:
    records = []
    for circuit, layers in singular.items():
        offsets_of = per_offset if circuit == "QK" else None
        for layer, s in enumerate(layers):
            measures = spectrum_measures(s)
            if offsets_of is not None and offsets_of[layer] is not None:
                measures |= {f"{name}{OFFSETS_SUFFIX}": values.mean(dim=1)
                             for name, values in spectrum_measures(offsets_of[layer]).items()}
            for measure, values in measures.items():
                records += [
                    {"layer": layer, "head": head, "circuit": circuit, "measure": measure,
                     "value": float(v)}
                    for head, v in enumerate(values.tolist())
                ]
    return pd.DataFrame.from_records(records)
