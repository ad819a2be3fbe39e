"""Export to Hugging Face format: round trips, pruned (non-uniform) models, errors."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from attnlens.errors import ConfigError
from attnlens.loaders import load_model
from attnlens.loaders.export import export_hf, pad_heads_to_uniform
from attnlens.model import HookedTransformer
from tests.parity_utils import TINY, VOCAB, check_parity, padded_batch, save_tiny


def _hf_load(auto_cls, path):
    model, info = auto_cls.from_pretrained(
        str(path), attn_implementation="eager", output_loading_info=True
    )
    return model.eval(), info


def _assert_complete(info, allowed_missing=()):
    missing = [k for k in info["missing_keys"] if not any(a in k for a in allowed_missing)]
    assert missing == [], f"exported file lacks {missing}"
    assert list(info["unexpected_keys"]) == [], f"exported file has extra {info['unexpected_keys']}"
    assert list(info["mismatched_keys"]) == []


@pytest.fixture
def tiny_bert_mlm(tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    save_tiny(BertForMaskedLM, BertConfig(vocab_size=VOCAB, **TINY), tmp_path / "src")
    return load_model(tmp_path / "src")


def test_mlm_round_trip_through_transformers(tiny_bert_mlm, tmp_path):
    from transformers import AutoModelForMaskedLM

    out = export_hf(tiny_bert_mlm, tmp_path / "out")
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    hf, info = _hf_load(AutoModelForMaskedLM, out)
    _assert_complete(info)
    assert type(hf).__name__ == "BertForMaskedLM"
    # attnlens -> export -> transformers computes what attnlens computes.
    check_parity(hf, tiny_bert_mlm, padded_batch(), label="export bert-mlm")
    # ... and attnlens loads the export back with identical weights.
    again = load_model(out)
    for (name, a), (_, b) in zip(
        tiny_bert_mlm.state_dict().items(), again.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_untied_decoder_is_written(tiny_bert_mlm, tmp_path):
    from transformers import AutoModelForMaskedLM

    # Loaded tied (one tensor); give the decoder its own, changed weights.
    decoder = tiny_bert_mlm.head.decoder
    decoder.weight = torch.nn.Parameter(decoder.weight.detach() + 0.5)
    out = export_hf(tiny_bert_mlm, tmp_path / "out")
    assert json.loads((out / "config.json").read_text())["tie_word_embeddings"] is False
    hf, info = _hf_load(AutoModelForMaskedLM, out)
    _assert_complete(info)
    check_parity(hf, tiny_bert_mlm, padded_batch(), label="export bert-mlm untied")


def test_classifier_round_trip(tmp_path):
    from transformers import AutoModelForSequenceClassification, BertConfig
    from transformers import BertForSequenceClassification as Cls

    labels = {0: "negative", 1: "neutral", 2: "positive"}
    config = BertConfig(vocab_size=VOCAB, id2label=labels, **TINY)
    save_tiny(Cls, config, tmp_path / "src")
    model = load_model(tmp_path / "src")
    out = export_hf(model, tmp_path / "out")
    hf, info = _hf_load(AutoModelForSequenceClassification, out)
    _assert_complete(info)
    assert hf.config.num_labels == 3
    assert hf.config.id2label == labels  # the checkpoint's label names survive export
    check_parity(hf, model, padded_batch(), label="export bert-classifier")


def prune_by_slicing(model: HookedTransformer, keep: dict[int, list[int]]) -> HookedTransformer:
    """A structurally pruned copy: layer ``i`` keeps only heads ``keep[i]`` (sliced weights).

    With grouped-query attention the kept query heads must fill whole key/value groups; the
    groups they use are kept.
    """
    cfg = copy.deepcopy(model.cfg)
    group = cfg.n_heads // cfg.n_kv_heads
    cfg.heads_per_layer = [len(keep.get(i, range(cfg.n_heads))) for i in range(cfg.n_layers)]
    cfg.kv_heads_per_layer = None
    cfg.__post_init__()
    state = dict(model.state_dict())
    for layer, heads in keep.items():
        kv_heads = sorted({h // group for h in heads})
        for name, rows in (("W_Q", heads), ("b_Q", heads), ("W_O", heads), ("W_K", kv_heads),
                           ("b_K", kv_heads), ("W_V", kv_heads), ("b_V", kv_heads)):
            key = f"blocks.{layer}.attn.{name}"
            if key in state:
                state[key] = state[key][rows].clone()  # [head, ...] -> [kept head, ...]
    pruned = HookedTransformer(cfg)
    pruned.load_state_dict(state, strict=True)
    return pruned.eval()


@pytest.fixture
def tiny_bert_base(tmp_path):
    from transformers import BertConfig, BertModel

    hf = save_tiny(BertModel, BertConfig(vocab_size=VOCAB, **TINY), tmp_path / "src")
    return hf, load_model(tmp_path / "src")


def test_pad_heads_to_uniform_keeps_outputs(tiny_bert_base):
    _, model = tiny_bert_base
    keep = {0: [1, 3], 1: [2]}
    pruned = prune_by_slicing(model, keep)
    assert pruned.heads_per_layer == [2, 1]
    batch = padded_batch()
    # Reference: the full model with the removed heads gated to zero.
    gate = torch.zeros(2, 4)
    for layer, heads in keep.items():
        gate[layer, heads] = 1.0
    with torch.no_grad():
        expected = model(**batch.inputs(), head_mask=gate)
        got_pruned = pruned(**batch.inputs())
        padded = pad_heads_to_uniform(pruned)
        got_padded = padded(**batch.inputs())
    assert padded.heads_per_layer == [4, 4]
    assert padded.cfg.heads_per_layer == [4, 4]
    assert (padded.blocks[1].attn.W_O[1:] == 0).all()  # the padded heads write nothing
    real = batch.attention_mask.bool()
    # sliced heads vs gated heads: shorter W_O sums, |h| <= ~4 after LayerNorm (measured
    # <= 1.2e-6 on every kernel set tried); the same reasoning as the next bound
    assert float((got_pruned - expected).abs()[real].max()) <= 1e-5
    # Zero heads change the length of W_O's fp32 sums, hence their order: hidden states of
    # magnitude <= ~4 after LayerNorm, eps 1.19e-7, a few ulps per layer -> 1e-5 (AVX2
    # kernels measured 1.19e-6, so 1e-6 is too tight on some CPUs).
    assert float((got_padded - got_pruned).abs()[real].max()) <= 1e-5
    assert pad_heads_to_uniform(model) is model  # nothing to pad


def test_pruned_model_exports_and_loads_in_transformers(tiny_bert_base, tmp_path):
    from transformers import AutoModel

    _, model = tiny_bert_base
    pruned = prune_by_slicing(model, {0: [0, 2, 3], 1: [1]})
    out = export_hf(pruned, tmp_path / "out")
    config = json.loads((out / "config.json").read_text())
    assert config["num_attention_heads"] == 4 and config["num_hidden_layers"] == 2
    hf, info = _hf_load(AutoModel, out)
    _assert_complete(info)
    batch = padded_batch()
    real = batch.attention_mask.bool()
    with torch.no_grad():
        ours = pruned(**batch.inputs())
        theirs = hf(**batch.inputs()).last_hidden_state
    diff = float((ours - theirs).abs()[real].max())
    print(f"pruned export max abs difference {diff:.2e}")
    assert diff <= 1e-5  # transformers vs ours on |h| <= ~4, as TINY_TOL (measured <= 1.8e-6)
    reloaded = load_model(out)
    with torch.no_grad():
        # Same weights, fp32 rounding of the safetensors round trip is exact, but padded
        # heads reorder the sums (see test_pad_heads_to_uniform_keeps_outputs): 1e-5.
        assert float((reloaded(**batch.inputs()) - ours).abs()[real].max()) <= 1e-5


def test_export_copies_tokenizer_files(minilm, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    model, tokenizer = minilm
    out = export_hf(model, tmp_path / "minilm")
    assert (out / "tokenizer.json").is_file() or (out / "vocab.txt").is_file()
    hf, info = _hf_load(AutoModel, out)
    _assert_complete(info)
    hf_tok = AutoTokenizer.from_pretrained(str(out))
    texts = ["The cat sat on the mat.", "Exports must round-trip."]
    enc = hf_tok(texts, padding=True, return_tensors="pt")
    assert torch.equal(enc["input_ids"], tokenizer(texts)["input_ids"])
    with torch.no_grad():
        ours = model(**tokenizer(texts), return_type="hidden")
        theirs = hf(**enc).last_hidden_state
    real = enc["attention_mask"].bool()
    # MiniLM |h| <= ~6 (ulp 4.8e-7) through 6 layers of 384-term sums in other batch shapes:
    # 1.19e-7 x 6 x sqrt(384) ~ 1.4e-5 per layer at worst: 1e-5 was below that -> 5e-5
    # (measured <= 3.1e-6)
    assert float((ours - theirs).abs()[real].max()) <= 5e-5


def test_export_refuses_what_hf_cannot_express(tiny_bert_base, tmp_path):
    _, model = tiny_bert_base
    cfg = copy.deepcopy(model.cfg)
    cfg.use_mlp = False
    with pytest.raises(ConfigError, match="use_mlp=False"):
        export_hf(HookedTransformer(cfg), tmp_path / "a")
    cfg = copy.deepcopy(model.cfg)
    cfg.source = {}
    with pytest.raises(ConfigError, match="cannot export model_type None"):
        export_hf(HookedTransformer(cfg), tmp_path / "b")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        export_hf(model, tmp_path / "file")


def _family_cases():
    import transformers as t

    from tests.test_parity_llama import make_config

    roberta = t.RobertaConfig(vocab_size=VOCAB, pad_token_id=1, type_vocab_size=1, **TINY)
    distil = t.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                num_labels=2)
    gpt2 = t.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=40,
                        bos_token_id=0, eos_token_id=0)
    return {
        "RobertaForMaskedLM": (t.RobertaForMaskedLM, roberta, t.AutoModelForMaskedLM, 1),
        "RobertaForSequenceClassification": (
            t.RobertaForSequenceClassification, roberta, t.AutoModelForSequenceClassification, 1
        ),
        "DistilBertForSequenceClassification": (
            t.DistilBertForSequenceClassification, distil, t.AutoModelForSequenceClassification, 0
        ),
        "DistilBertForMaskedLM": (t.DistilBertForMaskedLM, distil, t.AutoModelForMaskedLM, 0),
        "GPT2LMHeadModel": (t.GPT2LMHeadModel, gpt2, t.AutoModelForCausalLM, 0),
        "GPT2Model": (t.GPT2Model, gpt2, t.AutoModel, 0),
        "LlamaForCausalLM": (t.LlamaForCausalLM, make_config("llama", attention_bias=True),
                             t.AutoModelForCausalLM, 0),
        "MistralModel": (t.MistralModel, make_config("mistral"), t.AutoModel, 0),
        "Qwen2ForCausalLM": (t.Qwen2ForCausalLM, make_config("qwen2", tie_word_embeddings=True),
                             t.AutoModelForCausalLM, 0),
    }


FAMILY_CASES = [
    "RobertaForMaskedLM", "RobertaForSequenceClassification", "DistilBertForMaskedLM",
    "DistilBertForSequenceClassification", "GPT2Model", "GPT2LMHeadModel", "LlamaForCausalLM",
    "MistralModel", "Qwen2ForCausalLM",
]


@pytest.mark.parametrize("architecture", FAMILY_CASES)
def test_every_family_round_trips(architecture, tmp_path):
    model_cls, config, auto_cls, pad = _family_cases()[architecture]
    save_tiny(model_cls, config, tmp_path / "src")
    model = load_model(tmp_path / "src")
    out = export_hf(model, tmp_path / "out")
    hf, info = _hf_load(auto_cls, out)
    _assert_complete(info)
    assert type(hf).__name__ == architecture
    check_parity(hf, model, padded_batch(pad_id=pad), label=f"export {architecture}")
    again = load_model(out)
    assert again.cfg.source["architecture"] == architecture
    for (name, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name


def test_pruned_gqa_model_exports(tmp_path):
    """Llama with 4 query / 2 key-value heads; layer 0 keeps one key/value group only."""
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    from tests.test_parity_llama import make_config

    save_tiny(LlamaForCausalLM, make_config("llama"), tmp_path / "src")
    model = load_model(tmp_path / "src")
    pruned = prune_by_slicing(model, {0: [2, 3]})
    assert pruned.heads_per_layer == [2, 4]
    assert pruned.blocks[0].attn.n_kv_heads == 1
    out = export_hf(pruned, tmp_path / "out")
    hf, info = _hf_load(AutoModelForCausalLM, out)
    _assert_complete(info)
    batch = padded_batch()
    real = batch.attention_mask.bool()
    with torch.no_grad():
        ours = pruned(**batch.inputs())
        theirs = hf(**batch.inputs()).logits
    # logits <= ~6 against transformers' Llama, as TINY_TOL (measured <= 4.3e-6)
    assert float((ours - theirs).abs()[real].max()) <= 1e-5


def _attention_variant_cases():
    import transformers as t

    from tests.test_parity_llama import make_config
    from tests.test_parity_rope_scaling import ROPES

    gpt2 = dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=40,
                bos_token_id=0, eos_token_id=0)

    def llama(family, **overrides):
        return make_config(family, head_dim=16, max_position_embeddings=8, **overrides)

    return {
        "llama-llama3": (t.LlamaForCausalLM, llama("llama", rope_parameters=ROPES["llama3"])),
        "llama-yarn-mscale": (t.LlamaForCausalLM,
                              llama("llama", rope_parameters=ROPES["yarn-mscale"])),
        "qwen2-dynamic-alternating": (t.Qwen2ForCausalLM, llama(
            "qwen2", rope_parameters=ROPES["dynamic"], use_sliding_window=True,
            sliding_window=3, layer_types=["full_attention", "sliding_attention"])),
        "mistral-linear-window": (t.MistralForCausalLM,
                                  llama("mistral", rope_parameters=ROPES["linear"],
                                        sliding_window=4)),
        "mistral-no-window": (t.MistralForCausalLM, llama("mistral", sliding_window=None)),
        "gpt2-flags": (t.GPT2LMHeadModel, t.GPT2Config(
            scale_attn_by_inverse_layer_idx=True, reorder_and_upcast_attn=True, **gpt2)),
    }


@pytest.mark.parametrize("case", ["llama-llama3", "llama-yarn-mscale",
                                  "qwen2-dynamic-alternating", "mistral-linear-window",
                                  "mistral-no-window", "gpt2-flags"])
def test_attention_variants_round_trip(case, tmp_path):
    """RoPE scaling, sliding windows and GPT-2's attention flags survive export: transformers
    computes what attnlens computes (9-token batch, longer than every window and context), and
    attnlens reads the same configuration back."""
    from transformers import AutoModelForCausalLM

    model_cls, config = _attention_variant_cases()[case]
    save_tiny(model_cls, config, tmp_path / "src")
    model = load_model(tmp_path / "src")
    out = export_hf(model, tmp_path / "out")
    hf, info = _hf_load(AutoModelForCausalLM, out)
    _assert_complete(info)
    check_parity(hf, model, padded_batch(), label=f"export {case}")
    again = load_model(out)
    names = ("rope_scaling", "rotary_base", "sliding_window", "sliding_window_layers",
             "attn_scale", "attn_scale_by_inverse_layer", "attn_upcast")
    assert {n: getattr(again.cfg, n) for n in names} == {n: getattr(model.cfg, n) for n in names}


def test_export_drops_a_legacy_rope_scaling(tmp_path):
    """A source config.json with ``rope_scaling`` (which transformers prefers over
    ``rope_parameters``) exports ``rope_parameters`` only."""
    from transformers import LlamaForCausalLM

    from tests.test_parity_llama import make_config

    save_tiny(LlamaForCausalLM, make_config("llama"), tmp_path / "src")
    config_file = tmp_path / "src" / "config.json"
    hf = json.loads(config_file.read_text())
    hf["rope_scaling"] = {"type": "linear", "factor": 2.0}
    hf.pop("rope_parameters")
    config_file.write_text(json.dumps(hf))
    model = load_model(tmp_path / "src")
    assert model.cfg.rope_scaling.rope_type == "linear"
    model.cfg.rope_scaling = None  # export the plain model: rope_scaling must not come back
    written = json.loads((export_hf(model, tmp_path / "out") / "config.json").read_text())
    assert "rope_scaling" not in written
    assert written["rope_parameters"] == {"rope_type": "default", "rope_theta": 10000.0}
