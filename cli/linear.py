"""`attnlens linear`: the fast-weight / linear-attention view of every head."""

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


def linear(
    run: CommandRun,
    model: Model = None,
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
    """Per head: key interference (mean |cos| of distinct keys), effective orthogonal keys
    against length and d_head, and the output error of linear attention (elu+1, Katharopoulos
    et al. 2020) and of the unnormalised (Q K^T) V; most and least linearisable heads."""
    from attnlens.measures.linear.section import LinearSection

    run.write_report([LinearSection(per_batch=None, max_sentences=None)])


def register(app: typer.Typer) -> None:
    command(app, "linear")(linear)
