"""The spectrum section's findings: how low-rank attention is, by layer and head.
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
    trend,
    versus_null,
)


@finder("spectrum")
def rank_with_depth(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    quarter = measure(tables["spectrum_summary"], "cum_at_quarter")
    by_layer = quarter.groupby("layer")["value"].mean()
    first, last = float(by_layer.iloc[0]), float(by_layer.iloc[-1])
    word = trend(first, last)
    lead = ("Attention becomes lower-rank with depth" if word == "rises"
            else "Attention becomes higher-rank with depth" if word == "falls"
            else "Attention is about as low-rank in every layer")
    change = f"{word} from" if word != "stays near" else "is"
    link = "to" if word != "stays near" else "and"
    text = (f"{lead}: C(n/4) {change} {num(first)} in layer {int(by_layer.index[0])} {link} "
            f"{num(last)} in layer {int(by_layer.index[-1])} (mean over heads)")
    if has_null(quarter):
        null = quarter.groupby("layer")[["null_mean", "null_high"]].mean()
        n_first, n_last = float(null["null_mean"].iloc[0]), float(null["null_mean"].iloc[-1])
        above = [layer for layer, v in by_layer.items() if v > null["null_high"].get(layer, 1)]
        text += (f"; {SHAPE} gives {num(n_first)} and {num(n_last)}: "
                 + (f"beyond the null in {len(above)} of {len(by_layer)} layers" if above
                    else "within the null in every layer, so the shape, not training, sets it"))
    found = [Finding("spectrum", [text + "."], "spectrum_summary")]
    top = quarter.sort_values("value", ascending=False).iloc[0]
    _, clause = versus_null(top, float(top["value"]), as_share=True)
    found.append(Finding("spectrum", [
        "The most low-rank head is ", head_of(top), f": its top quarter of singular values "
        f"holds {pct(top['value'])} of their sum" + (f" ({clause})." if clause else ".")],
        "spectrum_summary"))
    return found
