"""Per-head weights read by the hf backend, and how ``load`` chooses a backend."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import attnlens
from attnlens.backends.hf.blocks import WeightsUnavailable
from attnlens.errors import UnsupportedArchitectureError
from attnlens.model.attention import apply_rotary, rotary_cos_sin
from tests.hf_utils import padded_batch, save_checkpoint


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf-weights")
    return {t: save_checkpoint(root / t, t) for t in ("llama", "gpt2", "bert", "gpt_neox",
                                                      "qwen3", "opt")}


@pytest.mark.parametrize("model_type", ["llama", "gpt2", "bert"])
def test_weights_equal_the_native_converters(folders, model_type: str) -> None:
    """q_proj/k_proj/v_proj/o_proj, GPT-2's fused Conv1D c_attn, BERT's output.dense."""
    native = attnlens.load_model(folders[model_type], backend="native")
    hf = attnlens.load_model(folders[model_type], backend="hf")
    assert (native.backend, hf.backend) == ("native", "hf")
    assert hf.weight_problems().keys() == {"blocks"}
    for layer in range(2):
        mine, theirs = hf.blocks[layer].attn, native.blocks[layer].attn
        for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O"):
            a, b = getattr(mine, name), getattr(theirs, name)
            assert (a is None) == (b is None), name
            if a is not None:
                assert torch.equal(a, b), (layer, name)
        assert mine.rotary_dim == theirs.rotary_dim


@pytest.mark.parametrize("model_type", ["llama", "gpt2", "bert"])
def test_float64_patterns_and_hidden_states_equal_across_backends(folders, model_type) -> None:
    """Both backends run float64 in float64 (softmax included; transformers' eager Llama would
    take it in float32): the same model, two implementations, float64 rounding apart."""
    ids, mask = padded_batch(vocab_size=30)
    results = []
    for backend in ("native", "hf"):
        model = attnlens.load_model(folders[model_type], backend=backend, dtype=torch.float64)
        with torch.no_grad():
            results.append(model.run_with_cache(ids, mask, return_type="hidden"))
    (native_hidden, native_cache), (hf_hidden, hf_cache) = results
    real = mask.bool()
    # float64 sums of at most 64 products of values |x| < ~10 in other orders: <= ~1e-13;
    # 1e-12 is the float64 bound of the parity tests (float32 rounding would show as ~1e-8).
    for layer in range(2):
        pattern_gap = (native_cache["pattern", layer] - hf_cache["pattern", layer]).abs()
        # [batch, head, query_pos, key_pos] -> real queries' rows
        assert float(pattern_gap.transpose(1, 2)[real].max()) <= 1e-12, layer
    assert float((native_hidden - hf_hidden)[real].abs().max()) <= 1e-12


def test_circuit_tables_equal_the_native_ones(folders) -> None:
    from attnlens.measures.circuits.circuits import circuit_tables

    native = circuit_tables(attnlens.load_model(folders["llama"], backend="native"))
    hf = circuit_tables(attnlens.load_model(folders["llama"], backend="hf"))
    for name, table in native.items():
        # the same float64 SVDs of the same weights (norm folded alike): equal
        assert table.equals(hf[name]), name


def _projected(model, layer: int, cache, which: str) -> torch.Tensor:
    attn, block = model.blocks[layer].attn, model.blocks[layer]
    x = cache["resid_pre", layer]
    if block.ln1 is not None:
        x = block.ln1.apply(x)
    W, b = (attn.W_Q, attn.b_Q) if which == "q" else (attn.W_K, attn.b_K)
    out = torch.einsum("bpi,hid->bphd", x, W)
    return out if b is None else out + b


@pytest.mark.parametrize("model_type", ["gpt_neox", "opt"])
def test_weights_reproduce_the_queries_and_keys(folders, model_type: str) -> None:
    """GPT-NeoX's per-head interleaved query_key_value with partial rotary; OPT's queries
    scaled by d_head ** -0.5 before the attention (folded into W_Q)."""
    model = attnlens.load_model(folders[model_type], backend="hf")
    ids, mask = padded_batch(vocab_size=30)
    _, cache = model.run_with_cache(ids, mask)
    for layer in range(2):
        attn = model.blocks[layer].attn
        for which in ("q", "k"):
            got = _projected(model, layer, cache, which)
            if attn.rotary_dim:
                positions = torch.arange(ids.shape[1])[None]
                cos, sin = rotary_cos_sin(positions, attn.rotary_dim, attn.rotary_base, got.dtype)
                got = apply_rotary(got, cos, sin)
            # einsum vs the model's fused linear and its own rotary tables: fp32 sums of 32
            # products of |x w| <~ 1, then one rotation: 1e-5 (measured <= 1e-6)
            assert (got - cache[f"blocks.{layer}.attn.hook_{which}"]).abs().max() <= 1e-5
    if model_type == "gpt_neox":
        assert model.blocks[0].attn.rotary_dim == 4  # rotary_pct 0.5 of d_head 8


def test_query_norms_leave_out_qk_and_keep_ov(folders) -> None:
    model = attnlens.load_model(folders["qwen3"], backend="hf")
    problems = model.weight_problems()
    assert "q_norm" in problems["QK"] and "OV" not in problems
    assert model.blocks[0].attn.W_V.shape == (2, 32, 8)
    with pytest.raises(WeightsUnavailable, match="QK"):
        _ = model.blocks[0].attn.W_Q


def test_auto_takes_native_when_a_converter_accepts_and_hf_otherwise(folders, tmp_path) -> None:
    assert attnlens.load_model(folders["llama"]).backend == "native"
    assert attnlens.load_model(folders["qwen3"]).backend == "hf"
    with pytest.raises(UnsupportedArchitectureError, match="qwen3"):
        attnlens.load_model(folders["qwen3"], backend="native")
    # A family with a converter, in an architecture it does not take: auto says why.
    import json

    folder = tmp_path / "llama-classifier"
    folder.mkdir()
    for file in folders["llama"].iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["LlamaForSequenceClassification"]
    (folder / "config.json").write_text(json.dumps(config))
    model = attnlens.load_model(folder)
    assert model.backend == "hf"
    assert "LlamaForSequenceClassification" in model.cfg.source["native_refused"]


def test_load_returns_the_tokenizer_and_refuses_pickles_and_bad_backends(folders, tmp_path):
    from attnlens.errors import ConfigError, ModelLoadError

    model, tokenizer = attnlens.load(folders["qwen3"], backend="hf")
    assert model.tokenizer is tokenizer
    with pytest.raises(ConfigError, match="backend"):
        attnlens.load_model(folders["qwen3"], backend="transformers")
    from safetensors.torch import load_file

    pickled = tmp_path / "pickled"
    pickled.mkdir()
    for file in folders["qwen3"].iterdir():
        if file.suffix != ".safetensors":
            (pickled / file.name).write_bytes(file.read_bytes())
    torch.save(load_file(folders["qwen3"] / "model.safetensors"), pickled / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match="--allow-pickle"):
        attnlens.load_model(pickled, backend="hf")
    assert attnlens.load_model(pickled, backend="hf", allow_pickle=True).backend == "hf"


def test_a_tokenizer_past_the_embedding_is_refused_on_the_hf_backend(tmp_path) -> None:
    """The check counts the rows of the model's own token embedding (hf: the input
    embeddings' rows), before any text reaches it."""
    from attnlens.errors import ModelLoadError
    from tests.hf_utils import WORDS, tiny_hf
    from tests.seq2seq_utils import save_word_tokenizer

    vocab = save_word_tokenizer(tmp_path, WORDS)
    tiny_hf("qwen3", base=False, attn="eager", vocab_size=vocab - 4).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match=f"gives token ids up to {vocab - 1}, but the model "
                                             f"has {vocab - 4} embedding rows"):
        attnlens.load(tmp_path, backend="hf")


def test_the_null_model_of_an_hf_model_is_its_class_randomly_initialised(folders) -> None:
    """The report's null pass (--null random-init) on the hf backend: the same transformers
    class, seeded, run by the hf backend (qwen3 has no converter; llama is not converted)."""
    from attnlens.loaders.random_init import random_init_copy

    model = attnlens.load_model(folders["qwen3"], backend="hf")
    first, again = random_init_copy(model, 3), random_init_copy(model, 3)
    assert (first.model.backend, first.initialisation) == ("hf", "transformers")
    assert type(first.model.hf) is type(model.hf)
    null, same, trained = (m.hf.state_dict() for m in (first.model, again.model, model))
    assert all(torch.equal(null[k], same[k]) for k in null)  # the seed decides
    assert any(not torch.equal(null[k], trained[k]) for k in null)  # not the checkpoint's
    ids, mask = padded_batch(vocab_size=30)
    _, cache = first.model.run_with_cache(ids, mask, names_filter="blocks.0.attn.hook_pattern")
    assert cache["pattern", 0].shape == (3, 4, 9, 9)  # [batch, head, query_pos, key_pos]
    llama = random_init_copy(attnlens.load_model(folders["llama"], backend="hf"), 0)
    assert llama.model.backend == "hf"


def test_the_whole_matrix_limit_applies_on_the_hf_backend(folders) -> None:
    """--whole-matrix-limit reaches an hf-backed model (the CLI calls set_query_blocks): an
    analysis needing whole patterns above it is refused, as on the native backend."""
    from attnlens.data.text import text_batches
    from attnlens.measures.asymmetry.pattern_asymmetry import PatternAsymmetry
    from attnlens.model.query_blocks import QueryBlocks, WholeMatrixError
    from attnlens.stream.runner import run_analyzers
    from tests.hf_utils import TEXT

    model, tokenizer = attnlens.load(folders["bert"], backend="hf")
    batches = list(text_batches(tokenizer, TEXT, batch_size=2))  # 7 to 10 tokens
    model.set_query_blocks(QueryBlocks(whole_matrix_limit=4))
    with pytest.raises(WholeMatrixError, match="whole-matrix limit of 4"):
        run_analyzers(model, batches, [PatternAsymmetry.for_model(model)], show_progress=False)
    model.set_query_blocks(QueryBlocks())
    analyzer = PatternAsymmetry.for_model(model)
    run_analyzers(model, batches, [analyzer], show_progress=False)
    assert not analyzer.result()["pattern_asymmetry"].empty

