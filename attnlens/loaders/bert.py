"""The BERT-family converter (BERT; RoBERTa in ``roberta.py``), parametrised by ``BertFamily``.

One function converts (``convert_encoder_family``) and one exports
(``export_encoder_family``) every BERT-style encoder; a ``BertFamily`` holds what differs
between them: the config reader, the weights' prefix, and where the MLM head and the
classifier live in the checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from attnlens.errors import UnsupportedArchitectureError
from attnlens.loaders.weights import (
    WeightReader,
    heads_to_linear,
    heads_to_out_linear,
    linear_to_heads,
    out_linear_to_heads,
)
from attnlens.model.config import TransformerConfig

HEAD_BY_ARCHITECTURE = {
    "BertModel": None,
    "BertForMaskedLM": "mlm",
    "BertForSequenceClassification": "classifier",
}


def check_encoder_config(hf: dict) -> None:
    """Refuse BERT/RoBERTa options attnlens does not model rather than compute something else."""
    position_type = hf.get("position_embedding_type") or "absolute"
    if position_type != "absolute":
        raise UnsupportedArchitectureError(
            f"position_embedding_type={position_type!r} is not supported; attnlens models "
            "absolute learned positions only (transformers 5 dropped relative position "
            "embeddings from BERT too: it would ignore them and use absolute positions)."
        )
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise UnsupportedArchitectureError(
            "BERT-style decoders (is_decoder / add_cross_attention) are not supported; "
            "attnlens models bidirectional encoders of this family."
        )


def bert_config(hf: dict, head: str | None) -> TransformerConfig:
    check_encoder_config(hf)
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
        # BERT's classifier reads the pooler (dense + tanh); the MLM transform uses hidden_act.
        head_act="tanh" if head == "classifier" else hf.get("hidden_act", "gelu"),
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


# Export (attnlens -> Hugging Face) ------------------------------------------------------
def label_fields(cfg: TransformerConfig) -> dict:
    """``id2label``/``label2id`` for a classifier head (generic names), else nothing."""
    if cfg.head != "classifier":
        return {}
    id2label = {str(i): f"LABEL_{i}" for i in range(cfg.n_labels)}
    return {"id2label": id2label, "label2id": {v: int(k) for k, v in id2label.items()}}


def export_encoder_layers(cfg: TransformerConfig, state: dict, layer_prefix: str) -> dict:
    """Inverse of ``convert_encoder_layers``: attnlens names -> BERT/RoBERTa layer names."""
    out = {}
    for i in range(cfg.n_layers):
        src, dst = f"blocks.{i}.", f"{layer_prefix}{i}."
        for ours, theirs in (("Q", "query"), ("K", "key"), ("V", "value")):
            W = state[f"{src}attn.W_{ours}"]  # [head, d_model, d_head]
            out[f"{dst}attention.self.{theirs}.weight"] = heads_to_linear(W)
            out[f"{dst}attention.self.{theirs}.bias"] = state[f"{src}attn.b_{ours}"].reshape(-1)
        out[f"{dst}attention.output.dense.weight"] = heads_to_out_linear(state[f"{src}attn.W_O"])
        out[f"{dst}attention.output.dense.bias"] = state[f"{src}attn.b_O"]
        out[f"{dst}attention.output.LayerNorm.weight"] = state[f"{src}ln1.weight"]
        out[f"{dst}attention.output.LayerNorm.bias"] = state[f"{src}ln1.bias"]
        out[f"{dst}intermediate.dense.weight"] = state[f"{src}mlp.W_in.weight"]
        out[f"{dst}intermediate.dense.bias"] = state[f"{src}mlp.W_in.bias"]
        out[f"{dst}output.dense.weight"] = state[f"{src}mlp.W_out.weight"]
        out[f"{dst}output.dense.bias"] = state[f"{src}mlp.W_out.bias"]
        out[f"{dst}output.LayerNorm.weight"] = state[f"{src}ln2.weight"]
        out[f"{dst}output.LayerNorm.bias"] = state[f"{src}ln2.bias"]
    return out


def export_embeddings(cfg: TransformerConfig, state: dict) -> dict:
    out = {
        "embeddings.word_embeddings.weight": state["embed.weight"],
        "embeddings.position_embeddings.weight": state["pos_embed.weight"],
        "embeddings.LayerNorm.weight": state["embed_norm.weight"],
        "embeddings.LayerNorm.bias": state["embed_norm.bias"],
    }
    if cfg.n_token_types:
        out["embeddings.token_type_embeddings.weight"] = state["type_embed.weight"]
    return out


def decoder_is_tied(state: dict) -> bool:
    """Whether the output decoder is (still) the token embedding matrix."""
    decoder = state.get("head.decoder.weight")
    return decoder is not None and torch.equal(decoder, state["embed.weight"])


def encoder_fields(cfg: TransformerConfig, architecture: str) -> dict:
    """config.json fields shared by BERT and RoBERTa exports."""
    return {
        "architectures": [architecture],
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "intermediate_size": cfg.d_mlp,
        "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.n_ctx,
        "type_vocab_size": cfg.n_token_types,
        "layer_norm_eps": cfg.norm_eps,
        "hidden_act": cfg.act,
        "pad_token_id": cfg.pad_token_id,
        **label_fields(cfg),
    }


def export_encoder(cfg: TransformerConfig, state: dict, base: str) -> dict:
    """Embeddings and encoder layers, each name prefixed with ``base`` ("bert." or "")."""
    tensors = export_embeddings(cfg, state) | export_encoder_layers(cfg, state, "encoder.layer.")
    return {base + k: v for k, v in tensors.items()}


def export_mlm_head(state: dict, names: dict[str, str], tied: bool) -> dict:
    """Inverse of ``convert_mlm_head``; an untied decoder is written with its own bias."""
    out = {
        names["dense"] + ".weight": state["head.dense.weight"],
        names["dense"] + ".bias": state["head.dense.bias"],
        names["norm"] + ".weight": state["head.norm.weight"],
        names["norm"] + ".bias": state["head.norm.bias"],
        names["bias"]: state["head.decoder.bias"],
    }
    if not tied:  # untied, transformers reads the decoder's own weight and bias
        out[names["decoder"]] = state["head.decoder.weight"]
        out[names["decoder"].removesuffix("weight") + "bias"] = state["head.decoder.bias"]
    return out


# The family, parametrised ---------------------------------------------------------------
@dataclass(frozen=True)
class BertFamily:
    """What distinguishes one BERT-style family's checkpoints from another's."""

    model_type: str
    base: str  # prefix of the base model's weights in checkpoints with a head ("bert.")
    head_by_architecture: dict[str, str | None]
    config: Callable[[dict, str | None], TransformerConfig]
    mlm_names: dict[str, str]  # attnlens MLM head part (dense/norm/decoder/bias) -> name
    classifier_dense: str  # the classifier's first layer ("pooler.dense" in BERT)
    classifier_dense_in_base: bool  # whether that layer sits under ``base`` when exported
    classifier_out: str  # the classifier's output layer

    def convert(
        self, hf: dict, reader: WeightReader, architecture: str
    ) -> tuple[TransformerConfig, dict]:
        """The registry's converter for this family (``convert_encoder_family``)."""
        return convert_encoder_family(self, hf, reader, architecture)

    def export(self, cfg: TransformerConfig, state: dict) -> tuple[dict, dict]:
        """The registry's exporter for this family (``export_encoder_family``)."""
        return export_encoder_family(self, cfg, state)

    @property
    def architecture_by_head(self) -> dict[str | None, str]:
        bare = next(a for a, h in self.head_by_architecture.items() if h is None)
        return {None: bare, "pooler": bare} | {
            h: a for a, h in self.head_by_architecture.items() if h is not None
        }


def convert_encoder_family(
    family: BertFamily, hf: dict, reader: WeightReader, architecture: str
) -> tuple[TransformerConfig, dict]:
    """A BERT-style checkpoint -> (attnlens config, attnlens state dict)."""
    head = family.head_by_architecture[architecture]
    if head is None and reader.has("pooler.dense.weight"):
        head = "pooler"
    cfg = family.config(hf, head)
    d = cfg.d_model
    sd = convert_embeddings(cfg, reader)
    sd.update(convert_encoder_layers(cfg, reader, "encoder.layer."))
    if head == "pooler":
        sd["head.dense.weight"] = reader.take("pooler.dense.weight", (d, d))
        sd["head.dense.bias"] = reader.take("pooler.dense.bias", (d,))
    elif head == "mlm":
        decoder_bias = family.mlm_names["decoder"].removesuffix("weight") + "bias"
        if reader.has(decoder_bias):  # the same tensor as the head's bias
            reader.take(decoder_bias, (cfg.vocab_size,))
        sd.update(convert_mlm_head(cfg, reader, family.mlm_names, sd["embed.weight"]))
    elif head == "classifier":
        dense, out = family.classifier_dense, family.classifier_out
        sd["head.dense.weight"] = reader.take(f"{dense}.weight", (d, d))
        sd["head.dense.bias"] = reader.take(f"{dense}.bias", (d,))
        sd["head.out.weight"] = reader.take(f"{out}.weight", (cfg.n_labels, d))
        sd["head.out.bias"] = reader.take(f"{out}.bias", (cfg.n_labels,))
    return cfg, sd


def export_encoder_family(
    family: BertFamily, cfg: TransformerConfig, state: dict
) -> tuple[dict, dict]:
    """Inverse of ``convert_encoder_family``: (config.json fields, checkpoint tensors)."""
    tied = decoder_is_tied(state)
    fields = encoder_fields(cfg, family.architecture_by_head[cfg.head])
    fields["tie_word_embeddings"] = tied if cfg.head == "mlm" else True
    base = "" if cfg.head in (None, "pooler") else family.base
    tensors = export_encoder(cfg, state, base)
    if cfg.head == "pooler":
        tensors["pooler.dense.weight"] = state["head.dense.weight"]
        tensors["pooler.dense.bias"] = state["head.dense.bias"]
    elif cfg.head == "classifier":
        dense = (base if family.classifier_dense_in_base else "") + family.classifier_dense
        tensors[f"{dense}.weight"] = state["head.dense.weight"]
        tensors[f"{dense}.bias"] = state["head.dense.bias"]
        tensors[f"{family.classifier_out}.weight"] = state["head.out.weight"]
        tensors[f"{family.classifier_out}.bias"] = state["head.out.bias"]
    elif cfg.head == "mlm":
        tensors.update(export_mlm_head(state, family.mlm_names, tied))
    return fields, tensors


BERT = BertFamily(
    model_type="bert",
    base="bert.",
    head_by_architecture=HEAD_BY_ARCHITECTURE,
    config=bert_config,
    mlm_names={
        "dense": "cls.predictions.transform.dense",
        "norm": "cls.predictions.transform.LayerNorm",
        "decoder": "cls.predictions.decoder.weight",
        "bias": "cls.predictions.bias",
    },
    # BERT's classifier reads the pooler (dense + tanh), which belongs to the base model.
    classifier_dense="pooler.dense",
    classifier_dense_in_base=True,
    classifier_out="classifier",
)
