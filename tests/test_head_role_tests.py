"""Roles as tested claims: bootstrap over sentences, paired margin tests, corrections,
held-out selection, on hand-built cases whose answer is known."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.measures.heads.syntactic import SyntacticHeads
from attnlens.measures.heads.syntactic_arcs import DEFAULT_MIN_EXAMPLES
from attnlens.measures.heads.syntactic_tables import held_out_selection, split_sentences
from attnlens.stats.bootstrap import (
    Inference,
    estimate_shares,
    p_above,
    poisson_weights,
    pooled,
)
from attnlens.stats.multiple_testing import (
    adjust,
    benjamini_hochberg,
    holm,
    margin_test_power,
)
from tests.heads_planted import make_batch, planted_patterns, planted_treebank


def run_planted(n_sentences, rel_per_sentence, n_heads=2, margin=0.10, seed=0, **kwargs):
    sentences, hits = planted_treebank(n_sentences, rel_per_sentence, 0.3, 0.6, seed)
    analyzer = SyntacticHeads(1, n_heads, min_examples=1, margin=margin, **kwargs)
    for start in range(0, n_sentences, 25):
        chunk = sentences[start : start + 25]
        p = planted_patterns(chunk, hits, start, n_heads)
        analyzer.update(make_batch(chunk, start),
                        ActivationCache({"blocks.0.attn.hook_pattern": p}))
    return analyzer


def rel_rows(analyzer, direction="dep->head"):
    acc = analyzer.result()["syntactic_accuracy"]
    return acc[(acc["relation"] == "rel") & (acc["direction"] == direction)].set_index("head")


def test_sixty_percent_of_1000_arcs_against_a_thirty_percent_baseline_is_syntactic():
    analyzer = run_planted(100, 10)
    rows = rel_rows(analyzer)
    head = rows.loc[0]
    assert head["examples"] == 1000 and head["n_sentences"] == 100
    # Ratios of integer counts (hits exact in fp32 up to 2^24, summed in float64, one
    # division): within 1 ulp of 600/1000 and 300/1000. Another count would be off by at
    # least 1/1000, so approx's default rel 1e-6 tells them apart with room on both sides.
    assert head["accuracy"] == pytest.approx(0.6) and head["baseline"] == pytest.approx(0.3)
    assert head["tested"] and head["syntactic"] and head["q_value"] < 0.01
    assert head["ci_low"] < 0.6 < head["ci_high"]
    assert head["excess_ci_low"] > 0.1  # the paired interval of accuracy - baseline


def test_the_same_rates_on_ten_arcs_are_not_syntactic():
    analyzer = run_planted(10, 1)
    head = rel_rows(analyzer).loc[0]
    assert head["examples"] == 10
    assert head["accuracy"] == pytest.approx(0.6) and head["baseline"] == pytest.approx(0.3)
    assert head["above_margin"]  # the uncorrected rule would call it syntactic
    assert head["tested"] and not head["syntactic"] and head["p_value"] > 0.05


@pytest.mark.parametrize("margin", [0.10, 0.0])
def test_a_head_at_exactly_the_baseline_is_never_syntactic(margin):
    # 1 planted head + 400 copies of the +1 follower, whose accuracy equals the baseline
    analyzer = run_planted(100, 10, n_heads=401, margin=margin)
    rows = rel_rows(analyzer)
    followers = rows.loc[1:]
    assert np.allclose(followers["accuracy"], followers["baseline"], rtol=0, atol=0)
    assert followers["p_value"].min() >= 0.5  # no replicate beats the re-selected baseline
    acc = analyzer.result()["syntactic_accuracy"]
    assert not acc.loc[acc["head"] > 0, "syntactic"].any()
    assert rows.loc[0, "syntactic"]  # the planted head survives the larger family


def test_bootstrap_interval_of_a_binomial_covers_the_truth_at_its_nominal_rate():
    """200 data sets of 200 sentences x 5 Bernoulli(0.3) arcs, each with its own seed."""
    truth, seeds, covered = 0.3, 200, 0
    for seed in range(seeds):
        gen = torch.Generator().manual_seed(10_000 + seed)
        hits = (torch.rand(200, 5, generator=gen) < truth).sum(1, keepdim=True).double()
        arcs = torch.full((200,), 5.0, dtype=torch.float64)
        est = estimate_shares(hits, arcs, torch.arange(200), Inference(seed=seed))
        covered += bool(est.low[0] <= truth <= est.high[0])
    # the coverage count is Binomial(200, 0.95) if the interval is exact: sd 3.1 intervals
    sd = math.sqrt(seeds * 0.95 * 0.05)
    assert abs(covered - 0.95 * seeds) <= 3 * sd, covered


def test_poisson_weights_depend_only_on_the_seed_and_the_sentence_index():
    every = poisson_weights(torch.arange(1000), 50, seed=3)
    some = poisson_weights(torch.tensor([3, 700, 999]), 50, seed=3)
    assert torch.equal(some, every[:, [3, 700, 999]])
    assert not torch.equal(poisson_weights(torch.arange(10), 50, seed=4), every[:, :10])
    assert every.mean().item() == pytest.approx(1.0, abs=0.01)  # Poisson(1): 50,000 draws


def test_pooling_by_token_and_by_sentence():
    hits = torch.tensor([[1.0], [3.0], [0.0]])
    examples = torch.tensor([1.0, 4.0, 0.0])  # the third sentence has no example
    assert pooled(hits, examples, "token").item() == pytest.approx(4 / 5)
    assert pooled(hits, examples, "sentence").item() == pytest.approx((1 + 3 / 4) / 2)


def test_p_values_follow_the_bootstrap_standard_error():
    reps = torch.tensor([[0.4], [0.6]])  # standard deviation 0.1414
    # df = inf: the normal tail with the bootstrap standard error as is
    p = p_above(torch.tensor([0.5]), reps, 0.3, math.inf)
    assert p.item() == pytest.approx(0.5 * math.erfc(0.2 / 0.141421356 / math.sqrt(2)))
    # 3 degrees of freedom (4 sentences): the error times sqrt(4 / 3), Student's t tail
    # P(T_3 > u) = 1/2 - (atan(u / sqrt 3) + sqrt(3) u / (3 + u^2)) / pi (closed form)
    u = 0.2 / (0.141421356 * math.sqrt(4 / 3))
    t3 = 0.5 - (math.atan(u / math.sqrt(3)) + math.sqrt(3) * u / (3 + u * u)) / math.pi
    assert p_above(torch.tensor([0.5]), reps, 0.3, 3).item() == pytest.approx(t3)
    assert p_above(torch.tensor([0.5]), reps, 0.3, 3).item() > p.item()  # a thicker tail
    constant = torch.full((10, 2), 0.5)
    assert p_above(torch.tensor([0.5, 0.5]), constant, torch.tensor([0.4, 0.5]), 9).tolist() == [
        0.0, 1.0]  # no spread: above the reference or not (the claim is strict)
    # one sentence (df 0): nothing to test
    assert torch.isnan(p_above(torch.tensor([0.5]), reps, 0.3, 0)).all()


def test_degrees_of_freedom_count_the_sentences_holding_each_share():
    hits = torch.tensor([[1.0, 0.0], [2.0, 1.0], [0.0, 0.0], [1.0, 3.0]])
    per_share = torch.tensor([[2.0, 0.0], [3.0, 2.0], [0.0, 1.0], [1.0, 4.0]])
    est = estimate_shares(hits, per_share, torch.arange(4), Inference(bootstrap=0))
    assert est.sentences.tolist() == [3, 3] and est.df.tolist() == [2.0, 2.0]
    one_den = estimate_shares(hits, torch.tensor([2.0, 3.0, 0.0, 4.0]), torch.arange(4),
                              Inference(bootstrap=10))
    assert one_den.df.tolist() == [2.0, 2.0]  # the sentence without examples is no cluster
    first_only = estimate_shares(hits, torch.tensor([[2.0, 0.0], [3.0, 0.0], [1.0, 0.0],
                                                     [1.0, 4.0]]), torch.arange(4),
                                 Inference(bootstrap=0))
    assert first_only.df.tolist() == [3.0, 0.0]


def test_benjamini_hochberg_and_holm_against_hand_computation():
    p = np.array([0.01, 0.04, 0.03, 0.005, np.nan])
    # sorted 0.005 0.01 0.03 0.04 (m = 4): BH 0.02 0.02 0.04 0.04; Holm 0.02 0.03 0.06 0.06
    np.testing.assert_allclose(benjamini_hochberg(p)[:4], [0.02, 0.04, 0.04, 0.02])
    np.testing.assert_allclose(holm(p)[:4], [0.03, 0.06, 0.06, 0.02])
    assert np.isnan(adjust(p, "bh")[4]) and np.isnan(adjust(p, "holm")[4])
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    many = rng.uniform(size=500) ** 3
    np.testing.assert_allclose(benjamini_hochberg(many),
                               scipy_stats.false_discovery_control(many, method="bh"))


def test_holm_is_stricter_than_benjamini_hochberg():
    strict = run_planted(100, 10, n_heads=3, inference=Inference(correction="holm"))
    lenient = run_planted(100, 10, n_heads=3)
    q_holm = strict.result()["syntactic_accuracy"]["q_value"].dropna().to_numpy()
    q_bh = lenient.result()["syntactic_accuracy"]["q_value"].dropna().to_numpy()
    assert (q_holm >= q_bh - 1e-15).all()  # same p-values: Holm adjusts at least as much


def test_bootstrap_off_gives_no_test_and_the_point_rule():
    analyzer = run_planted(10, 1, inference=Inference(bootstrap=0))
    head = rel_rows(analyzer).loc[0]
    assert not head["tested"] and np.isnan(head["q_value"]) and np.isnan(head["ci_low"])
    assert head["syntactic"] == head["above_margin"]


def test_accuracies_do_not_depend_on_the_bootstrap():
    with_ = rel_rows(run_planted(30, 10))
    without = rel_rows(run_planted(30, 10, inference=Inference(bootstrap=0)))
    assert with_["accuracy"].tolist() == without["accuracy"].tolist()


def test_options_are_checked():
    with pytest.raises(ConfigError, match="correction"):
        Inference(correction="bonferroni")
    with pytest.raises(ConfigError, match="pooling"):
        Inference(pooling="word")


def test_held_out_selection_chooses_on_one_half_and_reports_on_the_other():
    analyzer = run_planted(100, 10, n_heads=3)
    table = held_out_selection(analyzer, fraction=0.5)
    row = table[(table["relation"] == "rel") & (table["direction"] == "dep->head")].iloc[0]
    assert (row["layer"], row["head"]) == (0, 0)  # the planted head wins on either half
    first, second = split_sentences(torch.arange(100), 0.5, seed=0)
    assert len(first) == len(second) == 50 and not set(first.tolist()) & set(second.tolist())
    assert row["n_sentences"] == 50 and row["examples"] == 500
    # its accuracy on the reporting half, counted by hand from the planted hits
    _, hits = planted_treebank(100, 10, 0.3, 0.6, 0)
    expected = sum(hits[(s, d)] for s in second.tolist() for d in range(1, 11)) / 500
    assert row["heldout_accuracy"] == pytest.approx(expected)
    assert row["ci_low"] <= expected <= row["ci_high"]
    again = held_out_selection(run_planted(100, 10, n_heads=3), fraction=0.5)
    assert again.equals(table)  # seeded


def test_held_out_selection_on_another_treebank():
    evaluate = run_planted(40, 10, n_heads=3)
    chooser = run_planted(40, 10, n_heads=3, seed=5)
    table = held_out_selection(evaluate, chooser, selected_on="other", evaluated_on="this")
    row = table[(table["relation"] == "rel") & (table["direction"] == "dep->head")].iloc[0]
    assert (row["layer"], row["head"], row["examples"]) == (0, 0, 400)
    best = evaluate.result()["syntactic_best"].set_index(["relation", "direction"])
    # Both are the same integer hit count over the same 400 arcs (float64 sum, one
    # division): equal to the last bit; a different head or arc set would differ by at least
    # 1/400, far above approx's default rel 1e-6.
    assert row["heldout_accuracy"] == pytest.approx(best.loc[("rel", "dep->head"), "accuracy"])
    assert row["selected_on"] == "other" and row["evaluated_on"] == "this"


def test_the_default_min_examples_gives_the_reference_effect_80_percent_power():
    # docs/heads.md: a head at 0.60 against a 0.30 baseline, margin 0.10, one-sided 5 % test
    assert margin_test_power(DEFAULT_MIN_EXAMPLES, 0.6, 0.3) >= 0.8
    assert margin_test_power(20, 0.6, 0.3) < 0.5
    powers = [margin_test_power(n, 0.6, 0.3) for n in (10, 50, 100, 500)]
    assert powers == sorted(powers)


def test_percentile_interval_matches_numpy_nanquantile():
    from attnlens.stats.bootstrap import percentile_interval

    reps = torch.randn(1000, 40, dtype=torch.float64)
    reps[:100, 3] = torch.nan  # some replicates without an example
    reps[:, 4] = torch.nan  # none with one
    low, high = percentile_interval(reps)
    expected = np.nanquantile(np.delete(reps.numpy(), 4, axis=1), [0.025, 0.975], axis=0)
    # the same linear interpolation in float64: equal to a few ulps of values of order 1
    np.testing.assert_allclose(np.delete(low.numpy(), 4), expected[0], rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.delete(high.numpy(), 4), expected[1], rtol=0, atol=1e-14)
    assert torch.isnan(low[4]) and torch.isnan(high[4])
