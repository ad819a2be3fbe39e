"""A metric's change written in the metric's own direction."""

from __future__ import annotations


def change_text(before: float, after: float, improvement: float, digits: int = 4) -> str:
    """``"2027.4700 → 2028.0500, +0.5800, worse"``: the two values, their difference
    ``after - before`` (a rising perplexity is ``+``) and whether that is better or worse.

    ``improvement`` is the change signed so that positive is better (``Metric.improvement``,
    the ``change`` column of the pruning tables): it decides the verdict whatever the metric's
    direction.
    """
    if improvement > 0:
        verdict = "better"
    elif improvement < 0:
        verdict = "worse"
    else:
        verdict = "unchanged"
    return (f"{before:.{digits}f} → {after:.{digits}f}, {after - before:+.{digits}f}, "
            f"{verdict}")
