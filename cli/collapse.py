"""`attnlens collapse`: rank collapse with depth, on random stacks or a pretrained model."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from attnlens.cli import options as opt
from rich.console import Console

console = Console(stderr=True)

ALL_VARIANTS = "san,san+skip,san+mlp,san+ln,full"


def _synthetic_option(name: str, help_text: str, minimum: int | None = 1):
    """An option of the random stacks only: None when not given (to tell it was given)."""
    return typer.Option(None, name, min=minimum, help=f"[--synthetic] {help_text}",
                        show_default=False)


SyntheticOpt = typer.Option(
    False, "--synthetic", help="Random attention stacks instead of a pretrained model."
)
VariantsOpt = typer.Option(ALL_VARIANTS, "--variants", help="Block variants, comma-separated.")
DepthOpt = _synthetic_option("--depth", "Blocks per stack. (default 24)")
SeedsOpt = _synthetic_option("--seeds", "Random stacks per variant. (default 5)")
WidthOpt = _synthetic_option("--width", "Model width. (default 64)")
HeadsOpt = _synthetic_option("--heads", "Heads per layer. (default 4)")
TokensOpt = _synthetic_option("--tokens", "Tokens per random input. (default 32)", 2)
QKGainOpt = _synthetic_option("--qk-gain", "Scale of W_Q and W_K at init. (default 2.0)", None)
PathsOpt = typer.Option(
    None, "--paths", min=1, help="Head paths sampled per path length. (default 32)",
    show_default=False,
)
MaxSentencesOpt = typer.Option(
    None, "--max-sentences", min=1,
    help="Run the variants on at most this many sentences. (default all)", show_default=False,
)


def collapse(
    model: opt.OptionalStr = opt.ModelArg,
    synthetic: bool = SyntheticOpt,
    variants: str = VariantsOpt,
    depth: int | None = DepthOpt,
    seeds: int | None = SeedsOpt,
    width: int | None = WidthOpt,
    heads: int | None = HeadsOpt,
    tokens: int | None = TokensOpt,
    qk_gain: float | None = QKGainOpt,
    paths: int | None = PathsOpt,
    max_sentences: int | None = MaxSentencesOpt,
    text: opt.OptionalPath = opt.TextOpt,
    out: Path = opt.OutOpt,
    batch_size: int = opt.BatchSizeOpt,
    max_length: int = opt.MaxLengthOpt,
    device: str = opt.DeviceOpt,
    dtype: str = opt.DtypeOpt,
    allow_pickle: bool = opt.AllowPickleOpt,
    fmt: str = opt.FormatOpt,
    quiet: bool = opt.QuietOpt,
    force: bool = opt.ForceOpt,
) -> None:
    """How fast token representations collapse towards rank one with depth (Dong et al. 2021).

    --synthetic: random stacks per variant, residual against depth over seeds, decay fits.

    Otherwise: the variants built on MODEL's weights, measured on a corpus, and head paths.

    Variants: san (pure attention), san+skip, san+mlp, san+ln, full (the unmodified block).
    """
    from attnlens.cli.outputs import prepare_output

    from attnlens.analysis.collapse import parse_variants
    from attnlens.errors import ConfigError

    formats = opt.figure_formats(fmt)
    chosen = parse_variants(variants)
    synthetic_opts = {"--depth": depth, "--seeds": seeds, "--width": width, "--heads": heads,
                      "--tokens": tokens, "--qk-gain": qk_gain}
    start = time.perf_counter()
    if synthetic:
        if model is not None or text is not None or paths is not None or max_sentences:
            raise ConfigError(
                "--synthetic builds random stacks; drop MODEL, --text, --paths and "
                "--max-sentences."
            )
        from attnlens.analysis.synthetic import SyntheticSpec, run_synthetic
        from attnlens.device import resolve_device
        from attnlens.report.collapse_section import write_synthetic_collapse

        given = {k.lstrip("-").replace("-", "_"): v for k, v in synthetic_opts.items()
                 if v is not None}
        spec = SyntheticSpec(**given)
        folder, _ = prepare_output(out, force=force, model=False)
        tables = run_synthetic(spec, chosen, device=resolve_device(device),
                               show_progress=not quiet)
        with folder.writing() as work:
            output = write_synthetic_collapse(tables, work, formats)
    else:
        used = [name for name, value in synthetic_opts.items() if value is not None]
        if used:
            raise ConfigError(
                f"{', '.join(used)} only apply to --synthetic stacks; a pretrained model's "
                "depth and widths are its own."
            )
        from attnlens.analysis.collapse import VariantCollapse, collapse_dtype
        from attnlens.analysis.paths import PathCollapse
        from attnlens.analysis.runner import run_analyzers
        from attnlens.data.text import read_text_file, sample_sentences, text_batches
        from attnlens.loaders import load
        from attnlens.report.collapse_section import write_pretrained_collapse

        texts = read_text_file(text) if text else sample_sentences()
        folder, _ = prepare_output(out, force=force, inputs={"text": text}, model=model)
        model_obj, tokenizer = load(model, device=device, dtype=dtype, allow_pickle=allow_pickle)
        batches = text_batches(tokenizer, texts, batch_size=batch_size, max_length=max_length)
        analyzers = [
            VariantCollapse(model_obj, chosen, dtype=collapse_dtype(model_obj),
                            max_sentences=max_sentences),
            PathCollapse.for_model(model_obj, n_paths=32 if paths is None else paths),
        ]
        run_analyzers(model_obj, batches, analyzers, total=len(texts), show_progress=not quiet,
                      description="collapse")
        with folder.writing() as work:
            output = write_pretrained_collapse(*analyzers, work, formats)
    console.print(output.summary)
    console.print(f"wrote {len(output.tables)} tables and {len(output.figures)} figures to "
                  f"{out}/ in {time.perf_counter() - start:.1f} s")


def register(app: typer.Typer) -> None:
    app.command("collapse")(collapse)
