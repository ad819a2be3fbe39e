"""`attnlens collapse`: rank collapse with depth, on random stacks or a pretrained model."""

from __future__ import annotations

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
    Model,
    Out,
    Parse,
    QueryBlock,
    Quiet,
    Text,
    Treebank,
    WholeMatrixLimit,
)
from attnlens.cli.runner import CommandRun, command

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


def _synthetic(run: CommandRun, variants: list[str], given: dict[str, float]) -> None:
    """Random stacks per variant: residual against depth over seeds, decay fits."""
    from attnlens.errors import ConfigError

    if run.model.name is not None or run.corpus.given:
        raise ConfigError("--synthetic builds random stacks; drop MODEL, --text, --treebank, "
                          "--paths and --max-sentences.")
    from attnlens.device import resolve_device
    from attnlens.measures.collapse.section import write_synthetic_collapse
    from attnlens.measures.collapse.synthetic import SyntheticSpec, run_synthetic

    spec = SyntheticSpec(**given)
    tables = run_synthetic(spec, variants, device=resolve_device(run.model.device),
                           show_progress=run.show_progress)
    with run.writing() as work:
        output = write_synthetic_collapse(tables, work, run.output.formats)
    typer.echo(output.summary)
    run.note(f"wrote {len(output.tables)} tables and {len(output.figures)} figures to "
             f"{run.output.folder}/")


def collapse(
    run: CommandRun,
    model: Model = None,
    synthetic: bool = SyntheticOpt,
    variants: str = VariantsOpt,
    depth: int | None = DepthOpt,
    seeds: int | None = SeedsOpt,
    width: int | None = WidthOpt,
    heads: int | None = HeadsOpt,
    tokens: int | None = TokensOpt,
    qk_gain: float | None = QKGainOpt,
    paths: int | None = PathsOpt,
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
    quiet: Quiet = False,
) -> None:
    """How fast token representations collapse towards rank one with depth (Dong et al. 2021).

    --synthetic: random stacks per variant, residual against depth over seeds, decay fits.

    Otherwise: the variants built on MODEL's weights, measured on a corpus, and head paths.

    Variants: san (pure attention), san+skip, san+mlp, san+ln, full (the unmodified block).
    """
    from attnlens.errors import ConfigError
    from attnlens.measures.collapse.variants import parse_variants

    chosen = parse_variants(variants)
    synthetic_opts = {"depth": depth, "seeds": seeds, "width": width, "heads": heads,
                      "tokens": tokens, "qk_gain": qk_gain}
    given = {k: v for k, v in synthetic_opts.items() if v is not None}
    if synthetic:
        if paths is not None or run.corpus.max_sentences is not None:
            raise ConfigError("--synthetic builds random stacks; drop MODEL, --text, "
                              "--treebank, --paths and --max-sentences.")
        return _synthetic(run, chosen, given)
    if given:
        used = ", ".join("--" + k.replace("_", "-") for k in given)
        raise ConfigError(f"{used} only apply to --synthetic stacks; a pretrained model's "
                          "depth and widths are its own.")
    from attnlens.measures.collapse.section import CollapseSection

    section = CollapseSection(variants=chosen, n_paths=32 if paths is None else paths,
                              per_batch=None, max_sentences=None, path_sentences=None)
    run.write_report([section])


def register(app: typer.Typer) -> None:
    command(app, "collapse")(collapse)
