"""The pruning section's findings: the most and least important heads, the curve.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from attnlens.measures.findings import Finding, finder, head_of, num, pct


@finder("prune")
def pruning(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    importance = tables["head_importance"].sort_values("score", ascending=False)
    found = [Finding("prune", [
        "The most important head for the pruning metric is ", head_of(importance.iloc[0]),
        "; the least important is ", head_of(importance.iloc[-1]), "."], "head_importance")]
    curve = tables.get("prune_curve")
    if curve is not None:
        rows = curve[(curve["order"] == "importance") & (curve["seed"] == curve["seed"].min())]
        if len(rows) > 1:
            half = rows.iloc[(rows["fraction_pruned"] - 0.5).abs().argsort().iloc[0]]
            start = rows.sort_values("step").iloc[0]
            change = half["change"]  # signed so that positive is better
            verdict = "worse" if change < 0 else "better" if change > 0 else "unchanged"
            found.append(Finding("prune", [
                f"Pruning {int(half['n_pruned'])} heads ({pct(half['fraction_pruned'])}) by "
                f"importance moves the metric from {num(start['metric'])} to "
                f"{num(half['metric'])} ({half['metric'] - start['metric']:+.3g}, {verdict})."],
                "prune_curve"))
    return found
