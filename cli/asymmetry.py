"""`attnlens asymmetry`: query/key asymmetry of the weights and of the attention patterns."""

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

WeightsOnlyOpt = typer.Option(
    False, "--weights-only", help="Only the weights part (W_Q W_K^T); reads no corpus."
)
FactorOpt = typer.Option(
    2.0, "--factor", min=1.0,
    help="A pair is one-way when one direction has at least this many times the other's weight.",
)


def asymmetry(
    run: CommandRun,
    model: Model = None,
    weights_only: bool = WeightsOnlyOpt,
    factor: float = FactorOpt,
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
    """How asymmetric MODEL's query/key maps and attention patterns are (layers/heads from 0).

    The patterns part is compared with unweighted self-attention softmax(X X^T / sqrt(C)) on
    each layer's own input.
    """
    from attnlens.errors import ConfigError

    if weights_only and run.corpus.given:
        raise ConfigError("--weights-only reads no corpus; drop --text/--treebank or "
                          "--weights-only.")
    from attnlens.measures.asymmetry.section import AsymmetrySection

    run.write_report([AsymmetrySection(weights_only=weights_only, factor=factor)],
                     use_corpus=not weights_only, corpus_name="none (--weights-only)")


def register(app: typer.Typer) -> None:
    command(app, "asymmetry")(asymmetry)
