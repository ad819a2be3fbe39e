"""RoBERTa (RobertaModel, RobertaForMaskedLM, RobertaForSequenceClassification).

RoBERTa is BERT (``bert.BertFamily``) with three differences that matter here: positions are
numbered from ``pad_token_id + 1`` and skip padding tokens, the MLM head always uses GELU, and
the classifier reads the first token through its own dense + tanh layer (no pooler).
"""

from __future__ import annotations

import dataclasses

from attnlens.loaders.bert import BertFamily, bert_config
from attnlens.model.config import TransformerConfig

HEAD_BY_ARCHITECTURE = {
    "RobertaModel": None,
    "RobertaForMaskedLM": "mlm",
    "RobertaForSequenceClassification": "classifier",
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


ROBERTA = BertFamily(
    model_type="roberta",
    base="roberta.",
    head_by_architecture=HEAD_BY_ARCHITECTURE,
    config=roberta_config,
    mlm_names={
        "dense": "lm_head.dense",
        "norm": "lm_head.layer_norm",
        "decoder": "lm_head.decoder.weight",
        "bias": "lm_head.bias",
    },
    classifier_dense="classifier.dense",
    classifier_dense_in_base=False,
    classifier_out="classifier.out_proj",
)
