"""`attnlens eval`: real-task scores computed through attnlens (parity with the model's own)."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from attnlens.cli import options as opt
from rich.console import Console

console = Console(stderr=True)

eval_app = typer.Typer(
    help="Score a model on a real task through attnlens.",
    no_args_is_help=True,
)

PairsOpt = typer.Option(
    ..., "--pairs", help="CSV of sentence1,sentence2,score without header (e.g. STS-B dev).",
)
StsBatchSizeOpt = typer.Option(32, "--batch-size", min=1, help="Sentences per forward pass.")
StsMaxLengthOpt = typer.Option(
    256, "--max-length", min=4, help="Truncate sentences to this many tokens."
)


@eval_app.command("stsb")
def stsb(
    model: opt.OptionalStr = opt.ModelArg,
    pairs: Path = PairsOpt,
    batch_size: int = StsBatchSizeOpt,
    max_length: int = StsMaxLengthOpt,
    device: str = opt.DeviceOpt,
    dtype: str = opt.DtypeOpt,
    allow_pickle: bool = opt.AllowPickleOpt,
    quiet: bool = opt.QuietOpt,
    score_range: str | None = typer.Option(
        None, "--score-range", show_default=False,
        help="LOW,HIGH: the scale of the gold scores (default 0,5, STS-B's).",
    ),
) -> None:
    """STS Benchmark Spearman x 100 of embedding cosines vs gold scores (printed on stdout).

    Embeddings are mean-pooled over real tokens and L2-normalised (sentence-transformers).
    """
    from attnlens.data.pairs import parse_score_range, read_pairs

    data = read_pairs(pairs, parse_score_range(score_range))
    import torch

    from attnlens.loaders import load
    from attnlens.metrics.sts import distinct_sentences, sts_spearman
    from attnlens.progress import progress_bar

    start = time.perf_counter()
    model_obj, tokenizer = load(model, device=device, dtype=dtype, allow_pickle=allow_pickle)
    n_sentences = len(distinct_sentences(data))
    with torch.inference_mode(), progress_bar(
        "embedding sentences", n_sentences, enabled=not quiet
    ) as advance:
        score = sts_spearman(model_obj, tokenizer, data, batch_size, max_length, progress=advance)
    seconds = time.perf_counter() - start
    name = model or "all-MiniLM-L6-v2 (embedded)"
    typer.echo(f"{score:.2f}")
    console.print(
        f"STS-B Spearman x 100 = {score:.4f} on {len(data)} pairs ({n_sentences} distinct "
        f"sentences), {name}, max length {max_length}, {seconds:.1f} s"
    )


def register(app: typer.Typer) -> None:
    app.add_typer(eval_app, name="eval")
