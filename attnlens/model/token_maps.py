"""``TokenMaps``: a model's token embedding, unembedding and final norm gain, as matrices.

What the OV copying scores (``measures.lm_heads.copying``) read besides the per-head weights.
Every model class gives them through ``token_maps()`` (the ``AttentionModel`` interface), or
raises ``TokenMapsUnavailable`` with the reason. The tensors are the model's own parameters
(detached views, not copies):

- ``embedding`` ``W_E [vocab, d_model]``: the token embedding the first layer reads (a
  constant factor such as Gemma's or BART's ``sqrt(d_model)`` is left out: it scales every
  eigenvalue alike);
- ``unembedding`` ``[vocab, d_model]`` (``W_U`` transposed): the causal-LM head's decoder, tied
  to the embedding or not; None for models without one (encoders, MLM heads, whose transform
  is non-linear), which the copying scores read in their embedding-only form;
- ``final_gain`` ``[d_model]``: the elementwise weight of the norm between the last layer and
  the unembedding (for Gemma's ``x * (1 + w)`` norms, ``1 + w``), None without a final norm.
  Its normalisation (centring, division by the per-token scale) and its bias are not part of
  the map: the copying scores fold the gain and ignore the rest, as Elhage et al. do.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attnlens.errors import AttnlensError


class TokenMapsUnavailable(AttnlensError):
    """The model's embedding, unembedding or final norm cannot be read as matrices."""


@dataclass(frozen=True)
class TokenMaps:
    """A model's token maps (module docstring); ``final_norm`` names the final norm's kind
    ("layernorm", "rmsnorm") or "none"."""

    embedding: torch.Tensor  # W_E [vocab, d_model]
    unembedding: torch.Tensor | None  # W_U^T [vocab, d_model]
    final_gain: torch.Tensor | None  # [d_model]
    final_norm: str = "none"

    def __post_init__(self) -> None:
        vocab, width = self.embedding.shape
        if self.unembedding is not None and tuple(self.unembedding.shape) != (vocab, width):
            raise TokenMapsUnavailable(
                f"the unembedding is {tuple(self.unembedding.shape)} and the token embedding "
                f"{(vocab, width)}: the copying map needs one vocabulary and one width")


def own_token_maps(embed: nn.Embedding, head: nn.Module | None, final_norm: nn.Module,
                   norm_kind: str) -> TokenMaps:
    """The token maps of attnlens' own modules: ``head`` an ``LMHead`` (its ``decoder`` is the
    unembedding) or None, ``final_norm`` a norm or ``nn.Identity``."""
    decoder = getattr(head, "decoder", None)
    gain = getattr(final_norm, "weight", None)
    return TokenMaps(
        embed.weight.detach(),
        None if decoder is None else decoder.weight.detach(),
        None if gain is None else gain.detach(),
        norm_kind if gain is not None else "none",
    )
