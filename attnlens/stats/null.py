"""Null-model columns: what a randomly initialised copy of the model gives for each measure.

A report run with a null model (``attnlens analyze --null random-init``) computes every
per-head table twice: on the model and on a randomly re-initialised copy of the same
architecture (``attnlens.loaders.random_init``). ``add_null_columns`` then gives each row of
the model's table the null model's distribution of the same measure:

- ``null_mean``: the mean over the null model's rows of the same group;
- ``null_low`` / ``null_high``: their 5th and 95th percentiles (linear interpolation), one-sided
  95 % bounds of what a head of a model of this shape gives without training.

A group is the row's key columns (the measure, text labels such as relation and direction,
and declared numeric keys such as ``fraction``) and, for tables with several rows per key
(one per head, or one per layer), its layer: a randomly initialised network is not the
same at every depth, so layer 0 is compared with the null's layer 0. Tables with one row
per key (a best head chosen over the whole model, e.g. ``syntactic_best``) are compared
with the null model's own best row of that key. A value is *beyond the null* when it lies
above ``null_high`` (or, for measures where less is notable, below ``null_low``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

NULL_COLUMNS = ("null_mean", "null_low", "null_high")
QUANTILES = (0.05, 0.95)
# Columns that identify a head or hold a result of a test: never part of a null group.
NOT_KEYS = ("layer", "head", "kv_head", "value", *NULL_COLUMNS)


def null_keys(table: pd.DataFrame, declared: Sequence[str] = ()) -> list[str]:
    """The key columns of ``table``: ``measure``, its text labels and ``declared`` keys."""
    keys = []
    for column in table.columns:
        if column in NOT_KEYS:
            continue
        series = table[column]
        text = not (pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series)
                    or _boolean_text(series))
        if column in declared or column == "measure" or text:
            keys.append(column)
    return keys


def _boolean_text(series: pd.Series) -> bool:
    present = series.dropna()
    return bool(len(present)) and all(isinstance(v, bool | np.bool_) for v in present.tolist())


def per_layer(table: pd.DataFrame, keys: Sequence[str]) -> bool:
    """True when the table has several rows per key (per head or per layer): grouped by
    layer too; False for one row per key (a best-of-model table)."""
    if "layer" not in table.columns:
        return False
    counts = table.groupby(list(keys), dropna=False).size() if keys else pd.Series([len(table)])
    return bool((counts > 1).any())


def add_null_columns(
    table: pd.DataFrame,
    null: pd.DataFrame,
    value: str = "value",
    declared_keys: Sequence[str] = (),
) -> pd.DataFrame:
    """``table`` with ``null_mean``, ``null_low``, ``null_high`` for its ``value`` column
    from the null model's table of the same name (see the module docstring). Rows without a
    null counterpart get NaN."""
    if value not in table.columns or value not in null.columns:
        return table
    keys = [k for k in null_keys(table, declared_keys) if k in null.columns and k != value]
    by = [*keys, "layer"] if per_layer(table, keys) else keys
    values = pd.to_numeric(null[value], errors="coerce")
    frame = null[by].assign(_v=values) if by else pd.DataFrame({"_v": values})
    frame = frame[np.isfinite(frame["_v"])]
    if by:
        grouped = frame.groupby(by, dropna=False)["_v"]
        if frame.empty:  # no finite null value: the group-by's own empty columns
            stats = grouped.agg(null_mean="mean",
                                null_low=lambda s: float(np.quantile(s, QUANTILES[0])),
                                null_high=lambda s: float(np.quantile(s, QUANTILES[1])))
        else:
            stats = grouped.agg(null_mean="mean")
            low, high = _group_quantiles(grouped.ngroup().to_numpy(),
                                         frame["_v"].to_numpy(dtype=float), len(stats))
            stats["null_low"], stats["null_high"] = low, high
        stats = stats.reset_index()
        out = table.drop(columns=[c for c in NULL_COLUMNS if c in table.columns])
        merged = out.merge(stats, on=by, how="left", sort=False)
        merged.index = table.index
        return merged
    v = frame["_v"].to_numpy()
    out = table.drop(columns=[c for c in NULL_COLUMNS if c in table.columns]).copy()
    empty = not len(v)
    out["null_mean"] = np.nan if empty else float(v.mean())
    out["null_low"] = np.nan if empty else float(np.quantile(v, QUANTILES[0]))
    out["null_high"] = np.nan if empty else float(np.quantile(v, QUANTILES[1]))
    return out


def _group_quantiles(group: np.ndarray, values: np.ndarray,
                     groups: int) -> tuple[np.ndarray, np.ndarray]:
    """``QUANTILES`` of ``values`` within each group (``group``: each value's group number,
    ``0 .. groups - 1``; NaN for a group without values): the bits of ``np.quantile`` on
    each group's values (its default, linear method: the same index, weight and
    interpolation formulas), for every group at once instead of one call per group. With a
    negative zero among the values (which ties with 0.0, and np.quantile's own partition
    decides which one a rank holds) it calls np.quantile per group (``_quantiles_each``)."""
    if not len(values) or np.any((values == 0) & np.signbit(values)):
        return _quantiles_each(group, values, groups)
    order = np.lexsort((values, group))  # by group, then value
    ordered = values[order]
    starts = np.searchsorted(group[order], np.arange(groups + 1))
    count = np.diff(starts)  # [group]
    bounds = []
    for q in QUANTILES:  # numpy's linear method, its index, weight and interpolation
        virtual = (count - 1) * q  # fractional rank
        top = virtual >= count - 1  # at or past the last value: the last value (numpy's -1)
        below = np.where(top, -1, np.floor(virtual))
        gamma = virtual - below
        rank_a = starts[:-1] + np.where(top, count - 1, below).astype(np.intp)
        rank_b = starts[:-1] + np.where(top, count - 1, below + 1).astype(np.intp)
        a = ordered[np.clip(rank_a, 0, len(ordered) - 1)]  # (clipped: an empty group's)
        b = ordered[np.clip(rank_b, 0, len(ordered) - 1)]
        diff = b - a  # numpy's _lerp, both of its branches
        value = np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)
        bounds.append(np.where(count > 0, value, np.nan))
    return bounds[0], bounds[1]


def _quantiles_each(group: np.ndarray, values: np.ndarray,
                    groups: int) -> tuple[np.ndarray, np.ndarray]:
    """``_group_quantiles`` by one ``np.quantile`` call per group."""
    order = np.argsort(group, kind="stable")
    starts = np.searchsorted(group[order], np.arange(groups + 1))
    low, high = np.full(groups, np.nan), np.full(groups, np.nan)
    for g in range(groups):
        rows = order[starts[g]:starts[g + 1]]
        if len(rows):
            low[g], high[g] = np.quantile(values[rows], QUANTILES)
    return low, high


def beyond_null(value: float, low: float, high: float, higher: bool = True) -> bool | None:
    """True when ``value`` lies beyond the null's bound on the notable side (above
    ``null_high`` when ``higher``, below ``null_low`` otherwise); None without a null."""
    bound = high if higher else low
    if bound is None or not np.isfinite(bound) or not np.isfinite(value):
        return None
    return bool(value > bound) if higher else bool(value < bound)
