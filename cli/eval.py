"""`attnlens eval`: real-task scores computed through attnlens (parity with the model's own)."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from attnlens.cli.options import (
    AllowPickle,
    Backend,
    BatchSize,
    Device,
    Dtype,
    MaxLength,
    Model,
    QueryBlock,
    Quiet,
    WholeMatrixLimit,
)
from attnlens.cli.runner import CommandRun, command

from attnlens.runs.io import check_input_file

eval_app = typer.Typer(
    help="Score a model on a real task through attnlens.",
    no_args_is_help=True,
)

PairsOpt = typer.Option(
    ..., "--pairs", show_default=False,
    help="CSV of sentence1,sentence2,score without header (e.g. STS-B dev).",
)
ScoreRangeOpt = typer.Option(
    None, "--score-range", show_default=False,
    help="LOW,HIGH: the scale of the gold scores (default 0,5, STS-B's).",
)


def stsb(
    run: CommandRun,
    model: Model = None,
    pairs: Path = PairsOpt,
    score_range: str | None = ScoreRangeOpt,
    batch_size: BatchSize = 32,
    max_length: MaxLength = None,
    query_block: QueryBlock = None,
    whole_matrix_limit: WholeMatrixLimit = 4096,
    device: Device = "cpu",
    dtype: Dtype = "float32",
    allow_pickle: AllowPickle = False,
    backend: Backend = "auto",
    quiet: Quiet = False,
) -> None:
    """STS Benchmark Spearman x 100 of embedding cosines vs gold scores (printed on stdout).

    Embeddings are mean-pooled over real tokens and L2-normalised (sentence-transformers).
    """
    check_input_file(pairs, "--pairs", "CSV of sentence1,sentence2,score")
    from attnlens.data.pairs import parse_score_range, read_pairs

    data = read_pairs(pairs, parse_score_range(score_range))  # checked before the model loads
    import torch

    from attnlens.metrics.sts import distinct_sentences, sts_spearman
    from attnlens.progress import progress_bar

    start = time.perf_counter()
    loaded, tokenizer = run.load_model()
    n_sentences = len(distinct_sentences(data))
    with torch.inference_mode(), progress_bar(
        "embedding sentences", n_sentences, enabled=run.show_progress
    ) as advance:
        score = sts_spearman(loaded, tokenizer, data, run.batch_size, run.max_length,
                             progress=advance)
    seconds = time.perf_counter() - start
    typer.echo(f"{score:.2f}")
    run.note(
        f"STS-B Spearman x 100 = {score:.4f} on {len(data)} pairs ({n_sentences} distinct "
        f"sentences), {loaded.cfg.source['name']}, max length {run.max_length}, {seconds:.1f} s"
    )


command(eval_app, "stsb")(stsb)


def register(app: typer.Typer) -> None:
    app.add_typer(eval_app, name="eval")
