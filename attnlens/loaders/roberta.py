"""RoBERTa converter (RobertaModel, RobertaForMaskedLM, RobertaForSequenceClassification).

RoBERTa is BERT with three differences that matter here: positions are numbered from
``pad_token_id + 1`` and skip padding tokens, the MLM head always uses GELU, and the
classifier reads the first token through its own dense + tanh layer (no pooler).
"""

from __future__ import annotations

import dataclasses

from attnlens.loaders.bert import (
    bert_config,
    convert_embeddings,
    convert_encoder_layers,
    convert_mlm_head,
    decoder_is_tied,
    export_embeddings,
    export_encoder_layers,
    label_fields,
)
from attnlens.loaders.weights import WeightReader
from attnlens.model.config import TransformerConfig

HEAD_BY_ARCHITECTURE = {
    "RobertaModel": None,
    "RobertaForMaskedLM": "mlm",
    "RobertaForSequenceClassification": "classifier",
}
ARCHITECTURE_BY_HEAD = {None: "RobertaModel", "pooler": "RobertaModel"} | {
    head: arch for arch, head in HEAD_BY_ARCHITECTURE.items() if head is not None
}


def roberta_config(hf: dict, head: str | None) -> TransformerConfig:
    cfg = bert_config(hf, head)
    pad = hf.get("pad_token_id", 1)
    return dataclasses.replace(
        cfg,
        n_token_types=hf.get("type_vocab_size", 1),
        # Position of token t: pad_token_id + (number of real tokens up to t); pads get pad_id.
        position_offset=pad,
        positions_skip_padding=True,
        pad_token_id=pad,
        # RobertaLMHead applies GELU whatever hidden_act says; the classifier uses tanh.
        head_act="tanh" if head == "classifier" else "gelu",
        source={"model_type": "roberta"},
    )


def convert_roberta(
    hf: dict, reader: WeightReader, architecture: str
) -> tuple[TransformerConfig, dict]:
    head = HEAD_BY_ARCHITECTURE[architecture]
    if head is None and reader.has("pooler.dense.weight"):
        head = "pooler"
    cfg = roberta_config(hf, head)
    d = cfg.d_model
    sd = convert_embeddings(cfg, reader)
    sd.update(convert_encoder_layers(cfg, reader, "encoder.layer."))
    if head == "pooler":
        sd["head.dense.weight"] = reader.take("pooler.dense.weight", (d, d))
        sd["head.dense.bias"] = reader.take("pooler.dense.bias", (d,))
    elif head == "mlm":
        names = {
            "dense": "lm_head.dense",
            "norm": "lm_head.layer_norm",
            "decoder": "lm_head.decoder.weight",
            "bias": "lm_head.bias",
        }
        if reader.has("lm_head.decoder.bias"):  # the same tensor as lm_head.bias
            reader.take("lm_head.decoder.bias", (cfg.vocab_size,))
        sd.update(convert_mlm_head(cfg, reader, names, sd["embed.weight"]))
    elif head == "classifier":
        sd["head.dense.weight"] = reader.take("classifier.dense.weight", (d, d))
        sd["head.dense.bias"] = reader.take("classifier.dense.bias", (d,))
        sd["head.out.weight"] = reader.take("classifier.out_proj.weight", (cfg.n_labels, d))
        sd["head.out.bias"] = reader.take("classifier.out_proj.bias", (cfg.n_labels,))
    return cfg, sd


def export_roberta(cfg: TransformerConfig, state: dict) -> tuple[dict, dict]:
    """Inverse of ``convert_roberta``: (config.json fields, checkpoint tensors)."""
    tied = decoder_is_tied(state)
    fields = {
        "architectures": [ARCHITECTURE_BY_HEAD[cfg.head]],
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
        "tie_word_embeddings": tied if cfg.head == "mlm" else True,
        **label_fields(cfg),
    }
    base = "" if cfg.head in (None, "pooler") else "roberta."
    tensors = {base + k: v for k, v in export_embeddings(cfg, state).items()}
    layers = export_encoder_layers(cfg, state, "encoder.layer.")
    tensors.update({base + k: v for k, v in layers.items()})
    if cfg.head == "pooler":
        tensors["pooler.dense.weight"] = state["head.dense.weight"]
        tensors["pooler.dense.bias"] = state["head.dense.bias"]
    elif cfg.head == "classifier":
        tensors["classifier.dense.weight"] = state["head.dense.weight"]
        tensors["classifier.dense.bias"] = state["head.dense.bias"]
        tensors["classifier.out_proj.weight"] = state["head.out.weight"]
        tensors["classifier.out_proj.bias"] = state["head.out.bias"]
    elif cfg.head == "mlm":
        tensors["lm_head.dense.weight"] = state["head.dense.weight"]
        tensors["lm_head.dense.bias"] = state["head.dense.bias"]
        tensors["lm_head.layer_norm.weight"] = state["head.norm.weight"]
        tensors["lm_head.layer_norm.bias"] = state["head.norm.bias"]
        tensors["lm_head.bias"] = state["head.decoder.bias"]
        if not tied:
            tensors["lm_head.decoder.weight"] = state["head.decoder.weight"]
            tensors["lm_head.decoder.bias"] = state["head.decoder.bias"]
    return fields, tensors
