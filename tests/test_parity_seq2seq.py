"""Parity with Hugging Face encoder-decoder models (eager, fp32) on tiny random models.

Each case compares, on a right-padded source batch and a right-padded target batch of other
lengths, every layer's encoder self-attention, causal decoder self-attention and (rectangular)
cross-attention probabilities, both stacks' hidden states and the logits (``seq2seq_utils``).
"""

from __future__ import annotations

import pytest
import torch

from attnlens.loaders import load_model
from attnlens.model.encoder_decoder import EncoderDecoderTransformer
from tests.parity_utils import VOCAB
from tests.seq2seq_utils import SEQ2SEQ, check_seq2seq_parity, save_and_reload, seq2seq_batch


def bart_config(**overrides):
    from transformers import BartConfig

    return BartConfig(vocab_size=VOCAB, **{**SEQ2SEQ, **overrides})


BART_CASES = [
    ("BartForConditionalGeneration", {}),
    ("BartModel", {}),
    # sqrt(d_model) embedding scale, ReLU MLP, other head counts per stack.
    ("BartForConditionalGeneration", dict(scale_embedding=True, activation_function="relu",
                                          decoder_attention_heads=2)),
]


@pytest.mark.parametrize(("architecture", "overrides"), BART_CASES)
def test_tiny_bart_parity(architecture, overrides, tmp_path):
    import transformers

    config = bart_config(**overrides)
    hf = save_and_reload(getattr(transformers, architecture), config, tmp_path)
    ours = load_model(tmp_path)
    assert isinstance(ours, EncoderDecoderTransformer)
    assert ours.cfg.source["architecture"] == architecture
    assert (ours.head is not None) == (architecture == "BartForConditionalGeneration")
    heads = overrides.get("decoder_attention_heads", 4)
    assert ours.decoder.blocks[0].attn.n_heads == heads
    assert ours.decoder.blocks[0].cross_attn.n_heads == heads
    check_seq2seq_parity(hf, ours, seq2seq_batch(config.pad_token_id),
                         f"{architecture} {sorted(overrides)}")


def marian_config(**overrides):
    from transformers import MarianConfig

    base = dict(vocab_size=VOCAB, pad_token_id=0, decoder_start_token_id=0, eos_token_id=1,
                forced_eos_token_id=1, scale_embedding=True, activation_function="swish")
    return MarianConfig(**{**base, **SEQ2SEQ, **overrides})


MARIAN_CASES = [
    ("MarianMTModel", {}),
    ("MarianModel", {}),
    # A decoder vocabulary of its own, with the LM head tied to the decoder's embedding.
    ("MarianMTModel", dict(share_encoder_decoder_embeddings=False, decoder_vocab_size=77)),
]


@pytest.mark.parametrize(("architecture", "overrides"), MARIAN_CASES)
def test_tiny_marian_parity(architecture, overrides, tmp_path):
    import transformers

    config = marian_config(**overrides)
    # The sinusoidal tables are fixed (rebuilt on load), so they are not randomised.
    hf = save_and_reload(getattr(transformers, architecture), config, tmp_path,
                         skip=("embed_positions",))
    ours = load_model(tmp_path)
    assert ours.cfg.source["architecture"] == architecture
    assert ours.encoder.cfg.act == "silu" and ours.encoder.cfg.embed_scale == 32**0.5
    target_vocab = overrides.get("decoder_vocab_size", VOCAB)
    assert ours.decoder.embed.weight.shape[0] == target_vocab
    assert ours.encoder.embed.weight.shape[0] == VOCAB
    batch = seq2seq_batch(config.pad_token_id, target_vocab=target_vocab)
    check_seq2seq_parity(hf, ours, batch, f"{architecture} {sorted(overrides)}")


def test_marian_positions_are_hf_sinusoids():
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    from attnlens.loaders.marian import sinusoidal_table

    for dim in (32, 33):  # odd widths put one more sine than cosine
        theirs = MarianSinusoidalPositionalEmbedding(50, dim).create_weight()
        assert torch.equal(sinusoidal_table(50, dim), theirs)
