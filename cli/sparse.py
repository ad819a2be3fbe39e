"""`attnlens sparse`: how much attention local windows, global tokens and BigBird keep."""

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

WindowsOpt = typer.Option("1,2,4,8,16", "--windows", help="Window half-widths w, comma-separated.")
GlobalOpt = typer.Option(
    2, "--global-tokens", min=0, help="Global tokens: special tokens plus the first G positions."
)
CoverageOpt = typer.Option(
    0.9, "--coverage", min=0.01, max=1.0, help="Share of the mass a window must keep."
)
SeedOpt = typer.Option(0, "--seed", help="Seed of BigBird's random keys.")


def parse_windows(value: str) -> tuple[int, ...]:
    from attnlens.errors import ConfigError

    try:
        windows = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise ConfigError(f"--windows takes integers like 1,2,4,8,16, not {value!r}.") from None
    if not windows or min(windows) < 0:
        raise ConfigError(f"--windows takes non-negative integers like 1,2,4,8,16, not {value!r}.")
    return windows


def sparse(
    model: opt.OptionalStr = opt.ModelArg,
    text: opt.OptionalPath = opt.TextOpt,
    treebank: opt.OptionalPath = opt.TreebankOpt,
    out: Path = opt.OutOpt,
    max_sentences: int | None = MaxSentencesOpt,
    windows: str = WindowsOpt,
    global_tokens: int = GlobalOpt,
    coverage: float = CoverageOpt,
    seed: int = SeedOpt,
    batch_size: int = opt.BatchSizeOpt,
    max_length: int = opt.MaxLengthOpt,
    device: str = opt.DeviceOpt,
    dtype: str = opt.DtypeOpt,
    allow_pickle: bool = opt.AllowPickleOpt,
    fmt: str = opt.FormatOpt,
    quiet: bool = opt.QuietOpt,
) -> None:
    """Per head: attention mass inside windows ±w, on global tokens and under BigBird's
    pattern, the smallest window keeping --coverage of it, and the output error
    ||(P - P_S) V|| / ||P V|| of the restricted, renormalised pattern."""
    from attnlens.data.words import load_corpus
    from attnlens.loaders import load
    from attnlens.report.analyze import analyze as run_analysis
    from attnlens.report.sparse_section import SparseSection
    from attnlens.report.writer import check_output_dir

    formats = opt.figure_formats(fmt)
    section = SparseSection(per_batch=None, max_sentences=max_sentences,
                            windows=parse_windows(windows), n_global=global_tokens,
                            coverage=coverage, seed=seed)
    corpus = load_corpus(text=str(text) if text else None,
                         treebank=str(treebank) if treebank else None)
    check_output_dir(out)
    model_obj, tokenizer = load(model, device=device, dtype=dtype, allow_pickle=allow_pickle)
    batches = corpus.batches(tokenizer, batch_size=batch_size, max_length=max_length)
    (output,) = run_analysis(model_obj, tokenizer, batches, out, sections=[section],
                             formats=formats, show_progress=not quiet, corpus_name=corpus.name)
    typer.echo(output.summary)
    console.print(f"wrote {len(output.tables)} tables and {len(output.figures)} figures "
                  f"to {out}/ (open {out / 'index.html'})")


def register(app: typer.Typer) -> None:
    app.command("sparse")(sparse)
