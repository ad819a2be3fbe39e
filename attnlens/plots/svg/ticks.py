"""Axis ranges and tick positions for the SVG figures: round linear steps, decades on a log
axis, and tick labels with as many decimals as the step needs."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable

_STEPS = (1.0, 2.0, 2.5, 5.0, 10.0)


def data_range(values: Iterable[float], margin: float = 0.05,
               log: bool = False) -> tuple[float, float]:
    """The range of the finite ``values`` widened by ``margin`` of its span on each side (in
    log space on a log axis, positive values only); ``(0, 1)`` when there are none."""
    finite = [v for v in values if math.isfinite(v) and (v > 0 or not log)]
    if not finite:
        return (1e-3, 1.0) if log else (0.0, 1.0)
    lo, hi = min(finite), max(finite)
    if log:
        a, b = math.log10(lo), math.log10(hi)
        pad = (b - a) * margin if b > a else 0.5
        return 10 ** (a - pad), 10 ** (b + pad)
    pad = (hi - lo) * margin if hi > lo else (abs(lo) * 0.05 or 0.5)
    return lo - pad, hi + pad


def linear_ticks(lo: float, hi: float, most: int = 7) -> list[float]:
    """Round ticks inside ``lo..hi`` (steps 1, 2, 2.5, 5 x 10^k), at most ``most`` of them."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(1, most - 1)
    scale = 10 ** math.floor(math.log10(raw))
    step = next(s * scale for s in _STEPS if s * scale >= raw * (1 - 1e-9))
    first = math.ceil(lo / step - 1e-9)
    ticks = []
    k = first
    while k * step <= hi + step * 1e-9:
        ticks.append(0.0 if abs(k * step) < step * 1e-9 else k * step)
        k += 1
    return ticks


def log_ticks(lo: float, hi: float, most: int = 9) -> list[float]:
    """Powers of ten inside ``lo..hi``, every second (third, ...) one when there are more
    than ``most``."""
    a, b = math.ceil(math.log10(lo) - 1e-9), math.floor(math.log10(hi) + 1e-9)
    exponents = list(range(a, b + 1))
    stride = max(1, math.ceil(len(exponents) / most))
    return [10.0 ** e for e in exponents if e % stride == 0]


def tick_labels(ticks: list[float]) -> list[str]:
    """Labels of linear ``ticks``: the decimals their step needs (``0.25`` -> two)."""
    if len(ticks) < 2:
        return [f"{t:g}" for t in ticks]
    step = min(abs(b - a) for a, b in itertools.pairwise(ticks))
    largest = max(abs(t) for t in ticks)
    if largest >= 1e5 or (largest and largest < 1e-3):
        return [f"{t:.1e}" if t else "0" for t in ticks]
    decimals = 0
    while decimals < 6 and abs(round(step, decimals) - step) > step * 1e-6:
        decimals += 1
    return [f"{t:.{decimals}f}" for t in ticks]


def exponent(value: float) -> int:
    """The power of ten of a log-axis tick (``1e-3`` -> -3)."""
    return round(math.log10(value))
