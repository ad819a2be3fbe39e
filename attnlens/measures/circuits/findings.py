"""The circuits' findings (shown in the spectrum section): shared query/key subspaces.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from attnlens.measures.findings import Finding, finder


@finder("spectrum")
def shared_subspace(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    dims = tables["shared_subspace_dims"]
    rows = dims[(dims["matrix"] == "W_QK") & np.isclose(dims["energy"], 0.9)]
    concat = rows[rows["scope"] == "concat"]["dims"]
    summed = rows[rows["scope"] == "sum_of_heads"]["dims"]
    if concat.empty or summed.empty:
        return []
    d_model = int(rows["d_model"].iloc[0])
    return [Finding("spectrum", [
        f"The heads of a layer share their query/key subspace: 90 % of the stacked "
        f"W_Q W_K^T energy fits in {int(concat.min())}-{int(concat.max())} of {d_model} "
        f"dimensions, against {int(summed.min())}-{int(summed.max())} if the heads' subspaces "
        "were orthogonal."], "shared_subspace_dims")]
