"""An L0 run over several lambdas, written after each one and resumable like ``prune``.

Files in the output folder: ``l0_summary`` (one row per lambda: heads kept, per layer, the
held-out metric), ``l0_heads`` (per lambda and head: log_alpha, P(open), E[gate], kept),
``l0_curve`` (per lambda and training step: data loss, expected open gates, total loss) and
``l0_settings.json``. With ``resume`` the lambdas already in ``l0_summary`` are not trained
again (each lambda's training is seeded, so a resumed run ends with the same tables), and
other lambdas may be added: only the other settings must match.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from attnlens.errors import ConfigError, DataError
from attnlens.measures.pruning.l0 import L0Settings, heads_table, run_lambda
from attnlens.metrics.base import Metric
from attnlens.model.gates import heads_text, parse_heads
from attnlens.model.head_ids import head_ids_of
from attnlens.runs.io import atomic_open, write_table

SUMMARY, HEADS, CURVE, SETTINGS = "l0_summary", "l0_heads", "l0_curve", "l0_settings.json"


def _record(settings: L0Settings, description: dict) -> dict:
    """What a resumed run must share (every setting but the list of lambdas)."""
    l0 = {k: v for k, v in asdict(settings).items() if k != "lambdas"}
    return json.loads(json.dumps({"l0": l0, **description}))


def _previous(out: Path, record: dict) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    if not (out / f"{SUMMARY}.csv").is_file():
        return pd.DataFrame(), pd.DataFrame(), pd.DataFrame()
    if not (out / SETTINGS).is_file():
        raise DataError(f"{out} has {SUMMARY}.csv but no {SETTINGS}; cannot resume it.")
    saved = json.loads((out / SETTINGS).read_text())
    if saved != record:
        changed = sorted(k for k in set(saved) | set(record) if saved.get(k) != record.get(k))
        raise ConfigError(f"the L0 run in {out} used different settings ({', '.join(changed)});"
                          " rerun with the same options, or another --out without --resume.")
    summary, heads, curve = (pd.read_csv(out / f"{name}.csv", keep_default_na=False)
                             for name in (SUMMARY, HEADS, CURVE))
    if "heads_removed" in summary:  # a run of an older version wrote 2.8: continue in L2H8
        try:
            summary["heads_removed"] = [heads_text(parse_heads(t))
                                        for t in summary["heads_removed"]]
        except ConfigError as exc:
            raise DataError(f"{out / SUMMARY}.csv is damaged ({exc}); start over with "
                            "--force.") from exc
    return summary, heads, curve


def run_l0(model, importance: Metric, evaluation: Metric, settings: L0Settings, baseline: float,
           out_dir: str | Path | None = None, resume: bool = False,
           description: dict | None = None, show_progress: bool = False,
           ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Train and evaluate gates for every lambda; returns (summary, heads, curve) tables."""
    settings.validate()
    out = None if out_dir is None else Path(out_dir)
    record = _record(settings, dict(description or {}))
    summary, heads, curve = pd.DataFrame(), pd.DataFrame(), pd.DataFrame()
    if out is not None:
        if resume:
            summary, heads, curve = _previous(out, record)
        with atomic_open(out / SETTINGS) as handle:
            json.dump(record, handle, indent=2)
    done = set(summary["lambda"].astype(float)) if len(summary) else set()
    for lam in settings.lambdas:
        if float(lam) in done:
            continue
        row, result = run_lambda(model, importance, evaluation, float(lam), settings, baseline,
                                 show_progress)
        summary = pd.concat([summary, pd.DataFrame([row])], ignore_index=True)
        heads = pd.concat([heads, heads_table(result, head_ids_of(model))], ignore_index=True)
        curve = pd.concat([curve, result.curve.assign(**{"lambda": float(lam)})],
                          ignore_index=True)
        curve = curve[["lambda", *[c for c in curve.columns if c != "lambda"]]]
        if out is not None:
            for name, table in ((SUMMARY, summary), (HEADS, heads), (CURVE, curve)):
                write_table(table, out, name, formats=("csv",))
        done.add(float(lam))
    return summary, heads, curve


def compare_with_curves(summary: pd.DataFrame, curve: pd.DataFrame) -> pd.DataFrame:
    """``summary`` plus, per overall order of ``curve``, its metric at each lambda's number of
    heads pruned (linear interpolation between steps; seeded orders: mean over seeds)."""
    import numpy as np

    out = summary.copy()
    overall = curve[~curve["order"].astype(str).str.contains(":")]
    for order, rows in overall.groupby("order", sort=False):
        by_count = rows.groupby("n_pruned")["metric"].mean().sort_index()
        out[f"{order}_at_same_heads"] = np.interp(out["n_pruned"].astype(float),
                                                  by_count.index.astype(float),
                                                  by_count.to_numpy(), right=np.nan)
    return out
