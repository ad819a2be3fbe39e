"""`attnlens spectrum`: how low-rank each head's attention is, and its shared subspaces."""

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

NoCostOpt = typer.Option(
    False,
    "--no-low-rank-cost",
    help="Skip the rank-k truncation and Linformer errors (singular values only; faster).",
)


TopKOpt = typer.Option(
    0, "--top-k", min=0,
    help="Long inputs: sentences of at least --top-k-min-n tokens get only their top K "
    "singular values, with bounds of the rest (0: full spectra; docs/spectrum.md). On inputs "
    "read in query blocks they never hold a whole matrix (docs/long-context.md).",
)
TopKMinOpt = typer.Option(
    1024, "--top-k-min-n", min=1, help="Shortest sentence (tokens) that --top-k applies to.",
)


def spectrum(
    run: CommandRun,
    model: Model = None,
    no_low_rank_cost: bool = NoCostOpt,
    top_k: int = TopKOpt,
    top_k_min_n: int = TopKMinOpt,
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
    """Singular-value spectra of MODEL's attention matrices on a corpus (layers/heads from 0).

    Also the spectra of each head's QK/OV circuits and the layers' shared query/key subspaces.
    """
    from attnlens.measures.spectrum.section import SpectrumSection

    run.write_report([SpectrumSection(low_rank_cost=not no_low_rank_cost, top_k=top_k,
                                      top_k_min_n=top_k_min_n)])


def register(app: typer.Typer) -> None:
    command(app, "spectrum")(spectrum)
