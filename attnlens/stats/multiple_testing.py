"""Corrections for many tests at once, and the power of the syntactic-head test.

A role (syntactic, positional, rare-word) is a claim tested for every head, relation and
direction at once; each family of tests is corrected with Benjamini-Hochberg (false
discovery rate, the default) or Holm (family-wise error). Untested entries (NaN p-values)
are left out of the family and get a NaN adjusted value.
"""

from __future__ import annotations

import math

import numpy as np

from attnlens.errors import ConfigError


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """BH adjusted p-values (q-values): ``q_(i) = min_{j >= i} m p_(j) / j``, at most 1."""
    p = np.asarray(p, dtype=float)
    q = np.full_like(p, np.nan)
    tested = ~np.isnan(p)
    values = p[tested]
    m = len(values)
    if not m:
        return q
    order = np.argsort(values, kind="stable")
    ranked = values[order] * m / np.arange(1, m + 1)
    adjusted = np.minimum.accumulate(ranked[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(adjusted, 1.0)
    q[tested] = out
    return q


def holm(p: np.ndarray) -> np.ndarray:
    """Holm adjusted p-values: ``max_{j <= i} (m - j + 1) p_(j)``, at most 1."""
    p = np.asarray(p, dtype=float)
    q = np.full_like(p, np.nan)
    tested = ~np.isnan(p)
    values = p[tested]
    m = len(values)
    if not m:
        return q
    order = np.argsort(values, kind="stable")
    ranked = values[order] * (m - np.arange(m))
    adjusted = np.maximum.accumulate(ranked)
    out = np.empty(m)
    out[order] = np.minimum(adjusted, 1.0)
    q[tested] = out
    return q


def adjust(p: np.ndarray, method: str = "bh") -> np.ndarray:
    """Adjusted p-values of one family of tests (``bh`` or ``holm``)."""
    if method == "bh":
        return benjamini_hochberg(p)
    if method == "holm":
        return holm(p)
    raise ConfigError(f"unknown correction {method!r}; use bh or holm.")


def _normal_quantile(prob: float) -> float:
    """Inverse standard normal CDF by bisection on ``math.erf`` (double precision)."""
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < prob:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def margin_test_power(
    n_examples: int,
    accuracy: float,
    baseline: float,
    margin: float = 0.10,
    alpha: float = 0.05,
    design_effect: float = 1.0,
) -> float:
    """Power of the one-sided test ``accuracy - baseline > margin`` at level ``alpha``.

    Normal approximation of the paired difference of two hit rates on ``n_examples`` arcs,
    the head's and the baseline's hits taken as independent (variance ``a(1-a) + b(1-b)``
    per arc), inflated by ``design_effect`` (the bootstrap variance over sentences divided by
    that independent-arcs variance).
    """
    if n_examples <= 0:
        return 0.0
    sd = math.sqrt(accuracy * (1 - accuracy) + baseline * (1 - baseline))
    se = sd * math.sqrt(design_effect / n_examples)
    if se == 0:
        return float(accuracy - baseline > margin)
    z = (accuracy - baseline - margin) / se - _normal_quantile(1 - alpha)
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))
