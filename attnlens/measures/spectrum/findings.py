"""The spectrum section's findings: how low-rank attention is, by layer and head.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from attnlens.measures.findings import Finding, finder, head_of, measure, num, pct, trend


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
    found = [Finding("spectrum", [
        f"{lead}: C(n/4) {change} {num(first)} in layer {int(by_layer.index[0])} {link} "
        f"{num(last)} in layer {int(by_layer.index[-1])} (mean over heads)."],
        "spectrum_summary")]
    top = quarter.sort_values("value", ascending=False).iloc[0]
    found.append(Finding("spectrum", [
        "The most low-rank head is ", head_of(top), f": its top quarter of singular values "
        f"holds {pct(top['value'])} of their sum."], "spectrum_summary"))
    return found
