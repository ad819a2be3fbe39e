"""Marian converter (MarianModel, MarianMTModel): BART's layers with fixed sinusoidal positions.

Differences from BART: token embeddings are multiplied by ``sqrt(d_model)``
(``scale_embedding``), positions are a fixed sinusoidal table numbered from 0 (sines in the
first half of each vector, cosines in the second; absent from most checkpoints, so it is
rebuilt here exactly as Hugging Face builds it), the embedding sum is not normalised, and the
decoder may have its own vocabulary (``share_encoder_decoder_embeddings=false``), in which
case the LM head is tied to the decoder's embedding.
"""

from __future__ import annotations

import numpy as np
import torch

from attnlens.loaders.bart import (
    check_seq2seq_config,
    check_tied,
    convert_layers,
    convert_lm_head,
    export_layers,
    stack_configs,
    stack_fields,
    take_tied_copy,
)
from attnlens.loaders.weights import WeightReader
from attnlens.model.encoder_decoder import EncoderDecoderConfig

HEAD_BY_ARCHITECTURE = {"MarianModel": None, "MarianMTModel": "lm"}
ARCHITECTURE_BY_HEAD = {head: arch for arch, head in HEAD_BY_ARCHITECTURE.items()}


def sinusoidal_table(n_positions: int, dim: int) -> torch.Tensor:
    """``[position, dim]``: Marian's table (HF ``MarianSinusoidalPositionalEmbedding``)."""
    pos = np.arange(n_positions, dtype=np.float64)[:, None]
    angles = pos / np.power(10000, 2 * (np.arange(dim) // 2) / dim)  # [position, dim]
    sentinel = dim // 2 if dim % 2 == 0 else dim // 2 + 1
    out = torch.empty(n_positions, dim, dtype=torch.float32)
    out[:, :sentinel] = torch.FloatTensor(np.sin(angles[:, 0::2]))
    out[:, sentinel:] = torch.FloatTensor(np.cos(angles[:, 1::2]))
    return out


def convert_marian(
    hf: dict, reader: WeightReader, architecture: str
) -> tuple[EncoderDecoderConfig, dict]:
    check_seq2seq_config(hf, "Marian")
    head = HEAD_BY_ARCHITECTURE[architecture]
    n_ctx = hf["max_position_embeddings"]
    enc, dec = stack_configs(hf, "marian", 0, False, n_ctx)
    shared_vocab = hf.get("share_encoder_decoder_embeddings", True)
    if shared_vocab:
        dec.vocab_size = enc.vocab_size
    cfg = EncoderDecoderConfig(
        encoder=enc, decoder=dec, vocab_size=dec.vocab_size, head=head, lm_head_bias=head == "lm",
        decoder_start_token_id=hf.get("decoder_start_token_id", hf.get("pad_token_id", 0)),
        pad_token_id=hf.get("pad_token_id"),
        source={"model_type": "marian", "shared_vocabulary": bool(shared_vocab)},
    )
    d = cfg.d_model
    table = sinusoidal_table(n_ctx, d)
    sd: dict[str, torch.Tensor] = {}
    if shared_vocab:
        shared = reader.take("shared.weight", (enc.vocab_size, d))
    for stack, stack_cfg in (("encoder", enc), ("decoder", dec)):
        name = f"{stack}.embed_tokens.weight"
        if shared_vocab:
            take_tied_copy(reader, name, shared)
            sd[f"{stack}.embed.weight"] = shared
        else:
            sd[f"{stack}.embed.weight"] = reader.take(name, (stack_cfg.vocab_size, d))
        saved = reader.take_optional(f"{stack}.embed_positions.weight", (n_ctx, d))
        sd[f"{stack}.pos_embed.weight"] = table if saved is None else saved
        sd.update(convert_layers(stack_cfg, reader, stack, stack))
    if head == "lm":
        sd.update(convert_lm_head(reader, dec.vocab_size, d, sd["decoder.embed.weight"]))
    return cfg, sd


def export_marian(cfg: EncoderDecoderConfig, state: dict) -> tuple[dict, dict]:
    """Inverse of ``convert_marian`` (the sinusoidal tables are rebuilt by the reader)."""
    shared_vocab = bool(cfg.source.get("shared_vocabulary", True))
    embed = "encoder.embed.weight" if shared_vocab else "decoder.embed.weight"
    if shared_vocab:
        check_tied(state, ("encoder.embed.weight", "decoder.embed.weight"), "Marian")
    untied_head = cfg.head == "lm" and not torch.equal(state["head.decoder.weight"], state[embed])
    fields = stack_fields(cfg) | {
        "architectures": [ARCHITECTURE_BY_HEAD[cfg.head]],
        "max_position_embeddings": cfg.encoder.n_ctx,
        "decoder_vocab_size": cfg.decoder.vocab_size,
        "share_encoder_decoder_embeddings": shared_vocab,
        "tie_word_embeddings": not untied_head,
    }
    out = {}
    if shared_vocab:
        out["shared.weight"] = state["encoder.embed.weight"]
    for stack, stack_cfg in (("encoder", cfg.encoder), ("decoder", cfg.decoder)):
        if not shared_vocab:
            out[f"{stack}.embed_tokens.weight"] = state[f"{stack}.embed.weight"]
        if not torch.equal(state[f"{stack}.pos_embed.weight"],
                           sinusoidal_table(*state[f"{stack}.pos_embed.weight"].shape)):
            out[f"{stack}.embed_positions.weight"] = state[f"{stack}.pos_embed.weight"]
        out.update(export_layers(stack_cfg, state, stack, stack))
    if cfg.head is None:
        return fields, out
    tensors = {"model." + k: t for k, t in out.items()}
    tensors["final_logits_bias"] = state["head.decoder.bias"][None]  # [1, vocab]
    if untied_head:
        tensors["lm_head.weight"] = state["head.decoder.weight"]
    return fields, tensors
