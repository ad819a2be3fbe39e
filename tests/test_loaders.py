"""Loading checkpoints: errors and safety (each a one-line AttnlensError), caches, shards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import attnlens
from attnlens.errors import (
    ConfigError,
    DeviceError,
    ModelLoadError,
    UnsupportedArchitectureError,
    WeightMismatchError,
)
from attnlens.loaders import load_model, supported_architectures
from tests.parity_utils import TINY, VOCAB, padded_batch, save_tiny


@pytest.fixture
def tiny_bert(tmp_path) -> Path:
    from transformers import BertConfig, BertModel

    path = tmp_path / "bert"
    save_tiny(BertModel, BertConfig(vocab_size=VOCAB, **TINY), path)
    return path


def _edit_weights(path: Path, edit) -> None:
    tensors = load_file(str(path / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(path / "model.safetensors"))


def _edit_config(path: Path, **changes) -> None:
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def test_every_family_is_registered():
    expected = {
        "BertModel", "BertForMaskedLM", "BertForSequenceClassification", "RobertaModel",
        "RobertaForMaskedLM", "RobertaForSequenceClassification", "DistilBertModel",
        "DistilBertForMaskedLM", "DistilBertForSequenceClassification", "GPT2Model",
        "GPT2LMHeadModel", "LlamaModel", "LlamaForCausalLM", "MistralModel",
        "MistralForCausalLM", "Qwen2Model", "Qwen2ForCausalLM",
        "BartModel", "BartForConditionalGeneration", "MarianModel", "MarianMTModel",
        "T5Model", "T5ForConditionalGeneration", "T5EncoderModel",
    }
    assert set(supported_architectures()) == expected


def test_unsupported_model_type_lists_supported(tiny_bert):
    _edit_config(tiny_bert, model_type="xlnet", architectures=["XLNetModel"])
    with pytest.raises(UnsupportedArchitectureError) as info:
        load_model(tiny_bert, backend="native")
    message = str(info.value)
    assert "'xlnet' is not supported" in message
    assert "BertModel" in message and "Qwen2ForCausalLM" in message and "GPT2Model" in message


def test_a_config_transformers_cannot_build_is_one_clear_error(tiny_bert):
    """auto on an xlnet config.json: no converter, and XLNetConfig raises NotImplementedError
    on a field it refuses; attnlens says so in one line instead of passing it through."""
    _edit_config(tiny_bert, model_type="xlnet", architectures=["XLNetModel"])
    with pytest.raises(UnsupportedArchitectureError, match=r"cannot read the config.*xlnet"):
        load_model(tiny_bert)


def test_unsupported_architecture_of_known_family(tiny_bert):
    _edit_config(tiny_bert, architectures=["BertForTokenClassification"])
    with pytest.raises(UnsupportedArchitectureError, match="BertForTokenClassification"):
        load_model(tiny_bert, backend="native")  # auto takes the hf backend


def test_remote_code_models_are_refused_not_run(tiny_bert):
    _edit_config(tiny_bert, model_type="my_custom", auto_map={"AutoModel": "modeling.MyModel"})
    (tiny_bert / "modeling.py").write_text("raise SystemExit('remote code ran')\n")
    with pytest.raises(UnsupportedArchitectureError, match="supported architectures"):
        load_model(tiny_bert, backend="native")
    with pytest.raises(UnsupportedArchitectureError, match="trust_remote_code"):
        load_model(tiny_bert)  # auto: not known to transformers either


def test_trust_remote_code_never_passed():
    package = Path(attnlens.__file__).parent
    offenders = [p for p in package.rglob("*.py") if "trust_remote_code=True" in p.read_text()]
    assert offenders == []


def test_missing_tensor_names_it_and_its_shape(tiny_bert):
    _edit_weights(tiny_bert, lambda t: t.pop("encoder.layer.1.attention.self.key.weight"))
    with pytest.raises(WeightMismatchError) as info:
        load_model(tiny_bert)
    assert "'encoder.layer.1.attention.self.key.weight' is missing" in str(info.value)
    assert "(32, 32)" in str(info.value)


def test_misshaped_tensor_names_both_shapes(tiny_bert):
    def shrink(tensors):
        tensors["encoder.layer.0.intermediate.dense.weight"] = torch.zeros(60, 32)

    _edit_weights(tiny_bert, shrink)
    with pytest.raises(WeightMismatchError) as info:
        load_model(tiny_bert)
    message = str(info.value)
    assert "'encoder.layer.0.intermediate.dense.weight'" in message
    assert "shape (60, 32)" in message and "expected (64, 32)" in message


def test_unused_tensor_is_rejected(tiny_bert):
    def add(tensors):
        tensors["encoder.layer.0.attention.self.rel_bias"] = torch.zeros(4)

    _edit_weights(tiny_bert, add)
    with pytest.raises(WeightMismatchError, match=r"not used.*rel_bias"):
        load_model(tiny_bert)


def test_pickle_only_checkpoint_needs_opt_in(tiny_bert):
    reference = load_model(tiny_bert)
    tensors = load_file(str(tiny_bert / "model.safetensors"))
    (tiny_bert / "model.safetensors").unlink()
    torch.save(tensors, tiny_bert / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match="allow-pickle"):
        load_model(tiny_bert)
    model = load_model(tiny_bert, allow_pickle=True)
    for (name, a), (_, b) in zip(model.state_dict().items(), reference.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name


class _Payload:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_pickle_with_code_is_refused_even_when_allowed(tiny_bert, capsys):
    (tiny_bert / "model.safetensors").unlink()
    torch.save({"x": _Payload()}, tiny_bert / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match="weights_only=True"):
        load_model(tiny_bert, allow_pickle=True)
    assert "this must never run" not in capsys.readouterr().out


def test_damaged_safetensors_is_a_clear_error(tiny_bert):
    (tiny_bert / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ModelLoadError, match="damaged"):
        load_model(tiny_bert)


def test_sharded_checkpoint_loads(tmp_path):
    from transformers import BertConfig, BertModel

    hf = BertModel(BertConfig(vocab_size=VOCAB, **TINY)).eval()
    hf.save_pretrained(str(tmp_path), max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    model = load_model(tmp_path)
    batch = padded_batch()
    with torch.no_grad():
        diff = (model(**batch.inputs()) - hf(**batch.inputs()).last_hidden_state).abs()
    # transformers vs ours, as TINY_TOL in tests/parity_utils.py (measured 0.0: HF's default
    # init keeps |h| small here)
    assert float(diff[batch.attention_mask.bool()].max()) <= 1e-5


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_gpu_is_a_clear_error(tiny_bert):
    with pytest.raises(DeviceError, match="no CUDA GPU is available; use --device cpu"):
        load_model(tiny_bert, device="cuda")


def test_dtype_option(tiny_bert):
    assert load_model(tiny_bert, dtype="bfloat16").dtype == torch.bfloat16
    with pytest.raises(ConfigError, match="unknown dtype"):
        load_model(tiny_bert, dtype="float8")


def test_paths_that_are_not_model_folders(tmp_path):
    with pytest.raises(ModelLoadError, match=r"has no config\.json"):
        load_model(tmp_path)
    (tmp_path / "weights.bin").write_text("x")
    with pytest.raises(ModelLoadError, match="is a file"):
        load_model(tmp_path / "weights.bin")
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(tmp_path / "no" / "such" / "folder")


def test_uncached_hub_id_says_so(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ModelLoadError) as info:
        load_model("someone/not-downloaded-model")
    message = str(info.value)
    assert "neither a local folder nor in the local Hugging Face cache" in message
    assert "never downloads" in message and "folder path" in message


def test_cached_hub_id_loads(tmp_path, monkeypatch):
    from huggingface_hub import constants
    from transformers import BertConfig, BertModel

    cache = tmp_path / "hub"
    repo = cache / "models--someone--tiny-bert"
    snapshot = repo / "snapshots" / ("a" * 40)
    save_tiny(BertModel, BertConfig(vocab_size=VOCAB, **TINY), snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    model = load_model("someone/tiny-bert")
    assert Path(model.cfg.source["path"]) == snapshot.resolve()


def test_load_without_tokenizer_files_points_to_load_model(tiny_bert):
    with pytest.raises(ModelLoadError, match=r"no tokenizer files.*load_model"):
        attnlens.load(tiny_bert)
    assert load_model(tiny_bert).cfg.head == "pooler"


def test_default_load_is_minilm_with_tokenizer(minilm):
    model, tokenizer = minilm
    assert model.cfg.source["architecture"] == "BertModel"
    assert (model.cfg.n_layers, model.cfg.n_heads, model.cfg.d_model) == (6, 12, 384)
    assert tokenizer.special_layout == (["[CLS]"], ["[SEP]"])


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"position_embedding_type": "relative_key"}, "position_embedding_type"),
        ({"is_decoder": True}, "decoders"),
        ({"add_cross_attention": True}, "decoders"),
    ],
)
def test_bert_variants_attnlens_does_not_model_are_refused(tiny_bert, changes, message):
    _edit_config(tiny_bert, **changes)
    with pytest.raises(UnsupportedArchitectureError, match=message):
        load_model(tiny_bert, backend="native")  # auto takes the hf backend


def test_loading_runs_no_random_initialisation_and_keeps_torch_init_intact():
    """Modules are built empty (meta device, no init: torch's meta normal_ would import
    torch._dynamo, ~1 s); torch.nn.init is restored afterwards, in a fresh process."""
    import subprocess
    import sys

    code = (
        "import sys, torch, attnlens\n"
        "model, _ = attnlens.load()\n"
        "assert 'torch._dynamo' not in sys.modules, 'loading imported torch._dynamo'\n"
        "w = torch.nn.init.normal_(torch.zeros(1000))\n"
        "assert float(w.std()) > 0.5, 'torch.nn.init left patched'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
