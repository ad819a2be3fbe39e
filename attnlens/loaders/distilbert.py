"""DistilBERT converter (DistilBertModel, DistilBertForMaskedLM and ...ForSequenceClassification).

A post-norm BERT without token types or pooler; its classifier is dense + ReLU on the first
token, its MLM head dense + ``activation`` + LayerNorm + a decoder tied to the embeddings.
"""

from __future__ import annotations

from attnlens.loaders.bert import decoder_is_tied, label_fields
from attnlens.loaders.weights import (
    WeightReader,
    heads_to_linear,
    heads_to_out_linear,
    linear_to_heads,
    out_linear_to_heads,
)
from attnlens.model.config import TransformerConfig

HEAD_BY_ARCHITECTURE = {
    "DistilBertModel": None,
    "DistilBertForMaskedLM": "mlm",
    "DistilBertForSequenceClassification": "classifier",
}
ARCHITECTURE_BY_HEAD = {head: arch for arch, head in HEAD_BY_ARCHITECTURE.items()}
# DistilBERT hard-codes this LayerNorm epsilon everywhere.
NORM_EPS = 1e-12
# attnlens name -> DistilBERT name inside ``transformer.layer.{i}.``.
LAYER_NAMES = {
    "ln1": "sa_layer_norm",
    "ln2": "output_layer_norm",
    "mlp.W_in": "ffn.lin1",
    "mlp.W_out": "ffn.lin2",
}


def distilbert_config(hf: dict, head: str | None) -> TransformerConfig:
    n_labels = (len(hf.get("id2label") or {}) or 2) if head == "classifier" else 0
    return TransformerConfig(
        d_model=hf["dim"],
        n_layers=hf["n_layers"],
        n_heads=hf["n_heads"],
        d_mlp=hf["hidden_dim"],
        vocab_size=hf["vocab_size"],
        n_ctx=hf["max_position_embeddings"],
        n_token_types=0,
        embed_norm=True,
        norm="layernorm",
        norm_eps=NORM_EPS,
        norm_position="post",
        act=hf.get("activation", "gelu"),
        head_act="relu" if head == "classifier" else hf.get("activation", "gelu"),
        pad_token_id=hf.get("pad_token_id", 0),
        head=head,
        n_labels=n_labels,
        source={"model_type": "distilbert"},
    )


def convert_distilbert(
    hf: dict, reader: WeightReader, architecture: str
) -> tuple[TransformerConfig, dict]:
    head = HEAD_BY_ARCHITECTURE[architecture]
    cfg = distilbert_config(hf, head)
    d, h, d_mlp, v = cfg.d_model, cfg.n_heads, cfg.d_mlp, cfg.vocab_size
    sd = {
        "embed.weight": reader.take("embeddings.word_embeddings.weight", (v, d)),
        "pos_embed.weight": reader.take("embeddings.position_embeddings.weight", (cfg.n_ctx, d)),
        "embed_norm.weight": reader.take("embeddings.LayerNorm.weight", (d,)),
        "embed_norm.bias": reader.take("embeddings.LayerNorm.bias", (d,)),
    }
    shapes = {"ln1": (d,), "ln2": (d,), "mlp.W_in": (d_mlp, d), "mlp.W_out": (d, d_mlp)}
    for i in range(cfg.n_layers):
        src, dst = f"transformer.layer.{i}.", f"blocks.{i}."
        for ours in "QKV":
            w = reader.take(f"{src}attention.{ours.lower()}_lin.weight", (d, d))
            b = reader.take(f"{src}attention.{ours.lower()}_lin.bias", (d,))
            sd[f"{dst}attn.W_{ours}"] = linear_to_heads(w, h)  # [head, d_model, d_head]
            sd[f"{dst}attn.b_{ours}"] = b.reshape(h, d // h)  # [head, d_head]
        w_o = reader.take(f"{src}attention.out_lin.weight", (d, d))
        sd[f"{dst}attn.W_O"] = out_linear_to_heads(w_o, h)  # [head, d_head, d_model]
        sd[f"{dst}attn.b_O"] = reader.take(f"{src}attention.out_lin.bias", (d,))
        for ours, theirs in LAYER_NAMES.items():
            sd[f"{dst}{ours}.weight"] = reader.take(f"{src}{theirs}.weight", shapes[ours])
            sd[f"{dst}{ours}.bias"] = reader.take(f"{src}{theirs}.bias", (shapes[ours][0],))
    if head == "mlm":
        decoder = reader.take_optional("vocab_projector.weight", (v, d))
        sd.update({
            "head.dense.weight": reader.take("vocab_transform.weight", (d, d)),
            "head.dense.bias": reader.take("vocab_transform.bias", (d,)),
            "head.norm.weight": reader.take("vocab_layer_norm.weight", (d,)),
            "head.norm.bias": reader.take("vocab_layer_norm.bias", (d,)),
            # Tied checkpoints omit the projector's weight: it is the token embedding.
            "head.decoder.weight": sd["embed.weight"] if decoder is None else decoder,
            "head.decoder.bias": reader.take("vocab_projector.bias", (v,)),
        })
    elif head == "classifier":
        sd.update({
            "head.dense.weight": reader.take("pre_classifier.weight", (d, d)),
            "head.dense.bias": reader.take("pre_classifier.bias", (d,)),
            "head.out.weight": reader.take("classifier.weight", (cfg.n_labels, d)),
            "head.out.bias": reader.take("classifier.bias", (cfg.n_labels,)),
        })
    return cfg, sd


def export_distilbert(cfg: TransformerConfig, state: dict) -> tuple[dict, dict]:
    """Inverse of ``convert_distilbert``: (config.json fields, checkpoint tensors)."""
    tied = decoder_is_tied(state)
    fields = {
        "architectures": [ARCHITECTURE_BY_HEAD[cfg.head]],
        "dim": cfg.d_model,
        "n_layers": cfg.n_layers,
        "n_heads": cfg.n_heads,
        "hidden_dim": cfg.d_mlp,
        "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.n_ctx,
        "activation": cfg.act,
        "pad_token_id": cfg.pad_token_id,
        "tie_word_embeddings": tied if cfg.head == "mlm" else True,
        **label_fields(cfg),
    }
    base = "" if cfg.head is None else "distilbert."
    out = {
        "embeddings.word_embeddings.weight": state["embed.weight"],
        "embeddings.position_embeddings.weight": state["pos_embed.weight"],
        "embeddings.LayerNorm.weight": state["embed_norm.weight"],
        "embeddings.LayerNorm.bias": state["embed_norm.bias"],
    }
    for i in range(cfg.n_layers):
        src, dst = f"blocks.{i}.", f"transformer.layer.{i}."
        for ours in "QKV":
            out[f"{dst}attention.{ours.lower()}_lin.weight"] = heads_to_linear(
                state[f"{src}attn.W_{ours}"]
            )
            bias = state[f"{src}attn.b_{ours}"]  # [head, d_head]
            out[f"{dst}attention.{ours.lower()}_lin.bias"] = bias.reshape(-1)
        out[f"{dst}attention.out_lin.weight"] = heads_to_out_linear(state[f"{src}attn.W_O"])
        out[f"{dst}attention.out_lin.bias"] = state[f"{src}attn.b_O"]
        for ours, theirs in LAYER_NAMES.items():
            out[f"{dst}{theirs}.weight"] = state[f"{src}{ours}.weight"]
            out[f"{dst}{theirs}.bias"] = state[f"{src}{ours}.bias"]
    tensors = {base + k: v for k, v in out.items()}
    if cfg.head == "mlm":
        tensors["vocab_transform.weight"] = state["head.dense.weight"]
        tensors["vocab_transform.bias"] = state["head.dense.bias"]
        tensors["vocab_layer_norm.weight"] = state["head.norm.weight"]
        tensors["vocab_layer_norm.bias"] = state["head.norm.bias"]
        tensors["vocab_projector.bias"] = state["head.decoder.bias"]
        if not tied:
            tensors["vocab_projector.weight"] = state["head.decoder.weight"]
    elif cfg.head == "classifier":
        tensors["pre_classifier.weight"] = state["head.dense.weight"]
        tensors["pre_classifier.bias"] = state["head.dense.bias"]
        tensors["classifier.weight"] = state["head.out.weight"]
        tensors["classifier.bias"] = state["head.out.bias"]
    return fields, tensors
