"""The token maps (``attnlens.model.token_maps``) of a Hugging Face model, verified on a probe.

The embedding is the model's ``get_input_embeddings()``; the unembedding, for a model with a
causal-LM head, its ``get_output_embeddings()`` (tied or not). The norm between the last layer
and the unembedding is found as the per-layer norms are (``checks.read_norm``): on one probe
pass, the output of the last layer (its ``hook_resid_post``) and the input of the unembedding
are captured, and a norm module outside the layers whose input and output are those two
tensors is kept only when a LayerNorm or RMSNorm (``x * w`` or Gemma's ``x * (1 + w)``) of its
weights reproduces its output. When the unembedding reads the last layer's output directly
there is no final norm; when something else sits between them (a projection, a non-linear
head, a rescaling), ``TokenMapsUnavailable`` says so instead of a guess. Steps after the
unembedding (Gemma 2's logit soft-capping: a monotone squashing) are not part of the map.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnlens.backends.hf.checks import _norm_candidates, close
from attnlens.backends.hf.discovery import _Capture
from attnlens.backends.hf.weights import linear_parts
from attnlens.model.token_maps import TokenMaps, TokenMapsUnavailable


def _embedding(hf: nn.Module, d_model: int) -> nn.Embedding:
    try:
        embedding = hf.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        embedding = None
    if not isinstance(embedding, nn.Embedding):
        raise TokenMapsUnavailable("the model has no token embedding table "
                                   "(get_input_embeddings gives no nn.Embedding)")
    if embedding.weight.shape[1] != d_model:
        raise TokenMapsUnavailable(
            f"the token embedding is {embedding.weight.shape[1]} wide and the residual stream "
            f"{d_model}: a projection sits between them")
    return embedding


def _unembedding(hf: nn.Module) -> nn.Module:
    try:
        module = hf.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        module = None
    if not isinstance(module, nn.Module) or linear_parts(module) is None:
        raise TokenMapsUnavailable("the causal-LM head has no linear unembedding "
                                   "(get_output_embeddings)")
    return module


@dataclass(frozen=True)
class TokenMapsRecipe:
    """Where a model's token maps live: the embedding, the unembedding (None: embedding-only
    form), the final norm module and which of its readings (``checks._norm_candidates``)
    reproduced it (None: no final norm)."""

    embedding: nn.Embedding
    unembedding: nn.Module | None = None
    final_norm: nn.Module | None = None
    norm_reading: int | None = None

    def read(self) -> TokenMaps:
        embedding = self.embedding.weight.detach()  # [vocab, d_model]
        if self.unembedding is None:
            return TokenMaps(embedding, None, None)
        unembedding = linear_parts(self.unembedding)[0]  # [vocab, d_model]
        if self.final_norm is None or self.norm_reading is None:
            return TokenMaps(embedding, unembedding, None)
        params = _norm_candidates(self.final_norm)[self.norm_reading]
        return TokenMaps(embedding, unembedding, params.weight.detach(), params.kind)


def _final_norm(model: Any, blocks: list, hook_name: str, unembed: nn.Module,
                probe: Callable[[nn.Module], Any]) -> tuple[nn.Module | None, int | None]:
    """(norm module, reading) between the stack's last layer (whose output fires
    ``hook_name``) and ``unembed``, from one probe pass (module docstring); (None, None)
    when the unembedding reads the last layer's output itself."""
    hf = model.hf
    inside = {m for block in blocks if block.attn.entry.block is not None
              for m in block.attn.entry.block.modules()}
    norms = [m for m in hf.modules() if m not in inside and "norm" in type(m).__name__.lower()
             and _norm_candidates(m)]
    capture = _Capture()
    capture.watch_inputs(unembed)
    for norm in norms:
        capture.watch_inputs(norm)
        capture.watch_outputs(norm)
    seen: list[torch.Tensor] = []

    def keep(x: torch.Tensor, hook) -> None:
        seen.append(x[0].detach().clone())  # [pos, d_model], batch row 0

    try:
        with torch.no_grad(), model.hooks(fwd_hooks=[(hook_name, keep)]):
            probe(hf)
    finally:
        capture.remove()
    received = capture.inputs.get(unembed, [])
    if not seen or not received or not received[-1]:
        raise TokenMapsUnavailable("the probe pass did not reach the unembedding")
    hidden, read = seen[-1], received[-1][0]  # the last layer's output, the head's input
    if close(read, hidden):
        return None, None
    for norm in norms:
        for out, ins in zip(capture.outputs.get(norm, []), capture.inputs.get(norm, []),
                            strict=False):
            if not ins or not close(out, read) or not close(ins[0], hidden):
                continue
            for index, params in enumerate(_norm_candidates(norm)):
                if close(params.apply(hidden), read):
                    return norm, index
    raise TokenMapsUnavailable(
        "what the unembedding reads is not the last layer's output through a LayerNorm or "
        "RMSNorm attnlens can reproduce (a projection, rescaling or non-linear head between)")


def token_maps_recipe(model: Any, probe: Callable[[nn.Module], Any]) -> TokenMapsRecipe:
    """Find the token maps of an ``HFAttentionModel`` (module docstring); ``probe`` a forward
    pass of the HF model (the one its layers were mapped with)."""
    hf, cfg = model.hf, model.cfg
    embedding = _embedding(hf, cfg.d_model)
    if cfg.head != "lm":
        return TokenMapsRecipe(embedding)
    unembed = _unembedding(hf)
    stack, prefix = (model.decoder, "decoder.") if model.encoder_decoder else (model, "")
    hook_name = f"{prefix}blocks.{len(stack.blocks) - 1}.hook_resid_post"
    norm, reading = _final_norm(model, list(stack.blocks), hook_name, unembed, probe)
    return TokenMapsRecipe(embedding, unembed, norm, reading)
