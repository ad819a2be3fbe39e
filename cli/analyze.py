"""`attnlens analyze`: the full report for one model on one corpus."""

from __future__ import annotations

from pathlib import Path

import typer
from attnlens.cli.runner import CommandRun, command

DEFAULT_OUT = Path("attnlens-report")


def analyze(run: CommandRun) -> None:
    """Analyse every attention head of MODEL on a corpus and write a report folder."""
    run.write_report(sections=None, print_summaries=False)


def register(app: typer.Typer) -> None:
    command(app, "analyze", corpus=True, out=DEFAULT_OUT)(analyze)
