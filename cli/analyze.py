"""`attnlens analyze`: the full report for one model on one corpus."""

from __future__ import annotations

from pathlib import Path

import typer
from attnlens.cli.runner import CommandRun, command

DEFAULT_OUT = Path("attnlens-report")

PruneOpt = typer.Option(
    None, "--prune", help="A pruning run folder (attnlens prune --out DIR): adds head importance.",
    show_default=False,
)


def analyze(run: CommandRun, prune: Path | None = PruneOpt) -> None:
    """Analyse every attention head of MODEL on a corpus and write a report folder.

    The folder holds index.html (open it in a browser), run.json, tables/ and figures/;
    `attnlens report DIR` rebuilds the page from them.
    """
    if prune is not None and not (prune / "prune_scores.csv").is_file():
        from attnlens.errors import DataError

        raise DataError(f"--prune {prune}: not a pruning run folder (no prune_scores.csv); "
                        "give the --out folder of `attnlens prune`.")
    run.write_report(sections=None, print_summaries=False, prune_dir=prune)


def register(app: typer.Typer) -> None:
    command(app, "analyze", corpus=True, out=DEFAULT_OUT, device_map=True, resumable=True,
            checkpoints=True, null=True)(analyze)
