"""`attnlens report`: rebuild a report folder's page from its tables (no model needed)."""

from __future__ import annotations

from pathlib import Path

import typer
from attnlens.cli.options import Quiet
from attnlens.cli.runner import CommandRun, command

FolderArg = typer.Argument(..., help="A report folder written by `attnlens analyze --out DIR`.",
                           show_default=False)
PruneOpt = typer.Option(
    None, "--prune", help="Also add a pruning run folder (attnlens prune --out DIR): head "
    "importance in the cards, its curve and tables as a section.", show_default=False,
)


def report(
    run: CommandRun,
    folder: Path = FolderArg,
    prune: Path | None = PruneOpt,
    quiet: Quiet = False,
) -> None:
    """Rebuild DIR/index.html from DIR/run.json, DIR/tables and DIR/figures.

    Use it after editing or adding tables, to attach a pruning run, or to get the current
    page design for an older report. Layers and heads are numbered from 0.
    """
    from attnlens.report.folder import Report
    from attnlens.runs.io import WORK_SUFFIX_BYTES, check_writable_target

    opened = Report(folder)
    check_writable_target(Path(folder) / "index.html", "DIR", added=WORK_SUFFIX_BYTES)
    if prune is not None:
        from attnlens.measures.pruning.section import add_prune_run

        add_prune_run(opened, prune)
    path = opened.render()
    size = path.stat().st_size / 1e6
    run.note(f"wrote {path} ({size:.1f} MB, {len(opened.tables)} tables)")


def register(app: typer.Typer) -> None:
    command(app, "report", usage="DIR")(report)
