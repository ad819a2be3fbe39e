"""Rollout, sparse coverage and the linear-attention view on the real MiniLM.

Each streaming result (batched, padded, fed layer by layer from inside the forward pass) is
checked against a direct computation on one unpadded sentence's cached activations.
"""

from __future__ import annotations

import pytest
import torch

from attnlens.data.text import sample_sentences, text_batches
from attnlens.measures.linear.linear_attention import LinearAttentionView, linear_outputs
from attnlens.measures.rollout.rollout import RolloutAnalyzer, rollout_matrices
from attnlens.measures.sparse.sparse import SparseCoverage
from attnlens.stream.runner import run_analyzers

# Float32 activations of MiniLM (|values| < ~10, n < 40): a sentence run alone and inside a
# padded batch differ by ~1e-6 (different kernel blocking), and the measures below are sums
# of at most n such terms; 1e-4 bounds that on every CPU kernel set.
TOL = 1e-4


@pytest.fixture(scope="module")
def corpus(minilm):
    _, tokenizer = minilm
    texts = sample_sentences()[:24]
    return texts, text_batches(tokenizer, texts, batch_size=8)


def _alone(minilm, text: str):
    """One sentence without padding: (n, cache of its attention hooks)."""
    model, tokenizer = minilm
    enc = tokenizer([text])
    _, cache = model.run_with_cache(**enc, names_filter=lambda name: "attn.hook_" in name)
    return int(enc["input_ids"].shape[1]), cache


def test_rollout_streams_the_same_matrices_as_one_sentence(minilm, corpus):
    model, tokenizer = minilm
    texts, batches = corpus
    (rollout,) = run_analyzers(model, batches, [RolloutAnalyzer.for_model(
        model, tokenizer, keep=3)], show_progress=False)
    kept = rollout.kept_sentences()
    assert [r["sentence"] for r in kept] == [0, 1, 2]
    for record in kept:
        n, cache = _alone(minilm, texts[record["sentence"]])
        expected = rollout_matrices([cache["pattern", layer][0] for layer in range(6)])
        assert record["matrices"].shape == (6, n, n)
        torch.testing.assert_close(record["matrices"], expected, rtol=0, atol=TOL)
        assert record["tokens"][0] == "[CLS]" and record["tokens"][-1] == "[SEP]"
        sums = record["matrices"].sum(-1)
        torch.testing.assert_close(sums, torch.ones_like(sums), rtol=0, atol=1e-12)
    layers = rollout.result()["rollout_layers"].set_index(["measure", "layer"])["value"]
    # MiniLM (measured on the 50 sample sentences): mass drifts to [CLS]/[SEP] with depth
    # (0.22 after layer 0 to 0.70 after layer 5) and each block moves less than the one
    # before (0.45 down to 0.04).
    special = [layers["special_share", layer] for layer in range(6)]
    moved = [layers["moved", layer] for layer in range(6)]
    assert special == sorted(special) and moved == sorted(moved, reverse=True)


def test_sparse_coverage_matches_a_direct_computation(minilm):
    model, tokenizer = minilm
    text = sample_sentences()[5]
    batches = text_batches(tokenizer, [text, *sample_sentences()[6:9]], batch_size=4)
    (sparse,) = run_analyzers(model, batches, [SparseCoverage.for_model(model)],
                              show_progress=False)
    n, cache = _alone(minilm, text)
    # direct: window ±4 mass and output error of sentence 0 for layer 2, head 3 (query row
    # shares averaged over its rows), compared with a run of sentence 0 alone
    alone = SparseCoverage.for_model(model)
    alone.update(text_batches(tokenizer, [text])[0], cache)
    p = cache["pattern", 2][0, 3].double()  # [query, key]
    v = cache["v", 2][0, :, 3].double()  # [key, d_head]
    pos = torch.arange(n)
    local = (pos[:, None] - pos[None, :]).abs() <= 4
    mass = (p * local).sum(-1).mean().item()
    ps = p * local / (p * local).sum(-1, keepdim=True)
    error = (torch.linalg.norm((p - ps) @ v) / torch.linalg.norm(p @ v)).item()
    table = alone.result()["sparse_coverage"].set_index(
        ["layer", "head", "pattern", "window", "measure"])["value"]
    assert table[2, 3, "window", 4.0, "mass"] == pytest.approx(mass, abs=TOL)
    assert table[2, 3, "window", 4.0, "output_error"] == pytest.approx(error, abs=TOL)
    whole = sparse.result()["sparse_coverage"]
    mass_rows = whole[whole["measure"] == "mass"]
    assert mass_rows["value"].between(0, 1 + TOL).all()
    curve = sparse.result()["sparse_window_curve"]
    for _, head in curve.groupby(["layer", "head"]):
        values = head.sort_values("window")["window_mass"].to_numpy()
        assert (values[1:] >= values[:-1] - 1e-12).all()  # float64 cumulative sums
        assert values[-1] == pytest.approx(1.0, abs=TOL)  # ±128 covers every sentence here
        # window+global = global mass + non-global window mass: the same float32 terms
        # summed per sentence in other groups, so equal-or-larger up to float32 rounding
        assert (head["window_global_mass"] >= head["window_mass"] - TOL).all()


def test_linear_view_matches_a_direct_computation_and_its_bounds(minilm, corpus):
    model, tokenizer = minilm
    texts, batches = corpus
    (view,) = run_analyzers(model, batches, [LinearAttentionView.for_model(model)],
                            show_progress=False)
    table = view.result()["linear_attention"].set_index(["measure", "layer", "head"])["value"]
    assert table["interference"].between(0, 1).all()
    assert (table["effective_keys_frac"] <= 1 + TOL).all()
    # the best gain is at least as good as gain 0, whose relative error is exactly 1
    assert (table["raw_error_rescaled"] <= 1 + TOL).all()
    n, cache = _alone(minilm, texts[0])
    alone = LinearAttentionView.for_model(model)
    alone.update(text_batches(tokenizer, texts[:1])[0], cache)
    q = cache["q", 4][0, :, 7].double()[None, None]  # [1, 1, pos, d_head]
    k = cache["k", 4][0, :, 7].double()[None, None]
    v = cache["v", 4][0, :, 7].double()[None, None]
    exact = cache["pattern", 4][0, 7].double() @ v[0, 0]
    lin, _ = linear_outputs(q, k, v, torch.ones(1, n, dtype=torch.bool), causal=False)
    expected = (torch.linalg.norm(lin[0, 0] - exact) / torch.linalg.norm(exact)).item()
    got = alone.result()["linear_attention"].set_index(["measure", "layer", "head"])["value"]
    assert got["linear_error", 4, 7] == pytest.approx(expected, rel=TOL)
