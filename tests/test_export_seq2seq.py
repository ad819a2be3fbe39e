"""Export of encoder-decoder models back to Hugging Face: round trips through transformers."""

from __future__ import annotations

import json

import pytest
import torch

from attnlens.loaders import load_model
from attnlens.loaders.export import export_hf
from tests.seq2seq_utils import check_seq2seq_parity, save_and_reload, seq2seq_batch
from tests.test_parity_seq2seq import bart_config, marian_config, t5_config

CASES = [
    ("BartForConditionalGeneration", bart_config, {}, ()),
    ("BartModel", bart_config, dict(scale_embedding=True), ()),
    ("MarianMTModel", marian_config, {}, ("embed_positions",)),
    ("MarianMTModel", marian_config,
     dict(share_encoder_decoder_embeddings=False, decoder_vocab_size=77), ("embed_positions",)),
    ("T5ForConditionalGeneration", t5_config, {}, ()),
    ("T5ForConditionalGeneration", t5_config,
     dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False), ()),
]


@pytest.mark.parametrize(("architecture", "make_config", "overrides", "fixed"), CASES)
def test_round_trip_through_transformers(architecture, make_config, overrides, fixed, tmp_path):
    import transformers

    config = make_config(**overrides)
    save_and_reload(getattr(transformers, architecture), config, tmp_path / "src", skip=fixed)
    ours = load_model(tmp_path / "src")
    out = export_hf(ours, tmp_path / "out")
    cls = getattr(transformers, architecture)
    hf, info = cls.from_pretrained(str(out), attn_implementation="eager",
                                   output_loading_info=True)
    hf = hf.eval()
    assert list(info["missing_keys"]) == [] and list(info["unexpected_keys"]) == []
    assert list(info["mismatched_keys"]) == []
    assert json.loads((out / "config.json").read_text())["architectures"] == [architecture]
    # attnlens -> export -> transformers computes what attnlens computes ...
    batch = seq2seq_batch(config.pad_token_id,
                          target_vocab=overrides.get("decoder_vocab_size"))
    check_seq2seq_parity(hf, ours, batch, f"export {architecture} {sorted(overrides)}")
    # ... and attnlens reads the export back with identical weights.
    again = load_model(out)
    mine, theirs = ours.state_dict(), again.state_dict()
    assert list(mine) == list(theirs)
    for name, tensor in mine.items():
        assert torch.equal(tensor, theirs[name]), name


def test_t5_encoder_model_round_trip(tmp_path):
    from transformers import T5EncoderModel

    from tests.parity_utils import check_parity, padded_batch

    save_and_reload(T5EncoderModel, t5_config(feed_forward_proj="gated-gelu"), tmp_path / "src")
    ours = load_model(tmp_path / "src")
    out = export_hf(ours, tmp_path / "out")
    hf, info = T5EncoderModel.from_pretrained(str(out), attn_implementation="eager",
                                              output_loading_info=True)
    assert list(info["missing_keys"]) == [] and list(info["unexpected_keys"]) == []
    ours.set_use_sdpa(False)  # the reference path, as HF eager
    check_parity(hf.eval(), ours, padded_batch(), label="export T5EncoderModel")
