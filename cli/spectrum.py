"""`attnlens spectrum`: how low-rank each head's attention is, and its shared subspaces."""

from __future__ import annotations

from pathlib import Path

import typer
from attnlens.cli import options as opt
from rich.console import Console

console = Console(stderr=True)

NoCostOpt = typer.Option(
    False,
    "--no-low-rank-cost",
    help="Skip the rank-k truncation and Linformer errors (singular values only; faster).",
)


def spectrum(
    model: opt.OptionalStr = opt.ModelArg,
    text: opt.OptionalPath = opt.TextOpt,
    out: Path = opt.OutOpt,
    batch_size: int = opt.BatchSizeOpt,
    max_length: int = opt.MaxLengthOpt,
    device: str = opt.DeviceOpt,
    dtype: str = opt.DtypeOpt,
    allow_pickle: bool = opt.AllowPickleOpt,
    no_low_rank_cost: bool = NoCostOpt,
    fmt: str = opt.FormatOpt,
    quiet: bool = opt.QuietOpt,
    force: bool = opt.ForceOpt,
) -> None:
    """Singular-value spectra of MODEL's attention matrices on a corpus (layers/heads from 0).

    Also the spectra of each head's QK/OV circuits and the layers' shared query/key subspaces.
    """
    from attnlens.cli.outputs import prepare_output

    from attnlens.data.text import read_text_file, sample_sentences, text_batches

    formats = opt.figure_formats(fmt)
    texts = read_text_file(text) if text else sample_sentences()
    corpus_name = str(text) if text else "built-in sample (50 sentences)"
    folder, _ = prepare_output(out, force=force, inputs={"text": text}, model=model)
    from attnlens.loaders import load
    from attnlens.report.analyze import analyze as run_analysis
    from attnlens.report.spectrum_section import SpectrumSection

    model_obj, tokenizer = load(model, device=device, dtype=dtype, allow_pickle=allow_pickle)
    batches = text_batches(tokenizer, texts, batch_size=batch_size, max_length=max_length)
    with folder.writing() as work:
        (output,) = run_analysis(
            model_obj, tokenizer, batches, work,
            sections=[SpectrumSection(low_rank_cost=not no_low_rank_cost)],
            formats=formats, show_progress=not quiet, corpus_name=corpus_name,
        )
    typer.echo(output.summary)
    console.print(f"wrote {len(output.tables)} tables and {len(output.figures)} figures "
                  f"to {out}/ (open {out / 'index.html'})")


def register(app: typer.Typer) -> None:
    app.command("spectrum")(spectrum)
