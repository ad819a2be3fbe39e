"""BERT family converter (BertModel, BertForMaskedLM, BertForSequenceClassification)."""

from __future__ import annotations

import torch

from attnlens.loaders.weights import WeightReader, linear_to_heads, out_linear_to_heads
from attnlens.model.config import TransformerConfig

HEAD_BY_ARCHITECTURE = {
    "BertModel": None,
    "BertForMaskedLM": "mlm",
    "BertForSequenceClassification": "classifier",
}


def bert_config(hf: dict, head: str | None) -> TransformerConfig:
    n_labels = (len(hf.get("id2label") or {}) or 2) if head == "classifier" else 0
    return TransformerConfig(
        d_model=hf["hidden_size"],
        n_layers=hf["num_hidden_layers"],
        n_heads=hf["num_attention_heads"],
        d_mlp=hf["intermediate_size"],
        vocab_size=hf["vocab_size"],
        n_ctx=hf["max_position_embeddings"],
        n_token_types=hf.get("type_vocab_size", 2),
        embed_norm=True,
        norm="layernorm",
        norm_eps=hf.get("layer_norm_eps", 1e-12),
        norm_position="post",
        act=hf.get("hidden_act", "gelu"),
        head_act=hf.get("hidden_act", "gelu"),
        pad_token_id=hf.get("pad_token_id", 0),
        head=head,
        n_labels=n_labels,
        source={"model_type": hf.get("model_type", "bert")},
    )


def convert_encoder_layers(
    cfg: TransformerConfig, reader: WeightReader, layer_prefix: str
) -> dict[str, torch.Tensor]:
    """BERT/RoBERTa encoder layers ``{layer_prefix}{i}.attention...`` -> attnlens names."""
    d, h, d_mlp = cfg.d_model, cfg.n_heads, cfg.d_mlp
    sd = {}
    for i in range(cfg.n_layers):
        src, dst = f"{layer_prefix}{i}.", f"blocks.{i}."
        for ours, theirs in (("Q", "query"), ("K", "key"), ("V", "value")):
            w = reader.take(f"{src}attention.self.{theirs}.weight", (d, d))
            b = reader.take(f"{src}attention.self.{theirs}.bias", (d,))
            sd[f"{dst}attn.W_{ours}"] = linear_to_heads(w, h)
            sd[f"{dst}attn.b_{ours}"] = b.reshape(h, d // h)
        w_o = reader.take(f"{src}attention.output.dense.weight", (d, d))
        sd[f"{dst}attn.W_O"] = out_linear_to_heads(w_o, h)
        sd[f"{dst}attn.b_O"] = reader.take(f"{src}attention.output.dense.bias", (d,))
        sd[f"{dst}ln1.weight"] = reader.take(f"{src}attention.output.LayerNorm.weight", (d,))
        sd[f"{dst}ln1.bias"] = reader.take(f"{src}attention.output.LayerNorm.bias", (d,))
        sd[f"{dst}mlp.W_in.weight"] = reader.take(f"{src}intermediate.dense.weight", (d_mlp, d))
        sd[f"{dst}mlp.W_in.bias"] = reader.take(f"{src}intermediate.dense.bias", (d_mlp,))
        sd[f"{dst}mlp.W_out.weight"] = reader.take(f"{src}output.dense.weight", (d, d_mlp))
        sd[f"{dst}mlp.W_out.bias"] = reader.take(f"{src}output.dense.bias", (d,))
        sd[f"{dst}ln2.weight"] = reader.take(f"{src}output.LayerNorm.weight", (d,))
        sd[f"{dst}ln2.bias"] = reader.take(f"{src}output.LayerNorm.bias", (d,))
    return sd


def convert_embeddings(cfg: TransformerConfig, reader: WeightReader) -> dict[str, torch.Tensor]:
    d = cfg.d_model
    sd = {
        "embed.weight": reader.take("embeddings.word_embeddings.weight", (cfg.vocab_size, d)),
        "pos_embed.weight": reader.take("embeddings.position_embeddings.weight", (cfg.n_ctx, d)),
        "embed_norm.weight": reader.take("embeddings.LayerNorm.weight", (d,)),
        "embed_norm.bias": reader.take("embeddings.LayerNorm.bias", (d,)),
    }
    if cfg.n_token_types:
        sd["type_embed.weight"] = reader.take(
            "embeddings.token_type_embeddings.weight", (cfg.n_token_types, d)
        )
    return sd


def convert_mlm_head(
    cfg: TransformerConfig, reader: WeightReader, names: dict[str, str], embed: torch.Tensor
) -> dict[str, torch.Tensor]:
    """MLM head; ``names`` maps dense/norm/decoder/bias to the checkpoint's names."""
    d, v = cfg.d_model, cfg.vocab_size
    decoder = reader.take_optional(names["decoder"], (v, d))
    return {
        "head.dense.weight": reader.take(names["dense"] + ".weight", (d, d)),
        "head.dense.bias": reader.take(names["dense"] + ".bias", (d,)),
        "head.norm.weight": reader.take(names["norm"] + ".weight", (d,)),
        "head.norm.bias": reader.take(names["norm"] + ".bias", (d,)),
        # Tied checkpoints may omit the decoder: it is the token embedding.
        "head.decoder.weight": embed if decoder is None else decoder,
        "head.decoder.bias": reader.take(names["bias"], (v,)),
    }


def convert_bert(hf: dict, reader: WeightReader, architecture: str) -> tuple[TransformerConfig, dict]:
    head = HEAD_BY_ARCHITECTURE[architecture]
    if head is None and reader.has("pooler.dense.weight"):
        head = "pooler"
    cfg = bert_config(hf, head)
    d = cfg.d_model
    sd = convert_embeddings(cfg, reader)
    sd.update(convert_encoder_layers(cfg, reader, "encoder.layer."))
    if head == "pooler":
        sd["head.dense.weight"] = reader.take("pooler.dense.weight", (d, d))
        sd["head.dense.bias"] = reader.take("pooler.dense.bias", (d,))
    elif head == "mlm":
        names = {
            "dense": "cls.predictions.transform.dense",
            "norm": "cls.predictions.transform.LayerNorm",
            "decoder": "cls.predictions.decoder.weight",
            "bias": "cls.predictions.bias",
        }
        if reader.has("cls.predictions.decoder.bias"):
            reader.take("cls.predictions.decoder.bias", (cfg.vocab_size,))
        sd.update(convert_mlm_head(cfg, reader, names, sd["embed.weight"]))
    elif head == "classifier":
        sd["head.dense.weight"] = reader.take("pooler.dense.weight", (d, d))
        sd["head.dense.bias"] = reader.take("pooler.dense.bias", (d,))
        sd["head.out.weight"] = reader.take("classifier.weight", (cfg.n_labels, d))
        sd["head.out.bias"] = reader.take("classifier.bias", (cfg.n_labels,))
    return cfg, sd
