"""A pruning run (``attnlens prune --out DIR``) as a report section: head importance."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

from attnlens.errors import ConfigError, DataError
from attnlens.head_names import head_name, parse_heads
from attnlens.report.catalog import CardItem, FigureDoc, SectionDoc, TableDoc
from attnlens.report.folder import (
    FIGURE_SUFFIXES,
    RUN_FILE,
    Report,
    SectionRecord,
    check_numeric_columns,
)
from attnlens.report.papers import MICHEL, VOITA
from attnlens.runs.io import restore_formulas, write_table

PRUNE = SectionDoc(
    about=(
        "What each head is worth to a real metric. Importance is Michel et al.'s expected "
        "absolute gradient of the loss with respect to a gate on the head's output, "
        "normalised within each layer; heads are then removed in order of increasing "
        "importance and the metric is measured on held-out data after every step."
    ),
    papers=(MICHEL, VOITA),
    command="attnlens prune",
    tables=(
        TableDoc("head_importance", "Importance of every head on the unpruned model (higher: "
                 "keep) and its rank (1 = most important)."),
        TableDoc("prune_curve", "The metric after each pruning step, per order and seed."),
        TableDoc("prune_scores", "Every score used, per order, seed and step."),
    ),
    figures=(FigureDoc("prune_curve", "The metric against the fraction of heads pruned."),),
    card=(CardItem("head_importance", "Importance (pruning run)", kind="row",
                   columns=("score", "rank")),),
)

# Rollout/flow, sparse coverage, linear attention (issue 16) ----------------------------------

TITLE = "Head importance and pruning"


def head_importance(scores: pd.DataFrame) -> pd.DataFrame:
    """Per head: the score the pruning used first (``importance`` order if there is one, its
    first seed, scored on the unpruned model) and its rank (1 = most important)."""
    needed = {"order", "seed", "scored_after_step", "layer", "head", "score"}
    if not needed <= set(scores.columns):
        raise DataError(f"prune_scores.csv lacks columns {sorted(needed - set(scores.columns))}.")
    orders = list(dict.fromkeys(scores["order"]))
    order = "importance" if "importance" in orders else orders[0]
    rows = scores[scores["order"] == order]
    rows = rows[(rows["seed"] == rows["seed"].min())
                & (rows["scored_after_step"] == rows["scored_after_step"].min())]
    table = rows[["layer", "head", "score"]].sort_values(["layer", "head"], ignore_index=True)
    table["rank"] = table["score"].rank(ascending=False, method="min").astype(int)
    table["order"] = order
    return table


# The columns of a pruning run's tables that hold numbers (a hand edit is refused by name).
SCORE_NUMBERS = ["seed", "scored_after_step", "score"]
CURVE_NUMBERS = ["seed", "step", "n_pruned", "fraction_pruned", "metric", "change", "params",
                 "seconds"]


def _read(path: Path, numbers: list[str]) -> pd.DataFrame:
    """A pruning run's table, checked like a report's (``check_numeric_columns``)."""
    try:
        table = restore_formulas(pd.read_csv(path))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(f"table {path} cannot be read: {exc}") from exc
    check_numeric_columns(table, path, numbers)
    return table


def _heads_in_one_notation(curve: pd.DataFrame, path: Path) -> pd.DataFrame:
    """``heads_removed`` in ``L2H8``; a run of an older version wrote ``2.8``."""
    if "heads_removed" not in curve:
        return curve
    try:
        cells = [" ".join(head_name(*h) for h in parse_heads(text, "heads_removed"))
                 if isinstance(text, str) else "" for text in curve["heads_removed"]]
    except ConfigError as exc:
        raise DataError(f"table {path} cannot be read: {exc}") from exc
    return curve.assign(heads_removed=cells)


def attach_prune_run(
    prune_dir: str | Path, tables_dir: str | Path, figures_dir: str | Path
) -> SectionRecord:
    """Copy a pruning run's tables and figure into a report's table and figure folders."""
    source = Path(prune_dir)
    scores_file = source / "prune_scores.csv"
    if not scores_file.is_file():
        raise DataError(f"{source} is not a pruning run folder (no prune_scores.csv); make one "
                        "with `attnlens prune --out DIR`.")
    tables_dir, figures_dir = Path(tables_dir), Path(figures_dir)
    scores = _read(scores_file, SCORE_NUMBERS)
    tables = {"head_importance": head_importance(scores), "prune_scores": scores}
    if (source / "prune_curve.csv").is_file():
        tables["prune_curve"] = _heads_in_one_notation(
            _read(source / "prune_curve.csv", CURVE_NUMBERS), source / "prune_curve.csv")
    for name, table in tables.items():
        write_table(table, tables_dir, name)
    figures = []
    for path in sorted(source.glob("prune_curve.*")):
        if path.suffix in FIGURE_SUFFIXES:
            figures_dir.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, figures_dir / path.name)
            figures.append(path.stem)
    notes = [f"Pruning run: {source}."]
    run_file = source / "run.json"
    if run_file.is_file():
        try:
            run = json.loads(run_file.read_text(encoding="utf-8"))
        except ValueError:
            run = {}
        if isinstance(run, dict) and run.get("metric"):
            notes.append(f"Metric {run['metric']} on {run.get('split') or run.get('data', '')}; "
                         f"unpruned model: {run.get('baseline', '?')}.")
    return SectionRecord("prune", TITLE, doc=PRUNE, tables=list(tables),
                         figures=sorted(set(figures)), notes=notes)


def add_prune_run(report: Report, prune_dir: str | Path) -> SectionRecord:
    """Attach a pruning run to an existing report folder (its run.json gains the section)."""
    from attnlens.runs.io import atomic_open

    record = attach_prune_run(prune_dir, report.tables_dir, report.figures_dir)
    run = report.run
    if not isinstance(run.get("sections"), list):
        run["sections"] = [s.to_json() for s in report.sections()]
    run["sections"] = [s for s in run["sections"]
                       if not (isinstance(s, dict) and s.get("name") == "prune")]
    run["sections"].append(record.to_json())
    with atomic_open(report.path / RUN_FILE) as handle:
        json.dump(run, handle, indent=2, default=str)
        handle.write("\n")
    return record
