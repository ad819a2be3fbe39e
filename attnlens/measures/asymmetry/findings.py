"""The asymmetry section's findings: weights and patterns.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from attnlens.measures.findings import Finding, finder, head_of, measure, num, pct


@finder("asymmetry")
def asymmetry(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    weights = measure(tables["weight_asymmetry"], "antisym_share")["value"]
    found = [Finding("asymmetry", [
        f"On average {pct(weights.mean())} of each head's ||W_Q W_K^T||² is antisymmetric "
        f"(heads range {pct(weights.min())} to {pct(weights.max())})."], "weight_asymmetry")]
    if "pattern_asymmetry" in tables and "asymmetry_baseline" in tables:
        heads = measure(tables["pattern_asymmetry"], "asym_ratio")["value"].mean()
        base = measure(tables["asymmetry_baseline"], "asym_ratio")["value"].mean()
        ratio = f"{heads / base:.1f} times as" if base > 0 else "more"
        found.append(Finding("asymmetry", [
            f"Learned attention is {ratio} asymmetric as symmetric-logit self-attention on the "
            f"same inputs: ||P - P^T|| / ||P|| is {num(heads)} against {num(base)}."],
            "pattern_asymmetry"))
        top = measure(tables["pattern_asymmetry"], "asym_ratio").sort_values(
            "value", ascending=False).iloc[0]
        found.append(Finding("asymmetry", [
            "The most one-way head is ", head_of(top),
            f" (||P - P^T|| / ||P|| = {num(top['value'])})."], "pattern_asymmetry"))
    return found
