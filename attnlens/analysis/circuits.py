"""Spectra of each head's factored circuits: QK (W_Q W_K^T) and OV (W_V W_O).

Singular values come from the factored view (``attn.QK``, ``attn.OV``: an ``r x r`` SVD after
two thin QRs, never the ``d_in x d_in`` product), in float64. ``effective_rank`` is
``exp(H(s / sum s))``; ``rank90`` / ``rank99`` the smallest ``k`` whose singular values hold
90 % / 99 % of ``sum s`` (the same energy as the attention spectrum).
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
from attnlens.model.transformer import HookedTransformer

CIRCUITS = ("QK", "OV")


def circuit_singular_values(model: HookedTransformer, circuit: str) -> list[torch.Tensor]:
    """Per layer, ``[head, r]`` singular values (float64, descending) of ``circuit``."""
    if circuit not in CIRCUITS:
        raise ConfigError(f"unknown circuit {circuit!r}; use one of {CIRCUITS}.")
    with torch.no_grad(), lapack_single_thread(model.device):
        return [getattr(block.attn, circuit).svdvals().double() for block in model.blocks]


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
