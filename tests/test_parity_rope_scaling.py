"""RoPE scaling (llama3, linear, dynamic NTK, YaRN) in the Llama-family converters.

Parity with Hugging Face eager attention on tiny random Llama, Mistral and Qwen2 models whose
contexts are short enough that every variant acts on the test batch (9 tokens): llama3's three
frequency bands are all populated, YaRN's ramp is inside the rotary dimensions, and dynamic
NTK is checked on inputs shorter and longer than ``max_position_embeddings``. fp32 within
``TINY_TOL`` (1e-5: the tables are bitwise those of transformers, the remaining differences
are kernel rounding of the rest of the model, see ``attnlens.loaders.verify``); float64
within 1e-12 on the hooked path (hidden states <= ~25 have an ulp of 3.6e-15; both sides
build the rotary tables and take the softmax in float32 and cast them, so only float64
rounding of the rest remains).
"""

from __future__ import annotations

import pytest
import torch

from attnlens.errors import ConfigError, UnsupportedArchitectureError
from attnlens.loaders import load_model
from attnlens.model.attention import rotary_cos_sin
from attnlens.model.rotary import inverse_frequencies
from tests.parity_utils import (
    assert_parity,
    attnlens_outputs,
    hf_outputs,
    hf_softmax_in_input_dtype,
    max_differences,
    padded_batch,
    save_tiny,
    tiny_parity,
)
from tests.test_parity_llama import make_config

FLOAT64_TOL = 1e-12
# head_dim 16: 8 frequencies 10000 ** (-i / 8), wavelengths 6.3 .. 2.0e4 tokens.
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64, "rope_theta": 10000.0}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
        "rope_theta": 10000.0}
ROPES = {
    "llama3": LLAMA3,
    "linear": {"rope_type": "linear", "factor": 3.0, "rope_theta": 10000.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
    "yarn": YARN,
    "yarn-mscale": {**YARN, "mscale": 0.8, "mscale_all_dim": 0.5, "beta_fast": 16.0,
                    "beta_slow": 2.0},
    "yarn-untruncated": {**YARN, "truncate": False, "attention_factor": 1.3},
}
CASES = [
    ("llama", "LlamaForCausalLM", "llama3"),
    ("llama", "LlamaModel", "linear"),
    ("llama", "LlamaForCausalLM", "dynamic"),
    ("llama", "LlamaModel", "yarn"),
    ("llama", "LlamaForCausalLM", "yarn-mscale"),
    ("qwen2", "Qwen2ForCausalLM", "yarn-untruncated"),
    ("qwen2", "Qwen2Model", "dynamic"),
    ("mistral", "MistralForCausalLM", "llama3"),
]


# max_position_embeddings 8 < the 9-token batch: dynamic NTK rescales it. llama3 and YaRN get
# a context consistent with their factor (transformers warns otherwise).
CONTEXTS = {"llama3": 128, "yarn": 64, "yarn-mscale": 64, "yarn-untruncated": 64}


def rope_config(family: str, rope: str, **overrides):
    base = dict(head_dim=16, max_position_embeddings=CONTEXTS.get(rope, 8),
                rope_parameters=dict(ROPES[rope]))
    return make_config(family, **{**base, **overrides})


@pytest.mark.parametrize("rope", sorted(ROPES))
def test_rotary_tables_equal_transformers_bitwise(rope, tmp_path):
    """cos/sin of a fresh transformers rotary embedding (the state of dynamic NTK starts
    anew) against ``rotary_cos_sin``, at lengths below, at and above the context (8)."""
    from transformers import LlamaModel
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = rope_config("llama", rope)
    save_tiny(LlamaModel, config, tmp_path)
    attn = load_model(tmp_path).blocks[0].attn
    scaling = attn.rotary_scaling
    assert scaling is not None and scaling.rope_type == ROPES[rope]["rope_type"]
    plain = inverse_frequencies(16, 10000.0)
    for seq_len in (5, 8, 9, 40):
        positions = torch.arange(seq_len)[None]  # [batch, pos]
        hf_rotary = LlamaRotaryEmbedding(config)
        theirs = hf_rotary(torch.zeros(1, dtype=torch.float32), positions)
        ours = rotary_cos_sin(positions, attn.rotary_dim, attn.rotary_base, torch.float32,
                              scaling)
        for a, b in zip(ours, theirs, strict=True):
            assert torch.equal(a[:, :, 0, :], b), (rope, seq_len)
        assert scaling.attention_factor == hf_rotary.attention_scaling
        # Every variant changes the frequencies (dynamic only beyond 8 positions).
        freqs = inverse_frequencies(attn.rotary_dim, attn.rotary_base, scaling, seq_len)
        assert torch.equal(freqs, hf_rotary.inv_freq)
        changed = not torch.equal(freqs, plain)
        assert changed == (rope != "dynamic" or seq_len > 8), (rope, seq_len)


@pytest.mark.parametrize(("family", "architecture", "rope"), CASES)
def test_rope_scaling_parity(family, architecture, rope, tmp_path):
    import transformers

    config = rope_config(family, rope)
    model_cls = getattr(transformers, architecture)
    hf, ours, _ = tiny_parity(model_cls, config, tmp_path, padded_batch(), f"{architecture} {rope}")
    assert ours.cfg.rope_scaling.rope_type == ROPES[rope]["rope_type"]
    # float64: the same model, both sides cast.
    ours64 = load_model(tmp_path, dtype=torch.float64)
    # transformers' eager Llama-family attention takes its softmax in float32 even in float64;
    # attnlens keeps float64, so the reference is that eager computation with a float64
    # softmax (hf_softmax_in_input_dtype). The hooked path is the one compared.
    ours64.set_use_sdpa(False)
    batch = padded_batch()
    with hf_softmax_in_input_dtype():
        reference = hf_outputs(hf.to(torch.float64), batch)
    diffs = max_differences(attnlens_outputs(ours64, batch), reference, batch.attention_mask)
    assert_parity(diffs, FLOAT64_TOL, f"{architecture} {rope} float64")


@pytest.mark.parametrize("lengths", [(5, 3), (8, 2), (12, 9, 4)])
def test_dynamic_ntk_follows_the_input_length(lengths, tmp_path):
    """Shorter than, equal to and longer than max_position_embeddings (8), each on a fresh
    Hugging Face model (transformers caches the frequencies of the longest input seen)."""
    from transformers import LlamaModel

    tiny_parity(LlamaModel, rope_config("llama", "dynamic"), tmp_path,
                padded_batch(lengths=lengths), f"dynamic {lengths}")


def test_scaling_changes_the_model(tmp_path):
    """The parity above is not vacuous: the unscaled model differs from HF's scaled one."""
    from transformers import LlamaModel

    hf = save_tiny(LlamaModel, rope_config("llama", "yarn"), tmp_path)
    ours = load_model(tmp_path)
    ours.cfg.rope_scaling = None
    for block in ours.blocks:
        block.attn.rotary_scaling = None
    batch = padded_batch()
    diffs = max_differences(attnlens_outputs(ours, batch), hf_outputs(hf, batch),
                            batch.attention_mask)
    assert diffs["attention"] > 1e-3


def test_legacy_rope_scaling_and_top_level_fields(tmp_path):
    """``rope_scaling`` with ``type`` and a top-level ``rope_theta`` and
    ``original_max_position_embeddings``, as older config.json files have them."""
    import json

    from transformers import LlamaForCausalLM

    save_tiny(LlamaForCausalLM, rope_config("llama", "llama3"), tmp_path)
    config_file = tmp_path / "config.json"
    hf = json.loads(config_file.read_text())
    params = hf.pop("rope_parameters")
    hf["rope_theta"] = params["rope_theta"]
    hf["original_max_position_embeddings"] = 32  # overrides the one inside, as in HF
    hf["rope_scaling"] = {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    config_file.write_text(json.dumps(hf))
    model = load_model(tmp_path)
    scaling = model.cfg.rope_scaling
    assert (scaling.rope_type, scaling.original_max_positions) == ("llama3", 32)
    from transformers import AutoModelForCausalLM

    theirs = AutoModelForCausalLM.from_pretrained(str(tmp_path), attn_implementation="eager")
    assert theirs.config.rope_parameters["original_max_position_embeddings"] == 32
    from tests.parity_utils import check_parity

    check_parity(theirs.eval(), model, padded_batch(), label="legacy llama3")


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8,
          "original_max_position_embeddings": 4}, UnsupportedArchitectureError, "longrope"),
        ({"rope_type": "linear", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
         UnsupportedArchitectureError, "partial rotary"),
        ({"rope_type": "llama3", "factor": 8.0}, ConfigError, "low_freq_factor"),
    ],
)
def test_other_rope_types_are_refused_with_the_reason(params, error, match, tmp_path):
    import json

    from transformers import LlamaModel

    save_tiny(LlamaModel, make_config("llama"), tmp_path)
    config_file = tmp_path / "config.json"
    hf = json.loads(config_file.read_text())
    hf["rope_parameters"] = {"rope_theta": 10000.0, "factor": 2.0, **params}
    config_file.write_text(json.dumps(hf))
    with pytest.raises(error, match=match):
        load_model(tmp_path, backend="native")  # auto would take the hf backend


@pytest.mark.parametrize("rope", ["llama3", "yarn", "dynamic"])
def test_weight_measures_rotate_with_the_scaled_frequencies(rope, tmp_path):
    """weight_asymmetry's and circuits' rotary tables are the model's own scaled rotation
    (without YaRN's attention factor, a constant like 1 / sqrt(d_head)); 12 offsets exceed
    the context of 8, so dynamic NTK scales too."""
    from transformers import LlamaModel

    from attnlens.measures.asymmetry.weight_asymmetry import (
        offsets_for,
        rotary_tables,
        weight_asymmetry_table,
    )
    from attnlens.measures.circuits.circuits import qk_offset_singular_values

    save_tiny(LlamaModel, rope_config("llama", rope), tmp_path)
    model = load_model(tmp_path, dtype=torch.float64)
    attn = model.blocks[0].attn
    offsets = offsets_for(model, 12)  # 0 .. 11
    cos, sin, _ = rotary_tables(attn.d_head, attn.rotary_dim, attn.rotary_base, offsets,
                                attn.rotary_scaling)
    model_cos, model_sin = rotary_cos_sin(offsets[None], attn.rotary_dim, attn.rotary_base,
                                          torch.float64, attn.rotary_scaling)
    factor = attn.rotary_scaling.attention_factor
    # The model's angles are float32 (<= 11 rad, relative error 6e-8: <= 1e-6 absolute), the
    # tables' float64.
    torch.testing.assert_close(cos, model_cos[0, :, 0] / factor, rtol=0, atol=1e-5)
    torch.testing.assert_close(sin, model_sin[0, :, 0] / factor, rtol=0, atol=1e-5)
    plain_cos, _, _ = rotary_tables(attn.d_head, attn.rotary_dim, attn.rotary_base, offsets)
    assert float((plain_cos - cos).abs().max()) > 1e-3
    # Both measures read the scaled tables: dropping the scaling changes their offset rows.
    table = weight_asymmetry_table(model, offsets=12)
    spectra = qk_offset_singular_values(model, 12)
    for block in model.blocks:
        block.attn.rotary_scaling = None
    unscaled = weight_asymmetry_table(model, offsets=12)
    offset_rows = table["measure"].str.endswith("_offsets_mean")
    assert float((table["value"] - unscaled["value"])[offset_rows].abs().max()) > 1e-6
    assert (table["value"] - unscaled["value"])[~offset_rows].abs().max() == 0
    assert float((spectra[0] - qk_offset_singular_values(model, 12)[0]).abs().max()) > 1e-6
