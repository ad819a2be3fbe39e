"""`attnlens linear`: the fast-weight / linear-attention view of every head."""

from __future__ import annotations

import typer
from attnlens.cli.analyze import DEFAULT_OUT
from attnlens.cli.runner import CommandRun, command


def linear(run: CommandRun) -> None:
    """Per head: key interference (mean |cos| of distinct keys), effective orthogonal keys
    against length and d_head, and the output error of linear attention (elu+1, Katharopoulos
    et al. 2020) and of the unnormalised (Q K^T) V; most and least linearisable heads."""
    from attnlens.measures.linear.section import LinearSection

    run.write_report([LinearSection(per_batch=None, max_sentences=None)])


def register(app: typer.Typer) -> None:
    command(app, "linear", corpus=True, out=DEFAULT_OUT, null=True)(linear)
