"""Copying scores of each head's OV circuit (Elhage et al. 2021), from the weights alone.

A head that copies raises the logit of the token it attends to: its token-to-token map
``M = W_E W_OV W_U`` (``[vocab, vocab]``: embedding, the head's value-output map, unembedding)
has mostly positive eigenvalues. The non-zero eigenvalues of ``M`` are those of the small
``[d_head, d_head]`` matrix ``W_O (W_U W_E) W_V`` (cyclic permutation), so no vocabulary-sized
matrix is formed. Two forms:

- ``unembedding`` (models with a causal-LM head): ``W_U`` is the LM head's decoder, with the
  final norm's gain folded in;
- ``embedding`` (no unembedding: encoders, MLM heads, whose transform is non-linear):
  ``W_U = W_E^T``, the output read against the token embeddings.

The embedding, unembedding and final gain come from the model's ``token_maps()``, the per-head
``W_V`` and ``W_O`` from its attention layers, on either backend (attnlens' own modules or a
Hugging Face model's verified weights); a model that cannot give them gets no scores and the
summary says why (``copying_unavailable``). ``W_V`` has the layer's input norm folded in
(pre-norm models, ``attnlens.model.folding``); under GQA each query head reads its key/value
head's ``W_V``. The final norm contributes its elementwise gain only; its normalisation,
positions, the embedding norm and the per-token norm scale are left out, as in Elhage et al.
The biases ``b_V``, ``b_O`` (and a LayerNorm's shift folded into ``b_V``) add the same vector
whatever the token, so they are not part of the token-to-token map.
Measures: ``copying`` = the share of the eigenvalues' magnitude ``sum |l|`` held by
eigenvalues with a positive real part (1: a pure copying head; 0.5: no preference);
``copying_ratio`` = ``Re(sum l) / sum |l|``, Elhage et al.'s summary (-1 .. 1).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from attnlens.measures.lm_heads.shares import SCORE_COLUMNS, kv_head_index, kv_heads_of
from attnlens.model.folding import attention_input_norm, fold_norm
from attnlens.model.protocol import AttentionModel, missing_parts
from attnlens.model.token_maps import TokenMapsUnavailable

COPYING_MEASURES = ("copying", "copying_ratio")
# The per-head weights the scores read (``AttentionModel.weight_problems`` parts).
NEEDED = ("OV", "norm")


def copying_unavailable(model: AttentionModel) -> str | None:
    """Why ``model`` gives no copying scores (its per-head W_V, W_O, input norms or token
    maps cannot be read as matrices), or None when it gives them."""
    missing = missing_parts(model, NEEDED)
    if missing:
        return "; ".join(f"{part}: {reason}" for part, reason in missing.items())
    try:
        model.token_maps()
    except TokenMapsUnavailable as error:
        return str(error)
    return None


def copying_form(model: AttentionModel) -> str:
    """``unembedding`` for models with a causal-LM head, else ``embedding``."""
    return "embedding" if model.token_maps().unembedding is None else "unembedding"


@torch.no_grad()
def token_gram(model: AttentionModel) -> torch.Tensor:
    """``W_U W_E [d_model, d_model]`` (float64) of the form ``copying_form`` names."""
    maps = model.token_maps()
    embed = maps.embedding.float()  # W_E [vocab, d_model]
    if maps.unembedding is not None:
        unembed = maps.unembedding.float()  # [vocab, d_model] = W_U^T
        if maps.final_gain is not None:
            unembed = unembed * maps.final_gain.float()[None, :]
    else:
        unembed = embed
    return (unembed.T @ embed).double()  # [d_model, d_model]


@torch.no_grad()
def copying_eigenvalues(model: AttentionModel, layer: int,
                        gram: torch.Tensor | None = None) -> torch.Tensor:
    """``[head, d_head_v]`` complex eigenvalues of each head's ``W_O (W_U W_E) W_V``."""
    gram = token_gram(model) if gram is None else gram
    attn = model.blocks[layer].attn
    # only W_V is read: a layer whose queries pass a q_norm (Qwen3, OLMo 2) has no linear W_Q
    W_V, _ = fold_norm(attn.W_V, None, attention_input_norm(model, layer))
    # W_V: [kv_head, d_model, d_head_v]
    W_V = W_V.repeat_interleave(attn.group_size, dim=0)  # [head, d_model, d_head_v]
    W_O = attn.W_O_effective().detach().double()  # [head, d_head_v, d_model]
    core = W_O @ gram.to(W_O.device) @ W_V  # [head, d_head_v, d_head_v]
    return torch.linalg.eigvals(core.cpu())


def copying_scores(eigenvalues: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(``copying``, ``copying_ratio``) ``[head]`` from eigenvalues ``[head, n]``."""
    size = eigenvalues.abs()
    total = size.sum(-1).clamp_min(torch.finfo(torch.float64).tiny)
    positive = (size * (eigenvalues.real > 0)).sum(-1) / total
    return positive, eigenvalues.sum(-1).real / total


def copying_table(model: AttentionModel) -> pd.DataFrame:
    """``SCORE_COLUMNS`` rows of measures ``copying`` and ``copying_ratio`` (no interval:
    weights, not samples) plus ``detail``: the form used."""
    gram = token_gram(model)
    heads, kv = model.heads_per_layer, kv_heads_of(model)
    form = copying_form(model)
    parts = []
    for layer in range(model.n_layers):
        scores = copying_scores(copying_eigenvalues(model, layer, gram))
        head = np.arange(heads[layer])
        kv_head = kv_head_index(heads, kv, np.full_like(head, layer), head)
        for measure, values in zip(COPYING_MEASURES, scores, strict=True):
            parts.append(pd.DataFrame({
                "layer": layer, "head": head, "kv_head": kv_head, "measure": measure,
                "value": values.numpy(), "ci_low": np.nan, "ci_high": np.nan,
                "n_sequences": 0, "detail": f"OV circuit, {form} form",
            }))
    return pd.concat(parts, ignore_index=True)[[*SCORE_COLUMNS, "detail"]]
