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
    encoder_fields,
    export_encoder,
    export_mlm_head,
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


ROBERTA_MLM_NAMES = {
    "dense": "lm_head.dense",
    "norm": "lm_head.layer_norm",
    "decoder": "lm_head.decoder.weight",
    "bias": "lm_head.bias",
}


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
        if reader.has("lm_head.decoder.bias"):  # the same tensor as lm_head.bias
            reader.take("lm_head.decoder.bias", (cfg.vocab_size,))
        sd.update(convert_mlm_head(cfg, reader, ROBERTA_MLM_NAMES, sd["embed.weight"]))
    elif head == "classifier":
        sd["head.dense.weight"] = reader.take("classifier.dense.weight", (d, d))
        sd["head.dense.bias"] = reader.take("classifier.dense.bias", (d,))
        sd["head.out.weight"] = reader.take("classifier.out_proj.weight", (cfg.n_labels, d))
        sd["head.out.bias"] = reader.take("classifier.out_proj.bias", (cfg.n_labels,))
    return cfg, sd


def export_roberta(cfg: TransformerConfig, state: dict) -> tuple[dict, dict]:
    """Inverse of ``convert_roberta``: (config.json fields, checkpoint tensors)."""
    tied = decoder_is_tied(state)
    fields = encoder_fields(cfg, ARCHITECTURE_BY_HEAD[cfg.head])
    fields["tie_word_embeddings"] = tied if cfg.head == "mlm" else True
    base = "" if cfg.head in (None, "pooler") else "roberta."
    tensors = export_encoder(cfg, state, base)
    if cfg.head == "pooler":
        tensors["pooler.dense.weight"] = state["head.dense.weight"]
        tensors["pooler.dense.bias"] = state["head.dense.bias"]
    elif cfg.head == "classifier":
        tensors["classifier.dense.weight"] = state["head.dense.weight"]
        tensors["classifier.dense.bias"] = state["head.dense.bias"]
        tensors["classifier.out_proj.weight"] = state["head.out.weight"]
        tensors["classifier.out_proj.bias"] = state["head.out.bias"]
    elif cfg.head == "mlm":
        tensors.update(export_mlm_head(state, ROBERTA_MLM_NAMES, tied))
    return fields, tensors
