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


def t5_config(**overrides):
    from transformers import T5Config

    # d_kv * heads (64) != d_model (32); few buckets and a short maximum distance, so that the
    # logarithmic buckets and the last shared bucket occur within the batch's lengths.
    base = dict(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2,
                num_decoder_layers=3, num_heads=4, relative_attention_num_buckets=8,
                relative_attention_max_distance=6, decoder_start_token_id=0)
    return T5Config(**{**base, **overrides})


T5_CASES = [
    ("T5ForConditionalGeneration", {}),  # v1.0: ReLU MLP, tied head, output scaled
    ("T5ForConditionalGeneration", dict(feed_forward_proj="gated-gelu",
                                        tie_word_embeddings=False)),  # v1.1
    ("T5Model", dict(feed_forward_proj="gated-gelu")),
]


@pytest.mark.parametrize(("architecture", "overrides"), T5_CASES)
def test_tiny_t5_parity(architecture, overrides, tmp_path):
    import transformers

    config = t5_config(**overrides)
    hf = save_and_reload(getattr(transformers, architecture), config, tmp_path)
    ours = load_model(tmp_path)
    assert ours.cfg.source["architecture"] == architecture
    v11 = "feed_forward_proj" in overrides
    assert ours.encoder.cfg.gated_mlp == v11
    assert ours.encoder.cfg.act == ("gelu_new" if v11 else "relu")
    assert ours.cfg.head_input_scale == (1.0 if "tie_word_embeddings" in overrides else 32**-0.5)
    assert ours.encoder.blocks[0].attn.scale == 1.0
    check_seq2seq_parity(hf, ours, seq2seq_batch(config.pad_token_id),
                         f"{architecture} {sorted(overrides)}")


def test_tiny_t5_encoder_model_parity(tmp_path):
    from transformers import T5EncoderModel

    from tests.parity_utils import check_parity, load_pair, padded_batch

    config = t5_config(feed_forward_proj="gated-gelu")
    hf, ours = load_pair(T5EncoderModel, config, tmp_path)
    assert not isinstance(ours, EncoderDecoderTransformer) and ours.cfg.positional == "relative"
    ours.set_use_sdpa(False)  # the reference path, as HF eager (SDPA is tested elsewhere)
    check_parity(hf, ours, padded_batch(), label="T5EncoderModel")


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("buckets", "max_distance"), [(32, 128), (8, 6), (16, 20)])
def test_t5_buckets_match_hf(bidirectional, buckets, max_distance):
    from transformers.models.t5.modeling_t5 import T5Attention

    from attnlens.model.relative import relative_position_bucket

    offsets = torch.arange(-300, 301)[None, :]  # key_pos - query_pos, both directions
    ours = relative_position_bucket(offsets, bidirectional, buckets, max_distance)
    theirs = T5Attention._relative_position_bucket(
        offsets, bidirectional=bidirectional, num_buckets=buckets, max_distance=max_distance
    )
    assert torch.equal(ours, theirs)
    assert int(ours.min()) == 0 and int(ours.max()) == buckets - 1  # every bucket reachable
    if not bidirectional:  # causal: every key after the query shares bucket 0
        assert bool((ours[offsets > 0] == 0).all())


@pytest.mark.parametrize("family", ["bart", "marian", "t5"])
def test_unused_and_misshapen_tensors_are_errors(family, tmp_path):
    import transformers
    from safetensors.torch import load_file, save_file

    from attnlens.errors import WeightMismatchError

    skip = ()
    if family == "bart":
        config, cls = bart_config(), transformers.BartForConditionalGeneration
        cross_q = "model.decoder.layers.1.encoder_attn.q_proj.weight"
    elif family == "marian":
        config, cls = marian_config(), transformers.MarianMTModel
        cross_q = "model.decoder.layers.1.encoder_attn.q_proj.weight"
        skip = ("embed_positions",)
    else:
        config, cls = t5_config(), transformers.T5ForConditionalGeneration
        cross_q = "decoder.block.1.layer.1.EncDecAttention.q.weight"
    save_and_reload(cls, config, tmp_path, skip=skip)
    file = tmp_path / "model.safetensors"
    tensors = load_file(str(file))
    save_file({**tensors, "decoder.extra.weight": torch.zeros(3)}, str(file))
    with pytest.raises(WeightMismatchError, match="not used by the converter"):
        load_model(tmp_path)
    save_file({**tensors, cross_q: tensors[cross_q][:, :-1].contiguous()}, str(file))
    with pytest.raises(WeightMismatchError, match="has shape"):
        load_model(tmp_path)


@pytest.mark.parametrize("shared_vocabulary", [True, False])
def test_marian_misshapen_embeddings_are_errors(shared_vocabulary, tmp_path):
    """Marian's own tensors: a saved sinusoidal table (optional, read when present) and, with
    a decoder vocabulary of its own, each stack's token embedding are checked for shape."""
    import transformers
    from safetensors.torch import load_file, save_file

    from attnlens.errors import WeightMismatchError

    overrides = {} if shared_vocabulary else dict(share_encoder_decoder_embeddings=False,
                                                  decoder_vocab_size=77)
    save_and_reload(transformers.MarianMTModel, marian_config(**overrides), tmp_path,
                    skip=("embed_positions",))
    file = tmp_path / "model.safetensors"
    tensors = load_file(str(file))
    n_ctx, d_model = SEQ2SEQ["max_position_embeddings"], SEQ2SEQ["d_model"]
    positions = "model.decoder.embed_positions.weight"
    save_file({**tensors, positions: torch.zeros(n_ctx, d_model)}, str(file))
    load_model(tmp_path)  # a saved table of the right shape is read
    save_file({**tensors, positions: torch.zeros(n_ctx - 1, d_model)}, str(file))
    with pytest.raises(WeightMismatchError, match="has shape"):
        load_model(tmp_path)
    embedding = "model.shared.weight" if shared_vocabulary else "model.decoder.embed_tokens.weight"
    save_file({**tensors, embedding: tensors[embedding][:-1].contiguous()}, str(file))
    with pytest.raises(WeightMismatchError, match="has shape"):
        load_model(tmp_path)


def test_models_verify_measures_the_encoder_decoder_families():
    """`attnlens models --verify` builds each family's tiny model (T5EncoderModel included)."""
    from attnlens.cli.app import app
    from typer.testing import CliRunner

    from attnlens.loaders.registry import CONVERTERS
    from tests.parity_utils import TINY_TOL

    result = CliRunner().invoke(app, ["models", "--verify", "--markdown",
                                      "--family", "bart,marian,t5"])
    assert result.exit_code == 0, result.output
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in result.output.strip().splitlines()[2:]]
    expected = [a for family in ("bart", "marian", "t5") for a in CONVERTERS[family].architectures]
    assert [r[2] for r in rows] == expected
    for row in rows:
        measured = [float(v) for v in row[4:7] if v != "-"]
        assert measured and all(0.0 <= v <= TINY_TOL for v in measured), row
        assert row[7] == "yes"
