"""Pruning machinery on the real all-MiniLM-L6-v2 and real STS-B pairs."""

from __future__ import annotations

import pytest
import torch

from attnlens.measures.pruning import prune_heads
from attnlens.measures.pruning.importance import gradient_importance, random_scores
from attnlens.measures.pruning.loop import select_heads
from attnlens.metrics.factory import build_metrics
from attnlens.metrics.sts import read_pairs, sts_spearman
from attnlens.model.gates import full_mask
from tests.conftest import shared_file


@pytest.fixture(scope="module")
def sts_pairs():
    return shared_file("stsb/stsb-en-dev.csv")


def test_split_evaluation_reproduces_the_sts_computation(minilm, sts_pairs):
    model, tok = minilm
    pair = build_metrics("sts", model, tok, sts_pairs, eval_fraction=0.5, seed=0,
                         batch_size=32, max_length=128)
    assert pair.importance.n_examples == pair.evaluation.n_examples == 750
    importance_first = set(pair.importance.pairs.first)
    evaluation = pair.evaluation.subset(range(60))
    # the same pairs through the STS command's function give the same number
    all_pairs = read_pairs(sts_pairs)
    rows = {(a, b): i for i, (a, b) in enumerate(zip(all_pairs.first, all_pairs.second,
                                                     strict=True))}
    idx = [rows[(a, b)] for a, b in zip(evaluation.pairs.first, evaluation.pairs.second,
                                        strict=True)]
    expected = sts_spearman(model, tok, all_pairs.subset(idx), batch_size=32, max_length=128)
    assert evaluation.evaluate(model) == expected  # exact: same pairs, batches and ops
    assert 60.0 < expected < 100.0
    assert len(importance_first & set(pair.evaluation.pairs.first)) < 50  # parts are apart


def test_per_example_gates_agree_with_the_head_mask_gradient(minilm, sts_pairs):
    model, tok = minilm
    metric = build_metrics("sts", model, tok, sts_pairs, batch_size=8, max_length=64
                           ).importance.subset(range(8))
    batch = metric.loss_batches()[0]
    mask = full_mask(model)
    gates = mask.expand(batch.n_examples, *mask.shape).clone().requires_grad_()
    losses = metric.example_losses(model, batch, None, gates[batch.row_example])
    (per_example,) = torch.autograd.grad(losses.sum(), gates)
    shared = mask.clone().requires_grad_()
    (summed,) = torch.autograd.grad(metric.example_losses(model, batch, shared).sum(), shared)
    # two fp32 backward passes through 6 layers that reduce over the examples in other
    # places: ~n x 1.19e-7 relative for n ~ 8 x 384 terms (measured <= 1.2e-7, 0.5% of the bound)
    torch.testing.assert_close(per_example.sum(dim=0), summed, rtol=1e-4, atol=1e-6)
    # per-example |.| is never below the batch-level |sum| (triangle inequality)
    assert (per_example.abs().sum(0) >= summed.abs() - 1e-6).all()  # excess measured <= 3.7e-9
    scores = gradient_importance(model, metric, normalize=False)
    # the same gradients through the same ops (measured 0.0)
    torch.testing.assert_close(scores, per_example.abs().mean(0).double(), rtol=1e-4,
                               atol=1e-7)


def test_structurally_pruned_minilm_equals_masked_minilm(minilm):
    model, tok = minilm
    mask = full_mask(model)
    for layer, head in select_heads(random_scores(model, 0), mask, 36, 1):
        mask[layer, head] = 0.0
    pruned = prune_heads(model, mask)
    assert sum(pruned.heads_per_layer) == 36
    inputs = tok(["The cat sat on the mat.", "Pruning removes attention heads."])
    with torch.no_grad():
        expected = model(**inputs, head_mask=mask)
        got = pruned(**inputs)
    # |h| <= ~6 (ulp 4.8e-7) through 6 layers; 36 fewer heads shorten W_O's 384-term sums:
    # 1.19e-7 x 6 x sqrt(384) ~ 1.4e-5 per layer at worst: 1e-5 was below that -> 5e-5
    # (measured <= 4.0e-6 on every kernel set tried)
    torch.testing.assert_close(got, expected, rtol=0, atol=5e-5)
