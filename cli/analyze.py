"""`attnlens analyze`: the full report for one model on one corpus."""

from __future__ import annotations

from pathlib import Path

import typer
from attnlens.cli import options as opt
from rich.console import Console

console = Console(stderr=True)


def analyze(
    model: opt.OptionalStr = opt.ModelArg,
    text: opt.OptionalPath = opt.TextOpt,
    treebank: opt.OptionalPath = opt.TreebankOpt,
    out: Path = opt.OutOpt,
    batch_size: int = opt.BatchSizeOpt,
    max_length: int = opt.MaxLengthOpt,
    device: str = opt.DeviceOpt,
    dtype: str = opt.DtypeOpt,
    allow_pickle: bool = opt.AllowPickleOpt,
    fmt: str = opt.FormatOpt,
    quiet: bool = opt.QuietOpt,
    force: bool = opt.ForceOpt,
    resume: bool = opt.ResumeOpt,
    checkpoint_every: int | None = opt.CheckpointEveryOpt,
) -> None:
    """Analyse every attention head of MODEL on a corpus and write a report folder."""
    from attnlens.cli.outputs import prepare_output

    from attnlens.checkpointing import AnalysisCheckpoint
    from attnlens.data.words import load_corpus

    formats = opt.figure_formats(fmt)
    # Corpus: --treebank, else --text (split into words), else the embedded sample treebank.
    corpus = load_corpus(
        text=str(text) if text else None, treebank=str(treebank) if treebank else None
    )
    corpus_name = corpus.name
    folder, manifest = prepare_output(out, force=force, resume=resume, resumable=True,
                                      inputs={"text": text, "treebank": treebank}, model=model)
    if folder.resumes_complete:
        console.print(f"{out}/ already holds this run, complete; nothing to resume.")
        return
    from attnlens.loaders import load
    from attnlens.report.analyze import analyze as run_analysis

    model_obj, tokenizer = load(model, device=device, dtype=dtype, allow_pickle=allow_pickle)
    batches = corpus.batches(tokenizer, batch_size=batch_size, max_length=max_length)
    with folder.writing(manifest) as work:
        checkpoint = AnalysisCheckpoint(work, checkpoint_every, resume=folder.resumes_partial)
        outputs = run_analysis(
            model_obj, tokenizer, batches, work, formats=formats, show_progress=not quiet,
            corpus_name=corpus_name, checkpoint=checkpoint,
        )
    n_figures = sum(len(o.figures) for o in outputs)
    n_tables = sum(len(o.tables) for o in outputs)
    console.print(f"wrote {n_tables} tables and {n_figures} figures to {out}/ "
                  f"(open {out / 'index.html'})")


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)
