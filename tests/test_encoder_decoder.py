"""The encoder-decoder model: hook names, cross-attention, head gates, decoder inputs, views."""

from __future__ import annotations

import pytest
import torch

from attnlens.data.batch import Batch
from attnlens.errors import ConfigError
from attnlens.model.config import TransformerConfig
from attnlens.model.encoder_decoder import (
    EncoderDecoderConfig,
    shift_right,
)
from attnlens.stream.attention_view import AttentionView, shift_batch
from tests.fixtures import tiny_encoder_decoder
from tests.parity_utils import padded_batch

# The stable public list of hook names (module order) of a 1-layer encoder-decoder model.
EXPECTED_HOOKS = [
    "encoder.hook_embed",
    *(f"encoder.blocks.0.attn.hook_{k}" for k in ("q", "k", "v", "scores", "pattern", "z",
                                                  "result")),
    "encoder.blocks.0.mlp.hook_pre",
    "encoder.blocks.0.mlp.hook_post",
    "encoder.blocks.0.hook_resid_pre",
    "encoder.blocks.0.hook_attn_out",
    "encoder.blocks.0.hook_resid_mid",
    "encoder.blocks.0.hook_mlp_out",
    "encoder.blocks.0.hook_resid_post",
    "decoder.hook_embed",
    *(f"decoder.blocks.0.attn.hook_{k}" for k in ("q", "k", "v", "scores", "pattern", "z",
                                                  "result")),
    *(f"decoder.blocks.0.cross_attn.hook_{k}" for k in ("q", "k", "v", "scores", "pattern", "z",
                                                        "result")),
    "decoder.blocks.0.mlp.hook_pre",
    "decoder.blocks.0.mlp.hook_post",
    "decoder.blocks.0.hook_resid_pre",
    "decoder.blocks.0.hook_attn_out",
    "decoder.blocks.0.hook_resid_mid",
    "decoder.blocks.0.hook_cross_attn_out",
    "decoder.blocks.0.hook_resid_mid_cross",
    "decoder.blocks.0.hook_mlp_out",
    "decoder.blocks.0.hook_resid_post",
]


def tiny_config(n_enc: int = 1, n_dec: int = 1, norm_position: str = "post",
                positional: str = "learned") -> EncoderDecoderConfig:
    common = dict(d_model=16, n_heads=4, d_mlp=32, vocab_size=23, n_ctx=32,
                  norm_position=norm_position, positional=positional, pad_token_id=0)
    return EncoderDecoderConfig(
        encoder=TransformerConfig(n_layers=n_enc, **common),
        decoder=TransformerConfig(n_layers=n_dec, causal=True, cross_attention=True, **common),
        vocab_size=23, head="lm", decoder_start_token_id=1, pad_token_id=0,
    )


def batches():
    src = padded_batch((7, 4, 2), vocab=23, low=2, seed=3)
    tgt = padded_batch((3, 6, 5), vocab=23, low=2, seed=4)
    return {"input_ids": src.input_ids, "attention_mask": src.attention_mask,
            "decoder_input_ids": tgt.input_ids, "decoder_attention_mask": tgt.attention_mask}


def test_hook_names_are_pinned():
    model = tiny_encoder_decoder(0, tiny_config())
    assert list(model.hook_dict) == EXPECTED_HOOKS
    # The stacks key their hooks by the same, qualified names (run_with_cache on a stack works).
    assert set(model.encoder.hook_dict) == {n for n in EXPECTED_HOOKS if n.startswith("encoder.")}


def test_decoder_only_models_keep_their_hook_names():
    """No cross-attention: the block has exactly the hooks it had before encoder-decoders."""
    from attnlens.model import HookedTransformer

    cfg = TransformerConfig(d_model=16, n_layers=1, n_heads=4, d_mlp=32, vocab_size=23)
    names = list(HookedTransformer(cfg).hook_dict)
    assert not any("cross" in n for n in names) and len(names) == 15


def test_cross_attention_shapes_and_rows():
    model = tiny_encoder_decoder(0, tiny_config(n_enc=2, n_dec=2))
    inputs = batches()
    logits, cache = model.run_with_cache(**inputs)
    assert logits.shape == (3, 6, 23)
    cross = cache["decoder.blocks.1.cross_attn.hook_pattern"]
    assert cross.shape == (3, 4, 6, 7)  # [batch, head, target_pos, source_pos]
    src = inputs["attention_mask"].bool()
    # padding keys of the source get exactly zero weight; rows sum to one
    assert float(cross.masked_select(~src[:, None, None, :]).abs().max()) == 0.0
    torch.testing.assert_close(cross.sum(-1), torch.ones(3, 4, 6), atol=1e-6, rtol=0)
    self_attn = cache["decoder.blocks.0.attn.hook_pattern"]
    assert float(self_attn.triu(1).abs().max()) == 0.0  # causal


@pytest.mark.parametrize(("norm_position", "positional"),
                         [("post", "learned"), ("pre", "learned"), ("pre", "relative")])
def test_sdpa_and_manual_paths_agree(norm_position, positional):
    model = tiny_encoder_decoder(0, tiny_config(n_enc=2, n_dec=2, norm_position=norm_position,
                                                positional=positional))
    inputs = batches()
    with torch.no_grad():
        fast = model(**inputs)
        model.set_use_sdpa(False)
        manual = model(**inputs)
    real = inputs["decoder_attention_mask"].bool()
    # fp32 logits of magnitude ~10 after 4 layers: kernels reorder sums (eps 1.2e-7 x 10 x 4
    # layers x a few reorderings), so 1e-5 bounds the SDPA/manual difference.
    assert float((fast - manual).abs()[real].max()) <= 1e-5


def test_head_gate_covers_every_attention_type():
    """Row r of head_mask is gate row r: encoder layers, decoder self, then cross layers."""
    model = tiny_encoder_decoder(0, tiny_config(n_enc=1, n_dec=2))
    inputs = batches()
    rows = model.attention_layers
    assert [r.label() for r in rows] == ["encoder.0", "decoder.0", "decoder.1", "cross.0",
                                         "cross.1"]
    assert model.n_layers == 5 and model.heads_per_layer == [4] * 5
    for row_index, row in enumerate(rows):
        mask = torch.ones(5, 4)
        mask[row_index, 2] = 0.0

        def zero_head(z, hook):
            z = z.clone()
            z[:, :, 2] = 0.0  # z [batch, pos, head, d_head]
            return z

        with torch.no_grad():
            gated = model(**inputs, head_mask=mask)
            hooked = model.run_with_hooks(**inputs,
                                          fwd_hooks=[(row.hook_prefix + "hook_z", zero_head)])
            plain = model(**inputs)
        assert torch.equal(gated, hooked), row.label()
        assert not torch.equal(gated, plain), row.label()
    assert model.gate_hook_names()[3] == "decoder.blocks.0.cross_attn.hook_z"
    with pytest.raises(ConfigError, match="one row per attention layer"):
        model(**inputs, head_mask=torch.ones(3, 4))


def test_shift_right_reads_the_source_teacher_forced():
    ids = torch.tensor([[5, 6, 7, 8], [5, 6, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    dec, dec_mask = shift_right(ids, mask, start_id=2, pad_id=0)
    assert dec.tolist() == [[2, 5, 6, 7], [2, 5, 0, 0]]  # the last real token is dropped
    assert dec_mask.tolist() == mask.tolist()  # k real tokens -> k real decoder inputs
    model = tiny_encoder_decoder(0, tiny_config())
    with torch.no_grad():
        implicit = model(ids, mask)
        explicit = model(ids, mask, decoder_input_ids=torch.tensor([[1, 5, 6, 7], [1, 5, 0, 0]]),
                         decoder_attention_mask=mask)
    assert torch.equal(implicit, explicit)


def test_views_map_names_and_batches():
    model = tiny_encoder_decoder(0, tiny_config(n_enc=2, n_dec=3))
    cross = AttentionView(model, "cross")
    assert cross.n_layers == 3 and cross.heads_per_layer == [4, 4, 4]
    assert cross.real_name("blocks.2.attn.hook_pattern") == (
        "decoder.blocks.2.cross_attn.hook_pattern")
    assert cross.real_name("blocks.0.hook_resid_pre") == "decoder.blocks.0.hook_resid_mid"
    assert cross.blocks[1].attn is model.decoder.blocks[1].cross_attn
    assert not cross.cfg.causal and AttentionView(model, "decoder").cfg.causal
    assert AttentionView(model, "encoder").real_name("blocks.1.attn.hook_z") == (
        "encoder.blocks.1.attn.hook_z")
    with pytest.raises(ConfigError, match="unknown attention type"):
        AttentionView(model, "self")
    batch = Batch(
        input_ids=torch.tensor([[3, 9, 9, 4, 0]]), attention_mask=torch.tensor([[1, 1, 1, 1, 0]]),
        word_ids=torch.tensor([[-1, 0, 0, -1, -1]]),
        special_mask=torch.tensor([[True, False, False, True, False]]),
        words=[["w"]], extra={"n_words": [1]},
    )
    shifted = shift_batch(batch, start_id=1, pad_id=0)
    assert shifted.input_ids.tolist() == [[1, 3, 9, 9, 0]]
    assert shifted.word_ids.tolist() == [[-1, -1, 0, 0, -1]]
    assert shifted.special_mask.tolist() == [[True, True, False, False, False]]
    assert shifted.extra["n_words"] == [1]
    # a word whose last token falls off the end is dropped
    cut = Batch(input_ids=torch.tensor([[3, 9, 9]]), attention_mask=torch.ones(1, 3, dtype=int),
                word_ids=torch.tensor([[-1, 0, 0]]), extra={"n_words": [1]})
    assert shift_batch(cut, 1, 0).word_ids.tolist() == [[-1, -1, -1]]
    assert shift_batch(cut, 1, 0).extra["n_words"] == [0]
