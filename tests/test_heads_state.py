"""Head-role analyzers on protocol v2: state round trips, strict merges, pruned models, the
shared word-attention context, pooling and the rare-word self rule."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file, save_file

from attnlens.data import words as words_module
from attnlens.data.conllu import sample_treebank
from attnlens.data.rarity import WordRarity
from attnlens.data.words import WordAttentionContext
from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.measures.heads.behaviour import HeadBehaviour
from attnlens.measures.heads.positional import PositionalHeads
from attnlens.measures.heads.rare_words import RareWordHeads
from attnlens.measures.heads.syntactic import SyntacticHeads
from attnlens.stats.bootstrap import Inference
from tests.heads_planted import make_batch

RARITY = WordRarity.from_counts({"the": 50, "a": 40, "dog": 3, "cat": 2, "zebra": 1})


def two_layer_batches(n_heads=(3, 2)):
    """Sample-treebank batches with random patterns for a 2-layer model of ``n_heads``."""
    sentences = sample_treebank()[:24]
    gen = torch.Generator().manual_seed(0)
    out = []
    for start in range(0, len(sentences), 8):
        batch = make_batch(sentences[start : start + 8], start)
        length = batch.input_ids.shape[1]
        keep = batch.attention_mask.bool()[:, None, None, :]
        layers = {}
        for layer, n in enumerate(n_heads):
            scores = 3 * torch.randn(len(batch.words), n, length, length, generator=gen)
            layers[f"blocks.{layer}.attn.hook_pattern"] = torch.softmax(
                scores.masked_fill(~keep, -torch.inf), -1)
        out.append((batch, ActivationCache(layers)))
    return out


def analyzers(heads_per_layer=(3, 2), **kwargs):
    words = WordAttentionContext()
    n = max(heads_per_layer)
    common = {"heads_per_layer": list(heads_per_layer), **kwargs}
    return [
        SyntacticHeads(2, n, min_examples=5, words=words, **common),
        PositionalHeads(2, n, **common),
        RareWordHeads(2, n, rarity=RARITY, words=words, **common),
        HeadBehaviour(2, n, **common),
    ]


def feed(found, data):
    for batch, cache in data:
        for analyzer in found:
            analyzer.update(batch, cache)
    return found


@pytest.fixture(scope="module")
def data():
    return two_layer_batches()


def test_pruned_models_list_only_existing_heads(data):
    for analyzer in feed(analyzers(), data):
        for name, table in analyzer.result().items():
            if "layer" not in table or table.empty:
                continue
            pairs = set(zip(table["layer"], table["head"], strict=True))
            assert (1, 2) not in pairs, (name, "phantom head 2 of layer 1")
            assert {(0, 0), (0, 2), (1, 1)} <= pairs, name
    best = feed(analyzers(), data)[0].result()["syntactic_best"]
    assert not ((best["layer"] == 1) & (best["head"] == 2)).any()


def _round_trip(analyzer, tmp_path, fresh):
    state = analyzer.state_dict()
    tensors = {k: v.cpu() for k, v in state["state"].items() if isinstance(v, torch.Tensor)}
    save_file(tensors, tmp_path / "state.safetensors")
    plain = {k: v for k, v in state["state"].items() if not isinstance(v, torch.Tensor)}
    meta = json.loads(json.dumps({"analyzer": state["analyzer"], "settings": state["settings"],
                                  "plain": plain}))
    fresh.load_state_dict({"analyzer": meta["analyzer"], "settings": meta["settings"],
                           "state": {**load_file(tmp_path / "state.safetensors"),
                                     **meta["plain"]}})
    return fresh


def test_states_round_trip_through_safetensors_and_json(data, tmp_path):
    for analyzer, fresh in zip(feed(analyzers(), data), analyzers(), strict=True):
        restored = _round_trip(analyzer, tmp_path, fresh)
        for name, table in analyzer.result().items():
            pd.testing.assert_frame_equal(restored.result()[name], table, obj=name)


def test_merge_of_parts_equals_one_pass_and_refuses_other_settings(data):
    whole = feed(analyzers(), data)
    first, second = feed(analyzers(), data[:1]), feed(analyzers(), data[1:])
    for part, rest, one in zip(first, second, whole, strict=True):
        merged = part.merge(rest).result()
        for name, table in one.result().items():
            # per-sentence fp32 rows summed in another order: exact for counts, and the
            # bootstrap draws depend on the sentence indices only, so the tables agree
            pd.testing.assert_frame_equal(merged[name], table, obj=name, rtol=1e-6)
    other = analyzers(inference=Inference(pooling="sentence"))
    for mine, theirs in zip(analyzers(), other, strict=True):
        with pytest.raises(ConfigError, match="pooling"):
            mine.merge(theirs)
    with pytest.raises(ConfigError, match="heads_per_layer"):
        analyzers()[1].merge(analyzers((3, 3))[1])


@pytest.mark.parametrize("path", ["torch", "kernel"])
def test_word_attention_is_computed_once_per_layer_for_both_readers(data, monkeypatch, path):
    calls = []
    real = words_module.word_attention

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    kernel = words_module._words_kernel
    if path == "torch":
        monkeypatch.setattr(words_module, "_words_kernel", None)
        monkeypatch.setattr(words_module, "word_attention", counting)
    elif kernel is None:
        pytest.skip("the words kernel is not built")
    else:  # the C kernel's pooling, counted once per layer (its first part of the pairs)

        class Counting:
            def __getattr__(self, name):
                return getattr(kernel, name)

            def pool(self, *args):
                calls.extend([1] if args[-3] == 0 else [])
                return kernel.pool(*args)

        monkeypatch.setattr(words_module, "_words_kernel", Counting())
    found = analyzers()
    batch, cache = data[0]
    for analyzer in found:
        analyzer.begin_batch(batch)
    for layer in range(2):
        layer_cache = ActivationCache({k: v for k, v in cache.items() if f".{layer}." in k})
        for analyzer in found:
            analyzer.update_layer(batch, layer, layer_cache)
    for analyzer in found:
        analyzer.end_batch(batch)
    assert len(calls) == 2  # syntactic and rare-word heads share each layer's aggregation
    assert not hasattr(words_module, "_memo") and not hasattr(words_module,
                                                              "cached_word_attention")


def test_sentence_pooling_averages_per_sentence_shares():
    # sentence 1: [CLS] a b [SEP]; sentence 2: [CLS] a b c d e [SEP]; head 0 looks back one
    batch = make_batch([sample_treebank()[0]])  # only for the id/mask layout helpers
    ids = torch.tensor([[101, 5, 6, 102, 0, 0, 0], [101, 5, 6, 7, 8, 9, 102]])
    batch = type(batch)(input_ids=ids, attention_mask=(ids != 0).long(),
                        special_mask=(ids == 101) | (ids == 102), extra={"index": [0, 1]})
    p = torch.zeros(2, 1, 7, 7)
    for q in range(7):
        p[:, 0, q, max(q - 1, 0)] = 1.0
    p[0, 0, 2] = 0
    p[0, 0, 2, 3] = 1.0  # sentence 1's word b looks forward instead
    shares = {}
    for pooling in ("token", "sentence"):
        positional = PositionalHeads(1, 1, inference=Inference(pooling=pooling))
        positional.update(batch, ActivationCache({"blocks.0.attn.hook_pattern": p}))
        table = positional.result()["positional_offsets"].set_index("target")
        shares[pooling] = table.loc["-1", "share"]
    assert shares["token"] == pytest.approx(6 / 7)  # 1 of 2 and 5 of 5 query tokens
    assert shares["sentence"] == pytest.approx((1 / 2 + 1) / 2)


def test_rare_self_decides_whether_a_word_may_pick_itself():
    sentence = sample_treebank()[0]
    batch = make_batch([sentence])
    n = len(sentence)
    length = n + 2
    rarest = RARITY.rarest(list(sentence.words), k=1)[0]
    p = torch.full((1, 1, length, length), 0.01)
    for q in range(1, n + 1):  # each word: most on itself, then on the rarest word
        p[0, 0, q, q] = 0.5
        p[0, 0, q, rarest + 1] = 0.3
    p = p / p.sum(-1, keepdim=True)
    shares = {}
    for rule in ("include", "exclude"):
        rare = RareWordHeads(1, 1, rarity=RARITY, rare_self=rule)
        rare.update(batch, ActivationCache({"blocks.0.attn.hook_pattern": p}))
        row = rare.result()["rare_words"].iloc[0]
        shares[rule] = (row["share_rarest"], row["chance_rarest"])
    assert shares["include"] == (0.0, pytest.approx(1 / n))
    assert shares["exclude"] == (1.0, pytest.approx(1 / (n - 1)))
    with pytest.raises(ConfigError, match="rare-self"):
        RareWordHeads(1, 1, rarity=RARITY, rare_self="sometimes")


def test_a_structurally_pruned_model_has_no_phantom_heads():
    from attnlens.measures.heads.clustering import HeadClustering
    from attnlens.measures.pruning.structural import prune_heads
    from attnlens.model import HookedTransformer, TransformerConfig
    from attnlens.stream.runner import run_analyzers

    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, n_heads=4, n_layers=2, d_mlp=64, vocab_size=1200,
                            n_ctx=32)
    mask = torch.ones(2, 4)
    mask[1, 1:] = 0  # layer 1 keeps head 0 only
    model = prune_heads(HookedTransformer(cfg).eval(), mask)
    assert model.heads_per_layer == [4, 1]
    words = WordAttentionContext()
    found = [SyntacticHeads.for_model(model, min_examples=5, words=words),
             PositionalHeads.for_model(model),
             RareWordHeads.for_model(model, rarity=RARITY, words=words),
             HeadBehaviour.for_model(model), HeadClustering.for_model(model)]
    sentences = sample_treebank()[:16]
    run_analyzers(model, [make_batch(sentences[:8]), make_batch(sentences[8:], 8)], found,
                  show_progress=False)
    for analyzer in found:
        for name, table in analyzer.result().items():
            columns = [c for c in (("layer", "head"), ("layer_a", "head_a"),
                                   ("layer_b", "head_b")) if c[0] in table]
            pairs = {p for layer, head in columns
                     for p in zip(table[layer], table[head], strict=True)}
            if columns:
                assert pairs == {(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)}, name
