"""`attnlens sparse`: how much attention local windows, global tokens and BigBird keep."""

from __future__ import annotations

import typer
from attnlens.cli.analyze import DEFAULT_OUT
from attnlens.cli.options import (
    AllowPickle,
    Backend,
    BatchSize,
    Device,
    Dtype,
    Force,
    Format,
    MaxLength,
    MaxSentences,
    Model,
    Null,
    NullSeed,
    Out,
    Parse,
    QueryBlock,
    Quiet,
    Text,
    Treebank,
    WholeMatrixLimit,
)
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
    model: Model = None,
    windows: str = WindowsOpt,
    global_tokens: int = GlobalOpt,
    coverage: float = CoverageOpt,
    seed: int = SeedOpt,
    text: Text = None,
    treebank: Treebank = None,
    parse: Parse = False,
    max_sentences: MaxSentences = None,
    batch_size: BatchSize = 16,
    max_length: MaxLength = None,
    query_block: QueryBlock = None,
    whole_matrix_limit: WholeMatrixLimit = 4096,
    out: Out = DEFAULT_OUT,
    fmt: Format = "svg",
    force: Force = False,
    device: Device = "cpu",
    dtype: Dtype = "float32",
    allow_pickle: AllowPickle = False,
    backend: Backend = "auto",
    null: Null = "random-init",
    null_seed: NullSeed = 0,
    quiet: Quiet = False,
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
    command(app, "sparse")(sparse)
