"""Parity with Hugging Face RoBERTa (eager, fp32) on tiny random models."""

from __future__ import annotations

import pytest
import torch

from tests.parity_utils import TINY, TINY_TOL, VOCAB, padded_batch, tiny_parity

PAD = 1  # RoBERTa's padding id; positions start at PAD + 1 and skip padding


def roberta_config(**overrides):
    from transformers import RobertaConfig

    base = dict(vocab_size=VOCAB, pad_token_id=PAD, type_vocab_size=1, num_labels=3,
                max_position_embeddings=40, **TINY)
    base.update(overrides)
    return RobertaConfig(**base)


@pytest.mark.parametrize(
    "architecture", ["RobertaModel", "RobertaForMaskedLM", "RobertaForSequenceClassification"]
)
def test_tiny_roberta_parity(architecture, tmp_path):
    import transformers

    model_cls = getattr(transformers, architecture)
    batch = padded_batch(pad_id=PAD)
    _, ours, _ = tiny_parity(model_cls, roberta_config(), tmp_path, batch, architecture)
    assert ours.cfg.positions_skip_padding and ours.cfg.position_offset == PAD


def test_positions_skip_padding_like_hf(tmp_path):
    """Left-padded inputs: RoBERTa numbers real tokens from PAD + 1 wherever they start."""
    from transformers import RobertaModel

    batch = padded_batch(pad_id=PAD)
    ids = batch.input_ids.flip(1)  # padding now on the left
    mask = batch.attention_mask.flip(1)
    hf, ours, _ = tiny_parity(RobertaModel, roberta_config(), tmp_path, batch, "roberta")
    with torch.no_grad():
        a = ours(input_ids=ids, attention_mask=mask)
        b = hf(input_ids=ids, attention_mask=mask).last_hidden_state
    assert float((a - b).abs()[mask.bool()].max()) <= TINY_TOL  # see parity_utils (<= 2.6e-6)
    positions = ours.positions(ids, tuple(ids.shape), ids.device)
    assert positions[2].tolist() == [PAD] * 6 + [PAD + 1, PAD + 2, PAD + 3]
