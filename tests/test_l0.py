"""L0 head gates: the Hard Concrete distribution, training limits, binary gates, resume."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from attnlens.errors import ConfigError
from attnlens.measures.pruning.l0 import TEMPERATURES, HardConcreteGates, L0Settings, train_gates
from attnlens.measures.pruning.l0_run import run_l0
from attnlens.metrics.base import LossBatch, Metric
from attnlens.model.gates import gated_forward
from tests.helpers import tiny_model
from tests.pruning_toys import sentences, vocab_size, word_tokenizer


@pytest.mark.parametrize("temperature", list(TEMPERATURES.values()))
@pytest.mark.parametrize("log_alpha", [-2.0, 0.0, 0.7, 3.0])
def test_hard_concrete_samples_and_closed_forms(temperature, log_alpha):
    n = 200_000  # n gates with the same log_alpha: n independent draws in one call
    gates = HardConcreteGates(torch.ones(n, 1), temperature, (-0.1, 1.1), init=log_alpha)
    with torch.no_grad():
        z = gates.sample(torch.Generator().manual_seed(0))[:, 0]
    one = HardConcreteGates(torch.ones(1, 1), temperature, (-0.1, 1.1), init=log_alpha)
    assert float(z.min()) >= 0.0 and float(z.max()) <= 1.0
    assert bool((z == 0).any() or log_alpha > 2) and bool((z == 1).any() or log_alpha < -1)
    # P(z > 0) against its closed form sigmoid(log_alpha - beta log(-l / r)); Monte Carlo
    # standard error sqrt(p (1 - p) / n) <= 1.1e-3: 5 standard errors.
    closed = 1 / (1 + math.exp(-(log_alpha - temperature * math.log(0.1 / 1.1))))
    assert one.expected_l0().item() == pytest.approx(closed, abs=1e-12)
    assert float((z > 0).double().mean()) == pytest.approx(closed, abs=5 * 1.2e-3)
    # E[z] from the integral against the sample mean (std of z <= 0.5: 5 x 1.2e-3).
    assert float(one.expected_gate()[0, 0]) == pytest.approx(float(z.mean()), abs=6e-3)


def test_expected_gate_limits_and_absent_heads():
    present = torch.tensor([[True, True, False]])
    gates = HardConcreteGates(present, init=0.0)
    with torch.no_grad():
        gates.log_alpha.copy_(torch.tensor([[40.0, -40.0, 5.0]]))
    # read values only: detached, so no tensor that requires grad becomes a Python float
    expected = gates.expected_gate().detach()
    assert float(expected[0, 0]) == pytest.approx(1.0, abs=1e-9)  # always open
    assert float(expected[0, 1]) == pytest.approx(0.0, abs=1e-9)  # always closed
    assert float(expected[0, 2]) == 0.0 and float(gates.prob_open()[0, 2].detach()) == 0.0
    assert float(gates.sample()[0, 2].detach()) == 0.0
    with pytest.raises(ConfigError, match="stretch"):
        HardConcreteGates(present, stretch=(0.1, 1.1))


class Reconstruction(Metric):
    """A task every head of a random model matters for: reproduce its own hidden states.

    Loss per text: mean squared distance of the gated model's final hidden states to the
    ungated ones; 0 exactly when every gate is 1, and removing any head of a random model
    moves the states.
    """

    name = "reconstruction"
    label = "distance to the full model"
    higher_is_better = False

    def __init__(self, model, texts, tokenizer) -> None:
        super().__init__(list(texts), tokenizer, batch_size=4, max_length=16)
        self.model = model

    def make_batch(self, chunk, number):
        batch = LossBatch(self.tokenizer([self.examples[i] for i in chunk], max_length=16),
                          torch.arange(len(chunk)), len(chunk))
        with torch.no_grad():
            batch.target = self.model(**batch.inputs, return_type="hidden")
        return batch

    def example_losses(self, model, batch, head_mask=None, row_gates=None):
        hidden = gated_forward(model, batch.inputs, head_mask, row_gates, "hidden")
        real = batch.inputs["attention_mask"][..., None].to(hidden.dtype)
        squared = ((hidden - batch.target) ** 2 * real).sum((1, 2))
        return squared / real.sum((1, 2))

    def evaluate(self, model, head_mask=None) -> float:
        with torch.no_grad():
            return float(torch.cat([self.example_losses(model, b, head_mask)
                                    for b in self.loss_batches()]).mean())

    def texts(self):
        return self.examples


@pytest.fixture(scope="module")
def toy():
    model = tiny_model(seed=3, vocab_size=vocab_size(), n_token_types=0)
    return model, Reconstruction(model, sentences(16, seed=5), word_tokenizer())


def test_lambda_zero_closes_no_gate(toy):
    model, metric = toy
    settings = L0Settings(lambdas=(0.0,), steps=60, learning_rate=0.1, init_log_alpha=1.0)
    result = train_gates(model, metric, 0.0, settings)
    assert bool((result.mask == 1).all()), result.gates.expected_gate()
    # the data loss pushed every gate further open than it started
    assert bool((result.gates.log_alpha > 1.0).all())
    assert all(p.requires_grad for p in model.parameters())  # the weights' flags restored


@pytest.mark.parametrize("minimum", [1, 2])
def test_large_lambda_closes_all_but_the_minimum_per_layer(toy, minimum):
    model, metric = toy
    settings = L0Settings(lambdas=(100.0,), steps=60, learning_rate=0.2, init_log_alpha=1.0,
                          min_heads_per_layer=minimum)
    result = train_gates(model, metric, 100.0, settings)
    assert result.mask.sum(dim=1).tolist() == [minimum] * model.n_layers
    assert float(result.gates.expected_gate().max()) < 0.5  # every gate closed on its own
    assert result.curve["expected_open"].iloc[-1] < result.curve["expected_open"].iloc[0]


def test_runs_are_seeded_and_resumable(toy, tmp_path):
    model, metric = toy
    settings = L0Settings(lambdas=(0.0, 0.05), steps=8, seed=4)
    baseline = metric.evaluate(model)
    summary, heads, curve = run_l0(model, metric, metric, settings, baseline, tmp_path)
    assert list(summary["lambda"]) == [0.0, 0.05] and len(curve) == 16
    assert set(heads.columns) >= {"lambda", "layer", "head", "p_open", "expected_gate", "kept"}
    # a run interrupted after the first lambda, resumed, ends with the same tables
    first = tmp_path / "first"
    run_l0(model, metric, metric, L0Settings(lambdas=(0.0,), steps=8, seed=4), baseline, first)
    (first / "l0_settings.json").write_text((tmp_path / "l0_settings.json").read_text())
    again, _, again_curve = run_l0(model, metric, metric, settings, baseline, first, resume=True)
    pd.testing.assert_frame_equal(again.drop(columns="seconds"),
                                  summary.drop(columns="seconds"), check_dtype=False)
    pd.testing.assert_frame_equal(again_curve, curve, check_dtype=False)
    # more lambdas can be added to a finished run; other settings must not change
    more, _, _ = run_l0(model, metric, metric, L0Settings(lambdas=(0.0, 0.05, 1.0), steps=8,
                                                          seed=4), baseline, first, resume=True)
    assert list(more["lambda"]) == [0.0, 0.05, 1.0]
    pd.testing.assert_frame_equal(more.iloc[:2].drop(columns="seconds"),
                                  summary.drop(columns="seconds"), check_dtype=False)
    with pytest.raises(ConfigError, match="different settings"):
        run_l0(model, metric, metric, L0Settings(lambdas=(0.0, 0.05), steps=9, seed=4),
               baseline, tmp_path, resume=True)


def test_an_old_notation_run_resumes_in_l2h8(toy, tmp_path):
    """An L0 run of an older version wrote ``heads_removed`` as ``2.8``: resumed, it ends with
    the tables of a new run, every cell in ``L2H8``."""
    import re

    model, metric = toy
    fast = {"steps": 60, "learning_rate": 0.2, "init_log_alpha": 1.0, "seed": 4}  # closes gates
    settings = L0Settings(lambdas=(100.0, 0.05), **fast)
    baseline = metric.evaluate(model)
    summary, _, _ = run_l0(model, metric, metric, settings, baseline, tmp_path / "new")
    cells = summary["heads_removed"].tolist()
    assert any(cells) and all(re.fullmatch(r"(L\d+H\d+( |$))*", c) for c in cells)
    old = tmp_path / "old"
    run_l0(model, metric, metric, L0Settings(lambdas=(100.0,), **fast), baseline, old)
    (old / "l0_settings.json").write_text((tmp_path / "new" / "l0_settings.json").read_text())
    table = pd.read_csv(old / "l0_summary.csv", keep_default_na=False)
    table["heads_removed"] = [re.sub(r"L(\d+)H(\d+)", r"\1.\2", c) for c in
                              table["heads_removed"]]
    assert "." in table["heads_removed"].iloc[0]
    table.to_csv(old / "l0_summary.csv", index=False)
    again, _, _ = run_l0(model, metric, metric, settings, baseline, old, resume=True)
    assert again["heads_removed"].tolist() == cells


def test_comparison_interpolates_the_curves_at_the_same_head_count():
    from attnlens.measures.pruning.l0_run import compare_with_curves

    curve = pd.DataFrame({
        "order": ["importance"] * 3 + ["random"] * 6 + ["importance:cross"],
        "seed": [0, 0, 0, 0, 0, 0, 1, 1, 1, 0],
        "n_pruned": [0, 4, 8, 0, 4, 8, 0, 4, 8, 4],
        "metric": [90.0, 88.0, 80.0, 90.0, 84.0, 70.0, 90.0, 86.0, 74.0, 1.0],
    })
    summary = pd.DataFrame({"lambda": [0.1, 0.2], "n_pruned": [6, 10], "metric": [85.0, 60.0]})
    table = compare_with_curves(summary, curve)
    assert table["importance_at_same_heads"].iloc[0] == pytest.approx(84.0)  # midway 88..80
    assert table["random_at_same_heads"].iloc[0] == pytest.approx(78.5)  # mean 85 -> 72
    assert math.isnan(table["importance_at_same_heads"].iloc[1])  # beyond the curve
    assert "importance:cross_at_same_heads" not in table
