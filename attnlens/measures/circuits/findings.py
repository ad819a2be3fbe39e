"""The circuits' findings (shown in the spectrum section): shared query/key subspaces.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from attnlens.measures.findings import SHAPE, Finding, finder, has_null


@finder("spectrum")
def shared_subspace(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    dims = tables["shared_subspace_dims"]
    rows = dims[(dims["matrix"] == "W_QK") & np.isclose(dims["energy"], 0.9)]
    concat = rows[rows["scope"] == "concat"]
    summed = rows[rows["scope"] == "sum_of_heads"]["dims"]
    if concat.empty or summed.empty:
        return []
    d_model = int(rows["d_model"].iloc[0])
    text = (f"The heads of a layer share their query/key subspace: 90 % of the stacked "
            f"W_Q W_K^T energy fits in {int(concat['dims'].min())}-{int(concat['dims'].max())} "
            f"of {d_model} dimensions, against {int(summed.min())}-{int(summed.max())} if the "
            "heads' subspaces were orthogonal")
    if has_null(concat):
        low = concat["null_low"]
        fewer = int((concat["dims"] < low).sum())
        text += (f"; {SHAPE} needs {int(low.min())}-{int(concat['null_high'].max())}: "
                 + (f"beyond the null in {fewer} of {len(concat)} layers" if fewer
                    else "within the null, so any model of this shape shares as much"))
    return [Finding("spectrum", [text + "."], "shared_subspace_dims")]
