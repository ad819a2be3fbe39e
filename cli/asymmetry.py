"""`attnlens asymmetry`: query/key asymmetry of the weights and of the attention patterns."""

from __future__ import annotations

from pathlib import Path

import typer
from attnlens.cli import options as opt
from rich.console import Console

console = Console(stderr=True)

WeightsOnlyOpt = typer.Option(
    False, "--weights-only", help="Only the weights part (W_Q W_K^T); reads no corpus."
)
FactorOpt = typer.Option(
    2.0, "--factor", min=1.0,
    help="A pair is one-way when one direction has at least this many times the other's weight.",
)


def asymmetry(
    model: opt.OptionalStr = opt.ModelArg,
    text: opt.OptionalPath = opt.TextOpt,
    out: Path = opt.OutOpt,
    weights_only: bool = WeightsOnlyOpt,
    factor: float = FactorOpt,
    batch_size: int = opt.BatchSizeOpt,
    max_length: int = opt.MaxLengthOpt,
    device: str = opt.DeviceOpt,
    dtype: str = opt.DtypeOpt,
    allow_pickle: bool = opt.AllowPickleOpt,
    fmt: str = opt.FormatOpt,
    quiet: bool = opt.QuietOpt,
    force: bool = opt.ForceOpt,
) -> None:
    """How asymmetric MODEL's query/key maps and attention patterns are (layers/heads from 0).

    The patterns part is compared with unweighted self-attention softmax(X X^T / sqrt(C)) on
    each layer's own input.
    """
    from attnlens.cli.outputs import prepare_output

    from attnlens.data.text import read_text_file, sample_sentences, text_batches
    from attnlens.errors import ConfigError

    if weights_only and text:
        raise ConfigError("--weights-only reads no corpus; drop --text or --weights-only.")
    formats = opt.figure_formats(fmt)
    texts = None if weights_only else (read_text_file(text) if text else sample_sentences())
    folder, _ = prepare_output(out, force=force, inputs={"text": text}, model=model)
    from attnlens.loaders import load
    from attnlens.report.analyze import analyze as run_analysis
    from attnlens.report.asymmetry_section import AsymmetrySection

    model_obj, tokenizer = load(model, device=device, dtype=dtype, allow_pickle=allow_pickle)
    if texts is None:
        batches, corpus_name = [], "none (--weights-only)"
    else:
        corpus_name = str(text) if text else "built-in sample (50 sentences)"
        batches = text_batches(tokenizer, texts, batch_size=batch_size, max_length=max_length)
    section = AsymmetrySection(weights_only=weights_only, factor=factor)
    with folder.writing() as work:
        (output,) = run_analysis(
            model_obj, tokenizer, batches, work, sections=[section], formats=formats,
            show_progress=not quiet, corpus_name=corpus_name,
        )
    typer.echo(output.summary)
    console.print(f"wrote {len(output.tables)} tables and {len(output.figures)} figures "
                  f"to {out}/ (open {out / 'index.html'})")


def register(app: typer.Typer) -> None:
    app.command("asymmetry")(asymmetry)
