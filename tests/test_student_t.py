"""Student's t tail of the role tests (``attnlens.stats.student_t``) and the false-positive
rate of the bootstrap test it serves (``attnlens.stats.bootstrap.p_above``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlens.stats.bootstrap import Inference, estimate_shares, p_above
from attnlens.stats.student_t import log_gamma_ratio_half, t_sf

DFS = [1, 1.5, 2, 3, 4, 7, 19, 29, 49, 100, 333, 1000, 1e4, 1e5, 1e6]


def _t_grid() -> np.ndarray:
    # negative, around 0, the body and every decade of the tail out to t = 1e300
    return np.sort(np.concatenate([-np.logspace(-3, 2, 30), [0.0], np.linspace(0.01, 12, 300),
                                   np.logspace(1, 300, 400)]))


@pytest.mark.parametrize("df", DFS)
def test_t_sf_matches_scipy_down_to_1e_300(df):
    stats = pytest.importorskip("scipy.stats")
    t = _t_grid()
    expected = stats.t.sf(t, df)
    got = t_sf(torch.from_numpy(t), df).numpy()
    # the two differ by at most 6e-11 (relative) on this grid: continued fraction to 1e-15
    # per factor, prefactor in logs, scipy's own rounding of t^2 / (df + t^2). 1e-6 is the
    # accuracy asked of p-values that a correction multiplies by at most a few thousand.
    # where p < 1e-300 or t^2 overflows, scipy returns 0 (see the closed forms below)
    shown = (expected > 1e-300) & (t < 1e150)
    np.testing.assert_allclose(got[shown], expected[shown], rtol=1e-6, atol=0)
    positive = got[t > 0]  # ascending t: the tail never grows, never goes negative
    assert (np.diff(positive) <= 0).all() and (positive >= 0).all()


def test_t_sf_matches_scipy_on_a_fine_grid_of_fractional_df():
    stats = pytest.importorskip("scipy.stats")
    df = np.logspace(0, 6, 61)[:, None]  # 1 to 1e6, fractional
    t = np.linspace(-8, 40, 481)[None, :]
    expected = stats.t.sf(t, df)
    got = t_sf(torch.from_numpy(t), torch.from_numpy(df)).numpy()
    shown = expected > 1e-300
    np.testing.assert_allclose(got[shown], expected[shown], rtol=1e-6, atol=0)


def test_closed_forms_for_one_and_two_degrees_of_freedom_in_the_extreme_tail():
    # df = 1 (Cauchy): P(T > t) = atan(1 / t) / pi; df = 2: (1 - t / sqrt(2 + t^2)) / 2
    # = 1 / (sqrt(2 + t^2) (sqrt(2 + t^2) + t)). Both evaluated without cancellation in
    # float64 (a few ulps), also where t^2 overflows and scipy returns 0.
    t = np.logspace(-3, 305, 200)
    cauchy = np.arctan(1 / t) / np.pi
    np.testing.assert_allclose(t_sf(torch.from_numpy(t), 1).numpy(), cauchy, rtol=1e-9)
    t2 = t[t < 1e150]
    root = np.sqrt(2 + t2 * t2)
    two = 1 / (root * (root + t2))
    np.testing.assert_allclose(t_sf(torch.from_numpy(t2), 2).numpy(), two, rtol=1e-9)


def test_infinite_df_is_the_normal_tail_and_large_df_approach_it():
    t = torch.linspace(-10, 37.5, 500, dtype=torch.float64)
    normal = 0.5 * torch.special.erfc(t / math.sqrt(2))
    # the same float64 erfc: equal up to rounding
    torch.testing.assert_close(t_sf(t, math.inf), normal, rtol=1e-14, atol=0)
    # the t tail exceeds the normal one by a relative (t^4 + 2 t^2 + ...) / (4 df): for
    # df = 1e12 at most 5e-7 over this grid; 1e20 is past MAX_DF (interpolated in 1 / df)
    torch.testing.assert_close(t_sf(t, 1e12), normal, rtol=1e-6, atol=0)
    torch.testing.assert_close(t_sf(t, 1e20), normal, rtol=1e-12, atol=0)
    # and the tail is monotone in df at a fixed t: thicker for fewer degrees of freedom
    tails = torch.stack([t_sf(5.0, d) for d in (1, 10, 100, 1e4, 1e6, 1e9, math.inf)])
    assert (tails[:-1] > tails[1:]).all()


def test_symmetry_special_values_and_broadcasting():
    t = torch.tensor([-3.0, -0.5, 0.0, 0.5, 3.0], dtype=torch.float64)
    for df in (1, 5, 1e6):
        p = t_sf(t, df)
        # P(T > -t) = 1 - P(T > t): exact up to the one subtraction in float64
        torch.testing.assert_close(p + p.flip(0), torch.ones(5, dtype=torch.float64),
                                   rtol=0, atol=1e-15)
        assert p[2] == 0.5
    assert t_sf(math.inf, 3).item() == 0.0 and t_sf(-math.inf, 3).item() == 1.0
    assert torch.isnan(t_sf(1.0, 0.0)) and torch.isnan(t_sf(math.nan, 3.0))
    grid = t_sf(torch.ones(4, 1), torch.tensor([1.0, 2.0, 3.0]))
    assert grid.shape == (4, 3) and grid.dtype == torch.float64


def test_log_gamma_ratio_against_math_lgamma_and_mpmath():
    a = torch.tensor([0.5, 0.75, 1.0, 2.5, 7.99, 8.0, 12.5, 100.0], dtype=torch.float64)
    expected = [math.lgamma(v + 0.5) - math.lgamma(v) for v in a.tolist()]
    # math.lgamma is good to a few ulps of values below 400 here: 1e-12 bounds the two
    torch.testing.assert_close(log_gamma_ratio_half(a), torch.tensor(expected,
                               dtype=torch.float64), rtol=0, atol=1e-12)
    # beyond, the difference of two lgamma values (1e12 at a = 5e10) keeps few digits; the
    # Stirling difference stays within 1e-13 of 40-digit arithmetic
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    big = [1e4, 5e5, 5e7, 5e10]
    exact = [float(mpmath.loggamma(mpmath.mpf(v) + 0.5) - mpmath.loggamma(v)) for v in big]
    torch.testing.assert_close(log_gamma_ratio_half(torch.tensor(big, dtype=torch.float64)),
                               torch.tensor(exact, dtype=torch.float64), rtol=0, atol=1e-13)


def _false_positive_rates(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Rates of p < 0.05, 0.01, 0.001 with t (n - 1 df) and with the normal tail."""
    gen = torch.Generator().manual_seed(n)
    counts = np.zeros((2, 3))
    sets, chunk, alphas = 40_000, 10_000, (0.05, 0.01, 0.001)
    for c in range(sets // chunk):
        tokens = torch.randint(5, 16, (n, chunk), generator=gen).double()  # [sentence, set]
        rate = 0.5 + 0.15 * (2 * torch.randint(0, 2, (n, chunk), generator=gen) - 1).double()
        hits = torch.binomial(tokens, rate, generator=gen)
        est = estimate_shares(hits, tokens, torch.arange(n), Inference(seed=c),
                              keep_replicates=True)
        assert (est.df == n - 1).all()
        for row, df in enumerate((est.df, math.inf)):
            p = p_above(est.value, est.reps, 0.5, df)
            counts[row] += [float((p < a).sum()) for a in alphas]
    return counts[0] / sets, counts[1] / sets


@pytest.mark.parametrize("n", [20, 30])
def test_a_share_at_the_threshold_passes_at_the_nominal_rate_on_few_sentences(n):
    """40,000 data sets of ``n`` sentences, the true share exactly the threshold 0.5.

    Sentences of 5 to 15 tokens; each sentence's hit rate is 0.35 or 0.65 at random (an
    intra-sentence correlation of 0.09), so the share is a ratio of sentence sums that must
    be resampled by sentence. The library's bootstrap (1,000 replicates) and one-sided test,
    uncorrected. Rates of p < 0.05 / 0.01 / 0.001 seen when this test was written:

    ====  ===========================  ===========================
    n     Student's t, n - 1 df        normal tail (earlier versions)
    ====  ===========================  ===========================
    20    0.0485 / 0.0103 / 0.0012     0.0612 / 0.0174 / 0.0036
    30    0.0482 / 0.0106 / 0.0012     0.0554 / 0.0155 / 0.0030
    ====  ===========================  ===========================

    The normal tail passes 1.5 to 1.7 times too often at 0.01 and 3 to 3.6 times at 0.001.
    Seeded: the same data sets and replicates on every run (float32 replicate products may
    round differently between CPUs, which moves a p-value, not a rate, by a few ulps).
    """
    t_rate, normal_rate = _false_positive_rates(n)
    # at 0.01 the count is Binomial(40,000, 0.01) if the test is exact: sd 0.0005
    sd = math.sqrt(0.01 * 0.99 / 40_000)
    assert abs(t_rate[1] - 0.01) <= 3 * sd, t_rate
    assert normal_rate[1] > 0.01 + 6 * sd, normal_rate  # the old test: clearly above
    # at 0.001 (sd 0.00016): t within 3 sd of nominal, the normal more than twice nominal
    sd3 = math.sqrt(0.001 * 0.999 / 40_000)
    assert abs(t_rate[2] - 0.001) <= 3 * sd3 and normal_rate[2] > 0.002, (t_rate, normal_rate)
