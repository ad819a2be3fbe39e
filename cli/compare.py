"""`attnlens compare`: two report folders side by side (two models, or a model and its
pruned version)."""

from __future__ import annotations

from pathlib import Path

import typer
from attnlens.cli.options import Force, Out, Quiet
from attnlens.cli.runner import CommandRun, command

ReportA = typer.Argument(..., help="First report folder (A).", show_default=False)
ReportB = typer.Argument(..., help="Second report folder (B); differences are B - A.",
                         show_default=False)
TopOpt = typer.Option(50, "--top", min=1, help="Rows of the largest-differences table.")


def compare(
    run: CommandRun,
    dir_a: Path = ReportA,
    dir_b: Path = ReportB,
    top: int = TopOpt,
    out: Out = Path("attnlens-compare"),
    force: Force = False,
    quiet: Quiet = False,
) -> None:
    """Compare two reports head by head: difference heatmaps per measure, heads whose role
    changed, and the largest differences. Reads only the folders' tables (no model).

    Heads are matched by (layer, head), numbered from 0.
    """
    from attnlens.errors import ConfigError
    from attnlens.report.compare import compare as run_compare
    from attnlens.report.compare_page import write_comparison
    from attnlens.report.folder import Report

    out = run.output.folder
    a, b = Report(dir_a), Report(dir_b)
    if out.resolve() in (a.path.resolve(), b.path.resolve()):
        raise ConfigError(f"--out {out} is one of the compared reports; choose another folder.")
    comparison = run_compare(a, b, top=top)
    with run.writing() as work:
        page = out / write_comparison(comparison, work).relative_to(work)
    for warning in comparison.warnings:
        run.note(f"warning: {warning}")
    changed = len(comparison.tables["role_changes"])
    run.note(f"{changed} heads changed role; {len(comparison.grids)} difference heatmaps. "
                  f"Wrote {out}/ (open {page})")


def register(app: typer.Typer) -> None:
    command(app, "compare", usage="DIR_A DIR_B")(compare)
