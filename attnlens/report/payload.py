"""Tables as compact JSON for the page, and JSON that is safe inside a <script> element."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from attnlens.runs.io import by_distinct

# Values are shown with 4 significant digits; 6 are embedded so that sorting, filtering and
# the head cards' ranks agree with the CSV except between values equal to 6 digits.
EMBEDDED_DIGITS = 6
# A text column is sent as a dictionary plus codes when it repeats this much.
DICTIONARY_REPEAT = 2


def _floats(values: np.ndarray, digits: int) -> list[float | None]:
    """Each value to ``digits`` significant digits (non-finite: None), each distinct value
    rounded once."""
    spec = f".{digits}g"
    return by_distinct(values, lambda distinct: [
        float(format(v, spec)) if math.isfinite(v) else None for v in distinct])


def _is_integral(values: np.ndarray) -> bool:
    finite = values[np.isfinite(values)]
    return bool(finite.size) and bool(np.all(finite == np.round(finite))) and bool(
        np.all(np.abs(finite) < 2**53)
    )


def encode_column(series: pd.Series, digits: int = EMBEDDED_DIGITS) -> dict[str, Any]:
    """One column as ``{"kind", "values"}`` or ``{"kind": "str", "dict", "codes"}``.

    kinds: ``int``, ``num`` (floats; non-finite values become null), ``bool``, ``str``.
    """
    if pd.api.types.is_bool_dtype(series):
        return {"kind": "bool", "values": [bool(v) for v in series.tolist()]}
    if pd.api.types.is_numeric_dtype(series):
        values = series.to_numpy(dtype=float)
        if _is_integral(values):
            if np.isfinite(values).all():  # whole numbers below 2**53: exact in int64
                return {"kind": "int", "values": values.astype(np.int64).tolist()}
            ints = [int(v) if math.isfinite(v) else None for v in values.tolist()]
            return {"kind": "int", "values": ints}
        return {"kind": "num", "values": _floats(values, digits)}
    if not isinstance(series.dtype, pd.StringDtype):  # text columns hold no booleans
        present = series.dropna()
        if len(present) and all(isinstance(v, bool | np.bool_) for v in present.tolist()):
            return {"kind": "bool",
                    "values": [None if pd.isna(v) else bool(v) for v in series.tolist()]}
    texts = [v if type(v) is str else None if pd.isna(v) else str(v) for v in series.tolist()]
    distinct = list(dict.fromkeys(texts))
    if len(texts) >= DICTIONARY_REPEAT * len(distinct) and len(texts) > 8:
        index = {v: i for i, v in enumerate(distinct)}
        return {"kind": "str", "dict": distinct, "codes": [index[v] for v in texts]}
    return {"kind": "str", "values": texts}


def encode_table(df: pd.DataFrame, digits: int = EMBEDDED_DIGITS) -> dict[str, Any]:
    """A DataFrame as ``{"columns": [...], "data": [encoded column, ...], "rows": n}``."""
    return {
        "columns": [str(c) for c in df.columns],
        "data": [encode_column(df[c], digits) for c in df.columns],
        "rows": len(df),
    }


def script_json(value: Any) -> str:
    """JSON to place inside ``<script type="application/json">``: ``<``, ``>``, ``&`` and the
    line separators are escaped, so no string in the data can close the element."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                         ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(raw, escaped)
    return text
