"""`attnlens view`: one text's attention as a self-contained interactive HTML page."""

from __future__ import annotations

from pathlib import Path

import typer
from attnlens.cli.options import AllowPickle, Backend, Device, Dtype, Quiet
from attnlens.cli.runner import CommandRun, command

FirstArg = typer.Argument(None, metavar="[MODEL] TEXT", show_default=False,
                          help="The text to look at (- reads standard input); with two "
                          "arguments, MODEL then TEXT. With --file: only [MODEL].")
SecondArg = typer.Argument(None, hidden=True, show_default=False)
INPUT, PAGE = "Input", "Page"
FileOpt = typer.Option(None, "--file", show_default=False, rich_help_panel=INPUT,
                       help="Read the text from this UTF-8 file (- : standard input) instead "
                       "of TEXT.")
OutOpt = typer.Option(Path("attention.html"), "--out", "-o", help="Output HTML file.",
                      rich_help_panel="Output")
ForceOpt = typer.Option(False, "--force", rich_help_panel="Output",
                        help="Replace a non-empty --out file (the new page is written beside "
                        "it, then renamed over it).")
PairOpt = typer.Option(None, "--pair", help="A second text, encoded as a sentence pair.",
                       show_default=False, rich_help_panel=INPUT)
LengthOpt = typer.Option(None, "--max-length", min=2, show_default=False,
                         rich_help_panel=INPUT,
                         help="Truncate the input to this many tokens. Default: the length "
                         "the model was trained on, from its checkpoint files (MiniLM: 256; "
                         "512 if they state none).")
GenerateOpt = typer.Option(None, "--generate", min=1, show_default=False, rich_help_panel=INPUT,
                           help="Causal LMs: append N greedily generated tokens and show the "
                           "attention of prompt and continuation.")
LayerOpt = typer.Option(None, "--layer", min=0, show_default=False, rich_help_panel=PAGE,
                        help="Layer shown first (default 0).")
HeadsOpt = typer.Option(None, "--heads", help="Heads shown first, e.g. 0,3,7 or L2H8 "
                        "(default: all).", show_default=False, rich_help_panel=PAGE)
ViewOpt = typer.Option("head", "--view", rich_help_panel=PAGE,
                       help="View shown first: head, text, model or matrix.")
ReportOpt = typer.Option(None, "--report", show_default=False, rich_help_panel=PAGE,
                         help="Report folder of `attnlens analyze` or `heads`: show its "
                         "heads' role badges (from its head_roles table).")
RolloutOpt = typer.Option(True, "--rollout/--no-rollout", rich_help_panel=PAGE,
                          help="Add attention rollout as an overlay (inputs up to 1,024 "
                          "tokens).")
BudgetOpt = typer.Option(12.0, "--budget-mb", min=0.5, rich_help_panel=PAGE,
                         help="Size budget of the stored "
                         "weights (the page is about 4/3 of it): long inputs keep each "
                         "query's largest weights within it.")


def view(
    run: CommandRun,
    first: str | None = FirstArg,
    second: str | None = SecondArg,
    file: str | None = FileOpt,
    out_file: Path = OutOpt,
    overwrite: bool = ForceOpt,  # not `force`: the runner takes that name for --out folders
    pair: str | None = PairOpt,
    text_tokens: int | None = LengthOpt,
    generate: int | None = GenerateOpt,
    layer: int | None = LayerOpt,
    heads: str | None = HeadsOpt,
    start_view: str = ViewOpt,
    report: Path | None = ReportOpt,
    rollout: bool = RolloutOpt,
    budget_mb: float = BudgetOpt,
    device: Device = "cpu",
    dtype: Dtype = "float32",
    allow_pickle: AllowPickle = False,
    backend: Backend = "auto",
    quiet: Quiet = False,
) -> None:
    """Write an interactive attention viewer for TEXT (head, text, model, matrix).

    Opens from file:// with no network; any view can be saved as PNG.
    The page's address selects what it shows: view.html#layer=2&head=8&view=text.
    Layers and heads are numbered from 0. Without MODEL: all-MiniLM-L6-v2.
    """
    from attnlens.errors import ConfigError
    from attnlens.viewer import inputs

    chosen, layer = inputs.check_options(start_view, heads, layer, generate, pair, out_file,
                                         overwrite)
    roles = None
    if report is not None:
        from attnlens.viewer.roles import read_head_roles

        roles = read_head_roles(report)
    run.model.name, text = inputs.model_and_text(first, second, file)
    if not text.strip():
        raise ConfigError("the text is empty; give the text to look at.")
    run.model.check()
    inputs.check_not_in_model(out_file, run.model.name)
    if generate is not None:
        from attnlens.loaders.checkpoint import resolve_checkpoint
        from attnlens.viewer.generate import check_generation_checkpoint

        check_generation_checkpoint(resolve_checkpoint(run.model.name))
    from attnlens.viewer.api import view_page

    loaded, tokenizer = run.load_model()
    page, added = view_page(loaded, tokenizer, text, pair=pair, max_length=text_tokens,
                            rollout=rollout, generate=generate, roles=roles,
                            budget_bytes=int(budget_mb * 1e6), layer=layer or 0, heads=chosen,
                            start_view=start_view, allow_pickle=run.model.allow_pickle)
    page.save(out_file)
    for warning in page.data.warnings:  # plain echo: rich would read "[n, n]" as markup
        typer.echo(f"Warning: {warning}", err=True)
    extra = " with a rollout overlay" if added else ""
    run.note(f"wrote {out_file} ({out_file.stat().st_size / 1e6:.1f} MB, {page.data.n} tokens"
             f"{extra}); open it in a browser")


def register(app: typer.Typer) -> None:
    command(app, "view", usage="[MODEL] TEXT")(view)
