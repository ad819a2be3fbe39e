"""`attnlens spectrum`: how low-rank each head's attention is, and its shared subspaces."""

from __future__ import annotations

import typer
from attnlens.cli.analyze import DEFAULT_OUT
from attnlens.cli.runner import CommandRun, command

NoCostOpt = typer.Option(
    False,
    "--no-low-rank-cost",
    help="Skip the rank-k truncation and Linformer errors (singular values only; faster).",
)


def spectrum(run: CommandRun, no_low_rank_cost: bool = NoCostOpt) -> None:
    """Singular-value spectra of MODEL's attention matrices on a corpus (layers/heads from 0).

    Also the spectra of each head's QK/OV circuits and the layers' shared query/key subspaces.
    """
    from attnlens.measures.spectrum.section import SpectrumSection

    run.write_report([SpectrumSection(low_rank_cost=not no_low_rank_cost)])


def register(app: typer.Typer) -> None:
    command(app, "spectrum", corpus=True, out=DEFAULT_OUT, null=True)(spectrum)
