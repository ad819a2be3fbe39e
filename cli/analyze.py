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
    device_map: opt.OptionalStr = opt.DeviceMapOpt,
    max_memory: opt.OptionalStr = opt.MaxMemoryOpt,
    allow_pickle: bool = opt.AllowPickleOpt,
    fmt: str = opt.FormatOpt,
    quiet: bool = opt.QuietOpt,
) -> None:
    """Analyse every attention head of MODEL on a corpus and write a report folder."""
    from attnlens import distributed
    from attnlens.data.words import load_corpus
    from attnlens.errors import ConfigError
    from attnlens.loaders import load
    from attnlens.loaders.device_map import parse_max_memory
    from attnlens.report.analyze import analyze as run_analysis
    from attnlens.report.writer import check_output_dir

    formats = opt.figure_formats(fmt)
    memory = parse_max_memory(max_memory)
    if device_map not in (None, "auto"):
        raise ConfigError(f"--device-map {device_map!r}: only 'auto' is supported.")
    ctx = distributed.context()  # torchrun: this process's rank; else a single process
    device = distributed.rank_device(device, ctx)
    # Corpus: --treebank, else --text (split into words), else the embedded sample treebank.
    corpus = load_corpus(
        text=str(text) if text else None, treebank=str(treebank) if treebank else None
    )
    corpus_name = corpus.name
    if ctx.is_main:
        check_output_dir(out)
    distributed.init(ctx, device)
    model_obj, tokenizer = load(model, device=device, dtype=dtype, allow_pickle=allow_pickle,
                                device_map=device_map, max_memory=memory)
    batches = corpus.batches(tokenizer, batch_size=batch_size, max_length=max_length)
    outputs = run_analysis(
        model_obj, tokenizer, batches, out, formats=formats,
        show_progress=not quiet and ctx.is_main, corpus_name=corpus_name, dist=ctx,
    )
    distributed.finish(ctx)
    if not ctx.is_main:
        return
    n_figures = sum(len(o.figures) for o in outputs)
    n_tables = sum(len(o.tables) for o in outputs)
    console.print(f"wrote {n_tables} tables and {n_figures} figures to {out}/ "
                  f"(open {out / 'index.html'})")


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)
