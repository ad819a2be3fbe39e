"""`attnlens linear`: the fast-weight / linear-attention view of every head."""

from __future__ import annotations

from pathlib import Path

import typer
from attnlens.cli import options as opt
from rich.console import Console

console = Console(stderr=True)

MaxSentencesOpt = typer.Option(
    None, "--max-sentences", min=1,
    help="Read at most this many sentences (batches come in a shuffled order). (default all)",
    show_default=False,
)


def linear(
    model: opt.OptionalStr = opt.ModelArg,
    text: opt.OptionalPath = opt.TextOpt,
    treebank: opt.OptionalPath = opt.TreebankOpt,
    out: Path = opt.OutOpt,
    max_sentences: int | None = MaxSentencesOpt,
    batch_size: int = opt.BatchSizeOpt,
    max_length: int = opt.MaxLengthOpt,
    device: str = opt.DeviceOpt,
    dtype: str = opt.DtypeOpt,
    allow_pickle: bool = opt.AllowPickleOpt,
    fmt: str = opt.FormatOpt,
    quiet: bool = opt.QuietOpt,
) -> None:
    """Per head: key interference (mean |cos| of distinct keys), effective orthogonal keys
    against length and d_head, and the output error of linear attention (elu+1, Katharopoulos
    et al. 2020) and of the unnormalised (Q K^T) V; most and least linearisable heads."""
    from attnlens.data.words import load_corpus
    from attnlens.loaders import load
    from attnlens.report.analyze import analyze as run_analysis
    from attnlens.report.linear_section import LinearSection
    from attnlens.report.writer import check_output_dir

    formats = opt.figure_formats(fmt)
    corpus = load_corpus(text=str(text) if text else None,
                         treebank=str(treebank) if treebank else None)
    check_output_dir(out)
    model_obj, tokenizer = load(model, device=device, dtype=dtype, allow_pickle=allow_pickle)
    batches = corpus.batches(tokenizer, batch_size=batch_size, max_length=max_length)
    section = LinearSection(per_batch=None, max_sentences=max_sentences)
    (output,) = run_analysis(model_obj, tokenizer, batches, out, sections=[section],
                             formats=formats, show_progress=not quiet, corpus_name=corpus.name)
    typer.echo(output.summary)
    console.print(f"wrote {len(output.tables)} tables and {len(output.figures)} figures "
                  f"to {out}/ (open {out / 'index.html'})")


def register(app: typer.Typer) -> None:
    app.command("linear")(linear)
