"""Student's t upper tail ``P(T_df > t)``, accurate far in the tail, without scipy.

The role tests (``attnlens.stats.bootstrap.p_above``) divide an estimate's distance to a
threshold by its bootstrap standard error; with that error estimated from ``n`` sentences
the ratio is referred to Student's t with ``n - 1`` degrees of freedom, and a correction over
72 heads or thousands of (head, relation) claims needs its tail far below 1e-4.

For ``t > 0`` and ``r = |t| / sqrt(df)``,

    P(T > t) = I_x(df / 2, 1 / 2) / 2,    x = df / (df + t^2) = 1 / (1 + r^2),

``I_x(a, b)`` the regularized incomplete beta function, and ``P(T > -t) = 1 - P(T > t)``.
``I_x(a, b) = x^a (1 - x)^b / (a B(a, b)) * 1 / (1 + d_1 / (1 + d_2 / (1 + ...)))`` with

    d_(2m+1) = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)),
    d_(2m)   =  m (b - m) x / ((a + 2m - 1)(a + 2m)),

a continued fraction that converges fast for ``x < (a + 1) / (a + b + 2)``; above that point
``I_x(a, b) = 1 - I_(1-x)(b, a)`` is used instead (the symmetry switch), so the fraction
always computes the smaller of the two tails and no tail is a difference of near-equal
numbers. It is evaluated by the modified Lentz method, every element at once (float64),
each frozen once its factor is within ``EPS`` of 1. ``x`` and ``1 - x`` are formed from
``r`` separately (``1 / (1 + r^2)`` and ``1 / (1 + r^-2)``) and the prefactor in logs
(``log x = -log1p(r^2)``), so neither ``1 - x`` near 1 nor ``x^a`` below 1e-308 loses
accuracy before the last ``exp``. ``log B(a, 1/2)`` comes from Stirling's series of
``log Gamma(a + 1/2) - log Gamma(a)`` (shifted up to ``a >= 8`` by the recurrence
``Gamma(z + 1) = z Gamma(z)``), written so that its large terms cancel analytically: it
stays within about 1e-15 (absolute) at ``df = 1e6`` and beyond, where the difference of two
``lgamma`` values near 6e6 would carry an error near 1e-9.

``df = inf`` gives the normal tail ``erfc(t / sqrt 2) / 2``; above ``MAX_DF`` (1e8, far
more sentences than any corpus has) ``log P`` is interpolated linearly in ``1 / df`` between
``MAX_DF`` and the normal tail (the fraction in ``x`` within 1e-8 of 1 would lose digits to
the rounding of ``1 - x``). Accuracy (``tests/test_student_t.py``): relative error below 1e-9
against ``scipy.stats.t.sf`` for df from 1 to 1e6 and p down to 1e-300, and below 2e-8
against 60-digit ``mpmath`` up to df = 1e20. With ``b = 1/2`` the fraction converges in at
most about 70 terms over that whole range (``MAX_TERMS`` guards it).
"""

from __future__ import annotations

import math

import numpy as np
import torch

EPS = 1e-15  # stop when a Lentz factor is this close to 1
TINY = 1e-300  # keeps the Lentz recursions off zero
MAX_DF = 1e8
MAX_TERMS = 1000  # pairs of fraction terms; 70 suffice for df <= 1e8
# Stirling's series log Gamma(z) = (z - 1/2) log z - z + log(2 pi) / 2 + sum_k c_k / z^(2k-1),
# c_k = B_2k / (2k (2k - 1)); truncation error below 2e-13 for z >= 8
_STIRLING = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188)
_SHIFT_TO = 8.0


def _stirling_tail(z: torch.Tensor) -> torch.Tensor:
    inv, inv2 = 1 / z, 1 / (z * z)
    out = torch.zeros_like(z)
    for c in reversed(_STIRLING):  # Horner in 1 / z^2
        out = out * inv2 + c
    return out * inv


def log_gamma_ratio_half(a: torch.Tensor) -> torch.Tensor:
    """``log Gamma(a + 1/2) - log Gamma(a)`` for ``a > 0`` (float64), exact to ~1e-15."""
    a = a.double()
    shift = torch.zeros_like(a)
    z = a.clone()
    for _ in range(int(_SHIFT_TO)):  # shift z up to >= 8, where Stirling's series is exact
        low = z < _SHIFT_TO
        # log Gamma(z + 1/2) / Gamma(z) = log Gamma(z + 3/2) / Gamma(z + 1) - log(z + 1/2)
        # + log z, from Gamma(w + 1) = w Gamma(w)
        shift = torch.where(low, shift + torch.log(z) - torch.log(z + 0.5), shift)
        z = torch.where(low, z + 1, z)
    # (z) log(z + 1/2) - (z - 1/2) log z - 1/2 = log(z) / 2 + [z log1p(1 / (2z)) - 1/2]
    h = 0.5 / z
    main = 0.5 * torch.log(z) + (z * torch.log1p(h) - 0.5)
    return shift + main + _stirling_tail(z + 0.5) - _stirling_tail(z)


def _continued_fraction(a: torch.Tensor, b: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``1 / (1 + d_1 / (1 + d_2 / (1 + ...)))`` of ``I_x(a, b)`` (module docstring).

    In NumPy: only ``+ - * /``, ``abs``, ``where`` and ``maximum``, each rounded as torch
    rounds it (IEEE float64), so the values are torch's, at a fraction of its cost per
    operation on these small vectors (``tests/test_fixed34.py``)."""
    device = x.device
    a, b, x = (t.detach().cpu().numpy() for t in (a, b, x))
    with np.errstate(all="ignore"):  # as torch: overflow to inf without a warning
        f = _lentz(a, b, x)
    return torch.from_numpy(f).to(device)


def _lentz(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The fraction by the modified Lentz method, every element at once (float64 arrays)."""
    # modified Lentz for f = 1 / (1 + d_1 / (1 + ...)): start from the first denominator
    dd = 1 - (a + b) * x / (a + 1)  # 1 + d_1
    dd = np.where(np.abs(dd) < TINY, TINY, dd)
    dd = 1 / dd
    cc = np.ones_like(x)
    f = dd.copy()
    active = np.ones_like(x, dtype=bool)
    m = 0
    while active.any():
        m += 1
        if m > MAX_TERMS:
            raise ArithmeticError("the incomplete beta continued fraction did not converge")
        change = np.zeros_like(x)
        for step in (0, 1):  # d_(2m), then d_(2m+1)
            if step == 0:
                d = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
            else:
                d = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
            dd = 1 + d * dd
            dd = 1 / np.where(np.abs(dd) < TINY, TINY, dd)
            cc = 1 + d / cc
            cc = np.where(np.abs(cc) < TINY, TINY, cc)
            factor = np.where(active, dd * cc, 1.0)
            f = f * factor
            change = np.maximum(change, np.abs(factor - 1))
        active = active & (change > EPS)
    return f


def _upper(r_abs: torch.Tensor, nu: torch.Tensor) -> torch.Tensor:
    """``P(T_nu > t)`` for ``t = r_abs >= 0`` and finite ``0 < nu <= MAX_DF`` (float64)."""
    r = r_abs / nu.sqrt()
    a, b = nu / 2, torch.full_like(nu, 0.5)
    log1p_r2 = torch.where(r < 1e100, torch.log1p(r * r), 2 * torch.log(r))
    log_x = -log1p_r2  # x = 1 / (1 + r^2)
    log_y = 2 * torch.log(r) - log1p_r2  # 1 - x = r^2 / (1 + r^2)
    x = 1 / (1 + r * r)
    y = 1 / (1 + 1 / (r * r))
    log_beta = 0.5 * math.log(math.pi) - log_gamma_ratio_half(a)  # log B(a, 1/2)
    log_front = a * log_x + b * log_y - log_beta  # log(x^a (1 - x)^b / B(a, b))
    direct = x < (a + 1) / (a + b + 2)
    # the fraction of the smaller tail: I_x(a, b) directly, else I_(1-x)(b, a)
    fa = torch.where(direct, a, b)
    fb = torch.where(direct, b, a)
    fx = torch.where(direct, x, y)
    live = (r > 0) & torch.isfinite(r)  # t = 0: P = 1/2 exactly; t = inf: P = 0
    frac = torch.ones_like(r)
    if bool(live.any()):
        frac[live] = _continued_fraction(fa[live], fb[live], fx[live])
    small = torch.exp(log_front + torch.log(frac) - torch.log(fa))  # the smaller tail of I
    i_x = torch.where(direct, small, 1 - small)  # I_x(nu/2, 1/2) = 2 P(T > |t|)
    return torch.where(live, 0.5 * i_x, torch.where(r > 0, 0.0, 0.5))


def t_sf(t: torch.Tensor | float, df: torch.Tensor | float) -> torch.Tensor:
    """``P(T_df > t)`` (float64, broadcast), Student's t with ``df > 0`` degrees of freedom.

    ``df`` may be fractional; ``df = inf`` is the normal tail. NaN where ``t`` or ``df`` is
    NaN or ``df <= 0``.
    """
    t = torch.as_tensor(t, dtype=torch.float64)
    df = torch.as_tensor(df, dtype=torch.float64)
    t, df = torch.broadcast_tensors(t, df)
    out = torch.full_like(t, torch.nan)
    ok = ~torch.isnan(t) & (df > 0)
    if not bool(ok.any()):
        return out
    tt, nu = t[ok].abs(), df[ok]
    normal = 0.5 * torch.special.erfc(tt / math.sqrt(2))  # P(Z > |t|)
    upper = normal.clone()
    fin = torch.isfinite(nu)
    if bool(fin.any()):
        upper[fin] = _upper(tt[fin], nu[fin].clamp_max(MAX_DF))
    # beyond MAX_DF: log P is linear in 1 / df between MAX_DF and the normal (df = inf)
    far = fin & (nu > MAX_DF)
    if bool(far.any()):
        w = MAX_DF / nu[far]
        upper[far] = torch.exp(torch.log(normal[far])
                               + w * (torch.log(upper[far]) - torch.log(normal[far])))
    out[ok] = torch.where(t[ok] >= 0, upper, 1 - upper)
    return out
