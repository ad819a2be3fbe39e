"""Head importance: planted heads ranked first, gradients equal to finite differences."""

from __future__ import annotations

import pytest
import torch

from attnlens.errors import ConfigError
from attnlens.measures.pruning.importance import gradient_importance, random_scores, score_heads
from attnlens.metrics.fidelity import FidelityMetric
from attnlens.metrics.sts_task import StsMetric
from attnlens.model.gates import full_mask
from tests.helpers import tiny_model
from tests.pruning_toys import sentences, vocab_size, word_tokenizer, write_pairs

PLANTED = (1, 2)


def planted_model(dtype=torch.float32):
    """A tiny model whose head 1.2 writes with 300x the weight of every other head."""
    model = tiny_model(seed=3, vocab_size=vocab_size(), n_token_types=0)
    with torch.no_grad():
        for layer, block in enumerate(model.blocks):
            for head in range(block.attn.n_heads):
                block.attn.W_O[head] *= 3.0 if (layer, head) == PLANTED else 0.01
    return model.to(dtype)


@pytest.fixture
def sts(tmp_path) -> StsMetric:
    return StsMetric.from_csv(write_pairs(tmp_path / "pairs.csv", 24), word_tokenizer(),
                              batch_size=8, max_length=16)


@pytest.mark.parametrize("order", ["importance", "loo"])
@pytest.mark.parametrize("abs_mode", ["example", "batch"])
def test_planted_head_is_ranked_first(sts, order, abs_mode):
    model = planted_model()
    scores = score_heads(order, model, sts, abs_mode=abs_mode, normalize=False)
    flat = scores.flatten()
    first = divmod(int(flat.argmax()), scores.shape[1])
    assert first == PLANTED
    runner_up = flat.sort(descending=True).values[1]
    assert flat.max() > 5 * runner_up  # a clear margin, not a near tie


def test_planted_head_is_ranked_first_by_label_free_fidelity():
    model = planted_model()
    metric = FidelityMetric(sentences(24), word_tokenizer(), model, batch_size=8, max_length=16)
    scores = gradient_importance(model, metric, normalize=False)
    assert divmod(int(scores.flatten().argmax()), scores.shape[1]) == PLANTED


def _example_losses(metric, model, mask):
    """Every example's loss with the shared head mask ``mask`` (no per-example gates)."""
    with torch.no_grad():
        return torch.cat([metric.example_losses(model, b, mask) for b in metric.loss_batches()])


def _finite_difference_gradients(metric, model, eps=1e-6):
    """Central differences ``[example, layer, head]`` of every example's loss in each gate."""
    mask = full_mask(model)
    grads = torch.zeros(metric.n_examples, *mask.shape, dtype=torch.float64)
    for layer in range(mask.shape[0]):
        for head in range(mask.shape[1]):
            up, down = mask.clone(), mask.clone()
            up[layer, head] += eps
            down[layer, head] -= eps
            diff = _example_losses(metric, model, up) - _example_losses(metric, model, down)
            grads[:, layer, head] = diff / (2 * eps)
    return grads


def test_gradient_importance_matches_finite_differences(sts):
    model = tiny_model(seed=1, vocab_size=vocab_size(), n_token_types=0).double()
    fd = _finite_difference_gradients(sts, model)  # [example, layer, head]
    assert fd.abs().max() > 1e-3  # the check is not vacuous
    per_example = gradient_importance(model, sts, abs_mode="example", normalize=False)
    # float64 central differences, step 1e-6: rounding 2.2e-16 x |loss| (<= ~1) / 1e-6 ~ 2e-10
    # and truncation ~1e-12, against gradients ~1e-2: rtol 1e-6 + atol 1e-9 (measured 2.6e-11)
    torch.testing.assert_close(per_example, fd.abs().mean(dim=0), rtol=1e-6, atol=1e-9)
    # batch mode: |sum of a batch's gradients|, summed over batches, over the example count
    sizes = [b.n_examples for b in sts.loss_batches()]
    batch_sums = torch.stack([part.sum(dim=0) for part in fd.split(sizes)])
    per_batch = gradient_importance(model, sts, abs_mode="batch", normalize=False)
    torch.testing.assert_close(per_batch, batch_sums.abs().sum(dim=0) / sts.n_examples,
                               rtol=1e-6, atol=1e-9)
    # per-layer L2 normalisation
    normalized = gradient_importance(model, sts, normalize=True)
    # float64, assert_close's defaults (rtol 1e-7, atol 1e-7): a few ulps (measured 0.0)
    torch.testing.assert_close(normalized.norm(dim=1), torch.ones(2, dtype=torch.float64))
    torch.testing.assert_close(normalized, per_example / per_example.norm(dim=1, keepdim=True))


def test_importance_at_a_pruned_point_uses_the_mask(sts):
    model = tiny_model(seed=1, vocab_size=vocab_size(), n_token_types=0).double()
    mask = full_mask(model)
    mask[0, 1] = 0.0
    at_mask = gradient_importance(model, sts, mask, normalize=False)
    # a removed head changes the scores by O(1e-2) (measured 0.02) >> atol 1e-8 + rtol 1e-5
    assert not torch.allclose(at_mask, gradient_importance(model, sts, normalize=False))
    # parameters keep requiring gradients afterwards, and got none
    assert all(p.requires_grad and p.grad is None for p in model.parameters())


def test_random_order_is_seeded_and_attention_orders_have_the_right_sign(sts):
    model = tiny_model(seed=1, vocab_size=vocab_size(), n_token_types=0)
    torch.testing.assert_close(random_scores(model, 4), random_scores(model, 4))  # exact: same seed
    assert not torch.equal(random_scores(model, 4), random_scores(model, 5))
    confidence = score_heads("confidence", model, sts)
    entropy = score_heads("entropy", model, sts)
    assert ((confidence > 0) & (confidence <= 1)).all()
    assert (entropy <= 0).all()  # score = -entropy: diffuse heads are pruned first
    with pytest.raises(ConfigError, match="unknown order"):
        score_heads("magnitude", model, sts)
