"""Sliding-window attention (Mistral, Qwen2 with windowed and alternating layers).

Inputs longer than the window (9 tokens against windows of 1 to 4) must match Hugging Face
eager attention: fp32 within ``TINY_TOL`` (1e-5, kernel rounding of the rest of the model; the
window is a mask, exact), float64 within 1e-12 (values <= ~25, ulp 3.6e-15). The window is a
per-layer mask, identical on the manual (hooked) and SDPA paths, and no extra mask is built
where no window applies.
"""

from __future__ import annotations

import pytest
import torch

from attnlens.errors import ConfigError, UnsupportedArchitectureError
from attnlens.loaders import load_model
from attnlens.model import HookedTransformer
from attnlens.model.attention import additive_attention_mask
from tests.parity_utils import (
    TINY_TOL,
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

CASES = [
    # Mistral: every layer uses the window.
    ("mistral", "MistralForCausalLM", dict(sliding_window=4), 4, [0, 1]),
    ("mistral", "MistralModel", dict(sliding_window=1), 1, [0, 1]),
    # Qwen2: layers from max_window_layers on (layer_types derived by the config class).
    ("qwen2", "Qwen2ForCausalLM",
     dict(use_sliding_window=True, sliding_window=3, max_window_layers=1), 3, [1]),
    # Alternating layers (Gemma-style layer_types): layer 0 windowed, layer 1 full.
    ("qwen2", "Qwen2Model",
     dict(use_sliding_window=True, sliding_window=2,
          layer_types=["sliding_attention", "full_attention"]), 2, [0]),
]
IDS = ["mistral-4", "mistral-1", "qwen2-max-window-layers", "qwen2-alternating"]


@pytest.mark.parametrize(("family", "architecture", "overrides", "window", "layers"), CASES,
                         ids=IDS)
def test_sliding_window_parity(family, architecture, overrides, window, layers, tmp_path):
    import transformers

    config = make_config(family, **overrides)
    batch = padded_batch()  # lengths 9, 6, 3: longer than every window here
    hf, ours, _ = tiny_parity(getattr(transformers, architecture), config, tmp_path, batch,
                              f"{architecture} window {window}")
    assert [ours.cfg.layer_window(i) for i in range(2)] == [
        window if i in layers else None for i in range(2)
    ]
    # The window is really applied: a windowed layer puts exactly 0 on keys too far back,
    # a full layer does not.
    _, cache = ours.run_with_cache(**batch.inputs())
    query, key = torch.meshgrid(torch.arange(9), torch.arange(9), indexing="ij")
    too_far = (query - key >= window)  # [query_pos, key_pos]
    for layer in range(2):
        far = cache["pattern", layer][0][:, too_far]  # first sequence: 9 real tokens
        assert bool((far == 0).all()) == (layer in layers), layer
    ours64 = load_model(tmp_path, dtype=torch.float64)
    # attnlens runs a float64 model's softmax in float64; transformers' eager attention takes
    # it in float32 even in float64, so the reference runs with that upcast undone
    # (hf_softmax_in_input_dtype). The hooked path is compared (the SDPA path is float64 too).
    ours64.set_use_sdpa(False)
    # Every padding query's window reaches a real key here: a query whose window holds only
    # padding has no defined pattern (transformers gives NaN there in float64).
    batch64 = padded_batch(lengths=(9, 10 - window))
    with hf_softmax_in_input_dtype():
        reference = hf_outputs(hf.to(torch.float64), batch64)
    diffs = max_differences(attnlens_outputs(ours64, batch64), reference,
                            batch64.attention_mask)
    assert_parity(diffs, FLOAT64_TOL, f"{architecture} window {window} float64")
    # attnlens stays finite where every key of a padding query is masked.
    assert bool(attnlens_outputs(ours64, batch).hidden[-1].isfinite().all())


def test_manual_and_sdpa_paths_agree_with_a_window(tmp_path):
    from transformers import Qwen2Model

    config = make_config("qwen2", use_sliding_window=True, sliding_window=3,
                         layer_types=["sliding_attention", "full_attention"])
    save_tiny(Qwen2Model, config, tmp_path)
    model = load_model(tmp_path)
    batch = padded_batch()
    real = batch.attention_mask.bool()
    with torch.no_grad():
        model.set_use_sdpa(True)
        fast = model(**batch.inputs())
        model.set_use_sdpa(False)
        manual = model(**batch.inputs())
    # Same mask and weights, two kernels: fp32 rounding of values <= ~25 (as TINY_TOL).
    assert float((fast - manual).abs()[real].max()) <= TINY_TOL
    # A window left out would change the outputs by far more than that.
    model.cfg.sliding_window_layers = [1]
    with torch.no_grad():
        moved = model(**batch.inputs())
    assert float((moved - manual).abs()[real].max()) > 1e-3


def test_no_extra_mask_where_no_window_applies():
    from tests.helpers import tiny_config

    cfg = tiny_config(causal=True, positional="rotary", n_layers=3, sliding_window=4,
                      sliding_window_layers=[1])
    model = HookedTransformer(cfg)
    mask = additive_attention_mask(None, 6, 6, True, torch.float32, "cpu")
    masks = model.layer_masks(mask, 6)
    assert masks[0] is mask and masks[2] is mask  # full layers: the shared mask itself
    assert masks[1] is not mask
    # Inputs no longer than the window: every layer shares the one mask.
    short = additive_attention_mask(None, 4, 4, True, torch.float32, "cpu")
    assert all(m is short for m in model.layer_masks(short, 4))
    # Row 5 keeps keys 2..5 of a window of 4.
    assert (masks[1][0, 0, 5] == 0).tolist() == [False, False, True, True, True, True]


def test_window_needs_a_causal_model():
    from tests.helpers import tiny_config

    with pytest.raises(ConfigError, match="causal"):
        tiny_config(sliding_window=4)
    with pytest.raises(ConfigError, match="sliding_window_layers"):
        tiny_config(causal=True, sliding_window=4, sliding_window_layers=[7])


def test_qwen2_without_use_sliding_window_has_no_window(tmp_path):
    from transformers import Qwen2Model

    save_tiny(Qwen2Model, make_config("qwen2", use_sliding_window=False, sliding_window=3),
              tmp_path)
    assert load_model(tmp_path).cfg.sliding_window is None


def test_unknown_layer_types_are_refused(tmp_path):
    import json

    from transformers import Qwen2Model

    save_tiny(Qwen2Model, make_config("qwen2", use_sliding_window=True, sliding_window=3),
              tmp_path)
    config_file = tmp_path / "config.json"
    hf = json.loads(config_file.read_text())
    hf["layer_types"] = ["chunked_attention", "full_attention"]
    config_file.write_text(json.dumps(hf))
    with pytest.raises(UnsupportedArchitectureError, match="chunked_attention"):
        load_model(tmp_path, backend="native")  # auto would take the hf backend
