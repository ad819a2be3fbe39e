"""`attnlens rollout`: attention rollout or attention flow (Abnar & Zuidema 2020)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

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
    Null,
    NullSeed,
    Out,
    Parse,
    QueryBlock,
    Quiet,
    Text,
    Treebank,
    WholeMatrixLimit,
    hidden_alias,
)
from attnlens.cli.runner import CommandRun, command

_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")

ArgsArg = typer.Argument(
    None,
    help="[MODEL] TEXT...: an optional model (a folder, or a hub id in the local HF cache; "
    "default: the embedded all-MiniLM-L6-v2) followed by the sentences to analyse.",
    show_default=False,
    metavar="[MODEL] TEXT...",
)
MethodOpt = typer.Option("rollout", "--method", help="rollout or flow (max-flow; slow).")
ResidualOpt = typer.Option(
    0.5, "--residual", min=0.0, max=1.0,
    help="Weight r of the attention in r·A + (1-r)·I (the residual connection gets 1-r).",
)
FusionOpt = typer.Option("mean", "--head-fusion", help="Fuse heads by mean, max or min.")
SentencesOpt = typer.Option(
    50, "--matrix-sentences", min=1,
    help="Write matrices (table, figures) for the first N sentences; layer shares use all.",
)
FlowMaxOpt = typer.Option(
    40, "--flow-max-tokens", min=2, help="Skip longer sentences in attention flow.",
)
FiguresOpt = typer.Option(20, "--figures", min=0, help="Sentences drawn as figures.")


def split_model_and_texts(args: list[str]) -> tuple[str | None, list[str]]:
    """(MODEL, TEXT...) from the positional arguments.

    The first argument is the model when it is an existing folder or looks like a hub id
    (``owner/name``), or when it is one word followed by more text and found in the local
    Hugging Face cache; otherwise every argument is a text for the embedded model.
    """
    if not args:
        return None, []
    first = args[0]
    if Path(first).expanduser().is_dir() or _HUB_ID.match(first):
        return first, args[1:]
    if len(args) > 1 and not any(ch.isspace() for ch in first):
        from attnlens.errors import ModelLoadError
        from attnlens.loaders.checkpoint import resolve_checkpoint

        try:
            resolve_checkpoint(first)
        except ModelLoadError:
            return None, args
        return first, args[1:]
    return None, args


def rollout(
    run: CommandRun,
    args: list[str] | None = ArgsArg,
    method: str = MethodOpt,
    residual: float = ResidualOpt,
    head_fusion: str = FusionOpt,
    matrix_sentences: int = SentencesOpt,
    flow_max_tokens: int = FlowMaxOpt,
    figures: int = FiguresOpt,
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
    alias_sentences: Annotated[int | None, hidden_alias("--sentences")] = None,
) -> None:
    """Which input tokens each position draws on after every layer: attention rollout
    (R_l = Ã_l R_(l-1), Ã_l = r·fuse(A_l) + (1-r)·I) or attention flow (max-flow).

    Sentences: TEXT arguments, --text FILE (one per line), --treebank FILE, or the embedded
    sample treebank. Writes a report folder: tables/rollout.csv (and tables/flow.csv:
    sentence, layer, query, key, query_token, key_token, value; positions from 0, special
    tokens included), tables/rollout_layers.csv, per-sentence figures and index.html.
    """
    from attnlens.errors import ConfigError
    from attnlens.measures.rollout.rollout import check_rollout_options

    check_rollout_options(residual, head_fusion)
    if method not in ("rollout", "flow"):
        raise ConfigError(f"unknown method {method!r}; use rollout or flow.")
    model, texts = split_model_and_texts(list(args or []))
    if texts and run.corpus.given:
        given = "--text" if run.corpus.text else "--treebank" if run.corpus.treebank else "--parse"
        raise ConfigError(f"give sentences one way, not TEXT and {given}.")
    if method == "flow":
        from attnlens.measures.rollout.flow import maximum_flow_solver

        maximum_flow_solver()  # scipy missing: fail before loading the model
    run.model.name = model
    run.model.check()
    from attnlens.data.corpus import Corpus
    from attnlens.measures.rollout.section import RolloutSection

    corpus = (Corpus(f"{len(texts)} sentences from the command line", texts=texts)
              if texts else run.read_corpus())
    section = RolloutSection(residual=residual, fusion=head_fusion, sentences=matrix_sentences,
                             method=method, flow_max_tokens=flow_max_tokens,
                             max_figures=figures)
    run.write_report([section], corpus=corpus)


def register(app: typer.Typer) -> None:
    command(app, "rollout", usage="[MODEL] [TEXT]...",
            aliases={"alias_sentences": "matrix_sentences"})(rollout)
