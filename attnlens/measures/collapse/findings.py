"""The rank-collapse section's findings: pure attention and paths of heads.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from attnlens.measures.findings import Finding, finder, num


@finder("collapse")
def collapse(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    """Both statements are guaranteed by theory for any model of the architecture (Dong et
    al. 2021: pure self-attention loses rank doubly exponentially with depth; a product of
    row-stochastic matrices tends to rank one), so they are ``kind="theory"``."""
    curves = tables["collapse_variants"]
    curves = curves[curves["norm"] == "composite"]
    found = []
    san = curves[curves["variant"] == "san"].sort_values("depth")
    full = curves[curves["variant"] == "full"].sort_values("depth")
    if not san.empty:
        below = san[san["geo_mean"] < 1e-13]["depth"]
        where = (f"reaches rounding noise (< 1e-13) by depth {int(below.min())}" if len(below)
                 else f"falls to {num(san['geo_mean'].iloc[-1])} by depth "
                 f"{int(san['depth'].iloc[-1])}")
        tail = (f"; the full model keeps it above {num(full['geo_mean'].min())} at every depth"
                if not full.empty else "")
        found.append(Finding("collapse", [
            "Without skip connections attention collapses towards rank one (Dong et al. 2021: "
            "true of any model of this shape): the relative residual of pure attention "
            f"{where}{tail}."], "collapse_variants", kind="theory"))
    if "path_collapse" in tables and not tables["path_collapse"].empty:
        paths = tables["path_collapse"].sort_values("path_length")
        one, last = paths.iloc[0], paths.iloc[-1]
        found.append(Finding("collapse", [
            "Products of attention matrices along paths of heads approach rank one (a product "
            "of row-stochastic matrices does, whatever the weights): their rank-1 residual "
            f"falls from {num(one['geo_mean'])} (one head) to {num(last['geo_mean'])} "
            f"({int(last['path_length'])} heads)."], "path_collapse", kind="theory"))
    return found
