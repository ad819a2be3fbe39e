"""Spectra of each head's factored circuits: QK (W_Q W_K^T) and OV (W_V W_O).

Singular values come from the factored view (``FactoredMatrix``: an ``r x r`` SVD after two
thin QRs, never the ``d_in x d_in`` product), in float64. ``effective_rank`` is
``exp(H(s / sum s))``; ``rank90`` / ``rank99`` the smallest ``k`` whose singular values hold
90 % / 99 % of ``sum s`` (the same energy as the attention spectrum).

Pre-norm models: the input norm's gain (and bias) is folded into ``W_Q``, ``W_K``, ``W_V``
first (``attnlens.model.folding``), so QK is the bilinear form the head applies to the
residual stream and OV the map it writes back. Rotary models: QK is the form at relative
offset 0 (``R(0) = I``); other offsets rotate it (``weight_asymmetry`` averages over them).
OV does not depend on the position.
"""

from __future__ import annotations

import pandas as pd
import torch

from attnlens.analysis.spectrum import (
    cumulative_curve,
    entropy_effective_rank,
    lapack_single_thread,
    numerical_rank,
)
from attnlens.errors import ConfigError
from attnlens.model.factored import FactoredMatrix
from attnlens.model.folding import folded_attention_weights
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


def circuit_spectra(model: HookedTransformer, circuits=CIRCUITS) -> pd.DataFrame:
    """Tidy ``layer, head, circuit, index, singular_value`` (index from 0)."""
    records = []
    for circuit in circuits:
        for layer, values in enumerate(circuit_singular_values(model, circuit)):
            for head, row in enumerate(values.tolist()):
                records += [
                    {"layer": layer, "head": head, "circuit": circuit, "index": i,
                     "singular_value": s}
                    for i, s in enumerate(row)
                ]
    return pd.DataFrame.from_records(records)


def circuit_summary(model: HookedTransformer, circuits=CIRCUITS) -> pd.DataFrame:
    """Tidy ``layer, head, circuit, measure, value``: effective rank, rank90/99, norms."""
    records = []
    for circuit in circuits:
        for layer, s in enumerate(circuit_singular_values(model, circuit)):
            curve = cumulative_curve(s)
            measures = {
                "effective_rank": entropy_effective_rank(s),
                "rank90": numerical_rank(curve, 0.90),
                "rank99": numerical_rank(curve, 0.99),
                "spectral_norm": s[:, 0],
                "frobenius_norm": s.norm(dim=-1),
            }
            for measure, values in measures.items():
                records += [
                    {"layer": layer, "head": head, "circuit": circuit, "measure": measure,
                     "value": float(v)}
                    for head, v in enumerate(values.tolist())
                ]
    return pd.DataFrame.from_records(records)
