"""The asymmetry section's findings: weights and patterns.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from attnlens.measures.findings import (
    SHAPE,
    Finding,
    finder,
    has_null,
    head_of,
    measure,
    num,
    pct,
    versus_null,
)


@finder("asymmetry")
def asymmetry(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    rows = measure(tables["weight_asymmetry"], "antisym_share")
    weights = rows["value"]
    text = (f"On average {pct(weights.mean())} of each head's ||W_Q W_K^T||² is antisymmetric "
            f"(heads range {pct(weights.min())} to {pct(weights.max())})")
    if has_null(rows):
        outside = int(((weights > rows["null_high"]) | (weights < rows["null_low"])).sum())
        text += (f"; {SHAPE}: {pct(rows['null_mean'].mean())} on average, {outside} of "
                 f"{len(rows)} heads beyond its 95 % range")
    found = [Finding("asymmetry", [text + "."], "weight_asymmetry")]
    if "pattern_asymmetry" in tables and "asymmetry_baseline" in tables:
        pattern = measure(tables["pattern_asymmetry"], "asym_ratio")
        heads = pattern["value"].mean()
        base = measure(tables["asymmetry_baseline"], "asym_ratio")["value"].mean()
        ratio = f"{heads / base:.1f} times as" if base > 0 else "more"
        text = (f"Learned attention is {ratio} asymmetric as symmetric-logit self-attention on "
                f"the same inputs: ||P - P^T|| / ||P|| is {num(heads)} against {num(base)}")
        if has_null(pattern):
            text += f"; {SHAPE}: {num(pattern['null_mean'].mean())}"
        found.append(Finding("asymmetry", [text + "."], "pattern_asymmetry"))
        top = pattern.sort_values("value", ascending=False).iloc[0]
        _, clause = versus_null(top, float(top["value"]))
        found.append(Finding("asymmetry", [
            "The most one-way head is ", head_of(top),
            f" (||P - P^T|| / ||P|| = {num(top['value'])}" + (f"; {clause})." if clause
                                                              else ").")],
            "pattern_asymmetry"))
    return found
