"""`attnlens sparse`: how much attention local windows, global tokens and BigBird keep."""

from __future__ import annotations

import typer
from attnlens.cli.analyze import DEFAULT_OUT
from attnlens.cli.runner import CommandRun, command

WindowsOpt = typer.Option("1,2,4,8,16", "--windows", help="Window half-widths w, comma-separated.")
GlobalOpt = typer.Option(
    2, "--global-tokens", min=0, help="Global tokens: special tokens plus the first G positions."
)
CoverageOpt = typer.Option(
    0.9, "--coverage", min=0.01, max=1.0, help="Share of the mass a window must keep."
)
SeedOpt = typer.Option(0, "--seed", help="Seed of BigBird's random keys.")


def parse_windows(value: str) -> tuple[int, ...]:
    from attnlens.numeric import parse_numbers

    return parse_numbers("--windows", value, integer=True, low=0, example="1,2,4,8,16")


def sparse(
    run: CommandRun,
    windows: str = WindowsOpt,
    global_tokens: int = GlobalOpt,
    coverage: float = CoverageOpt,
    seed: int = SeedOpt,
) -> None:
    """Per head: attention mass inside windows ±w, on global tokens and under BigBird's
    pattern, the smallest window keeping --coverage of it, and the output error
    ||(P - P_S) V|| / ||P V|| of the restricted, renormalised pattern."""
    chosen = parse_windows(windows)
    from attnlens.measures.sparse.section import SparseSection

    section = SparseSection(per_batch=None, max_sentences=None, windows=chosen,
                            n_global=global_tokens, coverage=coverage, seed=seed)
    run.write_report([section])


def register(app: typer.Typer) -> None:
    command(app, "sparse", corpus=True, out=DEFAULT_OUT, null=True)(sparse)
