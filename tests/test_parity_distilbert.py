"""Parity with Hugging Face DistilBERT (eager, fp32) on tiny random models."""

from __future__ import annotations

import pytest

from tests.parity_utils import VOCAB, padded_batch, tiny_parity


@pytest.mark.parametrize(
    "architecture",
    ["DistilBertModel", "DistilBertForMaskedLM", "DistilBertForSequenceClassification"],
)
@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_tiny_distilbert_parity(architecture, activation, tmp_path):
    import transformers

    config = transformers.DistilBertConfig(
        vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64, num_labels=3,
        max_position_embeddings=40, activation=activation,
    )
    model_cls = getattr(transformers, architecture)
    _, ours, _ = tiny_parity(model_cls, config, tmp_path, padded_batch(), architecture)
    assert ours.cfg.n_token_types == 0
